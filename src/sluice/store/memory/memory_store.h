// The embedded store: docs/semantics.md in-process, with no I/O.
//
// State is split into shards by a hash of the subject; each shard is a flat hash map behind its own
// mutex, so concurrent decisions on different subjects rarely meet and no request takes a global
// lock. All counters of one subject live in one entry, whatever plan counted them (usage follows
// the subject: a counter is found by its limit's tag, Limit::tag, i.e. by limit name and window),
// which is what makes a decision atomic: it is computed and applied under that entry's shard lock.
// Alert events are pushed to the outbox under the same lock, so an event is recorded before its
// decision is answered.
//
// Ended windows are reset lazily (a counter whose window id is not the request's counts as 0), and
// Sweep() drops entries whose every window has ended, so memory is bounded by active subjects.
#ifndef SLUICE_STORE_MEMORY_MEMORY_STORE_H_
#define SLUICE_STORE_MEMORY_MEMORY_STORE_H_

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/synchronization/mutex.h"
#include "sluice/limiter/store.h"
#include "sluice/store/memory/outbox.h"

namespace sluice {
inline namespace memory {

class MemoryStore final : public Store {
 public:
  struct Options {
    size_t shards = 64;  // rounded up to a power of two
    size_t outbox_capacity = 100'000;
    absl::Duration grace = absl::Seconds(60);  // kept this long after a window ends
    // Open reservations at once, spread evenly over the shards: a reservation that would make
    // its shard hold more is refused (ResourceExhausted), so no client can grow the store without
    // bound. As many ended ones are remembered (for answering a repeated settle the same); past
    // that the oldest ended one is forgotten early.
    size_t max_reservations = 1'000'000;
  };

  // One limit's counter inside an entry. 16 bytes: window ids are stored modulo 2^32, which only
  // matters for windows 2^32 windows apart (136 years of 1 s windows). The tag tells a calendar
  // window of one time zone from that of another (WindowKey), so the id is unambiguous.
  struct Counter {
    int64_t used = 0;
    uint32_t window = 0;  // low 32 bits of the window id the counter belongs to
    uint16_t tag = 0;     // low 16 bits of Limit::tag: finds the counter under any plan
    uint16_t fired = 0;   // bit i: threshold i of the limit fired in this window (see below)
  };
  // Which threshold bit i stands for, and under which quota, is given by the AlertLayout the entry
  // was last written under (Plan::alerts). The first counters of an entry are those of the plan
  // that last wrote it, in its order; counters of limits only other plans have follow (their bits
  // moved to the side table below). An entry meeting a plan with another layout is adapted first:
  // its counters are reordered by tag, bits whose percentage and quota are kept are re-read by
  // percentage, and bits of a quota no longer in force move to the shard's side table (OtherQuota)
  // while those of the new quota, if it was in force before in this window, come back from it.
  // Each shard keeps the layouts its entries refer to.

  // Thresholds fired in a counter's window under a quota other than the one the entry's bits are
  // for (the subject changed plans, or its overrides changed). Kept per subject in a side table of
  // the shard, only for subjects whose quota changed, so the others pay nothing for it; swept with
  // the entries and saved in snapshots. At most 16 per subject (the oldest goes first).
  struct OtherQuota {
    uint16_t tag = 0;                    // the limit, as Counter::tag
    uint32_t window = 0;                 // as Counter::window
    int64_t quota = 0;                   // the quota the thresholds fired under
    uint32_t expires = 0;                // Unix seconds after which it may be swept
    std::array<uint64_t, 2> percents{};  // bit p - 1: threshold p% fired (p in 1..100)
    friend bool operator==(const OtherQuota&, const OtherQuota&) = default;
  };

  // A subject's saved state, for snapshots.
  struct SubjectState {
    std::string subject;
    int64_t expires = 0;  // Unix seconds after which the entry may be swept
    absl::InlinedVector<Counter, 2> counters;
    // What the counters' `fired` bits stand for; null when unknown (they are then read by
    // position under whatever plan meets them).
    std::shared_ptr<const AlertLayout> alerts;
    std::vector<OtherQuota> other_quotas;
  };

  MemoryStore() : MemoryStore(Options{}) {}
  explicit MemoryStore(Options options);
  ~MemoryStore() override;

  void Decide(const StoreRequest& req, DecideCallback done) override;
  std::optional<absl::StatusOr<StoreResult>> DecideNow(const StoreRequest& req) override;
  // Locks the shards of every part (each once, in increasing order), decides every part as Decide
  // does, and applies the group's verdict to all of them before unlocking. Answers at once.
  void DecideGroup(const StoreGroupRequest& req, GroupDecideCallback done) override;
  void Usage(const StoreRequest& req, UsageCallback done) override;
  void Reset(const StoreRequest& req, std::optional<size_t> limit_index,
             StatusCallback done) override;

  // Reservations (store.h): kept in the shard of their subject, so each is one step under that
  // shard's lock.
  void Reserve(const StoreReserveRequest& req, DecideCallback done) override;
  void Settle(const StoreSettleRequest& req, SettleCallback done) override;
  void Extend(std::string_view subject, std::string_view id, absl::Time expires_at, absl::Time now,
              ExtendCallback done) override;
  // Visits every shard's open reservations in order of expiry, reading only the due ones.
  void DueReservations(absl::Time now, size_t max, DueCallback done) override;
  // Open reservations, for tests and metrics.
  [[nodiscard]] size_t open_reservations() const;

  // Drops every entry whose windows all ended (plus grace) at or before `now`, and every ended
  // reservation forgotten by then. Returns how many entries.
  size_t Sweep(absl::Time now);

  [[nodiscard]] size_t subject_count() const;
  [[nodiscard]] Outbox& outbox() { return outbox_; }
  [[nodiscard]] const Outbox& outbox() const { return outbox_; }

  // Side-table records (OtherQuota) held, for tests and metrics.
  [[nodiscard]] size_t other_quota_count() const;

  // A reservation's saved state, for snapshots (what it holds while open: per limit tag).
  struct ReservationState {
    std::string id;
    std::string subject;
    std::string plan;
    absl::InlinedVector<std::pair<uint16_t, int64_t>, 2> holds;  // (Counter::tag, amount)
    int64_t estimate = 0;
    absl::Time expires_at;
    bool charge_on_expiry = true;
    bool open = true;
    ReservationEnd ended_by = ReservationEnd::kSettle;  // when ended
    int64_t charged = 0;                                // when ended
  };

  // Calls `fn` for every entry and then `reservations` (if set) for every reservation, one shard at
  // a time under that shard's lock (neither may call back into the store). Each shard is a
  // consistent cut: a reservation and the counters its settle charged are saved together.
  void ForEach(const std::function<void(const SubjectState&)>& fn,
               const std::function<void(const ReservationState&)>& reservations = {}) const;
  // Replaces all entries with `states` and all reservations with `reservations` (used when
  // loading a snapshot before serving); what open reservations hold is recomputed from them.
  void Restore(std::vector<SubjectState> states, std::vector<ReservationState> reservations = {});

 private:
  struct Shard;
  [[nodiscard]] Shard& ShardFor(std::string_view subject) const;
  // The index of the shard for a subject whose hash is `hash`.
  [[nodiscard]] size_t ShardIndex(size_t hash) const;
  // The shard for a key whose hash (KeyHash) is already known.
  [[nodiscard]] Shard& ShardForHash(size_t hash) const;
  // Open reservations a shard may hold, and ended ones it remembers (Options::max_reservations
  // spread evenly over the shards).
  [[nodiscard]] size_t PerShard() const {
    return std::max<size_t>(options_.max_reservations >> shard_bits_, 1);
  }

  std::unique_ptr<Shard[]> shards_;
  size_t shard_bits_;
  Options options_;
  Outbox outbox_;
};

}  // namespace memory
}  // namespace sluice

#endif  // SLUICE_STORE_MEMORY_MEMORY_STORE_H_
