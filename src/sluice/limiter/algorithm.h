// The arithmetic of sliding and gcra limits (docs/semantics.md, Limit algorithms), shared by the
// stores, which decide with it, and the Limiter, which answers with it, so that both read the same
// state the same way. Integers only: every value stays far below 2^53, so a script computing in
// doubles (the Redis store's) gets the same results.
//
// gcra: a rate of `quota` units per `window`, at most `burst` at once. The state is the
// theoretical arrival time (TAT): each admitted unit moves it emission_us = ceil(window / quota)
// microseconds later, from now or from where it was if later. A store reports it as the debt,
// how far the TAT is ahead of now (0: the bucket is full); `need` units fit iff
// need <= burst and debt + need * emission_us <= burst * emission_us.
//
// sliding: the current fixed window's count `cur` plus the previous window's count `prev`
// weighted by the share of the previous window still inside the sliding window that ends now
// (in millionths, rounded up): need more units fit iff
// cur + ceil(prev * weight / 10^6) + need <= quota.
#ifndef SLUICE_LIMITER_ALGORITHM_H_
#define SLUICE_LIMITER_ALGORITHM_H_

#include <algorithm>
#include <cstdint>
#include <optional>

#include "absl/time/time.h"
#include "sluice/limiter/plan.h"
#include "sluice/limiter/window.h"

