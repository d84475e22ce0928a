#include "sluice/config/ratelimit_file.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::config {
namespace {

using ::testing::HasSubstr;

RateLimitFile Parse(const std::string& yaml) {
  absl::StatusOr<RateLimitFile> file = ParseRateLimitFile(yaml, "rl.yaml");
  EXPECT_TRUE(file.ok()) << file.status();
  return file.ok() ? *file : RateLimitFile{};
}

std::string ErrorOf(const std::string& yaml) {
  absl::StatusOr<RateLimitFile> file = ParseRateLimitFile(yaml, "rl.yaml");
  EXPECT_FALSE(file.ok());
  return file.ok() ? std::string() : std::string(file.status().message());
}

TEST(RateLimitFileTest, ReadsTheFormatsNestedExample) {
  const RateLimitFile file = Parse(R"(
domain: messaging
descriptors:
  # five marketing messages a day per number
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5
  - key: to_number
    rate_limit:
      unit: DAY
      requests_per_unit: 100
)");
  EXPECT_EQ(file.source, "rl.yaml");
  EXPECT_EQ(file.domain, "messaging");
  ASSERT_EQ(file.descriptors.size(), 2u);
  const RlDescriptor& marketing = file.descriptors[0];
  EXPECT_EQ(marketing.key, "message_type");
  EXPECT_EQ(marketing.value, "marketing");
  EXPECT_FALSE(marketing.rate_limit.has_value());
  ASSERT_EQ(marketing.descriptors.size(), 1u);
  const RlDescriptor& number = marketing.descriptors[0];
  EXPECT_EQ(number.key, "to_number");
  EXPECT_EQ(number.value, "");
  ASSERT_TRUE(number.rate_limit.has_value());
  EXPECT_EQ(number.rate_limit->unit, RlUnit::kDay);
  EXPECT_EQ(number.rate_limit->requests_per_unit, 5u);
  ASSERT_TRUE(file.descriptors[1].rate_limit.has_value());
  EXPECT_EQ(file.descriptors[1].rate_limit->unit, RlUnit::kDay);  // any case
  EXPECT_EQ(file.descriptors[1].rate_limit->requests_per_unit, 100u);
}

TEST(RateLimitFileTest, ReadsEveryOptionalKey) {
  const RateLimitFile file = Parse(R"(
domain: example
descriptors:
  - key: user
    value: "user-*"
    shadow_mode: true
    detailed_metric: yes
    value_to_metric: true
    share_threshold: true
    rate_limit:
      name: specific
      unit: Minute
      requests_per_unit: 0
      replaces:
        - name: general
        - name: other
  - key: ldap
    rate_limit:
      unlimited: true
)");
  ASSERT_EQ(file.descriptors.size(), 2u);
  const RlDescriptor& user = file.descriptors[0];
  EXPECT_EQ(user.value, "user-*");
  EXPECT_TRUE(user.shadow_mode);
  EXPECT_TRUE(user.detailed_metric);
  EXPECT_TRUE(user.value_to_metric);
  EXPECT_TRUE(user.share_threshold);
  ASSERT_TRUE(user.rate_limit.has_value());
  EXPECT_EQ(user.rate_limit->name, "specific");
  EXPECT_EQ(user.rate_limit->unit, RlUnit::kMinute);
  EXPECT_EQ(user.rate_limit->requests_per_unit, 0u);
  EXPECT_THAT(user.rate_limit->replaces, ::testing::ElementsAre("general", "other"));
  ASSERT_TRUE(file.descriptors[1].rate_limit.has_value());
  EXPECT_TRUE(file.descriptors[1].rate_limit->unlimited);
  EXPECT_FALSE(file.descriptors[1].rate_limit->unit.has_value());
}

TEST(RateLimitFileTest, ReadsQuotaModeAndMetadata) {
  const RateLimitFile file = Parse(R"(
domain: quotas
descriptors:
  - key: bucket
    value: gold
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
    metadata:
      bucket: {name: gold, tier: 1}
      tags: [a, "b"]
  - key: bucket
    metadata: ~
  - key: plain
    metadata: {}
)");
  ASSERT_EQ(file.descriptors.size(), 3u);
  const RlDescriptor& gold = file.descriptors[0];
  EXPECT_TRUE(gold.quota_mode);
  ASSERT_TRUE(gold.metadata.has_value());
  ASSERT_EQ(gold.metadata->kind, RlMetadataValue::Kind::kMap);
  ASSERT_EQ(gold.metadata->map.size(), 2u);
  const RlMetadataField& bucket = gold.metadata->map[0];
  EXPECT_EQ(bucket.key, "bucket");
  ASSERT_EQ(bucket.value.map.size(), 2u);
  EXPECT_EQ(bucket.value.map[0].key, "name");
  EXPECT_EQ(bucket.value.map[0].value.string, "gold");
  EXPECT_EQ(bucket.value.map[1].value.kind, RlMetadataValue::Kind::kNumber);
  EXPECT_EQ(bucket.value.map[1].value.number, 1);
  const RlMetadataValue& tags = gold.metadata->map[1].value;
  ASSERT_EQ(tags.kind, RlMetadataValue::Kind::kList);
  ASSERT_EQ(tags.list.size(), 2u);
  EXPECT_EQ(tags.list[1].string, "b");
  const RateLimitFile keyed = Parse(
      "domain: d\ndescriptors:\n  - key: k\n    metadata: {0x10: a, on: b, \"on\": c, x1: d}\n");
  std::vector<std::string> keys;
  for (const RlMetadataField& field : keyed.descriptors[0].metadata->map) keys.push_back(field.key);
  EXPECT_THAT(keys, ::testing::ElementsAre("16", "true", "on", "x1"));
  // Null and empty metadata are none, as there.
  EXPECT_FALSE(file.descriptors[1].quota_mode);
  EXPECT_FALSE(file.descriptors[1].metadata.has_value());
  EXPECT_FALSE(file.descriptors[2].metadata.has_value());
}

// The type a plain scalar of `metadata` gets, as envoyproxy/ratelimit's YAML 1.1 reader gives it.
RlMetadataValue MetadataScalar(const std::string& text) {
  const RateLimitFile file =
      Parse(absl::StrCat("domain: d\ndescriptors:\n  - key: k\n    metadata: {v: ", text, "}\n"));
  if (file.descriptors.empty() || !file.descriptors[0].metadata.has_value()) return {};
  return file.descriptors[0].metadata->map[0].value;
}

TEST(RateLimitFileTest, MetadataScalarsAreTypedAsYaml11TypesThem) {
  using Kind = RlMetadataValue::Kind;
  for (const char* text : {"yes", "On", "y", "TRUE"}) {
    const RlMetadataValue v = MetadataScalar(text);
    EXPECT_EQ(v.kind, Kind::kBool) << text;
    EXPECT_TRUE(v.boolean) << text;
  }
  EXPECT_EQ(MetadataScalar("off").kind, Kind::kBool);
  EXPECT_FALSE(MetadataScalar("off").boolean);
  EXPECT_EQ(MetadataScalar("~").kind, Kind::kNull);
  EXPECT_EQ(MetadataScalar("null").kind, Kind::kNull);
  for (const auto& [text, number] : std::vector<std::pair<std::string, double>>{
           {"42", 42},
           {"-7", -7},
           {"+3", 3},
           {"1_000", 1000},
           {"0x1F", 31},
           {"0o17", 15},
           {"017", 15},
           {"0b101", 5},
           {"09", 9},
           {"1.5", 1.5},
           {".5", 0.5},
           {"2e3", 2000},
           {"-1.25E-2", -0.0125},
           {"18446744073709551615", 18446744073709551615.0},
           {"-.inf", -std::numeric_limits<double>::infinity()}}) {
    const RlMetadataValue v = MetadataScalar(text);
    EXPECT_EQ(v.kind, Kind::kNumber) << text;
    EXPECT_EQ(v.number, number) << text;
  }
  EXPECT_TRUE(std::isnan(MetadataScalar(".nan").number));
  // Quoted or tagged: always a string. And what no type claims.
  for (const char* text :
       {"\"yes\"", "'42'", "!!str 7", "0x", "1.2.3", "2024-01-02", "abc", "1e", "0xZ"}) {
    const RlMetadataValue v = MetadataScalar(text);
    EXPECT_EQ(v.kind, Kind::kString) << text;
  }
  EXPECT_EQ(MetadataScalar("\"yes\"").string, "yes");
  EXPECT_EQ(MetadataScalar("0x").string, "0x");
}

TEST(RateLimitFileTest, MetadataMustBeAMapWithDistinctKeys) {
  EXPECT_EQ(ErrorOf("domain: d\ndescriptors:\n  - key: k\n    metadata: name\n"),
            "rl.yaml: descriptors[0].metadata: expected a map, got a scalar");
  EXPECT_EQ(ErrorOf("domain: d\ndescriptors:\n  - key: k\n    metadata: {a: {b: 1, b: 2}}\n"),
            "rl.yaml: descriptors[0].metadata.a.b: duplicate key");
  // Keys are named as there: "yes" and "true" are one key.
  EXPECT_EQ(ErrorOf("domain: d\ndescriptors:\n  - key: k\n    metadata: {yes: 1, \"true\": 2}\n"),
            "rl.yaml: descriptors[0].metadata.true: duplicate key");
  EXPECT_THAT(ErrorOf("domain: d\ndescriptors:\n  - key: k\n    metadata: {[a]: 1}\n"),
              HasSubstr("descriptors[0].metadata: metadata keys must be plain strings"));
  // In the wrong place, as shadow_mode: envoyproxy/ratelimit would ignore it there.
  EXPECT_THAT(ErrorOf("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, "
                      "requests_per_unit: 1, quota_mode: true}\n"),
              HasSubstr("rl.yaml: descriptors[0].rate_limit.quota_mode: unknown key"));
}

TEST(RateLimitFileTest, ShareThresholdNeedsAWildcardValue) {
  EXPECT_EQ(ErrorOf("domain: d\ndescriptors:\n  - key: k\n    value: v\n"
                    "    share_threshold: true\n"),
            "rl.yaml: descriptors[0].share_threshold: only a wildcard value (one containing '*') "
            "can share its threshold");
  EXPECT_THAT(ErrorOf("domain: d\ndescriptors:\n  - key: k\n    share_threshold: true\n"),
              HasSubstr("only a wildcard value"));
  const RateLimitFile file = Parse(
      "domain: d\ndescriptors:\n  - key: k\n    value: a*b\n    share_threshold: true\n"
      "  - key: j\n    value: v\n    share_threshold: false\n");
  EXPECT_TRUE(file.descriptors[0].share_threshold);
}

TEST(RateLimitFileTest, EveryUnitOfTheFormat) {
  for (const auto& [text, unit] :
       std::vector<std::pair<std::string, RlUnit>>{{"second", RlUnit::kSecond},
                                                   {"minute", RlUnit::kMinute},
                                                   {"hour", RlUnit::kHour},
                                                   {"day", RlUnit::kDay},
                                                   {"week", RlUnit::kWeek},
                                                   {"month", RlUnit::kMonth},
                                                   {"YEAR", RlUnit::kYear}}) {
    const RateLimitFile file =
        Parse(absl::StrCat("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: ", text,
                           ", requests_per_unit: 1}\n"));
    ASSERT_EQ(file.descriptors.size(), 1u) << text;
    EXPECT_EQ(file.descriptors[0].rate_limit->unit, unit) << text;
  }
  EXPECT_EQ(RlUnitName(RlUnit::kWeek), "week");
}

TEST(RateLimitFileTest, ADescriptorWithoutLimitOrChildrenIsAccepted) {
  const RateLimitFile file = Parse("domain: d\ndescriptors:\n  - key: k\n    value: v\n");
  ASSERT_EQ(file.descriptors.size(), 1u);
  EXPECT_FALSE(file.descriptors[0].rate_limit.has_value());
}

TEST(RateLimitFileTest, ErrorsNameTheFileAndTheKeyPath) {
  EXPECT_EQ(ErrorOf("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, "
                    "requests_per_unit: 1}\n"),
            "rl.yaml: descriptors[0].rate_limit.unit: unknown unit \"fortnight\" (want second, "
            "minute, hour, day, week, month or year)");
  EXPECT_EQ(ErrorOf("domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n"
                    "        rate_limit: {unit: second, requests_per_unit: -1}\n"),
            "rl.yaml: descriptors[0].descriptors[0].rate_limit.requests_per_unit: must be an "
            "integer from 0 to 4294967295, got \"-1\"");
}

TEST(RateLimitFileTest, UnknownKeysAreErrorsAtEveryLevel) {
  EXPECT_THAT(ErrorOf("domain: d\nrules: []\n"),
              HasSubstr("rl.yaml: rules: unknown key (expected one of: domain, descriptors)"));
  EXPECT_THAT(ErrorOf("domain: d\ndescriptors:\n  - key: k\n    limit: 5\n"),
              HasSubstr("rl.yaml: descriptors[0].limit: unknown key"));
  // Valid in the format, but in the wrong place: envoyproxy/ratelimit would ignore it.
  EXPECT_THAT(ErrorOf("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, "
                      "requests_per_unit: 1, shadow_mode: true}\n"),
              HasSubstr("rl.yaml: descriptors[0].rate_limit.shadow_mode: unknown key"));
  EXPECT_THAT(ErrorOf("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, "
                      "requests_per_unit: 1, replaces: [{name: a, value: b}]}\n"),
              HasSubstr("descriptors[0].rate_limit.replaces[0].value: unknown key"));
  EXPECT_THAT(ErrorOf("domain: d\ndomain: e\n"), HasSubstr("rl.yaml: domain: duplicate key"));
}

TEST(RateLimitFileTest, DomainIsRequired) {
  EXPECT_EQ(ErrorOf(""), "rl.yaml: domain: missing required key (the file is empty)");
  EXPECT_EQ(ErrorOf("descriptors: []\n"), "rl.yaml: domain: missing required key");
  EXPECT_EQ(ErrorOf("domain: \"\"\n"), "rl.yaml: domain: missing required key");
  EXPECT_THAT(ErrorOf("- domain: d\n"), HasSubstr("rl.yaml: expected a map, got a list"));
}

TEST(RateLimitFileTest, EveryDescriptorHasAKey) {
  EXPECT_EQ(ErrorOf("domain: d\ndescriptors:\n  - value: v\n"),
            "rl.yaml: descriptors[0].key: missing required key");
  EXPECT_THAT(ErrorOf("domain: d\ndescriptors:\n  - key: [a]\n"),
              HasSubstr("descriptors[0].key: expected a string, got a list"));
  EXPECT_THAT(ErrorOf("domain: d\ndescriptors: {key: k}\n"),
              HasSubstr("descriptors: expected a list, got a map"));
}

TEST(RateLimitFileTest, DuplicateKeyValueInOneLevelIsAnError) {
  EXPECT_EQ(ErrorOf("domain: d\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n"
                    "  - key: k\n    value: v\n"),
            "rl.yaml: descriptors[2]: duplicate descriptor: key \"k\" value \"v\" is already "
            "descriptors[0]");
  EXPECT_THAT(ErrorOf("domain: d\ndescriptors:\n  - key: k\n  - key: k\n"),
              HasSubstr("key \"k\" without a value is already descriptors[0]"));
  // The same pair on two levels, or under two parents, is no duplicate.
  const RateLimitFile file = Parse(
      "domain: d\ndescriptors:\n  - key: k\n    descriptors: [{key: k}]\n"
      "  - key: j\n    descriptors: [{key: k}]\n");
  EXPECT_EQ(file.descriptors.size(), 2u);
}

TEST(RateLimitFileTest, RateLimitRules) {
  EXPECT_EQ(ErrorOf("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, "
                    "unit: second}\n"),
            "rl.yaml: descriptors[0].rate_limit.unit: must not be set when unlimited is true");
  EXPECT_EQ(ErrorOf("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second}\n"),
            "rl.yaml: descriptors[0].rate_limit.requests_per_unit: missing required key (write 0 "
            "to refuse every request)");
  EXPECT_EQ(ErrorOf("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {requests_per_unit: "
                    "3}\n"),
            "rl.yaml: descriptors[0].rate_limit.unit: missing required key");
  // unlimited beside requests_per_unit: unlimited wins, as in envoyproxy/ratelimit.
  const RateLimitFile file = Parse(
      "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, "
      "requests_per_unit: 3}\n");
  EXPECT_TRUE(file.descriptors[0].rate_limit->unlimited);
  EXPECT_THAT(ErrorOf("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, "
                      "requests_per_unit: 4294967296}\n"),
              HasSubstr("must be an integer from 0 to 4294967295"));
  EXPECT_THAT(ErrorOf("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, "
                      "requests_per_unit: 1.5}\n"),
              HasSubstr("got \"1.5\""));
  EXPECT_THAT(ErrorOf("domain: d\ndescriptors:\n  - key: k\n    shadow_mode: maybe\n"),
              HasSubstr("descriptors[0].shadow_mode: expected true or false, got \"maybe\""));
}

TEST(RateLimitFileTest, ReplacesRules) {
  const std::string head =
      "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      name: mine\n"
      "      unit: second\n      requests_per_unit: 1\n      replaces:\n";
  EXPECT_EQ(ErrorOf(head + "        - name: \"\"\n"),
            "rl.yaml: descriptors[0].rate_limit.replaces[0].name: must not be empty");
  EXPECT_EQ(ErrorOf(head + "        - {}\n"),
            "rl.yaml: descriptors[0].rate_limit.replaces[0].name: must not be empty");
  EXPECT_EQ(ErrorOf(head + "        - name: other\n        - name: mine\n"),
            "rl.yaml: descriptors[0].rate_limit.replaces[1].name: a limit cannot replace itself");
  EXPECT_THAT(ErrorOf(head + "        name: other\n"),
              HasSubstr("descriptors[0].rate_limit.replaces: expected a list, got a map"));
}

TEST(RateLimitFileTest, BoundsKeyLengthDepthAndCount) {
  EXPECT_THAT(ErrorOf("domain: d\ndescriptors:\n  - key: " + std::string(129, 'k') + "\n"),
              HasSubstr("descriptors[0].key: longer than 128 bytes"));
  const std::string long_value(kMaxRlKeyLength + 1, 'v');
  EXPECT_THAT(ErrorOf("domain: d\ndescriptors:\n  - key: k\n    value: " + long_value + "\n"),
              HasSubstr("descriptors[0].value: too long: 1025 bytes (at most 1024)"));
  // 16 levels are fine, 17 are not.
  const auto nested = [](size_t levels) {
    std::string yaml = "domain: d\n";
    std::string indent;
    for (size_t i = 0; i < levels; ++i) {
      absl::StrAppend(&yaml, indent, "descriptors:\n", indent, "  - key: k\n");
      indent += "    ";
    }
    return yaml;
  };
  Parse(nested(kMaxRlDepth));
  EXPECT_THAT(ErrorOf(nested(kMaxRlDepth + 1)), HasSubstr("nested too deep"));
  std::string many = "domain: d\ndescriptors:\n";
  for (size_t i = 0; i <= kMaxRlDescriptors; ++i) absl::StrAppend(&many, "  - key: k", i, "\n");
  EXPECT_THAT(ErrorOf(many), HasSubstr("descriptors[10000]: too many descriptors (at most 10000 "
                                       "in one file)"));
  EXPECT_THAT(ErrorOf(std::string(kMaxRlFileBytes + 1, '#')), HasSubstr("too large"));
}

TEST(RateLimitFileTest, AliasesAreReadButCannotExplode) {
  const RateLimitFile file = Parse(R"(
domain: d
descriptors:
  - key: a
    rate_limit: &per_second {unit: second, requests_per_unit: 10}
  - key: b
    rate_limit: *per_second
)");
  ASSERT_EQ(file.descriptors.size(), 2u);
  EXPECT_EQ(file.descriptors[1].rate_limit->requests_per_unit, 10u);
  // Each level doubles what the last alias names: 2^30 values when expanded.
  std::string bomb = "domain: d\nx0: &a0 [k, k]\n";
  for (int i = 1; i <= 30; ++i) {
    absl::StrAppend(&bomb, "x", i, ": &a", i, " [*a", i - 1, ", *a", i - 1, "]\n");
  }
  EXPECT_THAT(ErrorOf(bomb), HasSubstr("too many values"));
}

TEST(RateLimitFileTest, MalformedYamlIsAnErrorWithALine) {
  EXPECT_THAT(ErrorOf("domain: d\ndescriptors:\n  - key: [unclosed\n"), HasSubstr("rl.yaml: line"));
}

class RateLimitDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/sluice-rl-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ + "/" + name) << text;
  }
  std::string dir_;
};

