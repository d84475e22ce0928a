#include "sluice/rls/ratelimit_request.h"

#include <algorithm>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/common/subject.h"
#include "sluice/config/ratelimit_file.h"

namespace sluice::rls {
namespace {

using ::testing::HasSubstr;

constexpr char kRules[] = R"(
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: path
    value: /health
    rate_limit: {unlimited: true}
  - key: path
    value: /a
    rate_limit: {unit: hour, requests_per_unit: 5, name: a_limit}
  - key: path
    value: /b
    rate_limit: {unit: hour, requests_per_unit: 5, replaces: [{name: a_limit}]}
  - key: path
    value: /beta
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: bucket
    value: gold
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
    metadata: {bucket: {name: gold}, tier: gold}
  - key: bucket
    value: silver
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
    metadata: {bucket: {name: silver, spare: 1}, tier: silver, region: eu}
)";

class ParseRlRequestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<config::RateLimitFile> file = config::ParseRateLimitFile(kRules, "r.yaml");
    ASSERT_TRUE(file.ok()) << file.status();
    absl::StatusOr<std::shared_ptr<const RlRuleSet>> set = RlRuleSet::Build({*file});
    ASSERT_TRUE(set.ok()) << set.status();
    rules_ = *set;
    req_.set_domain("edge");
  }

  ::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor& Add(
      std::vector<std::pair<std::string, std::string>> entries) {
    auto* d = req_.add_descriptors();
    for (const auto& [k, v] : entries) {
      auto* e = d->add_entries();
      e->set_key(k);
      e->set_value(v);
    }
    return *d;
  }

  RlQuery Parsed(RlRequestOptions options = {}) {
    absl::StatusOr<RlQuery> q = ParseRlRequest(req_, *rules_, options);
    EXPECT_TRUE(q.ok()) << q.status();
    return q.ok() ? *std::move(q) : RlQuery{};
  }
  std::string ErrorOf(RlRequestOptions options = {}) {
    absl::StatusOr<RlQuery> q = ParseRlRequest(req_, *rules_, options);
    EXPECT_FALSE(q.ok());
    return q.ok() ? "" : std::string(q.status().message());
  }

  // The decision of part `i` of `q`: its one limit with `used` after the call (the counter as it
  // was when the call was denied), violated or would-deny as the store would report it.
  static Decision Decided(const RlQuery& q, size_t i, bool allowed, int64_t used) {
    const Limit& limit = q.parts[i].plan->limits[0];
    Decision d{.plan = q.parts[i].plan, .allowed = allowed};
    const bool over = allowed ? used > limit.quota : used + q.parts[i].cost > limit.quota;
    d.limits.push_back({.limit = &limit,
                        .used = used,
                        .remaining = std::max<int64_t>(limit.quota - used, 0),
                        .reset_after = 30,
                        .violated = !limit.shadow && !allowed && over,
                        .would_deny = limit.shadow && over});
    return d;
  }
  // Every part of `q` decided by a store that holds `used` (per part, before the call): admitted
  // iff every enforced limit fits, as a group decision is.
  static std::vector<Decision> DecideAll(const RlQuery& q, const std::vector<int64_t>& used) {
    bool allowed = true;
    for (size_t i = 0; i < q.parts.size(); ++i) {
      const Limit& limit = q.parts[i].plan->limits[0];
      if (!limit.shadow && used[i] + q.parts[i].cost > limit.quota) allowed = false;
    }
    std::vector<Decision> out;
    for (size_t i = 0; i < q.parts.size(); ++i) {
      out.push_back(Decided(q, i, allowed, allowed ? used[i] + q.parts[i].cost : used[i]));
    }
    return out;
  }

  std::shared_ptr<const RlRuleSet> rules_;
  rlsv3::RateLimitRequest req_;
};

