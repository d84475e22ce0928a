#include "sluice/frontend/metrics.h"

#include <string>

#include "sluice/frontend/frontend.h"

namespace sluice::frontend {

FrontendMetrics::FrontendMetrics(metrics::Registry& registry)
    : decisions_(registry.AddCounterFamily("sluice_decisions_total",
                                           "Decisions by plan and result (allowed, denied).",
                                           {"plan", "result"})),
      limit_denials_(registry.AddCounterFamily(
          "sluice_limit_denials_total",
          "Denials by plan and limit: a denial counts once for each limit it violated.",
          {"plan", "limit"})),
      shadow_denials_(registry.AddCounterFamily(
          "sluice_shadow_denials_total",
          "Decisions a shadow limit would have denied, by plan and limit (the shadow limit never "
          "denies: the request may have been admitted).",
          {"plan", "limit"})),
      access_log_dropped_(registry.AddCounter(
          "sluice_access_log_dropped_total",
          "Access log lines dropped because server.access_log.max_per_second was reached.")),
      requests_(registry.AddCounterFamily("sluice_http_requests_total",
                                          "HTTP requests by route and status code.",
                                          {"route", "code"})),
      store_errors_(registry.AddCounterFamily(
          "sluice_store_errors_total",
          "Decisions answered by on_store_error because the store failed, by plan and reason "
          "(timeout, connection, circuit_open, overloaded, late, busy, oom, loading, readonly, "
          "other).",
          {"plan", "reason"})),
      decision_seconds_(registry.AddHistogram(
          "sluice_decision_duration_seconds", "Time to decide, from request parsed to decision.",
          {0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1})),
      connections_(registry.AddGauge("sluice_open_connections", "Open data plane connections.")) {
  registry.AddCallbackGauge(
      "sluice_store_up",
      "1 if the store answered the latest decision or readiness probe, 0 if it failed.",
      [this] { return store_health_.ok() ? 1.0 : 0.0; });
  reservations_ended_ = &registry.AddCounterFamily(
      "sluice_reservations_ended_total",
      "Reservations that ended, by how: settled, released or expired (charged its estimate or "
      "released by the plan's on_reservation_expiry).",
      {"how"});
  overshoot_ = &registry.AddCounterFamily(
      "sluice_overshoot_total",
      "Units charged beyond a limit's quota by settled reservations (the real cost exceeded what "
      "was left), by plan and limit.",
      {"plan", "limit"});
}

void FrontendMetrics::CountEnded(ReservationEnd how, const Decision& d) {
  const char* name = how == ReservationEnd::kSettle    ? "settled"
                     : how == ReservationEnd::kRelease ? "released"
                                                       : "expired";
  reservations_ended_->WithLabels({name}).Inc();
  for (const LimitDecision& l : d.limits) {
    if (l.overshoot <= 0 || l.limit == nullptr || d.plan == nullptr) continue;
    overshoot_->WithLabels({d.plan->name, l.limit->name}).Inc(static_cast<uint64_t>(l.overshoot));
  }
}

void FrontendMetrics::CountDecision(const Frontend& fe, const std::string& plan,
                                    const Decision& d) {
  const DecisionCounters::PlanCounters* counters = nullptr;
  if (fe.counters != nullptr && d.plan != nullptr && d.plan->index < fe.counters->plans.size()) {
    counters = &fe.counters->plans[d.plan->index];
  }
  if (counters != nullptr) {
    (d.allowed ? counters->allowed : counters->denied)->Inc();
  } else {
    decisions_.WithLabels({plan, d.allowed ? "allowed" : "denied"}).Inc();
  }
  store_health_.Report(!d.degraded, d.failure);
  if (d.degraded) {
    store_errors_.WithLabels({plan, std::string(StoreFailureName(d.failure))}).Inc();
    return;
  }
  for (size_t i = 0; i < d.limits.size(); ++i) {
    if (!d.limits[i].would_deny) continue;
    if (counters != nullptr && i < counters->shadow_denials.size() &&
        counters->shadow_denials[i] != nullptr) {
      counters->shadow_denials[i]->Inc();
    } else if (d.limits[i].limit != nullptr) {
      shadow_denials_.WithLabels({plan, d.limits[i].limit->name}).Inc();
    }
  }
  if (!d.allowed) {
    for (size_t i = 0; i < d.limits.size(); ++i) {
      if (!d.limits[i].violated) continue;
      if (counters != nullptr && i < counters->limit_denials.size()) {
        counters->limit_denials[i]->Inc();
      } else if (d.limits[i].limit != nullptr) {
        limit_denials_.WithLabels({plan, d.limits[i].limit->name}).Inc();
      }
    }
  }
}

std::shared_ptr<const DecisionCounters> FrontendMetrics::CountersFor(const PlanSet& plans) {
  auto counters = std::make_shared<DecisionCounters>();
  for (const std::string& name : plans.names()) {
    const Plan* plan = plans.Find(name);
    DecisionCounters::PlanCounters pc{.allowed = &decisions_.WithLabels({name, "allowed"}),
                                      .denied = &decisions_.WithLabels({name, "denied"})};
    for (const Limit& limit : plan->limits) {
      pc.limit_denials.push_back(&limit_denials_.WithLabels({name, limit.name}));
      // Only shadow limits would deny without denying: no series for the others.
      pc.shadow_denials.push_back(limit.shadow ? &shadow_denials_.WithLabels({name, limit.name})
                                               : nullptr);
    }
    if (plan->index != counters->plans.size()) return nullptr;  // not FromConfig's PlanSet
    counters->plans.push_back(std::move(pc));
  }
  return counters;
}

void FrontendMetrics::CountRequest(std::string_view route, unsigned status) {
  requests_.WithLabels({std::string(route), std::to_string(status)}).Inc();
}

}  // namespace sluice::frontend
