// The metrics every front end records: decisions by plan and result, the limits that denied, the
// shadow limits that would have, store errors, the time to decide, the store's health; and, in
// the same registration (so /metrics keeps its order), the HTTP planes' requests, connections and
// dropped access log lines.
#ifndef SLUICE_FRONTEND_METRICS_H_
#define SLUICE_FRONTEND_METRICS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/limiter/decision.h"
#include "sluice/limiter/plan.h"
#include "sluice/limiter/store.h"
#include "sluice/metrics/metrics.h"

namespace sluice::frontend {

struct Frontend;

// The decision counters of every plan of one Limiter's PlanSet, resolved once per reload so that
// counting a decision takes no lock, lookup or allocation (FrontendMetrics::CountersFor).
struct DecisionCounters {
  struct PlanCounters {
    metrics::Counter* allowed = nullptr;
    metrics::Counter* denied = nullptr;
    std::vector<metrics::Counter*> limit_denials;  // by the limit's position in the plan
    // Likewise, for the shadow limits (null for the others).
    std::vector<metrics::Counter*> shadow_denials;
  };
  std::vector<PlanCounters> plans;  // by Plan::index
};

// Whether the store answered the latest decisions and readiness probes. The data plane reports
// every decision, /readyz its probe; /readyz and the sluice_store_up gauge read it. Thread-safe; a
// report that does not change the state costs one relaxed load.
class StoreHealth {
 public:
  void Report(bool ok, StoreFailure failure) {
    if (ok) {
      if (!ok_.load(std::memory_order_relaxed)) ok_.store(true, std::memory_order_relaxed);
      return;
    }
    if (failure_.load(std::memory_order_relaxed) != static_cast<uint8_t>(failure)) {
      failure_.store(static_cast<uint8_t>(failure), std::memory_order_relaxed);
    }
    if (ok_.load(std::memory_order_relaxed)) ok_.store(false, std::memory_order_relaxed);
  }
  [[nodiscard]] bool ok() const { return ok_.load(std::memory_order_relaxed); }
  // Why the store last failed (meaningful while !ok()).
  [[nodiscard]] StoreFailure last_failure() const {
    return static_cast<StoreFailure>(failure_.load(std::memory_order_relaxed));
  }

 private:
  std::atomic<bool> ok_{true};
  std::atomic<uint8_t> failure_{0};
};

// The metrics both planes and the Rate Limit Service record. Registered once per process in
// `registry`, all in the constructor: /metrics lists them in that order.
class FrontendMetrics {
 public:
  explicit FrontendMetrics(metrics::Registry& registry);

  StoreHealth& store_health() { return store_health_; }

  // Counts a decision of `plan` (the name `d.plan` is known by), through `fe.counters` when they
  // cover `d.plan`.
  void CountDecision(const Frontend& fe, const std::string& plan, const Decision& d);
  // The counters of `plans`' decisions, for Frontend::counters. Takes the families' locks.
  [[nodiscard]] std::shared_ptr<const DecisionCounters> CountersFor(const PlanSet& plans);
  metrics::Counter& access_log_dropped() { return access_log_dropped_; }
  void CountRequest(std::string_view route, unsigned status);
  void ObserveDecisionSeconds(double seconds) { decision_seconds_.Observe(seconds); }
  void ConnectionOpened() { connections_.Add(1); }
  void ConnectionClosed() { connections_.Add(-1); }
  // Counts a reservation that ended now, `how`, and what its charge (`d`, the decision after it)
  // put past each limit's quota.
  void CountEnded(ReservationEnd how, const Decision& d);
  // Counts `n` reservations that expired (ended by the expirer).
  void CountExpired(size_t n) {
    if (n > 0) reservations_ended_->WithLabels({"expired"}).Inc(n);
  }

 private:
  metrics::CounterFamily& decisions_;
  metrics::CounterFamily& limit_denials_;
  metrics::CounterFamily& shadow_denials_;
  metrics::Counter& access_log_dropped_;
  metrics::CounterFamily& requests_;
  metrics::CounterFamily& store_errors_;
  metrics::Histogram& decision_seconds_;
  metrics::Gauge& connections_;
  metrics::CounterFamily* reservations_ended_ = nullptr;
  metrics::CounterFamily* overshoot_ = nullptr;
  StoreHealth store_health_;
};

}  // namespace sluice::frontend

#endif  // SLUICE_FRONTEND_METRICS_H_
