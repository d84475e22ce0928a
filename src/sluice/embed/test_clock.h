// A libsluice Clock (sluice/options.h) that moves only when a test moves it, for the library's own
// tests: they drive time instead of waiting for it.
#ifndef SLUICE_EMBED_TEST_CLOCK_H_
#define SLUICE_EMBED_TEST_CLOCK_H_

#include <chrono>
#include <mutex>

#include "sluice/options.h"

namespace sluice::lib::testing_util {

// Thread-safe.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(std::chrono::system_clock::time_point start) : now_(start) {}

  std::chrono::system_clock::time_point Now() const override {
    std::lock_guard lock(mu_);
    return now_;
  }
  void Advance(std::chrono::system_clock::duration d) {
    std::lock_guard lock(mu_);
    now_ += d;
  }

 private:
  mutable std::mutex mu_;
  std::chrono::system_clock::time_point now_;
};

// A day into a 31-day ("744h") window: those windows are aligned to the Unix epoch, and this is
// 600 of them after it, plus a day (December 2020: in the past of any host that runs the tests).
inline constexpr std::chrono::system_clock::time_point kADayIntoA744hWindow{
    std::chrono::hours(744) * 600 + std::chrono::hours(24)};

}  // namespace sluice::lib::testing_util

#endif  // SLUICE_EMBED_TEST_CLOCK_H_
