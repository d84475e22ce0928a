#include "sluice/limiter/limiter.h"

#include <limits>
#include <optional>
#include <string>

#include <gtest/gtest.h>

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
