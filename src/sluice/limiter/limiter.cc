#include "sluice/limiter/limiter.h"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/types/span.h"
#include "sluice/common/strings.h"
#include "sluice/common/subject.h"
#include "sluice/limiter/algorithm.h"

namespace sluice {
inline namespace limiter {
namespace {

using Windows = absl::InlinedVector<WindowBounds, 4>;

Windows WindowsFor(const Plan& plan, absl::Time now) {
  Windows windows;
  windows.reserve(plan.limits.size());
  for (const Limit& limit : plan.limits) {
    windows.push_back(limit.window_cache->Get(limit.window, plan.tz, now));
  }
  return windows;
}

// Fills every per-limit field that does not depend on the counters. Inlined: a call costs the
// single decision path measurably.
ABSL_ATTRIBUTE_ALWAYS_INLINE inline Decision SkeletonDecision(const Plan& plan,
                                                              const Windows& windows,
                                                              absl::Time now) {
  Decision d;
  d.plan = &plan;
  d.now = now;
  // One element at a time: resize() would zero each one first, out of line.
  for (size_t i = 0; i < plan.limits.size(); ++i) {
    const Limit& limit = plan.limits[i];
    d.limits.push_back({.limit = &limit,
                        .remaining = limit.quota,
                        .reset_after = SecondsUntilReset(limit.window, windows[i].end, now),
                        .window_start = windows[i].start,
                        .window_end = windows[i].end});
    if (IsGcra(limit)) [[unlikely]] {
      // A bucket nothing is known of: full.
      d.limits.back().remaining = limit.burst;
      d.limits.back().reset_after = 0;
    }
  }
  return d;
}

// Each limit's quota and shadow flag as ApplyCounters reads them. LiveTerms reads the plan itself,
// for an answer given while the plan is known to live (an in-process store's, a cached denial's);
// CopiedTerms reads a PlanQuotas copy, for an answer that may come after an effective plan is gone.
struct LiveTerms {
  const Plan& plan;
  [[nodiscard]] int64_t quota(size_t i) const { return plan.limits[i].quota; }
  [[nodiscard]] bool shadow(size_t i) const { return plan.limits[i].shadow; }
  [[nodiscard]] bool concurrent(size_t i) const {
    return plan.limits[i].window.kind == config::WindowSpec::Kind::kConcurrent;
  }
  [[nodiscard]] bool fixed(size_t i) const {
    return plan.limits[i].algorithm == config::Algorithm::kFixed;
  }
  [[nodiscard]] AlgorithmTerms algorithm(size_t i) const { return plan.limits[i]; }
};
struct CopiedTerms {
  const PlanQuotas& plan;
  [[nodiscard]] int64_t quota(size_t i) const { return plan.quotas[i]; }
  [[nodiscard]] bool shadow(size_t i) const { return i < plan.shadow.size() && plan.shadow[i]; }
  [[nodiscard]] bool concurrent(size_t i) const {
    return i < plan.concurrent.size() && plan.concurrent[i];
  }
  [[nodiscard]] bool fixed(size_t i) const {
    return i >= plan.algorithms.size() || plan.algorithms[i].algorithm == config::Algorithm::kFixed;
  }
  [[nodiscard]] AlgorithmTerms algorithm(size_t i) const { return plan.algorithms[i]; }
};

// True when every limit of `plan` is fixed: what the over-limit cache and the degraded ledger
// can stand in for.
bool CountersOnly(const Plan& plan) {
  return std::all_of(plan.limits.begin(), plan.limits.end(),
                     [](const Limit& l) { return l.algorithm == config::Algorithm::kFixed; });
}

// Whole seconds from `now` until `t`, rounded up; at least 1 (what a denial's Retry-After says).
int64_t RetrySeconds(absl::Time t, absl::Time now) {
  return std::max<int64_t>(SecondsUntil(t, now), 1);
}

// ApplyCounters' part for a sliding or gcra limit (limiter/algorithm.h): what the store's state
// stands for in units, and for a limit that denied (or, shadow, would have) the exact instant the
// same request would fit. `need`: what the request asked for (its cost and hold).
void ApplyAlgorithm(const StoreResult& result, size_t i, int64_t need, const AlgorithmTerms& t,
                    bool shadow, Decision& d) {
  LimitDecision& l = d.limits[i];
  const int64_t used = result.used[i];
  const int64_t held = std::clamp<int64_t>(result.held_at(i), 0, kMaxUsed);
  const int64_t capacity = LimitCapacity(t);
  const bool usable = UsableCounter(used);
  l.held = held;
  bool over = !usable;
  std::optional<absl::Time> fits_at;
  if (!usable) {
    l.used = capacity;
  } else if (IsGcra(t)) {
    l.used = GcraUnits(t, used);
    l.reset_after = AlgorithmResetAfter(t, {}, d.now, used, 0);
    over = result.allowed ? held > t.burst || used + held * t.emission_us > t.burst * t.emission_us
                          : !GcraFits(t, used, need + held);
    if (const int64_t wait = GcraWaitMicros(t, used, need + held); wait >= 0) {
      fits_at = d.now + absl::Microseconds(wait);
    }
  } else {
    const WindowBounds w{.start = l.window_start, .end = l.window_end};
    const int64_t prev = result.prev_at(i);
    l.used = used + SlidingShare(prev, SlidingWeight(w, d.now));
    l.reset_after = AlgorithmResetAfter(t, w, d.now, used, prev);
    over = result.allowed ? l.used > t.quota - held : l.used > t.quota - held - need;
    fits_at = SlidingFitsAt(t, w, prev, used, need + held);
  }
  l.remaining = l.used >= capacity - held ? 0 : capacity - held - l.used;
  if (shadow) {
    l.would_deny = over;
    return;
  }
  if (!usable) d.allowed = false;
  l.violated = !usable || (!result.allowed && over);
  if (l.violated) {
    d.retry_after = std::max(d.retry_after, fits_at ? RetrySeconds(*fits_at, d.now)
                                                    : std::max<int64_t>(l.reset_after, 1));
  }
}

// Applies the store's counters: per-limit used/remaining/violated/would_deny and the overall
// retry_after. A limit is violated when it alone would refuse the request: used + cost > quota
// (for a denial the store reports the unchanged counters, so this is the rule the store applied;
// for an admission the counters after it, so a shadow limit would have refused iff used > quota).
// An unusable counter (store.h) is exhausted: reported as used = quota, remaining 0, violated —
// and it denies even if a store said otherwise — unless its limit is shadow (it would deny, then).
// A shadow limit is never violated (docs/semantics.md, Shadow limits). Every value is then in
// [0, kMaxUsed], so nothing overflows. `terms` gives each limit's quota and shadow flag, in plan
// order (LiveTerms or CopiedTerms).
//
// What open reservations hold (StoreResult::held) counts as used: a limit is violated when
// used + held + what the request asked for > quota — its cost and `hold` on a counting limit, one
// slot on a concurrent limit for a request of cost >= 1 or a reservation (`slot`).
template <typename Terms>
void ApplyCounters(const StoreResult& result, int64_t cost, const Terms& terms, Decision& d,
                   int64_t hold = 0, bool slot = false) {
  d.allowed = result.allowed;
  for (size_t i = 0; i < d.limits.size(); ++i) {
    LimitDecision& l = d.limits[i];
    if (!terms.fixed(i)) [[unlikely]] {
      ApplyAlgorithm(result, i, cost + hold, terms.algorithm(i), terms.shadow(i), d);
      continue;
    }
    const int64_t quota = terms.quota(i);
    const bool usable = UsableCounter(result.used[i]);
    const int64_t held = std::clamp<int64_t>(result.held_at(i), 0, kMaxUsed);
    l.used = usable ? result.used[i] : quota;
    l.held = held;
    l.remaining = l.used >= quota - held ? 0 : quota - held - l.used;
    const int64_t need = terms.concurrent(i) ? (cost > 0 || slot ? 1 : 0) : cost + hold;
    const bool over =
        !usable || (result.allowed ? l.used > quota - held : l.used > quota - held - need);
    if (terms.shadow(i)) {
      l.would_deny = over;
      continue;
    }
    if (!usable) d.allowed = false;
    l.violated = !usable || (!result.allowed && over);
    if (l.violated) d.retry_after = std::max(d.retry_after, l.reset_after);
  }
}

// A report's decision (DecideMode::kReport): allowed, whatever the counters (or the ledger, or a
// full ledger) said; no limit violated, no shadow limit that would have denied (a report is not
// a request that a limit could refuse, so it is no shadow denial either).
void MarkReport(Decision& d) {
  d.allowed = true;
  d.retry_after = 0;
  for (LimitDecision& l : d.limits) {
    l.violated = false;
    l.would_deny = false;
  }
}

// The quotas the ledger and a late answer read: a report's are all shadow (charged, never
// denying), which is how the degraded ledger counts a report.
PlanQuotas QuotasFor(const Plan& plan, DecideMode mode) {
  PlanQuotas quotas = PlanQuotas::Of(plan);
  if (mode == DecideMode::kReport) quotas.shadow.assign(quotas.quotas.size(), true);
  return quotas;
}

// A decision the store could not answer: on_store_error decides (docs/semantics.md).
// True when some of the `n` limits `terms` describes may deny (is not a shadow limit). Read from
// the terms, not from the decision's Limit pointers: an effective plan may be gone by the time an
// asynchronous store fails.
template <typename Terms>
bool Enforces(const Terms& terms, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (!terms.shadow(i)) return true;
  }
  return false;
}

// A failed store's answer: on_store_error decides, except that a decision with nothing but
// shadow limits is allowed whatever the policy (shadow limits never deny).
void Degrade(const absl::Status& failure, config::OnStoreError policy, bool enforced, Decision& d) {
  d.degraded = true;
  d.failure = StoreFailureOf(failure);
  d.allowed = policy == config::OnStoreError::kAllow || !enforced;
}

// What finishing a decision needs once the store has answered, copied out of the request and the
// plan (both may be gone by then: the request is the caller's, the plan may be an effective one).
struct Pending {
  int64_t cost = 1;
  DecideMode mode = DecideMode::kAdmit;
  config::OnStoreError policy = config::OnStoreError::kAllow;
  absl::Time now;
  // Tag and quotas, plan order: only with a cache (it compares and keeps them) or on the
  // asynchronous path (the answer reads them through CopiedTerms).
  PlanQuotas plan;
  OverLimitCache* cache = nullptr;
  // The degraded ledger under on_store_error: allow (null otherwise).
  DegradedLedger* ledger = nullptr;
  uint64_t store_shrinks = 0;
  std::string subject;  // only when there is a cache or a ledger
  Windows windows;      // likewise
};

// A decision the store could not answer, decided against the ledger (on_store_error: allow, some
// limit enforced): admitted iff this instance's known usage leaves room for the cost.
template <typename Terms>
void DecideFromLedger(const absl::Status& failure, const Pending& p, const Terms& terms,
                      std::string_view subject, absl::Span<const WindowBounds> windows,
                      Decision& d) {
  const DegradedLedger::Part part{
      .subject = subject, .plan = &p.plan, .windows = windows, .cost = p.cost};
  absl::InlinedVector<int64_t, 4> used[1];
  StoreResult result;
  result.allowed = p.ledger->AdmitDegraded(absl::MakeConstSpan(&part, 1), p.now, used);
  result.used = std::move(used[0]);
  ApplyCounters(result, p.cost, terms, d);
  d.degraded = true;
  d.failure = StoreFailureOf(failure);
}

// Turns the store's answer into the decision and hands it to `done`; remembers a denial in
// `p.cache` (when there is one) so that the same request is refused without the store next time.
// `subject` and `windows` are the request's (Pending's copies on the asynchronous path); `terms`
// the plan's (LiveTerms or CopiedTerms, see ApplyCounters).
template <typename Terms>
void Finish(absl::StatusOr<StoreResult> result, Decision& skeleton, const Pending& p,
            const Terms& terms, std::string_view subject, absl::Span<const WindowBounds> windows,
            DecisionCallback done) {
  const bool report = p.mode == DecideMode::kReport;
  if (!result.ok()) {
    // A report is allowed whatever the policy; the ledger (whose quotas are all shadow for a
    // report: QuotasFor) counts what it charged.
    const bool enforced = Enforces(terms, skeleton.limits.size()) && !report;
    if (p.ledger != nullptr && (enforced || report)) {
      DecideFromLedger(result.status(), p, terms, subject, windows, skeleton);
    } else {
      Degrade(result.status(), p.policy, enforced, skeleton);
    }
    if (report) MarkReport(skeleton);
    std::move(done)(std::move(skeleton));
    return;
  }
  ApplyCounters(*result, p.cost, terms, skeleton);
  if (report) [[unlikely]]
    MarkReport(skeleton);
  if (p.ledger != nullptr) {
    p.ledger->Observe({.subject = subject, .plan = &p.plan, .windows = windows, .cost = p.cost},
                      result->used, p.now);
  }
  if (!skeleton.allowed && p.cache != nullptr) {
    absl::Time until = absl::InfinitePast();
    for (const LimitDecision& l : skeleton.limits) {
      if (l.violated) until = std::max(until, l.window_end);
    }
    p.cache->Remember(p.plan, subject, p.now, windows, result->used, until, p.store_shrinks);
  }
  std::move(done)(std::move(skeleton));
}

// The errors, out of line: the checks below run on every decision and must stay small enough to
// inline.
ABSL_ATTRIBUTE_NOINLINE absl::Status BadSubject(std::string_view field) {
  return absl::InvalidArgumentError(
      absl::StrCat(ToAbsl(field), ": must be 1-200 bytes of letters, digits and ._:@/+=-"));
}
ABSL_ATTRIBUTE_NOINLINE absl::Status BadCost(std::string_view field) {
  return absl::InvalidArgumentError(
      absl::StrCat(ToAbsl(field), ": must be an integer from 0 to ", kMaxCost));
}

// `field` names the input in the error ("subject", or "parts[2].subject" for a group).
ABSL_ATTRIBUTE_ALWAYS_INLINE inline absl::Status ValidateSubject(
    std::string_view subject, std::string_view field = "subject") {
  if (IsValidSubject(subject)) [[likely]]
    return absl::OkStatus();
  return BadSubject(field);
}

ABSL_ATTRIBUTE_ALWAYS_INLINE inline absl::Status ValidateCost(int64_t cost,
                                                              std::string_view field = "cost") {
  if (cost >= 0 && cost <= kMaxCost) [[likely]]
    return absl::OkStatus();
  return BadCost(field);
}

// The group's parts, checked in order; the error names the first bad one.
absl::Status ValidateGroup(std::string_view group, absl::Span<const GroupPart> parts) {
  if (!group.empty()) {
    if (absl::Status s = ValidateSubject(group, "group"); !s.ok()) return s;
  }
  if (parts.empty() || parts.size() > kMaxGroupParts) {
    return absl::InvalidArgumentError(
        absl::StrCat("parts: a group has 1 to ", kMaxGroupParts, " parts, not ", parts.size()));
  }
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string field = absl::StrCat("parts[", i, "]");
    if (absl::Status s = ValidateSubject(parts[i].subject, absl::StrCat(field, ".subject"));
        !s.ok()) {
      return s;
    }
    if (absl::Status s = ValidateCost(parts[i].cost, absl::StrCat(field, ".cost")); !s.ok()) {
      return s;
    }
    if (parts[i].plan == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".plan: missing"));
    }
    if (parts[i].mode != parts[0].mode) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".mode: differs from parts[0]'s: a group is a report or not"));
    }
    // At most 64 parts: quadratic is cheaper than a set.
    for (size_t j = 0; j < i; ++j) {
      if (parts[j].subject == parts[i].subject) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, ".subject: \"", ToAbsl(parts[i].subject), "\" is also parts[", j,
                         "]'s: a group's subjects are distinct"));
      }
    }
  }
  return absl::OkStatus();
}

