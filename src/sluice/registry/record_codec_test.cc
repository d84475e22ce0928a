#include "sluice/registry/record_codec.h"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "absl/time/time.h"

namespace sluice::registry {
namespace {

const absl::Time kUntil = absl::FromUnixMicros(1'700'000'123'456'789);

TEST(OverridesTextTest, LeavesUntilOutWhenThereIsNone) {
  EXPECT_EQ(OverridesText({{.limit = "daily", .quota = 5, .until = kUntil},
                           {.limit = "monthly", .quota = 7}}),
            R"([{"limit":"daily","quota":5,"until":1700000123456789},)"
            R"({"limit":"monthly","quota":7}])");
  EXPECT_EQ(OverridesText({}), "[]");
}

TEST(OverridesTextTest, IsOverridesJsonAsCompactText) {
  const std::vector<Override> overrides = {{.limit = "a", .quota = 1, .until = kUntil},
                                           {.limit = "b", .quota = 2}};
  EXPECT_EQ(OverridesText(overrides), OverridesJson(overrides).dump());
}

TEST(OverridesTextTest, WritesInvalidUtf8AsReplacementCharactersInsteadOfThrowing) {
  EXPECT_EQ(OverridesText({{.limit = "a\xff", .quota = 1}}),
            "[{\"limit\":\"a\xef\xbf\xbd\",\"quota\":1}]");
}

TEST(ParseOverridesTextTest, ReadsWhatOverridesTextWrites) {
  const std::vector<Override> overrides = {{.limit = "daily", .quota = 5, .until = kUntil},
                                           {.limit = "x\"]", .quota = -1}};
  absl::StatusOr<std::vector<Override>> back = ParseOverridesText(OverridesText(overrides));
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ((*back)[0].limit, "daily");
  EXPECT_EQ((*back)[0].quota, 5);
  EXPECT_EQ((*back)[0].until, kUntil);
  EXPECT_EQ((*back)[1].limit, "x\"]");
  EXPECT_EQ((*back)[1].quota, -1);
  EXPECT_EQ((*back)[1].until, std::nullopt);
}

TEST(ParseOverridesTextTest, ReadsAnEmptyArrayHoweverSpaced) {
  for (std::string_view text : {"[]", " [ ] "}) {
    absl::StatusOr<std::vector<Override>> o = ParseOverridesText(text);
    ASSERT_TRUE(o.ok()) << text;
    EXPECT_TRUE(o->empty()) << text;
  }
}

TEST(ParseOverridesTextTest, ReadsANullUntilAsNoneWhateverTheOptions) {
  for (BadUntil bad_until : {BadUntil::kReject, BadUntil::kIgnore}) {
    absl::StatusOr<std::vector<Override>> o = ParseOverridesText(
        R"([{"limit":"daily","quota":5,"until":null}])", {.bad_until = bad_until});
    ASSERT_TRUE(o.ok()) << o.status();
    ASSERT_EQ(o->size(), 1u);
    EXPECT_EQ((*o)[0].until, std::nullopt);
  }
}

TEST(ParseOverridesTextTest, RejectsAnUntilThatIsNotAnIntegerByDefault) {
  for (std::string_view until : {R"("2030-01-01T00:00:00Z")", "1.5", "false", "{}"}) {
    const std::string text =
        std::string(R"([{"limit":"daily","quota":5,"until":)") + std::string(until) + "}]";
    absl::StatusOr<std::vector<Override>> o = ParseOverridesText(text);
    EXPECT_EQ(o.status().code(), absl::StatusCode::kDataLoss) << text;
    EXPECT_EQ(o.status().message(), "an override's until is not an integer") << text;
  }
}

TEST(ParseOverridesTextTest, IgnoresAnUntilThatIsNotAnIntegerWhenAsked) {
  absl::StatusOr<std::vector<Override>> o =
      ParseOverridesText(R"([{"limit":"daily","quota":5,"until":"2030-01-01T00:00:00Z"}])",
                         {.bad_until = BadUntil::kIgnore});
  ASSERT_TRUE(o.ok()) << o.status();
  ASSERT_EQ(o->size(), 1u);
  EXPECT_EQ((*o)[0].quota, 5);
  EXPECT_EQ((*o)[0].until, std::nullopt);
}

TEST(ParseOverridesTextTest, RefusesWhatIsNotAnArray) {
  for (std::string_view text : {"", "[", "{}", "null", "5", R"("[]")"}) {
    absl::StatusOr<std::vector<Override>> o = ParseOverridesText(text);
    EXPECT_EQ(o.status().code(), absl::StatusCode::kDataLoss) << text;
    EXPECT_EQ(o.status().message(), "overrides is not a JSON array") << text;
  }
}

TEST(ParseOverridesTextTest, RefusesAnOverrideWithoutAStringLimitAndAnIntegerQuota) {
  for (std::string_view text :
       {R"([5])", R"([{"limit":"daily"}])", R"([{"quota":5}])", R"([{"limit":null,"quota":5}])",
        R"([{"limit":"daily","quota":5.0}])", R"([{"limit":"daily","quota":5},[]])"}) {
    for (BadUntil bad_until : {BadUntil::kReject, BadUntil::kIgnore}) {
      absl::StatusOr<std::vector<Override>> o = ParseOverridesText(text, {.bad_until = bad_until});
      EXPECT_EQ(o.status().code(), absl::StatusCode::kDataLoss) << text;
      EXPECT_EQ(o.status().message(), "an override is not {limit, quota, until}") << text;
    }
  }
}

TEST(ParseOverridesTextTest, IgnoresOtherMembers) {
  absl::StatusOr<std::vector<Override>> o =
      ParseOverridesText(R"([{"note":"x","limit":"daily","quota":5,"extra":[1]}])");
  ASSERT_TRUE(o.ok()) << o.status();
  ASSERT_EQ(o->size(), 1u);
  EXPECT_EQ((*o)[0].limit, "daily");
}

}  // namespace
}  // namespace sluice::registry
