#include "sluice/limiter/decision.h"

#include <algorithm>

namespace sluice {
inline namespace limiter {

const LimitDecision& Decision::Tightest() const {
  // Enforced limits only, unless there are none.
  const bool any_enforced = std::any_of(limits.begin(), limits.end(), [](const LimitDecision& l) {
    return l.limit == nullptr || !l.limit->shadow;
  });
  const LimitDecision* best = nullptr;
  for (const LimitDecision& l : limits) {
    if (any_enforced && l.limit != nullptr && l.limit->shadow) continue;
    if (best == nullptr || l.remaining < best->remaining ||
        (l.remaining == best->remaining && l.reset_after < best->reset_after)) {
      best = &l;
    }
  }
  return *best;
}

}  // namespace limiter
}  // namespace sluice
