// The sliding and gcra cases of the conformance suite (docs/semantics.md, Limit algorithms).
#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "sluice/limiter/algorithm.h"
#include "sluice/limiter/store_conformance.h"

namespace sluice {
namespace {

using config::Algorithm;
using config::LimitConfig;
using config::PlanConfig;
using config::WindowSpec;

// 2026-11-30T12:00:00Z, as the rest of the suite.
const absl::Time kStart = absl::FromUnixSeconds(1796040000);

WindowSpec Window(absl::Duration d, std::string text) {
  return {.kind = WindowSpec::Kind::kFixed, .length = d, .text = std::move(text)};
}

LimitConfig Gcra(std::string name, int64_t quota, WindowSpec w, int64_t burst) {
  return {.name = std::move(name),
          .quota = quota,
          .window = std::move(w),
          .algorithm = Algorithm::kGcra,
          .burst = burst};
}

LimitConfig Sliding(std::string name, int64_t quota, WindowSpec w, std::vector<int> alert_at = {}) {
  return {.name = std::move(name),
          .quota = quota,
          .window = std::move(w),
          .alert_at = std::move(alert_at),
          .algorithm = Algorithm::kSliding};
}

}  // namespace

void AlgorithmConformanceTest::UseGcra(int64_t quota, int64_t burst, bool shadow) {
  LimitConfig rate = Gcra("rate", quota, Window(absl::Minutes(1), "1m"), burst);
  rate.shadow = shadow;
  UsePlans({PlanConfig{.name = "p", .timezone = "UTC", .limits = {rate}}});
}

void AlgorithmConformanceTest::UseSliding(int64_t quota, std::vector<int> alert_at) {
  UsePlans(
      {PlanConfig{.name = "p",
                  .timezone = "UTC",
                  .limits = {Sliding("rate", quota, Window(absl::Minutes(1), "1m"), alert_at)}}});
}

namespace {

// gcra ----------------------------------------------------------------------------------------

TEST_P(AlgorithmConformanceTest, GcraAdmitsItsBurstAtOnceThenOnePerInterval) {
  UseGcra(60, 10);  // one a second, ten at once
  Decision last;
  for (int i = 0; i < 10; ++i) {
    last = Check("u");
    ASSERT_TRUE(last.allowed) << i;
  }
  EXPECT_EQ(last.limits[0].used, 10);
  EXPECT_EQ(last.limits[0].remaining, 0);
  EXPECT_EQ(last.limits[0].reset_after, 10);  // until the bucket is full
  Decision denied = Check("u");
  EXPECT_FALSE(denied.allowed);
  EXPECT_TRUE(denied.limits[0].violated);
  EXPECT_EQ(denied.retry_after, 1);
  clock_->Advance(absl::Milliseconds(999));
  EXPECT_FALSE(Check("u").allowed);  // a denial consumes nothing
  clock_->Advance(absl::Milliseconds(1));
  EXPECT_TRUE(Check("u").allowed);
  EXPECT_FALSE(Check("u").allowed);
}

TEST_P(AlgorithmConformanceTest, GcraHasNoBoundaryBurst) {
  UseGcra(60, 10);
  clock_->Set(kStart + absl::Milliseconds(59500));
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(Check("u").allowed) << i;
  clock_->Set(kStart + absl::Seconds(60));  // a new minute: nothing is forgiven
  const Decision d = Check("u");
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.limits[0].used, 10);  // 9.5 s of debt: 10 units outstanding
  EXPECT_EQ(d.retry_after, 1);      // 0.5 s
  clock_->Set(kStart + absl::Milliseconds(60500));
  EXPECT_TRUE(Check("u").allowed);
  EXPECT_FALSE(Check("u").allowed);
}

TEST_P(AlgorithmConformanceTest, GcraTakesACostAtOnceAndRefusesOneAboveTheBurst) {
  UseGcra(60, 10);
  const Decision big = Check("u", 11);
  EXPECT_FALSE(big.allowed);
  EXPECT_TRUE(big.limits[0].violated);
  EXPECT_EQ(big.limits[0].remaining, 10);  // nothing consumed
  EXPECT_GE(big.retry_after, 1);
  const Decision four = Check("u", 4);
  EXPECT_TRUE(four.allowed);
  EXPECT_EQ(four.limits[0].remaining, 6);
  EXPECT_EQ(four.limits[0].reset_after, 4);
  EXPECT_TRUE(Check("u", 6).allowed);
  EXPECT_FALSE(Check("u", 1).allowed);
}

TEST_P(AlgorithmConformanceTest, GcraRefillsWhileIdle) {
  UseGcra(60, 10);
  ASSERT_TRUE(Check("u", 10).allowed);
  clock_->Advance(absl::Milliseconds(3500));
  const Decision peek = Check("u", 0);
  EXPECT_TRUE(peek.allowed);
  EXPECT_EQ(peek.limits[0].remaining, 3);  // 6.5 s of debt: 7 outstanding
  EXPECT_TRUE(Check("u", 3).allowed);
  const Decision denied = Check("u", 1);
  EXPECT_FALSE(denied.allowed);
  EXPECT_EQ(denied.retry_after, 1);  // 0.5 s
  clock_->Advance(absl::Seconds(10));
  const Decision full = Check("u", 0);
  EXPECT_EQ(full.limits[0].remaining, 10);
  EXPECT_EQ(full.limits[0].reset_after, 0);
}

TEST_P(AlgorithmConformanceTest, GcraReportsAreChargedPastTheBurstUpToAQuota) {
  UseGcra(60, 10);
  EXPECT_TRUE(Check("u", 0).allowed);  // a peek of a full bucket
  const Decision r = Report("u", 30);
  EXPECT_TRUE(r.allowed);
  EXPECT_EQ(r.limits[0].used, 30);
  EXPECT_FALSE(Check("u", 0).allowed);  // past the burst: even a peek is over
  const Decision d = Check("u");
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after, 21);  // 30 s of debt + 1 s - 10 s of tolerance
  const Decision capped = Report("u", 1000);
  EXPECT_EQ(capped.limits[0].used, 60);  // a quota's worth at most
  EXPECT_EQ(capped.limits[0].reset_after, 60);
  EXPECT_EQ(UsageOf("u")[0].used, 60 * 1'000'000);  // the store's debt, in microseconds
}

