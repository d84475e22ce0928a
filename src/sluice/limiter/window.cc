#include "sluice/limiter/window.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/time/civil_time.h"

namespace sluice {
inline namespace limiter {
namespace {

// Integer division rounding toward -infinity (C++ `/` truncates toward zero). REQUIRES: d > 0.
int64_t FloorDiv(int64_t n, int64_t d) {
  int64_t q = n / d;
  if (n % d != 0 && n < 0) --q;
  return q;
}

// The first instant whose local civil time is at or after `c`. Usually local `c` itself; when DST
// skips `c` (a midnight that never happens, as in America/Santiago on 2022-09-11), it is the
// transition that skips it; when `c` happens twice (a repeated midnight), the first occurrence, so
// that the window covers the whole local day.
absl::Time FirstInstantOf(absl::CivilSecond c, const absl::TimeZone& tz) {
  const absl::TimeZone::TimeInfo info = tz.At(c);
  return info.kind == absl::TimeZone::TimeInfo::SKIPPED ? info.trans : info.pre;
}

WindowBounds FixedWindowAt(absl::Duration length, absl::Time t) {
  const int64_t length_s = absl::ToInt64Seconds(length);
  // ToUnixSeconds floors, so an instant 0.5 s before the epoch is second -1, window -1 for L = 1.
  const int64_t id = FloorDiv(absl::ToUnixSeconds(t), length_s);
  const absl::Time start = absl::FromUnixSeconds(id * length_s);
  return {.id = id, .start = start, .end = start + absl::Seconds(length_s)};
}

WindowBounds DayWindowAt(const absl::TimeZone& tz, absl::Time t) {
  const absl::CivilDay day = absl::ToCivilDay(t, tz);
  return {.id = day - absl::CivilDay(1970, 1, 1),
          .start = FirstInstantOf(absl::CivilSecond(day), tz),
          .end = FirstInstantOf(absl::CivilSecond(day + 1), tz)};
}

WindowBounds MonthWindowAt(const absl::TimeZone& tz, absl::Time t) {
  const absl::CivilMonth month = absl::ToCivilMonth(t, tz);
  return {.id = (month.year() - 1970) * 12 + (month.month() - 1),
          .start = FirstInstantOf(absl::CivilSecond(month), tz),
          .end = FirstInstantOf(absl::CivilSecond(month + 1), tz)};
}

// ISO weeks start on Monday. The week containing 1970-01-01 (a Thursday) starts on 1969-12-29.
WindowBounds WeekWindowAt(const absl::TimeZone& tz, absl::Time t) {
  const absl::CivilDay day = absl::ToCivilDay(t, tz);
  const absl::CivilDay first_monday(1969, 12, 29);
  const int64_t id = FloorDiv(day - first_monday, 7);
  const absl::CivilDay monday = first_monday + id * 7;
  return {.id = id,
          .start = FirstInstantOf(absl::CivilSecond(monday), tz),
          .end = FirstInstantOf(absl::CivilSecond(monday + 7), tz)};
}

WindowBounds YearWindowAt(const absl::TimeZone& tz, absl::Time t) {
  const absl::CivilYear year = absl::ToCivilYear(t, tz);
  return {.id = year.year() - 1970,
          .start = FirstInstantOf(absl::CivilSecond(year), tz),
          .end = FirstInstantOf(absl::CivilSecond(year + 1), tz)};
}

// A credit window never ends: one window (id 0) from the epoch, whose end is only where its state
// expires when unused: the end of the UTC day kCreditIdleDays ahead of `t`, so every charge pushes
// it forward and it is never more than 366 days after `t`.
WindowBounds CreditWindowAt(absl::Time t) {
  constexpr int64_t kDay = 24 * 60 * 60;
  const int64_t next_midnight = (FloorDiv(absl::ToUnixSeconds(t), kDay) + 1) * kDay;
  return {.id = 0,
          .start = absl::UnixEpoch(),
          .end = absl::FromUnixSeconds(next_midnight + config::kCreditIdleDays * kDay)};
}

// The prefix of a calendar window's WindowKey.
const char* CalendarName(config::WindowSpec::Kind kind) {
  switch (kind) {
    case config::WindowSpec::Kind::kDay:
      return "day";
    case config::WindowSpec::Kind::kWeek:
      return "week";
    case config::WindowSpec::Kind::kMonth:
      return "month";
    case config::WindowSpec::Kind::kYear:
      return "year";
    case config::WindowSpec::Kind::kConcurrent:
      return "concurrent";
    case config::WindowSpec::Kind::kFixed:
    case config::WindowSpec::Kind::kCredit:
      break;
  }
  return "fixed";  // not reached: fixed windows are named by their length
}

}  // namespace

WindowBounds WindowAt(const config::WindowSpec& spec, const absl::TimeZone& tz, absl::Time t) {
  switch (spec.kind) {
    case config::WindowSpec::Kind::kDay:
      return DayWindowAt(tz, t);
    case config::WindowSpec::Kind::kWeek:
      return WeekWindowAt(tz, t);
    case config::WindowSpec::Kind::kMonth:
      return MonthWindowAt(tz, t);
    case config::WindowSpec::Kind::kYear:
      return YearWindowAt(tz, t);
    case config::WindowSpec::Kind::kConcurrent:
      // No window: what is held now. An empty span at `t` (reset_after 0), so nothing of it
      // outlives the request (stores write no counter for a concurrent limit).
      return {.id = 0, .start = t, .end = t};
    case config::WindowSpec::Kind::kCredit:
      return CreditWindowAt(t);
    case config::WindowSpec::Kind::kFixed:
      break;
  }
  return FixedWindowAt(spec.length, t);
}

std::string WindowKey(const config::WindowSpec& spec, const absl::TimeZone& tz) {
  if (spec.kind == config::WindowSpec::Kind::kFixed) {
    return absl::StrCat(absl::ToInt64Seconds(spec.length), "s");
  }
  if (spec.kind == config::WindowSpec::Kind::kConcurrent) return "concurrent";
  if (spec.kind == config::WindowSpec::Kind::kCredit) return "credit";  // no zone: no calendar
  std::string key = absl::StrCat(CalendarName(spec.kind), "@", tz.name());
  std::replace(key.begin(), key.end(), ':', '.');
  return key;
}

int64_t SecondsUntil(absl::Time end, absl::Time now) {
  if (end <= now) return 0;
  // Window ends are whole seconds: then ceil(end - now) is end - floor(now), in integers (this
  // runs for every limit of every decision; Duration arithmetic is out-of-line in the library).
  const int64_t end_s = absl::ToUnixSeconds(end);
  if (end != absl::InfiniteFuture() && absl::FromUnixSeconds(end_s) == end) {
    return end_s - absl::ToUnixSeconds(now);  // ToUnixSeconds rounds toward the infinite past
  }
  const absl::Duration left = end - now;
  if (left == absl::InfiniteDuration()) return std::numeric_limits<int64_t>::max();
  // Truncation is toward zero and `left` is positive, so add one for any fractional remainder.
  int64_t seconds = absl::ToInt64Seconds(left);
  if (left > absl::Seconds(seconds)) ++seconds;
  return seconds;
}

WindowBounds WindowCache::Get(const config::WindowSpec& spec, const absl::TimeZone& tz,
                              absl::Time t) {
  // A credit window's end moves with `t` (cheap to compute): a cached one would stop moving.
  if (spec.kind == config::WindowSpec::Kind::kCredit) return WindowAt(spec, tz, t);
  const uint64_t before = seq_.load(std::memory_order_acquire);
  if ((before & 1) == 0) {
    // Acquire loads keep the second read of seq_ after them (no fence: TSan cannot model one).
    const int64_t id = id_.load(std::memory_order_acquire);
    const absl::Time start = absl::FromUnixSeconds(start_s_.load(std::memory_order_acquire));
    const absl::Time end = absl::FromUnixSeconds(end_s_.load(std::memory_order_acquire));
    if (seq_.load(std::memory_order_relaxed) == before && start <= t && t < end) {
      return {.id = id, .start = start, .end = end};
    }
  }
  const WindowBounds w = WindowAt(spec, tz, t);
  // Publish it unless another thread is already writing (then this one simply does not cache).
  // Window bounds are whole seconds; one that is not (none should be) is never cached.
  const int64_t start_s = absl::ToUnixSeconds(w.start);
  const int64_t end_s = absl::ToUnixSeconds(w.end);
  if (absl::FromUnixSeconds(start_s) != w.start || absl::FromUnixSeconds(end_s) != w.end) {
    return w;
  }
  uint64_t expected = before;
  if ((before & 1) == 0 &&
      seq_.compare_exchange_strong(expected, before + 1, std::memory_order_acquire)) {
    // Release stores: a reader that sees any of these values also sees seq_ odd or newer.
    id_.store(w.id, std::memory_order_release);
    start_s_.store(start_s, std::memory_order_release);
    end_s_.store(end_s, std::memory_order_release);
    seq_.store(before + 2, std::memory_order_release);
  }
  return w;
}

}  // namespace limiter
}  // namespace sluice
