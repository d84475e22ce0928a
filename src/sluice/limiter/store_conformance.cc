#include "sluice/limiter/store_conformance.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <ostream>
#include <utility>
#include <vector>

#include "absl/time/civil_time.h"

namespace sluice {
namespace {

using config::LimitConfig;
using config::PlanConfig;
using config::WindowSpec;

WindowSpec Fixed(absl::Duration d, std::string text) {
  return {.kind = WindowSpec::Kind::kFixed, .length = d, .text = std::move(text)};
}
WindowSpec Day() { return {.kind = WindowSpec::Kind::kDay, .text = "day"}; }
WindowSpec Week() { return {.kind = WindowSpec::Kind::kWeek, .text = "week"}; }
WindowSpec Year() { return {.kind = WindowSpec::Kind::kYear, .text = "year"}; }

LimitConfig MakeLimit(std::string name, int64_t quota, WindowSpec w,
                      std::vector<int> alert_at = {}) {
  return {.name = std::move(name), .quota = quota, .window = std::move(w), .alert_at = alert_at};
}

// 2026-11-30T12:00:00Z: 12 hours into a UTC day, on a minute boundary.
const absl::Time kStart = absl::FromUnixSeconds(1796040000);

}  // namespace

void StoreConformanceTest::SetUp() {
  harness_ = GetParam().make();
  clock_ = std::make_unique<FakeClock>(kStart);
  // The default plan "p": 10 per minute with alerts at 80 and 100.
  UsePlans({PlanConfig{
      .name = "p",
      .timezone = "UTC",
      .limits = {MakeLimit("per_minute", 10, Fixed(absl::Minutes(1), "1m"), {80, 100})}}});
}

void StoreConformanceTest::UsePlans(std::vector<PlanConfig> plans) {
  config::Config cfg;
  cfg.plans = std::move(plans);
  absl::StatusOr<PlanSet> set = PlanSet::FromConfig(cfg);
  ASSERT_TRUE(set.ok()) << set.status();
  limiter_ = std::make_unique<Limiter>(std::move(*set), &harness_->store(), clock_.get(),
                                       LimiterOptions{});
}

Decision StoreConformanceTest::Check(const std::string& subject, int64_t cost,
                                     const std::string& plan) {
  std::optional<absl::StatusOr<Decision>> out;
  limiter_->Decide({.subject = subject, .plan = plan, .cost = cost},
                   [&](absl::StatusOr<Decision> d) { out = std::move(d); });
  harness_->RunUntil([&] { return out.has_value(); });
  EXPECT_TRUE(out.has_value() && out->ok()) << (out ? out->status().ToString() : "no answer");
  return out.has_value() && out->ok() ? **out : Decision{};
}

Decision StoreConformanceTest::Report(const std::string& subject, int64_t cost,
                                      const std::string& plan) {
  std::optional<absl::StatusOr<Decision>> out;
  limiter_->Decide({.subject = subject, .plan = plan, .cost = cost, .mode = DecideMode::kReport},
                   [&](absl::StatusOr<Decision> d) { out = std::move(d); });
  harness_->RunUntil([&] { return out.has_value(); });
  EXPECT_TRUE(out.has_value() && out->ok()) << (out ? out->status().ToString() : "no answer");
  return out.has_value() && out->ok() ? **out : Decision{};
}

Decision StoreConformanceTest::CheckWith(const std::string& subject, const Plan& plan,
                                         int64_t cost) {
  std::optional<absl::StatusOr<Decision>> out;
  limiter_->Decide({.subject = subject, .cost = cost, .effective_plan = &plan},
                   [&](absl::StatusOr<Decision> d) { out = std::move(d); });
  harness_->RunUntil([&] { return out.has_value(); });
  EXPECT_TRUE(out.has_value() && out->ok()) << (out ? out->status().ToString() : "no answer");
  return out.has_value() && out->ok() ? **out : Decision{};
}

const Plan& StoreConformanceTest::PlanNamed(const std::string& name) {
  const Plan* plan = limiter_->plans().Find(name);
  EXPECT_NE(plan, nullptr) << name;
  return *plan;
}

std::vector<LimitUsage> StoreConformanceTest::UsageOf(const std::string& subject,
                                                      const std::string& plan) {
  std::optional<absl::StatusOr<std::vector<LimitUsage>>> out;
  limiter_->Usage(subject, plan,
                  [&](absl::StatusOr<std::vector<LimitUsage>> u) { out = std::move(u); });
  harness_->RunUntil([&] { return out.has_value(); });
  EXPECT_TRUE(out.has_value() && out->ok());
  return out.has_value() && out->ok() ? **out : std::vector<LimitUsage>{};
}

void StoreConformanceTest::ResetUsage(const std::string& subject, const std::string& limit,
                                      const std::string& plan) {
  std::optional<absl::Status> out;
  limiter_->Reset(subject, plan, limit, [&](absl::Status s) { out = std::move(s); });
  harness_->RunUntil([&] { return out.has_value(); });
  EXPECT_TRUE(out.has_value() && out->ok());
}

void StoreConformanceTest::Plant(const std::string& subject, size_t limit, int64_t value,
                                 const std::string& plan_name, const std::string& group) {
  const Plan* plan = limiter_->plans().Find(plan_name);
  ASSERT_NE(plan, nullptr);
  std::vector<WindowBounds> windows;
  for (const Limit& l : plan->limits) {
    windows.push_back(l.window_cache->Get(l.window, plan->tz, clock_->Now()));
  }
  harness_->PlantCounter({.subject = subject,
                          .group = group,
                          .plan = plan,
                          .cost = 0,
                          .now = clock_->Now(),
                          .windows = windows},
                         limit, value);
}

std::vector<Decision> StoreConformanceTest::Group(
    const std::vector<std::pair<std::string, int64_t>>& parts, const std::string& plan,
    const std::string& group, DecideMode mode) {
  std::vector<GroupPart> group_parts;
  for (const auto& [subject, cost] : parts) {
    group_parts.push_back(
        {.subject = subject, .plan = &PlanNamed(plan), .cost = cost, .mode = mode});
  }
  std::optional<absl::StatusOr<std::vector<Decision>>> out;
  limiter_->DecideGroup(group, group_parts,
                        [&](absl::StatusOr<std::vector<Decision>> d) { out = std::move(d); });
  harness_->RunUntil([&] { return out.has_value(); });
  EXPECT_TRUE(out.has_value() && out->ok()) << (out ? out->status().ToString() : "no answer");
  if (!out.has_value() || !out->ok()) return std::vector<Decision>(parts.size());
  EXPECT_EQ((*out)->size(), parts.size());
  return **out;
}

std::optional<absl::Time> StoreConformanceTest::ExpiryOf(const std::string& subject, size_t limit,
                                                         const std::string& plan_name) {
  const Plan& plan = PlanNamed(plan_name);
  std::vector<WindowBounds> windows;
  for (const Limit& l : plan.limits) {
    windows.push_back(l.window_cache->Get(l.window, plan.tz, clock_->Now()));
  }
  return harness_->ExpiryOf(
      {.subject = subject, .plan = &plan, .cost = 0, .now = clock_->Now(), .windows = windows},
      limit);
}

std::vector<LimitUsage> StoreConformanceTest::GroupUsageOf(const std::string& subject,
                                                           const std::string& plan_name,
                                                           const std::string& group) {
  const Plan& plan = PlanNamed(plan_name);
  std::vector<WindowBounds> windows;
  for (const Limit& l : plan.limits) {
    windows.push_back(l.window_cache->Get(l.window, plan.tz, clock_->Now()));
  }
  std::optional<absl::StatusOr<std::vector<LimitUsage>>> out;
  harness_->store().Usage({.subject = subject,
                           .group = group,
                           .plan = &plan,
                           .cost = 0,
                           .now = clock_->Now(),
                           .windows = windows},
                          [&](absl::StatusOr<std::vector<LimitUsage>> u) { out = std::move(u); });
  harness_->RunUntil([&] { return out.has_value(); });
  EXPECT_TRUE(out.has_value() && out->ok());
  return out.has_value() && out->ok() ? **out : std::vector<LimitUsage>{};
}

namespace {

// Two limits with different windows, for all-or-nothing and retry_after.
std::vector<PlanConfig> TwoLimitPlan(int64_t minute_quota, int64_t hour_quota) {
  return {
      PlanConfig{.name = "p",
                 .timezone = "UTC",
                 .limits = {MakeLimit("per_minute", minute_quota, Fixed(absl::Minutes(1), "1m")),
                            MakeLimit("per_hour", hour_quota, Fixed(absl::Hours(1), "1h"))}}};
}

TEST_P(StoreConformanceTest, AdmitsUpToTheQuotaThenDenies) {
  for (int i = 1; i <= 10; ++i) {
    Decision d = Check("alice");
    ASSERT_TRUE(d.allowed) << "request " << i;
    EXPECT_EQ(d.limits[0].used, i);
  }
  Decision d = Check("alice");
  EXPECT_FALSE(d.allowed);
  EXPECT_FALSE(d.degraded);
  EXPECT_EQ(d.limits[0].used, 10);
  EXPECT_EQ(d.limits[0].remaining, 0);
}

TEST_P(StoreConformanceTest, CostIsAddedWhole) {
  Decision d = Check("alice", 7);
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.limits[0].used, 7);
  EXPECT_EQ(d.limits[0].remaining, 3);
  EXPECT_TRUE(Check("alice", 3).allowed);
}

TEST_P(StoreConformanceTest, DeniedRequestConsumesNothing) {
  ASSERT_TRUE(Check("alice", 8).allowed);
  Decision denied = Check("alice", 3);
  EXPECT_FALSE(denied.allowed);
  EXPECT_EQ(denied.limits[0].used, 8);
  Decision fits = Check("alice", 2);
  EXPECT_TRUE(fits.allowed);
  EXPECT_EQ(fits.limits[0].used, 10);
}

TEST_P(StoreConformanceTest, HammeringWhileBlockedDoesNotGrowUsage) {
  ASSERT_TRUE(Check("alice", 10).allowed);
  for (int i = 0; i < 50; ++i) ASSERT_FALSE(Check("alice").allowed);
  EXPECT_EQ(UsageOf("alice")[0].used, 10);
}

TEST_P(StoreConformanceTest, AdmissionIsAllOrNothingAcrossLimits) {
  UsePlans(TwoLimitPlan(/*minute_quota=*/5, /*hour_quota=*/3));
  ASSERT_TRUE(Check("alice", 3).allowed);
  Decision d = Check("alice");
  EXPECT_FALSE(d.allowed);
  // The minute limit had room, but the hour limit refused, so neither counter moved.
  EXPECT_EQ(d.limits[0].used, 3);
  EXPECT_FALSE(d.limits[0].violated);
  EXPECT_EQ(d.limits[1].used, 3);
  EXPECT_TRUE(d.limits[1].violated);
  std::vector<LimitUsage> u = UsageOf("alice");
  EXPECT_EQ(u[0].used, 3);
  EXPECT_EQ(u[1].used, 3);
}

TEST_P(StoreConformanceTest, CostZeroPeeksWithoutConsuming) {
  ASSERT_TRUE(Check("alice", 4).allowed);
  Decision peek = Check("alice", 0);
  EXPECT_TRUE(peek.allowed);
  EXPECT_EQ(peek.limits[0].used, 4);
  EXPECT_EQ(UsageOf("alice")[0].used, 4);
}

TEST_P(StoreConformanceTest, CostZeroOnAnExhaustedLimitIsAllowedAndFiresNothing) {
  ASSERT_TRUE(Check("alice", 10).allowed);
  (void)harness_->TakeEvents();
  Decision peek = Check("alice", 0);
  EXPECT_TRUE(peek.allowed);  // 10 + 0 <= 10
  EXPECT_EQ(peek.limits[0].remaining, 0);
  EXPECT_TRUE(harness_->TakeEvents().empty());
}

TEST_P(StoreConformanceTest, ReportsQuotaRemainingAndResetPerLimit) {
  clock_->Advance(absl::Seconds(18));  // 42 s left in the minute
  Decision d = Check("alice", 2);
  ASSERT_EQ(d.limits.size(), 1u);
  EXPECT_EQ(d.limits[0].limit->name, "per_minute");
  EXPECT_EQ(d.limits[0].limit->quota, 10);
  EXPECT_EQ(d.limits[0].used, 2);
  EXPECT_EQ(d.limits[0].remaining, 8);
  EXPECT_EQ(d.limits[0].reset_after, 42);
  EXPECT_EQ(d.limits[0].window_start, kStart);
  EXPECT_EQ(d.limits[0].window_end, kStart + absl::Minutes(1));
  EXPECT_EQ(d.retry_after, 0);
}

TEST_P(StoreConformanceTest, RetryAfterIsWhenEveryViolatedLimitHasReset) {
  UsePlans(TwoLimitPlan(/*minute_quota=*/2, /*hour_quota=*/2));
  clock_->Advance(absl::Seconds(30));
  ASSERT_TRUE(Check("alice", 2).allowed);
  Decision d = Check("alice");
  EXPECT_FALSE(d.allowed);
  EXPECT_TRUE(d.limits[0].violated);
  EXPECT_TRUE(d.limits[1].violated);
  // Minute resets in 30 s, hour in 59 min 30 s: the request can succeed only after both.
  EXPECT_EQ(d.retry_after, 3570);
}

TEST_P(StoreConformanceTest, RetryAfterIgnoresLimitsThatDidNotDeny) {
  UsePlans(TwoLimitPlan(/*minute_quota=*/2, /*hour_quota=*/100));
  clock_->Advance(absl::Seconds(30));
  ASSERT_TRUE(Check("alice", 2).allowed);
  Decision d = Check("alice");
  EXPECT_FALSE(d.allowed);
  EXPECT_TRUE(d.limits[0].violated);
  EXPECT_FALSE(d.limits[1].violated);
  EXPECT_EQ(d.retry_after, 30);
}

TEST_P(StoreConformanceTest, CounterStartsFromZeroInTheNextWindow) {
  ASSERT_TRUE(Check("alice", 10).allowed);
  ASSERT_FALSE(Check("alice").allowed);
  clock_->Advance(absl::Minutes(1));
  Decision d = Check("alice");
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.limits[0].used, 1);
}

