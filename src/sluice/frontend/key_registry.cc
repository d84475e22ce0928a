#include "sluice/frontend/key_registry.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "sluice/common/digest.h"
#include "sluice/common/strings.h"

namespace sluice::frontend {
namespace {

constexpr size_t kDigestLength = 32;

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The 32 bytes written as 64 hex digits in `hex`, or nothing if it is not that.
std::optional<Sha256Digest> DecodeSha256Hex(std::string_view hex) {
  if (hex.size() != 2 * kDigestLength) return std::nullopt;
  Sha256Digest bytes{};
  for (size_t i = 0; i < kDigestLength; ++i) {
    const int high = HexValue(hex[2 * i]);
    const int low = HexValue(hex[2 * i + 1]);
    if (high < 0 || low < 0) return std::nullopt;
    bytes[i] = static_cast<uint8_t>(high * 16 + low);
  }
  return bytes;
}

// The digest `key` stands for; an error's message is what follows "keys[i]".
absl::StatusOr<Sha256Digest> DigestOf(const config::KeyConfig& key) {
  if (!key.key.empty()) {
    const std::optional<Sha256Digest> digest = Sha256(key.key);
    if (!digest) return absl::InternalError(": cannot compute SHA-256");
    return *digest;
  }
  const std::optional<Sha256Digest> digest = DecodeSha256Hex(key.key_sha256);
  if (!digest) return absl::InvalidArgumentError(".key_sha256: must be 64 hex digits");
  return *digest;
}

// The index of the first entry of `config.keys` that stands for `digest`. Only an error needs it,
// so it is searched for instead of every entry's index being kept.
size_t FirstWithDigest(const config::Config& config, const Sha256Digest& digest) {
  for (size_t i = 0; i < config.keys.size(); ++i) {
    const absl::StatusOr<Sha256Digest> other = DigestOf(config.keys[i]);
    if (other.ok() && *other == digest) return i;
  }
  return config.keys.size();  // not reached: the caller found `digest` among the entries
}

}  // namespace

absl::StatusOr<KeyRegistry> KeyRegistry::FromConfig(const config::Config& config) {
  KeyRegistry registry;
  registry.by_digest_.reserve(config.keys.size());
  registry.by_subject_.reserve(config.keys.size());
  for (size_t i = 0; i < config.keys.size(); ++i) {
    const config::KeyConfig& key = config.keys[i];
    const auto where = [i] { return absl::StrCat("keys[", i, "]"); };
    if (key.key.empty() == key.key_sha256.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), ": set exactly one of key and key_sha256"));
    }
    absl::StatusOr<Sha256Digest> digest = DigestOf(key);
    if (!digest.ok()) {
      return absl::Status(digest.status().code(), absl::StrCat(where(), digest.status().message()));
    }
    const bool inserted = registry.by_digest_
                              .try_emplace(*digest, KeyEntry{.subject = key.subject,
                                                             .plan = key.plan,
                                                             .email = key.email,
                                                             .webhook = key.webhook})
                              .second;
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat(where(), ": duplicate key (same as keys[",
                                                     FirstWithDigest(config, *digest), "])"));
    }
    std::vector<Sha256Digest>& of_subject = registry.by_subject_[key.subject];
    if (of_subject.empty()) registry.subjects_.push_back(key.subject);
    of_subject.push_back(*digest);
  }
  std::sort(registry.subjects_.begin(), registry.subjects_.end());
  return registry;
}

const KeyEntry* KeyRegistry::FindDigest(const Sha256Digest& digest) const {
  const auto it = by_digest_.find(digest);
  return it == by_digest_.end() ? nullptr : &it->second;
}

const KeyEntry* KeyRegistry::FindSubject(std::string_view subject) const {
  const auto it = by_subject_.find(ToAbsl(subject));
  return it == by_subject_.end() ? nullptr : FindDigest(it->second.front());
}

std::vector<Sha256Digest> KeyRegistry::DigestsOf(std::string_view subject) const {
  const auto it = by_subject_.find(ToAbsl(subject));
  return it == by_subject_.end() ? std::vector<Sha256Digest>() : it->second;
}

const KeyEntry* KeyRegistry::Find(std::string_view api_key) const {
  if (api_key.empty() || api_key.size() > kMaxApiKeyLength) return nullptr;
  const std::optional<Sha256Digest> digest = Sha256(api_key);
  if (!digest) return nullptr;
  return FindDigest(*digest);
}

}  // namespace sluice::frontend
