// One timer per event loop that records when it last ran; a loop that has not run for a few
// seconds is stuck (a handler blocking its thread), which /healthz reports and which stops the
// systemd watchdog pings.
#ifndef SLUICE_SERVER_LOOP_HEARTBEATS_H_
#define SLUICE_SERVER_LOOP_HEARTBEATS_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

namespace sluice::server {

class LoopHeartbeats {
 public:
  static constexpr auto kInterval = std::chrono::seconds(1);
  static constexpr int64_t kStaleAfterNs = 5'000'000'000;

  // Starts one timer on each of `contexts`. REQUIRES: none of them runs yet. The contexts must
  // outlive the timers (see Release()).
  explicit LoopHeartbeats(const std::vector<std::unique_ptr<boost::asio::io_context>>& contexts);

  // True if every loop ran within the last few seconds. Thread-safe.
  [[nodiscard]] bool AllTurning() const;

  // Destroys the timers. REQUIRES: the loops are stopped.
  void Release() { timers_.clear(); }

 private:
  void Tick(size_t i);

  std::vector<std::atomic<int64_t>> beats_;
  std::vector<std::unique_ptr<boost::asio::steady_timer>> timers_;
};

}  // namespace sluice::server

#endif  // SLUICE_SERVER_LOOP_HEARTBEATS_H_
