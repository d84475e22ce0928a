#include "sluice/alerts/webhook_signature.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "sluice/common/strings.h"

namespace sluice::alerts {
namespace {

constexpr std::string_view kSecretPrefix = "whsec_";
constexpr std::string_view kVersion = "v1,";

bool IsBase64Char(char c) { return absl::ascii_isalnum(c) || c == '+' || c == '/' || c == '='; }

// The raw 32-byte HMAC-SHA256, or "" if OpenSSL fails (out of memory).
std::string HmacSha256(std::string_view key, std::string_view data) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int mac_len = 0;
  // An empty key is legal for HMAC, but OpenSSL wants a non-null pointer for it.
  static constexpr unsigned char kEmpty = 0;
  const void* key_ptr = key.empty() ? &kEmpty : static_cast<const void*>(key.data());
  if (HMAC(EVP_sha256(), key_ptr, static_cast<int>(key.size()),
           reinterpret_cast<const unsigned char*>(data.data()), data.size(), mac,
           &mac_len) == nullptr) {
    return "";
  }
  return std::string(reinterpret_cast<const char*>(mac), mac_len);
}

}  // namespace

absl::StatusOr<std::string> DecodeWebhookSecret(std::string_view secret) {
  if (absl::StartsWith(ToAbsl(secret), ToAbsl(kSecretPrefix))) {
    secret.remove_prefix(kSecretPrefix.size());
  }
  std::string key;
  // absl::Base64Unescape also skips whitespace and accepts the URL-safe alphabet; the spec's is
  // standard base64 only, so the characters are checked first.
  bool all_base64 = true;
  for (const char c : secret) all_base64 = all_base64 && IsBase64Char(c);
  if (secret.empty() || !all_base64 || !absl::Base64Unescape(ToAbsl(secret), &key) || key.empty()) {
    return absl::InvalidArgumentError(
        "webhook secret must be \"whsec_\" followed by base64 (Standard Webhooks)");
  }
  return key;
}

std::string SignWebhook(std::string_view key, std::string_view id, int64_t timestamp,
                        std::string_view body) {
  const std::string content = absl::StrCat(ToAbsl(id), ".", timestamp, ".", ToAbsl(body));
  return absl::StrCat(ToAbsl(kVersion), absl::Base64Escape(HmacSha256(key, content)));
}

bool VerifyWebhook(std::string_view key, std::string_view id, std::string_view timestamp,
                   std::string_view body, std::string_view signature_header) {
  const std::string content = absl::StrCat(ToAbsl(id), ".", ToAbsl(timestamp), ".", ToAbsl(body));
  const std::string mac = HmacSha256(key, content);
  if (mac.empty()) return false;
  const std::string expected = absl::StrCat(ToAbsl(kVersion), absl::Base64Escape(mac));
  bool match = false;
  for (const absl::string_view entry :
       absl::StrSplit(ToAbsl(signature_header), ' ', absl::SkipEmpty())) {
    // The length is not secret (every v1 signature has the same one); the bytes are.
    if (entry.size() == expected.size() &&
        CRYPTO_memcmp(entry.data(), expected.data(), expected.size()) == 0) {
      match = true;
    }
  }
  return match;
}

}  // namespace sluice::alerts
