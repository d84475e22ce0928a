#include "sluice/registry/effective_plan.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "sluice/limiter/store.h"

namespace sluice::registry {

static_assert(kMaxCredits == kMaxUsed, "a granted total must fit a quota");

const Plan* EffectivePlan(const PlanSet& plans, const Subject& subject, absl::Time now,
                          std::optional<Plan>* storage) {
  const Plan* base = plans.Find(subject.plan);
  if (base == nullptr || (subject.overrides.empty() && subject.credits == 0)) return base;
  std::vector<int64_t> quotas;
  bool any = false;
  const auto start = [&] {
    if (any) return;
    quotas.reserve(base->limits.size());
    for (const Limit& l : base->limits) quotas.push_back(l.quota);
    any = true;
  };
  for (const Override& o : subject.overrides) {
    if (o.until.has_value() && *o.until <= now) continue;
    const int i = base->FindLimit(o.limit);
    if (i < 0) continue;  // a reload dropped the limit: the override no longer applies
    // A reload made the limit sliding or gcra, and this quota is not one it can enforce.
    if (!QuotaFits(base->limits[static_cast<size_t>(i)], o.quota)) continue;
    start();
    quotas[static_cast<size_t>(i)] = o.quota;
  }
  // Credits add to every credit limit's quota (the plan's, or an override's in force).
  for (size_t i = 0; subject.credits > 0 && i < base->limits.size(); ++i) {
    if (base->limits[i].window.kind != config::WindowSpec::Kind::kCredit) continue;
    start();
    quotas[i] = std::min(kMaxUsed, quotas[i] + subject.credits);
  }
  if (!any) return base;
  storage->emplace(base->WithQuotas(quotas));
  return &**storage;
}

std::optional<absl::Time> NextOverrideEnd(const Subject& subject, absl::Time now) {
  std::optional<absl::Time> next;
  for (const Override& o : subject.overrides) {
    if (o.until.has_value() && *o.until > now && (!next || *o.until < *next)) next = o.until;
  }
  return next;
}

}  // namespace sluice::registry
