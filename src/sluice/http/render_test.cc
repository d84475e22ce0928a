#include "sluice/http/render.h"

#include <gtest/gtest.h>

#include <string>

#include "absl/time/time.h"
#include "sluice/config/config.h"

namespace sluice::http {
namespace {

namespace beast_http = boost::beast::http;

class RenderTest : public ::testing::Test {
 protected:
  RenderTest() {
    per_minute_ = {.name = "per_minute", .quota = 60, .window = *config::ParseWindow("1m")};
    daily_ = {.name = "daily", .quota = 5000, .window = *config::ParseWindow("day")};
    plan_.name = "free";
  }

  // An allowed first request: 59 left this minute (42 s to go), 4999 today (36012 s to go).
  Decision Allowed() const {
    Decision d{.plan = &plan_, .allowed = true};
    d.limits.push_back({.limit = &per_minute_,
                        .used = 1,
                        .remaining = 59,
                        .reset_after = 42,
                        .window_start = kNow - absl::Seconds(18),
                        .window_end = kNow + absl::Seconds(42)});
    d.limits.push_back({.limit = &daily_,
                        .used = 1,
                        .remaining = 4999,
                        .reset_after = 36012,
                        .window_start = kMidnight,
                        .window_end = kMidnight + absl::Hours(24)});
    return d;
  }
  // The per-minute limit is used up; the request was refused and 42 s must pass.
  Decision Denied() const {
    Decision d = Allowed();
    d.allowed = false;
    d.retry_after = 42;
    d.limits[0].used = 60;
    d.limits[0].remaining = 0;
    d.limits[0].violated = true;
    return d;
  }
  static std::string Header(const Response& res, std::string_view name) {
    return std::string(res[boost::beast::string_view(name.data(), name.size())]);
  }
  static bool Has(const Response& res, std::string_view name) {
    return res.count(boost::beast::string_view(name.data(), name.size())) > 0;
  }

  static constexpr absl::Time kMidnight = absl::FromUnixSeconds(1796083200);  // 2026-12-01
  static constexpr absl::Time kNow = absl::FromUnixSeconds(1796083200 + 50388);

