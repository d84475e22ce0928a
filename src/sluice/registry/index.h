// The in-memory registry every decision reads: API key digest -> key -> subject, and the subjects
// by id. Lookups never touch the disk or the network; a backend (backend.h) feeds the index from
// the durable registry at start and with every change.
//
// Thread-safe: lookups from any thread while one writer (the backend) applies changes.
// FindByDigest and HasDigest take only a shared lock of one shard (of 16, by digest); the other
// reads share one lock with each other and wait only for writers.
//
// Times are kept to the microsecond (a Key or Subject read back has its times truncated), a key's
// prefix to 8 bytes. Memory: about 190 bytes per subject with one key; a subject whose key
// FindByDigest has found also keeps the Subject it returned (a few hundred bytes more) until
// the subject changes.
#ifndef SLUICE_REGISTRY_INDEX_H_
#define SLUICE_REGISTRY_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/time/time.h"
#include "sluice/registry/model.h"

namespace sluice::registry {

class Index {
 public:
  Index();
  ~Index();
  Index(const Index&) = delete;
  Index& operator=(const Index&) = delete;

  enum class KeyState : uint8_t { kUnknown, kExpired, kValid };
  struct KeyLookup {
    KeyState state = KeyState::kUnknown;
    std::shared_ptr<const Subject> subject;  // set when kValid (the subject may be disabled)
    uint64_t key_id = 0;                     // the key's id (KeyIdText) when kValid or kExpired
  };
  // The subject of the key whose digest is `digest`, as of `now`: kExpired at and after the key's
  // expires_at. The Subject is shared and immutable; a change to the subject makes a new one.
  [[nodiscard]] KeyLookup FindByDigest(const Digest& digest, absl::Time now) const;

  [[nodiscard]] std::shared_ptr<const Subject> FindSubject(std::string_view id) const;
  [[nodiscard]] std::optional<Key> FindKey(uint64_t id) const;
  // The keys of `subject`, by id.
  [[nodiscard]] std::vector<Key> KeysOf(std::string_view subject) const;
  [[nodiscard]] bool HasDigest(const Digest& digest) const;

  struct Page {
    std::vector<std::shared_ptr<const Subject>> subjects;  // ascending by id
    std::string next_cursor;                               // "" when this is the last page
  };
  // Subjects with an id greater than `after` ("" = from the start), only those on `plan` when
  // it is not empty, at most `limit` of them.
  [[nodiscard]] Page List(std::string_view plan, std::string_view after, size_t limit) const;

  // How many subjects are on `plan`; the ids of the first `max` of them (ascending) in `first`.
  size_t CountOnPlan(std::string_view plan, size_t max, std::vector<std::string>* first) const;

  // True once a full load (Replace) has filled the index: before it, an unknown key may be one the
  // durable registry has (a shared backend still loading), so it is not "unknown" yet.
  [[nodiscard]] bool loaded() const;

  [[nodiscard]] size_t subject_count() const;
  [[nodiscard]] size_t key_count() const;

  // Writers. The backend calls them one at a time (they are serialised anyway). They trust their
  // input: the backend has validated it and enforced the bounds of model.h.
  void PutSubject(Subject subject);         // creates, or replaces all but the keys
  void DeleteSubject(std::string_view id);  // and its keys; absent: nothing
  // REQUIRES: its subject is present (else nothing happens). A key with the same id or the same
  // digest is replaced.
  void AddKey(Key key);
  void RevokeKey(uint64_t id);  // absent: nothing
  // Replaces everything (a full load); cheaper than one call per record, and readers wait only
  // for the final swap. Of subjects with equal ids the last counts; keys of absent subjects and
  // keys repeating an earlier key's id or digest are dropped.
  void Replace(std::vector<Subject> subjects, std::vector<Key> keys);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace sluice::registry

#endif  // SLUICE_REGISTRY_INDEX_H_
