#include "sluice/alerts/event_json.h"

#include <string>

#include <nlohmann/json.hpp>

#include "absl/time/time.h"

namespace sluice::alerts {
namespace {

// Keeps members in insertion order, as docs/alerts.md writes them.
using Json = nlohmann::ordered_json;

// absl::FormatTime rounds nothing: it prints the fields of the civil time, so a sub-second part is
// truncated, as it must be for a time that is still inside its window.
std::string FormatUtc(const char* format, absl::Time t) {
  return absl::FormatTime(format, t, absl::UTCTimeZone());
}

}  // namespace

std::string Rfc3339Seconds(absl::Time t) { return FormatUtc("%Y-%m-%dT%H:%M:%SZ", t); }

std::string Rfc3339Millis(absl::Time t) {
  // %E3S is seconds with exactly three fractional digits.
  return FormatUtc("%Y-%m-%dT%H:%M:%E3SZ", t);
}

std::string EventJson(const AlertEvent& event) {
  const Json json{{"type", "quota.threshold_reached"},
                  {"id", event.Id()},
                  {"subject", event.subject},
                  {"plan", event.plan},
                  {"limit", event.limit},
                  {"threshold", event.threshold},
                  {"used", event.used},
                  {"quota", event.quota},
                  {"window_start", Rfc3339Seconds(event.window_start)},
                  {"window_end", Rfc3339Seconds(event.window_end)},
                  {"occurred_at", Rfc3339Millis(event.occurred_at)}};
  return json.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace sluice::alerts