TEST_F(RateLimitDirTest, LoadsYamlFilesInNameOrderSkippingTheRest) {
  Write("b.yml", "domain: second\n");
  Write("a.yaml", "domain: first\n");
  Write(".hidden.yaml", "domain: [broken\n");
  Write("notes.txt", "not yaml at all: [\n");
  std::filesystem::create_directory(dir_ + "/sub.yaml");
  Write("sub.yaml/c.yaml", "domain: nested\n");
  absl::StatusOr<std::vector<RateLimitFile>> files = LoadRateLimitConfig(dir_);
  ASSERT_TRUE(files.ok()) << files.status();
  ASSERT_EQ(files->size(), 2u);
  EXPECT_EQ((*files)[0].domain, "first");
  EXPECT_EQ((*files)[0].source, dir_ + "/a.yaml");
  EXPECT_EQ((*files)[1].domain, "second");
}

TEST_F(RateLimitDirTest, LoadsOneFile) {
  Write("only.yaml", "domain: one\n");
  absl::StatusOr<std::vector<RateLimitFile>> files = LoadRateLimitConfig(dir_ + "/only.yaml");
  ASSERT_TRUE(files.ok()) << files.status();
  ASSERT_EQ(files->size(), 1u);
  EXPECT_EQ((*files)[0].domain, "one");
}