// What finishing a group decision needs, copied part by part (the request is the caller's).
struct GroupPending {
  DecideMode mode = DecideMode::kAdmit;
  std::vector<int64_t> costs;
  std::vector<PlanQuotas> quotas;
  config::OnStoreError policy = config::OnStoreError::kAllow;
  absl::Time now;
  DegradedLedger* ledger = nullptr;   // as Pending::ledger
  std::vector<std::string> subjects;  // only with a ledger
  std::vector<Windows> windows;       // likewise

  // The ledger's view of the parts (valid while this lives).
  [[nodiscard]] std::vector<DegradedLedger::Part> LedgerParts() const {
    std::vector<DegradedLedger::Part> parts;
    for (size_t p = 0; p < subjects.size(); ++p) {
      parts.push_back(
          {.subject = subjects[p], .plan = &quotas[p], .windows = windows[p], .cost = costs[p]});
    }
    return parts;
  }
};

// Applies every part's counters (ApplyCounters: the store's, or the ledger's), then the group's
// verdict and retry_after on each.
void ApplyGroup(std::vector<StoreResult>& parts, bool allowed, const GroupPending& g,
                std::vector<Decision>& decisions) {
  int64_t retry_after = 0;
  for (size_t p = 0; p < decisions.size(); ++p) {
    parts[p].allowed = allowed;
    ApplyCounters(parts[p], g.costs[p], CopiedTerms{g.quotas[p]}, decisions[p]);
    allowed = allowed && decisions[p].allowed;
    retry_after = std::max(retry_after, decisions[p].retry_after);
  }
  for (Decision& d : decisions) {
    d.allowed = allowed;
    d.retry_after = retry_after;
  }
}

