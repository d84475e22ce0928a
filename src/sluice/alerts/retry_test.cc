#include "sluice/alerts/retry.h"

#include <gtest/gtest.h>

#include <optional>
#include <random>

#include "absl/random/random.h"
#include "absl/time/time.h"
#include "sluice/config/config.h"

namespace sluice::alerts {
namespace {

// first_delay 5s, max_delay 1h: the example configuration's values.
config::RetryConfig Retry() {
  return {.first_delay = absl::Seconds(5), .max_delay = absl::Hours(1)};
}

TEST(BackoffCeilingTest, DoublesFromTheFirstDelay) {
  EXPECT_EQ(BackoffCeiling(Retry(), 1), absl::Seconds(5));
  EXPECT_EQ(BackoffCeiling(Retry(), 2), absl::Seconds(10));
  EXPECT_EQ(BackoffCeiling(Retry(), 3), absl::Seconds(20));
  EXPECT_EQ(BackoffCeiling(Retry(), 10), absl::Seconds(5 * 512));
}

TEST(BackoffCeilingTest, StopsAtMaxDelayWithoutOverflowing) {
  EXPECT_EQ(BackoffCeiling(Retry(), 11), absl::Hours(1));  // 5120 s > 3600 s
  EXPECT_EQ(BackoffCeiling(Retry(), 1'000'000), absl::Hours(1));
}

TEST(BackoffCeilingTest, AttemptBelowOneCountsAsOne) {
  EXPECT_EQ(BackoffCeiling(Retry(), 0), absl::Seconds(5));
  EXPECT_EQ(BackoffCeiling(Retry(), -3), absl::Seconds(5));
}

TEST(FullJitterTest, StaysWithinZeroAndTheCeiling) {
  std::mt19937_64 gen(42);
  for (int attempt = 1; attempt <= 14; ++attempt) {
    for (int i = 0; i < 200; ++i) {
      const absl::Duration d = FullJitterDelay(Retry(), attempt, gen);
      ASSERT_GE(d, absl::ZeroDuration());
      ASSERT_LE(d, BackoffCeiling(Retry(), attempt)) << "attempt " << attempt;
    }
  }
}

TEST(FullJitterTest, SpreadsOverTheWholeRange) {
  std::mt19937_64 gen(7);
  absl::Duration lo = absl::InfiniteDuration();
  absl::Duration hi = absl::ZeroDuration();
  for (int i = 0; i < 1000; ++i) {
    const absl::Duration d = FullJitterDelay(Retry(), 3, gen);  // ceiling 20 s
    lo = std::min(lo, d);
    hi = std::max(hi, d);
  }
  EXPECT_LT(lo, absl::Seconds(1));
  EXPECT_GT(hi, absl::Seconds(19));
}

TEST(FullJitterTest, SameSeedSameDelays) {
  std::mt19937_64 a(99);
  std::mt19937_64 b(99);
  for (int attempt = 1; attempt <= 5; ++attempt) {
    EXPECT_EQ(FullJitterDelay(Retry(), attempt, a), FullJitterDelay(Retry(), attempt, b));
  }
}

TEST(FullJitterTest, WorksWithAbslBitGen) {
  absl::BitGen gen;
  const absl::Duration d = FullJitterDelay(Retry(), 2, gen);
  EXPECT_GE(d, absl::ZeroDuration());
  EXPECT_LE(d, absl::Seconds(10));
}

TEST(DecorrelatedJitterTest, FirstDelayFirstThenWithinFirstDelayAndThreeTimesPrevious) {
  std::mt19937_64 gen(1);
  absl::Duration previous = absl::ZeroDuration();
  previous = DecorrelatedJitterDelay(Retry(), previous, gen);
  EXPECT_EQ(previous, absl::Seconds(5));
  for (int i = 0; i < 500; ++i) {
    const absl::Duration next = DecorrelatedJitterDelay(Retry(), previous, gen);
    ASSERT_GE(next, absl::Seconds(5));
    ASSERT_LE(next, std::min(previous * 3, absl::Hours(1)));
    previous = next;
  }
}

TEST(DecorrelatedJitterTest, NeverExceedsMaxDelay) {
  std::mt19937_64 gen(3);
  for (int i = 0; i < 100; ++i) {
    EXPECT_LE(DecorrelatedJitterDelay(Retry(), absl::Hours(10), gen), absl::Hours(1));
  }
}

TEST(NextRetryDelayTest, HonoursALongerRetryAfter) {
  std::mt19937_64 gen(5);
  EXPECT_EQ(NextRetryDelay(Retry(), 1, absl::Minutes(10), gen), absl::Minutes(10));
}

TEST(NextRetryDelayTest, IgnoresAShorterRetryAfter) {
  std::mt19937_64 gen(5);
  for (int i = 0; i < 100; ++i) {
    const absl::Duration d = NextRetryDelay(Retry(), 4, absl::Seconds(0), gen);
    ASSERT_LE(d, absl::Seconds(40));
  }
}

TEST(NextRetryDelayTest, RetryAfterWinsOverMaxDelay) {
  std::mt19937_64 gen(5);
  config::RetryConfig short_retry = Retry();
  short_retry.max_delay = absl::Seconds(30);
  EXPECT_EQ(NextRetryDelay(short_retry, 1, absl::Minutes(2), gen), absl::Minutes(2));
}

TEST(NextRetryDelayTest, BackoffAloneNeverBeyondMaxDelay) {
  std::mt19937_64 gen(5);
  for (int attempt = 1; attempt < 40; ++attempt) {
    ASSERT_LE(NextRetryDelay(Retry(), attempt, std::nullopt, gen), absl::Hours(1));
  }
}

class ParseRetryAfterTest : public ::testing::Test {
 protected:
  // Sun, 06 Nov 1994 08:49:37 GMT, RFC 9110's example date.
  const absl::Time now_ = absl::FromUnixSeconds(784111777);
  std::optional<absl::Duration> Parse(std::string_view value) {
    return ParseRetryAfter(value, now_, absl::Hours(1));
  }
};

TEST_F(ParseRetryAfterTest, DeltaSeconds) {
  EXPECT_EQ(Parse("120"), absl::Seconds(120));
  EXPECT_EQ(Parse("0"), absl::ZeroDuration());
  EXPECT_EQ(Parse(" 2\t"), absl::Seconds(2));
}

TEST_F(ParseRetryAfterTest, DeltaSecondsAreBoundedByMax) {
  EXPECT_EQ(Parse("86400"), absl::Hours(1));
  EXPECT_EQ(Parse("99999999999999999999999"), absl::Hours(1));
}

TEST_F(ParseRetryAfterTest, ImfFixdate) {
  EXPECT_EQ(Parse("Sun, 06 Nov 1994 08:50:07 GMT"), absl::Seconds(30));
}

TEST_F(ParseRetryAfterTest, ObsoleteRfc850AndAsctimeDates) {
  EXPECT_EQ(Parse("Sunday, 06-Nov-94 08:50:07 GMT"), absl::Seconds(30));
  EXPECT_EQ(Parse("Sun Nov  6 08:50:07 1994"), absl::Seconds(30));
}

TEST_F(ParseRetryAfterTest, DateInThePastMeansNow) {
  EXPECT_EQ(Parse("Sat, 05 Nov 1994 08:49:37 GMT"), absl::ZeroDuration());
}

TEST_F(ParseRetryAfterTest, FarDateIsBoundedByMax) {
  EXPECT_EQ(Parse("Fri, 31 Dec 1999 23:59:59 GMT"), absl::Hours(1));
}

TEST_F(ParseRetryAfterTest, GarbageIsNullopt) {
  for (const char* bad :
       {"", "  ", "-5", "1.5", "5s", "soon", "120 120", "0x10", "Sun, 06 Nov 1994 08:50:07",
        "Sun, 06 Nov 1994 08:50:07 GMT junk", "Sun, 32 Nov 1994 08:50:07 GMT"}) {
    EXPECT_EQ(Parse(bad), std::nullopt) << '"' << bad << '"';
  }
}

}  // namespace
}  // namespace sluice::alerts
