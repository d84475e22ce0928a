#include "sluice/registry/effective_plan.h"

#include <optional>

#include "gtest/gtest.h"
#include "sluice/config/config.h"

namespace sluice::registry {
namespace {

constexpr absl::Time kNow = absl::FromUnixSeconds(1796565600);

class EffectivePlanTest : public ::testing::Test {
 protected:
  EffectivePlanTest()
      : plans_(*PlanSet::FromConfig(*config::ParseConfig(R"(
plans:
  free:
    limits:
      - { name: per_minute, quota: 2, window: 1m }
      - { name: daily, quota: 10, window: day }
  prepaid:
    limits:
      - { name: per_minute, quota: 2, window: 1m }
      - { name: credits, quota: 5, window: credit, alert_at: [80] }
)",
                                                         "plans.yaml"))) {}

  static Subject OnFree(std::vector<Override> overrides) {
    return Subject{.id = "user-1", .plan = "free", .overrides = std::move(overrides)};
  }

  PlanSet plans_;
  std::optional<Plan> storage_;
};

TEST_F(EffectivePlanTest, WithoutOverridesItIsThePlanItself) {
  EXPECT_EQ(EffectivePlan(plans_, OnFree({}), kNow, &storage_), plans_.Find("free"));
  EXPECT_FALSE(storage_.has_value());
}

TEST_F(EffectivePlanTest, AnOverrideInForceChangesItsLimitsQuotaOnly) {
  const Plan* p = EffectivePlan(plans_, OnFree({{.limit = "daily", .quota = 50}}), kNow, &storage_);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p, &*storage_);
  EXPECT_EQ(p->name, "free");
  EXPECT_EQ(p->index, plans_.Find("free")->index);
  ASSERT_EQ(p->limits.size(), 2u);
  EXPECT_EQ(p->limits[0].quota, 2);
  EXPECT_EQ(p->limits[1].quota, 50);
}

TEST_F(EffectivePlanTest, AnOverrideThatEndedOrNamesAnotherLimitIsIgnored) {
  const Subject s =
      OnFree({{.limit = "daily", .quota = 50, .until = kNow}, {.limit = "hourly", .quota = 7}});
  EXPECT_EQ(EffectivePlan(plans_, s, kNow, &storage_), plans_.Find("free"));
  const Plan* before = EffectivePlan(plans_, s, kNow - absl::Seconds(1), &storage_);
  ASSERT_NE(before, nullptr);
  EXPECT_EQ(before->limits[1].quota, 50);
}

TEST_F(EffectivePlanTest, APlanThisConfigurationLacksIsNone) {
  Subject s = OnFree({{.limit = "daily", .quota = 50}});
  s.plan = "gold";
  EXPECT_EQ(EffectivePlan(plans_, s, kNow, &storage_), nullptr);
}

TEST(NextOverrideEndTest, IsTheEarliestEndStillAhead) {
  const Subject s{.id = "user-1",
                  .plan = "free",
                  .overrides = {{.limit = "a", .quota = 1, .until = kNow},
                                {.limit = "b", .quota = 1, .until = kNow + absl::Hours(2)},
                                {.limit = "c", .quota = 1},
                                {.limit = "d", .quota = 1, .until = kNow + absl::Hours(1)}}};
  EXPECT_EQ(NextOverrideEnd(s, kNow), kNow + absl::Hours(1));
  EXPECT_EQ(NextOverrideEnd(s, kNow + absl::Hours(1)), kNow + absl::Hours(2));
  EXPECT_EQ(NextOverrideEnd(s, kNow + absl::Hours(2)), std::nullopt);
}

Subject OnPrepaid(int64_t credits, std::vector<Override> overrides = {}) {
  return Subject{
      .id = "user-1", .plan = "prepaid", .overrides = std::move(overrides), .credits = credits};
}

TEST_F(EffectivePlanTest, CreditsAddToTheCreditLimitsQuotaOnly) {
  const Plan* p = EffectivePlan(plans_, OnPrepaid(100), kNow, &storage_);
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(p->limits.size(), 2u);
  EXPECT_EQ(p->limits[0].quota, 2);
  EXPECT_EQ(p->limits[1].quota, 105);
  ASSERT_EQ(p->limits[1].thresholds.size(), 1u);
  EXPECT_EQ(p->limits[1].thresholds[0].count, 84);  // ceil(105 * 80%)
  EXPECT_NE(p->alert_layout, plans_.Find("prepaid")->alert_layout);
}

TEST_F(EffectivePlanTest, WithoutCreditsACreditPlanIsThePlanItself) {
  EXPECT_EQ(EffectivePlan(plans_, OnPrepaid(0), kNow, &storage_), plans_.Find("prepaid"));
}

TEST_F(EffectivePlanTest, CreditsAddToAnOverriddenStartingGrant) {
  const Plan* p =
      EffectivePlan(plans_, OnPrepaid(100, {{.limit = "credits", .quota = 50}}), kNow, &storage_);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->limits[1].quota, 150);
}

TEST_F(EffectivePlanTest, CreditsOnAPlanWithoutACreditLimitChangeNothing) {
  Subject s = OnFree({});
  s.credits = 100;
  EXPECT_EQ(EffectivePlan(plans_, s, kNow, &storage_), plans_.Find("free"));
}

TEST_F(EffectivePlanTest, AQuotaWithCreditsNeverExceedsTheLargestQuota) {
  const Plan* p = EffectivePlan(plans_, OnPrepaid(kMaxCredits), kNow, &storage_);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->limits[1].quota, kMaxCredits);
}

}  // namespace
}  // namespace sluice::registry