// The ledger's counters of a group, as store results.
std::vector<StoreResult> LedgerResults(absl::Span<absl::InlinedVector<int64_t, 4>> used) {
  std::vector<StoreResult> results(used.size());
  for (size_t p = 0; p < used.size(); ++p) results[p].used = std::move(used[p]);
  return results;
}

// Finishes a group decision: every part's counters as for a single decision (ApplyCounters), the
// group's verdict and retry_after on each.
void FinishGroup(absl::StatusOr<StoreGroupResult> result, std::vector<Decision> decisions,
                 const GroupPending& g, GroupDecisionCallback done) {
  if (!result.ok() || result->parts.size() != decisions.size()) {
    const absl::Status failure =
        result.ok() ? absl::InternalError("store: a group result with the wrong number of parts")
                    : result.status();
    // The group's verdict: one enforced limit anywhere lets policy decide. A report's quotas are
    // all shadow (QuotasFor): allowed, counted by the ledger.
    const bool report = g.mode == DecideMode::kReport;
    bool enforced = false;
    for (size_t p = 0; p < decisions.size(); ++p) {
      enforced = enforced || Enforces(CopiedTerms{g.quotas[p]}, decisions[p].limits.size());
    }
    if (g.ledger != nullptr && (enforced || report)) {
      std::vector<absl::InlinedVector<int64_t, 4>> used(decisions.size());
      const std::vector<DegradedLedger::Part> parts = g.LedgerParts();
      const bool allowed = g.ledger->AdmitDegraded(parts, g.now, absl::MakeSpan(used));
      std::vector<StoreResult> results = LedgerResults(absl::MakeSpan(used));
      ApplyGroup(results, allowed, g, decisions);
      for (Decision& d : decisions) {
        d.degraded = true;
        d.failure = StoreFailureOf(failure);
      }
    } else {
      for (Decision& d : decisions) Degrade(failure, g.policy, enforced, d);
    }
    if (report) {
      for (Decision& d : decisions) MarkReport(d);
    }
    std::move(done)(std::move(decisions));
    return;
  }
  if (g.ledger != nullptr) {
    const std::vector<DegradedLedger::Part> parts = g.LedgerParts();
    for (size_t p = 0; p < parts.size(); ++p) {
      g.ledger->Observe(parts[p], result->parts[p].used, g.now);
    }
  }
  std::vector<StoreResult> results(std::make_move_iterator(result->parts.begin()),
                                   std::make_move_iterator(result->parts.end()));
  ApplyGroup(results, result->allowed, g, decisions);
  if (g.mode == DecideMode::kReport) {
    for (Decision& d : decisions) MarkReport(d);
  }
  std::move(done)(std::move(decisions));
}
}  // namespace

