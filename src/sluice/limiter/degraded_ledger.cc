#include "sluice/limiter/degraded_ledger.h"

#include <algorithm>
#include <vector>

#include "absl/hash/hash.h"
#include "sluice/common/strings.h"
#include "sluice/limiter/store.h"

namespace sluice {
inline namespace limiter {
namespace {

void Count(std::atomic<uint64_t>* counter) {
  if (counter != nullptr) counter->fetch_add(1, std::memory_order_relaxed);
}

bool Shadow(const PlanQuotas& plan, size_t i) { return i < plan.shadow.size() && plan.shadow[i]; }

}  // namespace

DegradedLedger::DegradedLedger(size_t capacity, DegradedLedgerStats* stats)
    : per_shard_(std::max<size_t>(1, capacity / kShards)), stats_(stats) {}

size_t DegradedLedger::ShardOf(std::string_view subject) const {
  return absl::HashOf(ToAbsl(subject)) % kShards;
}

int64_t DegradedLedger::Known(const Entry* entry, const Part& part, size_t i) {
  if (entry == nullptr) return 0;
  const int64_t start = absl::ToUnixSeconds(part.windows[i].start);
  for (const LimitState& s : entry->limits) {
    if (s.tag == part.plan->tags[i] && s.window_start == start) return s.seen + s.degraded;
  }
  return 0;
}

DegradedLedger::LimitState& DegradedLedger::StateOf(Entry& entry, const Part& part, size_t i) {
  const uint32_t tag = part.plan->tags[i];
  const int64_t start = absl::ToUnixSeconds(part.windows[i].start);
  entry.until = std::max(entry.until, part.windows[i].end);
  for (LimitState& s : entry.limits) {
    if (s.tag != tag) continue;
    if (s.window_start != start) s = LimitState{.tag = tag, .window_start = start};
    return s;
  }
  return entry.limits.emplace_back(LimitState{.tag = tag, .window_start = start});
}

void DegradedLedger::SetHasDegraded(Entry& entry, bool value) {
  if (entry.has_degraded == value) return;
  entry.has_degraded = value;
  with_degraded_.fetch_add(value ? 1 : -1, std::memory_order_relaxed);
}

bool DegradedLedger::MakeRoom(Shard& shard, absl::Time now, bool evict) {
  if (shard.entries.size() < per_shard_) return true;
  absl::erase_if(shard.entries, [&](auto& kv) {
    if (kv.second.until > now) return false;
    SetHasDegraded(kv.second, false);
    return true;
  });
  if (shard.entries.size() < per_shard_) return true;
  if (!evict) return false;
  for (auto it = shard.entries.begin(); it != shard.entries.end(); ++it) {
    if (!it->second.has_degraded) {
      shard.entries.erase(it);
      return true;
    }
  }
  return false;
}

void DegradedLedger::Observe(const Part& part, absl::Span<const int64_t> used, absl::Time now) {
  if (used.size() != part.windows.size() || part.plan->tags.size() != used.size()) return;
  Shard& shard = shards_[ShardOf(part.subject)];
  std::lock_guard<std::mutex> lock(shard.mu);
  auto it = shard.entries.find(ToAbsl(part.subject));
  if (it == shard.entries.end()) {
    if (!MakeRoom(shard, now, /*evict=*/false)) {
      Count(stats_ ? &stats_->full : nullptr);
      return;
    }
    it = shard.entries.try_emplace(std::string(part.subject)).first;
  }
  Entry& entry = it->second;
  for (size_t i = 0; i < used.size(); ++i) {
    if (!UsableCounter(used[i])) continue;
    LimitState& s = StateOf(entry, part, i);
    s.seen = std::max(s.seen, used[i]);
  }
  SetHasDegraded(entry, std::any_of(entry.limits.begin(), entry.limits.end(),
                                    [](const LimitState& s) { return s.degraded > 0; }));
}

namespace {

// The shards of `parts`' subjects, ascending and distinct, locked in that order for the lifetime
// of the object (a group's parts are decided together).
template <typename Shards, typename ShardOfFn>
class ShardLocks {
 public:
  ShardLocks(Shards& shards, absl::Span<const DegradedLedger::Part> parts, ShardOfFn shard_of) {
    absl::InlinedVector<size_t, 4> indices;
    for (const DegradedLedger::Part& p : parts) indices.push_back(shard_of(p.subject));
    std::sort(indices.begin(), indices.end());
    indices.erase(std::unique(indices.begin(), indices.end()), indices.end());
    for (size_t i : indices) locks_.emplace_back(shards[i].mu);
  }

 private:
  absl::InlinedVector<std::unique_lock<std::mutex>, 4> locks_;
};

}  // namespace

bool DegradedLedger::AdmitDegraded(absl::Span<const Part> parts, absl::Time now,
                                   absl::Span<absl::InlinedVector<int64_t, 4>> used) {
  ShardLocks locks(shards_, parts, [this](std::string_view s) { return ShardOf(s); });
  // Known usage, and the verdict, before anything changes.
  bool allowed = true;
  for (size_t p = 0; p < parts.size(); ++p) {
    const Part& part = parts[p];
    Shard& shard = shards_[ShardOf(part.subject)];
    auto it = shard.entries.find(ToAbsl(part.subject));
    const Entry* entry = it == shard.entries.end() ? nullptr : &it->second;
    used[p].resize(part.windows.size());
    for (size_t i = 0; i < part.windows.size(); ++i) {
      used[p][i] = Known(entry, part, i);
      if (!Shadow(*part.plan, i) && used[p][i] > part.plan->quotas[i] - part.cost) allowed = false;
    }
  }
  if (allowed) {
    // Every paying part needs an entry: made first (a new one may move the others of its shard),
    // so that nothing is counted unless everything can be.
    for (const Part& part : parts) {
      if (part.cost == 0) continue;
      Shard& shard = shards_[ShardOf(part.subject)];
      if (shard.entries.contains(ToAbsl(part.subject))) continue;
      if (!MakeRoom(shard, now, /*evict=*/true)) {
        Count(stats_ ? &stats_->full : nullptr);
        allowed = false;
        break;
      }
      shard.entries.try_emplace(std::string(part.subject));
    }
  }
  if (!allowed) {
    Count(stats_ ? &stats_->denied : nullptr);
    return false;
  }
  for (size_t p = 0; p < parts.size(); ++p) {
    const Part& part = parts[p];
    if (part.cost == 0) continue;
    Entry& entry = shards_[ShardOf(part.subject)].entries.find(ToAbsl(part.subject))->second;
    for (size_t i = 0; i < part.windows.size(); ++i) {
      LimitState& s = StateOf(entry, part, i);
      s.degraded += part.cost;
      used[p][i] = s.seen + s.degraded;
    }
    SetHasDegraded(entry, true);
  }
  Count(stats_ ? &stats_->admitted : nullptr);
  return true;
}

bool DegradedLedger::DeniesAfterDegraded(absl::Span<const Part> parts, absl::Time now,
                                         absl::Span<absl::InlinedVector<int64_t, 4>> used) {
  (void)now;
  if (with_degraded_.load(std::memory_order_relaxed) <= 0) return false;
  ShardLocks locks(shards_, parts, [this](std::string_view s) { return ShardOf(s); });
  bool denied = false;
  for (const Part& part : parts) {
    if (part.cost == 0) return false;  // a peek asks the store
    Shard& shard = shards_[ShardOf(part.subject)];
    auto it = shard.entries.find(ToAbsl(part.subject));
    if (it == shard.entries.end() || !it->second.has_degraded) continue;
    for (size_t i = 0; i < part.windows.size() && !denied; ++i) {
      if (Shadow(*part.plan, i)) continue;
      const int64_t start = absl::ToUnixSeconds(part.windows[i].start);
      for (const LimitState& s : it->second.limits) {
        // Only a limit this instance admitted degraded in: the store knows the rest.
        if (s.tag == part.plan->tags[i] && s.window_start == start && s.degraded > 0 &&
            s.seen + s.degraded > part.plan->quotas[i] - part.cost) {
          denied = true;
        }
      }
    }
  }
  if (!denied) return false;
  for (size_t p = 0; p < parts.size(); ++p) {
    Shard& shard = shards_[ShardOf(parts[p].subject)];
    auto it = shard.entries.find(ToAbsl(parts[p].subject));
    const Entry* entry = it == shard.entries.end() ? nullptr : &it->second;
    used[p].resize(parts[p].windows.size());
    for (size_t i = 0; i < parts[p].windows.size(); ++i) used[p][i] = Known(entry, parts[p], i);
  }
  Count(stats_ ? &stats_->denied : nullptr);
  return true;
}

void DegradedLedger::Forget(std::string_view subject) {
  Shard& shard = shards_[ShardOf(subject)];
  std::lock_guard<std::mutex> lock(shard.mu);
  auto it = shard.entries.find(ToAbsl(subject));
  if (it == shard.entries.end()) return;
  SetHasDegraded(it->second, false);
  shard.entries.erase(it);
}

size_t DegradedLedger::size() const {
  size_t n = 0;
  for (const Shard& shard : shards_) {
    std::lock_guard<std::mutex> lock(shard.mu);
    n += shard.entries.size();
  }
  return n;
}

}  // namespace limiter
}  // namespace sluice
