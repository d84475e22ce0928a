// The words of sluice.yaml that the core speaks too: a limit's window, what a decision answers when
// the store fails, and the parsers of durations and windows (docs/configuration.md).
//
// Apart from the schema (schema.h) and its loader (config.h), so that the limiter can use them
// without either.
#ifndef SLUICE_CONFIG_VOCABULARY_H_
#define SLUICE_CONFIG_VOCABULARY_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace sluice::config {

// What a decision answers when the store cannot be reached in time.
enum class OnStoreError { kAllow, kDeny };

// A limit's window as written: a fixed duration aligned to the Unix epoch, a calendar period in
// the plan's time zone, `concurrent`: no window at all, the limit counts requests in flight
// (reservations and leases hold a slot each until they end), or `credit`: one window that never
// ends, whose quota is what was granted (docs/semantics.md, Concurrency and Prepaid credits).
struct WindowSpec {
  enum class Kind { kFixed, kDay, kWeek, kMonth, kYear, kConcurrent, kCredit };
  Kind kind = Kind::kFixed;
  absl::Duration length = absl::ZeroDuration();  // kFixed only: a whole number of seconds >= 1
  // As written: "1m", "day", "week", "month", "year", "concurrent", "credit".
  std::string text;

  friend bool operator==(const WindowSpec&, const WindowSpec&) = default;
};

// How a limit decides (docs/semantics.md, Limit algorithms): `fixed` windows (the default);
// `sliding`, the two-window weighted counter; `gcra`, a rate of quota per window with a burst.
enum class Algorithm { kFixed, kSliding, kGcra };

// "fixed", "sliding" or "gcra".
[[nodiscard]] std::string_view AlgorithmName(Algorithm algorithm);

// The largest quota of a sliding limit: its current and previous windows' counts are kept in one
// counter (count of the previous window * kSlidingRadix + count of the current one), which must
// stay a valid counter (at most 10^15).
inline constexpr int64_t kSlidingRadix = 100'000'000;
inline constexpr int64_t kMaxSlidingCount = 9'999'999;

// The longest fixed window: as long as the longest month. No window outlives a leap year (a
// `year`), so every counter expires within 366 days and a grace period, which the memory store's
// snapshot relies on (it drops records that claim to live longer) and which keeps every expiry
// far inside its 32-bit seconds.
inline constexpr absl::Duration kMaxFixedWindow = absl::Hours(24 * 31);

// How long the usage of a `credit` window is kept after its last charge. A credit window never
// ends, but its state must expire like any other: each charge pushes its expiry to the end of the
// UTC day this many days ahead (limiter/window.h), so it, too, never lives more than 366 days
// beyond the last time it was written.
inline constexpr int kCreditIdleDays = 365;

// Parses a duration written as an integer followed by a unit: ms, s, m, h ("20ms", "1s", "5m").
[[nodiscard]] absl::StatusOr<absl::Duration> ParseDuration(std::string_view text);

// Parses a window: "Ns", "Nm", "Nh" (N >= 1), "day", "week" (an ISO week, from Monday), "month",
// "year", "concurrent" or "credit".
[[nodiscard]] absl::StatusOr<WindowSpec> ParseWindow(std::string_view text);

}  // namespace sluice::config

#endif  // SLUICE_CONFIG_VOCABULARY_H_