TEST_P(StoreConformanceTest, SubjectsAreCountedSeparately) {
  ASSERT_TRUE(Check("alice", 10).allowed);
  Decision bob = Check("bob");
  EXPECT_TRUE(bob.allowed);
  EXPECT_EQ(bob.limits[0].used, 1);
}

TEST_P(StoreConformanceTest, DailyWindowResetsAtMidnightInThePlansZone) {
  // Ho Chi Minh City is UTC+7: local midnight is 17:00 UTC, five hours after kStart.
  UsePlans({PlanConfig{
      .name = "p", .timezone = "Asia/Ho_Chi_Minh", .limits = {MakeLimit("daily", 3, Day())}}});
  ASSERT_TRUE(Check("alice", 3).allowed);
  Decision denied = Check("alice");
  EXPECT_FALSE(denied.allowed);
  EXPECT_EQ(denied.retry_after, 5 * 3600);
  clock_->Advance(absl::Hours(5) - absl::Seconds(1));
  EXPECT_FALSE(Check("alice").allowed);
  clock_->Advance(absl::Seconds(1));
  EXPECT_TRUE(Check("alice").allowed);
}

TEST_P(StoreConformanceTest, WeeklyWindowResetsAtMondayMidnightInThePlansZone) {
  // kStart is Monday 2026-11-30 07:00 in New York; the week ends Monday 2026-12-07 00:00 EST.
  UsePlans({PlanConfig{
      .name = "p", .timezone = "America/New_York", .limits = {MakeLimit("weekly", 3, Week())}}});
  ASSERT_TRUE(Check("alice", 3).allowed);
  Decision denied = Check("alice");
  EXPECT_FALSE(denied.allowed);
  EXPECT_EQ(denied.retry_after, (6 * 24 + 17) * 3600);
  clock_->Advance(absl::Hours(6 * 24 + 17) - absl::Seconds(1));
  EXPECT_FALSE(Check("alice").allowed);
  clock_->Advance(absl::Seconds(1));
  EXPECT_EQ(Check("alice").limits[0].used, 1);
}