namespace sluice {
inline namespace limiter {

inline constexpr int64_t kPpm = 1'000'000;

// What the arithmetic reads of a limit (a Limit converts to it), kept by callers that may answer
// after the Limit is gone (PlanQuotas).
struct AlgorithmTerms {
  config::Algorithm algorithm = config::Algorithm::kFixed;
  int64_t quota = 0;
  int64_t burst = 0;
  int64_t emission_us = 0;

  AlgorithmTerms() = default;
  // Implicit: every function below takes a Limit as well.
  AlgorithmTerms(const Limit& limit)  // NOLINT(google-explicit-constructor)
      : algorithm(limit.algorithm),
        quota(limit.quota),
        burst(limit.burst),
        emission_us(limit.emission_us) {}
  friend bool operator==(const AlgorithmTerms&, const AlgorithmTerms&) = default;
};

[[nodiscard]] inline bool IsGcra(const Limit& limit) {
  return limit.algorithm == config::Algorithm::kGcra;
}
[[nodiscard]] inline bool IsSliding(const Limit& limit) {
  return limit.algorithm == config::Algorithm::kSliding;
}
[[nodiscard]] inline bool IsGcra(const AlgorithmTerms& limit) {
  return limit.algorithm == config::Algorithm::kGcra;
}
[[nodiscard]] inline bool IsSliding(const AlgorithmTerms& limit) {
  return limit.algorithm == config::Algorithm::kSliding;
}

// Any limit ------------------------------------------------------------------------------------

// The most units a limit admits at once: a gcra limit's burst, any other's quota.
[[nodiscard]] inline int64_t LimitCapacity(const AlgorithmTerms& limit) {
  return IsGcra(limit) ? limit.burst : limit.quota;
}

// What a store's `used` (and, sliding, `prev`) of a limit in window `w` stand for at `now`, in
// units (what answers call used): a counter as it is, a gcra debt as the units outstanding, a
// sliding pair as the weighted estimate. REQUIRES: a usable value.
[[nodiscard]] int64_t LimitUnits(const AlgorithmTerms& limit, const WindowBounds& w, absl::Time now,
                                 int64_t used, int64_t prev);

// Seconds (rounded up) until a sliding or gcra limit's state no longer counts: a gcra bucket is
// full again; a sliding limit's current window stops counting at the end of the next one, its
// previous window at the end of this one. REQUIRES: not fixed, a usable value.
[[nodiscard]] int64_t AlgorithmResetAfter(const AlgorithmTerms& limit, const WindowBounds& w,
                                          absl::Time now, int64_t used, int64_t prev);

// A limit's state as answers show it: units used, units remaining (after what is held) and
// seconds until it resets. `used` and `prev` as a store reports them (an unusable value shows
// as exhausted).
struct UnitsView {
  int64_t used = 0;
  int64_t remaining = 0;
  int64_t reset_after = 0;
};
[[nodiscard]] UnitsView ViewOf(const Limit& limit, const WindowBounds& w, absl::Time now,
                               int64_t used, int64_t prev, int64_t held);

// What a charge of `charged` units took a sliding or gcra limit beyond its capacity, in units:
// min(charged, units after it - capacity), at least 0. `used`, `prev` as a store reports them
// after the charge (usable).
[[nodiscard]] int64_t AlgorithmOvershoot(const AlgorithmTerms& limit, const WindowBounds& w,
                                         absl::Time now, int64_t used, int64_t prev,
                                         int64_t charged);

// gcra ----------------------------------------------------------------------------------------

// The largest debt a gcra limit may carry: a quota's worth of units (what charges past the burst,
// e.g. a report or a settle, stop at).
[[nodiscard]] inline int64_t GcraMaxDebt(const AlgorithmTerms& limit) {
  return limit.quota * limit.emission_us;
}

// Whether `need` units fit with `debt` microseconds of debt.
[[nodiscard]] inline bool GcraFits(const AlgorithmTerms& limit, int64_t debt, int64_t need) {
  return need <= limit.burst && debt + need * limit.emission_us <= limit.burst * limit.emission_us;
}

// The debt after charging `cost` units: each moves the TAT emission_us later, up to
// GcraMaxDebt. REQUIRES: 0 <= debt <= GcraMaxDebt, cost <= kMaxCost.
[[nodiscard]] inline int64_t GcraCharge(const AlgorithmTerms& limit, int64_t debt, int64_t cost) {
  // cost * emission_us <= 10^6 * (one window of at most 31 days in microseconds) < 2^63.
  return std::min(debt + cost * limit.emission_us, std::max(debt, GcraMaxDebt(limit)));
}

// Units outstanding: ceil(debt / emission_us).
[[nodiscard]] inline int64_t GcraUnits(const AlgorithmTerms& limit, int64_t debt) {
  return debt <= 0 ? 0 : (debt + limit.emission_us - 1) / limit.emission_us;
}

// Microseconds until `need` units fit (0: they fit now); -1 when they never can (need > burst).
[[nodiscard]] int64_t GcraWaitMicros(const AlgorithmTerms& limit, int64_t debt, int64_t need);

// sliding -------------------------------------------------------------------------------------

// The previous window's weight at `now` in the window `w` (of the limit's length), in millionths,
// rounded up: ceil((w.end - now) * 10^6 / length), in 1..10^6 for `now` inside `w`.
[[nodiscard]] int64_t SlidingWeight(const WindowBounds& w, absl::Time now);

// ceil(prev * weight / 10^6) for prev <= kMaxSlidingCount, weight <= 10^6.
[[nodiscard]] inline int64_t SlidingShare(int64_t prev, int64_t weight) {
  return (prev * weight + kPpm - 1) / kPpm;
}

// A sliding counter's stored value: both windows' counts, and its window id (the current one).
[[nodiscard]] inline int64_t SlidingPack(int64_t prev, int64_t cur) {
  return prev * config::kSlidingRadix + cur;
}
[[nodiscard]] inline bool SlidingValid(int64_t packed) {
  return packed >= 0 && packed / config::kSlidingRadix <= config::kMaxSlidingCount &&
         packed % config::kSlidingRadix <= config::kMaxSlidingCount;
}

// The instant from which a request needing `need` more units than `cur` (and the holds) fits a
// sliding limit, if nothing else is admitted meanwhile, or nullopt if it never does (need >
// quota). `w` is the current window.
[[nodiscard]] std::optional<absl::Time> SlidingFitsAt(const AlgorithmTerms& limit,
                                                      const WindowBounds& w, int64_t prev,
                                                      int64_t cur, int64_t need);

}  // namespace limiter
}  // namespace sluice

#endif  // SLUICE_LIMITER_ALGORITHM_H_
