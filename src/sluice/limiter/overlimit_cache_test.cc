#include "sluice/limiter/overlimit_cache.h"

#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "sluice/config/config.h"
#include "sluice/limiter/limiter.h"
#include "sluice/limiter/test_counting_store.h"

namespace sluice {
namespace {

using testing_util::CountingStore;

class OverLimitCacheTest : public ::testing::Test {
 protected:
  OverLimitCacheTest() {
    config::Config cfg;
    cfg.plans.push_back(
        {.name = "free",
         .limits = {{.name = "per_minute", .quota = 10, .window = *config::ParseWindow("1m")},
                    {.name = "daily", .quota = 1000, .window = *config::ParseWindow("day")}}});
    cfg.plans.push_back(
        {.name = "pro",
         .limits = {{.name = "per_minute", .quota = 20, .window = *config::ParseWindow("1m")},
                    {.name = "daily", .quota = 1000, .window = *config::ParseWindow("day")}}});
    limiter_.emplace(*PlanSet::FromConfig(cfg), &store_, &clock_,
                     LimiterOptions{.overlimit_cache_capacity = 1000, .overlimit_stats = &stats_});
  }

  Decision Decide(std::string_view subject, int64_t cost = 1, std::string_view plan = "free") {
    return DecideWith({.subject = subject, .plan = plan, .cost = cost});
  }
  Decision DecideWith(const DecisionRequest& req) {
    std::optional<absl::StatusOr<Decision>> out;
    limiter_->Decide(req, [&](absl::StatusOr<Decision> d) { out = std::move(d); });
    EXPECT_TRUE(out.has_value() && out->ok());
    return **out;
  }
  const Plan& Free() { return *limiter_->plans().Find("free"); }
  // Answers `req` and says whether the store was asked.
  bool AsksTheStore(const DecisionRequest& req, bool* allowed = nullptr) {
    const int calls = store_.decides;
    Decision d = DecideWith(req);
    if (allowed != nullptr) *allowed = d.allowed;
    return store_.decides == calls + 1;
  }
  void Spend(std::string_view subject, int n) {
    for (int i = 0; i < n; ++i) ASSERT_TRUE(Decide(subject).allowed);
  }

