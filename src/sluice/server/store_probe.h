// The readiness probe's request to the store (/readyz): one request of an internal plan (one
// 1-minute limit with the largest quota, no alerts) for the subject "sluice.readyz" — the same
// write path as a decision, touching no configured plan's counters.
#ifndef SLUICE_SERVER_STORE_PROBE_H_
#define SLUICE_SERVER_STORE_PROBE_H_

#include <cstdint>

#include "sluice/common/clock.h"
#include "sluice/limiter/plan.h"
#include "sluice/limiter/store.h"

namespace sluice::server {

class StoreProbe {
 public:
  static constexpr int64_t kProbeQuota = 1'000'000'000;  // more probes than a minute can hold

  // `store` and `clock` must outlive the probe.
  StoreProbe(Store* store, const Clock* clock);

  // Sends one probe request; `done` gets the store's status (OK when it answered). Thread-safe
  // as the store is.
  void Run(StatusCallback done) const;

 private:
  Store* store_;
  const Clock* clock_;
  PlanSet plans_;
};

}  // namespace sluice::server

#endif  // SLUICE_SERVER_STORE_PROBE_H_
