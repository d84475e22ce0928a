#include "sluice/server/store_probe.h"

#include <utility>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "sluice/config/config.h"
#include "sluice/limiter/window.h"

namespace sluice::server {

StoreProbe::StoreProbe(Store* store, const Clock* clock) : store_(store), clock_(clock) {
  config::Config probe;
  probe.plans.push_back(config::PlanConfig{
      .name = "sluice.readyz",
      .limits = {config::LimitConfig{
          .name = "probe", .quota = kProbeQuota, .window = *config::ParseWindow("1m")}}});
  absl::StatusOr<PlanSet> plans = PlanSet::FromConfig(probe);
  plans_ = std::move(*plans);
}

void StoreProbe::Run(StatusCallback done) const {
  const Plan* plan = plans_.Find("sluice.readyz");
  const absl::Time now = clock_->Now();
  const WindowBounds window = WindowAt(plan->limits.front().window, plan->tz, now);
  store_->Decide(StoreRequest{.subject = "sluice.readyz",
                              .plan = plan,
                              .cost = 1,
                              .now = now,
                              .windows = absl::MakeConstSpan(&window, 1)},
                 [done = std::move(done)](absl::StatusOr<StoreResult> r) mutable {
                   std::move(done)(r.status());
                 });
}

}  // namespace sluice::server
