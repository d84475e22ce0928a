#include "sluice/limiter/overlimit_cache.h"

#include <algorithm>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "sluice/common/strings.h"
#include "sluice/limiter/store.h"

namespace sluice {
inline namespace limiter {
namespace {

void Count(std::atomic<uint64_t>* counter) {
  if (counter != nullptr) counter->fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

PlanQuotas PlanQuotas::Of(const Plan& plan) {
  PlanQuotas pq{.plan_tag = plan.tag};
  bool any_shadow = false;
  bool any_concurrent = false;
  bool any_algorithm = false;
  for (const Limit& limit : plan.limits) {
    pq.quotas.push_back(limit.quota);
    pq.tags.push_back(limit.tag);
    any_shadow = any_shadow || limit.shadow;
    any_concurrent = any_concurrent || limit.window.kind == config::WindowSpec::Kind::kConcurrent;
    any_algorithm = any_algorithm || limit.algorithm != config::Algorithm::kFixed;
  }
  if (any_algorithm) {
    for (const Limit& limit : plan.limits) pq.algorithms.emplace_back(limit);
  }
  if (any_concurrent) {
    for (const Limit& limit : plan.limits) {
      pq.concurrent.push_back(limit.window.kind == config::WindowSpec::Kind::kConcurrent);
    }
  }
  // Left empty when no limit is shadow (nearly every plan): a decision copies this.
  if (any_shadow) {
    for (const Limit& limit : plan.limits) pq.shadow.push_back(limit.shadow);
  }
  return pq;
}

OverLimitCache::OverLimitCache(size_t capacity, OverLimitCacheStats* stats)
    : per_shard_(std::max<size_t>(1, capacity / kShards)), stats_(stats) {}

OverLimitCache::Shard& OverLimitCache::ShardFor(std::string_view subject) {
  return shards_[absl::HashOf(ToAbsl(subject)) % kShards];
}

void OverLimitCache::Remember(const PlanQuotas& plan, std::string_view subject, absl::Time now,
                              absl::Span<const WindowBounds> windows,
                              absl::Span<const int64_t> used, absl::Time until,
                              uint64_t store_shrinks) {
  if (until <= now) return;
  std::string key(subject);
  Entry entry{.plan = plan,
              .until = until,
              .used = {used.begin(), used.end()},
              .store_shrinks = store_shrinks};
  for (const WindowBounds& w : windows) entry.window_start.push_back(w.start);
  Shard& shard = ShardFor(subject);
  std::lock_guard<std::mutex> lock(shard.mu);
  auto it = shard.entries.find(key);
  if (it == shard.entries.end() && shard.entries.size() >= per_shard_) {
    // Entries are dead from `until` on; sweeping them makes room in the common case.
    absl::erase_if(shard.entries, [now](const auto& kv) { return kv.second.until <= now; });
    if (shard.entries.size() >= per_shard_) {
      Count(stats_ ? &stats_->full : nullptr);
      return;
    }
  }
  shard.entries.insert_or_assign(std::move(key), std::move(entry));
  Count(stats_ ? &stats_->inserts : nullptr);
}

bool OverLimitCache::CertainDenial(const PlanQuotas& plan, std::string_view subject, int64_t cost,
                                   absl::Time now, absl::Span<const WindowBounds> windows,
                                   Entry* out, uint64_t store_shrinks) {
  if (cost <= 0) return false;
  Shard& shard = ShardFor(subject);
  std::lock_guard<std::mutex> lock(shard.mu);
  auto it = shard.entries.find(ToAbsl(subject));
  if (it == shard.entries.end()) return false;
  const Entry& e = it->second;
  // Learnt under another plan or other quotas: the subject moved (or its overrides changed), and
  // what was certain then says nothing now. A denial under the new terms will replace it.
  if (now >= e.until || e.plan != plan || e.used.size() != windows.size() ||
      plan.quotas.size() != windows.size() || e.store_shrinks != store_shrinks) {
    shard.entries.erase(it);
    return false;
  }
  for (size_t i = 0; i < windows.size(); ++i) {
    // Written so that a wild cached counter cannot overflow. A shadow limit never denies.
    const bool shadow = i < plan.shadow.size() && plan.shadow[i];
    if (e.window_start[i] == windows[i].start && !shadow &&
        (!UsableCounter(e.used[i]) || e.used[i] > plan.quotas[i] - cost)) {
      *out = e;
      Count(stats_ ? &stats_->hits : nullptr);
      return true;
    }
  }
  return false;
}

void OverLimitCache::Forget(std::string_view subject) {
  Shard& shard = ShardFor(subject);
  std::lock_guard<std::mutex> lock(shard.mu);
  shard.entries.erase(ToAbsl(subject));
}

size_t OverLimitCache::size() const {
  size_t n = 0;
  for (const Shard& shard : shards_) {
    std::lock_guard<std::mutex> lock(shard.mu);
    n += shard.entries.size();
  }
  return n;
}

}  // namespace limiter
}  // namespace sluice