Limiter::Limiter(PlanSet plans, Store* store, const Clock* clock, LimiterOptions options)
    : plans_(std::move(plans)), store_(store), clock_(clock), options_(options) {
  if (options_.overlimit_cache_capacity > 0) {
    cache_ = std::make_unique<OverLimitCache>(options_.overlimit_cache_capacity,
                                              options_.overlimit_stats);
  }
}

void Limiter::Decide(const DecisionRequest& req, DecisionCallback done) const {
  if (absl::Status s = ValidateSubject(req.subject); !s.ok()) {
    std::move(done)(std::move(s));
    return;
  }
  if (absl::Status s = ValidateCost(req.cost); !s.ok()) {
    std::move(done)(std::move(s));
    return;
  }
  const Plan* plan = req.effective_plan != nullptr ? req.effective_plan : plans_.Find(req.plan);
  if (plan == nullptr) {
    std::move(done)(
        absl::NotFoundError(absl::StrCat("plan: unknown plan \"", ToAbsl(req.plan), "\"")));
    return;
  }
  // Filled field by field: an aggregate initializer would zero the vectors' inline storage
  // (hundreds of bytes) on every decision.
  Pending pending;
  pending.cost = req.cost;
  pending.mode = req.mode;
  const bool report = req.mode == DecideMode::kReport;
  pending.policy = options_.on_store_error;
  pending.now = clock_->Now();
  // The cache and the ledger know counters: a plan with a sliding or gcra limit goes without
  // them (a failed store's answer follows on_store_error).
  const bool counters_only = CountersOnly(*plan);
  pending.cache = counters_only ? cache_.get() : nullptr;
  if (options_.on_store_error == config::OnStoreError::kAllow && counters_only) {
    pending.ledger = options_.degraded_ledger;
  }
  // Read before the store is asked: a shrink that completes after this invalidates what the
  // answer would teach the cache.
  pending.store_shrinks = pending.cache != nullptr ? store_->shrinks() : 0;
  Windows windows = WindowsFor(*plan, pending.now);
  Decision skeleton = SkeletonDecision(*plan, windows, pending.now);
  if (pending.cache != nullptr || pending.ledger != nullptr) {
    pending.plan = QuotasFor(*plan, req.mode);
  }
  // A report is never denied: neither the ledger nor the cache answers it.
  if (pending.ledger != nullptr && !report) {
    // What this instance admitted while the store failed is not in the store's counters: a
    // subject it used up is denied here until its window ends.
    const DegradedLedger::Part part{
        .subject = req.subject, .plan = &pending.plan, .windows = windows, .cost = req.cost};
    absl::InlinedVector<int64_t, 4> used[1];
    if (pending.ledger->DeniesAfterDegraded(absl::MakeConstSpan(&part, 1), pending.now, used)) {
      StoreResult result{.allowed = false};
      result.used = std::move(used[0]);
      ApplyCounters(result, req.cost, LiveTerms{*plan}, skeleton);
      std::move(done)(std::move(skeleton));
      return;
    }
  }
  if (pending.cache != nullptr && !report) {
    OverLimitCache::Entry known;
    if (cache_->CertainDenial(pending.plan, req.subject, req.cost, pending.now, windows, &known,
                              pending.store_shrinks)) {
      StoreResult result{.allowed = false};
      for (size_t i = 0; i < windows.size(); ++i) {
        // A limit whose window moved on since the denial has an unknown, fresh counter.
        result.used.push_back(known.window_start[i] == windows[i].start ? known.used[i] : 0);
      }
      ApplyCounters(result, req.cost, LiveTerms{*plan}, skeleton);
      std::move(done)(std::move(skeleton));
      return;
    }
  }
  StoreRequest store_req{.subject = req.subject,
                         .plan = plan,
                         .cost = req.cost,
                         .mode = req.mode,
                         .now = pending.now,
                         .windows = windows};
  // An in-process store answers at once: no continuation to allocate.
  if (std::optional<absl::StatusOr<StoreResult>> result = store_->DecideNow(store_req)) {
    Finish(*std::move(result), skeleton, pending, LiveTerms{*plan}, req.subject, windows,
           std::move(done));
    return;
  }
  // The answer needs the quotas, and remembering a denial the subject and windows, once it
  // arrives (the request and an effective plan may be gone by then).
  if (pending.cache == nullptr && pending.ledger == nullptr) {
    pending.plan = QuotasFor(*plan, req.mode);
  }
  if (pending.cache != nullptr || pending.ledger != nullptr) {
    pending.subject = std::string(req.subject);
    pending.windows = windows;
  }
  store_->Decide(store_req, [skeleton = std::move(skeleton), pending = std::move(pending),
                             done = std::move(done)](absl::StatusOr<StoreResult> result) mutable {
    Finish(std::move(result), skeleton, pending, CopiedTerms{pending.plan}, pending.subject,
           pending.windows, std::move(done));
  });
}

