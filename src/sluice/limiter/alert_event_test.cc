#include "sluice/limiter/alert_event.h"
#include "sluice/limiter/sample_alert_event.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "absl/time/time.h"

namespace sluice {
namespace {

using ::testing::MatchesRegex;

// user-42 reached 80% of the free plan's daily limit on 2026-11-30 (UTC).
AlertEvent Event() { return testing_util::SampleAlertEvent(); }

TEST(AlertEventIdTest, IsQaFollowedBy32LowercaseHexDigits) {
  EXPECT_THAT(Event().Id(), MatchesRegex("qa_[0-9a-f]{32}"));
}

// A regression guard: ids are written down by receivers to de-duplicate, so this value must never
// change, in any build or on any machine. (It changed once, when the quota in force became part
// of an alert's identity.)
TEST(AlertEventIdTest, NeverChanges) {
  EXPECT_EQ(Event().Id(), "qa_d4e39afdf669701a8133aafb7ce44067");
}

TEST(AlertEventIdTest, SameAlertBuiltTwiceGetsTheSameId) { EXPECT_EQ(Event().Id(), Event().Id()); }

TEST(AlertEventIdTest, DiffersWhenQuotaDiffers) {
  // An upgrade or override re-arms a threshold: the second firing is another alert.
  AlertEvent other = Event();
  other.quota = 6000;
  EXPECT_NE(other.Id(), Event().Id());
}

TEST(AlertEventIdTest, IgnoresCountsWindowEndAndFiringTime) {
  AlertEvent later = Event();
  later.used = 4003;
  later.window_end += absl::Hours(1);
  later.occurred_at += absl::Minutes(5);
  EXPECT_EQ(later.Id(), Event().Id());
}

TEST(AlertEventIdTest, DiffersWhenSubjectDiffers) {
  AlertEvent other = Event();
  other.subject = "user-43";
  EXPECT_NE(other.Id(), Event().Id());
}

TEST(AlertEventIdTest, DiffersWhenPlanDiffers) {
  AlertEvent other = Event();
  other.plan = "pro";
  EXPECT_NE(other.Id(), Event().Id());
}

TEST(AlertEventIdTest, DiffersWhenLimitDiffers) {
  AlertEvent other = Event();
  other.limit = "monthly";
  EXPECT_NE(other.Id(), Event().Id());
}

TEST(AlertEventIdTest, DiffersWhenWindowStartDiffers) {
  AlertEvent next_window = Event();
  next_window.window_start += absl::Hours(24);
  EXPECT_NE(next_window.Id(), Event().Id());
}

TEST(AlertEventIdTest, DiffersWhenThresholdDiffers) {
  AlertEvent other = Event();
  other.threshold = 100;
  EXPECT_NE(other.Id(), Event().Id());
}

TEST(AlertEventIdTest, PartsCannotBeConfusedByMovingBytesBetweenThem) {
  AlertEvent a = Event();
  a.subject = "ab";
  a.plan = "c";
  AlertEvent b = Event();
  b.subject = "a";
  b.plan = "bc";
  EXPECT_NE(a.Id(), b.Id());
}

TEST(AlertEventIdTest, PartsCannotBeConfusedWhenOneIsEmpty) {
  AlertEvent a = Event();
  a.plan = "free";
  a.limit = "";
  AlertEvent b = Event();
  b.plan = "";
  b.limit = "free";
  EXPECT_NE(a.Id(), b.Id());
}

TEST(AlertEventIdTest, SeparatorBytesInsideAPartCannotForgeABoundary) {
  AlertEvent a = Event();
  a.subject = std::string("a\0b", 3);
  a.plan = "c";
  AlertEvent b = Event();
  b.subject = "a";
  b.plan = std::string("b\0c", 3);
  EXPECT_NE(a.Id(), b.Id());
}

}  // namespace
}  // namespace sluice
