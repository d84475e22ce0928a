#include "sluice/rls/mapping.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/time/time.h"
#include "sluice/http/render.h"

namespace sluice::rls {
namespace {

using ::testing::HasSubstr;
using Entries = std::vector<std::pair<std::string, std::string>>;

class ParseRequestTest : public ::testing::Test {
 protected:
  // Adds a descriptor of `entries` to the request.
  rlsv3::RateLimitRequest& Add(const Entries& entries) {
    auto* d = req_.add_descriptors();
    for (const auto& [key, value] : entries) {
      auto* e = d->add_entries();
      e->set_key(key);
      e->set_value(value);
    }
    return req_;
  }
  std::string ErrorOf() const {
    absl::StatusOr<Query> q = ParseRequest(req_, keys_);
    EXPECT_FALSE(q.ok());
    EXPECT_TRUE(absl::IsInvalidArgument(q.status())) << q.status();
    return std::string(q.status().message());
  }
  Query Parsed() const {
    absl::StatusOr<Query> q = ParseRequest(req_, keys_);
    EXPECT_TRUE(q.ok()) << q.status();
    return q.ok() ? *q : Query{};
  }

  rlsv3::RateLimitRequest req_;
  config::DescriptorKeys keys_;
};

TEST_F(ParseRequestTest, AnApiKeyEntryIsTheKeyAndCostsOne) {
  Add({{"generic_key", "edge"}, {"api_key", "k-1"}});
  const Query q = Parsed();
  EXPECT_EQ(q.api_key, "k-1");
  EXPECT_EQ(q.cost, 1);
  EXPECT_EQ(q.descriptors, 1u);
}

TEST_F(ParseRequestTest, AReportEntryOfTrueOrOneMakesTheCallAReport) {
  for (const char* value : {"true", "1"}) {
    req_.clear_descriptors();
    Add({{"subject", "user-1"}, {"report", value}})
        .mutable_descriptors(0)
        ->mutable_hits_addend()
        ->set_value(1200);
    const Query q = Parsed();
    EXPECT_EQ(q.mode, DecideMode::kReport) << value;
    EXPECT_EQ(q.cost, 1200);
  }
  for (const char* value : {"false", "0"}) {
    req_.clear_descriptors();
    Add({{"subject", "user-1"}, {"report", value}});
    EXPECT_EQ(Parsed().mode, DecideMode::kAdmit) << value;
  }
  req_.clear_descriptors();
  Add({{"subject", "user-1"}});
  EXPECT_EQ(Parsed().mode, DecideMode::kAdmit);
}

TEST_F(ParseRequestTest, TheReportEntryMayComeFromAnotherDescriptorAndBeRenamed) {
  keys_.report = "spent";
  Add({{"subject", "user-1"}});
  Add({{"spent", "true"}});
  EXPECT_EQ(Parsed().mode, DecideMode::kReport);
}

TEST_F(ParseRequestTest, ABadOrInconsistentReportEntryIsRefused) {
  Add({{"subject", "user-1"}, {"report", "yes"}});
  EXPECT_EQ(ErrorOf(), "entry \"report\": must be true, false, 1 or 0");
  req_.clear_descriptors();
  Add({{"subject", "user-1"}, {"report", "true"}});
  Add({{"report", "false"}});
  EXPECT_THAT(ErrorOf(), HasSubstr("descriptors[1]: entry \"report\": a different value"));
}

TEST_F(ParseRequestTest, ASubjectAndPlanMayComeFromSeveralDescriptors) {
  Add({{"subject", "user-1"}});
  Add({{"plan", "free"}});
  const Query q = Parsed();
  EXPECT_EQ(q.subject, "user-1");
  EXPECT_EQ(q.plan, "free");
  EXPECT_EQ(q.descriptors, 2u);
}

TEST_F(ParseRequestTest, ConfiguredKeysAreTheOnesRead) {
  keys_.api_key = "x-api-key";
  Add({{"api_key", "ignored"}, {"x-api-key", "k-2"}, {"subject", "s"}});
  keys_.subject = "who";
  EXPECT_EQ(Parsed().api_key, "k-2");
}

TEST_F(ParseRequestTest, TheRequestHitsAddendIsTheCostAndZeroMeansOne) {
  Add({{"api_key", "k"}}).set_hits_addend(5);
  EXPECT_EQ(Parsed().cost, 5);
  req_.set_hits_addend(0);
  EXPECT_EQ(Parsed().cost, 1);
}

TEST_F(ParseRequestTest, ADescriptorHitsAddendOverridesTheRequests) {
  Add({{"api_key", "k"}}).set_hits_addend(5);
  req_.mutable_descriptors(0)->mutable_hits_addend()->set_value(7);
  EXPECT_EQ(Parsed().cost, 7);
  // A descriptor's hits_addend is a wrapper: set to 0, it peeks.
  req_.mutable_descriptors(0)->mutable_hits_addend()->set_value(0);
  EXPECT_EQ(Parsed().cost, 0);
}

TEST_F(ParseRequestTest, ACostEntryOverridesEveryHitsAddendAndZeroPeeks) {
  Add({{"api_key", "k"}, {"cost", "3"}}).set_hits_addend(5);
  req_.mutable_descriptors(0)->mutable_hits_addend()->set_value(7);
  EXPECT_EQ(Parsed().cost, 3);
  req_.mutable_descriptors(0)->mutable_entries(1)->set_value("0");
  EXPECT_EQ(Parsed().cost, 0);
}

TEST_F(ParseRequestTest, BadCostsAreRefusedNamingTheEntry) {
  Add({{"api_key", "k"}, {"cost", "-1"}});
  EXPECT_EQ(ErrorOf(), "entry \"cost\": must be an integer from 0 to 1000000");
  req_.mutable_descriptors(0)->mutable_entries(1)->set_value("1000001");
  EXPECT_THAT(ErrorOf(), HasSubstr("entry \"cost\""));
  req_.mutable_descriptors(0)->mutable_entries()->RemoveLast();
  req_.set_hits_addend(1'000'001);
  EXPECT_EQ(ErrorOf(), "hits_addend: at most 1000000, got 1000001");
}

TEST_F(ParseRequestTest, DisagreeingDescriptorsAreRefused) {
  Add({{"api_key", "k"}});
  Add({{"api_key", "other"}});
  EXPECT_EQ(ErrorOf(),
            "descriptors[1]: entry \"api_key\": a different value than an earlier "
            "descriptor's");
  req_.mutable_descriptors(1)->mutable_entries(0)->set_value("k");
  EXPECT_EQ(Parsed().api_key, "k");  // the same value twice is one key
  req_.mutable_descriptors(0)->mutable_hits_addend()->set_value(2);
  req_.mutable_descriptors(1)->mutable_hits_addend()->set_value(3);
  EXPECT_THAT(ErrorOf(), HasSubstr("descriptors[1]: hits_addend: differs"));
}

TEST_F(ParseRequestTest, ARequestNamingNobodyIsRefused) {
  EXPECT_EQ(ErrorOf(), "descriptors: at least one is required");
  Add({{"generic_key", "x"}});
  EXPECT_EQ(ErrorOf(), "descriptors: no entry \"api_key\" or \"subject\"");
}

TEST_F(ParseRequestTest, AKeyWithASubjectIsRefused) {
  Add({{"api_key", "k"}, {"subject", "s"}});
  EXPECT_THAT(ErrorOf(), HasSubstr("give either an API key or a subject"));
}

TEST_F(ParseRequestTest, BoundsAreEnforced) {
  for (size_t i = 0; i <= kMaxDescriptors; ++i) Add({{"api_key", "k"}});
  EXPECT_EQ(ErrorOf(), "descriptors: at most 64, got 65");
  req_.Clear();
  Entries many(kMaxEntriesPerDescriptor + 1, {"generic_key", "x"});
  Add(many);
  EXPECT_EQ(ErrorOf(), "descriptors[0]: entries: at most 16, got 17");
  req_.Clear();
  Add({{"", "x"}});
  EXPECT_EQ(ErrorOf(), "descriptors[0]: entries[0].key: must be 1 to 128 bytes");
  req_.Clear();
  Add({{"api_key", std::string(kMaxEntryValueLength + 1, 'k')}});
  EXPECT_EQ(ErrorOf(), "descriptors[0]: entries[0].value: longer than 1024 bytes");
}

TEST_F(ParseRequestTest, ADescriptorWithoutEntriesNamesNothing) {
  req_.add_descriptors();
  Add({{"api_key", "k-1"}});
  const Query q = Parsed();
  EXPECT_EQ(q.api_key, "k-1");
  EXPECT_EQ(q.descriptors, 2u);
  req_.Clear();
  req_.add_descriptors();
  EXPECT_EQ(ErrorOf(), "descriptors: no entry \"api_key\" or \"subject\"");
}

class ResponseTest : public ::testing::Test {
 protected:
  ResponseTest() {
    per_minute_ = {.name = "per_minute", .quota = 60, .window = *config::ParseWindow("1m")};
    daily_ = {.name = "daily", .quota = 5000, .window = *config::ParseWindow("day")};
    plan_.name = "free";
  }
  Decision Allowed() const {
    Decision d{.plan = &plan_, .allowed = true};
    d.limits.push_back({.limit = &per_minute_, .used = 1, .remaining = 59, .reset_after = 42});
    d.limits.push_back({.limit = &daily_, .used = 1, .remaining = 4999, .reset_after = 36012});
    return d;
  }
  Decision Denied() const {
    Decision d = Allowed();
    d.allowed = false;
    d.retry_after = 42;
    d.limits[0].used = 60;
    d.limits[0].remaining = 0;
    d.limits[0].violated = true;
    return d;
  }
  static rlsv3::RateLimitResponse Respond(const Decision& d, size_t descriptors, Decided who) {
    rlsv3::RateLimitResponse res;
    DecisionResponse(d, descriptors, who, &res);
    return res;
  }
  static std::map<std::string, std::string> Headers(const rlsv3::RateLimitResponse& res) {
    std::map<std::string, std::string> out;
    for (const auto& h : res.response_headers_to_add()) out[h.key()] = h.value();
    return out;
  }

