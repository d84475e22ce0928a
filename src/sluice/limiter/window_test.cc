#include "sluice/limiter/window.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/civil_time.h"
#include "absl/time/time.h"
#include "sluice/config/config.h"

namespace sluice {
namespace {

using Kind = config::WindowSpec::Kind;

config::WindowSpec Fixed(absl::Duration length) {
  return {.kind = Kind::kFixed, .length = length, .text = absl::FormatDuration(length)};
}
config::WindowSpec Day() { return {.kind = Kind::kDay, .text = "day"}; }
config::WindowSpec Week() { return {.kind = Kind::kWeek, .text = "week"}; }
config::WindowSpec Month() { return {.kind = Kind::kMonth, .text = "month"}; }
config::WindowSpec Year() { return {.kind = Kind::kYear, .text = "year"}; }
config::WindowSpec Credit() { return {.kind = Kind::kCredit, .text = "credit"}; }

// An RFC 3339 instant, e.g. "2026-03-08T12:00:00-04:00" or "2026-01-01T00:00:59.999Z".
absl::Time At(absl::string_view rfc3339) {
  absl::Time t;
  std::string error;
  if (!absl::ParseTime(absl::RFC3339_full, rfc3339, &t, &error)) {
    ADD_FAILURE() << "bad time " << rfc3339 << ": " << error;
  }
  return t;
}

class WindowTest : public ::testing::Test {
 protected:
  const absl::TimeZone utc_ = absl::UTCTimeZone();
};

// ---- Fixed windows ----

using FixedWindowTest = WindowTest;

TEST_F(FixedWindowTest, OneMinuteWindowStartsOnAMultipleOfSixtySecondsSinceEpoch) {
  const WindowBounds w = WindowAt(Fixed(absl::Minutes(1)), utc_, At("2026-05-10T12:00:30.250Z"));
  EXPECT_EQ(w.start, At("2026-05-10T12:00:00Z"));
  EXPECT_EQ(w.end, At("2026-05-10T12:01:00Z"));
  EXPECT_EQ(absl::ToUnixSeconds(w.start) % 60, 0);
  EXPECT_EQ(w.id, absl::ToUnixSeconds(w.start) / 60);
}

TEST_F(FixedWindowTest, LastMillisecondOfAMinuteAndTheNextMinuteAreInDifferentWindows) {
  const WindowBounds before =
      WindowAt(Fixed(absl::Minutes(1)), utc_, At("2026-05-10T12:00:59.999Z"));
  const WindowBounds after = WindowAt(Fixed(absl::Minutes(1)), utc_, At("2026-05-10T12:01:00Z"));
  EXPECT_EQ(after.id, before.id + 1);
  EXPECT_EQ(before.end, At("2026-05-10T12:01:00Z"));
  EXPECT_EQ(after.start, At("2026-05-10T12:01:00Z"));
}

TEST_F(FixedWindowTest, TimeZoneDoesNotMoveFixedWindows) {
  const absl::Time t = At("2026-05-10T12:34:56Z");
  absl::TimeZone kolkata;
  ASSERT_TRUE(absl::LoadTimeZone("Asia/Kolkata", &kolkata));
  EXPECT_EQ(WindowAt(Fixed(absl::Hours(1)), kolkata, t), WindowAt(Fixed(absl::Hours(1)), utc_, t));
}

TEST_F(FixedWindowTest, OneHourWindowRunsFromHourToHour) {
  const WindowBounds w = WindowAt(Fixed(absl::Hours(1)), utc_, At("2026-05-10T12:34:56Z"));
  EXPECT_EQ(w.start, At("2026-05-10T12:00:00Z"));
  EXPECT_EQ(w.end, At("2026-05-10T13:00:00Z"));
  EXPECT_EQ(w.id, absl::ToUnixSeconds(w.start) / 3600);
}

TEST_F(FixedWindowTest, OneSecondWindowHoldsEveryInstantOfThatSecond) {
  const WindowBounds first = WindowAt(Fixed(absl::Seconds(1)), utc_, At("2026-05-10T12:00:05Z"));
  const WindowBounds last =
      WindowAt(Fixed(absl::Seconds(1)), utc_, At("2026-05-10T12:00:05.999999999Z"));
  EXPECT_EQ(first, last);
  EXPECT_EQ(first.start, At("2026-05-10T12:00:05Z"));
  EXPECT_EQ(first.end, At("2026-05-10T12:00:06Z"));
}

TEST_F(FixedWindowTest, NinetySecondWindowsAreAlignedToTheEpochNotToTheMinute) {
  const WindowBounds w = WindowAt(Fixed(absl::Seconds(90)), utc_, absl::FromUnixSeconds(1000));
  EXPECT_EQ(w.id, 11);
  EXPECT_EQ(w.start, absl::FromUnixSeconds(990));
  EXPECT_EQ(w.end, absl::FromUnixSeconds(1080));
}

TEST_F(FixedWindowTest, SubSecondInstantJustBeforeABoundaryBelongsToTheEarlierWindow) {
  const WindowBounds w = WindowAt(Fixed(absl::Seconds(90)), utc_, absl::FromUnixMillis(1079'999));
  EXPECT_EQ(w.start, absl::FromUnixSeconds(990));
  EXPECT_EQ(w.end, absl::FromUnixSeconds(1080));
}

TEST_F(FixedWindowTest, InstantBeforeTheEpochFloorsToTheEarlierWindow) {
  const WindowBounds w = WindowAt(Fixed(absl::Minutes(1)), utc_, absl::FromUnixMillis(-1));
  EXPECT_EQ(w.id, -1);
  EXPECT_EQ(w.start, absl::FromUnixSeconds(-60));
  EXPECT_EQ(w.end, absl::UnixEpoch());
}

TEST_F(FixedWindowTest, HalfSecondBeforeTheEpochIsInSecondMinusOne) {
  const WindowBounds w = WindowAt(Fixed(absl::Seconds(1)), utc_, absl::FromUnixMillis(-500));
  EXPECT_EQ(w.id, -1);
  EXPECT_EQ(w.start, absl::FromUnixSeconds(-1));
  EXPECT_EQ(w.end, absl::UnixEpoch());
}

TEST_F(FixedWindowTest, ConsecutiveWindowsHaveConsecutiveIdsAndTouch) {
  const config::WindowSpec spec = Fixed(absl::Seconds(90));
  WindowBounds w = WindowAt(spec, utc_, absl::FromUnixSeconds(-200));
  for (int i = 0; i < 10; ++i) {
    const WindowBounds next = WindowAt(spec, utc_, w.end);
    EXPECT_EQ(next.id, w.id + 1);
    EXPECT_EQ(next.start, w.end);
    EXPECT_EQ(next.end - next.start, absl::Seconds(90));
    w = next;
  }
}

// ---- Day windows ----

using DayWindowTest = WindowTest;

TEST_F(DayWindowTest, UtcDayRunsFromMidnightToMidnight) {
  const WindowBounds w = WindowAt(Day(), utc_, At("2026-11-30T13:45:12.123Z"));
  EXPECT_EQ(w.start, At("2026-11-30T00:00:00Z"));
  EXPECT_EQ(w.end, At("2026-12-01T00:00:00Z"));
}

TEST_F(DayWindowTest, IdCountsDaysSinceTheEpoch) {
  EXPECT_EQ(WindowAt(Day(), utc_, absl::UnixEpoch()).id, 0);
  EXPECT_EQ(WindowAt(Day(), utc_, absl::FromUnixSeconds(-1)).id, -1);
  EXPECT_EQ(WindowAt(Day(), utc_, At("2026-11-30T13:45:12Z")).id, 20787);
}

TEST_F(DayWindowTest, DayStartsAtLocalMidnightOfThePlanTimeZone) {
  absl::TimeZone ny;
  ASSERT_TRUE(absl::LoadTimeZone("America/New_York", &ny));
  // 02:00 UTC on 1 May is still 30 April in New York (UTC-4).
  const WindowBounds w = WindowAt(Day(), ny, At("2026-05-01T02:00:00Z"));
  EXPECT_EQ(w.start, At("2026-04-30T00:00:00-04:00"));
  EXPECT_EQ(w.end, At("2026-05-01T00:00:00-04:00"));
  EXPECT_EQ(w.id, WindowAt(Day(), utc_, At("2026-04-30T12:00:00Z")).id);
}

TEST_F(DayWindowTest, NewYorkSpringForwardDayIs23Hours) {
  absl::TimeZone ny;
  ASSERT_TRUE(absl::LoadTimeZone("America/New_York", &ny));
  const WindowBounds w = WindowAt(Day(), ny, At("2026-03-08T12:00:00-04:00"));
  EXPECT_EQ(w.start, At("2026-03-08T00:00:00-05:00"));
  EXPECT_EQ(w.end, At("2026-03-09T00:00:00-04:00"));
  EXPECT_EQ(w.end - w.start, absl::Hours(23));
}

TEST_F(DayWindowTest, NewYorkFallBackDayIs25Hours) {
  absl::TimeZone ny;
  ASSERT_TRUE(absl::LoadTimeZone("America/New_York", &ny));
  const WindowBounds w = WindowAt(Day(), ny, At("2026-11-01T12:00:00-05:00"));
  EXPECT_EQ(w.start, At("2026-11-01T00:00:00-04:00"));
  EXPECT_EQ(w.end, At("2026-11-02T00:00:00-05:00"));
  EXPECT_EQ(w.end - w.start, absl::Hours(25));
}

TEST_F(DayWindowTest, BerlinSpringForwardDayIs23Hours) {
  absl::TimeZone berlin;
  ASSERT_TRUE(absl::LoadTimeZone("Europe/Berlin", &berlin));
  const WindowBounds w = WindowAt(Day(), berlin, At("2026-03-29T12:00:00+02:00"));
  EXPECT_EQ(w.start, At("2026-03-28T23:00:00Z"));
  EXPECT_EQ(w.end, At("2026-03-29T22:00:00Z"));
  EXPECT_EQ(w.end - w.start, absl::Hours(23));
}

TEST_F(DayWindowTest, BerlinFallBackDayIs25Hours) {
  absl::TimeZone berlin;
  ASSERT_TRUE(absl::LoadTimeZone("Europe/Berlin", &berlin));
  const WindowBounds w = WindowAt(Day(), berlin, At("2026-10-25T12:00:00+01:00"));
  EXPECT_EQ(w.start, At("2026-10-24T22:00:00Z"));
  EXPECT_EQ(w.end, At("2026-10-25T23:00:00Z"));
  EXPECT_EQ(w.end - w.start, absl::Hours(25));
}

// Chile started DST on 2022-09-11 at 24:00: local time jumped from 23:59:59 -04 to 01:00 -03, so
// that day had no midnight. Its window starts at the jump, 01:00 local.
TEST_F(DayWindowTest, DayWhoseMidnightIsSkippedStartsAtTheTransition) {
  absl::TimeZone santiago;
  ASSERT_TRUE(absl::LoadTimeZone("America/Santiago", &santiago));
  const WindowBounds w = WindowAt(Day(), santiago, At("2022-09-11T12:00:00-03:00"));
  EXPECT_EQ(w.start, At("2022-09-11T04:00:00Z"));
  EXPECT_EQ(absl::ToCivilSecond(w.start, santiago), absl::CivilSecond(2022, 9, 11, 1, 0, 0));
  EXPECT_EQ(w.end, At("2022-09-12T00:00:00-03:00"));
  EXPECT_EQ(w.end - w.start, absl::Hours(23));
}

TEST_F(DayWindowTest, DayBeforeASkippedMidnightEndsAtTheTransition) {
  absl::TimeZone santiago;
  ASSERT_TRUE(absl::LoadTimeZone("America/Santiago", &santiago));
  const WindowBounds last = WindowAt(Day(), santiago, At("2022-09-11T03:59:59.999Z"));
  const WindowBounds first = WindowAt(Day(), santiago, At("2022-09-11T04:00:00Z"));
  EXPECT_EQ(last.end, At("2022-09-11T04:00:00Z"));
  EXPECT_EQ(first.start, last.end);
  EXPECT_EQ(first.id, last.id + 1);
}

// Cuba ended DST on 2019-11-03 at 01:00 CDT, turning clocks back to 00:00 CST: midnight happened
// twice. The day starts at the first midnight and is 25 hours long.
TEST_F(DayWindowTest, DayWhoseMidnightIsRepeatedStartsAtTheFirstMidnight) {
  absl::TimeZone havana;
  ASSERT_TRUE(absl::LoadTimeZone("America/Havana", &havana));
  const WindowBounds w = WindowAt(Day(), havana, At("2019-11-03T12:00:00-05:00"));
  EXPECT_EQ(w.start, At("2019-11-03T00:00:00-04:00"));
  EXPECT_EQ(w.end, At("2019-11-04T00:00:00-05:00"));
  EXPECT_EQ(w.end - w.start, absl::Hours(25));
}

TEST_F(DayWindowTest, BothOccurrencesOfARepeatedMidnightHourAreInTheSameDay) {
  absl::TimeZone havana;
  ASSERT_TRUE(absl::LoadTimeZone("America/Havana", &havana));
  EXPECT_EQ(WindowAt(Day(), havana, At("2019-11-03T00:30:00-04:00")),
            WindowAt(Day(), havana, At("2019-11-03T00:30:00-05:00")));
}

// Samoa skipped 2011-12-30 entirely (23:59:59 on the 29th was followed by 00:00 on the 31st).
TEST_F(DayWindowTest, CalendarDaySkippedByTheZoneLeavesNoGapBetweenWindows) {
  absl::TimeZone apia;
  ASSERT_TRUE(absl::LoadTimeZone("Pacific/Apia", &apia));
  const WindowBounds dec29 = WindowAt(Day(), apia, At("2011-12-29T12:00:00-10:00"));
  const WindowBounds dec31 = WindowAt(Day(), apia, At("2011-12-31T12:00:00+14:00"));
  EXPECT_EQ(dec29.end, dec31.start);
  EXPECT_EQ(dec29.end - dec29.start, absl::Hours(24));
  EXPECT_LT(dec29.id, dec31.id);
}

TEST_F(DayWindowTest, ConsecutiveDaysHaveConsecutiveIdsAndTouchAcrossDstChanges) {
  absl::TimeZone ny;
  ASSERT_TRUE(absl::LoadTimeZone("America/New_York", &ny));
  WindowBounds w = WindowAt(Day(), ny, At("2026-03-06T12:00:00Z"));
  for (int i = 0; i < 250; ++i) {  // through both of 2026's DST changes
    const WindowBounds next = WindowAt(Day(), ny, w.end);
    EXPECT_EQ(next.id, w.id + 1);
    EXPECT_EQ(next.start, w.end);
    w = next;
  }
}

// ---- Month windows ----

using MonthWindowTest = WindowTest;

TEST_F(MonthWindowTest, JanuaryHas31Days) {
  const WindowBounds w = WindowAt(Month(), utc_, At("2026-01-15T08:00:00Z"));
  EXPECT_EQ(w.start, At("2026-01-01T00:00:00Z"));
  EXPECT_EQ(w.end, At("2026-02-01T00:00:00Z"));
  EXPECT_EQ(w.end - w.start, absl::Hours(24 * 31));
}

TEST_F(MonthWindowTest, FebruaryHas28DaysIn2026) {
  const WindowBounds w = WindowAt(Month(), utc_, At("2026-02-10T08:00:00Z"));
  EXPECT_EQ(w.start, At("2026-02-01T00:00:00Z"));
  EXPECT_EQ(w.end, At("2026-03-01T00:00:00Z"));
  EXPECT_EQ(w.end - w.start, absl::Hours(24 * 28));
}

TEST_F(MonthWindowTest, FebruaryHas29DaysInLeapYear2028) {
  const WindowBounds w = WindowAt(Month(), utc_, At("2028-02-10T08:00:00Z"));
  EXPECT_EQ(w.start, At("2028-02-01T00:00:00Z"));
  EXPECT_EQ(w.end, At("2028-03-01T00:00:00Z"));
  EXPECT_EQ(w.end - w.start, absl::Hours(24 * 29));
}

TEST_F(MonthWindowTest, LeapDayBelongsToFebruaryAndMarchStartsAfterIt) {
  const WindowBounds leap_day = WindowAt(Month(), utc_, At("2028-02-29T23:59:59.999Z"));
  const WindowBounds march = WindowAt(Month(), utc_, At("2028-03-01T00:00:00Z"));
  EXPECT_EQ(leap_day.start, At("2028-02-01T00:00:00Z"));
  EXPECT_EQ(march.start, At("2028-03-01T00:00:00Z"));
  EXPECT_EQ(march.id, leap_day.id + 1);
}

TEST_F(MonthWindowTest, AprilHas30Days) {
  const WindowBounds w = WindowAt(Month(), utc_, At("2026-04-30T23:00:00Z"));
  EXPECT_EQ(w.start, At("2026-04-01T00:00:00Z"));
  EXPECT_EQ(w.end, At("2026-05-01T00:00:00Z"));
  EXPECT_EQ(w.end - w.start, absl::Hours(24 * 30));
}

TEST_F(MonthWindowTest, DecemberIsFollowedByJanuaryOfTheNextYear) {
  const WindowBounds december = WindowAt(Month(), utc_, At("2026-12-31T23:59:59Z"));
  const WindowBounds january = WindowAt(Month(), utc_, december.end);
  EXPECT_EQ(december.end, At("2027-01-01T00:00:00Z"));
  EXPECT_EQ(january.start, december.end);
  EXPECT_EQ(january.end, At("2027-02-01T00:00:00Z"));
  EXPECT_EQ(january.id, december.id + 1);
}

TEST_F(MonthWindowTest, IdCountsMonthsSinceJanuary1970) {
  EXPECT_EQ(WindowAt(Month(), utc_, absl::UnixEpoch()).id, 0);
  EXPECT_EQ(WindowAt(Month(), utc_, absl::FromUnixSeconds(-1)).id, -1);
  EXPECT_EQ(WindowAt(Month(), utc_, At("2026-11-15T00:00:00Z")).id, 56 * 12 + 10);
}

TEST_F(MonthWindowTest, MonthFollowsThePlanTimeZone) {
  // 18:00 UTC on 30 November is 01:00 on 1 December in Ho Chi Minh City (UTC+7).
  absl::TimeZone saigon;
  ASSERT_TRUE(absl::LoadTimeZone("Asia/Ho_Chi_Minh", &saigon));
  const WindowBounds w = WindowAt(Month(), saigon, At("2026-11-30T18:00:00Z"));
  EXPECT_EQ(w.start, At("2026-12-01T00:00:00+07:00"));
  EXPECT_EQ(w.end, At("2027-01-01T00:00:00+07:00"));
  EXPECT_EQ(w.id, 56 * 12 + 11);
}

TEST_F(MonthWindowTest, MonthWithASpringForwardIsOneHourShort) {
  absl::TimeZone ny;
  ASSERT_TRUE(absl::LoadTimeZone("America/New_York", &ny));
  const WindowBounds w = WindowAt(Month(), ny, At("2026-03-15T12:00:00Z"));
  EXPECT_EQ(w.start, At("2026-03-01T00:00:00-05:00"));
  EXPECT_EQ(w.end, At("2026-04-01T00:00:00-04:00"));
  EXPECT_EQ(w.end - w.start, absl::Hours(24 * 31 - 1));
}

// ---- Week windows ----

using WeekWindowTest = WindowTest;

TEST_F(WeekWindowTest, WeekRunsFromMondayMidnightToTheNextMonday) {
  // 2026-12-02 is a Wednesday.
  const WindowBounds w = WindowAt(Week(), utc_, At("2026-12-02T13:45:12Z"));
  EXPECT_EQ(w.start, At("2026-11-30T00:00:00Z"));
  EXPECT_EQ(w.end, At("2026-12-07T00:00:00Z"));
  EXPECT_EQ(absl::GetWeekday(absl::ToCivilDay(w.start, utc_)), absl::Weekday::monday);
}

TEST_F(WeekWindowTest, SundayBelongsToTheWeekThatStartedSixDaysBefore) {
  const WindowBounds sunday = WindowAt(Week(), utc_, At("2026-12-06T23:59:59.999Z"));
  const WindowBounds monday = WindowAt(Week(), utc_, At("2026-12-07T00:00:00Z"));
  EXPECT_EQ(sunday.start, At("2026-11-30T00:00:00Z"));
  EXPECT_EQ(monday.start, At("2026-12-07T00:00:00Z"));
  EXPECT_EQ(monday.id, sunday.id + 1);
}

TEST_F(WeekWindowTest, IdCountsWeeksSinceTheMondayBeforeTheEpoch) {
  // 1970-01-01 was a Thursday: its week started on Monday 1969-12-29.
  const WindowBounds epoch = WindowAt(Week(), utc_, absl::UnixEpoch());
  EXPECT_EQ(epoch.id, 0);
  EXPECT_EQ(epoch.start, At("1969-12-29T00:00:00Z"));
  EXPECT_EQ(WindowAt(Week(), utc_, At("1969-12-28T23:59:59Z")).id, -1);
  EXPECT_EQ(WindowAt(Week(), utc_, At("1970-01-05T00:00:00Z")).id, 1);
  // 2026-11-30 is 20787 days after the epoch, 20790 after 1969-12-29: week 2970.
  EXPECT_EQ(WindowAt(Week(), utc_, At("2026-12-02T00:00:00Z")).id, 2970);
}

TEST_F(WeekWindowTest, IsoWeekSpanningNewYearIsOneWindow) {
  // ISO week 2026-W53 runs from Monday 2026-12-28 to Sunday 2027-01-03.
  const WindowBounds december = WindowAt(Week(), utc_, At("2026-12-31T12:00:00Z"));
  const WindowBounds january = WindowAt(Week(), utc_, At("2027-01-03T12:00:00Z"));
  EXPECT_EQ(december, january);
  EXPECT_EQ(december.start, At("2026-12-28T00:00:00Z"));
  EXPECT_EQ(december.end, At("2027-01-04T00:00:00Z"));
}

TEST_F(WeekWindowTest, WeekFollowsThePlanTimeZone) {
  // Sunday 2026-11-29 20:00 in New York is Monday 01:00 UTC: another week in UTC than in New York.
  absl::TimeZone ny;
  ASSERT_TRUE(absl::LoadTimeZone("America/New_York", &ny));
  const absl::Time t = At("2026-11-30T01:00:00Z");
  const WindowBounds local = WindowAt(Week(), ny, t);
  EXPECT_EQ(local.start, At("2026-11-23T00:00:00-05:00"));
  EXPECT_EQ(local.end, At("2026-11-30T00:00:00-05:00"));
  EXPECT_EQ(WindowAt(Week(), utc_, t).id, local.id + 1);
}

TEST_F(WeekWindowTest, ParisSpringForwardWeekIs167Hours) {
  absl::TimeZone paris;
  ASSERT_TRUE(absl::LoadTimeZone("Europe/Paris", &paris));
  // Summer time begins on Sunday 2026-03-29 at 02:00 local.
  const WindowBounds w = WindowAt(Week(), paris, At("2026-03-27T12:00:00Z"));
  EXPECT_EQ(w.start, At("2026-03-23T00:00:00+01:00"));
  EXPECT_EQ(w.end, At("2026-03-30T00:00:00+02:00"));
  EXPECT_EQ(w.end - w.start, absl::Hours(167));
}

TEST_F(WeekWindowTest, ParisFallBackWeekIs169Hours) {
  absl::TimeZone paris;
  ASSERT_TRUE(absl::LoadTimeZone("Europe/Paris", &paris));
  // Summer time ends on Sunday 2026-10-25 at 03:00 local.
  const WindowBounds w = WindowAt(Week(), paris, At("2026-10-25T12:00:00Z"));
  EXPECT_EQ(w.start, At("2026-10-19T00:00:00+02:00"));
  EXPECT_EQ(w.end, At("2026-10-26T00:00:00+01:00"));
  EXPECT_EQ(w.end - w.start, absl::Hours(169));
}

TEST_F(WeekWindowTest, NewYorkSpringForwardWeekIs167HoursAndFallBackWeekIs169) {
  absl::TimeZone ny;
  ASSERT_TRUE(absl::LoadTimeZone("America/New_York", &ny));
  // 2026: DST starts Sunday 2026-03-08, ends Sunday 2026-11-01; both weeks start the Monday before.
  const WindowBounds spring = WindowAt(Week(), ny, At("2026-03-08T12:00:00Z"));
  EXPECT_EQ(spring.start, At("2026-03-02T00:00:00-05:00"));
  EXPECT_EQ(spring.end - spring.start, absl::Hours(167));
  const WindowBounds fall = WindowAt(Week(), ny, At("2026-11-01T12:00:00Z"));
  EXPECT_EQ(fall.start, At("2026-10-26T00:00:00-04:00"));
  EXPECT_EQ(fall.end - fall.start, absl::Hours(169));
}

TEST_F(WeekWindowTest, ConsecutiveWeeksHaveConsecutiveIdsAndTouchAcrossDstAndYears) {
  absl::TimeZone paris;
  ASSERT_TRUE(absl::LoadTimeZone("Europe/Paris", &paris));
  WindowBounds w = WindowAt(Week(), paris, At("2026-01-01T12:00:00Z"));
  for (int i = 0; i < 160; ++i) {  // three years: six DST changes, three New Years
    const WindowBounds next = WindowAt(Week(), paris, w.end);
    EXPECT_EQ(next.id, w.id + 1);
    EXPECT_EQ(next.start, w.end);
    EXPECT_EQ(absl::GetWeekday(absl::ToCivilDay(next.start, paris)), absl::Weekday::monday);
    w = next;
  }
}

// ---- Year windows ----

using CreditWindowTest = WindowTest;

TEST_F(CreditWindowTest, IsOneWindowFromTheEpochForever) {
  for (const char* t : {"2026-07-15T08:00:00Z", "2031-01-01T00:00:00Z", "2099-12-31T23:59:59Z"}) {
    const WindowBounds w = WindowAt(Credit(), utc_, At(t));
    EXPECT_EQ(w.id, 0) << t;
    EXPECT_EQ(w.start, absl::UnixEpoch()) << t;
  }
}

TEST_F(CreditWindowTest, EndsAtTheEndOfTheUtcDayAYearAheadAndMovesWithTime) {
  const WindowBounds w = WindowAt(Credit(), utc_, At("2026-07-15T08:00:00Z"));
  EXPECT_EQ(w.end, At("2026-07-16T00:00:00Z") + absl::Hours(24 * config::kCreditIdleDays));
  EXPECT_LE(w.end - At("2026-07-15T08:00:00Z"), absl::Hours(24 * 366));
  const WindowBounds later = WindowAt(Credit(), utc_, At("2026-09-01T23:59:59Z"));
  EXPECT_EQ(later.end - w.end, absl::Hours(24 * 48));
}

TEST_F(CreditWindowTest, IsNamedCreditWhateverTheZone) {
  EXPECT_EQ(WindowKey(Credit(), utc_), "credit");
  absl::TimeZone paris;
  ASSERT_TRUE(absl::LoadTimeZone("Europe/Paris", &paris));
  EXPECT_EQ(WindowKey(Credit(), paris), "credit");
}

TEST_F(CreditWindowTest, NeverResetsAndTheCacheFollowsItsMovingEnd) {
  EXPECT_EQ(SecondsUntilReset(Credit(), At("2027-01-01T00:00:00Z"), At("2026-07-15T08:00:00Z")), 0);
  WindowCache cache;
  const WindowBounds first = cache.Get(Credit(), utc_, At("2026-07-15T08:00:00Z"));
  const WindowBounds next = cache.Get(Credit(), utc_, At("2026-07-17T08:00:00Z"));
  EXPECT_EQ(next.end - first.end, absl::Hours(48));
}

using YearWindowTest = WindowTest;

TEST_F(YearWindowTest, YearRunsFromJanuaryFirstToJanuaryFirst) {
  const WindowBounds w = WindowAt(Year(), utc_, At("2026-07-15T08:00:00Z"));
  EXPECT_EQ(w.start, At("2026-01-01T00:00:00Z"));
  EXPECT_EQ(w.end, At("2027-01-01T00:00:00Z"));
  EXPECT_EQ(w.end - w.start, absl::Hours(24 * 365));
}

TEST_F(YearWindowTest, LeapYear2028Has366Days) {
  const WindowBounds w = WindowAt(Year(), utc_, At("2028-02-29T12:00:00Z"));
  EXPECT_EQ(w.start, At("2028-01-01T00:00:00Z"));
  EXPECT_EQ(w.end, At("2029-01-01T00:00:00Z"));
  EXPECT_EQ(w.end - w.start, absl::Hours(24 * 366));
}

TEST_F(YearWindowTest, CenturyYear2100IsNotALeapYearButYear2000Was) {
  EXPECT_EQ(WindowAt(Year(), utc_, At("2100-06-01T00:00:00Z")).end -
                WindowAt(Year(), utc_, At("2100-06-01T00:00:00Z")).start,
            absl::Hours(24 * 365));
  EXPECT_EQ(WindowAt(Year(), utc_, At("2000-06-01T00:00:00Z")).end -
                WindowAt(Year(), utc_, At("2000-06-01T00:00:00Z")).start,
            absl::Hours(24 * 366));
}

TEST_F(YearWindowTest, LastInstantOfDecemberAndNewYearAreConsecutiveYears) {
  const WindowBounds old_year = WindowAt(Year(), utc_, At("2026-12-31T23:59:59.999Z"));
  const WindowBounds new_year = WindowAt(Year(), utc_, At("2027-01-01T00:00:00Z"));
  EXPECT_EQ(old_year.end, At("2027-01-01T00:00:00Z"));
  EXPECT_EQ(new_year.start, old_year.end);
  EXPECT_EQ(new_year.id, old_year.id + 1);
}

TEST_F(YearWindowTest, IdCountsYearsSince1970) {
  EXPECT_EQ(WindowAt(Year(), utc_, absl::UnixEpoch()).id, 0);
  EXPECT_EQ(WindowAt(Year(), utc_, absl::FromUnixSeconds(-1)).id, -1);
  EXPECT_EQ(WindowAt(Year(), utc_, At("2026-11-15T00:00:00Z")).id, 56);
}

TEST_F(YearWindowTest, NewYearFollowsThePlanTimeZone) {
  // 23:30 UTC on New Year's Eve is already 2027 in Paris, still 2026 in New York.
  absl::TimeZone paris;
  absl::TimeZone ny;
  ASSERT_TRUE(absl::LoadTimeZone("Europe/Paris", &paris));
  ASSERT_TRUE(absl::LoadTimeZone("America/New_York", &ny));
  const absl::Time t = At("2026-12-31T23:30:00Z");
  const WindowBounds in_paris = WindowAt(Year(), paris, t);
  EXPECT_EQ(in_paris.start, At("2027-01-01T00:00:00+01:00"));
  EXPECT_EQ(in_paris.end, At("2028-01-01T00:00:00+01:00"));
  EXPECT_EQ(in_paris.id, 57);
  const WindowBounds in_ny = WindowAt(Year(), ny, t);
  EXPECT_EQ(in_ny.start, At("2026-01-01T00:00:00-05:00"));
  EXPECT_EQ(in_ny.end, At("2027-01-01T00:00:00-05:00"));
  EXPECT_EQ(in_ny.id, 56);
}

TEST_F(YearWindowTest, YearWithBothDstChangesHasItsCalendarLength) {
  absl::TimeZone ny;
  ASSERT_TRUE(absl::LoadTimeZone("America/New_York", &ny));
  const WindowBounds w = WindowAt(Year(), ny, At("2028-07-04T12:00:00Z"));
  EXPECT_EQ(w.start, At("2028-01-01T00:00:00-05:00"));
  EXPECT_EQ(w.end - w.start, absl::Hours(24 * 366));  // the lost hour comes back in November
}

TEST_F(YearWindowTest, ConsecutiveYearsHaveConsecutiveIdsAndTouch) {
  absl::TimeZone paris;
  ASSERT_TRUE(absl::LoadTimeZone("Europe/Paris", &paris));
  WindowBounds w = WindowAt(Year(), paris, At("1969-06-01T00:00:00Z"));
  EXPECT_EQ(w.id, -1);
  for (int i = 0; i < 70; ++i) {
    const WindowBounds next = WindowAt(Year(), paris, w.end);
    EXPECT_EQ(next.id, w.id + 1);
    EXPECT_EQ(next.start, w.end);
    const absl::CivilSecond start = absl::ToCivilSecond(next.start, paris);
    EXPECT_EQ(start, absl::CivilSecond(1970 + i, 1, 1, 0, 0, 0));
    w = next;
  }
}

// ---- SecondsUntil ----

TEST(SecondsUntilTest, FractionOfASecondLeftRoundsUpToOne) {
  const absl::Time end = absl::FromUnixSeconds(1000);
  EXPECT_EQ(SecondsUntil(end, end - absl::Milliseconds(200)), 1);
}

TEST(SecondsUntilTest, FractionAboveWholeSecondsRoundsUp) {
  const absl::Time end = absl::FromUnixSeconds(1000);
  EXPECT_EQ(SecondsUntil(end, end - absl::Milliseconds(41'001)), 42);
  EXPECT_EQ(SecondsUntil(end, end - absl::Seconds(41) - absl::Nanoseconds(1)), 42);
}

TEST(SecondsUntilTest, WholeSecondsAreExact) {
  const absl::Time end = absl::FromUnixSeconds(1000);
  EXPECT_EQ(SecondsUntil(end, end - absl::Seconds(42)), 42);
}

TEST(SecondsUntilTest, EndAtOrBeforeNowIsZero) {
  const absl::Time end = absl::FromUnixSeconds(1000);
  EXPECT_EQ(SecondsUntil(end, end), 0);
  EXPECT_EQ(SecondsUntil(end, end + absl::Milliseconds(1)), 0);
  EXPECT_EQ(SecondsUntil(end, end + absl::Hours(5)), 0);
}

TEST(SecondsUntilTest, WorksBeforeTheEpoch) {
  EXPECT_EQ(SecondsUntil(absl::UnixEpoch(), absl::FromUnixMillis(-1500)), 2);
  EXPECT_EQ(SecondsUntil(absl::FromUnixSeconds(-1), absl::FromUnixMillis(-3200)), 3);
}

TEST(SecondsUntilTest, EndBetweenWholeSecondsRoundsUp) {
  EXPECT_EQ(SecondsUntil(absl::FromUnixMillis(1500), absl::FromUnixMillis(200)), 2);
  EXPECT_EQ(SecondsUntil(absl::FromUnixMillis(1500), absl::FromUnixMillis(500)), 1);
}

TEST(SecondsUntilTest, InfiniteEndIsTheLargestCount) {
  EXPECT_EQ(SecondsUntil(absl::InfiniteFuture(), absl::FromUnixSeconds(5)),
            std::numeric_limits<int64_t>::max());
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

TEST(WindowCacheTest, AgreesWithWindowAtAcrossBoundariesAndBackwardsTime) {
  absl::TimeZone berlin;
  ASSERT_TRUE(absl::LoadTimeZone("Europe/Berlin", &berlin));
  const config::WindowSpec day{.kind = config::WindowSpec::Kind::kDay, .text = "day"};
  WindowCache cache;
  // 2026-10-24T12:00Z, then hour by hour over the 25-hour day, and a step back in time.
  absl::Time t = absl::FromUnixSeconds(1792843200);
  for (int h = 0; h < 60; ++h) {
    const absl::Time at = t + absl::Hours(h) - (h == 30 ? absl::Hours(40) : absl::ZeroDuration());
    EXPECT_EQ(cache.Get(day, berlin, at), WindowAt(day, berlin, at)) << "hour " << h;
  }
}

TEST(WindowCacheTest, AgreesWithWindowAtForWeeksAndYearsAcrossNewYear) {
  absl::TimeZone paris;
  ASSERT_TRUE(absl::LoadTimeZone("Europe/Paris", &paris));
  for (const config::WindowSpec& spec : {Week(), Year()}) {
    WindowCache cache;
    // Six-hourly from 2026-12-20 to 2027-01-15 local: across New Year and a week boundary.
    const absl::Time t = absl::FromCivil(absl::CivilSecond(2026, 12, 20, 0, 0, 0), paris);
    for (int step = 0; step < 4 * 26; ++step) {
      const absl::Time at = t + absl::Hours(6 * step);
      EXPECT_EQ(cache.Get(spec, paris, at), WindowAt(spec, paris, at)) << spec.text << " " << step;
    }
  }
}

}  // namespace
}  // namespace sluice
