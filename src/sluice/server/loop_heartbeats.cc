#include "sluice/server/loop_heartbeats.h"

#include <boost/system/error_code.hpp>

#include "absl/time/clock.h"

namespace sluice::server {

LoopHeartbeats::LoopHeartbeats(
    const std::vector<std::unique_ptr<boost::asio::io_context>>& contexts)
    : beats_(contexts.size()) {
  for (size_t i = 0; i < contexts.size(); ++i) {
    timers_.push_back(std::make_unique<boost::asio::steady_timer>(*contexts[i]));
    beats_[i].store(absl::GetCurrentTimeNanos());
    Tick(i);
  }
}

bool LoopHeartbeats::AllTurning() const {
  const int64_t now = absl::GetCurrentTimeNanos();
  for (const auto& beat : beats_) {
    if (now - beat.load(std::memory_order_relaxed) > kStaleAfterNs) return false;
  }
  return true;
}

void LoopHeartbeats::Tick(size_t i) {
  timers_[i]->expires_after(kInterval);
  timers_[i]->async_wait([this, i](const boost::system::error_code& ec) {
    if (ec) return;
    beats_[i].store(absl::GetCurrentTimeNanos(), std::memory_order_relaxed);
    Tick(i);
  });
}

}  // namespace sluice::server
