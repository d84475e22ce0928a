#include "sluice/rls/ratelimit_rules.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/common/subject.h"
#include "sluice/config/ratelimit_file.h"
#include "sluice/limiter/window.h"

namespace sluice::rls {
namespace {

using ::testing::HasSubstr;

std::shared_ptr<const RlRuleSet> Rules(const std::vector<std::string>& yamls) {
  std::vector<config::RateLimitFile> files;
  for (size_t i = 0; i < yamls.size(); ++i) {
    absl::StatusOr<config::RateLimitFile> file =
        config::ParseRateLimitFile(yamls[i], absl::StrCat("f", i, ".yaml"));
    EXPECT_TRUE(file.ok()) << file.status();
    if (file.ok()) files.push_back(*file);
  }
  absl::StatusOr<std::shared_ptr<const RlRuleSet>> set = RlRuleSet::Build(files);
  EXPECT_TRUE(set.ok()) << set.status();
  return set.ok() ? *set : nullptr;
}

// The path of the rule `entries` match, or "none".
std::string PathOf(const RlRuleSet& set, std::string_view domain, std::vector<RlEntry> entries) {
  const RlRule* rule = set.Match(domain, entries, nullptr);
  return rule == nullptr ? "none" : rule->path;
}

constexpr char kMessaging[] = R"(
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 5}
  - key: to_number
    rate_limit: {unit: day, requests_per_unit: 100}
)";

constexpr char kEdge[] = R"(
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: path
    value: /api/*
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: path
    value: /api/v2/*
    rate_limit: {unit: minute, requests_per_unit: 99}
  - key: path
    value: /api/v1/exact
    rate_limit: {unit: minute, requests_per_unit: 30}
  - key: path
    rate_limit: {unit: hour, requests_per_unit: 1000}
)";

TEST(RlRuleSetTest, KnowsItsDomains) {
  auto set = Rules({kMessaging, kEdge});
  ASSERT_NE(set, nullptr);
  EXPECT_TRUE(set->HasDomain("messaging"));
  EXPECT_TRUE(set->HasDomain("edge"));
  EXPECT_FALSE(set->HasDomain("other"));
  EXPECT_EQ(set->domains(), 2u);
  EXPECT_EQ(set->rules(), 8u);
  EXPECT_EQ(PathOf(*set, "other", {{"to_number", "1"}}), "none");
}

TEST(RlRuleSetTest, NestedDescriptorsMatchOnlyAtTheirDepth) {
  auto set = Rules({kMessaging});
  ASSERT_NE(set, nullptr);
  EXPECT_EQ(PathOf(*set, "messaging", {{"message_type", "marketing"}, {"to_number", "206"}}),
            "messaging.message_type_marketing.to_number");
  EXPECT_EQ(PathOf(*set, "messaging", {{"to_number", "206"}}), "messaging.to_number");
  // The placeholder level has no limit of its own.
  EXPECT_EQ(PathOf(*set, "messaging", {{"message_type", "marketing"}}), "none");
  // More entries than the tree is deep: no match (envoyproxy/ratelimit's Example 4).
  EXPECT_EQ(PathOf(*set, "messaging", {{"to_number", "206"}, {"extra", "x"}}), "none");
  EXPECT_EQ(PathOf(*set, "messaging", {{"message_type", "other"}, {"to_number", "206"}}), "none");
  EXPECT_EQ(PathOf(*set, "messaging", {}), "none");
}

TEST(RlRuleSetTest, ExactBeatsWildcardBeatsKeyOnly) {
  auto set = Rules({kEdge});
  ASSERT_NE(set, nullptr);
  EXPECT_EQ(PathOf(*set, "edge", {{"remote_address", "50.0.0.5"}}), "edge.remote_address_50.0.0.5");
  EXPECT_EQ(PathOf(*set, "edge", {{"remote_address", "50.0.0.1"}}), "edge.remote_address");
  EXPECT_EQ(PathOf(*set, "edge", {{"path", "/api/v1/exact"}}), "edge.path_/api/v1/exact");
  EXPECT_EQ(PathOf(*set, "edge", {{"path", "/api/users"}}), "edge.path_/api/*");
  // The first wildcard in file order wins, as in envoyproxy/ratelimit, not the longest.
  EXPECT_EQ(PathOf(*set, "edge", {{"path", "/api/v2/users"}}), "edge.path_/api/*");
  EXPECT_EQ(PathOf(*set, "edge", {{"path", "/other"}}), "edge.path");
  EXPECT_EQ(PathOf(*set, "edge", {{"host", "x"}}), "none");
}

TEST(RlRuleSetTest, ASharedWildcardCountsEveryValueOnOneCounter) {
  auto set = Rules({R"(
domain: d
descriptors:
  - key: path
    value: /shared/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: path
    value: /apart/*
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: path
    value: /mid/*/end
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 5}
)"});
  ASSERT_NE(set, nullptr);
  std::string a, b;
  ASSERT_NE(set->Match("d", std::vector<RlEntry>{{"path", "/shared/x"}}, &a), nullptr);
  ASSERT_NE(set->Match("d", std::vector<RlEntry>{{"path", "/shared/y"}}, &b), nullptr);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, RlCounterKey("d", std::vector<RlEntry>{{"path", "/shared/*"}}));
  // A star in the middle shares its counter too, keyed by the pattern.
  ASSERT_NE(set->Match("d", std::vector<RlEntry>{{"path", "/mid/x/end"}}, &a), nullptr);
  ASSERT_NE(set->Match("d", std::vector<RlEntry>{{"path", "/mid/y/end"}}, &b), nullptr);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, RlCounterKey("d", std::vector<RlEntry>{{"path", "/mid/*/end"}}));
  ASSERT_NE(set->Match("d", std::vector<RlEntry>{{"path", "/apart/x"}}, &a), nullptr);
  ASSERT_NE(set->Match("d", std::vector<RlEntry>{{"path", "/apart/y"}}, &b), nullptr);
  EXPECT_NE(a, b);
}