TEST_P(StoreConformanceTest, YearlyWindowKeepsCountingAcrossMonthsAndResetsAtNewYear) {
  // Paris is UTC+1 in winter: its 2027 begins at 2026-12-31T23:00Z, 31 days and 11 hours after
  // kStart.
  UsePlans({PlanConfig{
      .name = "p", .timezone = "Europe/Paris", .limits = {MakeLimit("yearly", 3, Year())}}});
  ASSERT_TRUE(Check("alice", 2).allowed);
  clock_->Advance(absl::Hours(24 * 2));  // December: another month, the same year
  ASSERT_TRUE(Check("alice").allowed);
  Decision denied = Check("alice");
  EXPECT_FALSE(denied.allowed);
  EXPECT_EQ(denied.limits[0].used, 3);
  EXPECT_EQ(denied.retry_after, (29 * 24 + 11) * 3600);
  clock_->Advance(absl::Hours(29 * 24 + 11) - absl::Seconds(1));
  EXPECT_FALSE(Check("alice").allowed);
  clock_->Advance(absl::Seconds(1));
  Decision next_year = Check("alice");
  EXPECT_TRUE(next_year.allowed);
  EXPECT_EQ(next_year.limits[0].used, 1);
  EXPECT_EQ(next_year.limits[0].window_end - next_year.limits[0].window_start,
            absl::Hours(24 * 365));
}

TEST_P(StoreConformanceTest, ThresholdFiresOnceAtTheFirstRequestThatReachesIt) {
  for (int i = 1; i <= 7; ++i) ASSERT_TRUE(Check("alice").allowed);
  EXPECT_TRUE(harness_->TakeEvents().empty());
  ASSERT_TRUE(Check("alice").allowed);  // used 8 = 80% of 10
  std::vector<AlertEvent> events = harness_->TakeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].threshold, 80);
  EXPECT_EQ(events[0].used, 8);
  ASSERT_TRUE(Check("alice").allowed);  // 9: nothing new
  EXPECT_TRUE(harness_->TakeEvents().empty());
  ASSERT_TRUE(Check("alice").allowed);  // 10 = 100%
  events = harness_->TakeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].threshold, 100);
  EXPECT_EQ(events[0].used, 10);
  ASSERT_FALSE(Check("alice").allowed);  // 100% already fired: a denial adds nothing
  EXPECT_TRUE(harness_->TakeEvents().empty());
}

TEST_P(StoreConformanceTest, AlertEventCarriesTheDecisionsFacts) {
  clock_->Advance(absl::Seconds(5));
  ASSERT_TRUE(Check("alice", 8).allowed);
  std::vector<AlertEvent> events = harness_->TakeEvents();
  ASSERT_EQ(events.size(), 1u);
  const AlertEvent& e = events[0];
  EXPECT_EQ(e.subject, "alice");
  EXPECT_EQ(e.plan, "p");
  EXPECT_EQ(e.limit, "per_minute");
  EXPECT_EQ(e.threshold, 80);
  EXPECT_EQ(e.used, 8);
  EXPECT_EQ(e.quota, 10);
  EXPECT_EQ(e.window_start, kStart);
  EXPECT_EQ(e.window_end, kStart + absl::Minutes(1));
  EXPECT_EQ(e.occurred_at, kStart + absl::Seconds(5));
}

TEST_P(StoreConformanceTest, OneRequestCanCrossSeveralThresholds) {
  ASSERT_TRUE(Check("alice", 10).allowed);
  std::vector<AlertEvent> events = harness_->TakeEvents();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].threshold, 80);
  EXPECT_EQ(events[1].threshold, 100);
}

TEST_P(StoreConformanceTest, HundredPercentFiresAtTheFirstDenialOfThatLimit) {
  ASSERT_TRUE(Check("alice", 5).allowed);
  Decision d = Check("alice", 6);  // 5 + 6 > 10
  EXPECT_FALSE(d.allowed);
  std::vector<AlertEvent> events = harness_->TakeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].threshold, 100);
  EXPECT_EQ(events[0].used, 5);
  ASSERT_FALSE(Check("alice", 6).allowed);
  EXPECT_TRUE(harness_->TakeEvents().empty());
  ASSERT_TRUE(Check("alice", 5).allowed);  // reaching 100% later does not fire it again
  events = harness_->TakeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].threshold, 80);
}

TEST_P(StoreConformanceTest, DenialByAnotherLimitFiresNothingHere) {
  UsePlans({PlanConfig{.name = "p",
                       .limits = {MakeLimit("a", 100, Fixed(absl::Minutes(1), "1m"), {100}),
                                  MakeLimit("b", 1, Fixed(absl::Minutes(1), "1m"))}}});
  ASSERT_TRUE(Check("alice").allowed);
  ASSERT_FALSE(Check("alice").allowed);  // b denies; a is at 1/100
  EXPECT_TRUE(harness_->TakeEvents().empty());
}

TEST_P(StoreConformanceTest, ThresholdCountIsRoundedUp) {
  UsePlans({PlanConfig{.name = "p",
                       .limits = {MakeLimit("m", 7, Fixed(absl::Minutes(1), "1m"), {50})}}});
  ASSERT_TRUE(Check("alice", 3).allowed);  // 3 < ceil(3.5)
  EXPECT_TRUE(harness_->TakeEvents().empty());
  ASSERT_TRUE(Check("alice").allowed);
  ASSERT_EQ(harness_->TakeEvents().size(), 1u);
}

TEST_P(StoreConformanceTest, ThresholdsReArmInTheNextWindow) {
  ASSERT_TRUE(Check("alice", 8).allowed);
  ASSERT_EQ(harness_->TakeEvents().size(), 1u);
  clock_->Advance(absl::Minutes(1));
  ASSERT_TRUE(Check("alice", 8).allowed);
  std::vector<AlertEvent> events = harness_->TakeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].window_start, kStart + absl::Minutes(1));
  EXPECT_NE(events[0].Id(), AlertEvent{}.Id());
}

TEST_P(StoreConformanceTest, UsageShowsCountersAndFiredThresholdsWithoutConsuming) {
  ASSERT_TRUE(Check("alice", 8).allowed);
  std::vector<LimitUsage> u = UsageOf("alice");
  ASSERT_EQ(u.size(), 1u);
  EXPECT_EQ(u[0].used, 8);
  EXPECT_EQ(u[0].fired, std::vector<int>{80});
  EXPECT_EQ(UsageOf("alice")[0].used, 8);
  EXPECT_EQ(UsageOf("nobody")[0].used, 0);
}

TEST_P(StoreConformanceTest, ResetClearsCountersAndRearmsAlerts) {
  ASSERT_TRUE(Check("alice", 8).allowed);
  ASSERT_EQ(harness_->TakeEvents().size(), 1u);
  ResetUsage("alice");
  EXPECT_EQ(UsageOf("alice")[0].used, 0);
  ASSERT_TRUE(Check("alice", 8).allowed);
  EXPECT_EQ(harness_->TakeEvents().size(), 1u);
}

// The plan "p" of SetUp, with its limit's alert percentages replaced (a reload).
std::vector<PlanConfig> MinutePlanAlertingAt(std::vector<int> alert_at) {
  return {PlanConfig{
      .name = "p",
      .timezone = "UTC",
      .limits = {MakeLimit("per_minute", 10, Fixed(absl::Minutes(1), "1m"), std::move(alert_at))}}};
}

std::vector<int> Thresholds(const std::vector<AlertEvent>& events) {
  std::vector<int> out;
  for (const AlertEvent& e : events) out.push_back(e.threshold);
  return out;
}

TEST_P(StoreConformanceTest, AReloadThatAddsAPercentageResendsNothingAlreadySent) {
  ASSERT_TRUE(Check("alice", 8).allowed);
  ASSERT_EQ(Thresholds(harness_->TakeEvents()), std::vector<int>{80});
  UsePlans(MinutePlanAlertingAt({50, 80, 100}));
  EXPECT_EQ(UsageOf("alice")[0].fired, std::vector<int>{80});
  // 50% is new and already reached: it fires once; 80% was sent in this window and does not.
  ASSERT_TRUE(Check("alice").allowed);
  EXPECT_EQ(Thresholds(harness_->TakeEvents()), std::vector<int>{50});
  ASSERT_TRUE(Check("alice").allowed);
  EXPECT_EQ(Thresholds(harness_->TakeEvents()), std::vector<int>{100});
  EXPECT_EQ(UsageOf("alice")[0].fired, (std::vector<int>{50, 80, 100}));
}

