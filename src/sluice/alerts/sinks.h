// What every sink shares: timeouts and libcurl's process-wide setup. The sinks are built from the
// configuration in server/ (BuildSinks); the dispatcher sees only Sink (sink.h).
#ifndef SLUICE_ALERTS_SINKS_H_
#define SLUICE_ALERTS_SINKS_H_

#include "absl/status/status.h"
#include "absl/time/time.h"

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

}  // namespace sluice::alerts

#endif  // SLUICE_ALERTS_SINKS_H_