TEST_F(ParseRlRequestTest, EachMatchedValueIsAPartInTheDomainsGroup) {
  Add({{"remote_address", "10.0.0.1"}});
  Add({{"remote_address", "10.0.0.2"}});
  Add({{"path", "/nowhere"}});
  const RlQuery q = Parsed();
  ASSERT_EQ(q.parts.size(), 2u);
  EXPECT_NE(q.parts[0].subject, q.parts[1].subject);
  for (const RlPart& p : q.parts) {
    EXPECT_TRUE(IsValidSubject(p.subject)) << p.subject;
    EXPECT_EQ(p.cost, 1);
    EXPECT_EQ(p.plan->limits[0].quota, 3);
  }
  EXPECT_EQ(q.group, RlGroup("edge"));
  EXPECT_EQ(q.descriptor_part, (std::vector<size_t>{0, 1, RlQuery::kNoPart}));
  EXPECT_EQ(GroupParts(q).size(), 2u);
}

TEST_F(ParseRlRequestTest, TheReportMarkerIsTakenOutBeforeMatchingAndMakesEveryPartAReport) {
  Add({{"bucket", "silver"}, {"charge", "true"}}).mutable_hits_addend()->set_value(7);
  Add({{"remote_address", "10.0.0.1"}});
  const RlQuery q = Parsed({.report_key = "charge"});
  EXPECT_EQ(q.mode, DecideMode::kReport);
  ASSERT_EQ(q.parts.size(), 2u);
  EXPECT_EQ(q.parts[0].plan->limits[0].quota, 2);  // the silver rule, matched without the marker
  EXPECT_EQ(q.parts[0].cost, 7);
  for (const GroupPart& part : GroupParts(q)) EXPECT_EQ(part.mode, DecideMode::kReport);
  // The same subject as the call without the marker: one counter for the check and the report.
  req_.clear_descriptors();
  Add({{"bucket", "silver"}}).mutable_hits_addend()->set_value(0);
  const RlQuery check = Parsed({.report_key = "charge"});
  EXPECT_EQ(check.mode, DecideMode::kAdmit);
  ASSERT_EQ(check.parts.size(), 1u);
  EXPECT_EQ(check.parts[0].subject, q.parts[0].subject);
  EXPECT_EQ(GroupParts(check)[0].mode, DecideMode::kAdmit);
}

TEST_F(ParseRlRequestTest, WithoutAReportKeyEveryEntryIsMatched) {
  Add({{"bucket", "silver"}, {"charge", "true"}});
  const RlQuery q = Parsed();
  EXPECT_EQ(q.mode, DecideMode::kAdmit);
  EXPECT_TRUE(q.parts.empty());  // deeper than the tree: nothing matches
}

TEST_F(ParseRlRequestTest, ABadOrInconsistentReportMarkerNamesTheDescriptor) {
  Add({{"bucket", "silver"}, {"charge", "sure"}});
  EXPECT_EQ(ErrorOf({.report_key = "charge"}),
            "descriptors[0]: entry \"charge\": must be true, false, 1 or 0");
  req_.clear_descriptors();
  Add({{"bucket", "silver"}, {"charge", "1"}});
  Add({{"bucket", "gold"}, {"charge", "0"}});
  EXPECT_THAT(ErrorOf({.report_key = "charge"}),
              HasSubstr("descriptors[1]: entry \"charge\": a different value"));
}

TEST_F(ParseRlRequestTest, ARepeatedCounterAddsItsCost) {
  Add({{"remote_address", "10.0.0.1"}}).mutable_hits_addend()->set_value(2);
  Add({{"remote_address", "10.0.0.1"}});
  req_.set_hits_addend(3);
  const RlQuery q = Parsed();
  ASSERT_EQ(q.parts.size(), 1u);
  EXPECT_EQ(q.parts[0].cost, 5);
  EXPECT_EQ(q.descriptor_part, (std::vector<size_t>{0, 0}));
}

TEST_F(ParseRlRequestTest, ADescriptorHitsAddendOfZeroPeeksAndTheRequestsZeroIsOne) {
  Add({{"remote_address", "10.0.0.1"}}).mutable_hits_addend()->set_value(0);
  Add({{"remote_address", "10.0.0.2"}});
  const RlQuery q = Parsed();
  ASSERT_EQ(q.parts.size(), 2u);
  EXPECT_EQ(q.parts[0].cost, 0);
  EXPECT_EQ(q.parts[1].cost, 1);
}

