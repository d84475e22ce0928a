#include "sluice/server/config_summary.h"

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "sluice/common/log.h"
#include "sluice/common/strings.h"

namespace sluice::server {
namespace {

std::string_view StoreName(config::StoreType type) {
  return type == config::StoreType::kRedis ? "redis" : "memory";
}

std::string_view AccessLogModeName(config::AccessLogMode mode) {
  switch (mode) {
    case config::AccessLogMode::kOff:
      return "off";
    case config::AccessLogMode::kDenied:
      return "denied";
    case config::AccessLogMode::kAll:
      return "all";
  }
  return "off";
}

std::string_view SinkTypeName(config::SinkConfig::Type type) {
  switch (type) {
    case config::SinkConfig::Type::kWebhook:
      return "webhook";
    case config::SinkConfig::Type::kSlack:
      return "slack";
    case config::SinkConfig::Type::kEmail:
      return "email";
  }
  return "webhook";
}

}  // namespace

std::string UrlHost(std::string_view url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string_view::npos) return "";
  std::string_view rest = url.substr(scheme + 3);
  rest = rest.substr(0, rest.find_first_of("/?#"));
  if (const size_t at = rest.rfind('@'); at != std::string_view::npos) rest = rest.substr(at + 1);
  if (rest.starts_with('[')) {
    const size_t close = rest.find(']');
    return std::string(rest.substr(0, close == std::string_view::npos ? rest.size() : close + 1));
  }
  return std::string(rest.substr(0, rest.find(':')));
}

std::vector<std::string> AppliedEnvironment(const config::Config& cfg,
                                            const std::function<const char*(const char*)>& getenv) {
  std::vector<std::string> applied;
  if (cfg.store.redis.url_source == "SLUICE_REDIS_URL") applied.emplace_back("SLUICE_REDIS_URL");
  if (!cfg.store.redis.password.empty()) applied.emplace_back("SLUICE_REDIS_PASSWORD_FILE");
  if (cfg.server.admin_token.empty()) {
    const char* token = getenv("SLUICE_ADMIN_TOKEN");
    const char* file = getenv("SLUICE_ADMIN_TOKEN_FILE");
    if (token != nullptr && *token != '\0') {
      applied.emplace_back("SLUICE_ADMIN_TOKEN");
    } else if (file != nullptr && *file != '\0') {
      applied.emplace_back("SLUICE_ADMIN_TOKEN_FILE");
    }
  }
  return applied;
}

std::string DescribeRegistry(const config::Config& cfg) {
  if (cfg.store.type == config::StoreType::kRedis) {
    return absl::StrCat("in Redis, under ", cfg.store.redis.key_prefix, ":{registry}");
  }
  const std::string path = config::RegistryFile(cfg.store.memory);
  if (path.empty()) {
    return "in memory only, lost at exit (neither store.memory.registry_path nor snapshot_path is "
           "set)";
  }
  if (cfg.store.memory.registry_path.empty()) {
    return absl::StrCat(path, " (beside the snapshot; store.memory.registry_path is not set)");
  }
  return path;
}

