#include "sluice/common/clock.h"

#include "absl/time/clock.h"

namespace sluice {
inline namespace common {

absl::Time SystemClock::Now() const { return absl::Now(); }

absl::Time OffsetClock::Now() const {
  return base_->Now() + absl::Nanoseconds(offset_ns_.load(std::memory_order_relaxed));
}

void OffsetClock::SetOffset(absl::Duration offset) {
  offset_ns_.store(absl::ToInt64Nanoseconds(offset), std::memory_order_relaxed);
  synced_.store(true, std::memory_order_release);
}

absl::Duration OffsetClock::offset() const {
  return absl::Nanoseconds(offset_ns_.load(std::memory_order_relaxed));
}

absl::Time FakeClock::Now() const {
  absl::MutexLock lock(&mu_);
  return now_;
}

void FakeClock::Set(absl::Time t) {
  absl::MutexLock lock(&mu_);
  now_ = t;
}

void FakeClock::Advance(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  now_ += d;
}

}  // namespace common
}  // namespace sluice
