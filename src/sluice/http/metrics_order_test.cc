// /metrics lists metrics in registration order (metrics.h): the families HttpMetrics registers
// must keep their order, names, help and types wherever the class that registers them lives.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/config/config.h"
#include "sluice/http/routes.h"
#include "sluice/limiter/plan.h"
#include "sluice/metrics/metrics.h"

namespace sluice::http {
namespace {

// The `# HELP` and `# TYPE` lines of `text`, in order.
std::vector<std::string> Headings(const std::string& text) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(at, end - at);
    if (line.starts_with("# ")) out.push_back(line);
    at = end + 1;
  }
  return out;
}

TEST(MetricsOrderTest, TheDecisionMetricsKeepTheirRegistrationOrder) {
  metrics::Registry registry;
  HttpMetrics metrics(registry);
  EXPECT_THAT(
      Headings(registry.Render()),
      ::testing::ElementsAre(
          "# HELP sluice_decisions_total Decisions by plan and result (allowed, denied).",
          "# TYPE sluice_decisions_total counter",
          "# HELP sluice_limit_denials_total Denials by plan and limit: a denial counts once for "
          "each limit it violated.",
          "# TYPE sluice_limit_denials_total counter",
          "# HELP sluice_shadow_denials_total Decisions a shadow limit would have denied, by plan "
          "and limit (the shadow limit never denies: the request may have been admitted).",
          "# TYPE sluice_shadow_denials_total counter",
          "# HELP sluice_access_log_dropped_total Access log lines dropped because "
          "server.access_log.max_per_second was reached.",
          "# TYPE sluice_access_log_dropped_total counter",
          "# HELP sluice_http_requests_total HTTP requests by route and status code.",
          "# TYPE sluice_http_requests_total counter",
          "# HELP sluice_store_errors_total Decisions answered by on_store_error because the "
          "store failed, by plan and reason (timeout, connection, circuit_open, overloaded, late, "
          "busy, oom, loading, readonly, other).",
          "# TYPE sluice_store_errors_total counter",
          "# HELP sluice_decision_duration_seconds Time to decide, from request parsed to "
          "decision.",
          "# TYPE sluice_decision_duration_seconds histogram",
          "# HELP sluice_open_connections Open data plane connections.",
          "# TYPE sluice_open_connections gauge",
          "# HELP sluice_store_up 1 if the store answered the latest decision or readiness probe, "
          "0 if it failed.",
          "# TYPE sluice_store_up gauge",
          "# HELP sluice_reservations_ended_total Reservations that ended, by how: settled, "
          "released or expired (charged its estimate or released by the plan's "
          "on_reservation_expiry).",
          "# TYPE sluice_reservations_ended_total counter",
          "# HELP sluice_overshoot_total Units charged beyond a limit's quota by settled "
          "reservations (the real cost exceeded what was left), by plan and limit.",
          "# TYPE sluice_overshoot_total counter"));
}

// A plan's series appear when its Frontend is built (CountersFor), each family's children in
// label order, the families in registration order.
TEST(MetricsOrderTest, APlansSeriesAppearUnderTheirFamiliesInOrder) {
  metrics::Registry registry;
  HttpMetrics metrics(registry);
  absl::StatusOr<config::Config> cfg = config::ParseConfig(R"(
plans:
  free:
    limits:
      - { name: per_minute, quota: 2, window: 1m }
      - { name: trial, quota: 1, window: 1h, shadow: true }
)",
                                                           "order.yaml");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  absl::StatusOr<PlanSet> plans = PlanSet::FromConfig(*cfg);
  ASSERT_TRUE(plans.ok()) << plans.status();
  ASSERT_NE(metrics.CountersFor(*plans), nullptr);
  const std::string text = registry.Render();
  std::vector<std::string> series;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(at, end - at);
    if (!line.starts_with("#") && !line.starts_with("sluice_decision_duration_seconds")) {
      series.push_back(line);
    }
    at = end + 1;
  }
  EXPECT_THAT(series, ::testing::ElementsAre(
                          "sluice_decisions_total{plan=\"free\",result=\"allowed\"} 0",
                          "sluice_decisions_total{plan=\"free\",result=\"denied\"} 0",
                          "sluice_limit_denials_total{plan=\"free\",limit=\"per_minute\"} 0",
                          "sluice_limit_denials_total{plan=\"free\",limit=\"trial\"} 0",
                          "sluice_shadow_denials_total{plan=\"free\",limit=\"trial\"} 0",
                          "sluice_access_log_dropped_total 0", "sluice_open_connections 0",
                          "sluice_store_up 1"));
}

}  // namespace
}  // namespace sluice::http