TEST_F(RateLimitDirTest, EmptyDirectoryLoadsNothing) {
  absl::StatusOr<std::vector<RateLimitFile>> files = LoadRateLimitConfig(dir_);
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_TRUE(files->empty());
}

TEST_F(RateLimitDirTest, ADomainIsDefinedOnce) {
  Write("a.yaml", "domain: same\n");
  Write("b.yaml", "domain: same\n");
  absl::StatusOr<std::vector<RateLimitFile>> files = LoadRateLimitConfig(dir_);
  ASSERT_FALSE(files.ok());
  EXPECT_EQ(files.status().message(),
            absl::StrCat(dir_, "/b.yaml: domain \"same\" is already defined in ", dir_, "/a.yaml"));
}

TEST_F(RateLimitDirTest, ABadFileIsNamed) {
  Write("a.yaml", "domain: fine\n");
  Write("b.yaml", "domain: bad\ndescriptors:\n  - value: v\n");
  absl::StatusOr<std::vector<RateLimitFile>> files = LoadRateLimitConfig(dir_);
  ASSERT_FALSE(files.ok());
  EXPECT_EQ(files.status().message(),
            absl::StrCat(dir_, "/b.yaml: descriptors[0].key: missing required key"));
}

TEST_F(RateLimitDirTest, AMissingPathIsNamed) {
  absl::StatusOr<std::vector<RateLimitFile>> files = LoadRateLimitConfig(dir_ + "/nope");
  ASSERT_FALSE(files.ok());
  EXPECT_EQ(files.status().message(),
            absl::StrCat(dir_, "/nope: cannot open: No such file or directory"));
}

}  // namespace
}  // namespace sluice::config
