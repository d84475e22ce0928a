// The over-limit cache: after the store denies a subject, later requests under the same plan and
// the same effective quotas that are certain to be denied as well are answered without asking the
// store, until the violated limits reset (docs/architecture.md). A client hammering after its quota
// is spent then costs no Redis round trip.
//
// Why this is exact, not a guess: within a window a counter only grows (a denial changes nothing,
// and other instances only add), so if used_i + cost > quota_i held for the cached counter of limit
// i in window w, it holds for any later request with at least that cost in w. A request with a
// smaller cost, or one arriving after the violated window ended, goes to the store, and so does
// one under another plan or other effective quotas (a plan change or a per-subject override):
// each subject has one entry, valid only for the plan tag and quotas it was learnt under.
// Counters follow the subject across plans, so a reset under any plan forgets the subject's
// entry whatever plan it was learnt under. Two things can
// lower a counter inside a window: an admin reset (the Limiter drops the entry in this process;
// other instances keep theirs until it expires — at most until the window's end) and a reload that
// raises a quota (a reload builds a new Limiter with an empty cache). A store may also take back
// an admission it counted but could not answer (RedisStore's refunds, after a stall): the Limiter
// passes the store's Store::shrinks() count, read before asking the store, with each entry and
// each lookup, and an entry remembered at another count is not trusted.
//
// Bounded: at most `capacity` entries; when a shard is full, expired entries are swept and, if it
// is still full, the new entry is not stored (counted as `full`). Thread-safe.
#ifndef SLUICE_LIMITER_OVERLIMIT_CACHE_H_
#define SLUICE_LIMITER_OVERLIMIT_CACHE_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "sluice/limiter/algorithm.h"
#include "sluice/limiter/plan.h"
#include "sluice/limiter/window.h"

namespace sluice {
inline namespace limiter {

// Counts shared by every cache a service builds over its reloads (for /metrics).
struct OverLimitCacheStats {
  std::atomic<uint64_t> hits{0};     // decisions answered from the cache
  std::atomic<uint64_t> inserts{0};  // denials remembered
  std::atomic<uint64_t> full{0};     // denials not remembered because the cache was full
};

// What a denial was learnt under: the plan and the effective quota of each of its limits, in plan
// order. A copy, so that nothing refers to the (possibly short-lived) effective plan.
struct PlanQuotas {
  uint64_t plan_tag = 0;
  absl::InlinedVector<int64_t, 4> quotas;
  // Per limit: a shadow limit (Limit::shadow), which never denies; missing: enforced (Of leaves
  // it empty for a plan without shadow limits).
  absl::InlinedVector<bool, 4> shadow;
  // Per limit: a concurrent limit (window: concurrent); empty when the plan has none.
  absl::InlinedVector<bool, 4> concurrent;
  // Per limit: Limit::tag (what the limit's counters are known by, whatever the plan).
  absl::InlinedVector<uint32_t, 4> tags;
  // Per limit: how it decides (limiter/algorithm.h); empty when every limit is fixed.
  absl::InlinedVector<AlgorithmTerms, 4> algorithms;

  [[nodiscard]] static PlanQuotas Of(const Plan& plan);
  friend bool operator==(const PlanQuotas&, const PlanQuotas&) = default;
};

class OverLimitCache {
 public:
  // What the cache knows of one subject: the plan and quotas of the denial that stored it, the
  // counters it reported and the windows they belong to, in plan order.
  struct Entry {
    PlanQuotas plan;
    absl::Time until;  // when the last violated limit resets; the entry is dead from then on
    absl::InlinedVector<int64_t, 4> used;
    absl::InlinedVector<absl::Time, 4> window_start;
    uint64_t store_shrinks = 0;  // Store::shrinks() before the denial was asked for
  };

  // `stats` may be null; otherwise it must outlive the cache.
  OverLimitCache(size_t capacity, OverLimitCacheStats* stats);

  // Remembers that `subject` was denied under `plan` at `now` with counters `used` in `windows`,
  // until `until` (replacing what was known of `subject`). `store_shrinks`: the store's
  // Store::shrinks() read before it was asked.
  void Remember(const PlanQuotas& plan, std::string_view subject, absl::Time now,
                absl::Span<const WindowBounds> windows, absl::Span<const int64_t> used,
                absl::Time until, uint64_t store_shrinks = 0);

  // The cached counters if a request costing `cost` at `now` (whose windows are `windows`) is
  // certain to be denied; otherwise false. `cost` 0 never is (a peek must see the store), nor is
  // an entry remembered at a `store_shrinks` other than the current one, nor one learnt under
  // another plan tag or other quotas than `plan`'s. A cached counter outside [0, kMaxUsed]
  // (unusable, store.h) stays a certain denial.
  [[nodiscard]] bool CertainDenial(const PlanQuotas& plan, std::string_view subject, int64_t cost,
                                   absl::Time now, absl::Span<const WindowBounds> windows,
                                   Entry* out, uint64_t store_shrinks = 0);

  // Drops what is known of `subject`, under any plan (after an admin reset).
  void Forget(std::string_view subject);

  [[nodiscard]] size_t size() const;

 private:
  static constexpr size_t kShards = 16;
  struct alignas(64) Shard {
    mutable std::mutex mu;
    absl::flat_hash_map<std::string, Entry> entries;  // key: subject
  };
  Shard& ShardFor(std::string_view subject);

  const size_t per_shard_;
  OverLimitCacheStats* stats_;
  std::array<Shard, kShards> shards_;
};

}  // namespace limiter
}  // namespace sluice

#endif  // SLUICE_LIMITER_OVERLIMIT_CACHE_H_
