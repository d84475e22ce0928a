// docs/semantics.md as a parametrised GoogleTest suite that every Store implementation must pass,
// so the stores cannot drift apart. A store's test binary links this file and instantiates the
// suite:
//
//   INSTANTIATE_TEST_SUITE_P(Memory, StoreConformanceTest,
//                            ::testing::Values(StoreHarnessFactory{"memory", MakeMemoryHarness}),
//                            StoreHarnessName);
#ifndef SLUICE_LIMITER_STORE_CONFORMANCE_H_
#define SLUICE_LIMITER_STORE_CONFORMANCE_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "sluice/common/clock.h"
#include "sluice/config/config.h"
#include "sluice/limiter/alert_event.h"
#include "sluice/limiter/limiter.h"
#include "sluice/limiter/store.h"

namespace sluice {

// What the suite needs from a store beyond the Store interface.
class StoreHarness {
 public:
  virtual ~StoreHarness() = default;
  [[nodiscard]] virtual Store& store() = 0;
  // Drives the store's I/O until `ready()` holds; fails the test if it does not within seconds.
  virtual void RunUntil(const std::function<bool()>& ready) = 0;
  // The alert events recorded since the last call, oldest first.
  [[nodiscard]] virtual std::vector<AlertEvent> TakeEvents() = 0;
  // Sets the counter of req.plan's limit `limit` (plan order) for req.subject in window
  // req.windows[limit] to `value`, bypassing the store's rules — as crafted or corrupted state
  // would, so `value` may be one no decision can produce.
  virtual void PlantCounter(const StoreRequest& req, size_t limit, int64_t value) = 0;
  // When the state of req.plan's limit `limit` (plan order) for req.subject expires, as an instant
  // on the store's own clock (only differences between two readings mean the same to every
  // store); nullopt if it has none (no state, or state without an expiry).
  [[nodiscard]] virtual std::optional<absl::Time> ExpiryOf(const StoreRequest& req,
                                                           size_t limit) = 0;
};

struct StoreHarnessFactory {
  std::string name;
  std::function<std::unique_ptr<StoreHarness>()> make;
};

inline std::string StoreHarnessName(const ::testing::TestParamInfo<StoreHarnessFactory>& info) {
  return info.param.name;
}

// The fixture: a fake clock at 2026-11-30T12:00:00Z and a limiter over the store under test.
class StoreConformanceTest : public ::testing::TestWithParam<StoreHarnessFactory> {
 protected:
  void SetUp() override;

  // Installs `plans` (replacing the default ones) with a fresh Limiter.
  void UsePlans(std::vector<config::PlanConfig> plans);
  // One decision; fails the test on an error status.
  Decision Check(const std::string& subject, int64_t cost = 1, const std::string& plan = "p");
  // One report (DecideMode::kReport) of `cost`; fails the test on an error status.
  Decision Report(const std::string& subject, int64_t cost, const std::string& plan = "p");
  // One decision under an effective plan (Plan::WithQuotas of one of the limiter's plans).
  Decision CheckWith(const std::string& subject, const Plan& plan, int64_t cost = 1);
  // The limiter's plan named `name`. REQUIRES: there is one.
  const Plan& PlanNamed(const std::string& name);
  // Counters of subject under plan, without consuming.
  std::vector<LimitUsage> UsageOf(const std::string& subject, const std::string& plan = "p");
  void ResetUsage(const std::string& subject, const std::string& limit = "",
                  const std::string& plan = "p");
  // Plants `value` as the current counter of limit `limit` (see StoreHarness::PlantCounter), of
  // the subject as placed by `group` (StoreRequest::group; empty: by itself).
  void Plant(const std::string& subject, size_t limit, int64_t value, const std::string& plan = "p",
             const std::string& group = "");
  // One group decision of (subject, cost) parts under the limiter's plan `plan`, placed in
  // `group`; fails the test on an error status.
  std::vector<Decision> Group(const std::vector<std::pair<std::string, int64_t>>& parts,
                              const std::string& plan = "p", const std::string& group = "g",
                              DecideMode mode = DecideMode::kAdmit);
  // The counters of `subject` under `plan`, as placed by `group`, asked of the store itself.
  // When the state of `subject`'s limit `limit` (plan order) under `plan` expires
  // (StoreHarness::ExpiryOf).
  std::optional<absl::Time> ExpiryOf(const std::string& subject, size_t limit,
                                     const std::string& plan = "p");
  std::vector<LimitUsage> GroupUsageOf(const std::string& subject, const std::string& plan = "p",
                                       const std::string& group = "g");

  std::unique_ptr<StoreHarness> harness_;
  std::unique_ptr<FakeClock> clock_;
  std::unique_ptr<Limiter> limiter_;
};

// Reservations, concurrency limits and settlement (reservation_conformance.cc), for the stores
// that support them: instantiated like StoreConformanceTest.
class ReservationConformanceTest : public StoreConformanceTest {
 protected:
  // Plan "p": per_minute 100 (1m), daily 1,000 (day, alerts at 80 and 100), inflight 3
  // (concurrent), with the given on_reservation_expiry.
  void UseReservationPlans(bool charge_on_expiry = true);
  // Reserves `hold` (charging `cost` now) for `ttl`; fails the test on an error status.
  ReserveDecision Reserve(const std::string& subject, int64_t hold,
                          absl::Duration ttl = absl::Seconds(60), int64_t cost = 0,
                          const std::string& plan = "p");
  // Ends reservation `id` as `end` says (a settle charges `cost`); fails on an error status.
  SettleDecision End(const std::string& id, ReservationEnd end, int64_t cost = 0);
  // Ends the due reservations (Limiter::ExpireDue); how many ended.
  size_t ExpireDue();
};

// Sliding and gcra limits (algorithm_conformance.cc), for the stores that decide them:
// instantiated like StoreConformanceTest.
class AlgorithmConformanceTest : public StoreConformanceTest {
 protected:
  // Plan "p": one limit "rate", gcra, `quota` a minute with `burst` (0: the quota).
  void UseGcra(int64_t quota, int64_t burst, bool shadow = false);
  // Plan "p": one limit "rate", sliding, `quota` a minute.
  void UseSliding(int64_t quota, std::vector<int> alert_at = {});
};

}  // namespace sluice

#endif  // SLUICE_LIMITER_STORE_CONFORMANCE_H_
