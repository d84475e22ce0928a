#include "sluice/config/yaml_fields.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sluice/config/validators.h"
#include "sluice/config/yaml_document.h"

namespace sluice::config {
namespace {

// A dialect other than sluice.yaml's, in every respect a Dialect has.
constexpr Dialect kOther{.entry = "key",
                         .quote = {.cut = 4, .ellipsis_inside = false},
                         .yaml11_bools = true,
                         .max_string = 3};

class YamlFieldsTest : public ::testing::Test {
 protected:
  // The document `yaml` as the top-level field, read in `dialect`.
  Field Root(const std::string& yaml, const Dialect& dialect = kSluiceYaml) {
    absl::StatusOr<yaml::Document> document = yaml::Parse(yaml, yaml::Limits{});
    EXPECT_TRUE(document.ok()) << document.status();
    documents_.push_back(document.ok() ? *std::move(document) : yaml::Document{});
    return Field{&documents_.back().root(), "", &dialect};
  }

  // The field `name` of the top-level map of `yaml`.
  Field Get(const std::string& yaml, const std::string& name,
            const Dialect& dialect = kSluiceYaml) {
    Fields fields;
    EXPECT_TRUE(ReadFields(Root(yaml, dialect), {"a", "b", "c"}, fields).ok());
    return fields.Get(name);
  }

  static std::string MessageOf(const absl::Status& status) {
    EXPECT_FALSE(status.ok());
    return std::string(status.message());
  }

