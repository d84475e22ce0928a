#include "sluice/alerts/retry.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/random/distributions.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/time/time.h"
#include "sluice/common/strings.h"

namespace sluice::alerts {
namespace {

// Milliseconds are the resolution of every delay here; uniform integers avoid floating point.
absl::Duration UniformMillis(absl::BitGenRef gen, int64_t lo_ms, int64_t hi_ms) {
  if (hi_ms <= lo_ms) return absl::Milliseconds(lo_ms);
  return absl::Milliseconds(absl::Uniform(absl::IntervalClosedClosed, gen, lo_ms, hi_ms));
}

absl::Duration Clamp(absl::Duration d, absl::Duration lo, absl::Duration hi) {
  return std::max(lo, std::min(d, hi));
}

// Longer than any delta-seconds a sane receiver sends, short enough that it cannot overflow.
constexpr size_t kMaxDeltaDigits = 12;

}  // namespace

absl::Duration BackoffCeiling(const config::RetryConfig& retry, int attempt) {
  absl::Duration delay = retry.first_delay;
  // Doubling stops at max_delay, so this loop runs at most ~60 times even for a huge attempt.
  for (int i = 1; i < attempt && delay < retry.max_delay; ++i) delay *= 2;
  return std::min(delay, retry.max_delay);
}

absl::Duration FullJitterDelay(const config::RetryConfig& retry, int attempt, absl::BitGenRef gen) {
  const int64_t ceiling_ms = absl::ToInt64Milliseconds(BackoffCeiling(retry, attempt));
  return UniformMillis(gen, 0, std::max<int64_t>(ceiling_ms, 0));
}

absl::Duration DecorrelatedJitterDelay(const config::RetryConfig& retry, absl::Duration previous,
                                       absl::BitGenRef gen) {
  const absl::Duration lo = std::min(retry.first_delay, retry.max_delay);
  const absl::Duration hi = Clamp(previous * 3, lo, retry.max_delay);
  return UniformMillis(gen, absl::ToInt64Milliseconds(lo), absl::ToInt64Milliseconds(hi));
}

absl::Duration NextRetryDelay(const config::RetryConfig& retry, int attempt,
                              std::optional<absl::Duration> retry_after, absl::BitGenRef gen) {
  // The receiver knows best when it can take the event again: its Retry-After wins even over
  // max_delay (retrying sooner would only earn another 429). It is already bounded by the sink.
  const absl::Duration delay = std::min(FullJitterDelay(retry, attempt, gen), retry.max_delay);
  return retry_after.has_value() ? std::max(delay, *retry_after) : delay;
}

std::optional<absl::Duration> ParseRetryAfter(std::string_view value, absl::Time now,
                                              absl::Duration max) {
  const absl::string_view text = absl::StripAsciiWhitespace(ToAbsl(value));
  if (text.empty()) return std::nullopt;

  if (std::all_of(text.begin(), text.end(), absl::ascii_isdigit)) {
    if (text.size() > kMaxDeltaDigits) return max;
    int64_t seconds = 0;
    if (!absl::SimpleAtoi(text, &seconds)) return std::nullopt;
    return Clamp(absl::Seconds(seconds), absl::ZeroDuration(), max);
  }

  // RFC 9110 §5.6.7: IMF-fixdate, then the two obsolete forms. The day name is checked only for
  // shape (absl does not cross-check it against the date, and neither do browsers).
  static constexpr const char* kFormats[] = {
      "%a, %d %b %Y %H:%M:%S GMT",  // IMF-fixdate
      "%A, %d-%b-%y %H:%M:%S GMT",  // RFC 850
      "%a %b %e %H:%M:%S %Y",       // asctime
  };
  const std::string date(text);
  for (const char* format : kFormats) {
    absl::Time when;
    std::string error;
    if (absl::ParseTime(format, date, absl::UTCTimeZone(), &when, &error)) {
      return Clamp(when - now, absl::ZeroDuration(), max);
    }
  }
  return std::nullopt;
}

}  // namespace sluice::alerts
