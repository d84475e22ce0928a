#include "sluice/embed/convert.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>
#include <variant>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "sluice/limiter/algorithm.h"
#include "sluice/limiter/window.h"

namespace sluice::embed {
namespace {

// The name config::Validate gives a plan: "plans.free", or "plans[0]" without a name.
std::string PlanPath(const lib::PlanOptions& plan, size_t index) {
  return plan.name.empty() ? absl::StrCat("plans[", index, "]")
                           : absl::StrCat("plans.", absl::CHexEscape(plan.name));
}

std::chrono::system_clock::time_point ToChrono(absl::Time t) { return absl::ToChronoTime(t); }

}  // namespace

absl::Time PublicClock::Now() const { return absl::FromChrono(clock_->Now()); }

absl::StatusOr<config::Config> ToConfig(const lib::Options& options) {
  config::Config cfg;
  cfg.path = "options";
  for (size_t p = 0; p < options.plans.size(); ++p) {
    const lib::PlanOptions& plan = options.plans[p];
    config::PlanConfig& out = cfg.plans.emplace_back();
    out.name = plan.name;
    out.timezone = plan.timezone;
    out.shadow = plan.shadow;
    out.on_reservation_expiry = plan.release_on_expiry
                                    ? config::PlanConfig::OnReservationExpiry::kRelease
                                    : config::PlanConfig::OnReservationExpiry::kCharge;
    for (size_t l = 0; l < plan.limits.size(); ++l) {
      const lib::LimitOptions& limit = plan.limits[l];
      absl::StatusOr<config::WindowSpec> window = config::ParseWindow(limit.window);
      if (!window.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(PlanPath(plan, p), ".limits[", l,
                                                       "].window: ", window.status().message()));
      }
      std::vector<int> alert_at = limit.alert_at;
      // As the loader does: the order in which percentages are written means nothing.
      std::sort(alert_at.begin(), alert_at.end());
      out.limits.push_back(config::LimitConfig{.name = limit.name,
                                               .quota = limit.quota,
                                               .window = *std::move(window),
                                               .alert_at = std::move(alert_at),
                                               .shadow = limit.shadow});
    }
  }
  if (const auto* memory = std::get_if<lib::MemoryStoreOptions>(&options.store)) {
    cfg.store.type = config::StoreType::kMemory;
    cfg.store.memory.snapshot_path = memory->snapshot_path;
    cfg.store.memory.snapshot_interval = absl::FromChrono(memory->snapshot_interval);
  } else {
    const auto& redis = std::get<lib::RedisStoreOptions>(options.store);
    cfg.store.type = config::StoreType::kRedis;
    cfg.store.redis.url = redis.url;
    if (!redis.cluster_nodes.empty() && redis.url != lib::RedisStoreOptions{}.url) {
      return absl::InvalidArgumentError(
          "store.redis.cluster_nodes: cannot be set together with store.redis.url (the seeds "
          "replace the URL: leave it at its default)");
    }
    cfg.store.redis.cluster_nodes = redis.cluster_nodes;
    cfg.store.redis.password = redis.password;
    cfg.store.redis.username = redis.username;
    if (!redis.username.empty() && redis.password.empty()) {
      return absl::InvalidArgumentError("store.redis.username: needs a password");
    }
    cfg.store.redis.key_prefix = redis.key_prefix;
    cfg.store.redis.timeout = absl::FromChrono(redis.timeout);
    cfg.store.redis.tls = {.ca_file = redis.tls.ca_file,
                           .cert_file = redis.tls.cert_file,
                           .key_file = redis.tls.key_file,
                           .server_name = redis.tls.server_name,
                           .present = redis.tls.enabled};
  }
  cfg.on_store_error = options.on_store_error == lib::OnStoreError::kDeny
                           ? config::OnStoreError::kDeny
                           : config::OnStoreError::kAllow;
  for (const lib::WebhookOptions& webhook : options.alerts.webhooks) {
    cfg.alerts.sinks.push_back(config::SinkConfig{
        .type = config::SinkConfig::Type::kWebhook, .url = webhook.url, .secret = webhook.secret});
  }
  if (absl::Status s = config::Validate(cfg); !s.ok()) return s;
  return cfg;
}

lib::Status FromAbsl(const absl::Status& status) {
  if (status.ok()) return lib::Status();
  return lib::Status(static_cast<lib::StatusCode>(status.code()), std::string(status.message()));
}

lib::Decision ToPublic(const Decision& decision) {
  lib::Decision out;
  out.allowed = decision.allowed;
  out.degraded = decision.degraded;
  if (decision.degraded) out.degraded_reason = std::string(StoreFailureName(decision.failure));
  out.retry_after = std::chrono::seconds(decision.retry_after);
  out.limits.reserve(decision.limits.size());
  for (const LimitDecision& l : decision.limits) {
    out.limits.push_back(lib::LimitResult{
        .name = l.limit->name,
        .quota = l.limit->quota,
        .used = l.used,
        .held = l.held,
        .remaining = l.remaining,
        .overshoot = l.overshoot,
        .reset_after = std::chrono::seconds(l.reset_after),
        .violated = l.violated,
        .would_deny = l.would_deny,
        .retry_after = std::chrono::seconds(l.violated ? l.reset_after : 0),
    });
  }
  return out;
}

lib::AlertEvent ToPublic(const AlertEvent& event) {
  return lib::AlertEvent{
      .id = event.Id(),
      .subject = event.subject,
      .plan = event.plan,
      .limit = event.limit,
      .threshold = event.threshold,
      .used = event.used,
      .quota = event.quota,
      .window_start = ToChrono(event.window_start),
      .window_end = ToChrono(event.window_end),
      .occurred_at = ToChrono(event.occurred_at),
  };
}

std::vector<lib::LimitUsage> ToPublic(const Plan& plan, const std::vector<LimitUsage>& usage,
                                      absl::Time now) {
  std::vector<lib::LimitUsage> out;
  out.reserve(plan.limits.size());
  for (size_t i = 0; i < plan.limits.size() && i < usage.size(); ++i) {
    const Limit& limit = plan.limits[i];
    const WindowBounds bounds = limit.window_cache->Get(limit.window, plan.tz, now);
    const UnitsView v = ViewOf(limit, bounds, now, usage[i].used, usage[i].prev, usage[i].held);
    out.push_back(lib::LimitUsage{
        .name = limit.name,
        .quota = limit.quota,
        .used = v.used,
        .held = usage[i].held,
        .remaining = v.remaining,
        .reset_after = std::chrono::seconds(v.reset_after),
        .fired = usage[i].fired,
    });
  }
  return out;
}

}  // namespace sluice::embed
