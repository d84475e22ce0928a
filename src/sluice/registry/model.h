// The registry's records: subjects (who is limited, on which plan, with which overrides, where
// their alerts go) and their API keys (only SHA-256 digests are ever kept), and the changes the
// admin API makes to them. Plain values; validation is in validate.h.
#ifndef SLUICE_REGISTRY_MODEL_H_
#define SLUICE_REGISTRY_MODEL_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/time/time.h"
#include "sluice/common/digest.h"

namespace sluice::registry {

// The raw SHA-256 of an API key.
using Digest = Sha256Digest;

// Bounds on what one subject may hold (every input is bounded).
inline constexpr size_t kMaxMetadataBytes = 4096;  // the metadata object as compact JSON
inline constexpr size_t kMaxOverrides = 16;
inline constexpr size_t kMaxKeysPerSubject = 100;
inline constexpr size_t kMaxKeyNameBytes = 128;
inline constexpr size_t kMaxEmailBytes = 254;
inline constexpr size_t kMaxUrlBytes = 2048;
inline constexpr size_t kMaxSecretBytes = 256;
inline constexpr size_t kMaxIdempotencyKeyBytes = 255;
// Prepaid credits (docs/registry.md, Credits): a subject's granted total never exceeds the
// largest quota (limiter/store.h's kMaxUsed); a grant's reason is bounded, and so is the ledger.
inline constexpr int64_t kMaxCredits = 1'000'000'000'000'000;
inline constexpr size_t kMaxCreditReasonBytes = 256;
inline constexpr int64_t kMaxCreditGrants = 100'000;

// A different quota for one limit of the subject's plan, optionally until an instant.
struct Override {
  std::string limit;                // names a limit of the plan
  int64_t quota = 0;                // 1..kMaxUsed
  std::optional<absl::Time> until;  // none: until cleared; at and after it the plan's quota applies
};

struct Subject {
  std::string id;  // a valid subject (docs/semantics.md)
  std::string plan;
  std::string email;            // "" if none
  std::string webhook;          // "" if none
  std::string webhook_secret;   // "" if none; never rendered
  std::string metadata = "{}";  // a JSON object, compact text, at most kMaxMetadataBytes
  bool disabled = false;
  std::vector<Override> overrides;  // sorted by limit, one per limit
  // Credits granted so far (0..kMaxCredits): added to the quota of every `window: credit` limit
  // of the plan. Only kGrantCredits changes it; kPutSubject keeps it.
  int64_t credits = 0;
  absl::Time created_at;
  absl::Time updated_at;
};

struct Key {
  uint64_t id = 0;  // rendered by KeyIdText
  std::string subject;
  Digest digest{};
  std::string prefix;  // the first 8 characters of the plaintext ("sk_1a2b3"); "" when imported
  std::string name;    // "" if none
  std::optional<absl::Time> expires_at;  // none: never; at and after it the key is refused
  absl::Time created_at;
};

// One entry of a subject's credit ledger.
struct CreditGrant {
  int64_t seq = 0;     // 1, 2, ... per subject, in the order the grants were made
  int64_t amount = 0;  // 1..kMaxCredits
  std::string reason;  // at most kMaxCreditReasonBytes
  std::string actor;   // the name of the admin token that granted it
  absl::Time at;
  int64_t balance = 0;  // the subject's granted total after this grant
};

// "key_" followed by 16 lowercase hex digits.
[[nodiscard]] std::string KeyIdText(uint64_t id);
// The inverse of KeyIdText; nullopt for anything else.
[[nodiscard]] std::optional<uint64_t> ParseKeyId(std::string_view text);

// One admin write. The backend performs it atomically (all of it or none of it) and durably.
struct Change {
  enum class Kind : uint8_t {
    kPutSubject,     // create or replace `subject` (its keys are kept)
    kDeleteSubject,  // delete `subject_id` and revoke every key of it
    kAddKey,         // add `key` to its subject
    kRevokeKey,      // delete the key `key_id`
    // add `grant` (its amount, reason, actor and time; the backend numbers it and sets the
    // balance) to the credits of `subject_id`, unless a grant of that subject with the same
    // idempotency key exists: then nothing is done and that grant is reported (replayed), or,
    // with another fingerprint, it fails (FailedPrecondition). The idempotency key is required
    // and kept with the grant as long as the subject.
    kGrantCredits,
  };
  Kind kind = Kind::kPutSubject;
  Subject subject;         // kPutSubject
  std::string subject_id;  // kDeleteSubject
  Key key;                 // kAddKey
  uint64_t key_id = 0;     // kRevokeKey
  CreditGrant grant;       // kGrantCredits
  // kAddKey only, optional: a retried creation with the same idempotency key and the same
  // fingerprint (a digest of the request) does nothing and reports the key made the first time;
  // with another fingerprint it fails (FailedPrecondition). Records are kept for 24 hours.
  std::string idempotency_key;
  std::string fingerprint;
};

struct ChangeResult {
  bool created = false;  // kPutSubject: the subject did not exist before
  // kAddKey, kGrantCredits: an earlier change with this idempotency key was found
  bool replayed = false;
  uint64_t key_id = 0;  // kAddKey: the key's id (the earlier one when replayed)
  CreditGrant grant;    // kGrantCredits: the grant made (the earlier one when replayed)
};

}  // namespace sluice::registry

#endif  // SLUICE_REGISTRY_MODEL_H_
