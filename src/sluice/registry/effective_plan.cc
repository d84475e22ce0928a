#include "sluice/registry/effective_plan.h"

#include <cstdint>
#include <vector>

namespace sluice::registry {

const Plan* EffectivePlan(const PlanSet& plans, const Subject& subject, absl::Time now,
                          std::optional<Plan>* storage) {
  const Plan* base = plans.Find(subject.plan);
  if (base == nullptr || subject.overrides.empty()) return base;
  std::vector<int64_t> quotas;
  bool any = false;
  for (const Override& o : subject.overrides) {
    if (o.until.has_value() && *o.until <= now) continue;
    const int i = base->FindLimit(o.limit);
    if (i < 0) continue;  // a reload dropped the limit: the override no longer applies
    if (!any) {
      quotas.reserve(base->limits.size());
      for (const Limit& l : base->limits) quotas.push_back(l.quota);
      any = true;
    }
    quotas[static_cast<size_t>(i)] = o.quota;
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
