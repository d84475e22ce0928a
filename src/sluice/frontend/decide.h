// The decision call both front ends make once they know who is asking (resolve.h): the request to
// the Limiter, the time it takes and the count of its outcome. The callers keep their own
// callbacks: a callback wrapped in a larger one would no longer fit absl::AnyInvocable's inline
// storage and would cost an allocation per decision.
#ifndef SLUICE_FRONTEND_DECIDE_H_
#define SLUICE_FRONTEND_DECIDE_H_

#include <chrono>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "sluice/frontend/frontend.h"
#include "sluice/frontend/metrics.h"
#include "sluice/frontend/resolve.h"
#include "sluice/limiter/decision.h"
#include "sluice/limiter/limiter.h"

namespace sluice::frontend {

// The request that decides `target` at `cost`. Refers to `target`'s strings and effective plan:
// `target` outlives the decision.
[[nodiscard]] inline DecisionRequest RequestFor(const Target& target, int64_t cost) {
  return {.subject = target.subject,
          .plan = target.plan,
          .cost = cost,
          .effective_plan = target.effective};
}

// When a decision started, for sluice_decision_duration_seconds ("from request parsed to
// decision"): started just before the Limiter is asked.
class DecisionTimer {
 public:
  [[nodiscard]] static DecisionTimer Start() { return DecisionTimer(Clock::now()); }
  DecisionTimer() = default;  // started at the clock's epoch; Start() is what callers want

  // Seconds since Start().
  [[nodiscard]] double Seconds() const {
    return std::chrono::duration<double>(Clock::now() - start_).count();
  }

 private:
  using Clock = std::chrono::steady_clock;
  explicit DecisionTimer(Clock::time_point start) : start_(start) {}
  Clock::time_point start_;
};

// Records a decision the Limiter answered: observes the time since `timer` started and, when it
// decided (`d` is ok; an error is the request's fault and not a decision), counts `d` as a
// decision of `plan` (FrontendMetrics::CountDecision).
void Record(FrontendMetrics& metrics, const Frontend& fe, const std::string& plan,
            DecisionTimer timer, const absl::StatusOr<Decision>& d);

}  // namespace sluice::frontend

#endif  // SLUICE_FRONTEND_DECIDE_H_
