// A sink delivers one alert event to one destination (a webhook, a Slack channel, mailboxes).
// Sinks are called only by the dispatcher's threads, never on a request thread; a call blocks for
// at most the sink's timeout.
#ifndef SLUICE_ALERTS_SINK_H_
#define SLUICE_ALERTS_SINK_H_

#include <optional>
#include <string>
#include <string_view>

#include "absl/time/time.h"
#include "sluice/limiter/alert_event.h"

namespace sluice::alerts {

// What the key registry knows about the event's subject (keys[].email, keys[].webhook).
struct Contact {
  std::string email;           // empty: none
  std::string webhook;         // empty: none
  std::string webhook_secret;  // keys[].webhook_secret ("whsec_" + base64); empty: unsigned
};

struct Outcome {
  enum class Kind {
    kDelivered,  // accepted (2xx, SMTP 250)
    kSkipped,    // nothing to deliver for this event (e.g. no recipient); counts as done
    kRetry,      // transient failure (timeout, connection refused, 5xx, 429): try again later
    kPermanent,  // the receiver refused this event for good (4xx other than 408/410/429)
    kGone,       // 410: the endpoint is gone; stop delivering to it until a reload
  };
  Kind kind = Kind::kRetry;
  // From a Retry-After header (429 or 503), when present and sane; the dispatcher waits at least
  // this long before the next attempt.
  std::optional<absl::Duration> retry_after;
  // For logs and the dead-letter list: status code and a short reason. Never a secret or a URL
  // with credentials.
  std::string detail;
};

class Sink {
 public:
  virtual ~Sink() = default;
  // Stable name for metrics and logs: "webhook", "slack", "email", "subject_webhook", with an index
  // when a type appears more than once ("webhook_2").
  [[nodiscard]] virtual const std::string& name() const = 0;
  // Delivers `event` once. `attempt` counts from 1. Thread-safe: the dispatcher may call it from
  // several threads at once for different events.
  virtual Outcome Deliver(const AlertEvent& event, const Contact& contact, int attempt) = 0;
};

}  // namespace sluice::alerts

#endif  // SLUICE_ALERTS_SINK_H_
