// The Limiter turns (subject, plan, cost) into a Decision: it validates the request, computes every
// window from its Clock, asks the Store (unless the over-limit cache already knows the answer), and
// applies on_store_error when the store fails.
#ifndef SLUICE_LIMITER_LIMITER_H_
#define SLUICE_LIMITER_LIMITER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "sluice/common/clock.h"
#include "sluice/config/vocabulary.h"
#include "sluice/limiter/decision.h"
#include "sluice/limiter/degraded_ledger.h"
#include "sluice/limiter/overlimit_cache.h"
#include "sluice/limiter/plan.h"
#include "sluice/limiter/store.h"

namespace sluice {
inline namespace limiter {

struct DecisionRequest {
  std::string_view subject;
  std::string_view plan;  // looked up by name, unless `effective_plan` is set
  int64_t cost = 1;
  // The subject's effective plan (typically Plan::WithQuotas of one of plans(), for a subject with
  // per-limit quota overrides), used instead of looking `plan` up. The Limiter reads it only during
  // the call and keeps no pointer to it (the over-limit cache and the asynchronous store path keep
  // copies of what they need). The Decision refers to it, though (Decision::plan and each
  // LimitDecision::limit): whoever reads the Decision keeps it alive until done with it.
  const Plan* effective_plan = nullptr;
  // kReport: the cost was already spent (docs/semantics.md, Reports). The decision is allowed
  // whatever the counters say and the cost is charged to every limit, past the quota if need be;
  // no limit is violated and no shadow limit would deny. The over-limit cache neither answers nor
  // learns from a report. When the store fails a report is allowed (degraded) whatever
  // on_store_error says, and the degraded ledger, if any, counts its cost.
  DecideMode mode = DecideMode::kAdmit;
};

using DecisionCallback = absl::AnyInvocable<void(absl::StatusOr<Decision>) &&>;

// One part of a group decision (Limiter::DecideGroup).
struct GroupPart {
  std::string_view subject;
  // The part's plan, built by the caller (typically not one of plans()): read during the call,
  // referred to by the Decision (Decision::plan, LimitDecision::limit), so the caller keeps it
  // alive until done with the Decision, as for DecisionRequest::effective_plan.
  const Plan* plan = nullptr;
  int64_t cost = 1;
  // As DecisionRequest::mode; every part of a group has the same mode (a report of a group is
  // all of it charged).
  DecideMode mode = DecideMode::kAdmit;
};

using GroupDecisionCallback = absl::AnyInvocable<void(absl::StatusOr<std::vector<Decision>>) &&>;

// Reservations (docs/semantics.md, Reservations and Concurrency).
inline constexpr absl::Duration kDefaultReservationTtl = absl::Seconds(60);
inline constexpr absl::Duration kMaxReservationTtl = absl::Hours(1);

struct ReserveRequest {
  // Who, under which plan; `cost` is charged now, as by Decide (an /v1/authorize that also takes
  // a lease); 0 for a reservation that charges only when it ends.
  DecisionRequest decision;
  int64_t hold = 0;  // the estimate, held on every counting limit (0..kMaxCost)
  absl::Duration ttl = kDefaultReservationTtl;  // (0, kMaxReservationTtl], whole milliseconds
};

struct ReserveDecision {
  Decision decision;  // limits show what is held after it
  std::string id;     // set iff allowed and recorded (a degraded answer has none)
  absl::Time expires_at;
};
using ReserveCallback = absl::AnyInvocable<void(absl::StatusOr<ReserveDecision>) &&>;

struct SettleRequest {
  std::string_view id;  // as ReserveDecision::id
  // The subject's plan now (its effective plan, for a registry subject); null: the plan the
  // reservation was made under, by name. Read during the call; the Decision refers to it.
  const Plan* effective_plan = nullptr;
  int64_t cost = 0;  // ReservationEnd::kSettle: the real cost, 0..kMaxCost
  ReservationEnd end = ReservationEnd::kSettle;
};

struct SettleDecision {
  StoreSettleResult::Outcome outcome = StoreSettleResult::Outcome::kNotFound;
  // The counters after the call (not for kNotFound); limits carry the overshoot of this charge.
  Decision decision;
  int64_t charged = 0;
  ReservationEnd ended_by = ReservationEnd::kSettle;
};
using SettleDecisionCallback = absl::AnyInvocable<void(absl::StatusOr<SettleDecision>) &&>;

// What a reservation id says: whose it is and the plan it was made under. Ids are
// "rsv_<26 random base32 characters>.<plan>.<subject>", plan and subject in unpadded base64url:
// any instance can settle one in one store step, knowing where it lives without looking it up.
struct ReservationRef {
  std::string subject;
  std::string plan;
};
[[nodiscard]] std::optional<ReservationRef> ParseReservationId(std::string_view id);

struct LimiterOptions {
  config::OnStoreError on_store_error = config::OnStoreError::kAllow;
  // Entries of the over-limit cache (overlimit_cache.h); 0 turns it off. Worth it when the store is
  // remote: a denied client that keeps asking is then answered without a round trip.
  size_t overlimit_cache_capacity = 0;
  OverLimitCacheStats* overlimit_stats = nullptr;  // may be null; must outlive the Limiter
  // Under on_store_error: allow, what this instance knows of its subjects' usage: a decision the
  // store cannot answer is decided against it instead of admitted (degraded_ledger.h). Shared by
  // the Limiters of a service's reloads; may be null (a store that cannot fail needs none); must
  // outlive the Limiter.
  DegradedLedger* degraded_ledger = nullptr;
};

// Thread-safe and immutable; a reload builds a new Limiter. `store` and `clock` must outlive it.
class Limiter {
 public:
  Limiter(PlanSet plans, Store* store, const Clock* clock, LimiterOptions options);

  // Decides `req`. `done` receives InvalidArgument for a bad subject or cost and NotFound for an
  // unknown plan (both name the field); every other outcome, including a failed store, is a
  // Decision. `done` runs exactly once, as Store::Decide's callback does. `req` is read only during
  // the call.
  void Decide(const DecisionRequest& req, DecisionCallback done) const;

  // Decides every part all-or-nothing in one store step (Store::DecideGroup, docs/semantics.md,
  // Groups): one Decision per part, in order. Each Decision's allowed/degraded is the group's;
  // each part's `limits` mark the limits that denied (violated); retry_after is the group's (the
  // latest reset among every violated limit of every part). `group` places the parts' state
  // (StoreRequest::group); empty: each part stays where its single decisions are (on Redis
  // Cluster the keys of several subjects then rarely share a slot, and the call fails). The
  // Limiter's single decisions, Usage and Reset place subjects by themselves, so a group-placed
  // subject's counters are its group's alone (on Redis; the memory store ignores placement).
  // InvalidArgument (naming parts[i]) for a bad subject or cost, a missing plan, duplicate
  // subjects, a mode other than parts[0]'s, and no or more than kMaxGroupParts parts; and for a
  // `group` that is not a valid subject. on_store_error applies as for Decide. The over-limit cache
  // is not consulted for groups (nor taught by them). `done` runs exactly once, as Decide's does;
  // `parts` is read only during the call.
  void DecideGroup(std::string_view group, absl::Span<const GroupPart> parts,
                   GroupDecisionCallback done) const;

  // Reserves (ReserveRequest): decided as Decide, with `hold` held besides the cost and a slot of
  // every concurrent limit taken; if admitted, the reservation is recorded and its id returned.
  // InvalidArgument for a bad subject, cost, hold or ttl; NotFound for an unknown plan;
  // Unimplemented from a store without reservations; ResourceExhausted from a store that holds
  // as many reservations as it may. A failed store: on_store_error decides,
  // with no reservation (no id).
  void Reserve(const ReserveRequest& req, ReserveCallback done) const;
  // Ends a reservation (SettleRequest). InvalidArgument for a malformed id or bad cost; an id
  // this store does not know is Outcome::kNotFound. Never denied: a settle charges in full.
  void Settle(const SettleRequest& req, SettleDecisionCallback done) const;
  // Moves an open reservation's expiry to now + ttl ((0, kMaxReservationTtl]).
  void Extend(std::string_view id, absl::Duration ttl, ExtendCallback done) const;
  // Ends up to `max` reservations that are due (ReservationEnd::kExpire, under the plan each was
  // made under; one whose plan is no longer configured is released). `done` gets how many ended.
  void ExpireDue(size_t max, absl::AnyInvocable<void(absl::StatusOr<size_t>) &&> done) const;

  // Current usage of `subject` under `plan` without consuming anything. Counters follow the
  // subject: they are those of the plan's limits (by name and window), whatever plan counted them.
  void Usage(std::string_view subject, std::string_view plan, UsageCallback done) const;
  // The same under an effective plan (see DecisionRequest::effective_plan), read only during the
  // call; fired thresholds are those of its quotas.
  void Usage(std::string_view subject, const Plan& plan, UsageCallback done) const;

  // Resets one limit (by name) or, with an empty `limit`, every limit of `plan` for `subject`:
  // those counters and alert flags are cleared for every plan that shares the limit (same name and
  // window), and the subject's over-limit cache entry is dropped.
  void Reset(std::string_view subject, std::string_view plan, std::string_view limit,
             StatusCallback done) const;
  // The same under an effective plan, read only during the call.
  void Reset(std::string_view subject, const Plan& plan, std::string_view limit,
             StatusCallback done) const;

  [[nodiscard]] const PlanSet& plans() const { return plans_; }
  [[nodiscard]] const Clock& clock() const { return *clock_; }
  // Entries in the over-limit cache (0 when it is off).
  [[nodiscard]] size_t overlimit_cache_size() const { return cache_ ? cache_->size() : 0; }

 private:
  // The plan for an admin request on `subject`, or the error naming the bad field.
  [[nodiscard]] absl::StatusOr<const Plan*> Resolve(std::string_view subject,
                                                    std::string_view plan_name) const;
  void UsageOf(std::string_view subject, const Plan& plan, UsageCallback done) const;
  void ResetOf(std::string_view subject, const Plan& plan, std::string_view limit,
               StatusCallback done) const;

  PlanSet plans_;
  Store* store_;
  const Clock* clock_;
  LimiterOptions options_;
  std::unique_ptr<OverLimitCache> cache_;  // null when off
};

}  // namespace limiter
}  // namespace sluice

#endif  // SLUICE_LIMITER_LIMITER_H_