void Limiter::DecideGroup(std::string_view group, absl::Span<const GroupPart> parts,
                          GroupDecisionCallback done) const {
  if (absl::Status s = ValidateGroup(group, parts); !s.ok()) {
    std::move(done)(std::move(s));
    return;
  }
  const size_t n = parts.size();
  GroupPending g;
  g.now = clock_->Now();
  g.policy = options_.on_store_error;
  g.mode = parts.front().mode;
  if (g.policy == config::OnStoreError::kAllow &&
      std::all_of(parts.begin(), parts.end(),
                  [](const GroupPart& part) { return CountersOnly(*part.plan); })) {
    g.ledger = options_.degraded_ledger;
  }
  g.windows.resize(n);
  g.costs.resize(n);
  g.quotas.resize(n);
  std::vector<Decision> decisions;
  std::vector<StoreRequest> requests(n);
  decisions.reserve(n);
  for (size_t p = 0; p < n; ++p) {
    const Plan& plan = *parts[p].plan;
    g.windows[p] = WindowsFor(plan, g.now);
    decisions.push_back(SkeletonDecision(plan, g.windows[p], g.now));
    g.costs[p] = parts[p].cost;
    g.quotas[p] = QuotasFor(plan, g.mode);
    if (g.ledger != nullptr) g.subjects.emplace_back(parts[p].subject);
  }
  for (size_t p = 0; p < n; ++p) {
    requests[p] = {.subject = parts[p].subject,
                   .group = group,
                   .plan = parts[p].plan,
                   .cost = parts[p].cost,
                   .mode = g.mode,
                   .now = g.now,
                   .windows = g.windows[p]};
  }
  // The over-limit cache is not consulted: it knows single subjects, and a group is denied or
  // admitted as a whole. The ledger is: a part this instance used up while the store failed
  // denies the group here until its window ends (not a report: a report is never denied).
  if (g.ledger != nullptr && g.mode == DecideMode::kAdmit) {
    std::vector<absl::InlinedVector<int64_t, 4>> used(n);
    if (g.ledger->DeniesAfterDegraded(g.LedgerParts(), g.now, absl::MakeSpan(used))) {
      std::vector<StoreResult> results = LedgerResults(absl::MakeSpan(used));
      ApplyGroup(results, false, g, decisions);
      std::move(done)(std::move(decisions));
      return;
    }
  }
  store_->DecideGroup({.group = group, .parts = requests},
                      [decisions = std::move(decisions), g = std::move(g),
                       done = std::move(done)](absl::StatusOr<StoreGroupResult> result) mutable {
                        FinishGroup(std::move(result), std::move(decisions), g, std::move(done));
                      });
}