TEST_F(ParseRlRequestTest, UnlimitedAndReplacedRulesCountNothing) {
  Add({{"path", "/health"}});
  Add({{"path", "/a"}});
  Add({{"path", "/b"}});
  const RlQuery q = Parsed();
  ASSERT_EQ(q.parts.size(), 1u);
  EXPECT_EQ(q.parts[0].rule->path, "edge.path_/b");
  EXPECT_EQ(q.descriptor_part, (std::vector<size_t>{RlQuery::kNoPart, RlQuery::kNoPart, 0}));
  EXPECT_EQ(q.unlimited, (std::vector<bool>{true, false, false}));
}

TEST_F(ParseRlRequestTest, AnOverriddenDescriptorNeitherReplacesNorIsReplaced) {
  // /b replaces a_limit; with an override, /b's rule replaces nothing.
  auto& b = Add({{"path", "/b"}});
  b.mutable_limit()->set_requests_per_unit(9);
  b.mutable_limit()->set_unit(::envoy::type::v3::RateLimitUnit::MINUTE);
  Add({{"path", "/a"}});
  RlQuery q = Parsed();
  ASSERT_EQ(q.parts.size(), 2u);
  EXPECT_EQ(q.parts[0].rule, nullptr);  // the override
  EXPECT_EQ(q.parts[1].rule->name, "a_limit");
  // And an overridden /a is not replaced by /b's rule.
  req_.clear_descriptors();
  auto& a = Add({{"path", "/a"}});
  a.mutable_limit()->set_requests_per_unit(9);
  a.mutable_limit()->set_unit(::envoy::type::v3::RateLimitUnit::MINUTE);
  Add({{"path", "/b"}});
  q = Parsed();
  ASSERT_EQ(q.parts.size(), 2u);
  EXPECT_EQ(q.parts[0].plan->limits[0].quota, 9);
}

TEST_F(ParseRlRequestTest, AnOverrideLimitsEvenWithoutARule) {
  auto& d = Add({{"user_agent", "bot"}});
  d.mutable_limit()->set_requests_per_unit(7);
  d.mutable_limit()->set_unit(::envoy::type::v3::RateLimitUnit::MINUTE);
  const RlQuery q = Parsed();
  ASSERT_EQ(q.parts.size(), 1u);
  EXPECT_EQ(q.parts[0].rule, nullptr);
  ASSERT_NE(q.parts[0].override_plan, nullptr);
  EXPECT_EQ(q.parts[0].plan->limits[0].quota, 7);
}

