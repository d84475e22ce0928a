// The Store interface: where counters live. Every store implements docs/semantics.md identically:
//
//  - a request is admitted iff, for every limit of the plan, used + cost <= quota; if admitted,
//    every counter grows by cost in the same atomic step; a denied request changes no counter;
//  - cost 0 is a peek: it is answered like any request but changes nothing and fires no alert;
//  - a report (DecideMode::kReport) is a cost already spent: it is admitted whatever the counters
//    say and charged to every limit as a shadow limit is (past the quota, capped at kMaxUsed; an
//    unusable counter is left alone), and fires every threshold its charge reaches;
//  - counters and alert flags belong to the subject and the limit — its name and window
//    (Limit::tag, WindowKey) — never to the plan: a subject moved to another plan keeps the usage
//    of every limit whose name and window are the same in both, and the new quotas apply from the
//    next request. A calendar window belongs to its time zone, so a `day` of two plans in
//    different zones is two counters;
//  - threshold p of a limit fires at most once per subject, limit, window and effective quota: at
//    the first admitted request after which used >= ceil(quota * p / 100), and a threshold of 100
//    also at the first request that this limit denies; the event (naming the plan in force) is
//    recorded in the store's outbox in the same atomic step. A quota that changes (another plan, a
//    per-subject override) has thresholds of its own, armed unless they fired under that same
//    quota in this window;
//  - a counter whose window id differs from the request's counts as 0 (its window has ended);
//  - a sliding or gcra limit (limiter/algorithm.h) admits iff its algorithm says the cost fits
//    (holds counting as used), all-or-nothing with the plan's other limits; a sliding limit's
//    count of the previous window is read with the current one; a gcra limit keeps one
//    theoretical arrival time. A charge past the quota (shadow, report, settle) stops at
//    kMaxSlidingCount (sliding) or a quota's worth of debt (gcra). Their thresholds: sliding ones
//    fire on the weighted estimate, per window; a gcra limit has none;
//  - a counter outside [0, kMaxUsed] (crafted or corrupted state: no admission can produce it)
//    is unusable: the limit counts as exhausted, so every request, peeks included, is denied;
//    nothing is written for it and nothing fires for it; it is reported as it is (or as -1);
//  - so `used + cost` never exceeds kMaxUsed + kMaxCost and cannot overflow;
//  - every piece of state expires after the end of its window (plus a grace period).
//
// Window ids and bounds are computed by the caller (the Limiter, from one Clock) and passed in, so
// stores never read a clock for decisions.
#ifndef SLUICE_LIMITER_STORE_H_
#define SLUICE_LIMITER_STORE_H_

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "sluice/limiter/plan.h"
#include "sluice/limiter/window.h"

