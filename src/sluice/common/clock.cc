#include "sluice/common/clock.h"

#include "absl/time/clock.h"

namespace sluice {

absl::Time SystemClock::Now() const { return absl::Now(); }

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

}  // namespace sluice