TEST_P(StoreConformanceTest, AReloadThatRemovesAPercentageLeavesTheOthersArmed) {
  UsePlans(MinutePlanAlertingAt({50, 80, 100}));
  ASSERT_TRUE(Check("alice", 8).allowed);
  ASSERT_EQ(Thresholds(harness_->TakeEvents()), (std::vector<int>{50, 80}));
  UsePlans(MinutePlanAlertingAt({80, 100}));
  EXPECT_EQ(UsageOf("alice")[0].fired, std::vector<int>{80});
  ASSERT_TRUE(Check("alice", 2).allowed);
  EXPECT_EQ(Thresholds(harness_->TakeEvents()), std::vector<int>{100});
}

TEST_P(StoreConformanceTest, ResetOfOneLimitKeepsTheOthers) {
  UsePlans(TwoLimitPlan(10, 10));
  ASSERT_TRUE(Check("alice", 4).allowed);
  ResetUsage("alice", "per_minute");
  std::vector<LimitUsage> u = UsageOf("alice");
  EXPECT_EQ(u[0].used, 0);
  EXPECT_EQ(u[1].used, 4);
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// Usage follows the subject: counters and alert flags belong to (subject, limit name and window),
// never to the plan, and thresholds fire once per subject, limit, window and effective quota.

// free: 5,000 a day; pro: 100,000 a day and a per-minute limit free does not have. Both alert at
// 80% and 100% of `daily`.
std::vector<PlanConfig> FreeAndPro() {
  return {PlanConfig{.name = "free",
                     .timezone = "UTC",
                     .limits = {MakeLimit("daily", 5000, Day(), {80, 100})}},
          PlanConfig{.name = "pro",
                     .timezone = "UTC",
                     .limits = {MakeLimit("daily", 100000, Day(), {80, 100}),
                                MakeLimit("per_minute", 1000000, Fixed(absl::Minutes(1), "1m"))}}};
}

struct Fired {
  std::string plan;
  int threshold;
  int64_t quota;
  friend bool operator==(const Fired&, const Fired&) = default;
  friend std::ostream& operator<<(std::ostream& os, const Fired& f) {
    return os << f.plan << " " << f.threshold << "% of " << f.quota;
  }
};
std::vector<Fired> FiredOf(const std::vector<AlertEvent>& events) {
  std::vector<Fired> out;
  for (const AlertEvent& e : events) out.push_back({e.plan, e.threshold, e.quota});
  return out;
}

TEST_P(StoreConformanceTest, APlanChangeMidWindowKeepsTheUsage) {
  UsePlans(FreeAndPro());
  ASSERT_TRUE(Check("alice", 3000, "free").allowed);
  Decision pro = Check("alice", 1, "pro");
  EXPECT_TRUE(pro.allowed);
  EXPECT_EQ(pro.limits[0].used, 3001);
  EXPECT_EQ(pro.limits[0].limit->quota, 100000);
  EXPECT_EQ(pro.limits[0].remaining, 96999);
  EXPECT_EQ(pro.limits[1].used, 1);  // only pro has it: it starts at 0
  std::vector<LimitUsage> u = UsageOf("alice", "free");
  EXPECT_EQ(u[0].used, 3001);
}

TEST_P(StoreConformanceTest, TheNewQuotaAppliesFromTheNextRequest) {
  UsePlans(FreeAndPro());
  ASSERT_TRUE(Check("alice", 4000, "pro").allowed);
  Decision free = Check("alice", 1001, "free");
  EXPECT_FALSE(free.allowed);
  EXPECT_EQ(free.limits[0].used, 4000);
  EXPECT_TRUE(Check("alice", 1000, "free").allowed);
  EXPECT_TRUE(Check("alice", 1, "pro").allowed);
}

TEST_P(StoreConformanceTest, ALimitOfTheSameNameButAnotherWindowIsAnotherCounter) {
  UsePlans({PlanConfig{.name = "p", .limits = {MakeLimit("m", 5, Fixed(absl::Minutes(1), "1m"))}},
            PlanConfig{.name = "q", .limits = {MakeLimit("m", 5, Fixed(absl::Hours(1), "1h"))}},
            PlanConfig{.name = "r", .limits = {MakeLimit("m", 5, Fixed(absl::Seconds(60), "60s"))}},
            PlanConfig{.name = "s", .limits = {MakeLimit("n", 5, Fixed(absl::Minutes(1), "1m"))}}});
  ASSERT_TRUE(Check("alice", 2, "p").allowed);
  EXPECT_EQ(Check("alice", 1, "q").limits[0].used, 1);
  EXPECT_EQ(Check("alice", 1, "s").limits[0].used, 1);
  // "60s" is the window "1m" is: the same limit.
  EXPECT_EQ(Check("alice", 1, "r").limits[0].used, 3);
}

TEST_P(StoreConformanceTest, ADayInAnotherTimeZoneIsAnotherCounter) {
  UsePlans(
      {PlanConfig{.name = "utc", .timezone = "UTC", .limits = {MakeLimit("daily", 5, Day())}},
       PlanConfig{
           .name = "hcm", .timezone = "Asia/Ho_Chi_Minh", .limits = {MakeLimit("daily", 5, Day())}},
       PlanConfig{.name = "utc2", .timezone = "UTC", .limits = {MakeLimit("daily", 9, Day())}}});
  ASSERT_TRUE(Check("alice", 2, "utc").allowed);
  EXPECT_EQ(Check("alice", 1, "hcm").limits[0].used, 1);   // another zone: reads as 0
  EXPECT_EQ(Check("alice", 1, "utc2").limits[0].used, 3);  // the same zone: the same counter
  EXPECT_EQ(Check("alice", 1, "hcm").limits[0].used, 2);
}

TEST_P(StoreConformanceTest, AnUpgradeReArmsAThresholdAlreadySentUnderTheOldQuota) {
  UsePlans(FreeAndPro());
  ASSERT_TRUE(Check("alice", 4000, "free").allowed);
  EXPECT_EQ(FiredOf(harness_->TakeEvents()), (std::vector<Fired>{{"free", 80, 5000}}));
  ASSERT_TRUE(Check("alice", 75999, "pro").allowed);  // 79,999
  EXPECT_TRUE(harness_->TakeEvents().empty());
  EXPECT_TRUE(UsageOf("alice", "pro")[0].fired.empty());
  ASSERT_TRUE(Check("alice", 1, "pro").allowed);  // 80,000 = 80% of 100,000
  std::vector<AlertEvent> events = harness_->TakeEvents();
  EXPECT_EQ(FiredOf(events), (std::vector<Fired>{{"pro", 80, 100000}}));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].used, 80000);
}

TEST_P(StoreConformanceTest, FlippingThePlanAcrossAThresholdSendsItOnce) {
  UsePlans(FreeAndPro());
  ASSERT_TRUE(Check("alice", 4500, "free").allowed);
  std::vector<Fired> fired = FiredOf(harness_->TakeEvents());
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(Check("alice", 1, "pro").allowed);
    ASSERT_TRUE(Check("alice", 1, "free").allowed);
    for (const Fired& f : FiredOf(harness_->TakeEvents())) fired.push_back(f);
  }
  EXPECT_EQ(fired, (std::vector<Fired>{{"free", 80, 5000}}));
  EXPECT_EQ(UsageOf("alice", "free")[0].fired, std::vector<int>{80});
  EXPECT_TRUE(UsageOf("alice", "pro")[0].fired.empty());
}

TEST_P(StoreConformanceTest, ADowngradeAboveEightyPercentFiresItAtTheNextAdmission) {
  UsePlans(FreeAndPro());
  ASSERT_TRUE(Check("alice", 4500, "pro").allowed);
  EXPECT_TRUE(harness_->TakeEvents().empty());
  ASSERT_TRUE(Check("alice", 1, "free").allowed);
  std::vector<AlertEvent> events = harness_->TakeEvents();
  EXPECT_EQ(FiredOf(events), (std::vector<Fired>{{"free", 80, 5000}}));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].used, 4501);
}

