// When to try a failed delivery again: exponential backoff with jitter (so that many alerts that
// failed together do not retry together), and the receiver's Retry-After header.
//
// Everything here is a pure function of its arguments; randomness comes in as an absl::BitGenRef,
// so tests pass a seeded engine (or absl::MockingBitGen) and production a per-thread absl::BitGen.
#ifndef SLUICE_ALERTS_RETRY_H_
#define SLUICE_ALERTS_RETRY_H_

#include <optional>
#include <string_view>

#include "absl/random/bit_gen_ref.h"
#include "absl/time/time.h"
#include "sluice/config/config.h"

namespace sluice::alerts {

// The exponential ceiling for retry number `attempt` (1 = the wait after the first failure):
// min(retry.max_delay, retry.first_delay * 2^(attempt - 1)). Never overflows, whatever `attempt`.
// REQUIRES: attempt >= 1 (smaller counts as 1).
[[nodiscard]] absl::Duration BackoffCeiling(const config::RetryConfig& retry, int attempt);

// "Full jitter": uniform in [0, BackoffCeiling(retry, attempt)], truncated to milliseconds.
// Stateless: the dispatcher needs only the attempt number. The default choice.
[[nodiscard]] absl::Duration FullJitterDelay(const config::RetryConfig& retry, int attempt,
                                             absl::BitGenRef gen);

// "Decorrelated jitter": uniform in [first_delay, 3 * previous], capped at max_delay, where
// `previous` is the delay this function returned last time for the same delivery (pass
// ZeroDuration() the first time, which yields first_delay). Never below first_delay. Truncated
// to milliseconds.
[[nodiscard]] absl::Duration DecorrelatedJitterDelay(const config::RetryConfig& retry,
                                                     absl::Duration previous, absl::BitGenRef gen);

// The wait before the next attempt: the jittered backoff (at most max_delay), but at least what the
// receiver asked for in Retry-After (already bounded by ParseRetryAfter and the sink's
// max_retry_after), even when that is longer than max_delay.
[[nodiscard]] absl::Duration NextRetryDelay(const config::RetryConfig& retry, int attempt,
                                            std::optional<absl::Duration> retry_after,
                                            absl::BitGenRef gen);

// Parses an HTTP Retry-After value (RFC 9110 §10.2.3): delta-seconds ("120") or an HTTP-date in
// any of the three forms a recipient must accept (IMF-fixdate "Sun, 06 Nov 1994 08:49:37 GMT",
// RFC 850 "Sunday, 06-Nov-94 08:49:37 GMT", asctime "Sun Nov  6 08:49:37 1994"), relative to
// `now`. Surrounding spaces and tabs are ignored. The result is clamped to [0, `max`]: a date in
// the past is 0, a receiver asking for a week gets `max`. Anything else (empty, negative,
// fractional, trailing garbage) is nullopt.
[[nodiscard]] std::optional<absl::Duration> ParseRetryAfter(std::string_view value, absl::Time now,
                                                            absl::Duration max);

}  // namespace sluice::alerts

#endif  // SLUICE_ALERTS_RETRY_H_