TEST_P(AlgorithmConformanceTest, GcraFollowsTheClockBothWays) {
  UseGcra(60, 10);
  ASSERT_TRUE(Check("u", 10).allowed);
  clock_->Advance(-absl::Seconds(5));  // back: the same debt is 5 s longer
  const Decision d = Check("u");
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after, 6);
  clock_->Advance(absl::Seconds(20));
  EXPECT_EQ(Check("u", 0).limits[0].remaining, 10);
  EXPECT_TRUE(Check("u", 10).allowed);
}

TEST_P(AlgorithmConformanceTest, AShadowGcraLimitNeverDeniesAndSaysWhenItWould) {
  UseGcra(60, 10, /*shadow=*/true);
  for (int i = 0; i < 10; ++i) ASSERT_FALSE(Check("u").limits[0].would_deny) << i;
  const Decision d = Check("u");
  EXPECT_TRUE(d.allowed);
  EXPECT_TRUE(d.limits[0].would_deny);
  EXPECT_FALSE(d.limits[0].violated);
  EXPECT_EQ(d.limits[0].used, 11);
}

TEST_P(AlgorithmConformanceTest, AGcraLimitInAPlanIsAllOrNothingWithTheOthers) {
  UsePlans(
      {PlanConfig{.name = "p",
                  .timezone = "UTC",
                  .limits = {LimitConfig{.name = "daily",
                                         .quota = 100,
                                         .window = {.kind = WindowSpec::Kind::kDay, .text = "day"}},
                             Gcra("rate", 60, Window(absl::Minutes(1), "1m"), 5)}}});
  ASSERT_TRUE(Check("u", 5).allowed);
  const Decision d = Check("u", 1);
  EXPECT_FALSE(d.allowed);
  EXPECT_FALSE(d.limits[0].violated);
  EXPECT_TRUE(d.limits[1].violated);
  EXPECT_EQ(UsageOf("u")[0].used, 5);  // the daily counter did not grow
  // And a daily limit that denies keeps the gcra one from moving.
  UsePlans(
      {PlanConfig{.name = "p",
                  .timezone = "UTC",
                  .limits = {LimitConfig{.name = "daily",
                                         .quota = 3,
                                         .window = {.kind = WindowSpec::Kind::kDay, .text = "day"}},
                             Gcra("rate", 60, Window(absl::Minutes(1), "1m"), 5)}}});
  const Decision daily = Check("v", 4);
  EXPECT_FALSE(daily.allowed);
  EXPECT_TRUE(daily.limits[0].violated);
  EXPECT_FALSE(daily.limits[1].violated);
  EXPECT_EQ(Check("v", 0).limits[1].remaining, 5);
}

