// What a start and each reload build from a configuration file: the Frontend the planes decide
// through (plans, keys, trusted proxies, admin tokens, a Limiter on the running store) and the
// envoyproxy/ratelimit rules the gRPC service maps descriptors with; and the warning for settings
// only a restart applies.
#ifndef SLUICE_SERVER_FRONTEND_LOADER_H_
#define SLUICE_SERVER_FRONTEND_LOADER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "sluice/config/config.h"
#include "sluice/engine/store_backend.h"
#include "sluice/frontend/frontend.h"
#include "sluice/frontend/metrics.h"
#include "sluice/registry/index.h"
#include "sluice/rls/ratelimit_rules.h"

namespace sluice::server {

// What every Limiter a service builds (one per reload) shares. The pointees outlive every
// Frontend built with it.
struct LimiterContext {
  engine::StoreBackend* backend = nullptr;
  const registry::Index* registry = nullptr;     // the subjects a reload must keep plans for
  frontend::FrontendMetrics* metrics = nullptr;  // observability: resolves each Frontend's counters
};

// Everything a reload may change, built from a validated config. The admin token is resolved
// again each time (ResolveAdminToken), so a rotated credential takes effect with a reload.
// Errors: the plans, keys, trusted proxies or admin token do not build.
[[nodiscard]] absl::StatusOr<std::shared_ptr<const frontend::Frontend>> BuildFrontend(
    const config::Config& cfg, const LimiterContext& lc);

// Reads and checks `path` as a start would (LoadConfigFile, CheckServable and, with a registry,
// CheckPlansInUse), then builds its Frontend. On success `*out` is the configuration read; on an
// error it is left as it was.
[[nodiscard]] absl::StatusOr<std::shared_ptr<const frontend::Frontend>> LoadFrontend(
    const std::string& path, const LimiterContext& lc, config::Config* out);

// The envoyproxy/ratelimit rules envoy.ratelimit_config names; null when it names none.
[[nodiscard]] absl::StatusOr<std::shared_ptr<const rls::RlRuleSet>> LoadRules(
    const config::Config& cfg);

// Logs a warning naming each setting that differs between `before` and `after` that a reload
// cannot change without a restart (the listeners, threads, connection caps, the gRPC timeouts,
// the store).
void WarnAboutRestartOnlyChanges(const config::Config& before, const config::Config& after);

}  // namespace sluice::server

#endif  // SLUICE_SERVER_FRONTEND_LOADER_H_
