#include "sluice/store/memory/memory_store.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <mutex>
#include <string_view>
#include <utility>

#include "absl/hash/hash.h"
#include "sluice/common/strings.h"

namespace sluice {
namespace {

// Entries are keyed by (plan, subject): the same subject under two plans has two sets of counters.
struct KeyView {
  uint64_t plan_tag;
  std::string_view subject;
};

struct Key {
  uint64_t plan_tag;
  std::string subject;
};

struct KeyHash {
  using is_transparent = void;
  // absl's string hash (std::string_view would go through std::hash, a library call).
  size_t operator()(const KeyView& k) const { return absl::HashOf(k.plan_tag, ToAbsl(k.subject)); }
  size_t operator()(const Key& k) const { return (*this)(KeyView{k.plan_tag, k.subject}); }
};

struct KeyEq {
  using is_transparent = void;
  static KeyView View(const Key& k) { return {k.plan_tag, k.subject}; }
  static KeyView View(const KeyView& k) { return k; }
  template <typename A, typename B>
  bool operator()(const A& a, const B& b) const {
    KeyView x = View(a), y = View(b);
    return x.plan_tag == y.plan_tag && x.subject == y.subject;
  }
};

struct Entry {
  uint32_t expires = 0;       // Unix seconds (a 32-bit field keeps the entry at 48 bytes)
  uint32_t alert_layout = 0;  // AlertLayout::id the counters' fired bits refer to; 0 = unknown
  absl::InlinedVector<MemoryStore::Counter, 2> counters;
};

// The bytes per active subject depend on it (BENCHMARKS.md): keep the entry at 48 bytes.
static_assert(sizeof(Entry) == 48);

using Map = absl::flat_hash_map<Key, Entry, KeyHash, KeyEq>;

uint16_t Tag16(const Limit& limit) { return static_cast<uint16_t>(limit.tag); }
uint32_t Window32(const WindowBounds& w) { return static_cast<uint32_t>(w.id); }

// The counter for limit `i` of `plan`, looked up first at its own position and then by tag (a
// reload may have reordered the limits). Returns nullptr when the entry has none.
MemoryStore::Counter* FindCounter(Entry& entry, const Plan& plan, size_t i) {
  const uint16_t tag = Tag16(plan.limits[i]);
  if (i < entry.counters.size() && entry.counters[i].tag == tag) return &entry.counters[i];
  for (MemoryStore::Counter& c : entry.counters) {
    if (c.tag == tag) return &c;
  }
  return nullptr;
}

// Makes the entry's counters match the plan's limits, position for position, keeping the counters
// of limits that survive a reload. Called only when the layout differs.
void Realign(Entry& entry, const Plan& plan) {
  absl::InlinedVector<MemoryStore::Counter, 2> aligned(plan.limits.size());
  for (size_t i = 0; i < plan.limits.size(); ++i) {
    if (MemoryStore::Counter* c = FindCounter(entry, plan, i)) aligned[i] = *c;
    aligned[i].tag = Tag16(plan.limits[i]);
  }
  entry.counters = std::move(aligned);
}

// The fired bits of `entry`'s counters, written under layout `from`, rewritten for the positions
// of `plan`'s thresholds: a percentage kept by a reload stays fired, a new one starts armed. With
// no known `from`, the bits stay as they are.
void RemapFired(Entry& entry, const Plan& plan, const AlertLayout* from) {
  if (from == nullptr) return;
  for (size_t i = 0; i < entry.counters.size(); ++i) {
    MemoryStore::Counter& c = entry.counters[i];
    if (c.fired == 0) continue;
    const std::vector<int>* before = from->PercentsOf(c.tag);
    uint16_t fired = 0;
    const std::vector<Threshold>& now = plan.limits[i].thresholds;
    for (size_t t = 0; before != nullptr && t < now.size(); ++t) {
      auto at = std::find(before->begin(), before->end(), now[t].percent);
      const size_t old_bit = static_cast<size_t>(at - before->begin());
      if (at != before->end() && (c.fired >> old_bit) & 1u) fired |= static_cast<uint16_t>(1u << t);
    }
    c.fired = fired;
  }
}

bool Aligned(const Entry& entry, const Plan& plan) {
  if (entry.counters.size() != plan.limits.size()) return false;
  for (size_t i = 0; i < plan.limits.size(); ++i) {
    if (entry.counters[i].tag != Tag16(plan.limits[i])) return false;
  }
  return true;
}

// The counter's value in the request's window (0 if its window has ended).
int64_t UsedNow(const MemoryStore::Counter* c, const WindowBounds& w) {
  return c != nullptr && c->window == Window32(w) ? c->used : 0;
}
uint16_t FiredNow(const MemoryStore::Counter* c, const WindowBounds& w) {
  return c != nullptr && c->window == Window32(w) ? c->fired : 0;
}

uint32_t ExpiryFor(const StoreRequest& req, absl::Duration grace) {
  absl::Time latest = req.now;
  for (const WindowBounds& w : req.windows) latest = std::max(latest, w.end);
  return static_cast<uint32_t>(std::clamp<int64_t>(absl::ToUnixSeconds(latest + grace), 0,
                                                   std::numeric_limits<uint32_t>::max()));
}

AlertEvent MakeEvent(const StoreRequest& req, const Limit& limit, const WindowBounds& w,
                     int percent, int64_t used) {
  return AlertEvent{.subject = std::string(req.subject),
                    .plan = req.plan->name,
                    .limit = limit.name,
                    .threshold = percent,
                    .used = used,
                    .quota = limit.quota,
                    .window_start = w.start,
                    .window_end = w.end,
                    .occurred_at = req.now};
}

}  // namespace

// std::mutex rather than absl::Mutex on this path: Debian's abseil is built with Mutex deadlock
// detection on, which costs more than the rest of a decision.
struct alignas(64) MemoryStore::Shard {
  mutable std::mutex mu;
  Map map;  // guarded by mu
  // The alert layouts the entries refer to (usually one per plan; more after a reload changed
  // a plan's alert percentages, until the sweep finds them unused). Guarded by mu.
  std::vector<std::shared_ptr<const AlertLayout>> layouts;