  Limit per_minute_;
  Limit daily_;
  Plan plan_;
};

TEST_F(ResponseTest, AnAllowedDecisionIsOkWithTheTightestLimitPerDescriptor) {
  const rlsv3::RateLimitResponse res = Respond(Allowed(), 2, {"user-1", "free"});
  EXPECT_EQ(res.overall_code(), rlsv3::RateLimitResponse::OK);
  ASSERT_EQ(res.statuses_size(), 2);
  for (const auto& s : res.statuses()) {
    EXPECT_EQ(s.code(), rlsv3::RateLimitResponse::OK);
    EXPECT_EQ(s.current_limit().name(), "per_minute");
    EXPECT_EQ(s.current_limit().requests_per_unit(), 60u);
    EXPECT_EQ(s.current_limit().unit(), rlsv3::RateLimitResponse::RateLimit::MINUTE);
    EXPECT_EQ(s.limit_remaining(), 59u);
    EXPECT_EQ(s.duration_until_reset().seconds(), 42);
  }
  const auto headers = Headers(res);
  EXPECT_EQ(headers.at("Sluice-Subject"), "user-1");
  EXPECT_EQ(headers.at("Sluice-Plan"), "free");
  EXPECT_THAT(headers.at("RateLimit-Policy"), HasSubstr("\"per_minute\";q=60;w=60"));
  EXPECT_THAT(headers.at("RateLimit"), HasSubstr("\"per_minute\";r=59;t=42"));
  EXPECT_EQ(headers.count("Retry-After"), 0u);
  EXPECT_TRUE(res.raw_body().empty());
  ASSERT_EQ(res.request_headers_to_add_size(), 2);
  EXPECT_EQ(res.request_headers_to_add(0).key(), "Sluice-Subject");
  EXPECT_EQ(res.request_headers_to_add(0).value(), "user-1");
}

TEST_F(ResponseTest, ACreditLimitHasNoUnitAndNoTimeToAReset) {
  const Limit credits{.name = "credits", .quota = 500, .window = *config::ParseWindow("credit")};
  Decision d{.plan = &plan_, .allowed = false};
  d.limits.push_back(
      {.limit = &credits, .used = 500, .remaining = 0, .reset_after = 0, .violated = true});
  const rlsv3::RateLimitResponse res = Respond(d, 1, {"user-1", "free"});
  ASSERT_EQ(res.statuses_size(), 1);
  const auto& s = res.statuses(0);
  EXPECT_EQ(s.code(), rlsv3::RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(s.current_limit().name(), "credits");
  EXPECT_EQ(s.current_limit().unit(), rlsv3::RateLimitResponse::RateLimit::UNKNOWN);
  EXPECT_EQ(s.duration_until_reset().seconds(), 0);
}

TEST_F(ResponseTest, ADeniedDecisionIsOverLimitWithTheViolatedLimitAndA429Body) {
  const rlsv3::RateLimitResponse res = Respond(Denied(), 1, {"user-1", "free"});
  EXPECT_EQ(res.overall_code(), rlsv3::RateLimitResponse::OVER_LIMIT);
  ASSERT_EQ(res.statuses_size(), 1);
  EXPECT_EQ(res.statuses(0).code(), rlsv3::RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(res.statuses(0).current_limit().name(), "per_minute");
  EXPECT_EQ(res.statuses(0).limit_remaining(), 0u);
  const auto headers = Headers(res);
  EXPECT_EQ(headers.at("Retry-After"), "42");
  EXPECT_EQ(headers.at("Content-Type"), "application/problem+json");
  EXPECT_EQ(headers.count("Content-Length"), 0u);
  const nlohmann::json body = nlohmann::json::parse(res.raw_body());
  EXPECT_EQ(body["status"], 429);
  EXPECT_EQ(body["violated-policies"], nlohmann::json::array({"per_minute"}));
  EXPECT_EQ(res.request_headers_to_add_size(), 0);
}

TEST_F(ResponseTest, AnOverLimitStatusHasNothingRemaining) {
  // A call of 25 against 60 a minute with 40 used: 20 left, but none for this call.
  Decision d = Denied();
  d.limits[0].used = 40;
  d.limits[0].remaining = 20;
  const rlsv3::RateLimitResponse res = Respond(d, 2, {"user-1", "free"});
  ASSERT_EQ(res.statuses_size(), 2);
  for (const auto& s : res.statuses()) {
    EXPECT_EQ(s.code(), rlsv3::RateLimitResponse::OVER_LIMIT);
    EXPECT_EQ(s.current_limit().name(), "per_minute");
    EXPECT_EQ(s.limit_remaining(), 0u);
  }
  // A store failure under deny: the counters are unknown, and the call had no room either.
  Decision degraded = Allowed();
  degraded.allowed = false;
  degraded.degraded = true;
  EXPECT_EQ(Respond(degraded, 1, {"user-1", "free"}).statuses(0).limit_remaining(), 0u);
}

TEST_F(ResponseTest, ADegradedDenialSaysTheStoreFailed) {
  Decision d = Allowed();
  d.allowed = false;
  d.degraded = true;
  const rlsv3::RateLimitResponse res = Respond(d, 1, {"user-1", "free"});
  EXPECT_EQ(res.overall_code(), rlsv3::RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(Headers(res).at("Sluice-Degraded"), "1");
  EXPECT_EQ(nlohmann::json::parse(res.raw_body())["status"], 503);
}

TEST_F(ResponseTest, ADegradedAllowanceIsOkAndSaysSo) {
  Decision d = Allowed();
  d.degraded = true;
  const rlsv3::RateLimitResponse res = Respond(d, 1, {"user-1", "free"});
  EXPECT_EQ(res.overall_code(), rlsv3::RateLimitResponse::OK);
  EXPECT_EQ(Headers(res).at("Sluice-Degraded"), "1");
}

// An admission's headers are built straight into the message, not through an HTTP response: they
// must be the HTTP answer's, field for field and in order, then Sluice-Subject and Sluice-Plan.
TEST_F(ResponseTest, AnAdmissionCarriesTheHttpAnswersRateLimitHeadersInOrder) {
  Decision shadowed = Allowed();
  shadowed.limits[1].would_deny = true;
  Decision degraded = Allowed();
  degraded.degraded = true;
  for (const Decision& d : {Allowed(), shadowed, degraded}) {
    http::Response rendered;
    http::SetRateLimitHeaders(d, rendered);
    std::vector<std::pair<std::string, std::string>> want;
    for (const auto& field : rendered) {
      want.emplace_back(std::string(field.name_string()), std::string(field.value()));
    }
    want.emplace_back("Sluice-Subject", "user-1");
    want.emplace_back("Sluice-Plan", "free");
    const rlsv3::RateLimitResponse res = Respond(d, 1, {"user-1", "free"});
    std::vector<std::pair<std::string, std::string>> got;
    for (const auto& h : res.response_headers_to_add()) got.emplace_back(h.key(), h.value());
    EXPECT_EQ(got, want);
  }
  EXPECT_EQ(Headers(Respond(shadowed, 1, {"user-1", "free"})).at("Sluice-Shadow-Denied"), "daily");
}

// Every admission is written without a message: the bytes must be protobuf's serialization of
// the message DecisionResponse builds, whatever the decision holds.
TEST_F(ResponseTest, AnAdmissionsWireBytesAreTheSerializedResponse) {
  Decision shadowed = Allowed();
  shadowed.limits[1].would_deny = true;
  Decision degraded = Allowed();
  degraded.degraded = true;
  Decision none{.plan = &plan_, .allowed = true};  // no limit: statuses carry only the code
  Decision edges = Allowed();
  edges.limits[0].remaining = 0;  // fields at their default are left out
  edges.limits[0].reset_after = 0;
  edges.limits[1].remaining = int64_t{1} << 40;  // clamped to uint32
  Limit big{.name = std::string(200, 'n'),
            .quota = int64_t{1} << 40,
            .window = *config::ParseWindow("month")};  // lengths of two varint bytes
  edges.limits.push_back({.limit = &big, .used = 1, .remaining = 3, .reset_after = 100000});
  // `big` alone: the reported limit, so its clamped quota and remaining, its month and its long
  // name (a nested message of more than 127 bytes inside another) are written in every status.
  Decision alone{.plan = &plan_, .allowed = true};
  alone.limits.push_back(
      {.limit = &big, .used = 1, .remaining = int64_t{1} << 40, .reset_after = 100000});
  // A shadow limit alone is reported; it would have denied, so nothing remains for the call.
  Limit shadow{.name = "shadowed", .quota = 10, .window = *config::ParseWindow("1m")};
  shadow.shadow = true;
  Decision shadow_only{.plan = &plan_, .allowed = true};
  shadow_only.limits.push_back(
      {.limit = &shadow, .used = 8, .remaining = 2, .reset_after = 5, .would_deny = true});
  EXPECT_EQ(Respond(shadow_only, 1, {"user-1", "free"}).statuses(0).limit_remaining(), 0u);
  const std::string long_subject(300, 's');
  for (const Decision& d : {Allowed(), shadowed, degraded, none, edges, alone, shadow_only}) {
    for (const size_t descriptors : {size_t{0}, size_t{1}, size_t{3}}) {
      for (const Decided who : {Decided{"user-1", "free"}, Decided{long_subject, ""}}) {
        std::string wire;
        AppendAdmissionWire(d, descriptors, who, &wire);
        EXPECT_EQ(wire, Respond(d, descriptors, who).SerializeAsString())
            << descriptors << " descriptors, " << d.limits.size() << " limits";
      }
    }
  }
}

TEST_F(ResponseTest, ARefusalIsOverLimitWithItsHttpStatusInTheBody) {
  const rlsv3::RateLimitResponse res =
      RefusalResponse({.status = 401, .title = "Unauthorized", .detail = "unknown API key"}, 3);
  EXPECT_EQ(res.overall_code(), rlsv3::RateLimitResponse::OVER_LIMIT);
  ASSERT_EQ(res.statuses_size(), 3);
  EXPECT_FALSE(res.statuses(0).has_current_limit());
  const nlohmann::json body = nlohmann::json::parse(res.raw_body());
  EXPECT_EQ(body["status"], 401);
  EXPECT_EQ(body["detail"], "unknown API key");
  EXPECT_EQ(Headers(res).at("WWW-Authenticate"), "Bearer");
}

TEST(CurrentLimitTest, UnitsAreTheWindowsOrTheLargestThatFits) {
  const auto unit_of = [](std::string_view window) {
    const Limit limit{.name = "l", .quota = 10, .window = *config::ParseWindow(window)};
    return CurrentLimit(LimitDecision{.limit = &limit}).unit();
  };
  using RateLimit = rlsv3::RateLimitResponse::RateLimit;
  EXPECT_EQ(unit_of("1s"), RateLimit::SECOND);
  EXPECT_EQ(unit_of("30s"), RateLimit::SECOND);
  EXPECT_EQ(unit_of("10m"), RateLimit::MINUTE);
  EXPECT_EQ(unit_of("1h"), RateLimit::HOUR);
  EXPECT_EQ(unit_of("48h"), RateLimit::DAY);
  EXPECT_EQ(unit_of("167h"), RateLimit::DAY);
  EXPECT_EQ(unit_of("168h"), RateLimit::WEEK);
  EXPECT_EQ(unit_of("744h"), RateLimit::WEEK);
  EXPECT_EQ(unit_of("day"), RateLimit::DAY);
  EXPECT_EQ(unit_of("week"), RateLimit::WEEK);
  EXPECT_EQ(unit_of("month"), RateLimit::MONTH);
  EXPECT_EQ(unit_of("year"), RateLimit::YEAR);
}

TEST(CurrentLimitTest, UnitNumbersAreEnvoys) {
  // What Envoy reads off the wire: the enum's numbers, not its names.
  using RateLimit = rlsv3::RateLimitResponse::RateLimit;
  EXPECT_EQ(static_cast<int>(RateLimit::MONTH), 5);
  EXPECT_EQ(static_cast<int>(RateLimit::YEAR), 6);
  EXPECT_EQ(static_cast<int>(RateLimit::WEEK), 7);
}

}  // namespace
}  // namespace sluice::rls
