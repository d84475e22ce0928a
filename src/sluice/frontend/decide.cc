#include "sluice/frontend/decide.h"

namespace sluice::frontend {

void Record(FrontendMetrics& metrics, const Frontend& fe, const std::string& plan,
            DecisionTimer timer, const absl::StatusOr<Decision>& d) {
  metrics.ObserveDecisionSeconds(timer.Seconds());
  if (d.ok()) metrics.CountDecision(fe, plan, *d);
}

}  // namespace sluice::frontend
