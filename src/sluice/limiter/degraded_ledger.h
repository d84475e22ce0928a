// The degraded ledger: what one instance knows of its subjects' usage, so that a decision the store
// cannot answer (on_store_error: allow) is still decided against the quota (docs/semantics.md,
// When the store fails).
//
// Per subject and limit (its tag: name and window), for the current window: `seen`, the highest
// counter the store has reported to this instance, and `degraded`, what this instance admitted
// while the store failed. A degraded decision is admitted iff, for every enforced limit,
// seen + degraded + cost <= quota (all-or-nothing, as a store decides); then `degraded` grows by
// the cost. And until the window ends, a decision for a subject with degraded admissions is denied
// here, without the store, when seen + degraded + cost exceeds a quota: the store does not count
// degraded admissions, and this instance must not admit them twice.
//
// The bound this gives: an instance's own admissions through the store in a window are in the
// counter it last saw (each answer reports the counter after it), so per instance, what it admitted
// through the store plus what it admitted degraded is at most the quota; with N instances a
// subject is admitted at most N × quota in a window, whatever fails — a burst, a stall, an outage,
// a reload (the ledger outlives Limiters).
//
// Bounded: at most `capacity` subjects (16 shards). When a shard is full, subjects whose windows
// have all ended are swept; then an observation of a new subject is not kept (counted as `full`,
// and that subject's degraded admissions start from zero: the bound for it is (N + 1) × quota),
// and a degraded admission of a new subject evicts a subject without degraded admissions, or, if
// there is none, is denied (counted as `full`). Thread-safe.
#ifndef SLUICE_LIMITER_DEGRADED_LEDGER_H_
#define SLUICE_LIMITER_DEGRADED_LEDGER_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "sluice/limiter/overlimit_cache.h"
#include "sluice/limiter/window.h"

namespace sluice {
inline namespace limiter {

// Counts for /metrics, shared by whoever reads them.
struct DegradedLedgerStats {
  std::atomic<uint64_t> admitted{0};  // degraded decisions admitted against the ledger
  std::atomic<uint64_t> denied{0};    // decisions denied by it (degraded, or after degraded ones)
  std::atomic<uint64_t> full{0};      // observations or admissions it had no room for
};

class DegradedLedger {
 public:
  static constexpr size_t kDefaultCapacity = 100'000;

  // `stats` may be null; otherwise it must outlive the ledger.
  explicit DegradedLedger(size_t capacity = kDefaultCapacity, DegradedLedgerStats* stats = nullptr);

  // One subject's part of a decision: its plan's quotas, shadow flags and limit tags (PlanQuotas),
  // its windows and its cost.
  struct Part {
    std::string_view subject;
    const PlanQuotas* plan = nullptr;
    absl::Span<const WindowBounds> windows;  // one per limit
    int64_t cost = 1;
  };

  // The store answered: `used` are the counters it reported (after an admission, or unchanged by
  // a denial), in plan order. Each limit's `seen` rises to its counter (an unusable counter is
  // ignored); a limit whose window moved on starts afresh.
  void Observe(const Part& part, absl::Span<const int64_t> used, absl::Time now);

  // A decision the store could not answer, under on_store_error: allow. Admitted iff every
  // enforced limit of every part has seen + degraded + cost <= quota; then every limit's
  // `degraded` grows by its part's cost (a part of cost 0 is a peek). `used` (resized to each
  // part's limits, parts in order) receives each limit's seen + degraded after the decision.
  [[nodiscard]] bool AdmitDegraded(absl::Span<const Part> parts, absl::Time now,
                                   absl::Span<absl::InlinedVector<int64_t, 4>> used);

  // True when a decision of `parts` must be denied without the store: some part has degraded
  // admissions in the current window of an enforced limit that cannot take its cost on top of
  // seen + degraded. `used` as for AdmitDegraded (filled only when true). Cheap while no subject
  // has degraded admissions (no lock is taken).
  [[nodiscard]] bool DeniesAfterDegraded(absl::Span<const Part> parts, absl::Time now,
                                         absl::Span<absl::InlinedVector<int64_t, 4>> used);

  // Drops what is known of `subject` (after an admin reset of its counters).
  void Forget(std::string_view subject);

  // Subjects held.
  [[nodiscard]] size_t size() const;

 private:
  struct LimitState {
    uint32_t tag = 0;
    int64_t window_start = 0;  // Unix seconds of the window the counts belong to
    int64_t seen = 0;
    int64_t degraded = 0;
  };
  struct Entry {
    absl::InlinedVector<LimitState, 2> limits;
    absl::Time until = absl::InfinitePast();  // the latest end of its windows: dead from then
    bool has_degraded = false;                // some limit has degraded > 0
  };
  static constexpr size_t kShards = 16;
  struct alignas(64) Shard {
    mutable std::mutex mu;
    absl::flat_hash_map<std::string, Entry> entries;  // key: subject
  };

  size_t ShardOf(std::string_view subject) const;
  // The state of limit `i` of `part` in `entry`, made (fresh for the current window) if missing or
  // of an ended window. REQUIRES: the entry's shard lock.
  LimitState& StateOf(Entry& entry, const Part& part, size_t i);
  // seen + degraded of limit i for the part's current window, 0 if unknown.
  static int64_t Known(const Entry* entry, const Part& part, size_t i);
  // Room for a new entry in `shard` (REQUIRES its lock): sweeps dead entries, then, if
  // `evict`, drops one without degraded admissions. False if there is none.
  bool MakeRoom(Shard& shard, absl::Time now, bool evict);
  void SetHasDegraded(Entry& entry, bool value);

  const size_t per_shard_;
  DegradedLedgerStats* stats_;
  std::array<Shard, kShards> shards_;
  // Entries with has_degraded: while 0, DeniesAfterDegraded answers false at once.
  std::atomic<int64_t> with_degraded_{0};
};

}  // namespace limiter
}  // namespace sluice

#endif  // SLUICE_LIMITER_DEGRADED_LEDGER_H_
