#include "sluice/registry/keys.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sluice/common/digest.h"
#include "sluice/common/hex.h"

namespace sluice::registry {
namespace {

constexpr char kBase32[] = "abcdefghijklmnopqrstuvwxyz234567";  // RFC 4648, lowercase

// RAND_bytes draws from OpenSSL's DRBG, seeded and reseeded from the OS (getrandom).
absl::Status RandomBytes(uint8_t* out, size_t n) {
  if (RAND_bytes(out, static_cast<int>(n)) != 1) {
    return absl::InternalError("the OS random source failed (RAND_bytes)");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<GeneratedKey> GenerateKey() {
  static_assert(kKeyRandomBytes % 5 == 0, "base32 without padding needs whole 5-byte groups");
  std::array<uint8_t, kKeyRandomBytes> random{};
  if (absl::Status s = RandomBytes(random.data(), random.size()); !s.ok()) return s;
  GeneratedKey key;
  key.plaintext.reserve(kKeyPrefix.size() + kKeyRandomBytes * 8 / 5);
  key.plaintext.append(kKeyPrefix);
  for (size_t i = 0; i < random.size(); i += 5) {
    uint64_t group = 0;
    for (size_t j = 0; j < 5; ++j) group = (group << 8) | random[i + j];
    for (int shift = 35; shift >= 0; shift -= 5)
      key.plaintext.push_back(kBase32[(group >> shift) & 31]);
  }
  key.digest = DigestOf(key.plaintext);
  key.prefix = key.plaintext.substr(0, kKeyDisplayPrefixBytes);
  ::OPENSSL_cleanse(random.data(), random.size());
  return key;
}

Digest DigestOf(std::string_view key) {
  // All zeros if OpenSSL fails (only when out of memory), as the one-shot SHA256 left it.
  return Sha256(key).value_or(Digest{});
}

absl::StatusOr<Digest> ParseDigestHex(std::string_view hex) {
  Digest digest{};
  if (!DecodeHex(hex, digest).ok()) {
    return absl::InvalidArgumentError("must be 64 hex digits (a SHA-256)");
  }
  return digest;
}

std::string DigestHex(const Digest& digest) { return EncodeHex(digest); }

absl::StatusOr<uint64_t> NewKeyId() {
  uint64_t id = 0;
  while (id == 0) {  // 0 means "no key"; redrawing keeps the ids uniform over the rest
    uint8_t bytes[8];
    if (absl::Status s = RandomBytes(bytes, sizeof(bytes)); !s.ok()) return s;
    std::memcpy(&id, bytes, sizeof(id));
  }
  return id;
}

std::string RedactKeys(std::string_view text) {
  constexpr size_t kBody = kKeyRandomBytes * 8 / 5;  // 32 base32 characters
  const auto base32 = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '2' && c <= '7'); };
  std::string out;
  size_t from = 0;
  for (size_t at = text.find(kKeyPrefix); at != std::string_view::npos;
       at = text.find(kKeyPrefix, at + 1)) {
    const size_t body = at + kKeyPrefix.size();
    if (at < from || text.size() - body < kBody ||
        !std::all_of(text.begin() + body, text.begin() + body + kBody, base32)) {
      continue;
    }
    out.append(text.substr(from, at + kKeyDisplayPrefixBytes - from));
    out.append("...");
    from = body + kBody;
  }
  if (from == 0) return std::string(text);
  out.append(text.substr(from));
  return out;
}

}  // namespace sluice::registry