void LogConfigSummary(const config::Config& cfg, std::string_view event) {
  if (!LogEnabled(LogLevel::kDebug)) return;
  const std::vector<std::string> env =
      AppliedEnvironment(cfg, [](const char* name) { return std::getenv(name); });
  // The read-write token "admin": the file's, or the environment's.
  const auto from_env = [&env](std::string_view name) {
    return std::find(env.begin(), env.end(), name) != env.end();
  };
  std::vector<std::string> tokens;
  if (!cfg.server.admin_token.empty() || from_env("SLUICE_ADMIN_TOKEN") ||
      from_env("SLUICE_ADMIN_TOKEN_FILE")) {
    tokens.emplace_back("admin");
  }
  for (const config::AdminTokenConfig& t : cfg.server.admin_tokens) {
    tokens.push_back(absl::StrCat(t.name, t.write ? ":write" : ":read"));
  }
  std::vector<std::string> sinks;
  for (const config::SinkConfig& sink : cfg.alerts.sinks) {
    const std::string host =
        UrlHost(sink.type == config::SinkConfig::Type::kEmail ? sink.smtp_url : sink.url);
    sinks.push_back(absl::StrCat(ToAbsl(SinkTypeName(sink.type)), host.empty() ? "" : "@", host));
  }
  {
    Log line(LogLevel::kDebug, "configuration summary");
    line.Str("event", event)
        .Str("config", cfg.path)
        .Str("listen", cfg.server.listen)
        .Str("admin_listen", cfg.server.admin_listen)
        .Int("threads", cfg.server.threads)
        .Int("max_connections", cfg.server.max_connections)
        .Int("admin_max_connections", cfg.server.admin_max_connections)
        .Str("admin_tokens", absl::StrJoin(tokens, ","))
        .Int("deny_status", cfg.server.deny_status)
        .Str("anonymous_plan", cfg.server.anonymous_plan)
        .Int("trusted_proxies", static_cast<int64_t>(cfg.server.trusted_proxies.size()))
        .Str("access_log", AccessLogModeName(cfg.server.access_log.mode))
        .Double("access_log_sample", cfg.server.access_log.sample)
        .Int("access_log_max_per_second", cfg.server.access_log.max_per_second)
        .Str("store", StoreName(cfg.store.type))
        .Str("on_store_error",
             cfg.on_store_error == config::OnStoreError::kDeny ? "deny" : "allow");
    if (!cfg.server.grpc_listen.empty()) {
      line.Str("grpc_listen", cfg.server.grpc_listen)
          .Str("grpc_handshake_timeout", absl::FormatDuration(cfg.server.grpc_handshake_timeout))
          .Str("grpc_idle_timeout", absl::FormatDuration(cfg.server.grpc_idle_timeout))
          .Str("grpc_request_timeout", absl::FormatDuration(cfg.server.grpc_request_timeout))
          .Str("grpc_write_timeout", absl::FormatDuration(cfg.server.grpc_write_timeout));
    }
    if (cfg.store.type == config::StoreType::kRedis) {
      if (cfg.store.redis.cluster_nodes.empty()) {
        line.Str("redis_host", UrlHost(cfg.store.redis.url))
            .Str("redis_url_source", cfg.store.redis.url_source);
      } else {
        // Seeds and the ACL user are no secrets (the password never appears here).
        line.Str("redis_cluster_nodes", absl::StrJoin(cfg.store.redis.cluster_nodes, ","))
            .Str("redis_username", cfg.store.redis.username);
      }
      line.Str("redis_timeout", absl::FormatDuration(cfg.store.redis.timeout))
          .Str("redis_key_prefix", cfg.store.redis.key_prefix);
    } else {
      line.Str("snapshot_path", cfg.store.memory.snapshot_path)
          .Str("snapshot_interval", absl::FormatDuration(cfg.store.memory.snapshot_interval))
          .Str("registry_path", cfg.store.memory.registry_path);
    }
    line.Str("registry", DescribeRegistry(cfg));
    line.Int("plans", static_cast<int64_t>(cfg.plans.size()))
        .Int("keys", static_cast<int64_t>(cfg.keys.size()))
        .Str("alert_sinks", absl::StrJoin(sinks, ","))
        .Int("alert_max_attempts", cfg.alerts.retry.max_attempts)
        .Str("env", absl::StrJoin(env, ","));
  }
  for (const config::PlanConfig& plan : cfg.plans) {
    std::vector<std::string> limits;
    for (const config::LimitConfig& l : plan.limits) {
      limits.push_back(absl::StrCat(l.name, "=", l.quota, "/", l.window.text,
                                    l.alert_at.empty() ? "" : " alert_at ",
                                    absl::StrJoin(l.alert_at, ",")));
    }
    Log(LogLevel::kDebug, "plan")
        .Str("event", event)
        .Str("plan", plan.name)
        .Str("timezone", plan.timezone)
        .Str("limits", absl::StrJoin(limits, "; "));
  }
}

}  // namespace sluice::server
