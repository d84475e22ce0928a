#include "sluice/store/memory/memory_store.h"

#include <algorithm>
#include <bit>
#include <deque>
#include <limits>
#include <mutex>
#include <string_view>
#include <utility>

#include "absl/base/attributes.h"
#include "absl/container/btree_set.h"
#include "absl/hash/hash.h"
#include "sluice/common/strings.h"
#include "sluice/limiter/algorithm.h"

namespace sluice {
inline namespace memory {
namespace {

// Entries are keyed by the subject alone: its counters follow it from plan to plan.
struct SubjectHash {
  using is_transparent = void;
  // absl's string hash (std::string_view would go through std::hash, a library call).
  size_t operator()(std::string_view s) const { return absl::HashOf(ToAbsl(s)); }
};

struct SubjectEq {
  using is_transparent = void;
  bool operator()(std::string_view a, std::string_view b) const { return a == b; }
};

struct Entry {
  uint32_t expires = 0;       // Unix seconds (a 32-bit field keeps the entry at 48 bytes)
  uint32_t alert_layout = 0;  // AlertLayout::id the counters' fired bits refer to; 0 = unknown
  absl::InlinedVector<MemoryStore::Counter, 2> counters;
};

// The bytes per active subject depend on it (BENCHMARKS.md): keep the entry at 48 bytes.
static_assert(sizeof(Entry) == 48);

using Map = absl::flat_hash_map<std::string, Entry, SubjectHash, SubjectEq>;

// What open reservations hold of one limit of a subject (a concurrent limit: slots).
struct Hold {
  uint16_t tag = 0;  // as Counter::tag
  int64_t amount = 0;
};
using Holds = absl::InlinedVector<Hold, 2>;

// One reservation (store.h). Open until it ends; then kept, ended, for answering a repeated
// settle, until kReservationMemory after its expires_at.
struct Reservation {
  std::string subject;
  std::string plan;
  Holds holds;           // what it holds while open
  int64_t estimate = 0;  // charged at expiry under charge_on_expiry
  absl::Time expires_at;
  bool charge_on_expiry = true;
  bool open = true;
  ReservationEnd ended_by = ReservationEnd::kSettle;
  int64_t charged = 0;  // when ended: what it charged
};

bool Concurrent(const Limit& limit) {
  return limit.window.kind == config::WindowSpec::Kind::kConcurrent;
}
using OtherQuotas = absl::InlinedVector<MemoryStore::OtherQuota, 1>;
// Bound of a subject's side-table records (Shard::Stash).
constexpr size_t kMaxOtherQuotas = 16;

uint16_t Tag16(const Limit& limit) { return static_cast<uint16_t>(limit.tag); }
uint16_t LegacyTag16(const Limit& limit) {
  return static_cast<uint16_t>(LegacyLimitTag(limit.name));
}
uint32_t Window32(const WindowBounds& w) { return static_cast<uint32_t>(w.id); }

// True when the entry's first counters are the plan's limits, in order.
bool Aligned(const Entry& entry, const Plan& plan) {
  if (entry.counters.size() < plan.limits.size()) return false;
  for (size_t i = 0; i < plan.limits.size(); ++i) {
    if (entry.counters[i].tag != Tag16(plan.limits[i])) return false;
  }
  return true;
}

// Fired bits (positions in `percents`) as a set of percentages, and back.
std::array<uint64_t, 2> PercentSet(uint16_t fired, const std::vector<int>& percents) {
  std::array<uint64_t, 2> set{};
  for (size_t t = 0; t < percents.size() && t < 16; ++t) {
    const int p = percents[t];
    if (((fired >> t) & 1u) && p >= 1 && p <= 128)
      set[(p - 1) / 64] |= uint64_t{1} << ((p - 1) % 64);
  }
  return set;
}
uint16_t BitsOf(const std::array<uint64_t, 2>& set, const std::vector<Threshold>& thresholds) {
  uint16_t fired = 0;
  for (size_t t = 0; t < thresholds.size() && t < 16; ++t) {
    const int p = thresholds[t].percent;
    if (p >= 1 && p <= 128 && ((set[(p - 1) / 64] >> ((p - 1) % 64)) & 1u)) {
      fired |= static_cast<uint16_t>(1u << t);
    }
  }
  return fired;
}

// The counter's value in the request's window (0 if its window has ended).
int64_t UsedNow(const MemoryStore::Counter* c, const WindowBounds& w) {
  return c != nullptr && c->window == Window32(w) ? c->used : 0;
}
uint16_t FiredNow(const MemoryStore::Counter* c, const WindowBounds& w) {
  return c != nullptr && c->window == Window32(w) ? c->fired : 0;
}

ABSL_ATTRIBUTE_ALWAYS_INLINE inline uint32_t ExpiryFor(const StoreRequest& req,
                                                       absl::Duration grace) {
  absl::Time latest = req.now;
  for (size_t i = 0; i < req.windows.size(); ++i) {
    const WindowBounds& w = req.windows[i];
    // A sliding count is read as the previous one for one more window; a gcra debt lasts at most
    // a quota's worth of units, a window (plus the rounding of its emission interval).
    const Limit& limit = req.plan->limits[i];
    const absl::Duration after = IsSliding(limit) ? w.end - w.start
                                 : IsGcra(limit)  ? 2 * (w.end - w.start)
                                                  : absl::ZeroDuration();
    latest = std::max(latest, w.end + after);
  }
  return static_cast<uint32_t>(std::clamp<int64_t>(absl::ToUnixSeconds(latest + grace), 0,
                                                   std::numeric_limits<uint32_t>::max()));
}

// A sliding or gcra limit's state as a decision at `now` in window `w` reads it from its counter
// (limiter/algorithm.h). A gcra counter holds the theoretical arrival time in microseconds after
// the start of the window it was written in (its `window`); a sliding counter holds
// SlidingPack(prev, cur) of its window.
struct AlgoState {
  bool usable = true;
  int64_t debt = 0;  // gcra: microseconds the arrival time is ahead of now
  int64_t prev = 0;  // sliding: counts in the request's frame
  int64_t cur = 0;
  // sliding: the counter belongs to the window after the request's (a decision that waited for
  // the lock while a later one moved the counter on): decided against it as at that window's
  // start (prev weighs in full), written there, and reported as cur = prev + cur, prev = 0.
  bool late = false;
  int64_t late_prev = 0;  // the counter's own prev, when late
  uint16_t fired = 0;     // sliding: thresholds fired in the counter's window (as the request's)
};

AlgoState ReadAlgo(const Limit& limit, const MemoryStore::Counter* c, const WindowBounds& w,
                   absl::Time now) {
  AlgoState s;
  if (c == nullptr || (c->used == 0 && c->window == 0)) return s;
  // How many windows before the request's the counter was written (negative: after).
  const int32_t behind = static_cast<int32_t>(Window32(w) - c->window);
  if (IsGcra(limit)) {
    const int64_t length_us = absl::ToInt64Microseconds(w.end - w.start);
    if (behind < -1 || behind > 2) return s;  // long gone (or a clock far back): a full bucket
    const int64_t tat = absl::ToUnixMicros(w.start) - behind * length_us + c->used;
    s.debt = std::max<int64_t>(tat - absl::ToUnixMicros(now), 0);
    // No charge leaves more than a quota's worth of debt, less than two windows.
    s.usable = c->used >= 0 && s.debt <= 2 * length_us;
    return s;
  }
  if (!SlidingValid(c->used)) {
    s.usable = false;
    return s;
  }
  const int64_t prev = c->used / config::kSlidingRadix;
  const int64_t cur = c->used % config::kSlidingRadix;
  if (behind == 0) {
    s.prev = prev;
    s.cur = cur;
    s.fired = c->fired;
  } else if (behind == 1) {
    s.prev = cur;
  } else if (behind == -1) {
    s.late = true;
    s.late_prev = prev;
    s.cur = prev + cur;
    s.fired = c->fired;
  }
  return s;
}

// The units a sliding or gcra state stands for now (what answers call used), and whether `need`
// more fit.
bool AlgoFits(const Limit& limit, const AlgoState& s, const WindowBounds& w, absl::Time now,
              int64_t need) {
  if (!s.usable) return false;
  if (IsGcra(limit)) return GcraFits(limit, s.debt, need);
  return LimitUnits(limit, w, now, s.cur, s.prev) <= limit.quota - need;
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
  // The alert layouts the entries refer to, by id (usually one per plan and set of effective
  // quotas; old ones stay until the sweep finds them unused). Guarded by mu.
  absl::flat_hash_map<uint32_t, std::shared_ptr<const AlertLayout>> layouts;
  // Bits of quotas not in force, by subject (MemoryStore::OtherQuota). Guarded by mu.
  absl::flat_hash_map<std::string, OtherQuotas, SubjectHash, SubjectEq> others;
  // What open reservations hold, by subject: only subjects with an open reservation, so the
  // others pay one emptiness check per decision for it. Guarded by mu.
  absl::flat_hash_map<std::string, Holds, SubjectHash, SubjectEq> holds;
  // The reservations of this shard's subjects, by id. Guarded by mu.
  absl::flat_hash_map<std::string, Reservation, SubjectHash, SubjectEq> reservations;
  // The open reservations of `reservations` by expiry, then id, so that finding the due ones reads
  // only those. Guarded by mu.
  struct DueOrder {
    using is_transparent = void;
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      if (a.first != b.first) return a.first < b.first;
      return std::string_view(a.second) < std::string_view(b.second);
    }
  };
  absl::btree_set<std::pair<absl::Time, std::string>, DueOrder> due;
  // The ended reservations of `reservations`, oldest end first (ids that Sweep forgot since
  // included): past the shard's bound the oldest is forgotten early, so ended ones never stop
  // new ones. Guarded by mu.
  std::deque<std::string> ended;
  size_t open = 0;  // open reservations in `reservations`. Guarded by mu.

  // Remembers that reservation `id` ended, forgetting the oldest ended ones beyond `bound`.
  void Ended(std::string_view id, size_t bound) {
    ended.emplace_back(id);
    while (ended.size() > bound) {
      auto it = reservations.find(ended.front());
      if (it != reservations.end() && !it->second.open) reservations.erase(it);
      ended.pop_front();
    }
  }

  const Holds* HoldsOf(std::string_view subject) const {
    if (holds.empty()) [[likely]]
      return nullptr;
    auto it = holds.find(subject);
    return it == holds.end() ? nullptr : &it->second;
  }
  static int64_t HeldOf(const Holds* list, uint16_t tag) {
    if (list == nullptr) return 0;
    for (const Hold& h : *list) {
      if (h.tag == tag) return h.amount;
    }
    return 0;
  }
  // Adds (sign +1) or takes back (-1) what `r` holds.
  void ChangeHolds(const Reservation& r, int sign) {
    if (r.holds.empty()) return;
    Holds& list = holds[r.subject];
    for (const Hold& h : r.holds) {
      auto it =
          std::find_if(list.begin(), list.end(), [&](const Hold& x) { return x.tag == h.tag; });
      if (it == list.end()) it = list.insert(list.end(), Hold{.tag = h.tag});
      it->amount = std::clamp<int64_t>(it->amount + sign * h.amount, 0, kMaxUsed);
    }
    list.erase(
        std::remove_if(list.begin(), list.end(), [](const Hold& x) { return x.amount == 0; }),
        list.end());
    if (list.empty()) holds.erase(r.subject);
  }
  // result.held for `plan`: what is held of each of its limits now (empty when nothing is).
  void FillHeld(std::string_view subject, const Plan& plan, StoreResult& result) const {
    result.held.clear();
    const Holds* list = HoldsOf(subject);
    if (list == nullptr) return;
    for (const Limit& limit : plan.limits) result.held.push_back(HeldOf(list, Tag16(limit)));
  }

  const AlertLayout* Layout(uint32_t id) const {
    auto it = layouts.find(id);
    return it == layouts.end() ? nullptr : it->second.get();
  }
  void Remember(const Plan& plan) {
    if (plan.alerts != nullptr) layouts.try_emplace(plan.alert_layout, plan.alerts);
  }

  // Keeps `q` (what `subject` fired under a quota that is no longer in force). At most
  // kMaxOtherQuotas per subject: beyond, the oldest goes (should its quota come back in this
  // window, its thresholds fire again: a repeated alert rather than unbounded memory).
  void Stash(std::string_view subject, const OtherQuota& q) {
    OtherQuotas& list = others[subject];
    for (OtherQuota& o : list) {
      if (o.tag == q.tag && o.quota == q.quota) {
        o = q;
        return;
      }
    }
    if (list.size() >= kMaxOtherQuotas) list.erase(list.begin());
    list.push_back(q);
  }
  // Takes back what was stashed for `subject`'s limit `tag` under `quota`, if it belongs to
  // counter window `window` (what belongs to an ended window is dropped).
  std::array<uint64_t, 2> Take(std::string_view subject, uint16_t tag, int64_t quota,
                               uint32_t window) {
    std::array<uint64_t, 2> set{};
    auto it = others.find(subject);
    if (it == others.end()) return set;
    OtherQuotas& list = it->second;
    for (size_t k = 0; k < list.size(); ++k) {
      if (list[k].tag != tag || list[k].quota != quota) continue;
      if (list[k].window == window) set = list[k].percents;
      list.erase(list.begin() + static_cast<ptrdiff_t>(k));
      break;
    }
    if (list.empty()) others.erase(it);
    return set;
  }
  // Drops what is stashed for `subject`'s limits whose tag satisfies `pred`.
  template <typename Pred>
  void Drop(std::string_view subject, Pred pred) {
    auto it = others.find(subject);
    if (it == others.end()) return;
    OtherQuotas& list = it->second;
    list.erase(
        std::remove_if(list.begin(), list.end(), [&](const OtherQuota& o) { return pred(o.tag); }),
        list.end());
    if (it->second.empty()) others.erase(it);
  }

  // The fired bits of counter `c` (found under tag `old_tag`, written under layout `from`) as
  // they stand for `limit`: re-read by percentage when its quota is the one they fired under (or
  // unknown); otherwise stashed with their quota, and those of `limit`'s quota taken back.
  uint16_t FiredFor(std::string_view subject, const MemoryStore::Counter& c, uint16_t old_tag,
                    uint32_t expires, const Limit& limit, const AlertLayout* from) {
    const AlertLayout::LimitAlerts* before = from->Find(old_tag);
    if (before != nullptr && (before->quota == 0 || before->quota == limit.quota)) {
      return BitsOf(PercentSet(c.fired, before->percents), limit.thresholds);
    }
    if (before != nullptr && c.fired != 0) {
      Stash(subject, {.tag = Tag16(limit),
                      .window = c.window,
                      .quota = before->quota,
                      .expires = expires,
                      .percents = PercentSet(c.fired, before->percents)});
    }
    return BitsOf(Take(subject, Tag16(limit), limit.quota, c.window), limit.thresholds);
  }

  // Makes `entry` fit `plan`: its counters first, in the plan's order, with fired bits in its
  // layout and for its quotas; the counters of other limits after them.
  void Adapt(std::string_view subject, Entry& entry, const Plan& plan) {
    const AlertLayout* from = Layout(entry.alert_layout);
    const bool legacy = from != nullptr && from->legacy;
    // No layout (a plan built by hand, a version-1 snapshot): bits are read by position.
    const bool positional = from == nullptr || (legacy && from->limits.empty());
    absl::InlinedVector<MemoryStore::Counter, 2> out(plan.limits.size());
    absl::InlinedVector<bool, 4> taken(entry.counters.size(), false);
    for (size_t i = 0; i < plan.limits.size(); ++i) {
      const Limit& limit = plan.limits[i];
      const uint16_t want = legacy ? LegacyTag16(limit) : Tag16(limit);
      size_t k = i < entry.counters.size() && entry.counters[i].tag == want && !taken[i]
                     ? i
                     : entry.counters.size();
      for (size_t j = 0; k == entry.counters.size() && j < entry.counters.size(); ++j) {
        if (!taken[j] && entry.counters[j].tag == want) k = j;
      }
      out[i].tag = Tag16(limit);
      if (k == entry.counters.size()) continue;
      taken[k] = true;
      MemoryStore::Counter c = entry.counters[k];
      if (!positional) c.fired = FiredFor(subject, c, want, entry.expires, limit, from);
      c.tag = Tag16(limit);
      out[i] = c;
    }
    // Limits this plan does not have keep their counters (another plan may count them again in
    // this window) and put their bits aside with their quota. Those of a legacy entry cannot be
    // matched with a limit any more once the entry has left its layout, and are dropped.
    for (size_t k = 0; k < entry.counters.size() && !legacy; ++k) {
      if (taken[k]) continue;
      MemoryStore::Counter c = entry.counters[k];
      if (c.fired != 0 && !positional) {
        const AlertLayout::LimitAlerts* before = from->Find(c.tag);
        if (before != nullptr && before->quota != 0) {
          Stash(subject, {.tag = c.tag,
                          .window = c.window,
                          .quota = before->quota,
                          .expires = entry.expires,
                          .percents = PercentSet(c.fired, before->percents)});
        }
      }
      c.fired = 0;
      if (c.used != 0) out.push_back(c);
    }
    entry.counters = std::move(out);
    Remember(plan);
    entry.alert_layout = plan.alert_layout;
  }

  // The first half of a decision, under the lock: finds (and adapts) the subject's entry, fills
  // result.used with the counters in the request's windows and result.allowed with whether every
  // limit fits. Changes no counter. Returns the entry, or nullptr when the subject has none.
  //
  // What open reservations hold counts as used; `hold` more is asked for on every counting limit
  // besides the cost, and `slot` asks for a slot of every concurrent limit (a reservation). Any
  // request of cost >= 1 needs a free slot; only a reservation takes one.
  ABSL_ATTRIBUTE_ALWAYS_INLINE Entry* Admit(const StoreRequest& req, size_t hash,
                                            StoreResult& result, int64_t hold = 0,
                                            bool slot = false) {
    const Plan& plan = *req.plan;
    const size_t n = plan.limits.size();
    result.used.clear();  // filled below, one push at a time (resize() zeroes them out of line)
    auto it = map.find(req.subject, hash);
    Entry* entry = it == map.end() ? nullptr : &it->second;
    if (entry != nullptr && (entry->alert_layout != plan.alert_layout || !Aligned(*entry, plan))) {
      Adapt(req.subject, *entry, plan);
    }
    const Holds* held = HoldsOf(req.subject);
    bool allowed = true;
    result.prev.clear();
    for (size_t i = 0; i < n; ++i) {
      const Limit& limit = plan.limits[i];
      if (limit.algorithm != config::Algorithm::kFixed) [[unlikely]] {
        const WindowBounds& w = req.windows[i];
        const AlgoState s = ReadAlgo(limit, entry ? &entry->counters[i] : nullptr, w, req.now);
        result.used.emplace_back(!s.usable ? -1 : IsGcra(limit) ? s.debt : s.cur);
        if (IsSliding(limit)) {
          result.prev.resize(n);
          result.prev[i] = s.prev;
        }
        const int64_t need = req.cost + hold + HeldOf(held, Tag16(limit));
        if (!AlgoFits(limit, s, w, req.now, need) && !limit.shadow &&
            req.mode == DecideMode::kAdmit) {
          allowed = false;
        }
        continue;
      }
      if (Concurrent(limit)) [[unlikely]] {
        result.used.emplace_back(0);
        const int64_t need = req.cost > 0 || slot ? 1 : 0;
        if (HeldOf(held, Tag16(limit)) > limit.quota - need && !limit.shadow &&
            req.mode == DecideMode::kAdmit) {
          allowed = false;  // a report takes no slot: what it charges was already spent
        }
        continue;
      }
      const MemoryStore::Counter* c = entry ? &entry->counters[i] : nullptr;
      const int64_t used = result.used.emplace_back(UsedNow(c, req.windows[i]));
      // Written so that nothing overflows (quota, held <= kMaxUsed; cost, hold <= kMaxCost): an
      // unusable counter (store.h) only comes from crafted state, and it denies. A shadow limit
      // never denies, nor does any limit for a report.
      const int64_t room =
          limit.quota - req.cost - (held ? HeldOf(held, Tag16(limit)) + hold : hold);
      if ((!UsableCounter(used) || used > room) && !limit.shadow && req.mode == DecideMode::kAdmit)
          [[unlikely]] {
        allowed = false;
      }
    }
    result.allowed = allowed;
    if (held != nullptr) [[unlikely]]
      FillHeld(req.subject, plan, result);
    return entry;
  }

  // The subject's new entry, counters tagged for req.plan's limits. REQUIRES: it has none.
  Entry* NewEntry(const StoreRequest& req) {
    const Plan& plan = *req.plan;
    auto [ins, unused] = map.try_emplace(std::string(req.subject));
    Entry* entry = &ins->second;
    entry->alert_layout = plan.alert_layout;
    Remember(plan);
    entry->counters.resize(plan.limits.size());
    for (size_t j = 0; j < plan.limits.size(); ++j) entry->counters[j].tag = Tag16(plan.limits[j]);
    return entry;
  }

  struct Applied {
    bool wrote = false;     // a counter was written
    bool recorded = false;  // an event was pushed to the outbox
  };

  // Apply's part for limit i of req.plan when it is sliding or gcra: an admission charges the
  // cost (past what fits only when charged regardless: a shadow limit, a report, a settle; up to
  // the algorithm's cap) and fires the sliding thresholds its estimate reaches; a denial fires a
  // sliding limit's 100% threshold if this limit denied (or, shadow, would have). `entry` is
  // created when something is written.
  Applied ApplyAlgorithm(const StoreRequest& req, size_t i, Entry*& entry, StoreResult& result,
                         Outbox& outbox) {
    Applied out;
    const Limit& limit = req.plan->limits[i];
    const WindowBounds& w = req.windows[i];
    MemoryStore::Counter* c = entry ? &entry->counters[i] : nullptr;
    const AlgoState s = ReadAlgo(limit, c, w, req.now);
    if (!s.usable) return out;  // denies (unless shadow), left as it is, fires nothing
    const bool allowed = result.allowed;
    const int64_t now_us = absl::ToUnixMicros(req.now);
    if (IsGcra(limit)) {
      if (!allowed) return out;
      const int64_t debt = GcraCharge(limit, s.debt, req.cost);
      if (entry == nullptr) entry = NewEntry(req);
      MemoryStore::Counter& target = entry->counters[i];
      target.window = Window32(w);
      target.used = now_us + debt - absl::ToUnixMicros(w.start);
      target.fired = 0;
      result.used[i] = debt;
      out.wrote = true;
      return out;
    }
    // Sliding: the counter of the request's window (or, late, of the one after it).
    const int64_t weight = s.late ? kPpm : SlidingWeight(w, req.now);
    const int64_t share = SlidingShare(s.late ? s.late_prev : s.prev, weight);
    const int64_t own_cur = s.late ? s.cur - s.late_prev : s.cur;
    int64_t cur = own_cur;
    if (allowed) {
      cur = std::min(own_cur + req.cost, config::kMaxSlidingCount);
    } else if (own_cur + share + req.cost + result.held_at(i) <= limit.quota) {
      return out;  // a denial fires only for a limit that denied (or, shadow, would have)
    }
    const int64_t estimate = cur + share;
    uint16_t newly = 0;
    for (size_t t = 0; t < limit.thresholds.size(); ++t) {
      const Threshold& th = limit.thresholds[t];
      const uint16_t bit = static_cast<uint16_t>(1u << t);
      if (s.fired & bit) continue;
      if (!(allowed ? estimate >= th.count : th.percent == 100)) continue;
      // The window's bounds as the counter's: the request's, or (late) the next.
      WindowBounds at = w;
      if (s.late) at = {.id = w.id + 1, .start = w.end, .end = w.end + (w.end - w.start)};
      if (outbox.Push(MakeEvent(req, limit, at, th.percent, estimate))) newly |= bit;
    }
    out.recorded = newly != 0;
    if (!allowed && newly == 0) return out;
    if (entry == nullptr) entry = NewEntry(req);
    MemoryStore::Counter& target = entry->counters[i];
    const int64_t prev = s.late ? s.late_prev : s.prev;
    target.window = s.late ? Window32(w) + 1 : Window32(w);
    target.used = SlidingPack(prev, cur);
    target.fired = static_cast<uint16_t>(s.fired | newly);
    result.used[i] = s.late ? prev + cur : cur;
    out.wrote = true;
    return out;
  }

  // The second half, under the same lock: applies the verdict result.allowed (the request's own,
  // or its group's) to `entry` (Admit's, or nullptr) and result.used. A peek changes nothing. A
  // denial changes nothing but may fire a 100% threshold of a limit that denied (or, shadow,
  // would have); an admission adds the cost everywhere (a shadow counter past its quota stops at
  // kMaxUsed) and may fire any threshold. Returns whether an event was recorded. Inlined: it is
  // the hot half of every decision (a call costs the single path measurably).
  ABSL_ATTRIBUTE_ALWAYS_INLINE bool Apply(const StoreRequest& req, Entry* entry,
                                          StoreResult& result, Outbox& outbox,
                                          absl::Duration grace) {
    if (req.cost == 0) return false;
    const Plan& plan = *req.plan;
    const size_t n = plan.limits.size();
    const bool allowed = result.allowed;
    bool recorded = false;
    bool wrote = false;  // the expiry is computed once, and only when something was written
    for (size_t i = 0; i < n; ++i) {
      const Limit& limit = plan.limits[i];
      if (Concurrent(limit)) [[unlikely]]
        continue;  // no counter: reservations hold its slots
      if (limit.algorithm != config::Algorithm::kFixed) [[unlikely]] {
        const Applied applied = ApplyAlgorithm(req, i, entry, result, outbox);
        recorded = recorded || applied.recorded;
        wrote = wrote || applied.wrote;
        continue;
      }
      const WindowBounds& w = req.windows[i];
      // An unusable counter denies (unless shadow) but is left as it is: nothing is written or
      // fired for it.
      const int64_t used = result.used[i];
      int64_t after = used;
      if (allowed) [[likely]] {
        // An admission: every enforced counter is usable and has room; a shadow one (any one,
        // for a report) may be unusable (left alone) or past its quota (it stops at kMaxUsed).
        if (!UsableCounter(used)) [[unlikely]]
          continue;
        after = used > kMaxUsed - req.cost ? kMaxUsed : used + req.cost;
      } else if (!UsableCounter(used) || used <= limit.quota - req.cost - result.held_at(i)) {
        continue;  // a denial fires only for a limit that denied (or, shadow, would have)
      }

      const MemoryStore::Counter* current = entry ? &entry->counters[i] : nullptr;
      uint16_t fired = FiredNow(current, w);
      uint16_t newly = 0;
      // Nothing fires under a quota of 0 (a credit limit with nothing granted): there is nothing
      // to have used a share of, and a grant then arms every threshold under the new quota.
      const size_t thresholds = limit.quota > 0 ? limit.thresholds.size() : 0;
      for (size_t t = 0; t < thresholds; ++t) {
        const Threshold& th = limit.thresholds[t];
        const uint16_t bit = static_cast<uint16_t>(1u << t);
        if (fired & bit) continue;
        const bool crossed = allowed ? after >= th.count : th.percent == 100;
        if (!crossed) continue;
        // The flag is set only if the event is recorded: a full outbox leaves it armed.
        if (outbox.Push(MakeEvent(req, limit, w, th.percent, after))) newly |= bit;
      }
      recorded = recorded || newly != 0;
      if (!allowed && newly == 0) continue;

      if (entry == nullptr) entry = NewEntry(req);
      MemoryStore::Counter& c = entry->counters[i];
      if (c.window != Window32(w)) {
        c = MemoryStore::Counter{.used = 0, .window = Window32(w), .tag = c.tag};
      }
      c.used = after;
      c.fired = static_cast<uint16_t>(fired | newly);
      result.used[i] = after;
      wrote = true;
    }
    if (wrote) entry->expires = std::max(entry->expires, ExpiryFor(req, grace));
    return recorded;
  }
};

MemoryStore::MemoryStore(Options options)
    : shard_bits_(std::bit_width(std::max<size_t>(options.shards, 1) - 1)),
      options_(options),
      outbox_(options.outbox_capacity) {
  shards_ = std::make_unique<Shard[]>(size_t{1} << shard_bits_);
}

MemoryStore::~MemoryStore() = default;

MemoryStore::Shard& MemoryStore::ShardFor(std::string_view subject) const {
  return ShardForHash(SubjectHash{}(subject));
}

size_t MemoryStore::ShardIndex(size_t hash) const {
  // The top bits pick the shard; the map inside uses the low bits, so the two stay independent.
  return shard_bits_ == 0 ? 0 : hash >> (64 - shard_bits_);
}

MemoryStore::Shard& MemoryStore::ShardForHash(size_t hash) const {
  return shards_[ShardIndex(hash)];
}

void MemoryStore::Decide(const StoreRequest& req, DecideCallback done) {
  std::move(done)(*DecideNow(req));
}

std::optional<absl::StatusOr<StoreResult>> MemoryStore::DecideNow(const StoreRequest& req) {
  StoreResult result;
  bool recorded = false;  // events pushed to the outbox: its listener is told after the lock
  // One hash for both the shard and the lookup in it.
  const size_t hash = SubjectHash{}(req.subject);
  Shard& shard = ShardForHash(hash);
  {
    std::lock_guard lock(shard.mu);
    Entry* entry = shard.Admit(req, hash, result);
    recorded = shard.Apply(req, entry, result, outbox_, options_.grace);
  }
  if (recorded) outbox_.NotifyRecorded();
  return result;
}

void MemoryStore::DecideGroup(const StoreGroupRequest& req, GroupDecideCallback done) {
  const size_t n = req.parts.size();
  StoreGroupResult out;
  out.parts.resize(n);
  absl::InlinedVector<size_t, 4> hashes(n);
  absl::InlinedVector<size_t, 4> order;  // distinct shard indexes, increasing: the lock order
  for (size_t p = 0; p < n; ++p) {
    hashes[p] = SubjectHash{}(req.parts[p].subject);
    order.push_back(ShardIndex(hashes[p]));
  }
  std::sort(order.begin(), order.end());
  order.erase(std::unique(order.begin(), order.end()), order.end());
  bool recorded = false;
  {
    // std::mutex is not recursive: each shard is locked once, in increasing order, so two groups
    // (and a group and a single decision, which takes one lock) never wait on each other in a
    // cycle.
    absl::InlinedVector<std::unique_lock<std::mutex>, 4> locks;
    locks.reserve(order.size());
    for (size_t s : order) locks.emplace_back(shards_[s].mu);

    bool allowed = true;
    for (size_t p = 0; p < n; ++p) {
      (void)shards_[ShardIndex(hashes[p])].Admit(req.parts[p], hashes[p], out.parts[p]);
      allowed = allowed && out.parts[p].allowed;
    }
    out.allowed = allowed;
    for (size_t p = 0; p < n; ++p) {
      const StoreRequest& part = req.parts[p];
      Shard& shard = shards_[ShardIndex(hashes[p])];
      out.parts[p].allowed = allowed;
      // Looked up again: another part's new entry in the same shard may have moved this one.
      auto it = shard.map.find(part.subject, hashes[p]);
      Entry* entry = it == shard.map.end() ? nullptr : &it->second;
      recorded = shard.Apply(part, entry, out.parts[p], outbox_, options_.grace) || recorded;
    }
  }
  if (recorded) outbox_.NotifyRecorded();
  std::move(done)(std::move(out));
}

void MemoryStore::Usage(const StoreRequest& req, UsageCallback done) {
  const Plan& plan = *req.plan;
  std::vector<LimitUsage> usage(plan.limits.size());
  Shard& shard = ShardFor(req.subject);
  {
    std::lock_guard lock(shard.mu);
    auto it = shard.map.find(req.subject);
    if (it != shard.map.end()) {
      Entry& entry = it->second;
      if (entry.alert_layout != plan.alert_layout || !Aligned(entry, plan)) {
        shard.Adapt(req.subject, entry, plan);
      }
      for (size_t i = 0; i < plan.limits.size(); ++i) {
        const Counter* c = &entry.counters[i];
        const Limit& limit = plan.limits[i];
        if (limit.algorithm != config::Algorithm::kFixed) {
          const AlgoState s = ReadAlgo(limit, c, req.windows[i], req.now);
          usage[i].used = !s.usable ? -1 : IsGcra(limit) ? s.debt : s.cur;
          usage[i].prev = s.prev;
          for (size_t t = 0; t < limit.thresholds.size(); ++t) {
            if (s.fired & (1u << t)) usage[i].fired.push_back(limit.thresholds[t].percent);
          }
          continue;
        }
        usage[i].used = UsedNow(c, req.windows[i]);
        const uint16_t fired = FiredNow(c, req.windows[i]);
        for (size_t t = 0; t < plan.limits[i].thresholds.size(); ++t) {
          if (fired & (1u << t)) usage[i].fired.push_back(plan.limits[i].thresholds[t].percent);
        }
      }
    }
    if (const Holds* list = shard.HoldsOf(req.subject)) {
      for (size_t i = 0; i < plan.limits.size(); ++i) {
        usage[i].held = Shard::HeldOf(list, Tag16(plan.limits[i]));
      }
    }
  }
  std::move(done)(std::move(usage));
}

void MemoryStore::Reset(const StoreRequest& req, std::optional<size_t> limit_index,
                        StatusCallback done) {
  const Plan& plan = *req.plan;
  Shard& shard = ShardFor(req.subject);
  {
    std::lock_guard lock(shard.mu);
    auto it = shard.map.find(req.subject);
    if (it != shard.map.end()) {
      Entry& entry = it->second;
      if (entry.alert_layout != plan.alert_layout || !Aligned(entry, plan)) {
        shard.Adapt(req.subject, entry, plan);
      }
      absl::InlinedVector<uint16_t, 4> tags;
      for (size_t i = 0; i < plan.limits.size(); ++i) {
        if (limit_index.has_value() && *limit_index != i) continue;
        entry.counters[i] = Counter{.tag = entry.counters[i].tag};
        tags.push_back(entry.counters[i].tag);
      }
      shard.Drop(req.subject, [&](uint16_t tag) {
        return std::find(tags.begin(), tags.end(), tag) != tags.end();
      });
      // Nothing left to remember: the entry goes (counters of other limits keep it otherwise).
      if (std::all_of(entry.counters.begin(), entry.counters.end(),
                      [](const Counter& c) { return c.used == 0 && c.fired == 0; })) {
        shard.map.erase(it);
        shard.others.erase(req.subject);
      }
    }
  }
  std::move(done)(absl::OkStatus());
}

void MemoryStore::Reserve(const StoreReserveRequest& req, DecideCallback done) {
  const StoreRequest& d = req.decide;
  const size_t hash = SubjectHash{}(d.subject);
  Shard& shard = ShardForHash(hash);
  StoreResult result;
  bool recorded = false;
  {
    std::lock_guard lock(shard.mu);
    if (shard.reservations.contains(req.id)) {
      std::move(done)(absl::AlreadyExistsError("store: reservation id already in use"));
      return;
    }
    if (shard.open >= PerShard()) {
      std::move(done)(absl::ResourceExhaustedError(
          "too many reservations at once: settle or release some, or wait for them to expire"));
      return;
    }
    Entry* entry = shard.Admit(d, hash, result, req.hold, /*slot=*/true);
    recorded = shard.Apply(d, entry, result, outbox_, options_.grace);
    if (result.allowed) {
      Reservation r{.subject = std::string(d.subject),
                    .plan = d.plan->name,
                    .estimate = req.hold,
                    .expires_at = req.expires_at,
                    .charge_on_expiry = req.charge_on_expiry};
      for (const Limit& limit : d.plan->limits) {
        const int64_t amount = Concurrent(limit) ? 1 : req.hold;
        if (amount > 0) r.holds.push_back({.tag = Tag16(limit), .amount = amount});
      }
      shard.ChangeHolds(r, +1);
      shard.due.emplace(req.expires_at, std::string(req.id));
      shard.reservations.emplace(std::string(req.id), std::move(r));
      ++shard.open;
      shard.FillHeld(d.subject, *d.plan, result);
    }
  }
  if (recorded) outbox_.NotifyRecorded();
  std::move(done)(std::move(result));
}

void MemoryStore::Settle(const StoreSettleRequest& req, SettleCallback done) {
  using Outcome = StoreSettleResult::Outcome;
  const StoreRequest& d = req.decide;
  const size_t hash = SubjectHash{}(d.subject);
  Shard& shard = ShardForHash(hash);
  StoreSettleResult out;
  bool recorded = false;
  {
    std::lock_guard lock(shard.mu);
    auto it = shard.reservations.find(req.id);
    if (it == shard.reservations.end() || it->second.subject != d.subject) {
      out.outcome = Outcome::kNotFound;
      std::move(done)(std::move(out));
      return;
    }
    Reservation& r = it->second;
    StoreRequest charge = d;
    charge.cost = 0;
    if (!r.open) {
      out.ended_by = r.ended_by;
      out.charged = r.charged;
      if (req.end == ReservationEnd::kExpire) {
        out.outcome = Outcome::kNotDue;
      } else if (req.end == r.ended_by &&
                 (req.end == ReservationEnd::kRelease || d.cost == r.charged)) {
        out.outcome = Outcome::kRepeated;
      } else {
        out.outcome = Outcome::kConflict;
      }
    } else if (req.end == ReservationEnd::kExpire && r.expires_at > d.now) {
      out.outcome = Outcome::kNotDue;
    } else {
      out.outcome = Outcome::kEnded;
      switch (req.end) {
        case ReservationEnd::kSettle:
          charge.cost = d.cost;
          break;
        case ReservationEnd::kRelease:
          break;
        case ReservationEnd::kExpire:
          charge.cost = r.charge_on_expiry ? r.estimate : 0;
          break;
      }
      shard.ChangeHolds(r, -1);
      shard.due.erase(std::pair<absl::Time, std::string_view>(r.expires_at, req.id));
      r.holds.clear();
      r.open = false;
      --shard.open;
      r.ended_by = req.end;
      r.charged = charge.cost;
      out.ended_by = req.end;
      out.charged = charge.cost;
    }
    // Read the counters (adapting the entry to the plan); a charge is applied as an admission
    // whatever the quotas say: the work was done.
    Entry* entry = shard.Admit(charge, hash, out.result);
    out.result.allowed = true;
    if (out.outcome == Outcome::kEnded && charge.cost > 0) {
      const absl::InlinedVector<int64_t, 4> before = out.result.used;
      recorded = shard.Apply(charge, entry, out.result, outbox_, options_.grace);
      out.overshoot.resize(before.size());
      for (size_t i = 0; i < before.size(); ++i) {
        const Limit& limit = d.plan->limits[i];
        const int64_t after = out.result.used[i];
        if (limit.algorithm != config::Algorithm::kFixed) {
          if (UsableCounter(after)) {
            out.overshoot[i] = AlgorithmOvershoot(limit, d.windows[i], d.now, after,
                                                  out.result.prev_at(i), charge.cost);
          }
          continue;
        }
        if (UsableCounter(before[i]) && UsableCounter(after) && after > limit.quota) {
          out.overshoot[i] = after - std::max(limit.quota, before[i]);
        }
      }
    }
    shard.FillHeld(d.subject, *d.plan, out.result);
    if (out.outcome == Outcome::kEnded) shard.Ended(req.id, PerShard());
  }
  if (recorded) outbox_.NotifyRecorded();
  std::move(done)(std::move(out));
}

void MemoryStore::Extend(std::string_view subject, std::string_view id, absl::Time expires_at,
                         absl::Time now, ExtendCallback done) {
  (void)now;
  Shard& shard = ShardFor(subject);
  StoreExtendResult out;
  {
    std::lock_guard lock(shard.mu);
    auto it = shard.reservations.find(id);
    if (it == shard.reservations.end() || it->second.subject != subject) {
      out.outcome = StoreExtendResult::Outcome::kNotFound;
    } else if (!it->second.open) {
      out.outcome = StoreExtendResult::Outcome::kEnded;
    } else {
      shard.due.erase(std::pair<absl::Time, std::string_view>(it->second.expires_at, id));
      shard.due.emplace(expires_at, std::string(id));
      it->second.expires_at = expires_at;
      out.outcome = StoreExtendResult::Outcome::kExtended;
      out.expires_at = expires_at;
    }
  }
  std::move(done)(out);
}

void MemoryStore::DueReservations(absl::Time now, size_t max, DueCallback done) {
  std::vector<DueReservation> due;
  for (size_t s = 0; s < (size_t{1} << shard_bits_) && due.size() < max; ++s) {
    const Shard& shard = shards_[s];
    std::lock_guard lock(shard.mu);
    for (auto it = shard.due.begin(); it != shard.due.end() && it->first <= now; ++it) {
      if (due.size() >= max) break;
      // `due` follows `reservations`; a mismatch (none can arise) is skipped, not ended.
      const auto r = shard.reservations.find(it->second);
      if (r == shard.reservations.end() || !r->second.open || r->second.expires_at != it->first) {
        continue;
      }
      due.push_back({.id = it->second, .subject = r->second.subject, .plan = r->second.plan});
    }
  }
  std::move(done)(std::move(due));
}

size_t MemoryStore::open_reservations() const {
  size_t total = 0;
  for (size_t s = 0; s < (size_t{1} << shard_bits_); ++s) {
    std::lock_guard lock(shards_[s].mu);
    total += shards_[s].open;
  }
  return total;
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
    absl::erase_if(shard.layouts, [&](const auto& kv) {
      return std::find(in_use.begin(), in_use.end(), kv.first) == in_use.end();
    });
    // Ended reservations are remembered until kReservationMemory after their expiry; open ones
    // stay until they end (the reservation expirer ends those that are due).
    absl::erase_if(shard.reservations, [&](const auto& kv) {
      return !kv.second.open && kv.second.expires_at + kReservationMemory <= now;
    });
    absl::erase_if(shard.others, [&](auto& kv) {
      OtherQuotas& list = kv.second;
      list.erase(std::remove_if(list.begin(), list.end(),
                                [&](const OtherQuota& o) { return o.expires <= now_s; }),
                 list.end());
      return kv.second.empty() || !shard.map.contains(kv.first);
    });
  }
  return removed;
}

size_t MemoryStore::other_quota_count() const {
  size_t total = 0;
  for (size_t s = 0; s < (size_t{1} << shard_bits_); ++s) {
    std::lock_guard lock(shards_[s].mu);
    for (const auto& [subject, list] : shards_[s].others) total += list.size();
  }
  return total;
}

size_t MemoryStore::subject_count() const {
  size_t total = 0;
  for (size_t s = 0; s < (size_t{1} << shard_bits_); ++s) {
    std::lock_guard lock(shards_[s].mu);
    total += shards_[s].map.size();
  }
  return total;
}

void MemoryStore::ForEach(const std::function<void(const SubjectState&)>& fn,
                          const std::function<void(const ReservationState&)>& reservations) const {
  SubjectState state;
  for (size_t s = 0; s < (size_t{1} << shard_bits_); ++s) {
    const Shard& shard = shards_[s];
    std::lock_guard lock(shard.mu);
    for (const auto& [subject, entry] : shard.map) {
      state.subject = subject;
      state.expires = entry.expires;
      state.counters = entry.counters;
      if (state.alerts == nullptr || state.alerts->id != entry.alert_layout) {
        auto it = shard.layouts.find(entry.alert_layout);
        state.alerts = it == shard.layouts.end() ? nullptr : it->second;
      }
      state.other_quotas.clear();
      if (auto it = shard.others.find(subject); it != shard.others.end()) {
        state.other_quotas.assign(it->second.begin(), it->second.end());
      }
      fn(state);
    }
    if (!reservations) continue;
    ReservationState r;
    for (const auto& [id, res] : shard.reservations) {
      r.id = id;
      r.subject = res.subject;
      r.plan = res.plan;
      r.holds.clear();
      for (const Hold& h : res.holds) r.holds.emplace_back(h.tag, h.amount);
      r.estimate = res.estimate;
      r.expires_at = res.expires_at;
      r.charge_on_expiry = res.charge_on_expiry;
      r.open = res.open;
      r.ended_by = res.ended_by;
      r.charged = res.charged;
      reservations(r);
    }
  }
}

void MemoryStore::Restore(std::vector<SubjectState> states,
                          std::vector<ReservationState> reservations) {
  for (size_t s = 0; s < (size_t{1} << shard_bits_); ++s) {
    std::lock_guard lock(shards_[s].mu);
    shards_[s].map.clear();
    shards_[s].layouts.clear();
    shards_[s].others.clear();
    shards_[s].holds.clear();
    shards_[s].reservations.clear();
    shards_[s].due.clear();
    shards_[s].ended.clear();
    shards_[s].open = 0;
  }
  // Ended ones oldest first, so that the shard's `ended` list keeps their order.
  std::stable_sort(reservations.begin(), reservations.end(),
                   [](const ReservationState& a, const ReservationState& b) {
                     return a.open == b.open ? a.expires_at < b.expires_at : a.open;
                   });
  for (ReservationState& st : reservations) {
    Shard& shard = ShardFor(st.subject);
    std::lock_guard lock(shard.mu);
    Reservation r{.subject = std::move(st.subject),
                  .plan = std::move(st.plan),
                  .estimate = st.estimate,
                  .expires_at = st.expires_at,
                  .charge_on_expiry = st.charge_on_expiry,
                  .open = st.open,
                  .ended_by = st.ended_by,
                  .charged = st.charged};
    if (r.open) {
      for (const auto& [tag, amount] : st.holds) r.holds.push_back({.tag = tag, .amount = amount});
      shard.ChangeHolds(r, +1);
      shard.due.emplace(r.expires_at, st.id);
      ++shard.open;
    } else {
      shard.Ended(st.id, PerShard());
    }
    shard.reservations.insert_or_assign(std::move(st.id), std::move(r));
  }
  for (SubjectState& st : states) {
    Shard& shard = ShardFor(st.subject);
    std::lock_guard lock(shard.mu);
    uint32_t layout = 0;
    if (st.alerts != nullptr) {
      layout = st.alerts->id;
      shard.layouts.try_emplace(layout, std::move(st.alerts));
    }
    if (st.other_quotas.empty()) {
      shard.others.erase(st.subject);
    } else {
      shard.others.insert_or_assign(st.subject,
                                    OtherQuotas(st.other_quotas.begin(), st.other_quotas.end()));
    }
    shard.map.insert_or_assign(std::move(st.subject),
                               Entry{.expires = static_cast<uint32_t>(std::clamp<int64_t>(
                                         st.expires, 0, std::numeric_limits<uint32_t>::max())),
                                     .alert_layout = layout,
                                     .counters = std::move(st.counters)});
  }
}

}  // namespace memory
}  // namespace sluice
