#include "sluice/limiter/limiter.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "sluice/common/strings.h"

namespace sluice {
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

// Fills every per-limit field that does not depend on the counters.
Decision SkeletonDecision(const Plan& plan, const Windows& windows, absl::Time now) {
  Decision d;
  d.plan = &plan;
  d.limits.resize(plan.limits.size());
  for (size_t i = 0; i < plan.limits.size(); ++i) {
    LimitDecision& l = d.limits[i];
    l.limit = &plan.limits[i];
    l.window_start = windows[i].start;
    l.window_end = windows[i].end;
    l.reset_after = SecondsUntil(windows[i].end, now);
    l.remaining = l.limit->quota;
  }
  return d;
}

// Applies the store's counters: per-limit used/remaining/violated and the overall retry_after.
// A limit is violated when it alone would refuse the request: used + cost > quota (for a denial the
// store reports the unchanged counters, so this is the rule the store applied). An unusable
// counter (store.h) is exhausted: reported as used = quota, remaining 0, violated — and it denies
// even if a store said otherwise. Every value is then in [0, kMaxUsed], so nothing overflows.
void ApplyCounters(const StoreResult& result, int64_t cost, Decision& d) {
  d.allowed = result.allowed;
  for (size_t i = 0; i < d.limits.size(); ++i) {
    LimitDecision& l = d.limits[i];
    const int64_t quota = l.limit->quota;
    const bool usable = UsableCounter(result.used[i]);
    l.used = usable ? result.used[i] : quota;
    l.remaining = l.used >= quota ? 0 : quota - l.used;
    if (!usable) d.allowed = false;
    l.violated = !usable || (!result.allowed && l.used > quota - cost);
  }
  for (const LimitDecision& l : d.limits) {
    if (l.violated) d.retry_after = std::max(d.retry_after, l.reset_after);
  }
}

// Turns the store's answer into the decision and hands it to `done`; remembers a denial in
// `cache` (when there is one) so that the same request is refused without the store next time.
void Finish(absl::StatusOr<StoreResult> result, Decision skeleton, int64_t cost,
            config::OnStoreError policy, absl::Time now, OverLimitCache* cache,
            uint64_t store_shrinks, std::string_view subject, const Windows& windows,
            DecisionCallback done) {
  if (!result.ok()) {
    skeleton.degraded = true;
    skeleton.failure = StoreFailureOf(result.status());
    skeleton.allowed = policy == config::OnStoreError::kAllow;
    std::move(done)(std::move(skeleton));
    return;
  }
  ApplyCounters(*result, cost, skeleton);
  if (!skeleton.allowed && cache != nullptr) {
    absl::Time until = absl::InfinitePast();
    for (const LimitDecision& l : skeleton.limits) {
      if (l.violated) until = std::max(until, l.window_end);
    }
    cache->Remember(*skeleton.plan, subject, now, windows, result->used, until, store_shrinks);
  }
  std::move(done)(std::move(skeleton));
}

absl::Status ValidateSubject(std::string_view subject) {
  if (config::IsValidSubject(subject)) return absl::OkStatus();
  return absl::InvalidArgumentError("subject: must be 1-200 bytes of letters, digits and ._:@/+=-");
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
  if (req.cost < 0 || req.cost > kMaxCost) {
    std::move(done)(
        absl::InvalidArgumentError(absl::StrCat("cost: must be an integer from 0 to ", kMaxCost)));
    return;
  }
  const Plan* plan = plans_.Find(req.plan);
  if (plan == nullptr) {
    std::move(done)(
        absl::NotFoundError(absl::StrCat("plan: unknown plan \"", ToAbsl(req.plan), "\"")));
    return;
  }
  const absl::Time now = clock_->Now();
  Windows windows = WindowsFor(*plan, now);
  Decision skeleton = SkeletonDecision(*plan, windows, now);
  const int64_t cost = req.cost;
  // Read before the store is asked: a shrink that completes after this invalidates what the
  // answer would teach the cache.
  const uint64_t store_shrinks = cache_ != nullptr ? store_->shrinks() : 0;
  if (cache_ != nullptr) {
    OverLimitCache::Entry known;
    if (cache_->CertainDenial(*plan, req.subject, cost, now, windows, &known, store_shrinks)) {
      StoreResult result{.allowed = false};
      for (size_t i = 0; i < windows.size(); ++i) {
        // A limit whose window moved on since the denial has an unknown, fresh counter.
        result.used.push_back(known.window_start[i] == windows[i].start ? known.used[i] : 0);
      }
      ApplyCounters(result, cost, skeleton);
      std::move(done)(std::move(skeleton));
      return;
    }
  }
  StoreRequest store_req{
      .subject = req.subject, .plan = plan, .cost = req.cost, .now = now, .windows = windows};
  const config::OnStoreError policy = options_.on_store_error;
  // An in-process store answers at once: no continuation to allocate.
  if (std::optional<absl::StatusOr<StoreResult>> result = store_->DecideNow(store_req)) {
    Finish(*std::move(result), std::move(skeleton), cost, policy, now, cache_.get(), store_shrinks,
           req.subject, windows, std::move(done));
    return;
  }
  // What remembering a denial needs once the answer arrives (the request is gone by then).
  struct Remember {
    OverLimitCache* cache = nullptr;
    std::string subject;
    Windows windows;
  };
  Remember remember;
  if (cache_ != nullptr) {
    remember = {.cache = cache_.get(), .subject = std::string(req.subject), .windows = windows};
  }
  store_->Decide(store_req, [skeleton = std::move(skeleton), cost, policy, now, store_shrinks,
                             remember = std::move(remember),
                             done = std::move(done)](absl::StatusOr<StoreResult> result) mutable {
    Finish(std::move(result), std::move(skeleton), cost, policy, now, remember.cache, store_shrinks,
           remember.subject, remember.windows, std::move(done));
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
  const absl::Time now = clock_->Now();
  Windows windows = WindowsFor(**plan, now);
  // An unusable counter (store.h) is reported as exhausted, as a decision reports it.
  store_->Usage({.subject = subject, .plan = *plan, .cost = 0, .now = now, .windows = windows},
                [plan = *plan,
                 done = std::move(done)](absl::StatusOr<std::vector<LimitUsage>> usage) mutable {
                  if (usage.ok()) {
                    for (size_t i = 0; i < usage->size() && i < plan->limits.size(); ++i) {
                      LimitUsage& u = (*usage)[i];
                      if (!UsableCounter(u.used)) u.used = plan->limits[i].quota;
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
  if (cache_ != nullptr) cache_->Forget(**plan, subject);
  std::optional<size_t> index;
  if (!limit.empty()) {
    int i = (*plan)->FindLimit(limit);
    if (i < 0) {
      std::move(done)(absl::NotFoundError(absl::StrCat("limit: plan \"", ToAbsl(plan_name),
                                                       "\" has no limit \"", ToAbsl(limit), "\"")));
      return;
    }
    index = static_cast<size_t>(i);
  }
  const absl::Time now = clock_->Now();
  Windows windows = WindowsFor(**plan, now);
  store_->Reset({.subject = subject, .plan = *plan, .cost = 0, .now = now, .windows = windows},
                index, std::move(done));
}

}  // namespace sluice
