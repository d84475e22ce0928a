#include "sluice/server/frontend_loader.h"

#include <string_view>
#include <utility>

#include "sluice/common/log.h"
#include "sluice/limiter/limiter.h"
#include "sluice/server/config_check.h"

namespace sluice::server {

absl::StatusOr<std::shared_ptr<const frontend::Frontend>> BuildFrontend(const config::Config& cfg,
                                                                        const LimiterContext& lc) {
  absl::StatusOr<PlanSet> plans = PlanSet::FromConfig(cfg);
  if (!plans.ok()) return plans.status();
  absl::StatusOr<frontend::KeyRegistry> keys = frontend::KeyRegistry::FromConfig(cfg);
  if (!keys.ok()) return keys.status();
  absl::StatusOr<frontend::ProxyTrust> proxies =
      frontend::ProxyTrust::FromCidrs(cfg.server.trusted_proxies);
  if (!proxies.ok()) return proxies.status();

  auto fe = std::make_shared<frontend::Frontend>();
  fe->server = cfg.server;
  fe->envoy = cfg.envoy;
  fe->on_store_error = cfg.on_store_error;
  // Read again at each reload, so a rotated credential takes effect with SIGHUP. CheckServable
  // has refused a token that is also an admin_tokens entry.
  absl::StatusOr<AdminTokenSource> resolved = ResolveAdminToken(cfg);
  if (!resolved.ok()) return resolved.status();
  const std::string& admin_token = resolved->token;
  // The single token of earlier versions is the read-write token "admin".
  if (!admin_token.empty()) {
    fe->admin_tokens.push_back(frontend::MakeAdminToken("admin", admin_token, /*write=*/true));
  }
  for (const config::AdminTokenConfig& t : cfg.server.admin_tokens) {
    if (!t.token.empty()) {
      fe->admin_tokens.push_back(frontend::MakeAdminToken(t.name, t.token, t.write));
    } else {
      // Validated as 64 lowercase hex digits.
      fe->admin_tokens.push_back(
          frontend::MakeAdminTokenFromSha256(t.name, t.token_sha256, t.write));
    }
  }
  fe->limiter =
      std::make_unique<Limiter>(std::move(*plans), lc.backend->store(), lc.backend->clock(),
                                lc.backend->limiter_options(cfg.on_store_error));
  fe->keys = std::move(*keys);
  fe->proxies = std::move(*proxies);
  // Observability: the decision counters of this reload's plans, looked up once.
  if (lc.metrics != nullptr) fe->counters = lc.metrics->CountersFor(fe->limiter->plans());
  return std::shared_ptr<const frontend::Frontend>(std::move(fe));
}

absl::StatusOr<std::shared_ptr<const frontend::Frontend>> LoadFrontend(const std::string& path,
                                                                       const LimiterContext& lc,
                                                                       config::Config* out) {
  absl::StatusOr<config::Config> cfg = config::LoadConfigFile(path);
  if (!cfg.ok()) return cfg.status();
  // What a restart would refuse is refused now, so a reload never stores up a failing start.
  if (absl::Status s = CheckServable(*cfg); !s.ok()) return s;
  if (lc.registry != nullptr) {
    if (absl::Status s = CheckPlansInUse(*cfg, *lc.registry); !s.ok()) return s;
  }
  absl::StatusOr<std::shared_ptr<const frontend::Frontend>> fe = BuildFrontend(*cfg, lc);
  if (fe.ok()) *out = std::move(*cfg);
  return fe;
}

absl::StatusOr<std::shared_ptr<const rls::RlRuleSet>> LoadRules(const config::Config& cfg) {
  if (cfg.envoy.ratelimit_config.empty()) return nullptr;
  return rls::RlRuleSet::Load(cfg.envoy.ratelimit_config);
}

void WarnAboutRestartOnlyChanges(const config::Config& before, const config::Config& after) {
  auto warn = [](std::string_view field) {
    Log(LogLevel::kWarn, "reload ignores a changed setting; restart to apply").Str("field", field);
  };
  if (before.server.listen != after.server.listen) warn("server.listen");
  if (before.server.admin_listen != after.server.admin_listen) warn("server.admin_listen");
  if (before.server.grpc_listen != after.server.grpc_listen) warn("server.grpc_listen");
  // The gRPC listener's connections were given their timeouts when it started.
  if (before.server.grpc_handshake_timeout != after.server.grpc_handshake_timeout) {
    warn("server.grpc_handshake_timeout");
  }
  if (before.server.grpc_idle_timeout != after.server.grpc_idle_timeout) {
    warn("server.grpc_idle_timeout");
  }
  if (before.server.grpc_request_timeout != after.server.grpc_request_timeout) {
    warn("server.grpc_request_timeout");
  }
  if (before.server.grpc_write_timeout != after.server.grpc_write_timeout) {
    warn("server.grpc_write_timeout");
  }
  if (before.server.threads != after.server.threads) warn("server.threads");
  if (before.server.max_connections != after.server.max_connections) {
    warn("server.max_connections");
  }
  if (before.server.admin_max_connections != after.server.admin_max_connections) {
    warn("server.admin_max_connections");
  }
  // The store is built once, at start: its type, where it is, how it is reached, its keys' prefix
  // and its command timeout and longest wait.
  if (before.store.type != after.store.type || before.store.redis.url != after.store.redis.url ||
      before.store.redis.cluster_nodes != after.store.redis.cluster_nodes ||
      before.store.redis.password != after.store.redis.password ||
      before.store.redis.username != after.store.redis.username ||
      before.store.redis.timeout != after.store.redis.timeout ||
      before.store.redis.max_wait != after.store.redis.max_wait ||
      before.store.redis.key_prefix != after.store.redis.key_prefix ||
      before.store.redis.tls.present != after.store.redis.tls.present ||
      before.store.redis.tls.ca_file != after.store.redis.tls.ca_file ||
      before.store.redis.tls.cert_file != after.store.redis.tls.cert_file ||
      before.store.redis.tls.key_file != after.store.redis.tls.key_file ||
      before.store.redis.tls.server_name != after.store.redis.tls.server_name ||
      before.store.memory.snapshot_path != after.store.memory.snapshot_path ||
      before.store.memory.registry_path != after.store.memory.registry_path ||
      before.store.memory.snapshot_interval != after.store.memory.snapshot_interval) {
    warn("store");
  }
}

}  // namespace sluice::server