TEST(RlWildcardTest, AStarAnywhereStandsForAnyRunOfBytes) {
  const RlWildcard middle("/api/*/action");
  EXPECT_TRUE(middle.Matches("/api/123/action"));
  EXPECT_TRUE(middle.Matches("/api/a/b/action"));
  EXPECT_TRUE(middle.Matches("/api//action"));  // a run of none
  EXPECT_FALSE(middle.Matches("/api/123/other"));
  EXPECT_FALSE(middle.Matches("/api/action"));  // head and tail may not overlap
  EXPECT_FALSE(middle.Matches("x/api/1/action"));
  const RlWildcard two("bar*b");
  EXPECT_TRUE(two.Matches("barb"));
  EXPECT_TRUE(two.Matches("bar-b"));
  EXPECT_TRUE(two.Matches("bar*b"));
  EXPECT_FALSE(two.Matches("bar"));
  EXPECT_FALSE(two.Matches("bar-bx"));
  const RlWildcard many("foo*bar*baz");
  EXPECT_TRUE(many.Matches("foobarbaz"));
  EXPECT_TRUE(many.Matches("foo-1-bar-2-baz"));
  EXPECT_TRUE(many.Matches("foobarbarbaz"));
  EXPECT_FALSE(many.Matches("foobazbar"));  // in order
  EXPECT_FALSE(many.Matches("foo-baz"));
  // The first place of a middle text is the one to take, even where a later one also fits.
  const RlWildcard repeats("*ab*abc*");
  EXPECT_TRUE(repeats.Matches("xxabyyabcab"));
  EXPECT_FALSE(repeats.Matches("abcab"));
  const RlWildcard overlapping("a*aab*b");
  EXPECT_TRUE(overlapping.Matches("aaaabb"));
  EXPECT_FALSE(overlapping.Matches("aabb"));
  // Trailing, leading, alone, doubled.
  EXPECT_TRUE(RlWildcard("user-*").Matches("user-"));
  EXPECT_FALSE(RlWildcard("user-*").Matches("use"));
  EXPECT_TRUE(RlWildcard("*.pdf").Matches("a.pdf"));
  EXPECT_FALSE(RlWildcard("*.pdf").Matches("a.pdfx"));
  EXPECT_TRUE(RlWildcard("*").Matches(""));
  EXPECT_TRUE(RlWildcard("a**b").Matches("ab"));
  EXPECT_TRUE(RlWildcard("a**b").Matches("a-b"));
}

