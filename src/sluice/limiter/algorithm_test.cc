#include "sluice/limiter/algorithm.h"

#include <gtest/gtest.h>

#include <optional>

#include "sluice/limiter/store.h"

namespace sluice {
namespace {

Limit GcraLimit(int64_t quota, absl::Duration window, int64_t burst = 0) {
  Limit limit{.name = "rate",
              .window = {.kind = config::WindowSpec::Kind::kFixed, .length = window},
              .algorithm = config::Algorithm::kGcra,
              .burst_config = burst};
  SetQuota(limit, quota);
  return limit;
}

Limit SlidingLimit(int64_t quota, absl::Duration window) {
  Limit limit{.name = "rate",
              .window = {.kind = config::WindowSpec::Kind::kFixed, .length = window},
              .algorithm = config::Algorithm::kSliding};
  SetQuota(limit, quota);
  return limit;
}

const absl::Time kMinute = absl::FromUnixSeconds(1796040000);  // a minute boundary
const WindowBounds kWindow{.id = 29934000, .start = kMinute, .end = kMinute + absl::Minutes(1)};

TEST(GcraTest, TheIntervalIsTheWindowOverTheQuotaRoundedUp) {
  EXPECT_EQ(GcraLimit(60, absl::Minutes(1)).emission_us, 1'000'000);
  EXPECT_EQ(GcraLimit(7, absl::Minutes(1)).emission_us, 8'571'429);
  EXPECT_EQ(GcraLimit(1'000'000, absl::Seconds(1)).emission_us, 1);
  EXPECT_EQ(GcraLimit(60, absl::Minutes(1)).burst, 60);
  EXPECT_EQ(GcraLimit(60, absl::Minutes(1), 10).burst, 10);
  // An override below the configured burst lowers it with the quota.
  Limit limit = GcraLimit(60, absl::Minutes(1), 10);
  SetQuota(limit, 6);
  EXPECT_EQ(limit.burst, 6);
  EXPECT_EQ(limit.emission_us, 10'000'000);
}

TEST(GcraTest, FitsWithinTheToleranceAndChargesUpToAQuota) {
  const Limit limit = GcraLimit(60, absl::Minutes(1), 10);
  EXPECT_TRUE(GcraFits(limit, 0, 10));
  EXPECT_FALSE(GcraFits(limit, 0, 11));
  EXPECT_TRUE(GcraFits(limit, 9'000'000, 1));
  EXPECT_FALSE(GcraFits(limit, 9'000'001, 1));
  EXPECT_EQ(GcraCharge(limit, 0, 3), 3'000'000);
  EXPECT_EQ(GcraCharge(limit, 50'000'000, 1'000'000), 60'000'000);
  EXPECT_EQ(GcraUnits(limit, 1), 1);
  EXPECT_EQ(GcraUnits(limit, 2'000'000), 2);
  EXPECT_EQ(GcraWaitMicros(limit, 10'000'000, 1), 1'000'000);
  EXPECT_EQ(GcraWaitMicros(limit, 0, 1), 0);
  EXPECT_EQ(GcraWaitMicros(limit, 0, 11), -1);
}

TEST(SlidingTest, ThePreviousWindowWeighsWhatIsLeftOfTheCurrentOneRoundedUp) {
  EXPECT_EQ(SlidingWeight(kWindow, kMinute), 1'000'000);
  EXPECT_EQ(SlidingWeight(kWindow, kMinute + absl::Seconds(30)), 500'000);
  EXPECT_EQ(SlidingWeight(kWindow, kMinute + absl::Seconds(40)), 333'334);
  EXPECT_EQ(SlidingWeight(kWindow, kWindow.end - absl::Microseconds(1)), 1);
  EXPECT_EQ(SlidingShare(59, 1'000'000), 59);
  EXPECT_EQ(SlidingShare(59, 983'050), 58);
  EXPECT_EQ(SlidingShare(59, 983'051), 59);
  EXPECT_EQ(SlidingShare(1, 1), 1);
  EXPECT_EQ(SlidingShare(0, 1'000'000), 0);
}

TEST(SlidingTest, FitsAtTheFirstInstantThePreviousWindowWeighsLittleEnough) {
  const Limit limit = SlidingLimit(60, absl::Minutes(1));
  // 59 in the previous minute, 1 in this one: a request of 1 fits once they weigh 58.
  EXPECT_EQ(SlidingFitsAt(limit, kWindow, 59, 1, 1), kMinute + absl::Microseconds(1'017'000));
  // Nothing before: at once (the window's start, already past).
  EXPECT_EQ(SlidingFitsAt(limit, kWindow, 0, 59, 1), kMinute);
  // This window full: in the next one, when this one's 60 weigh 59 (rounded up: from 1.00002 s
  // in, 983,333 millionths of 60).
  EXPECT_EQ(SlidingFitsAt(limit, kWindow, 10, 60, 1), kWindow.end + absl::Microseconds(1'000'020));
  EXPECT_EQ(SlidingFitsAt(limit, kWindow, 0, 0, 61), std::nullopt);
}

TEST(SlidingTest, APackedCounterHoldsBothCounts) {
  EXPECT_EQ(SlidingPack(42, 17), 4'200'000'017);
  EXPECT_TRUE(SlidingValid(SlidingPack(config::kMaxSlidingCount, config::kMaxSlidingCount)));
  EXPECT_LE(SlidingPack(config::kMaxSlidingCount, config::kMaxSlidingCount), kMaxUsed);
  EXPECT_FALSE(SlidingValid(99'999'999));
  EXPECT_FALSE(SlidingValid(-1));
}

TEST(AlgorithmTest, TheAlgorithmIsPartOfALimitsIdentityExceptForFixedOnes) {
  const config::WindowSpec minute{
      .kind = config::WindowSpec::Kind::kFixed, .length = absl::Minutes(1), .text = "1m"};
  const absl::TimeZone utc = absl::UTCTimeZone();
  EXPECT_EQ(LimitTag("rate", minute, utc),
            LimitTag("rate", minute, utc, config::Algorithm::kFixed));
  EXPECT_NE(LimitTag("rate", minute, utc), LimitTag("rate", minute, utc, config::Algorithm::kGcra));
  EXPECT_NE(LimitTag("rate", minute, utc, config::Algorithm::kSliding),
            LimitTag("rate", minute, utc, config::Algorithm::kGcra));
}

TEST(AlgorithmTest, QuotasAnOverrideMayGiveFollowTheConfigurationsRules) {
  EXPECT_TRUE(QuotaFits(SlidingLimit(10, absl::Minutes(1)), 9'999'999));
  EXPECT_FALSE(QuotaFits(SlidingLimit(10, absl::Minutes(1)), 10'000'000));
  EXPECT_TRUE(QuotaFits(GcraLimit(10, absl::Seconds(1)), 1'000'000));
  EXPECT_FALSE(QuotaFits(GcraLimit(10, absl::Seconds(1)), 300'000));
  EXPECT_TRUE(QuotaFits(GcraLimit(10, absl::Seconds(1)), 999));
  EXPECT_FALSE(QuotaFits(GcraLimit(10, absl::Seconds(1)), 0));
}

}  // namespace
}  // namespace sluice
