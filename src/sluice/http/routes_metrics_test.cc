// HttpMetrics: decisions counted by plan and by the limit that denied them.
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/config/config.h"
#include "sluice/http/routes.h"
#include "sluice/limiter/decision.h"
#include "sluice/limiter/plan.h"
#include "sluice/metrics/metrics.h"

namespace sluice::http {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kPlans[] = R"(
plans:
  free:
    limits:
      - { name: per_minute, quota: 2, window: 1m }
      - { name: daily, quota: 10, window: day }
  pro:
    limits:
      - { name: per_minute, quota: 100, window: 1m }
      - { name: trial, quota: 50, window: 1m, shadow: true }
)";

class DecisionMetricsTest : public ::testing::Test {
 protected:
  DecisionMetricsTest()
      : plans_(*PlanSet::FromConfig(*config::ParseConfig(kPlans, "test.yaml"))),
        metrics_(registry_) {}

  // A denial of `plan` by the limits at the positions in `violated`.
  Decision Denial(const Plan* plan, std::initializer_list<size_t> violated) const {
    Decision d{.plan = plan, .allowed = false};
    for (const Limit& l : plan->limits) d.limits.push_back({.limit = &l});
    for (size_t i : violated) d.limits[i].violated = true;
    return d;
  }

  PlanSet plans_;
  metrics::Registry registry_;
  HttpMetrics metrics_;
  Frontend fe_;
};

TEST_F(DecisionMetricsTest, CountersForShowEveryPlanAndLimitAtZero) {
  fe_.counters = metrics_.CountersFor(plans_);
  ASSERT_NE(fe_.counters, nullptr);
  const std::string text = registry_.Render();
  EXPECT_THAT(text, HasSubstr("sluice_decisions_total{plan=\"pro\",result=\"allowed\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("sluice_limit_denials_total{plan=\"free\",limit=\"daily\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("sluice_limit_denials_total{plan=\"pro\",limit=\"per_minute\"} 0\n"));
}

TEST_F(DecisionMetricsTest, ADenialCountsEachLimitItViolated) {
  fe_.counters = metrics_.CountersFor(plans_);
  metrics_.CountDecision(fe_, "free", Denial(plans_.Find("free"), {0, 1}));
  metrics_.CountDecision(fe_, "free", Denial(plans_.Find("free"), {1}));
  const std::string text = registry_.Render();
  EXPECT_THAT(text, HasSubstr("sluice_decisions_total{plan=\"free\",result=\"denied\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("sluice_limit_denials_total{plan=\"free\",limit=\"daily\"} 2\n"));
  EXPECT_THAT(text,
              HasSubstr("sluice_limit_denials_total{plan=\"free\",limit=\"per_minute\"} 1\n"));
}

TEST_F(DecisionMetricsTest, AnOverriddenPlanCountsUnderItsPlan) {
  fe_.counters = metrics_.CountersFor(plans_);
  const Plan overridden = plans_.Find("free")->WithQuotas({5, 50});
  metrics_.CountDecision(fe_, "free", Denial(&overridden, {0}));
  EXPECT_THAT(registry_.Render(),
              HasSubstr("sluice_limit_denials_total{plan=\"free\",limit=\"per_minute\"} 1\n"));
}

TEST_F(DecisionMetricsTest, WithoutCountersDecisionsAreCountedByLabels) {
  metrics_.CountDecision(fe_, "free", Denial(plans_.Find("free"), {0}));
  Decision allowed{.plan = plans_.Find("pro"), .allowed = true};
  metrics_.CountDecision(fe_, "pro", allowed);
  const std::string text = registry_.Render();
  EXPECT_THAT(text, HasSubstr("sluice_decisions_total{plan=\"free\",result=\"denied\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("sluice_decisions_total{plan=\"pro\",result=\"allowed\"} 1\n"));
  EXPECT_THAT(text,
              HasSubstr("sluice_limit_denials_total{plan=\"free\",limit=\"per_minute\"} 1\n"));
  EXPECT_THAT(text, Not(HasSubstr("limit=\"daily\"")));
}

TEST_F(DecisionMetricsTest, ADegradedAnswerCountsAStoreErrorAndNoLimit) {
  fe_.counters = metrics_.CountersFor(plans_);
  Decision d = Denial(plans_.Find("free"), {});
  d.degraded = true;
  d.failure = StoreFailure::kTimeout;
  metrics_.CountDecision(fe_, "free", d);
  const std::string text = registry_.Render();
  EXPECT_THAT(text, HasSubstr("sluice_store_errors_total{plan=\"free\",reason=\"timeout\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("sluice_limit_denials_total{plan=\"free\",limit=\"daily\"} 0\n"));
}

TEST_F(DecisionMetricsTest, AShadowLimitThatWouldDenyIsCountedWhetherOrNotTheRequestWasAdmitted) {
  fe_.counters = metrics_.CountersFor(plans_);
  EXPECT_THAT(registry_.Render(),
              HasSubstr("sluice_shadow_denials_total{plan=\"pro\",limit=\"trial\"} 0\n"));
  EXPECT_THAT(registry_.Render(), Not(HasSubstr("sluice_shadow_denials_total{plan=\"free\"")));
  Decision admitted{.plan = plans_.Find("pro"), .allowed = true};
  for (const Limit& l : plans_.Find("pro")->limits) admitted.limits.push_back({.limit = &l});
  admitted.limits[1].would_deny = true;
  metrics_.CountDecision(fe_, "pro", admitted);
  Decision denied = Denial(plans_.Find("pro"), {0});
  denied.limits[1].would_deny = true;
  metrics_.CountDecision(fe_, "pro", denied);
  const std::string text = registry_.Render();
  EXPECT_THAT(text, HasSubstr("sluice_shadow_denials_total{plan=\"pro\",limit=\"trial\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("sluice_limit_denials_total{plan=\"pro\",limit=\"trial\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("sluice_limit_denials_total{plan=\"pro\",limit=\"per_minute\"} 1\n"));
}

}  // namespace
}  // namespace sluice::http
