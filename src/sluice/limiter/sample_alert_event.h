// For tests: one realistic alert event — user-42 reached 80% of the free plan's daily limit
// (4,000 of 5,000) on 2026-11-30 (UTC), at 13:45:12.123.
#ifndef SLUICE_LIMITER_SAMPLE_ALERT_EVENT_H_
#define SLUICE_LIMITER_SAMPLE_ALERT_EVENT_H_

#include <string>
#include <utility>

#include "absl/time/time.h"
#include "sluice/limiter/alert_event.h"

namespace sluice::testing_util {

inline AlertEvent SampleAlertEvent() {
  return {.subject = "user-42",
          .plan = "free",
          .limit = "daily",
          .threshold = 80,
          .used = 4000,
          .quota = 5000,
          .window_start = absl::FromUnixSeconds(1'795'996'800),
          .window_end = absl::FromUnixSeconds(1'796'083'200),
          .occurred_at = absl::FromUnixMillis(1'796'046'312'123)};
}

// The same event for another subject and threshold (distinct events get distinct ids).
inline AlertEvent SampleAlertEvent(std::string subject, int threshold = 80) {
  AlertEvent e = SampleAlertEvent();
  e.subject = std::move(subject);
  e.threshold = threshold;
  return e;
}

}  // namespace sluice::testing_util

#endif  // SLUICE_LIMITER_SAMPLE_ALERT_EVENT_H_