  Limit per_minute_;
  Limit daily_;
  Plan plan_;
  Response res_;
};

TEST_F(RenderTest, DecisionJsonHasTheDesignShape) {
  EXPECT_EQ(
      DecisionJson(Allowed(), "user-42"),
      R"({"allowed":true,"subject":"user-42","plan":"free","degraded":false,)"
      R"("retry_after":0,"violated":[],"limits":[)"
      R"({"name":"per_minute","quota":60,"used":1,"held":0,"remaining":59,"reset_after":42,)"
      R"("window":"1m"},)"
      R"({"name":"daily","quota":5000,"used":1,"held":0,"remaining":4999,"reset_after":36012,)"
      R"("window":"day"}]})");
}

TEST_F(RenderTest, DecisionJsonOfADenialNamesTheViolatedLimitsAndTheWait) {
  EXPECT_EQ(
      DecisionJson(Denied(), "user-42"),
      R"({"allowed":false,"subject":"user-42","plan":"free","degraded":false,)"
      R"("retry_after":42,"violated":["per_minute"],"limits":[)"
      R"({"name":"per_minute","quota":60,"used":60,"held":0,"remaining":0,"reset_after":42,)"
      R"("window":"1m"},)"
      R"({"name":"daily","quota":5000,"used":1,"held":0,"remaining":4999,"reset_after":36012,)"
      R"("window":"day"}]})");
}

TEST_F(RenderTest, DecisionJsonSaysDegraded) {
  Decision d = Allowed();
  d.degraded = true;
  EXPECT_NE(DecisionJson(d, "u").find(R"("degraded":true)"), std::string::npos);
}

TEST_F(RenderTest, SetsRateLimitPolicyWithQuotaAndWindowSeconds) {
  SetRateLimitHeaders(Allowed(), res_);
  EXPECT_EQ(Header(res_, "RateLimit-Policy"), R"("per_minute";q=60;w=60, "daily";q=5000;w=86400)");
}

TEST_F(RenderTest, SetsRateLimitWithRemainingAndReset) {
  SetRateLimitHeaders(Allowed(), res_);
  EXPECT_EQ(Header(res_, "RateLimit"), R"("per_minute";r=59;t=42, "daily";r=4999;t=36012)");
}

TEST_F(RenderTest, PolicyWindowOfADaylightSavingDayIsItsRealLength) {
  Decision d = Allowed();
  d.limits[1].window_end = kMidnight + absl::Hours(23);
  SetRateLimitHeaders(d, res_);
  EXPECT_EQ(Header(res_, "RateLimit-Policy"), R"("per_minute";q=60;w=60, "daily";q=5000;w=82800)");
}

TEST_F(RenderTest, AYearWindowsPolicyIsTheYearsLengthAndItsDenialWaitsUntilNewYear) {
  // Denied by a yearly quota one second into the leap year 2028.
  const Limit yearly{.name = "yearly", .quota = 100, .window = *config::ParseWindow("year")};
  const absl::Time new_year = absl::FromUnixSeconds(1830297600);  // 2028-01-01T00:00:00Z
  Decision d{.plan = &plan_, .allowed = false, .retry_after = 31622399};
  d.limits.push_back({.limit = &yearly,
                      .used = 100,
                      .remaining = 0,
                      .reset_after = 31622399,
                      .window_start = new_year,
                      .window_end = new_year + absl::Hours(24 * 366),
                      .violated = true});
  SetRateLimitHeaders(d, res_);
  SetRetryAfter(d, res_);
  EXPECT_EQ(Header(res_, "RateLimit-Policy"), R"("yearly";q=100;w=31622400)");
  EXPECT_EQ(Header(res_, "RateLimit"), R"("yearly";r=0;t=31622399)");
  EXPECT_EQ(Header(res_, "Retry-After"), "31622399");
}

TEST_F(RenderTest, LegacyHeadersDescribeTheTightestLimit) {
  SetRateLimitHeaders(Denied(), res_);
  EXPECT_EQ(Header(res_, "X-RateLimit-Limit"), "60");
  EXPECT_EQ(Header(res_, "X-RateLimit-Remaining"), "0");
  EXPECT_EQ(Header(res_, "X-RateLimit-Reset"), "42");
}

TEST_F(RenderTest, LegacyHeadersFollowTheLimitWithLeastRemaining) {
  Decision d = Allowed();
  d.limits[1].remaining = 3;
  SetRateLimitHeaders(d, res_);
  EXPECT_EQ(Header(res_, "X-RateLimit-Limit"), "5000");
  EXPECT_EQ(Header(res_, "X-RateLimit-Remaining"), "3");
  EXPECT_EQ(Header(res_, "X-RateLimit-Reset"), "36012");
}

TEST_F(RenderTest, PolicyNamesAreStructuredFieldStrings) {
  per_minute_.name = R"(a"b\c)";
  SetRateLimitHeaders(Allowed(), res_);
  EXPECT_EQ(Header(res_, "RateLimit"), R"("a\"b\\c";r=59;t=42, "daily";r=4999;t=36012)");
}

TEST_F(RenderTest, ADegradedDecisionSaysSoInAHeader) {
  Decision d = Allowed();
  d.degraded = true;
  SetRateLimitHeaders(d, res_);
  EXPECT_EQ(Header(res_, "Sluice-Degraded"), "1");
}

TEST_F(RenderTest, AHealthyDecisionHasNoDegradedHeader) {
  SetRateLimitHeaders(Allowed(), res_);
  EXPECT_FALSE(Has(res_, "Sluice-Degraded"));
}

TEST_F(RenderTest, ADecisionWithoutLimitsSetsNoRateLimitHeaders) {
  SetRateLimitHeaders(Decision{.plan = &plan_, .allowed = true}, res_);
  for (const char* name : {"RateLimit-Policy", "RateLimit", "X-RateLimit-Limit",
                           "X-RateLimit-Remaining", "X-RateLimit-Reset"}) {
    EXPECT_FALSE(Has(res_, name)) << name;
  }
}

TEST_F(RenderTest, SettingHeadersTwiceReplacesThem) {
  SetRateLimitHeaders(Allowed(), res_);
  SetRateLimitHeaders(Denied(), res_);
  EXPECT_EQ(res_.count("RateLimit"), 1u);
  EXPECT_EQ(Header(res_, "RateLimit"), R"("per_minute";r=0;t=42, "daily";r=4999;t=36012)");
}

TEST_F(RenderTest, RetryAfterIsTheDecisionsWait) {
  SetRetryAfter(Denied(), res_);
  EXPECT_EQ(Header(res_, "Retry-After"), "42");
}

TEST_F(RenderTest, RetryAfterOfADenialIsAtLeastOneSecond) {
  Decision d = Denied();
  d.retry_after = 0;
  SetRetryAfter(d, res_);
  EXPECT_EQ(Header(res_, "Retry-After"), "1");
}

TEST_F(RenderTest, AnAllowedDecisionHasNoRetryAfter) {
  SetRetryAfter(Allowed(), res_);
  EXPECT_FALSE(Has(res_, "Retry-After"));
}

TEST_F(RenderTest, ProblemIsProblemJsonWithTheFourMembers) {
  const Response res = Problem(401, "about:blank", "Unauthorized", "unknown API key", 11, true);
  EXPECT_EQ(res.result_int(), 401u);
  EXPECT_EQ(Header(res, "Content-Type"), "application/problem+json");
  EXPECT_EQ(res.body(), R"({"type":"about:blank","title":"Unauthorized","status":401,)"
                        R"("detail":"unknown API key"})");
}

TEST_F(RenderTest, ProblemCarriesVersionKeepAliveAndLength) {
  const Response res = Problem(404, "about:blank", "Not Found", "no such path", 10, false);
  EXPECT_EQ(res.version(), 10u);
  EXPECT_FALSE(res.keep_alive());
  EXPECT_EQ(Header(res, "Content-Length"), std::to_string(res.body().size()));
}

TEST_F(RenderTest, ProblemEscapesItsStrings) {
  const Response res = Problem(400, "about:blank", "Bad Request", "cost: \"x\"\n", 11, true);
  EXPECT_EQ(res.body(), R"({"type":"about:blank","title":"Bad Request","status":400,)"
                        R"("detail":"cost: \"x\"\n"})");
}