TEST_P(AlgorithmConformanceTest, ALaterLimitsDenialLeavesSlidingAndGcraStatesAsTheyWere) {
  UsePlans({PlanConfig{
      .name = "p",
      .timezone = "UTC",
      .limits = {Sliding("s", 10, Window(absl::Minutes(1), "1m")),
                 Gcra("g", 60, Window(absl::Minutes(1), "1m"), 5),
                 LimitConfig{.name = "daily",
                             .quota = 5,
                             .window = {.kind = WindowSpec::Kind::kDay, .text = "day"}}}}});
  ASSERT_TRUE(Check("u", 2).allowed);
  clock_->Advance(absl::Seconds(30));  // the same minute, half gone
  const Decision d = Check("u", 4);    // sliding and gcra fit, the daily limit (2 + 4 > 5) not
  EXPECT_FALSE(d.allowed);
  EXPECT_FALSE(d.limits[0].violated);
  EXPECT_FALSE(d.limits[1].violated);
  EXPECT_TRUE(d.limits[2].violated);
  const Decision peek = Check("u", 0);
  EXPECT_EQ(peek.limits[0].used, 2);
  EXPECT_EQ(peek.limits[1].used, 0);  // 2 s of debt paid back in 30 s
  EXPECT_EQ(peek.limits[2].used, 2);
  EXPECT_TRUE(Check("u", 3).allowed);
}

TEST_P(AlgorithmConformanceTest, AnUnusableGcraStateIsExhaustedNeverRoom) {
  UseGcra(60, 10);
  Plant("u", 0, -5);
  EXPECT_FALSE(Check("u").allowed);
  EXPECT_FALSE(Check("u", 0).allowed);
  Plant("v", 0, 3 * 60'000'000 + 1);  // no decision writes more than three windows of debt
  EXPECT_FALSE(Check("v").allowed);
}

TEST_P(AlgorithmConformanceTest, AReloadThatChangesTheAlgorithmStartsTheLimitAfresh) {
  UsePlans(
      {PlanConfig{.name = "p",
                  .timezone = "UTC",
                  .limits = {LimitConfig{
                      .name = "rate", .quota = 10, .window = Window(absl::Minutes(1), "1m")}}}});
  ASSERT_TRUE(Check("u", 10).allowed);
  ASSERT_FALSE(Check("u").allowed);
  UseGcra(10, 10);
  EXPECT_TRUE(Check("u", 10).allowed);  // a full bucket: the fixed counter is not read
  UseSliding(10);
  EXPECT_TRUE(Check("u", 10).allowed);  // nothing counted yet
  UsePlans(
      {PlanConfig{.name = "p",
                  .timezone = "UTC",
                  .limits = {LimitConfig{
                      .name = "rate", .quota = 10, .window = Window(absl::Minutes(1), "1m")}}}});
  EXPECT_FALSE(Check("u").allowed);  // the fixed counter of this minute is still there
}

// sliding -------------------------------------------------------------------------------------

