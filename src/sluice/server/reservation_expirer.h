// Ends the reservations whose expires_at has passed (docs/semantics.md, Reservations): once a
// second, on one event loop, through the Limiter of the Frontend in force (Limiter::ExpireDue).
// Each reservation ends exactly once whoever asks: the store decides, in the step that ends it,
// whether it is still open and due.
#ifndef SLUICE_SERVER_RESERVATION_EXPIRER_H_
#define SLUICE_SERVER_RESERVATION_EXPIRER_H_

#include <chrono>
#include <cstddef>
#include <optional>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "sluice/frontend/frontend.h"
#include "sluice/frontend/metrics.h"

namespace sluice::server {

class ReservationExpirer {
 public:
  static constexpr auto kInterval = std::chrono::seconds(1);
  // At most this many per round; more wait for the next (checked again at once when it was full).
  static constexpr size_t kBatch = 1000;

  // Starts the timer on `io`. `frontend` and `metrics` must outlive it; `io` too (see Release()).
  ReservationExpirer(boost::asio::io_context& io, const frontend::FrontendHolder* frontend,
                     frontend::FrontendMetrics* metrics);

  // Cancels the timer. REQUIRES: the loop is stopped.
  void Release() { timer_.reset(); }

 private:
  // Rounds that failed in a row (Round), and when they are logged: at the kFailuresBeforeLog-th,
  // then every kLogEvery.
  static constexpr size_t kFailuresBeforeLog = 3;
  static constexpr size_t kLogEvery = 60;
  size_t failures_ = 0;
  void Schedule(std::chrono::steady_clock::duration after);
  void Round();

  const frontend::FrontendHolder* frontend_;
  frontend::FrontendMetrics* metrics_;
  std::optional<boost::asio::steady_timer> timer_;
};

}  // namespace sluice::server

#endif  // SLUICE_SERVER_RESERVATION_EXPIRER_H_
