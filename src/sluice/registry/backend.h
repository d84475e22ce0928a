// Where the registry is kept durably: an SQLite file for the embedded store (sqlite_backend.h), or
// Redis, shared by every instance (store/redis/redis_registry.h). A backend loads the Index at
// start, performs each admin write atomically and durably before reporting it, applies it to the
// Index, and (for a shared backend) keeps the Index in step with writes made by other instances.
#ifndef SLUICE_REGISTRY_BACKEND_H_
#define SLUICE_REGISTRY_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sluice/registry/index.h"
#include "sluice/registry/model.h"

namespace sluice::registry {

using ChangeCallback = absl::AnyInvocable<void(absl::StatusOr<ChangeResult>) &&>;

// A page of a subject's credit ledger, newest first.
struct CreditPage {
  std::vector<CreditGrant> grants;
  int64_t next_before = 0;  // the `before` of the next page; 0 when this is the last
};
using CreditPageCallback = absl::AnyInvocable<void(absl::StatusOr<CreditPage>) &&>;

class Backend {
 public:
  virtual ~Backend() = default;

  // Fills `index` with everything the durable registry holds, then keeps it up to date (a shared
  // backend starts following other instances' changes). Called once, before any Apply.
  virtual absl::Status Start(Index* index) = 0;

  // Performs `change`. `done` runs exactly once, on any thread, after the change is durable and
  // applied to the index (so a read right after sees it), or with the error and nothing changed:
  //   NotFound            kDeleteSubject/kRevokeKey of something absent; kAddKey or kGrantCredits
  //                       to an absent subject
  //   AlreadyExists       kAddKey with a digest some key already has
  //   ResourceExhausted   kAddKey to a subject that has kMaxKeysPerSubject keys
  //   FailedPrecondition  kAddKey or kGrantCredits reusing an idempotency key with another
  //                       fingerprint
  //   OutOfRange          kGrantCredits that would take the credits past kMaxCredits, or the
  //                       ledger past kMaxCreditGrants entries
  //   Unavailable         the durable registry could not be written (nothing was changed)
  // Changes are performed in the order they are applied; `done` never runs inside Apply.
  virtual void Apply(Change change, ChangeCallback done) = 0;

  // The grants of `subject` with seq < `before` (0: from the newest), newest first, at most
  // `limit` of them; NotFound if there is no such subject, Unavailable if the durable registry
  // could not be read. `done` runs exactly once, on any thread, never inside the call (except
  // with Unavailable when the backend cannot take the read: stopped, or its queue full).
  virtual void ReadCredits(std::string subject, int64_t before, size_t limit,
                           CreditPageCallback done) = 0;

  // Stops following other instances and finishes pending writes. Idempotent.
  virtual void Stop() = 0;
};

}  // namespace sluice::registry

#endif  // SLUICE_REGISTRY_BACKEND_H_
