#include "sluice/limiter/limiter.h"

#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "sluice/common/strings.h"
#include "sluice/config/config.h"

namespace sluice {
namespace {

// A store that fails every call, as an unreachable Redis would.
class FailingStore final : public Store {
 public:
  void Decide(const StoreRequest&, DecideCallback done) override {
    ++calls;
    std::move(done)(absl::UnavailableError("store down"));
  }
  void Usage(const StoreRequest&, UsageCallback done) override {
    std::move(done)(absl::UnavailableError("store down"));
  }
  void Reset(const StoreRequest&, std::optional<size_t>, StatusCallback done) override {
    std::move(done)(absl::UnavailableError("store down"));
  }
  int calls = 0;
};

class LimiterTest : public ::testing::Test {
 protected:
  LimiterTest() {
    cfg_.plans.push_back(
        {.name = "free",
         .limits = {{.name = "per_minute", .quota = 60, .window = *config::ParseWindow("1m")},
                    {.name = "daily", .quota = 5000, .window = *config::ParseWindow("day")}}});
  }
  absl::StatusOr<Decision> Decide(config::OnStoreError policy, DecisionRequest req) {
    Limiter limiter(*PlanSet::FromConfig(cfg_), &store_, &clock_, {.on_store_error = policy});
    std::optional<absl::StatusOr<Decision>> out;
    limiter.Decide(req, [&](absl::StatusOr<Decision> d) { out = std::move(d); });
    return *out;
  }

  config::Config cfg_;
  FailingStore store_;
  // 2026-11-30T23:59:30Z: 30 s before the minute and the day end.
  FakeClock clock_{absl::FromUnixSeconds(1796083170)};
};

TEST_F(LimiterTest, StoreFailureUnderAllowAdmitsAndSaysDegraded) {
  absl::StatusOr<Decision> d =
      Decide(config::OnStoreError::kAllow, {.subject = "u", .plan = "free"});
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->allowed);
  EXPECT_TRUE(d->degraded);
  ASSERT_EQ(d->limits.size(), 2u);
  EXPECT_EQ(d->limits[0].remaining, 60);
  EXPECT_EQ(d->limits[1].reset_after, 30);
}

TEST_F(LimiterTest, StoreFailureUnderDenyRefusesAndSaysDegraded) {
  absl::StatusOr<Decision> d =
      Decide(config::OnStoreError::kDeny, {.subject = "u", .plan = "free"});
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->allowed);
  EXPECT_TRUE(d->degraded);
}

TEST_F(LimiterTest, AReportTheStoreCannotAnswerIsAllowedUnderDeny) {
  absl::StatusOr<Decision> d =
      Decide(config::OnStoreError::kDeny,
             {.subject = "u", .plan = "free", .cost = 3, .mode = DecideMode::kReport});
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->allowed);
  EXPECT_TRUE(d->degraded);
  EXPECT_FALSE(d->limits[0].violated);
  EXPECT_EQ(store_.calls, 1);
}

TEST_F(LimiterTest, RejectsAnInvalidSubjectWithoutAskingTheStore) {
  for (std::string subject : {std::string(""), std::string("has space"), std::string(201, 'a'),
                              std::string("tab\t"), std::string("emoji\xF0\x9F\x98\x80")}) {
    absl::StatusOr<Decision> d =
        Decide(config::OnStoreError::kAllow, {.subject = subject, .plan = "free"});
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument) << subject;
    EXPECT_EQ(d.status().message().substr(0, 8), "subject:");
  }
  EXPECT_EQ(store_.calls, 0);
}

TEST_F(LimiterTest, AcceptsEverySubjectCharacterTheDesignAllows) {
  absl::StatusOr<Decision> d =
      Decide(config::OnStoreError::kAllow,
             {.subject = "AZaz09._:@/+=-" + std::string(186, 'x'), .plan = "free"});
  EXPECT_TRUE(d.ok()) << d.status();
}

TEST_F(LimiterTest, RejectsCostOutsideZeroToAMillion) {
  for (int64_t cost : {int64_t{-1}, kMaxCost + 1}) {
    absl::StatusOr<Decision> d =
        Decide(config::OnStoreError::kAllow, {.subject = "u", .plan = "free", .cost = cost});
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(d.status().message(), "cost: must be an integer from 0 to 1000000");
  }
}

