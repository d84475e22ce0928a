#include "sluice/server/reservation_expirer.h"

#include <memory>
#include <utility>

#include "absl/status/statusor.h"
#include "sluice/common/log.h"

namespace sluice::server {

ReservationExpirer::ReservationExpirer(boost::asio::io_context& io,
                                       const frontend::FrontendHolder* frontend,
                                       frontend::FrontendMetrics* metrics)
    : frontend_(frontend), metrics_(metrics) {
  timer_.emplace(io);
  // The first round at once: what was due while the process was down (a restart) ends now, not
  // a second later — and its calls are made once while the process still has file descriptors
  // to spare (UBSan's check of a virtual call it has not seen before opens a pipe: under
  // descriptor exhaustion it reports a false "invalid vptr" and stops the sanitizer builds).
  Schedule(std::chrono::steady_clock::duration::zero());
}

void ReservationExpirer::Schedule(std::chrono::steady_clock::duration after) {
  timer_->expires_after(after);
  timer_->async_wait([this](const boost::system::error_code& ec) {
    if (!ec) Round();
  });
}

void ReservationExpirer::Round() {
  // The Frontend (and its Limiter) is kept alive by the callback until the round has answered.
  std::shared_ptr<const frontend::Frontend> fe = frontend_->Get();
  const Limiter& limiter = *fe->limiter;
  limiter.ExpireDue(kBatch, [this, fe = std::move(fe)](absl::StatusOr<size_t> ended) {
    if (!ended.ok()) {
      // A store without reservations answers Unimplemented: nothing to end, ever. Otherwise a
      // store that fails (or is still connecting, at start) is said once it has failed for a few
      // rounds, then once a minute, not every second.
      if (!absl::IsUnimplemented(ended.status()) && ++failures_ % kLogEvery == kFailuresBeforeLog) {
        Log(LogLevel::kWarn, "ending expired reservations failed; retrying")
            .Int("rounds", static_cast<int64_t>(failures_))
            .Error(ended.status());
      }
      Schedule(kInterval);
      return;
    }
    if (failures_ >= kFailuresBeforeLog) {
      Log(LogLevel::kInfo, "ending expired reservations works again")
          .Int("failed_rounds", static_cast<int64_t>(failures_));
    }
    failures_ = 0;
    metrics_->CountExpired(*ended);
    Schedule(*ended >= kBatch ? std::chrono::steady_clock::duration::zero() : kInterval);
  });
}

}  // namespace sluice::server
