// The one source of "now" in sluice. Nothing outside this module reads the system clock: window
// boundaries, expiry times and alert timestamps all come from a Clock handed in by the caller, so
// tests drive time with FakeClock and the Redis store can correct for the Redis server's clock.
#ifndef SLUICE_COMMON_CLOCK_H_
#define SLUICE_COMMON_CLOCK_H_

#include <atomic>
#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace sluice {
inline namespace common {

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

// Another clock shifted by an offset that can be changed at any time: the Redis-synced clock is an
// OffsetClock over SystemClock whose offset (Redis TIME minus local time) the Redis store measures
// at connect and periodically (store/redis/clock_sync.h). Lock-free.
class OffsetClock final : public Clock {
 public:
  explicit OffsetClock(const Clock* base) : base_(base) {}
  [[nodiscard]] absl::Time Now() const override;
  void SetOffset(absl::Duration offset);
  [[nodiscard]] absl::Duration offset() const;
  // True once SetOffset has been called (the offset was measured at least once).
  [[nodiscard]] bool synced() const { return synced_.load(std::memory_order_acquire); }

 private:
  const Clock* base_;
  std::atomic<int64_t> offset_ns_{0};
  std::atomic<bool> synced_{false};
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

}  // namespace common
}  // namespace sluice

#endif  // SLUICE_COMMON_CLOCK_H_