TEST_P(StoreConformanceTest, ADowngradeAboveTheQuotaFiresHundredOnceAtTheFirstDenial) {
  UsePlans(FreeAndPro());
  ASSERT_TRUE(Check("alice", 6000, "pro").allowed);
  Decision denied = Check("alice", 1, "free");
  EXPECT_FALSE(denied.allowed);
  EXPECT_EQ(denied.limits[0].used, 6000);
  EXPECT_EQ(denied.limits[0].remaining, 0);
  std::vector<AlertEvent> events = harness_->TakeEvents();
  EXPECT_EQ(FiredOf(events), (std::vector<Fired>{{"free", 100, 5000}}));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].used, 6000);
  EXPECT_FALSE(Check("alice", 1, "free").allowed);
  EXPECT_TRUE(harness_->TakeEvents().empty());
}

TEST_P(StoreConformanceTest, AResetUnderOnePlanClearsTheCounterEveryPlanShares) {
  UsePlans(FreeAndPro());
  ASSERT_TRUE(Check("alice", 4000, "free").allowed);
  (void)harness_->TakeEvents();
  ResetUsage("alice", "daily", "pro");
  EXPECT_EQ(UsageOf("alice", "free")[0].used, 0);
  ASSERT_TRUE(Check("alice", 4000, "free").allowed);
  EXPECT_EQ(FiredOf(harness_->TakeEvents()), (std::vector<Fired>{{"free", 80, 5000}}));
}

TEST_P(StoreConformanceTest, AnEffectivePlanCountsOnItsPlansCountersWithItsOwnQuotas) {
  const Plan effective = PlanNamed("p").WithQuotas({20});
  Decision d = CheckWith("alice", effective, 15);
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.limits[0].used, 15);
  EXPECT_EQ(d.limits[0].remaining, 5);
  EXPECT_EQ(d.limits[0].limit->quota, 20);
  EXPECT_FALSE(Check("alice").allowed);  // the plan's own quota is 10
  EXPECT_EQ(UsageOf("alice")[0].used, 15);
}

TEST_P(StoreConformanceTest, AnOverriddenQuotaHasThresholdsOfItsOwn) {
  const Plan raised = PlanNamed("p").WithQuotas({20});
  ASSERT_TRUE(Check("alice", 8).allowed);              // 80% of 10
  ASSERT_TRUE(CheckWith("alice", raised, 8).allowed);  // 16 = 80% of 20
  EXPECT_EQ(FiredOf(harness_->TakeEvents()), (std::vector<Fired>{{"p", 80, 10}, {"p", 80, 20}}));
  // Back to the plan's own quota: its 80% was sent in this window; 100% fires at the denial.
  EXPECT_FALSE(Check("alice").allowed);
  EXPECT_EQ(FiredOf(harness_->TakeEvents()), (std::vector<Fired>{{"p", 100, 10}}));
  ASSERT_TRUE(CheckWith("alice", raised, 4).allowed);  // 20 = 100% of 20
  EXPECT_EQ(FiredOf(harness_->TakeEvents()), (std::vector<Fired>{{"p", 100, 20}}));
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// used + cost never overflows, and a counter no decision could have produced is never room.

TEST_P(StoreConformanceTest, ACounterAtTheLargestQuotaTakesTheLargestCostExactly) {
  UsePlans({PlanConfig{.name = "p",
                       .timezone = "UTC",
                       .limits = {MakeLimit("big", kMaxUsed, Fixed(absl::Hours(1), "1h"))}}});
  Plant("alice", 0, kMaxUsed - kMaxCost);
  Decision d = Check("alice", kMaxCost);
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.limits[0].used, kMaxUsed);
  EXPECT_EQ(d.limits[0].remaining, 0);
  Decision denied = Check("alice", kMaxCost);
  EXPECT_FALSE(denied.allowed);
  EXPECT_EQ(denied.limits[0].used, kMaxUsed);
  EXPECT_TRUE(denied.limits[0].violated);
  EXPECT_EQ(UsageOf("alice")[0].used, kMaxUsed);
}

TEST_P(StoreConformanceTest, ACounterAboveAQuotaLoweredByAReloadDeniesWithNothingRemaining) {
  Plant("alice", 0, 15);  // valid: the quota was 20 before a reload
  Decision d = Check("alice");
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.limits[0].used, 15);
  EXPECT_EQ(d.limits[0].remaining, 0);
}

TEST_P(StoreConformanceTest, AnUnusableCounterIsExhaustedNeverRoom) {
  for (const int64_t bad : {int64_t{-1}, -kMaxCost, std::numeric_limits<int64_t>::min(),
                            kMaxUsed + 1, std::numeric_limits<int64_t>::max()}) {
    Plant("mallory", 0, bad);
    (void)harness_->TakeEvents();
    for (const int64_t cost : {int64_t{0}, int64_t{1}, kMaxCost}) {
      Decision d = Check("mallory", cost);
      EXPECT_FALSE(d.allowed) << bad << " cost " << cost;
      EXPECT_FALSE(d.degraded) << bad;
      EXPECT_EQ(d.limits[0].used, 10) << bad;  // shown as the quota: exhausted
      EXPECT_EQ(d.limits[0].remaining, 0) << bad;
      EXPECT_TRUE(d.limits[0].violated) << bad;
      EXPECT_GT(d.retry_after, 0) << bad;
    }
    EXPECT_EQ(UsageOf("mallory")[0].used, 10) << bad;
    // Nothing fired for it (the plan alerts at 100%), and nothing was written over it.
    EXPECT_TRUE(harness_->TakeEvents().empty()) << bad;
    EXPECT_FALSE(Check("mallory").allowed) << bad;
  }
}

// --- Group decisions (docs/semantics.md, Groups) -------------------------------------------

TEST_P(StoreConformanceTest, AGroupThatFitsIsAdmittedAndEveryPartPaysItsCost) {
  std::vector<Decision> d = Group({{"alice", 3}, {"bob", 4}});
  ASSERT_EQ(d.size(), 2u);
  EXPECT_TRUE(d[0].allowed);
  EXPECT_TRUE(d[1].allowed);
  EXPECT_EQ(d[0].limits[0].used, 3);
  EXPECT_EQ(d[1].limits[0].used, 4);
  EXPECT_EQ(d[1].limits[0].remaining, 6);
  EXPECT_EQ(GroupUsageOf("alice")[0].used, 3);
  EXPECT_EQ(GroupUsageOf("bob")[0].used, 4);
}

TEST_P(StoreConformanceTest, AGroupWithOnePartThatDoesNotFitChangesNothing) {
  ASSERT_TRUE(Group({{"alice", 8}})[0].allowed);
  std::vector<Decision> d = Group({{"alice", 3}, {"bob", 5}});
  ASSERT_EQ(d.size(), 2u);
  EXPECT_FALSE(d[0].allowed);
  EXPECT_FALSE(d[1].allowed);  // bob fits, but the group is denied as a whole
  EXPECT_TRUE(d[0].limits[0].violated);
  EXPECT_FALSE(d[1].limits[0].violated);
  EXPECT_EQ(d[0].limits[0].used, 8);
  EXPECT_EQ(d[1].limits[0].used, 0);
  EXPECT_EQ(d[0].retry_after, 60);
  EXPECT_EQ(d[1].retry_after, 60);  // the group's
  EXPECT_EQ(GroupUsageOf("alice")[0].used, 8);
  EXPECT_EQ(GroupUsageOf("bob")[0].used, 0);
  // Bob's counter really is untouched: he can still spend his whole quota.
  EXPECT_TRUE(Group({{"bob", 10}})[0].allowed);
}

TEST_P(StoreConformanceTest, APartOfCostZeroIsAPeekOfThatPart) {
  ASSERT_TRUE(Group({{"alice", 10}})[0].allowed);
  (void)harness_->TakeEvents();
  std::vector<Decision> d = Group({{"alice", 0}, {"bob", 2}});
  EXPECT_TRUE(d[0].allowed);  // 10 + 0 <= 10
  EXPECT_EQ(d[0].limits[0].used, 10);
  EXPECT_EQ(d[1].limits[0].used, 2);
  EXPECT_EQ(GroupUsageOf("alice")[0].used, 10);
  EXPECT_TRUE(harness_->TakeEvents().empty());  // bob is at 20%, alice's peek fires nothing
}