TEST(RlWildcardTest, AHostileValueCostsOnePass) {
  // A backtracking glob takes exponential time on this pair; this one scans the value once per
  // middle text at most, so the loop ends at once.
  std::string pattern;
  for (int i = 0; i < 300; ++i) pattern += "*a";
  pattern += "*b";
  const RlWildcard wildcard(pattern);
  const std::string value(1024, 'a');
  const absl::Time start = absl::Now();
  for (int i = 0; i < 100; ++i) EXPECT_FALSE(wildcard.Matches(value));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_TRUE(wildcard.Matches(value + "b"));
}

TEST(RlRuleSetTest, AWildcardMatchesWithAStarAnywhere) {
  auto set = Rules({R"(
domain: w
descriptors:
  - key: path
    value: /api/*/action
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: path
    value: /api/v1/action
    rate_limit: {unit: minute, requests_per_unit: 30}
  - key: path
    value: /api/*
    rate_limit: {unit: minute, requests_per_unit: 40}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 50}
  - key: multi
    value: foo*bar*baz
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: route
    value: r*
    descriptors:
      - key: method
        value: G*T
        rate_limit: {unit: second, requests_per_unit: 1}
)"});
  ASSERT_NE(set, nullptr);
  // The exact value first, then wildcards in file order, then the key alone.
  EXPECT_EQ(PathOf(*set, "w", {{"path", "/api/v1/action"}}), "w.path_/api/v1/action");
  EXPECT_EQ(PathOf(*set, "w", {{"path", "/api/v2/action"}}), "w.path_/api/*/action");
  EXPECT_EQ(PathOf(*set, "w", {{"path", "/api/v2/other"}}), "w.path_/api/*");
  EXPECT_EQ(PathOf(*set, "w", {{"path", "/other"}}), "w.path");
  // A value that is a pattern as written is that descriptor's, before any wildcard is tried.
  EXPECT_EQ(PathOf(*set, "w", {{"path", "/api/*"}}), "w.path_/api/*");
  EXPECT_EQ(PathOf(*set, "w", {{"multi", "foo1bar2baz"}}), "w.multi_foo*bar*baz");
  EXPECT_EQ(PathOf(*set, "w", {{"multi", "foo1baz2bar"}}), "none");
  EXPECT_EQ(PathOf(*set, "w", {{"route", "r1"}, {"method", "GET"}}), "w.route_r*.method_G*T");
  EXPECT_EQ(PathOf(*set, "w", {{"route", "r1"}, {"method", "PUT"}}), "none");
  // Each value has a counter of its own.
  std::string a, b;
  ASSERT_NE(set->Match("w", std::vector<RlEntry>{{"multi", "foo1bar2baz"}}, &a), nullptr);
  ASSERT_NE(set->Match("w", std::vector<RlEntry>{{"multi", "foobarbaz"}}, &b), nullptr);
  EXPECT_NE(a, b);
}

TEST(RlRuleSetTest, ADescriptorWithoutEntriesMatchesNothing) {
  auto set = Rules({R"(
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 1}
)"});
  ASSERT_NE(set, nullptr);
  std::string key = "unchanged";
  EXPECT_EQ(set->Match("d", {}, &key), nullptr);
  EXPECT_EQ(key, "unchanged");
}

TEST(RlRuleSetTest, QuotaModeAndMetadataCarryOver) {
  auto set = Rules({R"(
domain: q
descriptors:
  - key: bucket
    value: gold
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
    metadata: {bucket: {name: gold}, weight: 3, on: yes}
  - key: bucket
    value: free
    quota_mode: true
    rate_limit: {unlimited: true}
  - key: bucket
    rate_limit: {unit: minute, requests_per_unit: 1}
)"});
  ASSERT_NE(set, nullptr);
  const RlRule* gold = set->Match("q", std::vector<RlEntry>{{"bucket", "gold"}}, nullptr);
  ASSERT_NE(gold, nullptr);
  EXPECT_TRUE(gold->quota);
  EXPECT_FALSE(gold->plan.limits[0].shadow);
  // Once spent, the same counter, decided as a shadow limit.
  ASSERT_EQ(gold->spent_plan.limits.size(), 1u);
  EXPECT_TRUE(gold->spent_plan.limits[0].shadow);
  EXPECT_EQ(gold->spent_plan.limits[0].tag, gold->plan.limits[0].tag);
  EXPECT_EQ(gold->spent_plan.limits[0].quota, 2);
  EXPECT_EQ(gold->spent_plan.name, gold->plan.name);
  const auto& fields = gold->metadata.fields();
  ASSERT_EQ(fields.size(), 3u);
  EXPECT_EQ(fields.at("bucket").struct_value().fields().at("name").string_value(), "gold");
  EXPECT_EQ(fields.at("weight").number_value(), 3);
  EXPECT_TRUE(fields.at("true").bool_value());  // the key `on` is YAML 1.1's true
  // Quota mode means nothing for an unlimited rule; a rule without metadata has none.
  const RlRule* free = set->Match("q", std::vector<RlEntry>{{"bucket", "free"}}, nullptr);
  ASSERT_NE(free, nullptr);
  EXPECT_FALSE(free->quota);
  const RlRule* other = set->Match("q", std::vector<RlEntry>{{"bucket", "x"}}, nullptr);
  ASSERT_NE(other, nullptr);
  EXPECT_FALSE(other->quota);
  EXPECT_TRUE(other->metadata.fields().empty());
}

TEST(RlRuleSetTest, RulesCarryTheirLimitAsAPlan) {
  auto set = Rules({kEdge});
  ASSERT_NE(set, nullptr);
  const RlRule* rule = set->Match("edge", std::vector<RlEntry>{{"path", "/api/x"}}, nullptr);
  ASSERT_NE(rule, nullptr);
  EXPECT_EQ(rule->domain, "edge");
  EXPECT_EQ(rule->unit, config::RlUnit::kMinute);
  EXPECT_EQ(rule->requests_per_unit, 20u);
  ASSERT_EQ(rule->plan.limits.size(), 1u);
  const Limit& limit = rule->plan.limits[0];
  EXPECT_EQ(limit.name, "per_minute");
  EXPECT_EQ(limit.quota, 20);
  EXPECT_EQ(limit.window.kind, config::WindowSpec::Kind::kFixed);
  EXPECT_EQ(limit.window.length, absl::Minutes(1));
  EXPECT_TRUE(limit.thresholds.empty());
  EXPECT_EQ(limit.tag, LimitTag("per_minute", limit.window, absl::UTCTimeZone()));
  EXPECT_EQ(rule->plan.tz.name(), "UTC");
  EXPECT_NE(rule->plan.alerts, nullptr);
  const RlRule* blocked =
      set->Match("edge", std::vector<RlEntry>{{"remote_address", "50.0.0.5"}}, nullptr);
  ASSERT_NE(blocked, nullptr);
  EXPECT_EQ(blocked->plan.limits[0].quota, 0);
}

TEST(RlRuleSetTest, CalendarUnitsAreCalendarWindows) {
  EXPECT_EQ(WindowForUnit(config::RlUnit::kDay)->kind, config::WindowSpec::Kind::kDay);
  EXPECT_EQ(WindowForUnit(config::RlUnit::kWeek)->kind, config::WindowSpec::Kind::kWeek);
  EXPECT_EQ(WindowForUnit(config::RlUnit::kMonth)->kind, config::WindowSpec::Kind::kMonth);
  EXPECT_EQ(WindowForUnit(config::RlUnit::kYear)->kind, config::WindowSpec::Kind::kYear);
  EXPECT_EQ(WindowForUnit(config::RlUnit::kSecond)->length, absl::Seconds(1));
  EXPECT_EQ(WindowForUnit(config::RlUnit::kHour)->length, absl::Hours(1));
  absl::StatusOr<config::RateLimitFile> file = config::ParseRateLimitFile(
      "domain: d\ndescriptors:\n  - key: a\n  - key: k\n    rate_limit: {unit: year, "
      "requests_per_unit: 1}\n",
      "y.yaml");
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<std::shared_ptr<const RlRuleSet>> set = RlRuleSet::Build({*file});
  ASSERT_TRUE(set.ok()) << set.status();
  const RlRule* rule = (*set)->Match("d", std::vector<RlEntry>{{"k", "v"}}, nullptr);
  ASSERT_NE(rule, nullptr);
  EXPECT_EQ(rule->plan.limits[0].window.kind, config::WindowSpec::Kind::kYear);
  EXPECT_EQ(rule->plan.limits[0].name, "per_year");
}

TEST(RlRuleSetTest, ADomainTwiceIsRefused) {
  absl::StatusOr<config::RateLimitFile> a = config::ParseRateLimitFile("domain: d\n", "a.yaml");
  absl::StatusOr<config::RateLimitFile> b = config::ParseRateLimitFile("domain: d\n", "b.yaml");
  ASSERT_TRUE(a.ok() && b.ok());
  absl::StatusOr<std::shared_ptr<const RlRuleSet>> set = RlRuleSet::Build({*a, *b});
  ASSERT_FALSE(set.ok());
  EXPECT_EQ(set.status().message(), "b.yaml: domain \"d\" is already defined in a.yaml");
}

TEST(RlRuleSetTest, KeyOnlyAndWildcardRulesCountPerRequestValue) {
  auto set = Rules({kEdge});
  ASSERT_NE(set, nullptr);
  std::string one;
  std::string two;
  ASSERT_NE(set->Match("edge", std::vector<RlEntry>{{"remote_address", "10.0.0.1"}}, &one),
            nullptr);
  ASSERT_NE(set->Match("edge", std::vector<RlEntry>{{"remote_address", "10.0.0.2"}}, &two),
            nullptr);
  EXPECT_EQ(one, "edge/remote_address=10.0.0.1");
  EXPECT_NE(one, two);
  std::string a;
  std::string b;
  ASSERT_NE(set->Match("edge", std::vector<RlEntry>{{"path", "/api/a"}}, &a), nullptr);
  ASSERT_NE(set->Match("edge", std::vector<RlEntry>{{"path", "/api/b"}}, &b), nullptr);
  EXPECT_EQ(a, "edge/path=%2Fapi%2Fa");
  EXPECT_NE(a, b);
  std::string untouched = "unchanged";
  EXPECT_EQ(set->Match("edge", std::vector<RlEntry>{{"host", "x"}}, &untouched), nullptr);
  EXPECT_EQ(untouched, "unchanged");
}

TEST(RlRuleSetTest, FlagsAndNamesCarryOver) {
  auto set = Rules({R"(
domain: example
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        shadow_mode: true
        detailed_metric: true
        rate_limit: {unit: second, requests_per_unit: 10, name: a_limit, replaces: [{name: b}]}
      - key: ldap
        rate_limit: {unlimited: true}
)"});
  ASSERT_NE(set, nullptr);
  const RlRule* shadow =
      set->Match("example", std::vector<RlEntry>{{"service", "auth"}, {"user", "user-a"}}, nullptr);
  ASSERT_NE(shadow, nullptr);
  EXPECT_TRUE(shadow->shadow);
  EXPECT_TRUE(shadow->detailed_metric);
  EXPECT_FALSE(shadow->unlimited);
  EXPECT_EQ(shadow->name, "a_limit");
  EXPECT_THAT(shadow->replaces, ::testing::ElementsAre("b"));
  EXPECT_EQ(shadow->path, "example.service.user_user-a");
  const RlRule* unlimited =
      set->Match("example", std::vector<RlEntry>{{"service", "auth"}, {"ldap", "x"}}, nullptr);
  ASSERT_NE(unlimited, nullptr);
  EXPECT_TRUE(unlimited->unlimited);
  EXPECT_FALSE(unlimited->shadow);
  EXPECT_TRUE(unlimited->plan.limits.empty());
}

TEST(ApplyReplacesTest, AReplacedRuleIsDroppedOthersStay) {
  // envoyproxy/ratelimit's Example 7.
  auto set = Rules({R"(
domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit: {name: specific_limit, requests_per_unit: 5, unit: second}
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces: [{name: specific_limit}]
          requests_per_unit: 10
          unit: second
  - key: other
    rate_limit: {requests_per_unit: 1, unit: second}
)"});
  ASSERT_NE(set, nullptr);
  const RlRule* first = set->Match(
      "example7", std::vector<RlEntry>{{"key_1", "value_1"}, {"user", "bkthomps"}}, nullptr);
  const RlRule* second = set->Match(
      "example7", std::vector<RlEntry>{{"key_2", "value_2"}, {"user", "bkthomps"}}, nullptr);
  const RlRule* other = set->Match("example7", std::vector<RlEntry>{{"other", "x"}}, nullptr);
  ASSERT_TRUE(first != nullptr && second != nullptr && other != nullptr);
  std::vector<const RlRule*> both = {first, nullptr, second, other};
  ApplyReplaces(absl::MakeSpan(both));
  EXPECT_EQ(both[0], nullptr);
  EXPECT_EQ(both[1], nullptr);
  EXPECT_EQ(both[2], second);
  EXPECT_EQ(both[3], other);
  // Alone, the replaceable rule applies.
  std::vector<const RlRule*> alone = {first, other};
  ApplyReplaces(absl::MakeSpan(alone));
  EXPECT_EQ(alone[0], first);
  EXPECT_EQ(alone[1], other);
}

TEST(ApplyReplacesTest, RulesReplacingEachOtherBothDrop) {
  auto set = Rules({R"(
domain: d
descriptors:
  - key: a
    rate_limit: {name: x, requests_per_unit: 1, unit: second, replaces: [{name: y}]}
  - key: b
    rate_limit: {name: y, requests_per_unit: 1, unit: second, replaces: [{name: x}]}
)"});
  ASSERT_NE(set, nullptr);
  std::vector<const RlRule*> matched = {set->Match("d", std::vector<RlEntry>{{"a", "1"}}, nullptr),
                                        set->Match("d", std::vector<RlEntry>{{"b", "1"}}, nullptr)};
  ASSERT_TRUE(matched[0] != nullptr && matched[1] != nullptr);
  ApplyReplaces(absl::MakeSpan(matched));
  EXPECT_EQ(matched[0], nullptr);
  EXPECT_EQ(matched[1], nullptr);
}

TEST(OverrideTest, SharesTheLimitNameOfItsUnit) {
  absl::StatusOr<Plan> plan = OverridePlan(42, config::RlUnit::kHour);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->limits.size(), 1u);
  EXPECT_EQ(plan->limits[0].name, RlLimitName(config::RlUnit::kHour));
  EXPECT_EQ(plan->limits[0].quota, 42);
  auto set =
      Rules({"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, "
             "requests_per_unit: 7, name: renamed}\n"});
  ASSERT_NE(set, nullptr);
  const RlRule* rule = set->Match("d", std::vector<RlEntry>{{"k", "v"}}, nullptr);
  ASSERT_NE(rule, nullptr);
  EXPECT_EQ(rule->plan.limits[0].tag, plan->limits[0].tag);  // one counter
  EXPECT_NE(OverridePlan(1, config::RlUnit::kMinute)->limits[0].tag, plan->limits[0].tag);
  EXPECT_EQ(OverridePlan(1, config::RlUnit::kWeek)->limits[0].window.kind,
            config::WindowSpec::Kind::kWeek);
}

TEST(OverrideTest, ProtoUnitsAreEnvoys) {
  EXPECT_EQ(*UnitFromProto(1), config::RlUnit::kSecond);
  EXPECT_EQ(*UnitFromProto(4), config::RlUnit::kDay);
  EXPECT_EQ(*UnitFromProto(5), config::RlUnit::kMonth);
  EXPECT_EQ(*UnitFromProto(6), config::RlUnit::kYear);
  EXPECT_EQ(*UnitFromProto(7), config::RlUnit::kWeek);
  EXPECT_FALSE(UnitFromProto(0).ok());
  EXPECT_FALSE(UnitFromProto(8).ok());
  for (int v = 1; v <= 7; ++v) EXPECT_EQ(UnitToProto(*UnitFromProto(v)), v);
}

TEST(CounterKeyTest, DelimitersInPartsCannotCollide) {
  // With '_' joining (envoyproxy/ratelimit's cache keys) these two would be one counter.
  const std::vector<RlEntry> a = {{"a_b", "c"}};
  const std::vector<RlEntry> b = {{"a", "b_c"}};
  EXPECT_NE(RlCounterKey("d", a), RlCounterKey("d", b));
  const std::vector<RlEntry> c = {{"k", "v/x=y"}};
  const std::vector<RlEntry> d = {{"k", "v"}, {"x", "y"}};
  EXPECT_NE(RlCounterKey("d", c), RlCounterKey("d", d));
  EXPECT_EQ(RlCounterKey("d", c), "d/k=v%2Fx%3Dy");
  EXPECT_NE(RlCounterKey("d/k=v", {}), RlCounterKey("d", std::vector<RlEntry>{{"k", "v"}}));
}

TEST(RlSubjectTest, ReadableWhenSafe) {
  EXPECT_EQ(RlSubject("edge/remote_address=10.0.0.1"), "rl:edge/remote_address=10.0.0.1");
  EXPECT_TRUE(IsValidSubject(RlSubject("edge/remote_address=10.0.0.1")));
}

TEST(RlSubjectTest, HashedWhenUnsafeOrLongValidAndDeterministic) {
  const std::string escaped = RlCounterKey("edge", std::vector<RlEntry>{{"path", "/a b"}});
  const std::string long_key = "d/k=" + std::string(300, 'v');
  const std::string binary = std::string("d/k=\x01\xff", 6);
  for (const std::string& key : {escaped, long_key, binary, std::string("no-equals-sign")}) {
    const std::string subject = RlSubject(key);
    EXPECT_TRUE(IsValidSubject(subject)) << subject;
    EXPECT_TRUE(subject.starts_with("rl:")) << subject;
    EXPECT_EQ(subject.find('='), std::string::npos) << subject;  // never equals a readable one
    EXPECT_EQ(subject, RlSubject(key));                          // deterministic
  }
  EXPECT_LE(RlSubject(long_key).size(), kMaxSubjectLength);
  // Two long keys differing only past the readable prefix are two subjects.
  EXPECT_NE(RlSubject(long_key), RlSubject(long_key + "w"));
  // A known digest: the first 128 bits of SHA-256("abc"), so every instance agrees.
  EXPECT_EQ(RlSubject("abc"), "rl:abc:ba7816bf8f01cfea414140de5dae2223");
  // The longest readable form.
  const std::string fits = "d/k=" + std::string(kMaxSubjectLength - 3 - 4, 'v');
  EXPECT_EQ(RlSubject(fits), "rl:" + fits);
  EXPECT_NE(RlSubject(fits + "v"), "rl:" + fits + "v");
}

TEST(RlGroupTest, ReadableOrHashedAlwaysAValidSubject) {
  EXPECT_EQ(RlGroup("messaging"), "rl:messaging");
  for (const std::string& domain : {std::string("with space"), std::string("a:b"),
                                    std::string("x=y"), std::string(300, 'd'), std::string("")}) {
    const std::string group = RlGroup(domain);
    EXPECT_TRUE(IsValidSubject(group)) << group;
    EXPECT_NE(group.find(':', 3), std::string::npos) << group;  // the hashed form
    EXPECT_EQ(group, RlGroup(domain));
  }
  EXPECT_NE(RlGroup("a:b"), RlGroup("a_b"));
}

}  // namespace
}  // namespace sluice::rls
