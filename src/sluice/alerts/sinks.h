// What every sink shares (timeouts, libcurl's process-wide setup) and the plain function that
// builds the configured sinks. The dispatcher sees only Sink (sink.h).
#ifndef SLUICE_ALERTS_SINKS_H_
#define SLUICE_ALERTS_SINKS_H_

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "sluice/alerts/sink.h"
#include "sluice/common/clock.h"
#include "sluice/config/config.h"

namespace sluice::alerts {

// Limits on one delivery attempt. A Deliver call returns within about `timeout` (plus name
// resolution, which libcurl bounds by the same timeout when built with its threaded resolver, as
// Debian's is).
struct SinkOptions {
  absl::Duration connect_timeout = absl::Seconds(2);  // TCP (and TLS) connect
  absl::Duration timeout = absl::Seconds(5);          // the whole attempt, connect included
  // Upper bound on a receiver's Retry-After; a longer request is shortened to this.
  absl::Duration max_retry_after = absl::Hours(1);
};

// Initialises libcurl for the whole process (curl_global_init). Call it once at startup, before
// the first Deliver; calling it again is harmless and returns the first result. Thread-safe. There
// is no matching cleanup: libcurl stays initialised until the process exits.
[[nodiscard]] absl::Status GlobalInit();

// One sink per entry of `config.sinks`, in file order, named by type — "webhook", "slack",
// "email" — with "_2", "_3", … for the second and later sink of a type; then always a
// "subject_webhook" sink, which delivers to the subject's own keys[].webhook (and skips subjects
// without one), signed with that subject's keys[].webhook_secret (unsigned without one) — never
// with an operator's secret, which the customer would need to verify and could then forge with.
// Retry-After is bounded by options.max_retry_after (it may exceed config.retry.max_delay: the
// receiver knows when it can take the event again).
// REQUIRES: `config` passed sluice.yaml validation (secrets decode, URLs have the right scheme); a
// webhook sink whose secret does not decode fails every delivery as kPermanent instead of sending
// unsigned. `clock` must outlive the sinks. GlobalInit() has been called.
[[nodiscard]] std::vector<std::unique_ptr<Sink>> BuildSinks(const config::AlertsConfig& config,
                                                            const Clock* clock,
                                                            SinkOptions options);

}  // namespace sluice::alerts

#endif  // SLUICE_ALERTS_SINKS_H_
