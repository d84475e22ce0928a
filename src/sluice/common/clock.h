// The one source of "now" in sluice. Nothing outside this module reads the system clock: window
// boundaries, expiry times and alert timestamps all come from a Clock handed in by the caller, so
// tests drive time with FakeClock and the Redis store can correct for the Redis server's clock.
#ifndef SLUICE_COMMON_CLOCK_H_
#define SLUICE_COMMON_CLOCK_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace sluice {

// Thread-safe: every implementation may be called from any thread.
class Clock {
 public:
  virtual ~Clock() = default;
  // Wall-clock time used for windows and timestamps.
  [[nodiscard]] virtual absl::Time Now() const = 0;
};

// The host's realtime clock.
class SystemClock final : public Clock {
 public:
  [[nodiscard]] absl::Time Now() const override;
};

// A clock that moves only when told to. Starts at `start`.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(absl::Time start) : now_(start) {}
  [[nodiscard]] absl::Time Now() const override;
  void Set(absl::Time t);
  void Advance(absl::Duration d);

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice

#endif  // SLUICE_COMMON_CLOCK_H_