TEST_P(AlgorithmConformanceTest, SlidingStopsTheBoundaryBurst) {
  UseSliding(60);
  clock_->Set(kStart + absl::Seconds(59));
  for (int i = 0; i < 59; ++i) ASSERT_TRUE(Check("u").allowed) << i;
  clock_->Set(kStart + absl::Seconds(60));  // 59 still weigh in full
  const Decision one = Check("u");
  EXPECT_TRUE(one.allowed);
  EXPECT_EQ(one.limits[0].used, 60);
  const Decision denied = Check("u");
  EXPECT_FALSE(denied.allowed);
  EXPECT_TRUE(denied.limits[0].violated);
  EXPECT_EQ(denied.retry_after, 2);  // 61.017 s: the previous 59 weigh 58 from then on
  clock_->Set(kStart + absl::Microseconds(61'016'999));
  EXPECT_FALSE(Check("u").allowed);
  clock_->Set(kStart + absl::Microseconds(61'017'000));
  EXPECT_TRUE(Check("u").allowed);
  EXPECT_FALSE(Check("u").allowed);
}

TEST_P(AlgorithmConformanceTest, SlidingCountsOnlyThePreviousWindow) {
  UseSliding(60);
  ASSERT_TRUE(Check("u", 60).allowed);
  clock_->Advance(absl::Minutes(1));
  const Decision next = Check("u", 0);
  EXPECT_EQ(next.limits[0].used, 60);  // the whole previous minute weighs at its start
  EXPECT_EQ(next.limits[0].reset_after, 60);
  clock_->Advance(absl::Seconds(30));
  EXPECT_EQ(Check("u", 0).limits[0].used, 30);
  EXPECT_TRUE(Check("u", 30).allowed);
  EXPECT_FALSE(Check("u", 1).allowed);
  clock_->Advance(absl::Minutes(2));  // two windows later nothing counts
  const Decision later = Check("u", 60);
  EXPECT_TRUE(later.allowed);
  EXPECT_EQ(later.limits[0].used, 60);
  EXPECT_EQ(later.limits[0].reset_after, 90);  // this minute counts until the end of the next
}

TEST_P(AlgorithmConformanceTest, SlidingRoundsThePreviousWindowsShareUp) {
  UsePlans({PlanConfig{.name = "p",
                       .timezone = "UTC",
                       .limits = {Sliding("per_7s", 7, Window(absl::Seconds(7), "7s"))}}});
  // The next window of 7 s (windows are aligned to the epoch).
  const absl::Time next = absl::FromUnixSeconds((absl::ToUnixSeconds(kStart) / 7 + 1) * 7);
  ASSERT_TRUE(Check("u", 7).allowed);
  // One second into the next window the exact share is 6; rounded up from 857142.86 ppm it is
  // still above 6 until 6/7 of a window is left, 1.000006 s in.
  clock_->Set(next + absl::Seconds(1));
  EXPECT_FALSE(Check("u", 1).allowed);
  clock_->Set(next + absl::Microseconds(1'000'005));
  EXPECT_FALSE(Check("u", 1).allowed);
  clock_->Set(next + absl::Microseconds(1'000'006));
  EXPECT_TRUE(Check("u", 1).allowed);
}

TEST_P(AlgorithmConformanceTest, SlidingAlertsFireOncePerWindowOnTheEstimate) {
  UseSliding(60, {80, 100});
  for (int i = 0; i < 47; ++i) ASSERT_TRUE(Check("u").allowed);
  EXPECT_TRUE(harness_->TakeEvents().empty());
  ASSERT_TRUE(Check("u").allowed);  // 48: 80%
  std::vector<AlertEvent> events;
  harness_->RunUntil([&] {
    for (AlertEvent& e : harness_->TakeEvents()) events.push_back(std::move(e));
    return !events.empty();
  });
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].threshold, 80);
  EXPECT_EQ(events[0].used, 48);
  ASSERT_TRUE(Check("u").allowed);  // 49: nothing more
  clock_->Advance(absl::Minutes(1));
  // A new window: the 49 of the last one weigh in full, so its first admission is at 80% again.
  ASSERT_TRUE(Check("u").allowed);
  events.clear();
  harness_->RunUntil([&] {
    for (AlertEvent& e : harness_->TakeEvents()) events.push_back(std::move(e));
    return !events.empty();
  });
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].threshold, 80);
  EXPECT_EQ(events[0].used, 50);
  EXPECT_EQ(events[0].window_start, kStart + absl::Minutes(1));
}