namespace {

constexpr std::string_view kReservationPrefix = "rsv_";
constexpr size_t kReservationRandomChars = 26;  // 130 bits in base32

// 26 base32 characters of the OS's random source (getrandom: never blocks once the system's
// pool is initialised, which it is long before a server answers requests).
absl::StatusOr<std::string> RandomToken() {
  uint8_t bytes[kReservationRandomChars];
  size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::InternalError("the OS random source failed (getrandom)");
    got += static_cast<size_t>(n);
  }
  constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyz234567";
  std::string token;
  for (uint8_t b : bytes) token += kAlphabet[b & 31];
  return token;
}

std::string ReservationId(std::string_view token, std::string_view plan, std::string_view subject) {
  return absl::StrCat(ToAbsl(kReservationPrefix), ToAbsl(token), ".",
                      absl::WebSafeBase64Escape(ToAbsl(plan)), ".",
                      absl::WebSafeBase64Escape(ToAbsl(subject)));
}

bool IsBase32(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= 'a' && c <= 'z') || (c >= '2' && c <= '7'); });
}

// The plan a reservation whose plan is no longer configured is ended under: no limits, so ending
// it releases what it holds and charges nothing.
const Plan& NoPlan() {
  static const Plan* const plan = [] {
    auto* p = new Plan;
    p->name = "";
    return p;
  }();
  return *plan;
}

absl::Status CheckTtl(absl::Duration ttl) {
  if (ttl <= absl::ZeroDuration() || ttl > kMaxReservationTtl) {
    return absl::InvalidArgumentError("ttl: must be more than 0 and at most 1h");
  }
  return absl::OkStatus();
}

}  // namespace

std::optional<ReservationRef> ParseReservationId(std::string_view id) {
  if (id.size() > 1024 || !id.starts_with(kReservationPrefix)) return std::nullopt;
  id.remove_prefix(kReservationPrefix.size());
  const std::vector<absl::string_view> parts = absl::StrSplit(ToAbsl(id), '.');
  if (parts.size() != 3 || parts[0].size() != kReservationRandomChars ||
      !IsBase32(std::string_view(parts[0].data(), parts[0].size()))) {
    return std::nullopt;
  }
  ReservationRef ref;
  if (!absl::WebSafeBase64Unescape(parts[1], &ref.plan) ||
      !absl::WebSafeBase64Unescape(parts[2], &ref.subject) || !IsValidSubject(ref.subject) ||
      ref.plan.empty() || ref.plan.size() > 64) {
    return std::nullopt;
  }
  // Only the canonical spelling: one reservation has one id.
  if (ReservationId(std::string_view(parts[0].data(), parts[0].size()), ref.plan, ref.subject) !=
      absl::StrCat(ToAbsl(kReservationPrefix), ToAbsl(id))) {
    return std::nullopt;
  }
  return ref;
}