  CountingStore store_;
  OverLimitCacheStats stats_;
  // 2026-11-30T23:59:30Z: 30 s before the minute and the day end.
  FakeClock clock_{absl::FromUnixSeconds(1796083170)};
  std::optional<Limiter> limiter_;
};

TEST_F(OverLimitCacheTest, RepeatedDenialIsAnsweredWithoutTheStore) {
  Spend("u", 10);
  Decision first = Decide("u");
  ASSERT_FALSE(first.allowed);
  const int calls = store_.decides;

  Decision again = Decide("u");
  EXPECT_EQ(store_.decides, calls);
  EXPECT_FALSE(again.allowed);
  EXPECT_FALSE(again.degraded);
  EXPECT_TRUE(again.limits[0].violated);
  EXPECT_FALSE(again.limits[1].violated);
  EXPECT_EQ(again.limits[0].used, 10);
  EXPECT_EQ(again.limits[1].used, 10);
  EXPECT_EQ(again.retry_after, 30);
  EXPECT_EQ(stats_.hits.load(), 1u);
  EXPECT_EQ(stats_.inserts.load(), 1u);
}

TEST_F(OverLimitCacheTest, ADenialLearntBeforeTheStoreTookACountBackIsNotTrusted) {
  Spend("u", 10);
  ASSERT_FALSE(Decide("u").allowed);  // remembered
  store_.Refund(1);                   // an admission answered too late, taken back
  const int calls = store_.decides;
  EXPECT_TRUE(Decide("u").allowed);
  EXPECT_EQ(store_.decides, calls + 1);
}

TEST_F(OverLimitCacheTest, AWildCachedCounterIsACertainDenialWithoutOverflow) {
  OverLimitCache cache(100, nullptr);
  const Plan& plan = *limiter_->plans().Find("free");
  const WindowBounds w =
      plan.limits[0].window_cache->Get(plan.limits[0].window, plan.tz, clock_.Now());
  const std::vector<WindowBounds> windows = {w, w};
  OverLimitCache::Entry out;
  for (const int64_t wild : {int64_t{-1}, std::numeric_limits<int64_t>::max()}) {
    const std::vector<int64_t> used = {wild, 0};
    cache.Remember(PlanQuotas::Of(plan), "u", clock_.Now(), windows, used,
                   clock_.Now() + absl::Seconds(30));
    EXPECT_TRUE(
        cache.CertainDenial(PlanQuotas::Of(plan), "u", kMaxCost, clock_.Now(), windows, &out))
        << wild;
  }
}

TEST_F(OverLimitCacheTest, ASmallerCostThatMayFitGoesToTheStore) {
  Spend("u", 8);
  ASSERT_FALSE(Decide("u", 5).allowed);
  const int calls = store_.decides;
  EXPECT_TRUE(Decide("u", 2).allowed);
  EXPECT_EQ(store_.decides, calls + 1);
}

TEST_F(OverLimitCacheTest, AReportIsNeverAnsweredByACachedDenialAndTeachesItNothing) {
  Spend("u", 10);
  ASSERT_FALSE(Decide("u").allowed);  // remembered
  bool allowed = false;
  EXPECT_TRUE(AsksTheStore({.subject = "u", .plan = "free", .cost = 3, .mode = DecideMode::kReport},
                           &allowed));
  EXPECT_TRUE(allowed);
  EXPECT_EQ(stats_.hits.load(), 0u);
  // A report past the quota of a subject the cache did not know: nothing remembered, so the
  // next request asks the store (which denies it, and that denial is remembered).
  Spend("v", 10);
  ASSERT_TRUE(
      DecideWith({.subject = "v", .plan = "free", .cost = 5, .mode = DecideMode::kReport}).allowed);
  EXPECT_TRUE(AsksTheStore({.subject = "v", .plan = "free"}, &allowed));
  EXPECT_FALSE(allowed);
  EXPECT_FALSE(AsksTheStore({.subject = "v", .plan = "free"}));
}

TEST_F(OverLimitCacheTest, ThePeekAlwaysSeesTheStore) {
  Spend("u", 10);
  ASSERT_FALSE(Decide("u").allowed);
  const int calls = store_.decides;
  Decide("u", 0);
  EXPECT_EQ(store_.decides, calls + 1);
}

TEST_F(OverLimitCacheTest, TheStoreIsAskedAgainOnceTheViolatedWindowEnds) {
  Spend("u", 10);
  ASSERT_FALSE(Decide("u").allowed);
  clock_.Advance(absl::Seconds(30));
  const int calls = store_.decides;
  EXPECT_TRUE(Decide("u").allowed);
  EXPECT_EQ(store_.decides, calls + 1);
}

TEST_F(OverLimitCacheTest, OtherSubjectsAreNotAffected) {
  Spend("u", 10);
  ASSERT_FALSE(Decide("u").allowed);
  EXPECT_TRUE(Decide("v").allowed);
}

TEST_F(OverLimitCacheTest, AnAdminResetForgetsTheDenial) {
  Spend("u", 10);
  ASSERT_FALSE(Decide("u").allowed);
  std::optional<absl::Status> reset;
  limiter_->Reset("u", "free", "", [&](absl::Status s) { reset = s; });
  ASSERT_TRUE(reset.has_value() && reset->ok());
  EXPECT_TRUE(Decide("u").allowed);
}

TEST_F(OverLimitCacheTest, ADenialIsNotTrustedUnderAnotherPlan) {
  Spend("u", 10);
  ASSERT_FALSE(Decide("u").allowed);  // remembered under free
  bool allowed = false;
  EXPECT_TRUE(AsksTheStore({.subject = "u", .plan = "pro"}, &allowed));
  EXPECT_TRUE(allowed);  // pro allows 20 a minute; the counter followed the subject
  // Back under free the store is asked again (and denies: 11 > 10).
  EXPECT_TRUE(AsksTheStore({.subject = "u", .plan = "free"}, &allowed));
  EXPECT_FALSE(allowed);
  EXPECT_FALSE(AsksTheStore({.subject = "u", .plan = "free"}));
}

TEST_F(OverLimitCacheTest, ARaisedOverrideIsNeverAnsweredWithTheOldDenial) {
  Spend("u", 10);
  ASSERT_FALSE(Decide("u").allowed);
  const Plan raised = Free().WithQuotas({20, 1000});
  bool allowed = false;
  EXPECT_TRUE(AsksTheStore({.subject = "u", .effective_plan = &raised}, &allowed));
  EXPECT_TRUE(allowed);
}

TEST_F(OverLimitCacheTest, ADenialUnderALoweredOverrideIsNotTrustedOnceItIsLifted) {
  const Plan lowered = Free().WithQuotas({5, 1000});
  for (int i = 0; i < 5; ++i)
    ASSERT_TRUE(DecideWith({.subject = "u", .effective_plan = &lowered}).allowed);
  ASSERT_FALSE(DecideWith({.subject = "u", .effective_plan = &lowered}).allowed);
  EXPECT_FALSE(AsksTheStore({.subject = "u", .effective_plan = &lowered}));  // cached
  bool allowed = false;
  EXPECT_TRUE(AsksTheStore({.subject = "u", .plan = "free"}, &allowed));
  EXPECT_TRUE(allowed);
}

TEST_F(OverLimitCacheTest, AnEffectivePlanWithTheSameQuotasSharesTheDenial) {
  Spend("u", 10);
  ASSERT_FALSE(Decide("u").allowed);
  const Plan same = Free().WithQuotas({10, 1000});
  EXPECT_FALSE(AsksTheStore({.subject = "u", .effective_plan = &same}));
}

TEST_F(OverLimitCacheTest, AResetUnderAnyPlanForgetsTheDenial) {
  Spend("u", 10);
  ASSERT_FALSE(Decide("u").allowed);
  std::optional<absl::Status> reset;
  limiter_->Reset("u", "pro", "", [&](absl::Status s) { reset = s; });
  ASSERT_TRUE(reset.has_value() && reset->ok());
  EXPECT_TRUE(Decide("u").allowed);
}

TEST(OverLimitCacheKeys, AnEntryIsTrustedOnlyForThePlanTagAndQuotasItWasLearntUnder) {
  OverLimitCache cache(100, nullptr);
  const absl::Time now = absl::FromUnixSeconds(1796083170);
  const WindowBounds w{.id = 1, .start = now - absl::Seconds(30), .end = now + absl::Seconds(30)};
  const int64_t used[] = {10};
  const PlanQuotas learnt{.plan_tag = 7, .quotas = {10}};
  OverLimitCache::Entry e;
  cache.Remember(learnt, "u", now, {&w, 1}, used, w.end);
  EXPECT_TRUE(cache.CertainDenial(learnt, "u", 1, now, {&w, 1}, &e));
  EXPECT_FALSE(cache.CertainDenial({.plan_tag = 7, .quotas = {9}}, "u", 1, now, {&w, 1}, &e));
  cache.Remember(learnt, "u", now, {&w, 1}, used, w.end);
  EXPECT_FALSE(cache.CertainDenial({.plan_tag = 8, .quotas = {10}}, "u", 1, now, {&w, 1}, &e));
  cache.Remember(learnt, "u", now, {&w, 1}, used, w.end);
  cache.Forget("u");
  EXPECT_FALSE(cache.CertainDenial(learnt, "u", 1, now, {&w, 1}, &e));
}

// A shadow limit past its quota never denies, so a cached counter over it is no certain denial;
// the enforced limit's is.
TEST(OverLimitCacheKeys, AShadowLimitOverItsQuotaIsNoCertainDenial) {
  OverLimitCache cache(100, nullptr);
  const absl::Time now = absl::FromUnixSeconds(1796083170);
  const WindowBounds w[] = {
      {.id = 1, .start = now - absl::Seconds(30), .end = now + absl::Seconds(30)},
      {.id = 1, .start = now - absl::Seconds(30), .end = now + absl::Seconds(30)}};
  const PlanQuotas plan{.plan_tag = 7, .quotas = {10, 3}, .shadow = {false, true}};
  OverLimitCache::Entry e;
  const int64_t shadow_over[] = {5, 8};
  cache.Remember(plan, "u", now, w, shadow_over, w[1].end);
  EXPECT_FALSE(cache.CertainDenial(plan, "u", 1, now, w, &e));
  const int64_t enforced_over[] = {10, 8};
  cache.Remember(plan, "u", now, w, enforced_over, w[0].end);
  EXPECT_TRUE(cache.CertainDenial(plan, "u", 1, now, w, &e));
}

TEST_F(OverLimitCacheTest, DegradedAnswersAreNotRemembered) {
  store_.failure = StoreFailure::kTimeout;
  Decision d = Decide("u");
  EXPECT_TRUE(d.degraded);
  EXPECT_EQ(d.failure, StoreFailure::kTimeout);
  EXPECT_EQ(limiter_->overlimit_cache_size(), 0u);
}

TEST(OverLimitCacheBound, HoldsAtMostItsCapacityAndCountsWhatItRefused) {
  config::Config cfg;
  cfg.plans.push_back(
      {.name = "p", .limits = {{.name = "m", .quota = 1, .window = *config::ParseWindow("1m")}}});
  PlanSet plans = *PlanSet::FromConfig(cfg);
  const Plan& plan = *plans.Find("p");
  OverLimitCacheStats stats;
  OverLimitCache cache(32, &stats);
  const absl::Time now = absl::FromUnixSeconds(1796083170);
  const WindowBounds w{.id = 1, .start = now - absl::Seconds(30), .end = now + absl::Seconds(30)};
  const int64_t used[] = {1};
  for (int i = 0; i < 1000; ++i) {
    cache.Remember(PlanQuotas::Of(plan), "s" + std::to_string(i), now, {&w, 1}, used, w.end);
  }
  EXPECT_LE(cache.size(), 32u);
  EXPECT_EQ(stats.inserts.load() + stats.full.load(), 1000u);
  EXPECT_GT(stats.full.load(), 0u);

  // Once those entries are dead, new denials displace them.
  const absl::Time later = w.end + absl::Seconds(1);
  const WindowBounds w2{.id = 2, .start = w.end, .end = w.end + absl::Seconds(60)};
  const uint64_t full_before = stats.full.load();
  for (int i = 0; i < 16; ++i) {
    cache.Remember(PlanQuotas::Of(plan), "t" + std::to_string(i), later, {&w2, 1}, used, w2.end);
  }
  EXPECT_LE(cache.size(), 32u);
  OverLimitCache::Entry e;
  int found = 0;
  for (int i = 0; i < 16; ++i) {
    found +=
        cache.CertainDenial(PlanQuotas::Of(plan), "t" + std::to_string(i), 1, later, {&w2, 1}, &e)
            ? 1
            : 0;
  }
  EXPECT_EQ(found + static_cast<int>(stats.full.load() - full_before), 16);
  EXPECT_GT(found, 0);
}

TEST(StoreFailureTag, RoundTripsThroughAStatus) {
  for (int i = 0; i < kStoreFailureKinds; ++i) {
    const auto kind = static_cast<StoreFailure>(i);
    EXPECT_EQ(StoreFailureOf(WithStoreFailure(absl::UnavailableError("x"), kind)), kind);
  }
  EXPECT_EQ(StoreFailureOf(absl::UnavailableError("untagged")), StoreFailure::kOther);
  EXPECT_EQ(StoreFailureName(StoreFailure::kCircuitOpen), "circuit_open");
}

}  // namespace
}  // namespace sluice
