#include "sluice/frontend/answer.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/time/time.h"
#include "sluice/config/config.h"

namespace sluice::frontend {
namespace {

using Fields = std::vector<std::pair<std::string, std::string>>;

Fields FieldsOf(const Answer& answer) {
  Fields fields;
  for (const Header& h : answer.headers) fields.emplace_back(h.name, h.value);
  return fields;
}

class AnswerTest : public ::testing::Test {
 protected:
  AnswerTest() {
    per_minute_ = {.name = "per_minute", .quota = 60, .window = *config::ParseWindow("1m")};
    trial_ = {.name = "trial", .quota = 10, .window = *config::ParseWindow("1h"), .shadow = true};
    plan_.name = "free";
  }

  // The per-minute limit is used up; 42 s must pass.
  Decision Denied() const {
    Decision d{.plan = &plan_, .allowed = false, .retry_after = 42};
    d.limits.push_back({.limit = &per_minute_,
                        .used = 60,
                        .remaining = 0,
                        .reset_after = 42,
                        .window_start = kNow - absl::Seconds(18),
                        .window_end = kNow + absl::Seconds(42),
                        .violated = true});
    return d;
  }

  static constexpr absl::Time kNow = absl::FromUnixSeconds(1796083200);

  Limit per_minute_;
  Limit trial_;
  Plan plan_;
};

const Fields kDeniedRateLimitFields = {
    {"RateLimit-Policy", "\"per_minute\";q=60;w=60"},
    {"RateLimit", "\"per_minute\";r=0;t=42"},
    {"X-RateLimit-Limit", "60"},
    {"X-RateLimit-Remaining", "0"},
    {"X-RateLimit-Reset", "42"},
};

TEST_F(AnswerTest, ADenialByQuotaIsProblemJsonWithTheRateLimitFieldsThenRetryAfter) {
  const Answer answer = DenialAnswer(Denied(), {.subject = "user-1", .plan = "free"}, {});
  EXPECT_EQ(answer.status, 429u);
  EXPECT_EQ(answer.content_type, "application/problem+json");
  Fields want = kDeniedRateLimitFields;
  want.emplace_back("Retry-After", "42");
  EXPECT_EQ(FieldsOf(answer), want);
  const nlohmann::json body = nlohmann::json::parse(answer.body);
  EXPECT_EQ(body["type"], kQuotaExceededType);
  EXPECT_EQ(body["status"], 429);
  EXPECT_EQ(body["detail"], "Quota exceeded: per_minute; retry after 42 seconds.");
  EXPECT_EQ(body["violated-policies"], nlohmann::json::array({"per_minute"}));
}

TEST_F(AnswerTest, TheStyleSetsTheStatusThenAddsSluiceDeniedThenWhoWasDecided) {
  const Answer answer = DenialAnswer(Denied(), {.subject = "user-1", .plan = "free"},
                                     {.status = 403, .name_who = true, .denied_header = true});
  EXPECT_EQ(answer.status, 403u);
  Fields want = kDeniedRateLimitFields;
  want.emplace_back("Retry-After", "42");
  want.emplace_back("Sluice-Denied", "quota");
  want.emplace_back("Sluice-Subject", "user-1");
  want.emplace_back("Sluice-Plan", "free");
  EXPECT_EQ(FieldsOf(answer), want);
  EXPECT_EQ(nlohmann::json::parse(answer.body)["status"], 403);
}

TEST_F(AnswerTest, ADenialBecauseTheStoreFailedIs503WithTheRateLimitFieldsAndNothingElse) {
  Decision d = Denied();
  d.degraded = true;
  d.limits[0].violated = false;
  const Answer answer = DenialAnswer(d, {.subject = "user-1", .plan = "free"},
                                     {.status = 403, .name_who = true, .denied_header = true});
  EXPECT_EQ(answer.status, 503u);
  Fields want = {{"Sluice-Degraded", "1"}};
  want.insert(want.end(), kDeniedRateLimitFields.begin(), kDeniedRateLimitFields.end());
  EXPECT_EQ(FieldsOf(answer), want);
  EXPECT_EQ(answer.body,
            R"({"type":"about:blank","title":"Service Unavailable","status":503,)"
            R"("detail":"the rate limit store is unavailable and on_store_error is deny"})");
}

TEST_F(AnswerTest, AShadowLimitThatWouldHaveDeniedIsNamedBeforeThePolicies) {
  Decision d = Denied();
  d.limits.push_back({.limit = &trial_, .used = 10, .remaining = 0, .would_deny = true});
  std::vector<std::string> names;
  ForEachRateLimitHeader(d, [&](std::string_view name, std::string_view value) {
    names.emplace_back(name);
    if (name == kShadowDeniedHeader) {
      EXPECT_EQ(value, "trial");
    }
  });
  EXPECT_EQ(names, (std::vector<std::string>{"Sluice-Shadow-Denied", "RateLimit-Policy",
                                             "RateLimit", "X-RateLimit-Limit",
                                             "X-RateLimit-Remaining", "X-RateLimit-Reset"}));
}

TEST_F(AnswerTest, ACreditLimitHasNeitherAWindowLengthNorATimeToAReset) {
  const Limit credits{.name = "credits", .quota = 500, .window = *config::ParseWindow("credit")};
  Decision d{.plan = &plan_, .allowed = true};
  d.limits.push_back({.limit = &credits,
                      .used = 120,
                      .remaining = 380,
                      .reset_after = 0,
                      .window_start = absl::UnixEpoch(),
                      .window_end = kNow + absl::Hours(24 * 365)});
  d.limits.push_back({.limit = &per_minute_, .used = 1, .remaining = 59, .reset_after = 42});
  Fields fields;
  ForEachRateLimitHeader(
      d, [&](std::string_view name, std::string_view value) { fields.emplace_back(name, value); });
  EXPECT_EQ(fields, (Fields{{"RateLimit-Policy", "\"credits\";q=500, \"per_minute\";q=60;w=60"},
                            {"RateLimit", "\"credits\";r=380, \"per_minute\";r=59;t=42"},
                            {"X-RateLimit-Limit", "60"},
                            {"X-RateLimit-Remaining", "59"},
                            {"X-RateLimit-Reset", "42"}}));
  EXPECT_EQ(WindowSeconds(d.limits[0]), 0);
}

TEST_F(AnswerTest, ADecisionWithoutLimitsHasNoRateLimitFields) {
  Decision d{.plan = &plan_, .allowed = true};
  int fields = 0;
  ForEachRateLimitHeader(d, [&](std::string_view, std::string_view) { ++fields; });
  EXPECT_EQ(fields, 0);
}

TEST(RefusalAnswerTest, AnUnknownKeyAsksForBearerCredentials) {
  const Answer answer =
      RefusalAnswer({.status = 401, .title = "Unauthorized", .detail = "unknown API key"},
                    {.denied_header = true});
  EXPECT_EQ(answer.status, 401u);
  EXPECT_EQ(FieldsOf(answer), (Fields{{"WWW-Authenticate", "Bearer"}}));
  EXPECT_EQ(answer.body, R"({"type":"about:blank","title":"Unauthorized","status":401,)"
                         R"("detail":"unknown API key"})");
}

TEST(RefusalAnswerTest, ARegistryStillLoadingSaysRetrySoon) {
  const Answer answer = RefusalAnswer(
      {.status = 503, .title = "Service Unavailable", .detail = "loading", .retry_soon = true}, {});
  EXPECT_EQ(FieldsOf(answer), (Fields{{"Retry-After", "1"}}));
}

TEST(RefusalAnswerTest, ADisabledSubjectIsMarkedOnlyWhenTheStyleAsks) {
  const Refusal disabled{
      .status = 403, .title = "Forbidden", .detail = "subject \"u\" is disabled", .disabled = true};
  EXPECT_EQ(FieldsOf(RefusalAnswer(disabled, {.denied_header = true})),
            (Fields{{"Sluice-Denied", "disabled"}}));
  EXPECT_TRUE(RefusalAnswer(disabled, {}).headers.empty());
}

}  // namespace
}  // namespace sluice::frontend
