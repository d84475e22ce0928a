// Who a request is decided as: an API key or a subject (with or without a plan) resolved through
// the config file's keys and the registry, the same way for every front end (POST /v1/check,
// /v1/authorize, the Envoy Rate Limit Service). No I/O; each front end renders a Refusal its way.
#ifndef SLUICE_FRONTEND_RESOLVE_H_
#define SLUICE_FRONTEND_RESOLVE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/time/time.h"
#include "sluice/limiter/plan.h"
#include "sluice/registry/model.h"

namespace sluice::registry {
class Index;
}  // namespace sluice::registry

namespace sluice::frontend {

struct Frontend;

// The subject, its plan's name, and the plan itself when it is not simply the named one (a
// registry subject's overrides in force).
struct Target {
  std::string subject;
  std::string plan;
  std::optional<Plan> effective_storage;
  const Plan* effective = nullptr;
  std::shared_ptr<const registry::Subject> record;  // keeps `effective`'s source alive
  uint64_t key_id = 0;  // the registry key that named the subject (for the access log)
};

// Why a request may not be decided, as the HTTP answer it would get.
struct Refusal {
  unsigned status = 400;  // 400, 401, 403 or 503
  std::string title;      // "Unauthorized", ...
  std::string detail;
  bool retry_soon = false;  // 503 while the registry loads: Retry-After: 1
  // 403 for a subject disabled in the registry: answered with `Sluice-Denied: disabled`, which a
  // gateway that sees only the status (nginx auth_request) tells from a quota denial by.
  bool disabled = false;
};

// Resolves an API key through the config file's keys, then the registry. False (and `refusal`
// set: 401 unknown or expired, 403 disabled, 503 registry loading or plan unknown here) if the key
// does not admit a decision. `index` may be null.
[[nodiscard]] bool ResolveKey(const Frontend& fe, const registry::Index* index,
                              std::string_view key, absl::Time now, Target* target,
                              Refusal* refusal);

// Resolves a subject named without a key: with an empty `plan`, its plan from the registry (with
// its overrides) or the config file's keys (400 if neither knows it); with a plan, that plan —
// a registry subject named with its own plan keeps its overrides, a disabled one is refused (403)
// whatever plan is named. `index` may be null.
[[nodiscard]] bool ResolveSubject(const Frontend& fe, const registry::Index* index,
                                  std::string subject, std::string plan, absl::Time now,
                                  Target* target, Refusal* refusal);

}  // namespace sluice::frontend

#endif  // SLUICE_FRONTEND_RESOLVE_H_
