// The alert event as the JSON every sink is built from (docs/alerts.md), and the
// timestamp formats the sinks share.
#ifndef SLUICE_ALERTS_EVENT_JSON_H_
#define SLUICE_ALERTS_EVENT_JSON_H_

#include <string>

#include "absl/time/time.h"
#include "sluice/limiter/alert_event.h"

namespace sluice::alerts {

// The event as compact JSON, members in the order docs/alerts.md writes them:
// {"type":"quota.threshold_reached","id":"qa_…","subject":"user-42","plan":"free",
//  "limit":"daily","threshold":80,"used":4000,"quota":5000,"window_start":"2026-11-30T00:00:00Z",
//  "window_end":"2026-12-01T00:00:00Z","occurred_at":"2026-11-30T13:45:12.123Z"}
// The same event always gives the same bytes (webhook signatures cover them). Never throws: bytes
// that are not UTF-8 (validated names cannot contain any) become U+FFFD.
[[nodiscard]] std::string EventJson(const AlertEvent& event);

// RFC 3339 in UTC, whole seconds: "2026-11-30T00:00:00Z" (sub-second part truncated).
[[nodiscard]] std::string Rfc3339Seconds(absl::Time t);

// RFC 3339 in UTC with milliseconds: "2026-11-30T13:45:12.123Z" (truncated, not rounded).
[[nodiscard]] std::string Rfc3339Millis(absl::Time t);

}  // namespace sluice::alerts

#endif  // SLUICE_ALERTS_EVENT_JSON_H_