TEST_F(RenderTest, QuotaExceededBodyNamesTheViolatedPoliciesAndTheWait) {
  const Response res = QuotaExceeded(Denied(), 429, 11, true);
  EXPECT_EQ(res.result_int(), 429u);
  EXPECT_EQ(Header(res, "Content-Type"), "application/problem+json");
  EXPECT_EQ(res.body(),
            R"({"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",)"
            R"("title":"Request cannot be satisfied as assigned quota has been exceeded",)"
            R"("status":429,"detail":"Quota exceeded: per_minute; retry after 42 seconds.",)"
            R"("violated-policies":["per_minute"]})");
}

TEST_F(RenderTest, QuotaExceededCarriesRateLimitHeadersAndRetryAfter) {
  const Response res = QuotaExceeded(Denied(), 429, 11, true);
  EXPECT_EQ(Header(res, "RateLimit"), R"("per_minute";r=0;t=42, "daily";r=4999;t=36012)");
  EXPECT_EQ(Header(res, "X-RateLimit-Remaining"), "0");
  EXPECT_EQ(Header(res, "Retry-After"), "42");
}

TEST_F(RenderTest, QuotaExceededUsesTheConfiguredStatus) {
  EXPECT_EQ(QuotaExceeded(Denied(), 403, 11, true).result_int(), 403u);
}