  const AlertLayout* Layout(uint32_t id) const {
    for (const auto& l : layouts) {
      if (l->id == id) return l.get();
    }
    return nullptr;
  }
  void Remember(const Plan& plan) {
    if (plan.alerts != nullptr && Layout(plan.alert_layout) == nullptr) {
      layouts.push_back(plan.alerts);
    }
  }
  // Makes `entry` fit `plan`: counters in the plan's order, fired bits in its layout.
  void Adapt(Entry& entry, const Plan& plan) {
    if (!Aligned(entry, plan)) Realign(entry, plan);
    if (entry.alert_layout != plan.alert_layout) {
      RemapFired(entry, plan, Layout(entry.alert_layout));
      Remember(plan);
      entry.alert_layout = plan.alert_layout;
    }
  }
};

MemoryStore::MemoryStore(Options options)
    : shard_bits_(std::bit_width(std::max<size_t>(options.shards, 1) - 1)),
      options_(options),
      outbox_(options.outbox_capacity) {
  shards_ = std::make_unique<Shard[]>(size_t{1} << shard_bits_);
}

MemoryStore::~MemoryStore() = default;

MemoryStore::Shard& MemoryStore::ShardFor(uint64_t plan_tag, std::string_view subject) const {
  return ShardForHash(KeyHash{}(KeyView{plan_tag, subject}));
}

MemoryStore::Shard& MemoryStore::ShardForHash(size_t hash) const {
  if (shard_bits_ == 0) return shards_[0];
  // The top bits pick the shard; the map inside uses the low bits, so the two stay independent.
  return shards_[hash >> (64 - shard_bits_)];
}

void MemoryStore::Decide(const StoreRequest& req, DecideCallback done) {
  std::move(done)(*DecideNow(req));
}

std::optional<absl::StatusOr<StoreResult>> MemoryStore::DecideNow(const StoreRequest& req) {
  const Plan& plan = *req.plan;
  const size_t n = plan.limits.size();
  StoreResult result;
  result.used.resize(n);
  bool recorded = false;  // events pushed to the outbox: its listener is told after the lock

  // One hash for both the shard and the lookup in it.
  const KeyView key{plan.tag, req.subject};
  const size_t hash = KeyHash{}(key);
  Shard& shard = ShardForHash(hash);
  {
    std::lock_guard lock(shard.mu);
    auto it = shard.map.find(key, hash);
    Entry* entry = it == shard.map.end() ? nullptr : &it->second;
    if (entry != nullptr && (entry->alert_layout != plan.alert_layout || !Aligned(*entry, plan))) {
      shard.Adapt(*entry, plan);
    }

    // Admission: all-or-nothing over every limit.
    bool allowed = true;
    for (size_t i = 0; i < n; ++i) {
      const Counter* c = entry ? &entry->counters[i] : nullptr;
      result.used[i] = UsedNow(c, req.windows[i]);
      // Written so that nothing overflows: an unusable counter (store.h) only comes from crafted
      // state, and it denies.
      if (!UsableCounter(result.used[i]) || result.used[i] > plan.limits[i].quota - req.cost) {
        allowed = false;
      }
    }
    result.allowed = allowed;

    // A peek changes nothing. A denial changes nothing but may fire a 100% threshold of a limit
    // that denied; an admission adds the cost everywhere and may fire any threshold.
    if (req.cost > 0) {
      bool wrote = false;  // the expiry is computed once, and only when something was written
      for (size_t i = 0; i < n; ++i) {
        const Limit& limit = plan.limits[i];
        const WindowBounds& w = req.windows[i];
        // An unusable counter denies but is left as it is: nothing is written or fired for it.
        const bool violated =
            !allowed && UsableCounter(result.used[i]) && result.used[i] > limit.quota - req.cost;
        const int64_t after = allowed ? result.used[i] + req.cost : result.used[i];
        if (!allowed && !violated) continue;

        const Counter* current = entry ? &entry->counters[i] : nullptr;
        uint16_t fired = FiredNow(current, w);
        uint16_t newly = 0;
        for (size_t t = 0; t < limit.thresholds.size(); ++t) {
          const Threshold& th = limit.thresholds[t];
          const uint16_t bit = static_cast<uint16_t>(1u << t);
          if (fired & bit) continue;
          const bool crossed = allowed ? after >= th.count : th.percent == 100;
          if (!crossed) continue;
          // The flag is set only if the event is recorded: a full outbox leaves it armed.
          if (outbox_.Push(MakeEvent(req, limit, w, th.percent, after))) newly |= bit;
        }
        recorded = recorded || newly != 0;
        if (!allowed && newly == 0) continue;

        if (entry == nullptr) {
          auto [ins, unused] = shard.map.try_emplace(Key{plan.tag, std::string(req.subject)});
          entry = &ins->second;
          entry->alert_layout = plan.alert_layout;
          shard.Remember(plan);
          entry->counters.resize(n);
          for (size_t j = 0; j < n; ++j) entry->counters[j].tag = Tag16(plan.limits[j]);
        }
        Counter& c = entry->counters[i];
        if (c.window != Window32(w)) c = Counter{.used = 0, .window = Window32(w), .tag = c.tag};
        c.used = after;
        c.fired = static_cast<uint16_t>(fired | newly);
        result.used[i] = after;
        wrote = true;
      }
      if (wrote) entry->expires = std::max(entry->expires, ExpiryFor(req, options_.grace));
    }
  }
  if (recorded) outbox_.NotifyRecorded();
  return result;
}

void MemoryStore::Usage(const StoreRequest& req, UsageCallback done) {
  const Plan& plan = *req.plan;
  std::vector<LimitUsage> usage(plan.limits.size());
  Shard& shard = ShardFor(plan.tag, req.subject);
  {
    std::lock_guard lock(shard.mu);
    auto it = shard.map.find(KeyView{plan.tag, req.subject});
    if (it != shard.map.end()) {
      shard.Adapt(it->second, plan);
      for (size_t i = 0; i < plan.limits.size(); ++i) {
        const Counter* c = &it->second.counters[i];
        usage[i].used = UsedNow(c, req.windows[i]);
        const uint16_t fired = FiredNow(c, req.windows[i]);
        for (size_t t = 0; t < plan.limits[i].thresholds.size(); ++t) {
          if (fired & (1u << t)) usage[i].fired.push_back(plan.limits[i].thresholds[t].percent);
        }
      }
    }
  }
  std::move(done)(std::move(usage));
}

void MemoryStore::Reset(const StoreRequest& req, std::optional<size_t> limit_index,
                        StatusCallback done) {
  const Plan& plan = *req.plan;
  Shard& shard = ShardFor(plan.tag, req.subject);
  {
    std::lock_guard lock(shard.mu);
    auto it = shard.map.find(KeyView{plan.tag, req.subject});
    if (it != shard.map.end()) {
      if (!limit_index.has_value()) {
        shard.map.erase(it);
      } else if (Counter* c = FindCounter(it->second, plan, *limit_index)) {
        *c = Counter{.tag = c->tag};
      }
    }
  }
  std::move(done)(absl::OkStatus());
}

size_t MemoryStore::Sweep(absl::Time now) {
  const int64_t now_s = absl::ToUnixSeconds(now);
  size_t removed = 0;
  for (size_t s = 0; s < (size_t{1} << shard_bits_); ++s) {
    Shard& shard = shards_[s];
    std::lock_guard lock(shard.mu);
    // The same pass notes which alert layouts the remaining entries refer to (nearly all entries
    // of a plan share one, hence the check against the last one seen) and drops the others.
    std::vector<uint32_t> in_use;
    uint32_t last = 0;
    removed += absl::erase_if(shard.map, [&](const auto& kv) {
      if (kv.second.expires <= now_s) return true;
      const uint32_t id = kv.second.alert_layout;
      if (id != last && std::find(in_use.begin(), in_use.end(), id) == in_use.end()) {
        in_use.push_back(id);
      }
      last = id;
      return false;
    });
    std::erase_if(shard.layouts, [&](const auto& l) {
      return std::find(in_use.begin(), in_use.end(), l->id) == in_use.end();
    });
  }
  return removed;
}

size_t MemoryStore::subject_count() const {
  size_t total = 0;
  for (size_t s = 0; s < (size_t{1} << shard_bits_); ++s) {
    std::lock_guard lock(shards_[s].mu);
    total += shards_[s].map.size();
  }
  return total;
}

void MemoryStore::ForEach(const std::function<void(const SubjectState&)>& fn) const {
  SubjectState state;
  for (size_t s = 0; s < (size_t{1} << shard_bits_); ++s) {
    std::lock_guard lock(shards_[s].mu);
    for (const auto& [key, entry] : shards_[s].map) {
      state.plan_tag = key.plan_tag;
      state.subject = key.subject;
      state.expires = entry.expires;
      state.counters = entry.counters;
      if (state.alerts == nullptr || state.alerts->id != entry.alert_layout) {
        state.alerts.reset();
        for (const auto& l : shards_[s].layouts) {
          if (l->id == entry.alert_layout) state.alerts = l;
        }
      }
      fn(state);
    }
  }
}

void MemoryStore::Restore(std::vector<SubjectState> states) {
  for (size_t s = 0; s < (size_t{1} << shard_bits_); ++s) {
    std::lock_guard lock(shards_[s].mu);
    shards_[s].map.clear();
    shards_[s].layouts.clear();
  }
  for (SubjectState& st : states) {
    Shard& shard = ShardFor(st.plan_tag, st.subject);
    std::lock_guard lock(shard.mu);
    uint32_t layout = 0;
    if (st.alerts != nullptr) {
      layout = st.alerts->id;
      if (shard.Layout(layout) == nullptr) shard.layouts.push_back(std::move(st.alerts));
    }
    shard.map.insert_or_assign(Key{st.plan_tag, std::move(st.subject)},
                               Entry{.expires = static_cast<uint32_t>(std::clamp<int64_t>(
                                         st.expires, 0, std::numeric_limits<uint32_t>::max())),
                                     .alert_layout = layout,
                                     .counters = std::move(st.counters)});
  }
}

}  // namespace sluice