void Limiter::Reserve(const ReserveRequest& req, ReserveCallback done) const {
  const DecisionRequest& dr = req.decision;
  absl::Status bad = ValidateSubject(dr.subject);
  if (bad.ok()) bad = ValidateCost(dr.cost);
  if (bad.ok() && (req.hold < 0 || req.hold > kMaxCost)) {
    bad = absl::InvalidArgumentError(
        absl::StrCat("estimate: must be an integer from 0 to ", kMaxCost));
  }
  if (bad.ok()) bad = CheckTtl(req.ttl);
  const Plan* plan = dr.effective_plan != nullptr ? dr.effective_plan : plans_.Find(dr.plan);
  if (bad.ok() && plan == nullptr) {
    bad = absl::NotFoundError(absl::StrCat("plan: unknown plan \"", ToAbsl(dr.plan), "\""));
  }
  absl::StatusOr<std::string> token = RandomToken();
  if (bad.ok() && !token.ok()) bad = token.status();
  if (!bad.ok()) {
    std::move(done)(std::move(bad));
    return;
  }
  const absl::Time now = clock_->Now();
  const Windows windows = WindowsFor(*plan, now);
  ReserveDecision out;
  out.decision = SkeletonDecision(*plan, windows, now);
  out.id = ReservationId(*token, plan->name, dr.subject);
  out.expires_at = now + req.ttl;
  const StoreReserveRequest store_req{.decide = {.subject = dr.subject,
                                                 .plan = plan,
                                                 .cost = dr.cost,
                                                 .now = now,
                                                 .windows = windows},
                                      .hold = req.hold,
                                      .id = out.id,
                                      .expires_at = out.expires_at,
                                      .charge_on_expiry = plan->charge_on_expiry};
  store_->Reserve(store_req, [out = std::move(out), quotas = PlanQuotas::Of(*plan), cost = dr.cost,
                              hold = req.hold, policy = options_.on_store_error,
                              done = std::move(done)](absl::StatusOr<StoreResult> r) mutable {
    if (!r.ok()) {
      if (absl::IsUnimplemented(r.status()) || absl::IsAlreadyExists(r.status()) ||
          absl::IsResourceExhausted(r.status())) {
        std::move(done)(r.status());
        return;
      }
      Degrade(r.status(), policy, Enforces(CopiedTerms{quotas}, quotas.quotas.size()),
              out.decision);
      out.id.clear();
      std::move(done)(std::move(out));
      return;
    }
    ApplyCounters(*r, cost, CopiedTerms{quotas}, out.decision, hold, /*slot=*/true);
    if (!out.decision.allowed) out.id.clear();
    std::move(done)(std::move(out));
  });
}

void Limiter::Settle(const SettleRequest& req, SettleDecisionCallback done) const {
  const std::optional<ReservationRef> ref = ParseReservationId(req.id);
  if (!ref.has_value()) {
    std::move(done)(absl::InvalidArgumentError("reservation: not a reservation id"));
    return;
  }
  if (absl::Status s = ValidateCost(req.cost); !s.ok()) {
    std::move(done)(std::move(s));
    return;
  }
  const Plan* plan = req.effective_plan != nullptr ? req.effective_plan : plans_.Find(ref->plan);
  if (plan == nullptr) plan = &NoPlan();
  const absl::Time now = clock_->Now();
  const Windows windows = WindowsFor(*plan, now);
  SettleDecision out;
  out.decision = SkeletonDecision(*plan, windows, now);
  const StoreSettleRequest store_req{
      .decide = {.subject = ref->subject,
                 .plan = plan,
                 .cost = req.end == ReservationEnd::kSettle ? req.cost : 0,
                 .now = now,
                 .windows = windows},
      .id = req.id,
      .end = req.end};
  store_->Settle(store_req, [out = std::move(out), quotas = PlanQuotas::Of(*plan),
                             done = std::move(done)](absl::StatusOr<StoreSettleResult> r) mutable {
    if (!r.ok()) {
      std::move(done)(r.status());
      return;
    }
    out.outcome = r->outcome;
    out.charged = r->charged;
    out.ended_by = r->ended_by;
    if (r->outcome != StoreSettleResult::Outcome::kNotFound &&
        r->result.used.size() == out.decision.limits.size()) {
      r->result.allowed = true;
      ApplyCounters(r->result, 0, CopiedTerms{quotas}, out.decision);
      for (size_t i = 0; i < r->overshoot.size() && i < out.decision.limits.size(); ++i) {
        out.decision.limits[i].overshoot = r->overshoot[i];
      }
    }
    std::move(done)(std::move(out));
  });
}

void Limiter::Extend(std::string_view id, absl::Duration ttl, ExtendCallback done) const {
  const std::optional<ReservationRef> ref = ParseReservationId(id);
  if (!ref.has_value()) {
    std::move(done)(absl::InvalidArgumentError("reservation: not a reservation id"));
    return;
  }
  if (absl::Status s = CheckTtl(ttl); !s.ok()) {
    std::move(done)(std::move(s));
    return;
  }
  const absl::Time now = clock_->Now();
  store_->Extend(ref->subject, id, now + ttl, now, std::move(done));
}

