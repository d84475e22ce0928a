// The static API keys of sluice.yaml (`keys:`), resolved to the subject and plan they stand for.
//
// Only SHA-256 digests of keys are kept: a plaintext `key` is hashed when the registry is built and
// then forgotten, a `key_sha256` is decoded. A presented key is hashed and its digest looked up, so
// the lookup reveals nothing useful through timing (finding a digest's neighbours in a hash table
// says nothing about the key). Keys never appear in messages or logs.
#ifndef SLUICE_FRONTEND_KEY_REGISTRY_H_
#define SLUICE_FRONTEND_KEY_REGISTRY_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "sluice/common/digest.h"
#include "sluice/config/config.h"

namespace sluice::frontend {

// Longest API key Find looks up; longer keys are unknown without being hashed.
inline constexpr size_t kMaxApiKeyLength = 512;

// What a key stands for.
struct KeyEntry {
  std::string subject;
  std::string plan;
  std::string email;    // "" if none: where this subject's alerts go
  std::string webhook;  // "" if none: this subject's own webhook URL
};

// Immutable once built, so safe to share between threads; a reload builds a new one.
class KeyRegistry {
 public:
  // Builds the registry from `config.keys`. Errors are InvalidArgument naming the entry, e.g.
  // "keys[2]: duplicate key (same as keys[0])" when a plaintext key in one entry and the SHA-256 of
  // the same key in another (which config validation cannot see) resolve to one digest.
  [[nodiscard]] static absl::StatusOr<KeyRegistry> FromConfig(const config::Config& config);

  // The entry for `api_key`, or nullptr if it is unknown, empty or longer than kMaxApiKeyLength.
  // The pointer is valid while this registry lives.
  [[nodiscard]] const KeyEntry* Find(std::string_view api_key) const;

  // The same for a key already hashed: `digest` is its SHA-256.
  [[nodiscard]] const KeyEntry* FindDigest(const Sha256Digest& digest) const;

  // The first entry (in file order) whose subject is `subject`, or nullptr: config subjects are
  // read-only through the registry API.
  [[nodiscard]] const KeyEntry* FindSubject(std::string_view subject) const;
  // The digests of the keys of `subject`, in file order.
  [[nodiscard]] std::vector<Sha256Digest> DigestsOf(std::string_view subject) const;
  // Every subject with a key in the file, ascending.
  [[nodiscard]] const std::vector<std::string>& subjects() const { return subjects_; }

  [[nodiscard]] size_t size() const { return by_digest_.size(); }

 private:
  // SHA-256 of the key -> entry.
  absl::flat_hash_map<Sha256Digest, KeyEntry> by_digest_;
  // Subject -> the digests of its keys, in file order.
  absl::flat_hash_map<std::string, std::vector<Sha256Digest>> by_subject_;
  std::vector<std::string> subjects_;  // the keys of by_subject_, ascending
};

}  // namespace sluice::frontend

#endif  // SLUICE_FRONTEND_KEY_REGISTRY_H_