TEST_F(RenderTest, QuotaExceededListsEveryViolatedLimit) {
  Decision d = Denied();
  d.retry_after = 1;
  d.limits[1].violated = true;
  const Response res = QuotaExceeded(d, 429, 11, true);
  EXPECT_NE(
      res.body().find(R"("detail":"Quota exceeded: per_minute, daily; retry after 1 second.")"),
      std::string::npos);
  EXPECT_NE(res.body().find(R"("violated-policies":["per_minute","daily"])"), std::string::npos);
}

TEST_F(RenderTest, RemainingIsNeverNegativeNorAboveWhatTheCounterLeaves) {
  Decision d = Denied();
  d.limits[0].used = 61;  // over the quota after a reload lowered it
  d.limits[0].remaining = -1;
  d.limits[1].remaining = 9000;  // more than quota - used
  Response res;
  SetRateLimitHeaders(d, res);
  EXPECT_EQ(Header(res, "X-RateLimit-Remaining"), "0");
  EXPECT_EQ(Header(res, "RateLimit"), "\"per_minute\";r=0;t=42, \"daily\";r=4999;t=36012");
  const std::string json = DecisionJson(d, "user-42");
  EXPECT_NE(json.find("\"used\":61,\"held\":0,\"remaining\":0"), std::string::npos) << json;
  EXPECT_NE(json.find("\"used\":1,\"held\":0,\"remaining\":4999"), std::string::npos) << json;
}

TEST_F(RenderTest, AnUnusableCounterShowsAsExhaustedNeverAsWrappedRoom) {
  Decision d = Denied();
  d.limits[0].used = INT64_MIN;
  d.limits[0].remaining = INT64_MAX;
  d.limits[1].used = INT64_MAX;
  d.limits[1].remaining = 5000 - INT64_MAX;
  Response res;
  SetRateLimitHeaders(d, res);
  EXPECT_EQ(Header(res, "RateLimit"), "\"per_minute\";r=0;t=42, \"daily\";r=0;t=36012");
  EXPECT_EQ(Header(res, "X-RateLimit-Remaining"), "0");
  const std::string json = DecisionJson(d, "user-42");
  EXPECT_NE(json.find("\"quota\":60,\"used\":60,\"held\":0,\"remaining\":0"), std::string::npos)
      << json;
  EXPECT_NE(json.find("\"quota\":5000,\"used\":5000,\"held\":0,\"remaining\":0"), std::string::npos)
      << json;
}

TEST_F(RenderTest, JsonResponseIsApplicationJsonWithTheBodyAsGiven) {
  const Response res = JsonResponse(200, R"({"ok":true})", 11, true);
  EXPECT_EQ(res.result_int(), 200u);
  EXPECT_EQ(Header(res, "Content-Type"), "application/json");
  EXPECT_EQ(res.body(), R"({"ok":true})");
  EXPECT_EQ(Header(res, "Content-Length"), "11");
  EXPECT_TRUE(res.keep_alive());
}

TEST_F(RenderTest, ShadowLimitsThatWouldDenyAreNamedInAHeader) {
  Response res;
  SetRateLimitHeaders(Allowed(), res);
  EXPECT_FALSE(Has(res, "Sluice-Shadow-Denied"));
  Decision d = Allowed();
  d.limits[0].would_deny = true;
  d.limits[1].would_deny = true;
  SetRateLimitHeaders(d, res);
  EXPECT_EQ(Header(res, "Sluice-Shadow-Denied"), "per_minute, daily");
}

TEST(HttpDateTest, IsTheImfFixdate) {
  EXPECT_EQ(HttpDate(784111777), "Sun, 06 Nov 1994 08:49:37 GMT");  // RFC 9110's example
  EXPECT_EQ(HttpDate(0), "Thu, 01 Jan 1970 00:00:00 GMT");
  EXPECT_EQ(HttpDate(1709164800), "Thu, 29 Feb 2024 00:00:00 GMT");
  EXPECT_EQ(HttpDate(1798761599), "Thu, 31 Dec 2026 23:59:59 GMT");
}

}  // namespace
}  // namespace sluice::http