void Limiter::ExpireDue(size_t max,
                        absl::AnyInvocable<void(absl::StatusOr<size_t>) &&> done) const {
  store_->DueReservations(
      clock_->Now(), max,
      [this, done = std::move(done)](absl::StatusOr<std::vector<DueReservation>> due) mutable {
        if (!due.ok()) {
          std::move(done)(due.status());
          return;
        }
        // Ended all at once; the last to finish reports how many ended (or the first failure,
        // when none did).
        struct Tally {
          size_t left = 0;
          size_t ended = 0;
          absl::Status failure;
          absl::AnyInvocable<void(absl::StatusOr<size_t>) &&> done;
        };
        if (due->empty()) {
          std::move(done)(size_t{0});
          return;
        }
        auto tally = std::make_shared<Tally>();
        tally->left = due->size();
        tally->done = std::move(done);
        for (const DueReservation& r : *due) {
          const Plan* plan = plans_.Find(r.plan);
          Settle({.id = r.id,
                  .effective_plan = plan != nullptr ? plan : &NoPlan(),
                  .end = ReservationEnd::kExpire},
                 [tally](absl::StatusOr<SettleDecision> s) {
                   if (!s.ok()) {
                     if (tally->failure.ok()) tally->failure = s.status();
                   } else if (s->outcome == StoreSettleResult::Outcome::kEnded) {
                     ++tally->ended;
                   }
                   if (--tally->left > 0) return;
                   if (!tally->failure.ok() && tally->ended == 0) {
                     std::move(tally->done)(tally->failure);
                   } else {
                     std::move(tally->done)(tally->ended);
                   }
                 });
        }
      });
}

absl::StatusOr<const Plan*> Limiter::Resolve(std::string_view subject,
                                             std::string_view plan_name) const {
  if (absl::Status s = ValidateSubject(subject); !s.ok()) return s;
  const Plan* plan = plans_.Find(plan_name);
  if (plan == nullptr) {
    return absl::NotFoundError(absl::StrCat("plan: unknown plan \"", ToAbsl(plan_name), "\""));
  }
  return plan;
}

void Limiter::Usage(std::string_view subject, std::string_view plan_name,
                    UsageCallback done) const {
  absl::StatusOr<const Plan*> plan = Resolve(subject, plan_name);
  if (!plan.ok()) {
    std::move(done)(plan.status());
    return;
  }
  UsageOf(subject, **plan, std::move(done));
}

void Limiter::Usage(std::string_view subject, const Plan& plan, UsageCallback done) const {
  if (absl::Status s = ValidateSubject(subject); !s.ok()) {
    std::move(done)(std::move(s));
    return;
  }
  UsageOf(subject, plan, std::move(done));
}

void Limiter::UsageOf(std::string_view subject, const Plan& plan, UsageCallback done) const {
  const absl::Time now = clock_->Now();
  Windows windows = WindowsFor(plan, now);
  // An unusable counter (store.h) is reported as exhausted, as a decision reports it. The quotas
  // are copied: the callback may run after `plan` (an effective plan) is gone.
  PlanQuotas quotas = PlanQuotas::Of(plan);
  store_->Usage({.subject = subject, .plan = &plan, .cost = 0, .now = now, .windows = windows},
                [quotas = std::move(quotas),
                 done = std::move(done)](absl::StatusOr<std::vector<LimitUsage>> usage) mutable {
                  if (usage.ok()) {
                    for (size_t i = 0; i < usage->size() && i < quotas.quotas.size(); ++i) {
                      LimitUsage& u = (*usage)[i];
                      // (A sliding or gcra state is shown by ViewOf, unusable ones included.)
                      const bool fixed = CopiedTerms{quotas}.fixed(i);
                      if (fixed && !UsableCounter(u.used)) u.used = quotas.quotas[i];
                    }
                  }
                  std::move(done)(std::move(usage));
                });
}

void Limiter::Reset(std::string_view subject, std::string_view plan_name, std::string_view limit,
                    StatusCallback done) const {
  absl::StatusOr<const Plan*> plan = Resolve(subject, plan_name);
  if (!plan.ok()) {
    std::move(done)(plan.status());
    return;
  }
  ResetOf(subject, **plan, limit, std::move(done));
}

void Limiter::Reset(std::string_view subject, const Plan& plan, std::string_view limit,
                    StatusCallback done) const {
  if (absl::Status s = ValidateSubject(subject); !s.ok()) {
    std::move(done)(std::move(s));
    return;
  }
  ResetOf(subject, plan, limit, std::move(done));
}

void Limiter::ResetOf(std::string_view subject, const Plan& plan, std::string_view limit,
                      StatusCallback done) const {
  std::optional<size_t> index;
  if (!limit.empty()) {
    int i = plan.FindLimit(limit);
    if (i < 0) {
      std::move(done)(absl::NotFoundError(
          absl::StrCat("limit: plan \"", plan.name, "\" has no limit \"", ToAbsl(limit), "\"")));
      return;
    }
    index = static_cast<size_t>(i);
  }
  // Counters follow the subject: a denial learnt under any plan may rest on what is reset here.
  if (cache_ != nullptr) cache_->Forget(subject);
  if (options_.degraded_ledger != nullptr) options_.degraded_ledger->Forget(subject);
  const absl::Time now = clock_->Now();
  Windows windows = WindowsFor(plan, now);
  store_->Reset({.subject = subject, .plan = &plan, .cost = 0, .now = now, .windows = windows},
                index, std::move(done));
}

}  // namespace limiter
}  // namespace sluice