 private:
  std::vector<yaml::Document> documents_;
};

TEST_F(YamlFieldsTest, UnknownAndRepeatedNamesAreCalledFieldsInSluiceYaml) {
  Fields fields;
  EXPECT_EQ(MessageOf(ReadFields(Root("a: 1\nz: 2\n"), {"a", "b"}, fields)),
            "z: unknown field (expected one of: a, b)");
  EXPECT_EQ(MessageOf(ReadFields(Root("a: 1\na: 2\n"), {"a", "b"}, fields)), "a: duplicate field");
}

TEST_F(YamlFieldsTest, UnknownAndRepeatedNamesAreCalledKeysInAnotherDialect) {
  Fields fields;
  EXPECT_EQ(MessageOf(ReadFields(Root("a: 1\nz: 2\n", kOther), {"a", "b"}, fields)),
            "z: unknown key (expected one of: a, b)");
  EXPECT_EQ(MessageOf(ReadFields(Root("a: 1\na: 2\n", kOther), {"a", "b"}, fields)),
            "a: duplicate key");
}

TEST_F(YamlFieldsTest, AnAbsentMapReadsAsEmptyAndARequiredFieldIsNamedInTheDialectsWord) {
  Fields fields;
  EXPECT_TRUE(ReadFields(Get("a: 1\n", "b"), {"x"}, fields).ok());
  EXPECT_TRUE(fields.items.empty());
  EXPECT_EQ(MessageOf(Require(Get("a: 1\n", "b"))), "b: missing required field");
  EXPECT_EQ(MessageOf(Require(Get("a: 1\nb: ~\n", "b", kOther))), "b: missing required key");
}

TEST_F(YamlFieldsTest, NestedFieldsAreNamedByTheirPathAndKeepTheirDialect) {
  Fields outer;
  ASSERT_TRUE(ReadFields(Root("a: {b: {c: 1}}\n", kOther), {"a"}, outer).ok());
  Fields inner;
  ASSERT_TRUE(ReadFields(outer.Get("a"), {"b"}, inner).ok());
  Fields innermost;
  EXPECT_EQ(MessageOf(ReadFields(inner.Get("b"), {"x"}, innermost)),
            "a.b.c: unknown key (expected one of: x)");
}

TEST_F(YamlFieldsTest, ListItemsAreNamedByIndexAndKeepTheirDialect) {
  std::vector<std::string> seen;
  const absl::Status status =
      ForEachItem(Get("a: [yes, abcdef]\n", "a", kOther), [&](const Field& item, size_t) {
        seen.push_back(item.path);
        bool value = false;
        return ReadBool(item, value);
      });
  EXPECT_EQ(MessageOf(status), "a[1]: expected true or false, got \"abcd\"...");
  EXPECT_EQ(seen, (std::vector<std::string>{"a[0]", "a[1]"}));
}

TEST_F(YamlFieldsTest, SluiceYamlTakesOnlyTrueAndFalse) {
  bool value = false;
  EXPECT_TRUE(ReadBool(Get("a: true\n", "a"), value).ok());
  EXPECT_TRUE(value);
  EXPECT_EQ(MessageOf(ReadBool(Get("a: yes\n", "a"), value)),
            "a: expected true or false, got \"yes\"");
  EXPECT_EQ(MessageOf(ReadBool(Get("a: [1]\n", "a"), value)),
            "a: expected true or false, got a list");
}

TEST_F(YamlFieldsTest, ADialectWithYaml11BooleansTakesTheirSpellings) {
  bool value = false;
  EXPECT_TRUE(ReadBool(Get("a: Yes\n", "a", kOther), value).ok());
  EXPECT_TRUE(value);
  EXPECT_TRUE(ReadBool(Get("a: OFF\n", "a", kOther), value).ok());
  EXPECT_FALSE(value);
  EXPECT_EQ(MessageOf(ReadBool(Get("a: yEs\n", "a", kOther), value)),
            "a: expected true or false, got \"yEs\"");
}

TEST_F(YamlFieldsTest, Yaml11BoolKnowsElevenSpellingsEachWay) {
  for (const char* text :
       {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON", "y", "Y"}) {
    EXPECT_EQ(Yaml11Bool(text), true) << text;
  }
  for (const char* text :
       {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF", "n", "N"}) {
    EXPECT_EQ(Yaml11Bool(text), false) << text;
  }
  EXPECT_EQ(Yaml11Bool("1"), std::nullopt);
  EXPECT_EQ(Yaml11Bool(""), std::nullopt);
}

TEST_F(YamlFieldsTest, AStringLongerThanTheDialectsBoundIsRefused) {
  std::string out = "default";
  EXPECT_TRUE(ReadString(Get("a: abc\n", "a", kOther), out).ok());
  EXPECT_EQ(out, "abc");
  EXPECT_EQ(MessageOf(ReadString(Get("a: abcd\n", "a", kOther), out)),
            "a: too long: 4 bytes (at most 3)");
  EXPECT_EQ(out, "abc");
  EXPECT_TRUE(ReadString(Get("a: abcd\n", "a"), out).ok());
  EXPECT_EQ(out, "abcd");
}

TEST_F(YamlFieldsTest, AnAbsentFieldLeavesTheDefault) {
  std::string text = "default";
  int number = 7;
  bool flag = true;
  EXPECT_TRUE(ReadString(Get("a: 1\n", "b"), text).ok());
  EXPECT_TRUE(ReadInt(Get("a: 1\nb:\n", "b"), 0, 10, number).ok());
  EXPECT_TRUE(ReadBool(Get("a: 1\nb: ~\n", "b"), flag).ok());
  EXPECT_EQ(text, "default");
  EXPECT_EQ(number, 7);
  EXPECT_TRUE(flag);
}

TEST_F(YamlFieldsTest, ValuesAreQuotedInTheDialectsStyle) {
  int number = 0;
  EXPECT_EQ(MessageOf(ReadInt(Get("a: abcdef\n", "a", kOther), 0, 10, number)),
            "a: expected an integer, got \"abcd\"...");
  EXPECT_EQ(MessageOf(ReadInt(Get("a: abcdef\n", "a"), 0, 10, number)),
            "a: expected an integer, got \"abcdef\"");
}

TEST(QuoteTest, CutsAfter80BytesWithTheEllipsisInsideTheQuotes) {
  EXPECT_EQ(Quote("a\x01"), "\"a\\x01\"");
  EXPECT_EQ(Quote(std::string(80, 'a')), "\"" + std::string(80, 'a') + "\"");
  EXPECT_EQ(Quote(std::string(81, 'a')), "\"" + std::string(80, 'a') + "...\"");
}

TEST(QuoteTest, AStyleSetsTheCutAndWhereTheEllipsisGoes) {
  const QuoteStyle after{.cut = 64, .ellipsis_inside = false};
  EXPECT_EQ(Quote(std::string(64, 'a'), after), "\"" + std::string(64, 'a') + "\"");
  EXPECT_EQ(Quote(std::string(65, 'a'), after), "\"" + std::string(64, 'a') + "\"...");
}

}  // namespace
}  // namespace sluice::config
