#include "sluice/http/key_registry.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "sluice/common/strings.h"
#include "sluice/http/sha256.h"

namespace sluice::http {
namespace {

constexpr size_t kDigestLength = 32;

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The 32 bytes written as 64 hex digits in `hex`, or "" if it is not that.
std::string DecodeSha256Hex(std::string_view hex) {
  if (hex.size() != 2 * kDigestLength) return "";
  std::string bytes(kDigestLength, '\0');
  for (size_t i = 0; i < kDigestLength; ++i) {
    const int high = HexValue(hex[2 * i]);
    const int low = HexValue(hex[2 * i + 1]);
    if (high < 0 || low < 0) return "";
    bytes[i] = static_cast<char>(high * 16 + low);
  }
  return bytes;
}

}  // namespace

absl::StatusOr<KeyRegistry> KeyRegistry::FromConfig(const config::Config& config) {
  KeyRegistry registry;
  // Where each digest was first seen, to name the earlier entry without quoting the key.
  absl::flat_hash_map<std::string, size_t> first_index;
  for (size_t i = 0; i < config.keys.size(); ++i) {
    const config::KeyConfig& key = config.keys[i];
    const std::string where = absl::StrCat("keys[", i, "]");
    if (key.key.empty() == key.key_sha256.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": set exactly one of key and key_sha256"));
    }
    std::string digest;
    if (!key.key.empty()) {
      digest = Sha256(key.key);
      if (digest.empty()) {
        return absl::InternalError(absl::StrCat(where, ": cannot compute SHA-256"));
      }
    } else {
      digest = DecodeSha256Hex(key.key_sha256);
      if (digest.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ".key_sha256: must be 64 hex digits"));
      }
    }
    const auto [it, inserted] = first_index.emplace(digest, i);
    if (!inserted) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": duplicate key (same as keys[", it->second, "])"));
    }
    std::vector<std::string>& of_subject = registry.by_subject_[key.subject];
    if (of_subject.empty()) registry.subjects_.push_back(key.subject);
    of_subject.push_back(digest);
    registry.by_digest_.emplace(
        std::move(digest),
        KeyEntry{
            .subject = key.subject, .plan = key.plan, .email = key.email, .webhook = key.webhook});
  }
  std::sort(registry.subjects_.begin(), registry.subjects_.end());
  return registry;
}

const KeyEntry* KeyRegistry::FindDigest(std::string_view digest) const {
  const auto it = by_digest_.find(ToAbsl(digest));
  return it == by_digest_.end() ? nullptr : &it->second;
}

const KeyEntry* KeyRegistry::FindSubject(std::string_view subject) const {
  const auto it = by_subject_.find(ToAbsl(subject));
  return it == by_subject_.end() ? nullptr : FindDigest(it->second.front());
}

std::vector<std::string> KeyRegistry::DigestsOf(std::string_view subject) const {
  const auto it = by_subject_.find(ToAbsl(subject));
  return it == by_subject_.end() ? std::vector<std::string>() : it->second;
}

const KeyEntry* KeyRegistry::Find(std::string_view api_key) const {
  if (api_key.empty() || api_key.size() > kMaxApiKeyLength) return nullptr;
  const std::string digest = Sha256(api_key);
  if (digest.empty()) return nullptr;
  const auto it = by_digest_.find(digest);
  return it == by_digest_.end() ? nullptr : &it->second;
}

}  // namespace sluice::http
