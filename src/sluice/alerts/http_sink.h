// Delivers alerts by HTTP POST: to a signed webhook (Standard Webhooks 1.0), to a Slack incoming
// webhook, or to the subject's own webhook from the key registry.
#ifndef SLUICE_ALERTS_HTTP_SINK_H_
#define SLUICE_ALERTS_HTTP_SINK_H_

#include <optional>
#include <string>

#include "sluice/alerts/sink.h"
#include "sluice/alerts/sinks.h"
#include "sluice/common/clock.h"
#include "sluice/limiter/alert_event.h"

namespace sluice::alerts {

struct HttpSinkParams {
  enum class Kind {
    // POST EventJson(event) to `url` with webhook-id (event.Id(), the same on every attempt),
    // webhook-timestamp (Unix seconds from `clock`, fresh per attempt) and, when `secret` is set,
    // webhook-signature (fresh per attempt).
    kWebhook,
    // POST {"text": "<readable summary>"} to `url` (a Slack incoming webhook). Unsigned.
    kSlack,
    // As kWebhook, but to Contact::webhook; `url` is ignored. kSkipped when the contact has none.
    kSubjectWebhook,
  };
  Kind kind = Kind::kWebhook;
  std::string name;  // Sink::name()
  std::string url;   // http:// or https://; may carry credentials, so it is never logged
  // kWebhook: "whsec_" + base64, or "" for no signature. kSubjectWebhook ignores it and signs with
  // the contact's webhook_secret (unsigned when the contact has none).
  std::string secret;
  const Clock* clock = nullptr;  // must outlive the sink
  SinkOptions options;
};

// Thread-safe: each Deliver uses its own libcurl handle. Immutable after construction.
//
// Outcomes: 2xx kDelivered; 410 kGone; 408, 429 and 5xx kRetry (with Retry-After when the
// receiver sent a valid one); 3xx and every other status kPermanent; a transport failure
// (refused, reset, timeout, TLS) kRetry. Outcome::detail is "http 503" or "curl 28: Timeout was
// reached" — never the URL or the secret.
//
// Every attempt has a connect and a total timeout (SinkOptions), verifies TLS with the system's
// CA store, speaks only http and https, never follows redirects, and reads at most 64 KiB of the
// response body (the rest is not waited for). REQUIRES: GlobalInit() has been called.
class HttpSink final : public Sink {
 public:
  explicit HttpSink(HttpSinkParams params);

  [[nodiscard]] const std::string& name() const override { return params_.name; }
  Outcome Deliver(const AlertEvent& event, const Contact& contact, int attempt) override;

 private:
  HttpSinkParams params_;
  // The decoded signing key; empty when unsigned. nullopt when `secret` did not decode: every
  // delivery then fails as kPermanent rather than going out unsigned.
  std::optional<std::string> key_;
};

// The Slack message text for `event`, e.g. "user-42 reached 80% of the daily limit on plan free:
// 4000 of 5000 used. Resets at 2026-12-01T00:00:00Z." with &, < and > escaped as Slack requires.
[[nodiscard]] std::string SlackText(const AlertEvent& event);

}  // namespace sluice::alerts

#endif  // SLUICE_ALERTS_HTTP_SINK_H_
