#include "sluice/limiter/decision.h"

namespace sluice {

const LimitDecision& Decision::Tightest() const {
  const LimitDecision* best = &limits.front();
  for (const LimitDecision& l : limits) {
    if (l.remaining < best->remaining ||
        (l.remaining == best->remaining && l.reset_after < best->reset_after)) {
      best = &l;
    }
  }
  return *best;
}

}  // namespace sluice
