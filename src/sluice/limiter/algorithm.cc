#include "sluice/limiter/algorithm.h"

#include "sluice/limiter/store.h"

namespace sluice {
inline namespace limiter {

int64_t LimitUnits(const AlgorithmTerms& limit, const WindowBounds& w, absl::Time now, int64_t used,
                   int64_t prev) {
  if (IsGcra(limit)) return GcraUnits(limit, used);
  if (IsSliding(limit)) return used + SlidingShare(prev, SlidingWeight(w, now));
  return used;
}

int64_t AlgorithmResetAfter(const AlgorithmTerms& limit, const WindowBounds& w, absl::Time now,
                            int64_t used, int64_t prev) {
  if (IsGcra(limit)) return SecondsUntil(now + absl::Microseconds(used), now);
  if (used > 0) return SecondsUntil(w.end + (w.end - w.start), now);
  return prev > 0 ? SecondsUntil(w.end, now) : 0;
}

UnitsView ViewOf(const Limit& limit, const WindowBounds& w, absl::Time now, int64_t used,
                 int64_t prev, int64_t held) {
  UnitsView v;
  const int64_t capacity = LimitCapacity(limit);
  held = std::clamp<int64_t>(held, 0, kMaxUsed);
  if (limit.algorithm == config::Algorithm::kFixed) {
    v.used = UsableCounter(used) ? used : capacity;
    v.reset_after = SecondsUntilReset(limit.window, w.end, now);
  } else if (!UsableCounter(used)) {
    v.used = capacity;
  } else {
    v.used = LimitUnits(limit, w, now, used, prev);
    v.reset_after = AlgorithmResetAfter(limit, w, now, used, prev);
  }
  v.remaining = v.used >= capacity - held ? 0 : capacity - held - v.used;
  return v;
}

int64_t AlgorithmOvershoot(const AlgorithmTerms& limit, const WindowBounds& w, absl::Time now,
                           int64_t used, int64_t prev, int64_t charged) {
  const int64_t beyond = LimitUnits(limit, w, now, used, prev) - LimitCapacity(limit);
  return std::clamp<int64_t>(beyond, 0, charged);
}

int64_t GcraWaitMicros(const AlgorithmTerms& limit, int64_t debt, int64_t need) {
  if (need > limit.burst) return -1;
  return std::max<int64_t>(debt + need * limit.emission_us - limit.burst * limit.emission_us, 0);
}

int64_t SlidingWeight(const WindowBounds& w, absl::Time now) {
  const int64_t end_us = absl::ToUnixMicros(w.end);
  const int64_t length_us = end_us - absl::ToUnixMicros(w.start);
  const int64_t left_us = std::clamp<int64_t>(end_us - absl::ToUnixMicros(now), 0, length_us);
  if (length_us <= 0) return 0;
  // left_us * 10^6 <= (31 days in microseconds) * 10^6 < 2^63.
  return (left_us * kPpm + length_us - 1) / length_us;
}

namespace {

// The first instant of the window ending at `end_us` (of length `length_us`) at which `prev`
// weighs at most `room` units: `end_us` itself when it always weighs more.
int64_t FirstFitMicros(int64_t end_us, int64_t length_us, int64_t prev, int64_t room) {
  if (prev <= 0) return end_us - length_us;
  // ceil(prev * weight / 10^6) <= room  <=>  weight <= floor(room * 10^6 / prev).
  const int64_t max_weight = room * kPpm / prev;
  if (max_weight >= kPpm) return end_us - length_us;
  // weight(t) = ceil((end - t) * 10^6 / length) <= max_weight  <=>
  // end - t <= floor(max_weight * length / 10^6).
  return end_us - max_weight * length_us / kPpm;
}

}  // namespace

std::optional<absl::Time> SlidingFitsAt(const AlgorithmTerms& limit, const WindowBounds& w,
                                        int64_t prev, int64_t cur, int64_t need) {
  const int64_t end_us = absl::ToUnixMicros(w.end);
  const int64_t length_us = end_us - absl::ToUnixMicros(w.start);
  if (need > limit.quota || length_us <= 0) return std::nullopt;
  if (const int64_t room = limit.quota - cur - need; room >= 0) {
    return absl::FromUnixMicros(FirstFitMicros(end_us, length_us, prev, room));
  }
  // Not in this window: in the next one, where this window's count is the previous one.
  return absl::FromUnixMicros(
      FirstFitMicros(end_us + length_us, length_us, cur, limit.quota - need));
}

}  // namespace limiter
}  // namespace sluice
