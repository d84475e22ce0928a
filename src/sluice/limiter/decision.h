// The answer to "may this subject spend `cost` under this plan now?" (docs/semantics.md).
#ifndef SLUICE_LIMITER_DECISION_H_
#define SLUICE_LIMITER_DECISION_H_

#include <cstdint>

#include "absl/container/inlined_vector.h"
#include "absl/time/time.h"
#include "sluice/limiter/plan.h"
#include "sluice/limiter/store.h"

namespace sluice {
inline namespace limiter {

struct LimitDecision {
  const Limit* limit = nullptr;  // owned by the Limiter's PlanSet
  int64_t used = 0;              // after this request (a concurrent limit: 0)
  int64_t held = 0;              // held by open reservations (a concurrent limit: slots taken)
  int64_t remaining = 0;         // max(quota - used - held, 0)
  // A settled reservation: what it charged to this limit beyond its quota (docs/semantics.md).
  int64_t overshoot = 0;
  int64_t reset_after = 0;  // seconds until the window ends, rounded up
  absl::Time window_start;
  absl::Time window_end;
  bool violated = false;  // this limit denied the request; never set for a shadow limit
  // A shadow limit (Limit::shadow) that would have denied this request: used + cost > quota
  // before it (an unusable counter counts as exhausted). Never set for an enforced limit.
  bool would_deny = false;
};

// Valid while the Limiter that produced it lives (it points into the Limiter's plans).
struct Decision {
  const Plan* plan = nullptr;
  absl::Time now;  // the instant it was decided at (its windows' and its algorithms' now)
  bool allowed = false;
  // True when the store failed and the answer follows on_store_error. Under `allow` with a
  // degraded ledger (the Redis store), the decision was made against what this instance knows of
  // the subject's usage, and `limits` carry that usage (degraded_ledger.h); otherwise they carry
  // quotas and windows, but used = 0 and remaining = quota, since the counters are unknown.
  bool degraded = false;
  StoreFailure failure = StoreFailure::kOther;  // why, when degraded
  // Denial: seconds until every violated limit has reset; else 0. Shadow limits never count.
  int64_t retry_after = 0;
  absl::InlinedVector<LimitDecision, 4> limits;  // plan order

  // The enforced limit closest to exhaustion (least remaining, ties broken by soonest reset), for
  // the X-RateLimit-* headers; when every limit is shadow, the shadow one closest to exhaustion.
  // REQUIRES: !limits.empty().
  [[nodiscard]] const LimitDecision& Tightest() const;
};

}  // namespace limiter
}  // namespace sluice

#endif  // SLUICE_LIMITER_DECISION_H_
