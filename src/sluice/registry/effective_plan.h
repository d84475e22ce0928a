// The plan a registry subject is decided under: its plan with the overrides in force at an instant
// applied. Every front end that decides for a registry subject (the data plane, the Rate Limit
// Service, the usage and registry routes) reads it from here.
#ifndef SLUICE_REGISTRY_EFFECTIVE_PLAN_H_
#define SLUICE_REGISTRY_EFFECTIVE_PLAN_H_

#include <optional>

#include "absl/time/time.h"
#include "sluice/limiter/plan.h"
#include "sluice/registry/model.h"

namespace sluice::registry {

// The plan `subject` is decided under at `now`: its plan with every override that is in force
// applied, and the subject's granted credits added to the quota of every `window: credit` limit
// (to the override's quota when one is in force; capped at kMaxUsed). Returns the plan from
// `plans` itself when neither applies, else a plan built into `storage`; nullptr when `plans` has
// no plan of that name. An override of a limit the plan no longer has is ignored.
[[nodiscard]] const Plan* EffectivePlan(const PlanSet& plans, const Subject& subject,
                                        absl::Time now, std::optional<Plan>* storage);

// The first instant after `now` at which an override of `subject` ends, if any.
[[nodiscard]] std::optional<absl::Time> NextOverrideEnd(const Subject& subject, absl::Time now);

}  // namespace sluice::registry

#endif  // SLUICE_REGISTRY_EFFECTIVE_PLAN_H_
