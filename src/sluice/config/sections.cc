// The readers of sluice.yaml's sections (sections.h). Each reads what its fields say, with the
// defaults of schema.h for what is absent, and checks only what the YAML itself can get wrong
// (kinds, unknown and repeated names, numbers that do not parse); whether the values make sense
// is Validate's question (checks.cc).
#include "sluice/config/sections.h"

#include <algorithm>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "sluice/config/config.h"
#include "sluice/config/limits.h"
#include "sluice/config/validators.h"
#include "sluice/config/yaml_fields.h"

namespace sluice::config {
namespace {

using yaml::Value;

absl::Status ParseAdminTokens(const Field& field, std::vector<AdminTokenConfig>& tokens) {
  return ForEachItem(field, [&](const Field& item, size_t) {
    Fields f;
    SLUICE_RETURN_IF_ERROR(ReadFields(item, {"name", "token", "token_sha256", "access"}, f));
    AdminTokenConfig token;
    const Field name = f.Get("name");
    SLUICE_RETURN_IF_ERROR(Require(name));
    SLUICE_RETURN_IF_ERROR(ReadString(name, token.name));
    const Field plain = f.Get("token");
    const Field hashed = f.Get("token_sha256");
    if (plain.absent() == hashed.absent()) {
      return Error(item.path, "set exactly one of token and token_sha256");
    }
    SLUICE_RETURN_IF_ERROR(ReadString(plain, token.token));
    SLUICE_RETURN_IF_ERROR(ReadString(hashed, token.token_sha256));
    bool write = false;
    SLUICE_RETURN_IF_ERROR(
        ReadEnum(f.Get("access"), "access", {{"read", false}, {"write", true}}, write));
    token.write = write;
    tokens.push_back(std::move(token));
    return absl::OkStatus();
  });
}

// True if `path` is `ancestor` or lies below it, segment-wise ("/v1" is above "/v1/check", not
// above "/v1x").
bool SameOrBelow(absl::string_view path, absl::string_view ancestor) {
  return path == ancestor || (absl::StartsWith(path, ancestor) && path.size() > ancestor.size() &&
                              path[ancestor.size()] == '/');
}

// server.authorize_prefix: the gateway route is this path and everything below it, so it must be
// a plain path that cannot be read two ways (no query, no escapes, no dot segments, no empty
// segment and so no trailing slash) and must not swallow or sit under another data-plane route.
absl::Status ReadAuthorizePrefix(const Field& field, std::string& prefix) {
  SLUICE_RETURN_IF_ERROR(ReadString(field, prefix));
  if (prefix.empty() || prefix.front() != '/') {
    return Error(field.path, absl::StrCat("must start with /, got ", Quote(prefix)));
  }
  if (prefix.size() > kMaxAuthorizePrefixLength) {
    return Error(field.path, absl::StrCat("must be at most ", kMaxAuthorizePrefixLength,
                                          " characters, got ", prefix.size()));
  }
  if (prefix.find('?') != std::string::npos || prefix.find('#') != std::string::npos) {
    return Error(field.path,
                 absl::StrCat("must be a path without a query or fragment, got ", Quote(prefix)));
  }
  for (absl::string_view segment : absl::StrSplit(absl::string_view(prefix).substr(1), '/')) {
    if (segment.empty()) {
      return Error(field.path, absl::StrCat("must not end in / or hold an empty segment (//), got ",
                                            Quote(prefix)));
    }
    if (segment == "." || segment == "..") {
      return Error(field.path,
                   absl::StrCat("must not hold a . or .. segment, got ", Quote(prefix)));
    }
    for (const char c : segment) {
      if (!IsNameChar(c) && c != '~') {
        return Error(field.path, absl::StrCat("bad path ", Quote(prefix),
                                              " (want segments of A-Z a-z 0-9 _ . - ~)"));
      }
    }
  }
  for (const std::string_view route : kDataPlaneRoutes) {
    const absl::string_view other(route.data(), route.size());
    if (SameOrBelow(prefix, other) || SameOrBelow(other, prefix)) {
      return Error(field.path, absl::StrCat(Quote(prefix), " overlaps the data plane route ", other,
                                            " (pick a path beside it)"));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseAccessLog(const Field& field, AccessLogConfig& log) {
  Fields f;
  SLUICE_RETURN_IF_ERROR(ReadFields(field, {"mode", "sample", "max_per_second"}, f));
  SLUICE_RETURN_IF_ERROR(ReadEnum(f.Get("mode"), "access log mode",
                                  {{"off", AccessLogMode::kOff},
                                   {"denied", AccessLogMode::kDenied},
                                   {"all", AccessLogMode::kAll}},
                                  log.mode));
  const Field sample = f.Get("sample");
  if (!sample.absent()) {
    if (!sample.node->IsScalar()) {
      return Error(sample.path, absl::StrCat("expected a number, got ", KindOf(*sample.node)));
    }
    const std::string& text = sample.node->Scalar();
    double value = 0;
    // SimpleAtod accepts "nan" and "inf", which the range check below refuses.
    if (!absl::SimpleAtod(text, &value) || !(value >= 0 && value <= 1)) {
      return Error(sample.path, absl::StrCat("must be a number from 0 to 1, got ", Quote(text)));
    }
    log.sample = value;
  }
  return ReadInt(f.Get("max_per_second"), 1, 1'000'000, log.max_per_second);
}

absl::Status ParseServer(const Field& field, ServerConfig& server) {
  Fields f;
  SLUICE_RETURN_IF_ERROR(ReadFields(field,
                                    {"listen",
                                     "admin_listen",
                                     "admin_token",
                                     "threads",
                                     "api_key_header",
                                     "deny_status",
                                     "anonymous_plan",
                                     "anonymous_ipv4_prefix",
                                     "anonymous_ipv6_prefix",
                                     "trusted_proxies",
                                     "max_connections",
                                     "admin_max_connections",
                                     "shutdown_delay",
                                     "admin_tokens",
                                     "authorize_prefix",
                                     "access_log",
                                     "grpc_listen",
                                     "grpc_handshake_timeout",
                                     "grpc_idle_timeout",
                                     "grpc_request_timeout",
                                     "grpc_write_timeout"},
                                    f));
  SLUICE_RETURN_IF_ERROR(ParseAccessLog(f.Get("access_log"), server.access_log));
  SLUICE_RETURN_IF_ERROR(ReadString(f.Get("listen"), server.listen));
  SLUICE_RETURN_IF_ERROR(ReadString(f.Get("admin_listen"), server.admin_listen));
  SLUICE_RETURN_IF_ERROR(ReadString(f.Get("grpc_listen"), server.grpc_listen));
  SLUICE_RETURN_IF_ERROR(
      ReadDuration(f.Get("grpc_handshake_timeout"), server.grpc_handshake_timeout));
  SLUICE_RETURN_IF_ERROR(ReadDuration(f.Get("grpc_idle_timeout"), server.grpc_idle_timeout));
  SLUICE_RETURN_IF_ERROR(ReadDuration(f.Get("grpc_request_timeout"), server.grpc_request_timeout));
  SLUICE_RETURN_IF_ERROR(ReadDuration(f.Get("grpc_write_timeout"), server.grpc_write_timeout));
  SLUICE_RETURN_IF_ERROR(ReadString(f.Get("admin_token"), server.admin_token));
  SLUICE_RETURN_IF_ERROR(ReadInt(f.Get("threads"), 0, 1024, server.threads));
  SLUICE_RETURN_IF_ERROR(ReadString(f.Get("api_key_header"), server.api_key_header));
  SLUICE_RETURN_IF_ERROR(ReadInt(f.Get("deny_status"), 400, 499, server.deny_status));
  SLUICE_RETURN_IF_ERROR(ReadAuthorizePrefix(f.Get("authorize_prefix"), server.authorize_prefix));
  SLUICE_RETURN_IF_ERROR(ReadInt(f.Get("max_connections"), 1, 1'000'000, server.max_connections));
  SLUICE_RETURN_IF_ERROR(
      ReadInt(f.Get("admin_max_connections"), 1, 1'000'000, server.admin_max_connections));
  const Field delay = f.Get("shutdown_delay");
  // Zero is a valid delay here (stop at once), unlike the other durations.
  if (!delay.absent() && delay.node->IsScalar() &&
      (delay.node->Scalar() == "0" || delay.node->Scalar() == "0ms" ||
       delay.node->Scalar() == "0s" || delay.node->Scalar() == "0m" ||
       delay.node->Scalar() == "0h")) {
    server.shutdown_delay = absl::ZeroDuration();
  } else {
    SLUICE_RETURN_IF_ERROR(ReadDuration(delay, server.shutdown_delay));
  }
  SLUICE_RETURN_IF_ERROR(ParseAdminTokens(f.Get("admin_tokens"), server.admin_tokens));
  SLUICE_RETURN_IF_ERROR(ReadString(f.Get("anonymous_plan"), server.anonymous_plan));
  SLUICE_RETURN_IF_ERROR(
      ReadInt(f.Get("anonymous_ipv4_prefix"), 1, 32, server.anonymous_ipv4_prefix));
  SLUICE_RETURN_IF_ERROR(
      ReadInt(f.Get("anonymous_ipv6_prefix"), 1, 128, server.anonymous_ipv6_prefix));
  return ForEachItem(f.Get("trusted_proxies"), [&](const Field& item, size_t) {
    return ReadString(item, server.trusted_proxies.emplace_back());
  });
}

absl::Status ParseRedisTls(const Field& field, RedisTlsConfig& tls) {
  // Present even when empty: `tls:` whose fields are all commented out (a null) is `tls: {}`,
  // never plaintext.
  if (field.node->IsDefined()) tls.present = true;
  Fields f;
  SLUICE_RETURN_IF_ERROR(ReadFields(field, {"ca_file", "cert_file", "key_file", "server_name"}, f));
  SLUICE_RETURN_IF_ERROR(ReadString(f.Get("ca_file"), tls.ca_file));
  SLUICE_RETURN_IF_ERROR(ReadString(f.Get("cert_file"), tls.cert_file));
  SLUICE_RETURN_IF_ERROR(ReadString(f.Get("key_file"), tls.key_file));
  return ReadString(f.Get("server_name"), tls.server_name);
}

absl::Status ParseStore(const Field& field, StoreConfig& store) {
  Fields f;
  SLUICE_RETURN_IF_ERROR(ReadFields(field, {"type", "memory", "redis"}, f));
  SLUICE_RETURN_IF_ERROR(ReadEnum(f.Get("type"), "store type",
                                  {{"memory", StoreType::kMemory}, {"redis", StoreType::kRedis}},
                                  store.type));

  Fields memory;
  SLUICE_RETURN_IF_ERROR(
      ReadFields(f.Get("memory"), {"snapshot_path", "snapshot_interval", "registry_path"}, memory));
  SLUICE_RETURN_IF_ERROR(ReadString(memory.Get("snapshot_path"), store.memory.snapshot_path));
  SLUICE_RETURN_IF_ERROR(ReadString(memory.Get("registry_path"), store.memory.registry_path));
  SLUICE_RETURN_IF_ERROR(
      ReadDuration(memory.Get("snapshot_interval"), store.memory.snapshot_interval));

  Fields redis;
  SLUICE_RETURN_IF_ERROR(ReadFields(
      f.Get("redis"),
      {"url", "timeout", "max_wait", "key_prefix", "cluster_nodes", "username", "tls"}, redis));
  store.redis.url_set = store.redis.url_set || !redis.Get("url").absent();
  SLUICE_RETURN_IF_ERROR(ReadString(redis.Get("url"), store.redis.url));
  SLUICE_RETURN_IF_ERROR(ReadDuration(redis.Get("timeout"), store.redis.timeout));
  SLUICE_RETURN_IF_ERROR(ReadDuration(redis.Get("max_wait"), store.redis.max_wait));
  const Field cluster_nodes = redis.Get("cluster_nodes");
  SLUICE_RETURN_IF_ERROR(ForEachItem(cluster_nodes, [&](const Field& item, size_t) {
    return ReadString(item, store.redis.cluster_nodes.emplace_back());
  }));
  if (cluster_nodes.node->IsDefined() && store.redis.cluster_nodes.empty()) {
    // An empty list, or the key with nothing after it (every seed commented out), would quietly
    // mean the one Redis of the default URL.
    return Error(cluster_nodes.path, "expected at least one seed node (or no cluster_nodes)");
  }
  SLUICE_RETURN_IF_ERROR(ReadString(redis.Get("key_prefix"), store.redis.key_prefix));
  SLUICE_RETURN_IF_ERROR(ReadString(redis.Get("username"), store.redis.username));
  return ParseRedisTls(redis.Get("tls"), store.redis.tls);
}

absl::Status ParseAlertAt(const Field& field, std::vector<int>& alert_at) {
  const auto read_percentage = [&](const Field& item, size_t) {
    int percent = 0;
    if (item.absent()) return Error(item.path, "expected an integer, got nothing");
    SLUICE_RETURN_IF_ERROR(ReadInt(item, 1, 100, percent));
    if (std::find(alert_at.begin(), alert_at.end(), percent) != alert_at.end()) {
      return Error(item.path, absl::StrCat("duplicate percentage ", percent));
    }
    alert_at.push_back(percent);
    return absl::OkStatus();
  };
  SLUICE_RETURN_IF_ERROR(ForEachItem(field, read_percentage));
  std::sort(alert_at.begin(), alert_at.end());
  return absl::OkStatus();
}

absl::Status ParseLimit(const Field& field, LimitConfig& limit) {
  Fields f;
  SLUICE_RETURN_IF_ERROR(ReadFields(
      field, {"name", "quota", "window", "alert_at", "shadow", "algorithm", "burst"}, f));
  SLUICE_RETURN_IF_ERROR(ReadBool(f.Get("shadow"), limit.shadow));
  SLUICE_RETURN_IF_ERROR(ReadEnum(
      f.Get("algorithm"), "algorithm",
      {{"fixed", Algorithm::kFixed}, {"sliding", Algorithm::kSliding}, {"gcra", Algorithm::kGcra}},
      limit.algorithm));
  SLUICE_RETURN_IF_ERROR(ReadInt64(f.Get("burst"), 1, kMaxQuota, limit.burst));
  const Field name = f.Get("name");
  SLUICE_RETURN_IF_ERROR(Require(name));
  SLUICE_RETURN_IF_ERROR(ReadString(name, limit.name));
  const Field quota = f.Get("quota");
  SLUICE_RETURN_IF_ERROR(Require(quota));
  const Field window = f.Get("window");
  std::string window_text;
  SLUICE_RETURN_IF_ERROR(Require(window));
  SLUICE_RETURN_IF_ERROR(ReadString(window, window_text));
  absl::StatusOr<WindowSpec> spec = ParseWindow(window_text);
  if (!spec.ok()) return Error(window.path, spec.status().message());
  limit.window = *std::move(spec);
  // A credit limit's quota is the grant every subject starts with, and may be none.
  if (limit.window.kind == WindowSpec::Kind::kCredit) {
    SLUICE_RETURN_IF_ERROR(ReadInt64(quota, 0, kMaxQuota, limit.quota));
  } else if (absl::Status s = ReadInt64(quota, 1, kMaxQuota, limit.quota); !s.ok()) {
    int64_t zero = 0;
    if (ReadInt64(quota, 0, 0, zero).ok()) return Error(quota.path, kZeroQuotaMessage);
    return s;
  }
  return ParseAlertAt(f.Get("alert_at"), limit.alert_at);
}

absl::Status ParsePlan(const Field& field, PlanConfig& plan) {
  Fields f;
  SLUICE_RETURN_IF_ERROR(
      ReadFields(field, {"timezone", "limits", "shadow", "on_reservation_expiry"}, f));
  SLUICE_RETURN_IF_ERROR(ReadString(f.Get("timezone"), plan.timezone));
  SLUICE_RETURN_IF_ERROR(ReadBool(f.Get("shadow"), plan.shadow));
  using Expiry = PlanConfig::OnReservationExpiry;
  SLUICE_RETURN_IF_ERROR(ReadEnum(f.Get("on_reservation_expiry"), "reservation expiry policy",
                                  {{"charge", Expiry::kCharge}, {"release", Expiry::kRelease}},
                                  plan.on_reservation_expiry));
  return ForEachItem(f.Get("limits"), [&](const Field& item, size_t) {
    return ParseLimit(item, plan.limits.emplace_back());
  });
}

absl::Status ParsePlans(const Field& field, std::vector<PlanConfig>& plans) {
  if (!field.absent() && !field.node->IsMap()) {
    return Error(field.path,
                 absl::StrCat("expected a map of plan names, got ", KindOf(*field.node)));
  }
  if (!field.absent()) {
    for (const auto& [key, value] : field.node->pairs) {
      if (!key->IsScalar()) return Error(field.path, "plan names must be plain strings");
      PlanConfig plan;
      plan.name = key->Scalar();
      const std::string path = absl::StrCat(field.path, ".", absl::CHexEscape(plan.name));
      SLUICE_RETURN_IF_ERROR(ParsePlan(Field{value, path}, plan));
      plans.push_back(std::move(plan));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseKeys(const Field& field, std::vector<KeyConfig>& keys) {
  if (!field.absent() && field.node->IsSequence()) keys.reserve(field.node->items.size());
  return ForEachItem(field, [&](const Field& item, size_t) {
    Fields f;
    SLUICE_RETURN_IF_ERROR(ReadFields(
        item, {"key", "key_sha256", "subject", "plan", "email", "webhook", "webhook_secret"}, f));
    KeyConfig key;
    const Field plain = f.Get("key");
    const Field hashed = f.Get("key_sha256");
    if (plain.absent() == hashed.absent()) {
      return Error(item.path, "set exactly one of key and key_sha256");
    }
    SLUICE_RETURN_IF_ERROR(ReadString(plain, key.key));
    SLUICE_RETURN_IF_ERROR(ReadString(hashed, key.key_sha256));
    const Field subject = f.Get("subject");
    SLUICE_RETURN_IF_ERROR(Require(subject));
    SLUICE_RETURN_IF_ERROR(ReadString(subject, key.subject));
    const Field plan = f.Get("plan");
    SLUICE_RETURN_IF_ERROR(Require(plan));
    SLUICE_RETURN_IF_ERROR(ReadString(plan, key.plan));
    SLUICE_RETURN_IF_ERROR(ReadString(f.Get("email"), key.email));
    SLUICE_RETURN_IF_ERROR(ReadString(f.Get("webhook"), key.webhook));
    SLUICE_RETURN_IF_ERROR(ReadString(f.Get("webhook_secret"), key.webhook_secret));
    keys.push_back(std::move(key));
    return absl::OkStatus();
  });
}

std::vector<absl::string_view> FieldsOfSink(SinkConfig::Type type) {
  switch (type) {
    case SinkConfig::Type::kWebhook:
      return {"type", "url", "secret"};
    case SinkConfig::Type::kSlack:
      return {"type", "url"};
    case SinkConfig::Type::kEmail:
      return {"type", "smtp_url", "from", "to"};
  }
  return {};
}

absl::Status ParseSink(const Field& field, SinkConfig& sink) {
  Fields f;
  SLUICE_RETURN_IF_ERROR(ReadFields(field, {"type", "url", "secret", "smtp_url", "from", "to"}, f));
  const Field type = f.Get("type");
  SLUICE_RETURN_IF_ERROR(Require(type));
  SLUICE_RETURN_IF_ERROR(ReadEnum(type, "sink type",
                                  {{"webhook", SinkConfig::Type::kWebhook},
                                   {"slack", SinkConfig::Type::kSlack},
                                   {"email", SinkConfig::Type::kEmail}},
                                  sink.type));
  // A field of another sink type is most likely a mistake (a secret on a Slack sink is ignored).
  const std::vector<absl::string_view> used = FieldsOfSink(sink.type);
  for (const auto& item : f.items) {
    if (std::find(used.begin(), used.end(), item.first) == used.end()) {
      return Error(f.Get(item.first).path,
                   absl::StrCat("not used by sinks of type ", type.node->Scalar(),
                                " (expected one of: ", absl::StrJoin(used, ", "), ")"));
    }
  }
  switch (sink.type) {
    case SinkConfig::Type::kWebhook:
      SLUICE_RETURN_IF_ERROR(ReadString(f.Get("url"), sink.url));
      return ReadString(f.Get("secret"), sink.secret);
    case SinkConfig::Type::kSlack:
      return ReadString(f.Get("url"), sink.url);
    case SinkConfig::Type::kEmail:
      SLUICE_RETURN_IF_ERROR(ReadString(f.Get("smtp_url"), sink.smtp_url));
      SLUICE_RETURN_IF_ERROR(ReadString(f.Get("from"), sink.from));
      return ForEachItem(f.Get("to"), [&](const Field& item, size_t) {
        return ReadString(item, sink.to.emplace_back());
      });
  }
  return absl::OkStatus();
}

absl::Status ParseEnvoy(const Field& field, EnvoyConfig& envoy) {
  Fields f;
  SLUICE_RETURN_IF_ERROR(ReadFields(
      field,
      {"descriptor_keys", "ratelimit_config", "response_dynamic_metadata", "ratelimit_report_key"},
      f));
  SLUICE_RETURN_IF_ERROR(
      ReadBool(f.Get("response_dynamic_metadata"), envoy.response_dynamic_metadata));
  const Field ratelimit_config = f.Get("ratelimit_config");
  SLUICE_RETURN_IF_ERROR(ReadString(ratelimit_config, envoy.ratelimit_config));
  if (envoy.ratelimit_config.size() > kMaxPathLength ||
      envoy.ratelimit_config.find('\0') != std::string::npos) {
    return Error(ratelimit_config.path,
                 absl::StrCat("must be a path of at most ", kMaxPathLength, " bytes"));
  }
  const Field report_key = f.Get("ratelimit_report_key");
  SLUICE_RETURN_IF_ERROR(ReadString(report_key, envoy.ratelimit_report_key));
  if (envoy.ratelimit_report_key.size() > 128 ||
      !AllOf(envoy.ratelimit_report_key, IsVisibleAscii)) {
    return Error(report_key.path, "must be 0-128 printable ASCII characters without spaces");
  }
  Fields k;
  SLUICE_RETURN_IF_ERROR(
      ReadFields(f.Get("descriptor_keys"), {"api_key", "subject", "plan", "cost", "report"}, k));
  DescriptorKeys& keys = envoy.descriptor_keys;
  const std::pair<const char*, std::string*> all[] = {{"api_key", &keys.api_key},
                                                      {"subject", &keys.subject},
                                                      {"plan", &keys.plan},
                                                      {"cost", &keys.cost},
                                                      {"report", &keys.report}};
  std::unordered_set<std::string> seen;
  for (const auto& [name, out] : all) {
    const Field key = k.Get(name);
    SLUICE_RETURN_IF_ERROR(ReadString(key, *out));
    if (out->empty() || out->size() > 128 || !AllOf(*out, IsVisibleAscii)) {
      return Error(key.path, "must be 1-128 printable ASCII characters without spaces");
    }
    // One entry key naming two inputs would make a descriptor mean two things.
    if (!seen.insert(*out).second) {
      return Error(key.path, absl::StrCat(Quote(*out), " is already another descriptor key"));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseAlerts(const Field& field, AlertsConfig& alerts) {
  Fields f;
  SLUICE_RETURN_IF_ERROR(ReadFields(field, {"sinks", "retry", "lease"}, f));
  SLUICE_RETURN_IF_ERROR(ReadDuration(f.Get("lease"), alerts.lease));
  SLUICE_RETURN_IF_ERROR(ForEachItem(f.Get("sinks"), [&](const Field& item, size_t) {
    return ParseSink(item, alerts.sinks.emplace_back());
  }));
  Fields retry;
  SLUICE_RETURN_IF_ERROR(
      ReadFields(f.Get("retry"), {"max_attempts", "first_delay", "max_delay"}, retry));
  SLUICE_RETURN_IF_ERROR(ReadInt(retry.Get("max_attempts"), 1, 100, alerts.retry.max_attempts));
  SLUICE_RETURN_IF_ERROR(ReadDuration(retry.Get("first_delay"), alerts.retry.first_delay));
  return ReadDuration(retry.Get("max_delay"), alerts.retry.max_delay);
}

}  // namespace

absl::Status ParseRoot(const Value& root, Config& config) {
  const Field document{&root, ""};
  if (!document.absent() && !root.IsMap()) {
    return Error("", absl::StrCat("expected a map at the top level, got ", KindOf(root)));
  }
  Fields f;
  SLUICE_RETURN_IF_ERROR(ReadFields(
      document, {"server", "store", "on_store_error", "plans", "keys", "alerts", "envoy"}, f));
  SLUICE_RETURN_IF_ERROR(ParseServer(f.Get("server"), config.server));
  SLUICE_RETURN_IF_ERROR(ParseStore(f.Get("store"), config.store));
  SLUICE_RETURN_IF_ERROR(ReadEnum(f.Get("on_store_error"), "store error policy",
                                  {{"allow", OnStoreError::kAllow}, {"deny", OnStoreError::kDeny}},
                                  config.on_store_error));
  SLUICE_RETURN_IF_ERROR(ParsePlans(f.Get("plans"), config.plans));
  SLUICE_RETURN_IF_ERROR(ParseKeys(f.Get("keys"), config.keys));
  SLUICE_RETURN_IF_ERROR(ParseAlerts(f.Get("alerts"), config.alerts));
  SLUICE_RETURN_IF_ERROR(ParseEnvoy(f.Get("envoy"), config.envoy));
  // What the file says is read; whether it makes sense is the same question for a Config built in
  // code, so one function answers both.
  return Validate(config);
}

}  // namespace sluice::config

#undef SLUICE_RETURN_IF_ERROR