namespace sluice {
inline namespace limiter {

// The largest quota the configuration accepts (config.cc's kMaxQuota), hence the largest value
// a counter can reach: an admission keeps used <= quota for enforced limits, and a shadow limit's
// counter stops at kMaxUsed. Doubles represent every integer up to
// kMaxUsed + 1,000,000 exactly (decide.lua relies on it).
inline constexpr int64_t kMaxUsed = 1'000'000'000'000'000;

// True when `used` is a counter some admission could have produced.
[[nodiscard]] constexpr bool UsableCounter(int64_t used) { return used >= 0 && used <= kMaxUsed; }

// The most costly request, and the most parts of a group decision (Store::DecideGroup).
inline constexpr int64_t kMaxCost = 1'000'000;
inline constexpr size_t kMaxGroupParts = 64;

// How a request is decided. kAdmit: admitted iff it fits (above). kReport: the cost was already
// spent (e.g. tokens counted when a response ended), so it is never denied and is charged to every
// limit even past its quota, as if every limit were shadow; the overshoot is in the counters, so
// the next admission is denied until the window ends.
enum class DecideMode : uint8_t { kAdmit, kReport };

struct StoreRequest {
  std::string_view subject;  // valid per docs/semantics.md
  // Where the subject's state lives: empty for the subject itself; for a subject decided in
  // groups, the group (the Redis store computes the keys' hash tag from it instead of the subject,
  // so every key of a group shares one). Usage, Reset and single decisions of a group-placed
  // subject pass the same group to find the same state. The memory store ignores it.
  std::string_view group;
  const Plan* plan = nullptr;  // the subject's effective plan; read only during the call
  int64_t cost = 1;            // 0..1,000,000
  DecideMode mode = DecideMode::kAdmit;
  absl::Time now;                          // for alert timestamps and expiry
  absl::Span<const WindowBounds> windows;  // one per plan->limits, same order
};

struct StoreResult {
  bool allowed = false;
  // Per limit, in plan order: the counter after this request (after the increment if admitted,
  // the unchanged value if denied). A value outside [0, kMaxUsed] is an unusable counter (and the
  // request was denied). A concurrent limit has no counter: 0. A sliding limit: the count of the
  // request's window (`prev` has the previous window's); a gcra limit: its debt in microseconds
  // at `now` (limiter/algorithm.h).
  absl::InlinedVector<int64_t, 4> used;
  // Per limit, in plan order: a sliding limit's count of the window before the request's (0 for
  // the others). Empty when the plan has no sliding limit.
  absl::InlinedVector<int64_t, 4> prev;
  // Per limit, in plan order: what open reservations hold of it after this request (for a
  // concurrent limit, the slots taken). Empty when nothing is held on any limit.
  absl::InlinedVector<int64_t, 4> held;

  [[nodiscard]] int64_t held_at(size_t i) const { return i < held.size() ? held[i] : 0; }
  [[nodiscard]] int64_t prev_at(size_t i) const { return i < prev.size() ? prev[i] : 0; }
};

struct LimitUsage {
  int64_t used = 0;        // as StoreResult::used
  int64_t prev = 0;        // as StoreResult::prev
  int64_t held = 0;        // held by open reservations (a concurrent limit: slots taken)
  std::vector<int> fired;  // percents of the thresholds already fired in this window, ascending
};

// Why a store call failed, for the degraded-decision metrics (sluice_store_errors_total{reason}).
// A store tags the Status it returns with WithStoreFailure(); untagged errors count as kOther.
enum class StoreFailure : uint8_t {
  kOther,
  kTimeout,      // no answer within the store's timeout
  kConnection,   // not connected, or the connection was lost before the answer
  kCircuitOpen,  // the circuit breaker is open: the store was not asked
  kOverloaded,   // too many requests already waiting on the store
  kLate,         // the answer came after the caller had stopped waiting; nothing was changed
  kBusy,         // Redis BUSY (a script or module runs too long)
  kOutOfMemory,  // Redis OOM (maxmemory reached)
  kLoading,      // Redis LOADING (restarting, dataset not loaded yet)
  kReadOnly,     // Redis READONLY / MASTERDOWN (a replica, or a failover in progress)
};
inline constexpr int kStoreFailureKinds = 10;

// "other", "timeout", "connection", "circuit_open", "overloaded", "late", "busy", "oom",
// "loading", "readonly".
[[nodiscard]] std::string_view StoreFailureName(StoreFailure f);
// `status` (not OK) tagged with `kind`.
[[nodiscard]] absl::Status WithStoreFailure(absl::Status status, StoreFailure kind);
// The kind a store tagged `status` with; kOther when untagged.
[[nodiscard]] StoreFailure StoreFailureOf(const absl::Status& status);

// One group decision: parts with distinct subjects, each with its plan, cost (0..kMaxCost) and
// windows (StoreRequest as for Decide; the `now` of all parts is the same, and each part's `group`
// equals `group`). `group` picks where the parts live (StoreRequest::group); the memory store
// ignores it.
struct StoreGroupRequest {
  std::string_view group;
  absl::Span<const StoreRequest> parts;  // 1..kMaxGroupParts
};

struct StoreGroupResult {
  // True iff every limit of every part fits (docs/semantics.md, Groups).
  bool allowed = false;
  absl::InlinedVector<StoreResult, 4> parts;  // same order; each part's `allowed` == the group's
};

// Reservations (docs/semantics.md, Reservations and Concurrency). A reservation holds amounts of
// the limits of its subject's plan until it ends: every counting limit an estimate, every
// concurrent limit one slot. While held, they count against admission: a limit admits iff
// used + held + cost <= quota (a concurrent limit: held + 1 <= quota, for any request of cost
// >= 1, and only reservations take a slot). A reservation ends exactly once — settled (its holds
// released and a real cost charged to the counting limits, in full even past their quotas),
// released (nothing charged) or expired (at its expires_at, charged its estimate or released by
// its plan's on_reservation_expiry) — and is then remembered, for answering a repeated settle the
// same, until kReservationMemory after its expires_at.
inline constexpr absl::Duration kReservationMemory = absl::Minutes(10);

struct StoreReserveRequest {
  // The decision: subject, plan, windows and `cost`, charged now like an admission (an
  // /v1/authorize that also takes a lease); 0 for a reservation that charges only when settled.
  StoreRequest decide;
  int64_t hold = 0;              // held on every counting limit: the estimate (0..kMaxCost)
  std::string_view id;           // the reservation's id, unique (the caller draws it at random)
  absl::Time expires_at;         // after decide.now
  bool charge_on_expiry = true;  // the plan's on_reservation_expiry
};

// How a reservation ends.
enum class ReservationEnd : uint8_t {
  kSettle,   // charge `cost`
  kRelease,  // charge nothing
  kExpire,   // only when open and due (expires_at <= now): charge the estimate or release it
};

struct StoreSettleRequest {
  // The subject (the reservation's), its plan now, the windows now, and for kSettle the real cost
  // (0..kMaxCost), charged to every counting limit of this plan.
  StoreRequest decide;
  std::string_view id;
  ReservationEnd end = ReservationEnd::kSettle;
};

struct StoreSettleResult {
  enum class Outcome : uint8_t {
    kEnded,     // ended now
    kRepeated,  // a settle with the cost it was settled with before: nothing changed
    kConflict,  // already settled with another cost, released or expired: nothing changed
    kNotFound,  // no such reservation of this subject (never made, or forgotten)
    kNotDue,    // kExpire of a reservation not due (extended) or no longer open
  };
  Outcome outcome = Outcome::kNotFound;
  // The counters after this call (every outcome but kNotFound reads them).
  StoreResult result;
  // Per limit of the request's plan: what this call charged beyond the quota (0 when nothing).
  absl::InlinedVector<int64_t, 4> overshoot;
  int64_t charged = 0;  // what was charged (now, or when it first ended)
  ReservationEnd ended_by = ReservationEnd::kSettle;  // kRepeated/kConflict: how it had ended
};

struct StoreExtendResult {
  enum class Outcome : uint8_t { kExtended, kNotFound, kEnded };
  Outcome outcome = Outcome::kNotFound;
  absl::Time expires_at;  // kExtended: the new expiry
};

// An open reservation whose expires_at has passed (Store::DueReservations).
struct DueReservation {
  std::string id;
  std::string subject;
  std::string plan;  // the plan it was made under
};

using DecideCallback = absl::AnyInvocable<void(absl::StatusOr<StoreResult>) &&>;
using SettleCallback = absl::AnyInvocable<void(absl::StatusOr<StoreSettleResult>) &&>;
using ExtendCallback = absl::AnyInvocable<void(absl::StatusOr<StoreExtendResult>) &&>;
using DueCallback = absl::AnyInvocable<void(absl::StatusOr<std::vector<DueReservation>>) &&>;
using GroupDecideCallback = absl::AnyInvocable<void(absl::StatusOr<StoreGroupResult>) &&>;
using UsageCallback = absl::AnyInvocable<void(absl::StatusOr<std::vector<LimitUsage>>) &&>;
using StatusCallback = absl::AnyInvocable<void(absl::Status) &&>;

// Thread-safe. Callbacks run exactly once, either before the call returns (in-process stores) or
// later on the thread that made the call (stores that do I/O). A store reads the request and what
// it points to only during the call, so callers need not keep it alive for the callback.
class Store {
 public:
  virtual ~Store() = default;

  // Counts (or peeks, for cost 0) one request atomically.
  virtual void Decide(const StoreRequest& req, DecideCallback done) = 0;

  // Decides every part of `req` all-or-nothing in one atomic step: admitted iff every limit of
  // every part fits; if admitted every part's counters grow by that part's cost (a part of cost 0
  // is a peek of that part: it changes nothing and fires nothing); a denied group changes no
  // counter, and fires only the 100% thresholds of the limits that themselves denied. Callback
  // semantics as Decide. REQUIRES: the parts' subjects are distinct, 1..kMaxGroupParts parts.
  // The default answers Unimplemented.
  virtual void DecideGroup(const StoreGroupRequest& req, GroupDecideCallback done);

  // The same as Decide for a store that answers in-process: the answer at once, with no callback
  // to allocate (the limiter's fast path). nullopt (the default): nothing was done, call Decide.
  virtual std::optional<absl::StatusOr<StoreResult>> DecideNow(const StoreRequest& req) {
    (void)req;
    return std::nullopt;
  }

  // How many times this store has (or may have) lowered a counter inside its window other than
  // by Reset — RedisStore: refunds of admissions answered too late. Grows only. A denial learnt
  // before such a change may no longer hold (the over-limit cache checks it). Thread-safe; cheap.
  [[nodiscard]] virtual uint64_t shrinks() const { return 0; }

  // The current counters of req.subject for req.plan's limits, and the thresholds fired under
  // their current quotas; consumes nothing.
  virtual void Usage(const StoreRequest& req, UsageCallback done) = 0;

  // Clears the counters and alert flags (under every quota) of one limit of req.plan (by index), or
  // of every limit of the plan; the subject's counters of limits the plan does not have are kept.
  virtual void Reset(const StoreRequest& req, std::optional<size_t> limit_index,
                     StatusCallback done) = 0;

  // Reservations (see kReservationMemory above). Each is one atomic step. The defaults answer
  // Unimplemented: a store without reservations.
  //
  // Decides req.decide with req.hold held besides its cost; if admitted, charges the cost (as
  // Decide), holds the estimate and the slots, and records the reservation. The result's `held`
  // is after it. AlreadyExists when the id is taken.
  virtual void Reserve(const StoreReserveRequest& req, DecideCallback done);
  // Ends reservation `req.id` of subject req.decide.subject as req.end says (a settle charges
  // req.decide.cost; alerts fire on what is charged, as for an admission; never denied).
  virtual void Settle(const StoreSettleRequest& req, SettleCallback done);
  // Moves an open reservation's expiry to `expires_at` (later or earlier; after `now`).
  virtual void Extend(std::string_view subject, std::string_view id, absl::Time expires_at,
                      absl::Time now, ExtendCallback done);
  // Up to `max` open reservations due at `now` (expires_at <= now), for whoever ends them
  // (Settle with kExpire, which decides again whether each is still due).
  virtual void DueReservations(absl::Time now, size_t max, DueCallback done);
};

}  // namespace limiter
}  // namespace sluice

#endif  // SLUICE_LIMITER_STORE_H_
