#include "sluice/limiter/overlimit_cache.h"

#include <algorithm>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "sluice/common/strings.h"
#include "sluice/limiter/store.h"

namespace sluice {
namespace {

// Plan names cannot contain '\0', so the key is unambiguous.
std::string KeyOf(const Plan& plan, std::string_view subject) {
  std::string key;
  key.reserve(plan.name.size() + 1 + subject.size());
  key.append(plan.name).push_back('\0');
  key.append(subject);
  return key;
}

void Count(std::atomic<uint64_t>* counter) {
  if (counter != nullptr) counter->fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

OverLimitCache::OverLimitCache(size_t capacity, OverLimitCacheStats* stats)
    : per_shard_(std::max<size_t>(1, capacity / kShards)), stats_(stats) {}

OverLimitCache::Shard& OverLimitCache::ShardFor(const std::string& key) {
  return shards_[absl::HashOf(key) % kShards];
}

void OverLimitCache::Remember(const Plan& plan, std::string_view subject, absl::Time now,
                              absl::Span<const WindowBounds> windows,
                              absl::Span<const int64_t> used, absl::Time until,
                              uint64_t store_shrinks) {
  if (until <= now) return;
  std::string key = KeyOf(plan, subject);
  Entry entry{.until = until, .used = {used.begin(), used.end()}, .store_shrinks = store_shrinks};
  for (const WindowBounds& w : windows) entry.window_start.push_back(w.start);
  Shard& shard = ShardFor(key);
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

bool OverLimitCache::CertainDenial(const Plan& plan, std::string_view subject, int64_t cost,
                                   absl::Time now, absl::Span<const WindowBounds> windows,
                                   Entry* out, uint64_t store_shrinks) {
  if (cost <= 0) return false;
  std::string key = KeyOf(plan, subject);
  Shard& shard = ShardFor(key);
  std::lock_guard<std::mutex> lock(shard.mu);
  auto it = shard.entries.find(key);
  if (it == shard.entries.end()) return false;
  const Entry& e = it->second;
  if (now >= e.until || e.used.size() != windows.size() || e.store_shrinks != store_shrinks) {
    shard.entries.erase(it);
    return false;
  }
  for (size_t i = 0; i < windows.size(); ++i) {
    // Written so that a wild cached counter cannot overflow.
    if (e.window_start[i] == windows[i].start &&
        (!UsableCounter(e.used[i]) || e.used[i] > plan.limits[i].quota - cost)) {
      *out = e;
      Count(stats_ ? &stats_->hits : nullptr);
      return true;
    }
  }
  return false;
}

void OverLimitCache::Forget(const Plan& plan, std::string_view subject) {
  std::string key = KeyOf(plan, subject);
  Shard& shard = ShardFor(key);
  std::lock_guard<std::mutex> lock(shard.mu);
  shard.entries.erase(key);
}

size_t OverLimitCache::size() const {
  size_t n = 0;
  for (const Shard& shard : shards_) {
    std::lock_guard<std::mutex> lock(shard.mu);
    n += shard.entries.size();
  }
  return n;
}

}  // namespace sluice