TEST_F(LimiterTest, UnknownPlanIsNotFound) {
  absl::StatusOr<Decision> d =
      Decide(config::OnStoreError::kAllow, {.subject = "u", .plan = "gold"});
  EXPECT_EQ(d.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(d.status().message(), "plan: unknown plan \"gold\"");
}

TEST(DecisionTest, TightestIsTheLimitWithLeastRemaining) {
  Limit a{.name = "a"}, b{.name = "b"};
  Decision d;
  d.limits.push_back({.limit = &a, .remaining = 5, .reset_after = 10});
  d.limits.push_back({.limit = &b, .remaining = 2, .reset_after = 1000});
  EXPECT_EQ(d.Tightest().limit, &b);
  d.limits[0].remaining = 2;
  EXPECT_EQ(d.Tightest().limit, &a);  // tie: the one that resets sooner
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// A store that answers with whatever result it is given, right or wrong.
class ScriptedStore final : public Store {
 public:
  explicit ScriptedStore(StoreResult result) : result_(std::move(result)) {}
  void Decide(const StoreRequest&, DecideCallback done) override { std::move(done)(result_); }
  void Usage(const StoreRequest&, UsageCallback done) override {
    std::vector<LimitUsage> usage(result_.used.size());
    for (size_t i = 0; i < usage.size(); ++i) usage[i].used = result_.used[i];
    std::move(done)(std::move(usage));
  }
  void Reset(const StoreRequest&, std::optional<size_t>, StatusCallback done) override {
    std::move(done)(absl::OkStatus());
  }

 private:
  StoreResult result_;
};

class UnusableCounterTest : public ::testing::Test {
 protected:
  UnusableCounterTest() {
    cfg_.plans.push_back(
        {.name = "free",
         .limits = {{.name = "per_minute", .quota = 60, .window = *config::ParseWindow("1m")},
                    {.name = "daily", .quota = 5000, .window = *config::ParseWindow("day")}}});
  }
  Decision Decide(StoreResult result) {
    ScriptedStore store(std::move(result));
    Limiter limiter(*PlanSet::FromConfig(cfg_), &store, &clock_, {});
    std::optional<absl::StatusOr<Decision>> out;
    limiter.Decide({.subject = "u", .plan = "free"},
                   [&](absl::StatusOr<Decision> d) { out = std::move(d); });
    EXPECT_TRUE(out.has_value() && out->ok());
    return **out;
  }
  config::Config cfg_;
  FakeClock clock_{absl::FromUnixSeconds(1796083170)};
};

TEST_F(UnusableCounterTest, IsReportedAsExhaustedEvenIfAStoreAdmitted) {
  for (const int64_t bad : {int64_t{-1}, std::numeric_limits<int64_t>::min(), kMaxUsed + 1,
                            std::numeric_limits<int64_t>::max()}) {
    Decision d = Decide({.allowed = true, .used = {bad, 7}});
    EXPECT_FALSE(d.allowed) << bad;
    EXPECT_EQ(d.limits[0].used, 60) << bad;
    EXPECT_EQ(d.limits[0].remaining, 0) << bad;
    EXPECT_TRUE(d.limits[0].violated) << bad;
    EXPECT_EQ(d.limits[1].used, 7) << bad;
    EXPECT_EQ(d.limits[1].remaining, 4993) << bad;
    EXPECT_FALSE(d.limits[1].violated) << bad;
    EXPECT_EQ(d.retry_after, 30) << bad;
  }
}

TEST_F(UnusableCounterTest, AValidCounterAboveTheQuotaLeavesNothingAndNeverWraps) {
  Decision d = Decide({.allowed = false, .used = {kMaxUsed, 0}});
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.limits[0].used, kMaxUsed);
  EXPECT_EQ(d.limits[0].remaining, 0);
  EXPECT_TRUE(d.limits[0].violated);
  EXPECT_FALSE(d.limits[1].violated);
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// Effective plans: Plan::WithQuotas and the Limiter's effective_plan, Usage and Reset overloads.

config::Config FreePlanConfig() {
  config::Config cfg;
  cfg.plans.push_back({.name = "free",
                       .timezone = "Europe/Paris",
                       .limits = {{.name = "per_minute",
                                   .quota = 60,
                                   .window = *config::ParseWindow("1m"),
                                   .alert_at = {50, 100}},
                                  {.name = "daily",
                                   .quota = 5000,
                                   .window = *config::ParseWindow("day"),
                                   .alert_at = {80}}}});
  return cfg;
}

TEST(PlanWithQuotasTest, ReplacesTheQuotasAndRecomputesTheThresholdCounts) {
  PlanSet plans = *PlanSet::FromConfig(FreePlanConfig());
  const Plan& free = *plans.Find("free");
  const Plan p = free.WithQuotas({7, 100001});
  ASSERT_EQ(p.limits.size(), 2u);
  EXPECT_EQ(p.limits[0].quota, 7);
  EXPECT_EQ(p.limits[0].thresholds[0].percent, 50);
  EXPECT_EQ(p.limits[0].thresholds[0].count, 4);  // ceil(3.5)
  EXPECT_EQ(p.limits[0].thresholds[1].count, 7);
  EXPECT_EQ(p.limits[1].quota, 100001);
  EXPECT_EQ(p.limits[1].thresholds[0].count, 80001);  // ceil(80000.8)
  EXPECT_EQ(free.limits[0].quota, 60);                // the plan itself is unchanged
}

TEST(PlanWithQuotasTest, KeepsTheIdentityAndSharesTheWindowCaches) {
  PlanSet plans = *PlanSet::FromConfig(FreePlanConfig());
  const Plan& free = *plans.Find("free");
  const Plan p = free.WithQuotas({7, 9});
  EXPECT_EQ(p.name, free.name);
  EXPECT_EQ(p.tag, free.tag);
  EXPECT_EQ(p.tz, free.tz);
  for (size_t i = 0; i < p.limits.size(); ++i) {
    EXPECT_EQ(p.limits[i].name, free.limits[i].name);
    EXPECT_EQ(p.limits[i].tag, free.limits[i].tag);
    EXPECT_EQ(p.limits[i].window, free.limits[i].window);
    EXPECT_EQ(p.limits[i].window_cache, free.limits[i].window_cache);
  }
}

TEST(PlanWithQuotasTest, HasAnAlertLayoutOfItsQuotas) {
  PlanSet plans = *PlanSet::FromConfig(FreePlanConfig());
  const Plan& free = *plans.Find("free");
  const Plan raised = free.WithQuotas({120, 5000});
  ASSERT_NE(raised.alerts, nullptr);
  EXPECT_NE(raised.alert_layout, free.alert_layout);
  EXPECT_EQ(raised.alerts->id, raised.alert_layout);
  EXPECT_EQ(raised.alerts->limits[0].quota, 120);
  EXPECT_EQ(raised.alerts->limits[0].percents, (std::vector<int>{50, 100}));
  // The same quotas give the same layout as the plan's own.
  EXPECT_EQ(free.WithQuotas({60, 5000}).alert_layout, free.alert_layout);
}

TEST(LimitTagTest, IsTheNameAndTheWindowWithTheZoneOfACalendarWindow) {
  const absl::TimeZone utc = absl::UTCTimeZone();
  absl::TimeZone paris;
  ASSERT_TRUE(absl::LoadTimeZone("Europe/Paris", &paris));
  const config::WindowSpec day = *config::ParseWindow("day");
  EXPECT_EQ(LimitTag("daily", day, utc), LimitTag("daily", *config::ParseWindow("day"), utc));
  EXPECT_NE(LimitTag("daily", day, utc), LimitTag("daily", *config::ParseWindow("1h"), utc));
  EXPECT_NE(LimitTag("daily", day, utc), LimitTag("other", day, utc));
  EXPECT_NE(LimitTag("daily", day, utc), LimitTag("daily", day, paris));
  const config::WindowSpec minute = *config::ParseWindow("1m");
  EXPECT_EQ(LimitTag("m", minute, utc), LimitTag("m", *config::ParseWindow("60s"), paris));
  // Every calendar period is a window of its own.
  const config::WindowSpec week = *config::ParseWindow("week");
  const config::WindowSpec year = *config::ParseWindow("year");
  EXPECT_NE(LimitTag("q", week, utc), LimitTag("q", day, utc));
  EXPECT_NE(LimitTag("q", year, utc), LimitTag("q", *config::ParseWindow("month"), utc));
  EXPECT_NE(LimitTag("q", year, utc), LimitTag("q", week, utc));
  EXPECT_NE(LimitTag("q", year, utc), LimitTag("q", year, paris));
}

TEST(WindowKeyTest, NamesTheLengthOrTheCalendarAndZoneWithoutColons) {
  absl::TimeZone paris, fixed;
  ASSERT_TRUE(absl::LoadTimeZone("Europe/Paris", &paris));
  ASSERT_TRUE(absl::LoadTimeZone("Fixed/UTC+05:30:00", &fixed));
  EXPECT_EQ(WindowKey(*config::ParseWindow("1m"), paris), "60s");
  EXPECT_EQ(WindowKey(*config::ParseWindow("2h"), paris), "7200s");
  EXPECT_EQ(WindowKey(*config::ParseWindow("day"), paris), "day@Europe/Paris");
  EXPECT_EQ(WindowKey(*config::ParseWindow("month"), fixed), "month@Fixed/UTC+05.30.00");
  EXPECT_EQ(WindowKey(*config::ParseWindow("week"), paris), "week@Europe/Paris");
  EXPECT_EQ(WindowKey(*config::ParseWindow("year"), fixed), "year@Fixed/UTC+05.30.00");
}

// A store that records what it was asked and answers later, when told to (as a remote store does).
class DeferredStore final : public Store {
 public:
  void Decide(const StoreRequest& req, DecideCallback done) override {
    quotas.push_back(req.plan->limits[0].quota);
    decides.push_back(std::move(done));
  }
  void Usage(const StoreRequest& req, UsageCallback done) override {
    quotas.push_back(req.plan->limits[0].quota);
    usages.push_back(std::move(done));
  }
  void Reset(const StoreRequest& req, std::optional<size_t> limit, StatusCallback done) override {
    quotas.push_back(req.plan->limits[0].quota);
    reset_limit = limit;
    std::move(done)(absl::OkStatus());
  }
  std::vector<int64_t> quotas;  // limit 0's quota of each request
  std::vector<DecideCallback> decides;
  std::vector<UsageCallback> usages;
  std::optional<size_t> reset_limit;
};

class EffectivePlanTest : public ::testing::Test {
 protected:
  EffectivePlanTest()
      : limiter_(*PlanSet::FromConfig(FreePlanConfig()), &store_, &clock_,
                 {.overlimit_cache_capacity = 100}) {}
  const Plan& Free() { return *limiter_.plans().Find("free"); }

  DeferredStore store_;
  FakeClock clock_{absl::FromUnixSeconds(1796083170)};
  Limiter limiter_;
};

TEST_F(EffectivePlanTest, IsUsedInsteadOfThePlanNamed) {
  const Plan raised = Free().WithQuotas({120, 9000});
  std::optional<absl::StatusOr<Decision>> out;
  limiter_.Decide({.subject = "u", .plan = "no-such-plan", .effective_plan = &raised},
                  [&](absl::StatusOr<Decision> d) { out = std::move(d); });
  ASSERT_EQ(store_.quotas, std::vector<int64_t>{120});
  std::move(store_.decides[0])(StoreResult{.allowed = true, .used = {1, 1}});
  ASSERT_TRUE(out.has_value() && out->ok()) << out->status();
  EXPECT_EQ((*out)->plan, &raised);
  EXPECT_EQ((*out)->limits[0].remaining, 119);
  EXPECT_EQ((*out)->limits[1].remaining, 8999);
}

TEST_F(EffectivePlanTest, IsNotReadAfterTheCallReturns) {
  auto raised = std::make_unique<Plan>(Free().WithQuotas({2, 9000}));
  std::optional<absl::StatusOr<Decision>> out;
  limiter_.Decide({.subject = "u", .cost = 5, .effective_plan = raised.get()},
                  [&](absl::StatusOr<Decision> d) { out = std::move(d); });
  raised.reset();  // gone before the store answers: the sanitizers see any read of it
  std::move(store_.decides[0])(StoreResult{.allowed = false, .used = {1, 3}});
  ASSERT_TRUE(out.has_value() && out->ok());
  EXPECT_FALSE((*out)->allowed);
  EXPECT_EQ((*out)->limits[0].used, 1);
  EXPECT_EQ((*out)->limits[0].remaining, 1);
  EXPECT_TRUE((*out)->limits[0].violated);  // 1 + 5 > 2: the copied quota was applied
  EXPECT_FALSE((*out)->limits[1].violated);
  EXPECT_EQ(limiter_.overlimit_cache_size(), 1u);  // remembered from the copies

  auto again = std::make_unique<Plan>(Free().WithQuotas({2, 9000}));
  out.reset();
  limiter_.Decide({.subject = "u", .cost = 5, .effective_plan = again.get()},
                  [&](absl::StatusOr<Decision> d) { out = std::move(d); });
  ASSERT_TRUE(out.has_value() && out->ok());  // answered from the cache
  EXPECT_FALSE((*out)->allowed);
  EXPECT_EQ(store_.decides.size(), 1u);
}

// A store that fails after the effective plan is gone: on_store_error decides from the copied
// shadow flags (the sanitizers see any read of the plan), with and without an over-limit cache
// (the two ways the asynchronous path copies the plan's terms).
TEST_F(EffectivePlanTest, AStoreFailureAfterThePlanIsGoneIsDecidedFromTheCopies) {
  for (const size_t capacity : {size_t{0}, size_t{100}}) {
    for (const bool all_shadow : {false, true}) {
      SCOPED_TRACE(absl::StrCat("cache ", capacity, ", all shadow ", all_shadow));
      DeferredStore store;
      Limiter limiter(
          *PlanSet::FromConfig(FreePlanConfig()), &store, &clock_,
          {.on_store_error = config::OnStoreError::kDeny, .overlimit_cache_capacity = capacity});
      auto raised = std::make_unique<Plan>(Free().WithQuotas({120, 9000}));
      for (Limit& limit : raised->limits) limit.shadow = all_shadow;
      std::optional<absl::StatusOr<Decision>> out;
      limiter.Decide({.subject = "u", .cost = 1, .effective_plan = raised.get()},
                     [&](absl::StatusOr<Decision> d) { out = std::move(d); });
      raised.reset();
      ASSERT_EQ(store.decides.size(), 1u);
      std::move(store.decides[0])(absl::UnavailableError("store down"));
      ASSERT_TRUE(out.has_value() && out->ok());
      EXPECT_TRUE((*out)->degraded);
      // Under deny, an enforced limit refuses; shadow limits alone never do.
      EXPECT_EQ((*out)->allowed, all_shadow);
    }
  }
}

TEST_F(EffectivePlanTest, UsageTakesAnEffectivePlanAndReadsItOnlyDuringTheCall) {
  auto raised = std::make_unique<Plan>(Free().WithQuotas({120, 9000}));
  std::optional<absl::StatusOr<std::vector<LimitUsage>>> out;
  limiter_.Usage("u", *raised,
                 [&](absl::StatusOr<std::vector<LimitUsage>> u) { out = std::move(u); });
  EXPECT_EQ(store_.quotas, std::vector<int64_t>{120});
  raised.reset();
  std::vector<LimitUsage> usage(2);
  usage[0].used = -1;  // unusable: shown as the (copied) effective quota
  usage[1].used = 7;
  std::move(store_.usages[0])(std::move(usage));
  ASSERT_TRUE(out.has_value() && out->ok());
  EXPECT_EQ((**out)[0].used, 120);
  EXPECT_EQ((**out)[1].used, 7);
}

TEST_F(EffectivePlanTest, ResetTakesAnEffectivePlan) {
  const Plan raised = Free().WithQuotas({120, 9000});
  std::optional<absl::Status> out;
  limiter_.Reset("u", raised, "daily", [&](absl::Status s) { out = s; });
  ASSERT_TRUE(out.has_value() && out->ok());
  EXPECT_EQ(store_.quotas, std::vector<int64_t>{120});
  EXPECT_EQ(store_.reset_limit, std::optional<size_t>(1));
  limiter_.Reset("u", raised, "weekly", [&](absl::Status s) { out = s; });
  EXPECT_EQ(out->code(), absl::StatusCode::kNotFound);
  limiter_.Reset("bad subject", raised, "", [&](absl::Status s) { out = s; });
  EXPECT_EQ(out->code(), absl::StatusCode::kInvalidArgument);
}

// --- Group decisions ----------------------------------------------------------------------

class GroupTest : public LimiterTest {
 protected:
  absl::StatusOr<std::vector<Decision>> Group(config::OnStoreError policy,
                                              std::vector<GroupPart> parts,
                                              std::string_view group = "g") {
    Limiter limiter(*PlanSet::FromConfig(cfg_), &store_, &clock_, {.on_store_error = policy});
    std::optional<absl::StatusOr<std::vector<Decision>>> out;
    limiter.DecideGroup(group, parts,
                        [&](absl::StatusOr<std::vector<Decision>> d) { out = std::move(d); });
    return *out;
  }
  // A caller-built plan, as DecideGroup takes them.
  Plan plan_ = *PlanSet::FromConfig(cfg_)->Find("free");
};

TEST_F(GroupTest, RejectsABadPartNamingIt) {
  struct Case {
    std::vector<GroupPart> parts;
    std::string_view prefix;
  };
  const std::vector<Case> cases = {
      {{{.subject = "a", .plan = &plan_}, {.subject = "b c", .plan = &plan_}}, "parts[1].subject:"},
      {{{.subject = "a", .plan = &plan_, .cost = -1}}, "parts[0].cost:"},
      {{{.subject = "a", .plan = &plan_}, {.subject = "b", .plan = &plan_, .cost = kMaxCost + 1}},
       "parts[1].cost:"},
      {{{.subject = "a", .plan = &plan_}, {.subject = "b", .plan = nullptr}}, "parts[1].plan:"},
      {{{.subject = "a", .plan = &plan_},
        {.subject = "b", .plan = &plan_, .mode = DecideMode::kReport}},
       "parts[1].mode:"},
      {{{.subject = "a", .plan = &plan_},
        {.subject = "b", .plan = &plan_},
        {.subject = "a", .plan = &plan_}},
       "parts[2].subject:"},
      {{}, "parts:"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::vector<Decision>> d = Group(config::OnStoreError::kAllow, c.parts);
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument) << c.prefix;
    EXPECT_TRUE(absl::StartsWith(d.status().message(), ToAbsl(c.prefix))) << d.status();
  }
  EXPECT_EQ(store_.calls, 0);
}

TEST_F(GroupTest, RejectsMoreThanTheMaximumParts) {
  std::vector<std::string> subjects;
  for (size_t i = 0; i <= kMaxGroupParts; ++i) subjects.push_back("s" + std::to_string(i));
  std::vector<GroupPart> parts;
  for (const std::string& s : subjects) parts.push_back({.subject = s, .plan = &plan_});
  EXPECT_EQ(Group(config::OnStoreError::kAllow, parts).status().code(),
            absl::StatusCode::kInvalidArgument);
  parts.pop_back();
  EXPECT_TRUE(Group(config::OnStoreError::kAllow, parts).ok());
}

TEST_F(GroupTest, RejectsAnInvalidGroup) {
  absl::StatusOr<std::vector<Decision>> d =
      Group(config::OnStoreError::kAllow, {{.subject = "a", .plan = &plan_}}, "bad group");
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(d.status().message(), "group:")) << d.status();
}

TEST_F(GroupTest, AGroupReportTheStoreCannotAnswerIsAllowedUnderDeny) {
  absl::StatusOr<std::vector<Decision>> d = Group(
      config::OnStoreError::kDeny, {{.subject = "a", .plan = &plan_, .mode = DecideMode::kReport},
                                    {.subject = "b", .plan = &plan_, .mode = DecideMode::kReport}});
  ASSERT_TRUE(d.ok()) << d.status();
  for (const Decision& part : *d) {
    EXPECT_TRUE(part.allowed);
    EXPECT_TRUE(part.degraded);
  }
}

TEST_F(GroupTest, AStoreFailureDegradesEveryPartByThePolicy) {
  for (const config::OnStoreError policy :
       {config::OnStoreError::kAllow, config::OnStoreError::kDeny}) {
    absl::StatusOr<std::vector<Decision>> d =
        Group(policy, {{.subject = "a", .plan = &plan_}, {.subject = "b", .plan = &plan_}});
    ASSERT_TRUE(d.ok()) << d.status();
    ASSERT_EQ(d->size(), 2u);
    for (const Decision& part : *d) {
      EXPECT_TRUE(part.degraded);
      EXPECT_EQ(part.allowed, policy == config::OnStoreError::kAllow);
      EXPECT_EQ(part.plan, &plan_);  // the caller's plan
      EXPECT_EQ(part.limits[0].remaining, 60);
    }
  }
}

}  // namespace
}  // namespace sluice