TEST_F(ParseRlRequestTest, BadRequestsNameTheDescriptor) {
  EXPECT_EQ(ErrorOf(), "descriptors: at least one is required");
  Add({{"remote_address", std::string(1025, 'x')}});
  EXPECT_THAT(ErrorOf(), HasSubstr("descriptors[0]: entries[0].value: longer than 1024 bytes"));
  req_.clear_descriptors();
  Add({{"remote_address", "1"}}).mutable_hits_addend()->set_value(1'000'001);
  EXPECT_THAT(ErrorOf(), HasSubstr("descriptors[0]: hits_addend: at most 1000000"));
  req_.clear_descriptors();
  Add({{"remote_address", "1"}}).mutable_hits_addend()->set_value(600'000);
  Add({{"remote_address", "1"}}).mutable_hits_addend()->set_value(600'000);
  EXPECT_THAT(ErrorOf(), HasSubstr("descriptors[1]: hits_addend: the descriptors of one counter"));
  req_.clear_descriptors();
  Add({{"remote_address", "1"}})
      .mutable_limit()
      ->set_unit(static_cast<::envoy::type::v3::RateLimitUnit>(42));
  EXPECT_THAT(ErrorOf(), HasSubstr("descriptors[0]: limit.unit"));
  // The same counter under another limit: an override beside the rule.
  req_.clear_descriptors();
  Add({{"remote_address", "1"}});
  auto& d = Add({{"remote_address", "1"}});
  d.mutable_limit()->set_requests_per_unit(9);
  d.mutable_limit()->set_unit(::envoy::type::v3::RateLimitUnit::MINUTE);
  EXPECT_THAT(ErrorOf(), HasSubstr("descriptors[1]: names the counter of an earlier descriptor"));
}

TEST_F(ParseRlRequestTest, ADescriptorWithoutEntriesIsAnsweredOkWithoutALimit) {
  Add({});
  Add({{"remote_address", "10.0.0.1"}});
  const RlQuery q = Parsed();
  ASSERT_EQ(q.parts.size(), 1u);
  EXPECT_EQ(q.descriptor_part, (std::vector<size_t>{RlQuery::kNoPart, 0}));
  const rlsv3::RateLimitResponse res = RlResponse(q, DecideAll(q, {0}));
  EXPECT_EQ(res.overall_code(), rlsv3::RateLimitResponse::OK);
  ASSERT_EQ(res.statuses_size(), 2);
  EXPECT_EQ(res.statuses(0).code(), rlsv3::RateLimitResponse::OK);
  EXPECT_FALSE(res.statuses(0).has_current_limit());
  EXPECT_EQ(res.statuses(1).limit_remaining(), 2u);
}

TEST_F(ParseRlRequestTest, AnOverLimitStatusHasNothingRemainingTheOthersWhatTheyHave) {
  // 3 a minute: a call of 4 cannot fit, though nothing is used. The other descriptor's counter
  // took nothing from the denied call: its status says what it still has.
  Add({{"remote_address", "10.0.0.1"}}).mutable_hits_addend()->set_value(4);
  Add({{"path", "/b"}});
  const RlQuery q = Parsed();
  const rlsv3::RateLimitResponse res = RlResponse(q, DecideAll(q, {0, 1}));
  EXPECT_EQ(res.overall_code(), rlsv3::RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(res.statuses(0).code(), rlsv3::RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(res.statuses(0).limit_remaining(), 0u);
  EXPECT_EQ(res.statuses(0).current_limit().requests_per_unit(), 3u);
  EXPECT_EQ(res.statuses(1).code(), rlsv3::RateLimitResponse::OK);
  EXPECT_EQ(res.statuses(1).limit_remaining(), 4u);
}

TEST_F(ParseRlRequestTest, AShadowRuleThatWouldHaveDeniedIsOkWithNothingRemaining) {
  // 5 an hour, 4 used, a call of 3: 1 is left, but not for this call. (The call is denied by the
  // other descriptor, so the shadow counter did not move.)
  Add({{"path", "/beta"}}).mutable_hits_addend()->set_value(3);
  Add({{"remote_address", "10.0.0.1"}}).mutable_hits_addend()->set_value(4);
  const RlQuery q = Parsed();
  const std::vector<Decision> decisions = DecideAll(q, {4, 0});
  ASSERT_TRUE(decisions[0].limits[0].would_deny);
  ASSERT_EQ(decisions[0].limits[0].remaining, 1);
  const rlsv3::RateLimitResponse res = RlResponse(q, decisions);
  EXPECT_EQ(res.overall_code(), rlsv3::RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(res.statuses(0).code(), rlsv3::RateLimitResponse::OK);
  EXPECT_EQ(res.statuses(0).limit_remaining(), 0u);
}

TEST_F(ParseRlRequestTest, QuotaRulesDenyOnlyWhenEveryOneIsSpent) {
  Add({{"bucket", "gold"}});
  Add({{"bucket", "silver"}});
  Add({{"remote_address", "10.0.0.1"}});
  RlQuery q = Parsed();
  ASSERT_EQ(q.parts.size(), 3u);
  // Gold (1 a minute) is used up, silver (2) is not: the denial is gold's alone, so the call is
  // decided again with gold spent.
  std::vector<Decision> first = DecideAll(q, {1, 0, 0});
  ASSERT_FALSE(first[0].allowed);
  ASSERT_TRUE(RetryWithoutSpentQuotas(q, first));
  EXPECT_TRUE(q.parts[0].spent);
  EXPECT_FALSE(q.parts[1].spent);
  EXPECT_EQ(q.parts[0].plan, &q.parts[0].rule->spent_plan);
  EXPECT_TRUE(GroupParts(q)[0].plan->limits[0].shadow);
  // The second decision admits the call; gold is counted as a shadow limit and answered over.
  const std::vector<Decision> second = DecideAll(q, {1, 0, 0});
  ASSERT_TRUE(second[0].allowed);
  EXPECT_FALSE(RetryWithoutSpentQuotas(q, second));
  const rlsv3::RateLimitResponse res = RlResponse(q, second);
  EXPECT_EQ(res.overall_code(), rlsv3::RateLimitResponse::OK);
  EXPECT_EQ(res.statuses(0).code(), rlsv3::RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(res.statuses(0).limit_remaining(), 0u);
  EXPECT_EQ(res.statuses(1).code(), rlsv3::RateLimitResponse::OK);
  EXPECT_EQ(res.statuses(1).limit_remaining(), 1u);
  EXPECT_EQ(res.statuses(2).code(), rlsv3::RateLimitResponse::OK);
  // A spent quota rule is no shadow denial.
  for (const auto& h : res.response_headers_to_add()) EXPECT_NE(h.key(), "Sluice-Shadow-Denied");
  EXPECT_FALSE(Combined(q, second).limits[0].would_deny);
  EXPECT_TRUE(PartOverLimit(q, 0, second[0]));
  EXPECT_FALSE(PartOverLimit(q, 1, second[1]));
}

TEST_F(ParseRlRequestTest, EveryQuotaRuleSpentDeniesTheCall) {
  Add({{"bucket", "gold"}});
  Add({{"bucket", "silver"}});
  RlQuery q = Parsed();
  const std::vector<Decision> both = DecideAll(q, {1, 2});
  EXPECT_FALSE(RetryWithoutSpentQuotas(q, both));
  EXPECT_FALSE(q.parts[0].spent || q.parts[1].spent);
  rlsv3::RateLimitResponse res = RlResponse(q, both);
  EXPECT_EQ(res.overall_code(), rlsv3::RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(res.statuses(0).code(), rlsv3::RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(res.statuses(1).code(), rlsv3::RateLimitResponse::OVER_LIMIT);
  // Spent in an earlier decision, then the last one runs out: denied, both over.
  ASSERT_TRUE(RetryWithoutSpentQuotas(q, DecideAll(q, {1, 0})));
  const std::vector<Decision> last = DecideAll(q, {1, 2});
  EXPECT_FALSE(last[0].allowed);
  EXPECT_FALSE(RetryWithoutSpentQuotas(q, last));
  res = RlResponse(q, last);
  EXPECT_EQ(res.overall_code(), rlsv3::RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(res.statuses(0).code(), rlsv3::RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(res.statuses(1).code(), rlsv3::RateLimitResponse::OVER_LIMIT);
}

TEST_F(ParseRlRequestTest, ARuleNotInQuotaModeDeniesWhateverTheQuotasSay) {
  Add({{"bucket", "gold"}});
  Add({{"bucket", "silver"}});
  Add({{"remote_address", "10.0.0.1"}});
  RlQuery q = Parsed();
  EXPECT_FALSE(RetryWithoutSpentQuotas(q, DecideAll(q, {1, 0, 3})));
  EXPECT_FALSE(q.parts[0].spent);
  // A single quota rule over its limit: no other has room, so the call is denied.
  req_.clear_descriptors();
  Add({{"bucket", "gold"}});
  q = Parsed();
  EXPECT_FALSE(RetryWithoutSpentQuotas(q, DecideAll(q, {1})));
}

TEST_F(ParseRlRequestTest, DynamicMetadataDescribesTheRequestAndMergesPassingRules) {
  Add({{"bucket", "gold"}});
  Add({{"bucket", "silver"}}).mutable_hits_addend()->set_value(1);
  auto& overridden = Add({{"remote_address", "10.0.0.1"}, {"x", "y"}});
  overridden.mutable_limit()->set_requests_per_unit(10);
  overridden.mutable_limit()->set_unit(::envoy::type::v3::RateLimitUnit::MINUTE);
  Add({{"path", "/health"}});
  req_.set_hits_addend(1);
  absl::StatusOr<RlQuery> parsed = ParseRlRequest(req_, *rules_, {.dynamic_metadata = true});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  RlQuery q = *std::move(parsed);
  // Gold is spent: its metadata is not sent, silver's is.
  ASSERT_TRUE(RetryWithoutSpentQuotas(q, DecideAll(q, {1, 0, 0})));
  const rlsv3::RateLimitResponse res = RlResponse(q, DecideAll(q, {1, 0, 0}));
  ASSERT_EQ(res.overall_code(), rlsv3::RateLimitResponse::OK);
  const auto& fields = res.dynamic_metadata().fields();
  EXPECT_EQ(fields.at("domain").string_value(), "edge");
  EXPECT_EQ(fields.at("hitsAddend").number_value(), 1);
  const auto& descriptors = fields.at("descriptors").list_value();
  ASSERT_EQ(descriptors.values_size(), 4);
  const auto& first = descriptors.values(0).struct_value().fields();
  EXPECT_EQ(first.at("entries").list_value().values(0).string_value(), "bucket=gold");
  EXPECT_EQ(first.count("limit"), 0u);
  EXPECT_EQ(first.count("hitsAddend"), 0u);
  EXPECT_EQ(descriptors.values(1).struct_value().fields().at("hitsAddend").number_value(), 1);
  const auto& third = descriptors.values(2).struct_value().fields();
  EXPECT_EQ(third.at("entries").list_value().values(1).string_value(), "x=y");
  EXPECT_EQ(third.at("limit").string_value(), "requests_per_unit:10 unit:MINUTE");
  const auto& metadata = fields.at("metadata").struct_value().fields();
  EXPECT_EQ(metadata.at("tier").string_value(), "silver");
  EXPECT_EQ(metadata.at("region").string_value(), "eu");
  EXPECT_EQ(metadata.at("bucket").struct_value().fields().at("name").string_value(), "silver");
}

TEST_F(ParseRlRequestTest, MetadataOfSeveralRulesIsMergedEarliestFirst) {
  Add({{"bucket", "gold"}});
  Add({{"bucket", "silver"}});
  absl::StatusOr<RlQuery> q = ParseRlRequest(req_, *rules_, {.dynamic_metadata = true});
  ASSERT_TRUE(q.ok()) << q.status();
  const rlsv3::RateLimitResponse res = RlResponse(*q, DecideAll(*q, {0, 0}));
  const auto& metadata = res.dynamic_metadata().fields().at("metadata").struct_value().fields();
  EXPECT_EQ(metadata.at("tier").string_value(), "gold");  // set first, kept
  EXPECT_EQ(metadata.at("region").string_value(), "eu");
  const auto& bucket = metadata.at("bucket").struct_value().fields();
  EXPECT_EQ(bucket.at("name").string_value(), "gold");
  EXPECT_EQ(bucket.at("spare").number_value(), 1);  // maps under one key are merged
  // The rules' own metadata is left as it was.
  EXPECT_EQ(q->parts[0].rule->metadata.fields().at("bucket").struct_value().fields().size(), 1u);
  // Without the option, no dynamic metadata; and none but the request's when no rule passes.
  EXPECT_FALSE(RlResponse(Parsed(), DecideAll(Parsed(), {0, 0})).has_dynamic_metadata());
  const rlsv3::RateLimitResponse denied = RlResponse(*q, DecideAll(*q, {1, 2}));
  EXPECT_EQ(denied.dynamic_metadata().fields().count("metadata"), 0u);
  EXPECT_EQ(denied.dynamic_metadata().fields().count("domain"), 1u);
}

}  // namespace
}  // namespace sluice::rls
