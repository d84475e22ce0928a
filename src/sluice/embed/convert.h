// Between libsluice's public types (include/sluice/) and the internal ones: Options to a
// config::Config (validated like sluice.yaml), absl::Status to lib::Status, internal decisions,
// usage and alert events to their public copies, the public Clock to the engine's.
#ifndef SLUICE_EMBED_CONVERT_H_
#define SLUICE_EMBED_CONVERT_H_

#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "sluice/common/clock.h"
#include "sluice/config/config.h"
#include "sluice/limiter.h"
#include "sluice/limiter/alert_event.h"
#include "sluice/limiter/decision.h"
#include "sluice/limiter/plan.h"
#include "sluice/limiter/store.h"
#include "sluice/options.h"
#include "sluice/status.h"

namespace sluice::embed {

// The configuration `options` describe, validated by config::Validate. Errors are InvalidArgument
// naming the field as sluice.yaml would ("plans.free.limits[0].window: bad window ...").
[[nodiscard]] absl::StatusOr<config::Config> ToConfig(const lib::Options& options);

[[nodiscard]] lib::Status FromAbsl(const absl::Status& status);

// A library user's Options::clock as the engine's Clock. Thread-safe as the user's clock is.
class PublicClock final : public Clock {
 public:
  explicit PublicClock(std::shared_ptr<const lib::Clock> clock) : clock_(std::move(clock)) {}
  [[nodiscard]] absl::Time Now() const override;

 private:
  const std::shared_ptr<const lib::Clock> clock_;
};

[[nodiscard]] lib::Decision ToPublic(const Decision& decision);
[[nodiscard]] lib::AlertEvent ToPublic(const AlertEvent& event);
// `usage` as the Store reported it for `plan`'s limits, with each limit's window at `now`.
[[nodiscard]] std::vector<lib::LimitUsage> ToPublic(const Plan& plan,
                                                    const std::vector<LimitUsage>& usage,
                                                    absl::Time now);

}  // namespace sluice::embed

#endif  // SLUICE_EMBED_CONVERT_H_