TEST_P(StoreConformanceTest, AnUnusableCounterOfOnePartDeniesTheGroup) {
  Plant("mallory", 0, -5, "p", "g");
  (void)harness_->TakeEvents();
  std::vector<Decision> d = Group({{"bob", 1}, {"mallory", 0}});
  EXPECT_FALSE(d[0].allowed);
  EXPECT_FALSE(d[1].allowed);
  EXPECT_TRUE(d[1].limits[0].violated);
  EXPECT_EQ(d[1].limits[0].used, 10);  // shown as the quota: exhausted
  EXPECT_FALSE(d[0].limits[0].violated);
  EXPECT_EQ(GroupUsageOf("bob")[0].used, 0);
  EXPECT_TRUE(harness_->TakeEvents().empty());  // nothing fires for an unusable counter
}

TEST_P(StoreConformanceTest, ThresholdsFirePerPartNamingEachPartsSubject) {
  std::vector<Decision> d = Group({{"alice", 8}, {"bob", 2}});
  ASSERT_TRUE(d[0].allowed);
  std::vector<AlertEvent> events = harness_->TakeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].subject, "alice");
  EXPECT_EQ(events[0].plan, "p");
  EXPECT_EQ(events[0].threshold, 80);
  EXPECT_EQ(events[0].used, 8);

  ASSERT_TRUE(Group({{"alice", 2}, {"bob", 8}})[0].allowed);
  events = harness_->TakeEvents();
  std::vector<std::pair<std::string, int>> fired;
  for (const AlertEvent& e : events) fired.emplace_back(e.subject, e.threshold);
  std::sort(fired.begin(), fired.end());
  EXPECT_EQ(fired,
            (std::vector<std::pair<std::string, int>>{{"alice", 100}, {"bob", 80}, {"bob", 100}}));
}

TEST_P(StoreConformanceTest, ADeniedGroupFiresOnlyTheFullThresholdOfTheLimitsThatDenied) {
  std::vector<Decision> d = Group({{"alice", 9}, {"bob", 11}});
  EXPECT_FALSE(d[0].allowed);
  EXPECT_TRUE(d[1].limits[0].violated);
  std::vector<AlertEvent> events = harness_->TakeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].subject, "bob");
  EXPECT_EQ(events[0].threshold, 100);
  EXPECT_EQ(events[0].used, 0);
  EXPECT_EQ(GroupUsageOf("alice")[0].used, 0);
}

TEST_P(StoreConformanceTest, AGroupsCountersStartFromZeroInTheNextWindow) {
  ASSERT_TRUE(Group({{"alice", 10}, {"bob", 10}})[0].allowed);
  ASSERT_FALSE(Group({{"alice", 1}, {"bob", 1}})[0].allowed);
  clock_->Advance(absl::Minutes(1));
  std::vector<Decision> d = Group({{"alice", 1}, {"bob", 2}});
  EXPECT_TRUE(d[0].allowed);
  EXPECT_EQ(d[0].limits[0].used, 1);
  EXPECT_EQ(d[1].limits[0].used, 2);
}

TEST_P(StoreConformanceTest, AGroupOfPartsUnderDifferentPlansKeepsEachPlansLimits) {
  UsePlans({PlanConfig{.name = "p",
                       .timezone = "UTC",
                       .limits = {MakeLimit("per_minute", 10, Fixed(absl::Minutes(1), "1m"))}},
            PlanConfig{.name = "q",
                       .timezone = "UTC",
                       .limits = {MakeLimit("per_hour", 3, Fixed(absl::Hours(1), "1h")),
                                  MakeLimit("per_minute", 2, Fixed(absl::Minutes(1), "1m"))}}});
  std::vector<GroupPart> parts = {{.subject = "alice", .plan = &PlanNamed("p"), .cost = 5},
                                  {.subject = "bob", .plan = &PlanNamed("q"), .cost = 2}};
  std::optional<absl::StatusOr<std::vector<Decision>>> out;
  limiter_->DecideGroup("g", parts,
                        [&](absl::StatusOr<std::vector<Decision>> d) { out = std::move(d); });
  harness_->RunUntil([&] { return out.has_value(); });
  ASSERT_TRUE(out.has_value() && out->ok());
  ASSERT_EQ((*out)->size(), 2u);
  EXPECT_TRUE((**out)[0].allowed);
  EXPECT_EQ((**out)[0].limits[0].used, 5);
  ASSERT_EQ((**out)[1].limits.size(), 2u);
  EXPECT_EQ((**out)[1].limits[0].used, 2);
  EXPECT_EQ((**out)[1].limits[1].used, 2);
  // bob is now at q's per-minute quota: a group needing one more is denied by that limit alone.
  parts[1].cost = 1;
  out.reset();
  limiter_->DecideGroup("g", parts,
                        [&](absl::StatusOr<std::vector<Decision>> d) { out = std::move(d); });
  harness_->RunUntil([&] { return out.has_value(); });
  ASSERT_TRUE(out.has_value() && out->ok());
  EXPECT_FALSE((**out)[0].allowed);
  EXPECT_FALSE((**out)[1].limits[0].violated);
  EXPECT_TRUE((**out)[1].limits[1].violated);
  EXPECT_EQ(GroupUsageOf("alice", "p")[0].used, 5);
}

// --- Shadow limits (docs/semantics.md, Shadow limits) ---------------------------------------

// Plan "p": an enforced 10 per minute and a shadow 3 per minute alerting at 100%.
std::vector<PlanConfig> ShadowPlan(int64_t enforced_quota = 10) {
  LimitConfig shadow = MakeLimit("trial", 3, Fixed(absl::Minutes(1), "1m"), {100});
  shadow.shadow = true;
  return {PlanConfig{
      .name = "p",
      .timezone = "UTC",
      .limits = {MakeLimit("per_minute", enforced_quota, Fixed(absl::Minutes(1), "1m")), shadow}}};
}

TEST_P(StoreConformanceTest, AShadowLimitIsCountedPastItsQuotaButNeverDenies) {
  UsePlans(ShadowPlan());
  for (int i = 1; i <= 10; ++i) {
    Decision d = Check("alice");
    ASSERT_TRUE(d.allowed) << "request " << i;
    EXPECT_EQ(d.limits[1].used, i);
    EXPECT_FALSE(d.limits[1].violated);
    EXPECT_EQ(d.limits[1].would_deny, i > 3) << "request " << i;
    EXPECT_EQ(d.limits[1].remaining, std::max(0, 3 - i));
  }
  Decision d = Check("alice");  // denied by the enforced limit
  EXPECT_FALSE(d.allowed);
  EXPECT_TRUE(d.limits[0].violated);
  EXPECT_FALSE(d.limits[1].violated);
  EXPECT_TRUE(d.limits[1].would_deny);
  EXPECT_EQ(d.limits[1].used, 10);  // a denial changes nothing, shadow counters included
  EXPECT_EQ(UsageOf("alice")[1].used, 10);
}

TEST_P(StoreConformanceTest, AShadowLimitsThresholdFiresOnceWhenReached) {
  UsePlans(ShadowPlan());
  ASSERT_TRUE(Check("alice", 2).allowed);
  EXPECT_TRUE(harness_->TakeEvents().empty());
  ASSERT_TRUE(Check("alice").allowed);  // used 3 = 100% of 3
  std::vector<AlertEvent> events = harness_->TakeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].limit, "trial");
  EXPECT_EQ(events[0].threshold, 100);
  EXPECT_EQ(events[0].used, 3);
  for (int i = 0; i < 7; ++i) ASSERT_TRUE(Check("alice").allowed);
  ASSERT_FALSE(Check("alice").allowed);
  EXPECT_TRUE(harness_->TakeEvents().empty());
}

TEST_P(StoreConformanceTest, AShadowLimitsFullThresholdFiresAtARequestItWouldHaveDenied) {
  UsePlans(ShadowPlan(/*enforced_quota=*/2));
  ASSERT_TRUE(Check("alice", 2).allowed);  // trial at 2 of 3: nothing yet
  EXPECT_TRUE(harness_->TakeEvents().empty());
  Decision d = Check("alice", 2);  // the enforced limit denies; trial would have (2 + 2 > 3)
  EXPECT_FALSE(d.allowed);
  EXPECT_TRUE(d.limits[1].would_deny);
  std::vector<AlertEvent> events = harness_->TakeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].limit, "trial");
  EXPECT_EQ(events[0].threshold, 100);
  EXPECT_EQ(events[0].used, 2);
  EXPECT_EQ(UsageOf("alice")[1].used, 2);
}

