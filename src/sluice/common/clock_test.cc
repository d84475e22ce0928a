#include "sluice/common/clock.h"

#include <gtest/gtest.h>

#include "absl/time/clock.h"

namespace sluice {
namespace {

TEST(FakeClockTest, StandsStillUntilMoved) {
  FakeClock clock(absl::FromUnixSeconds(1000));
  EXPECT_EQ(clock.Now(), absl::FromUnixSeconds(1000));
  clock.Advance(absl::Milliseconds(1500));
  EXPECT_EQ(clock.Now(), absl::FromUnixMillis(1001500));
  clock.Set(absl::FromUnixSeconds(5));
  EXPECT_EQ(clock.Now(), absl::FromUnixSeconds(5));
}

TEST(SystemClockTest, FollowsTheHostClock) {
  SystemClock clock;
  absl::Time before = absl::Now();
  absl::Time now = clock.Now();
  EXPECT_GE(now, before);
  EXPECT_LT(now - before, absl::Seconds(5));
}

}  // namespace
}  // namespace sluice
