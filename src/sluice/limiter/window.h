// Window math: which window an instant falls in, and when that window starts and ends.
//
// Fixed windows ("Ns", "Nm", "Nh") are aligned to the Unix epoch: window id = floor(unix / N).
// Calendar windows ("day", "week", "month", "year") start at local midnight in the plan's time
// zone: a day at midnight, an ISO week on Monday, a month on its first day, a year on January 1. A
// DST day is 23 or 25 hours long (a week with one 167 or 169 hours), a month is a real month, a
// year has 365 or 366 days. Ids count windows since the one containing 1970-01-01 local (for weeks,
// since Monday 1969-12-29), so they increase by one from each window to the next.
//
// A credit window ("credit") never ends: it is always window 0, starting at the Unix epoch, and
// its `end` is only where its state may expire when unused — the end of the UTC day
// config::kCreditIdleDays after the instant asked about, so it moves forward with time and every
// charge pushes the state's expiry along (docs/semantics.md, Prepaid credits).
#ifndef SLUICE_LIMITER_WINDOW_H_
#define SLUICE_LIMITER_WINDOW_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "sluice/config/vocabulary.h"

namespace sluice {
inline namespace limiter {

struct WindowBounds {
  int64_t id = 0;    // distinct and increasing for consecutive windows of one spec and zone
  absl::Time start;  // inclusive
  absl::Time end;    // exclusive; > start, except for a concurrent limit: start == end (no window)

  friend bool operator==(const WindowBounds&, const WindowBounds&) = default;
};

// The window of `spec` that contains `t`, in time zone `tz` (ignored for fixed windows).
// REQUIRES: spec passed config validation (fixed length is a whole number of seconds >= 1).
[[nodiscard]] WindowBounds WindowAt(const config::WindowSpec& spec, const absl::TimeZone& tz,
                                    absl::Time t);

// The window's canonical name, which (with the limit name) identifies a limit's counters in every
// store: the fixed length in seconds ("60s" for "1m" and "60s" alike), or for a calendar window
// "day@<zone>", "week@<zone>", "month@<zone>" or "year@<zone>" with the plan's time zone (a `day`
// in Paris and a `day` in Tokyo have other bounds: they are other windows), or "credit". It never
// contains ':' (a ':' of a zone name, as in absl's "Fixed/UTC+05:30:00", is written '.').
[[nodiscard]] std::string WindowKey(const config::WindowSpec& spec, const absl::TimeZone& tz);

// Whole seconds from `now` until `end`, rounded up; 0 if `end` is not after `now`.
[[nodiscard]] int64_t SecondsUntil(absl::Time end, absl::Time now);

// What answers report as a limit's reset_after: SecondsUntil(end, now), or 0 for a credit window,
// which never resets (its end is only where its unused state expires).
[[nodiscard]] inline int64_t SecondsUntilReset(const config::WindowSpec& spec, absl::Time end,
                                               absl::Time now) {
  return spec.kind == config::WindowSpec::Kind::kCredit ? 0 : SecondsUntil(end, now);
}

// Remembers the last window computed for one (spec, zone): nearly every decision falls in the same
// window as the one before, so the calendar arithmetic runs once per window rather than once per
// decision. Thread-safe and lock-free (a sequence lock: readers retry or compute when a writer is
// mid-update). The caller must always pass the same spec and zone to one cache.
class WindowCache {
 public:
  [[nodiscard]] WindowBounds Get(const config::WindowSpec& spec, const absl::TimeZone& tz,
                                 absl::Time t);

 private:
  std::atomic<uint64_t> seq_{0};  // odd while being written
  std::atomic<int64_t> id_{0};
  // Unix seconds (bounds are whole seconds: comparing and returning them needs no division).
  std::atomic<int64_t> start_s_{0};
  std::atomic<int64_t> end_s_{0};
};

}  // namespace limiter
}  // namespace sluice

#endif  // SLUICE_LIMITER_WINDOW_H_