TEST_P(StoreConformanceTest, AShadowLimitThatWouldNotDenyFiresNothingOnADenial) {
  UsePlans(ShadowPlan(/*enforced_quota=*/2));
  ASSERT_TRUE(Check("alice", 2).allowed);
  ASSERT_FALSE(Check("alice", 1).allowed);  // 2 + 1 <= 3: trial would admit
  EXPECT_TRUE(harness_->TakeEvents().empty());
}

TEST_P(StoreConformanceTest, APeekOfAShadowLimitChangesNothing) {
  UsePlans(ShadowPlan());
  ASSERT_TRUE(Check("alice", 5).allowed);
  (void)harness_->TakeEvents();
  Decision peek = Check("alice", 0);
  EXPECT_TRUE(peek.allowed);
  EXPECT_TRUE(peek.limits[1].would_deny);  // 5 > 3
  EXPECT_EQ(peek.limits[1].used, 5);
  EXPECT_EQ(UsageOf("alice")[1].used, 5);
  EXPECT_TRUE(harness_->TakeEvents().empty());
}

TEST_P(StoreConformanceTest, AnUnusableShadowCounterDoesNotDenyAndIsLeftAlone) {
  UsePlans(ShadowPlan());
  Plant("mallory", 1, -5);
  Decision d = Check("mallory");
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.limits[0].used, 1);
  EXPECT_TRUE(d.limits[1].would_deny);  // exhausted, as an unusable counter always is
  EXPECT_FALSE(d.limits[1].violated);
  EXPECT_EQ(d.limits[1].used, 3);
  EXPECT_EQ(d.limits[1].remaining, 0);
  EXPECT_TRUE(harness_->TakeEvents().empty());
  EXPECT_EQ(UsageOf("mallory")[1].used, 3);  // still unusable: shown as the quota
  EXPECT_TRUE(Check("mallory").allowed);
}

TEST_P(StoreConformanceTest, AShadowCounterStopsAtTheLargestCounter) {
  UsePlans(ShadowPlan());
  Plant("alice", 1, kMaxUsed - 2);  // valid: e.g. counted under a quota of 10^15
  Decision d = Check("alice", 5);
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.limits[1].used, kMaxUsed);
  d = Check("alice", 5);
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.limits[1].used, kMaxUsed);
  EXPECT_EQ(UsageOf("alice")[1].used, kMaxUsed);
  EXPECT_EQ(d.limits[0].used, 10);
}

TEST_P(StoreConformanceTest, ThePlansShadowFlagMakesEveryLimitShadow) {
  std::vector<PlanConfig> plans = TwoLimitPlan(/*minute_quota=*/1, /*hour_quota=*/2);
  plans[0].shadow = true;
  UsePlans(plans);
  clock_->Advance(absl::Seconds(30));
  for (int i = 1; i <= 3; ++i) {
    Decision d = Check("alice");
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.retry_after, 0);
  }
  Decision d = Check("alice");
  EXPECT_TRUE(d.limits[0].would_deny);
  EXPECT_TRUE(d.limits[1].would_deny);
  EXPECT_EQ(d.limits[0].used, 4);
  // Every limit is shadow: the tightest of them is shown (both at 0 remaining, the minute resets
  // first).
  EXPECT_EQ(d.Tightest().limit->name, "per_minute");
}

TEST_P(StoreConformanceTest, TheTightestLimitAndRetryAfterIgnoreShadowLimits) {
  UsePlans(ShadowPlan());
  for (int i = 0; i < 9; ++i) ASSERT_TRUE(Check("alice").allowed);
  Decision d = Check("alice");
  EXPECT_EQ(d.Tightest().limit->name, "per_minute");  // trial has less room, but only counts
  d = Check("alice");
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after, 60);
}

TEST_P(StoreConformanceTest, AGroupFollowsTheShadowRules) {
  UsePlans(ShadowPlan());
  ASSERT_TRUE(Group({{"alice", 3}})[0].allowed);
  (void)harness_->TakeEvents();
  // alice's trial would deny (3 + 2 > 3) but it is shadow: the group is admitted.
  std::vector<Decision> d = Group({{"alice", 2}, {"bob", 1}});
  EXPECT_TRUE(d[0].allowed);
  EXPECT_TRUE(d[0].limits[1].would_deny);
  EXPECT_FALSE(d[1].limits[1].would_deny);
  EXPECT_EQ(d[0].limits[1].used, 5);
  EXPECT_TRUE(harness_->TakeEvents().empty());  // alice's 100% fired at 3 already
  // bob's enforced limit denies the group; alice's trial would have: its 100% has fired already,
  // and bob's trial (1 + 10 > 3) would deny too: its 100% fires now.
  d = Group({{"alice", 1}, {"bob", 10}});
  EXPECT_FALSE(d[0].allowed);
  EXPECT_TRUE(d[1].limits[0].violated);
  EXPECT_TRUE(d[1].limits[1].would_deny);
  std::vector<AlertEvent> events = harness_->TakeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].subject, "bob");
  EXPECT_EQ(events[0].limit, "trial");
  EXPECT_EQ(GroupUsageOf("alice")[1].used, 5);
}

// --- Reports (docs/semantics.md, Reports) ------------------------------------------------------

TEST_P(StoreConformanceTest, AReportPastTheQuotaIsChargedAndNeverDenied) {
  ASSERT_TRUE(Check("alice", 8).allowed);
  Decision d = Report("alice", 5);
  EXPECT_TRUE(d.allowed);
  EXPECT_FALSE(d.degraded);
  EXPECT_EQ(d.limits[0].used, 13);
  EXPECT_EQ(d.limits[0].remaining, 0);
  EXPECT_FALSE(d.limits[0].violated);
  EXPECT_FALSE(d.limits[0].would_deny);
  EXPECT_EQ(d.retry_after, 0);
  EXPECT_EQ(UsageOf("alice")[0].used, 13);
  // Already over its quota: a report is still charged.
  d = Report("alice", 4);
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.limits[0].used, 17);
}

TEST_P(StoreConformanceTest, AfterAReportPastTheQuotaTheNextRequestAndPeekAreDenied) {
  ASSERT_TRUE(Check("alice", 0).allowed);  // the check before the work: a peek
  ASSERT_TRUE(Report("alice", 11).allowed);
  Decision peek = Check("alice", 0);
  EXPECT_FALSE(peek.allowed);
  EXPECT_TRUE(peek.limits[0].violated);
  EXPECT_EQ(peek.retry_after, 60);
  EXPECT_FALSE(Check("alice").allowed);
  EXPECT_EQ(UsageOf("alice")[0].used, 11);
  clock_->Advance(absl::Minutes(1));  // the next window starts afresh
  EXPECT_TRUE(Check("alice", 0).allowed);
}

TEST_P(StoreConformanceTest, AReportFiresEachThresholdItReachesOnce) {
  ASSERT_TRUE(Report("alice", 7).allowed);
  EXPECT_TRUE(harness_->TakeEvents().empty());
  ASSERT_TRUE(Report("alice", 1).allowed);  // 8 = 80% of 10
  std::vector<AlertEvent> events = harness_->TakeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].threshold, 80);
  EXPECT_EQ(events[0].used, 8);
  ASSERT_TRUE(Report("alice", 5).allowed);  // 13: past 100%
  events = harness_->TakeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].threshold, 100);
  EXPECT_EQ(events[0].used, 13);
  ASSERT_TRUE(Report("alice", 5).allowed);
  ASSERT_FALSE(Check("alice").allowed);
  EXPECT_TRUE(harness_->TakeEvents().empty());
}

TEST_P(StoreConformanceTest, AReportCrossingEveryThresholdAtOnceFiresEachOfThem) {
  ASSERT_TRUE(Report("alice", 12).allowed);
  std::vector<AlertEvent> events = harness_->TakeEvents();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].threshold, 80);
  EXPECT_EQ(events[1].threshold, 100);
  EXPECT_EQ(events[1].used, 12);
}

