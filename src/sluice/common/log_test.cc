#include "sluice/common/log.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

TEST(LogTest, EscapesEverythingJsonRequires) {
  std::string out;
  AppendJsonEscaped(out, "a\"b\\c\nd\x01\x7f");
  EXPECT_EQ(out, "a\\\"b\\\\c\\nd\\u0001\\u007f");
}

TEST(LogTest, KeepsUtf8AndReplacesWhatIsNone) {
  std::string out;
  // é, €, U+1F600; then a stray continuation byte, a truncated sequence, an overlong '/', a
  // surrogate and a byte never in UTF-8.
  AppendJsonEscaped(
      out, "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80|\x80|\xe2\x82|\xc0\xaf|\xed\xa0\x80|\xff");
  EXPECT_EQ(out,
            "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80|\\ufffd|\\ufffd\\ufffd|\\ufffd\\ufffd|"
            "\\ufffd\\ufffd\\ufffd|\\ufffd");
}

TEST(LogTest, WritesOneJsonObjectPerLine) {
  ::testing::internal::CaptureStderr();
  { Log(LogLevel::kWarn, "disk \"full\"").Str("path", "/tmp/x").Int("n", -3).Bool("ok", false); }
  std::string line = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(line.find("\"level\":\"warn\",\"msg\":\"disk \\\"full\\\"\",\"path\":\"/tmp/x\","
                      "\"n\":-3,\"ok\":false}\n"),
            std::string::npos)
      << line;
  EXPECT_EQ(line.substr(0, 7), "{\"ts\":\"");
}

TEST(LogTest, WritesAListOfStringsAsAJsonArray) {
  ::testing::internal::CaptureStderr();
  { Log(LogLevel::kWarn, "m").StrList("names", {"a", "b\"c"}).StrList("none", {}); }
  std::string line = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(line.find("\"names\":[\"a\",\"b\\\"c\"],\"none\":[]}\n"), std::string::npos) << line;
}

TEST(LogTest, DropsLinesBelowTheLevel) {
  SetLogLevel(LogLevel::kWarn);
  ::testing::internal::CaptureStderr();
  { Log(LogLevel::kInfo, "quiet"); }
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  SetLogLevel(LogLevel::kInfo);
}

TEST(LogTest, ParsesLevelNames) {
  LogLevel level;
  ASSERT_TRUE(ParseLogLevel("debug", &level));
  EXPECT_EQ(level, LogLevel::kDebug);
  EXPECT_FALSE(ParseLogLevel("verbose", &level));
}

TEST(LogEveryTest, OneLineAtOnceThenOnePerIntervalCountingTheRest) {
  LogEvery limit(std::chrono::seconds(60));
  const LogEvery::Clock::time_point t0{};
  uint64_t held_back = 99;
  EXPECT_TRUE(limit.AllowAt(t0 + std::chrono::seconds(1), &held_back));
  EXPECT_EQ(held_back, 0u);
  EXPECT_TRUE(limit.active());
  for (int i = 2; i < 60; ++i)
    EXPECT_FALSE(limit.AllowAt(t0 + std::chrono::seconds(i), &held_back));
  EXPECT_TRUE(limit.AllowAt(t0 + std::chrono::seconds(61), &held_back));
  EXPECT_EQ(held_back, 58u);
  EXPECT_FALSE(limit.AllowAt(t0 + std::chrono::seconds(62), &held_back));
  // Over: the next one goes through at once, and nothing held back before counts.
  limit.Reset();
  EXPECT_FALSE(limit.active());
  EXPECT_TRUE(limit.AllowAt(t0 + std::chrono::seconds(63), &held_back));
  EXPECT_EQ(held_back, 0u);
}

}  // namespace
}  // namespace sluice
