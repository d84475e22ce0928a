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

TEST(OffsetClockTest, ShiftsItsBaseByTheLatestOffset) {
  FakeClock base(absl::FromUnixSeconds(1000));
  OffsetClock clock(&base);
  EXPECT_FALSE(clock.synced());
  EXPECT_EQ(clock.Now(), absl::FromUnixSeconds(1000));
  clock.SetOffset(absl::Milliseconds(-250));
  EXPECT_TRUE(clock.synced());
  EXPECT_EQ(clock.Now(), absl::FromUnixMillis(999750));
  base.Advance(absl::Seconds(1));
  EXPECT_EQ(clock.Now(), absl::FromUnixMillis(1000750));
  EXPECT_EQ(clock.offset(), absl::Milliseconds(-250));
}

}  // namespace
}  // namespace sluice