TEST_P(StoreConformanceTest, AReportIsChargedToEveryLimit) {
  UsePlans(TwoLimitPlan(/*minute_quota=*/5, /*hour_quota=*/100));
  Decision d = Report("alice", 8);  // past the minute's quota, within the hour's
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.limits[0].used, 8);
  EXPECT_EQ(d.limits[1].used, 8);
  Decision next = Check("alice");
  EXPECT_FALSE(next.allowed);
  EXPECT_TRUE(next.limits[0].violated);
  EXPECT_FALSE(next.limits[1].violated);
}

TEST_P(StoreConformanceTest, AReportOfAShadowLimitIsNoShadowDenial) {
  UsePlans(ShadowPlan());
  Decision d = Report("alice", 5);  // trial: 5 > 3
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.limits[1].used, 5);
  EXPECT_FALSE(d.limits[1].would_deny);
}

TEST_P(StoreConformanceTest, AReportStopsAtTheLargestCounter) {
  Plant("alice", 0, kMaxUsed - 2);
  Decision d = Report("alice", 5);
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.limits[0].used, kMaxUsed);
  EXPECT_EQ(UsageOf("alice")[0].used, kMaxUsed);
  EXPECT_EQ(Report("alice", 5).limits[0].used, kMaxUsed);
}

TEST_P(StoreConformanceTest, AReportLeavesAnUnusableCounterAloneAndIsAllowed) {
  Plant("mallory", 0, -5);
  Decision d = Report("mallory", 3);
  EXPECT_TRUE(d.allowed);
  EXPECT_FALSE(d.limits[0].violated);
  EXPECT_EQ(d.limits[0].used, 10);  // unusable: shown as exhausted
  EXPECT_TRUE(harness_->TakeEvents().empty());
  EXPECT_FALSE(Check("mallory", 0).allowed);
}

TEST_P(StoreConformanceTest, AReportOfCostZeroChangesNothing) {
  ASSERT_TRUE(Check("alice", 10).allowed);
  Decision d = Report("alice", 0);
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(UsageOf("alice")[0].used, 10);
  EXPECT_TRUE(Check("alice", 0).allowed);
}

TEST_P(StoreConformanceTest, AGroupReportChargesEveryPartPastItsQuota) {
  ASSERT_TRUE(Group({{"alice", 9}})[0].allowed);
  std::vector<Decision> d = Group({{"alice", 4}, {"bob", 2}}, "p", "g", DecideMode::kReport);
  EXPECT_TRUE(d[0].allowed);
  EXPECT_TRUE(d[1].allowed);
  EXPECT_FALSE(d[0].limits[0].violated);
  EXPECT_EQ(d[0].limits[0].used, 13);
  EXPECT_EQ(d[1].limits[0].used, 2);
  EXPECT_EQ(GroupUsageOf("alice")[0].used, 13);
  EXPECT_FALSE(Group({{"alice", 0}, {"bob", 0}})[0].allowed);
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// Credit limits (docs/semantics.md, Prepaid credits): one window that never ends, whose state
// expires only once it has not been charged for config::kCreditIdleDays.

WindowSpec Credit() { return {.kind = WindowSpec::Kind::kCredit, .text = "credit"}; }

// "c": a credit of `credit` with alerts at 80 and 100 beside 10 per minute.
std::vector<PlanConfig> CreditPlan(int64_t credit) {
  return {PlanConfig{.name = "c",
                     .timezone = "UTC",
                     .limits = {MakeLimit("credits", credit, Credit(), {80, 100}),
                                MakeLimit("per_minute", 10, Fixed(absl::Minutes(1), "1m"))}}};
}

TEST_P(StoreConformanceTest, ACreditNeverResetsAcrossAYearOfUse) {
  UsePlans(CreditPlan(100));
  for (int month = 1; month <= 24; ++month) {
    Decision d = Check("alice", 4, "c");
    ASSERT_TRUE(d.allowed) << "month " << month;
    EXPECT_EQ(d.limits[0].used, 4 * month);
    EXPECT_EQ(d.limits[0].reset_after, 0);  // it never resets
    clock_->Advance(absl::Hours(24 * 30));
  }
  Decision spent = Check("alice", 5, "c");  // 96 + 5 > 100
  EXPECT_FALSE(spent.allowed);
  EXPECT_TRUE(spent.limits[0].violated);
  EXPECT_EQ(UsageOf("alice", "c")[0].used, 96);
}

TEST_P(StoreConformanceTest, EveryChargeOfACreditPushesItsExpiryForward) {
  UsePlans(CreditPlan(100));
  ASSERT_TRUE(Check("alice", 1, "c").allowed);
  const std::optional<absl::Time> first = ExpiryOf("alice", 0, "c");
  ASSERT_TRUE(first.has_value());
  clock_->Advance(absl::Hours(24 * 200));
  ASSERT_TRUE(Check("alice", 1, "c").allowed);
  const std::optional<absl::Time> second = ExpiryOf("alice", 0, "c");
  ASSERT_TRUE(second.has_value());
  // 200 days later (the expiry follows the UTC day of the charge; a store with a clock of its own
  // may differ by the seconds this test took and by its rounding).
  EXPECT_GE(*second - *first, absl::Hours(24 * 200) - absl::Minutes(1));
  EXPECT_LE(*second - *first, absl::Hours(24 * 200) + absl::Minutes(1));
}

TEST_P(StoreConformanceTest, ACreditOfZeroAdmitsOnlyPeeksAndFiresNothing) {
  UsePlans(CreditPlan(0));
  Decision denied = Check("alice", 1, "c");
  EXPECT_FALSE(denied.allowed);
  EXPECT_TRUE(denied.limits[0].violated);
  EXPECT_EQ(denied.limits[0].remaining, 0);
  EXPECT_TRUE(Check("alice", 0, "c").allowed);
  EXPECT_TRUE(harness_->TakeEvents().empty());
}

TEST_P(StoreConformanceTest, AGrantReArmsTheThresholdsOfACredit) {
  UsePlans(CreditPlan(0));
  ASSERT_FALSE(Check("alice", 1, "c").allowed);  // nothing granted: nothing fires
  const Plan ten = PlanNamed("c").WithQuotas({10, 10});
  ASSERT_TRUE(CheckWith("alice", ten, 8).allowed);
  EXPECT_EQ(FiredOf(harness_->TakeEvents()), (std::vector<Fired>{{"c", 80, 10}}));
  EXPECT_FALSE(CheckWith("alice", ten, 3).allowed);
  EXPECT_EQ(FiredOf(harness_->TakeEvents()), (std::vector<Fired>{{"c", 100, 10}}));
  // A top-up of 40: 8 of 50 used, every threshold armed again under the new quota.
  clock_->Advance(absl::Minutes(1));
  const Plan fifty = PlanNamed("c").WithQuotas({50, 10});
  ASSERT_TRUE(CheckWith("alice", fifty, 10).allowed);  // 18
  EXPECT_TRUE(harness_->TakeEvents().empty());
  clock_->Advance(absl::Minutes(1));
  ASSERT_TRUE(CheckWith("alice", fifty, 10).allowed);  // 28
  clock_->Advance(absl::Minutes(1));
  ASSERT_TRUE(CheckWith("alice", fifty, 10).allowed);  // 38
  clock_->Advance(absl::Minutes(1));
  ASSERT_TRUE(CheckWith("alice", fifty, 2).allowed);  // 40 = 80% of 50
  EXPECT_EQ(FiredOf(harness_->TakeEvents()), (std::vector<Fired>{{"c", 80, 50}}));
}

TEST_P(StoreConformanceTest, ACreditIsAdmittedAllOrNothingWithTheOtherLimits) {
  UsePlans(CreditPlan(100));
  ASSERT_TRUE(Check("alice", 10, "c").allowed);
  Decision d = Check("alice", 1, "c");  // the minute is full
  EXPECT_FALSE(d.allowed);
  EXPECT_FALSE(d.limits[0].violated);
  EXPECT_TRUE(d.limits[1].violated);
  EXPECT_EQ(UsageOf("alice", "c")[0].used, 10);  // the credit was not charged
}

}  // namespace
}  // namespace sluice