TEST_P(AlgorithmConformanceTest, SlidingReportsAndShadowChargesStopAtTheLargestCount) {
  UseSliding(10);
  const Decision r = Report("u", 1'000'000);
  EXPECT_TRUE(r.allowed);
  EXPECT_EQ(r.limits[0].used, 1'000'000);
  EXPECT_FALSE(Check("u", 0).allowed);
  for (int i = 0; i < 10; ++i) Report("u", 1'000'000);
  EXPECT_EQ(UsageOf("u")[0].used, config::kMaxSlidingCount);
}

TEST_P(AlgorithmConformanceTest, AnUnusableSlidingCounterIsExhaustedNeverRoom) {
  UseSliding(10);
  Plant("u", 0, 99'999'999);  // a current count no decision can reach
  EXPECT_FALSE(Check("u").allowed);
  EXPECT_FALSE(Check("u", 0).allowed);
  Plant("v", 0, -1);
  EXPECT_FALSE(Check("v").allowed);
}

// The documented worst case, reached: q at the very end of a window, then everything the next
// window admits before its end, all inside one window's length.
TEST_P(AlgorithmConformanceTest, SlidingAdmitsAtMostTwiceTheQuotaLessOneInAnyWindow) {
  UseSliding(10);
  std::vector<absl::Time> admitted;
  clock_->Set(kStart + absl::Milliseconds(59'999));
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(Check("u").allowed);
    admitted.push_back(clock_->Now());
  }
  for (int step = 1; step < 600; ++step) {
    clock_->Set(kStart + absl::Seconds(60) + step * absl::Milliseconds(100) -
                absl::Microseconds(1));
    if (Check("u").allowed) admitted.push_back(clock_->Now());
  }
  size_t most = 0;
  for (size_t i = 0; i < admitted.size(); ++i) {
    size_t n = 0;
    for (size_t j = i; j < admitted.size() && admitted[j] - admitted[i] < absl::Minutes(1); ++j) {
      ++n;
    }
    most = std::max(most, n);
  }
  EXPECT_EQ(most, 19u);
}

// Seeded random traffic: every window of either limit's length, and shorter ones, keep the
// documented bounds: sliding q + floor(q * d / W) for d <= W (2q - 1 at d = W), gcra
// burst + floor(d / interval).
TEST_P(AlgorithmConformanceTest, BothAlgorithmsKeepTheirBoundsUnderRandomTraffic) {
  for (const bool gcra : {false, true}) {
    if (gcra) {
      UseGcra(60, 10);
    } else {
      UseSliding(20);
    }
    const std::string subject = gcra ? "g" : "s";
    std::mt19937 random(gcra ? 7 : 11);
    std::vector<std::pair<absl::Time, int64_t>> admitted;
    absl::Time t = kStart + absl::Seconds(1);
    for (int i = 0; i < 2000; ++i) {
      t += absl::Milliseconds(std::uniform_int_distribution<int>(0, 400)(random));
      clock_->Set(t);
      const int64_t cost = std::uniform_int_distribution<int>(1, 3)(random);
      if (Check(subject, cost).allowed) admitted.emplace_back(t, cost);
    }
    ASSERT_GT(admitted.size(), 100u);
    for (const absl::Duration d : {absl::Seconds(1), absl::Seconds(15), absl::Seconds(60)}) {
      const int64_t bound = gcra
                                ? 10 + d / absl::Seconds(1)
                                : 20 + 20 * absl::ToInt64Seconds(d) / 60 - (d == absl::Seconds(60));
      for (size_t i = 0; i < admitted.size(); ++i) {
        int64_t units = 0;
        for (size_t j = i; j < admitted.size() && admitted[j].first - admitted[i].first < d; ++j) {
          units += admitted[j].second;
        }
        ASSERT_LE(units, bound) << (gcra ? "gcra" : "sliding") << " d=" << d;
      }
    }
  }
}

}  // namespace
}  // namespace sluice
