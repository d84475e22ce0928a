// Alert delivery (docs/alerts.md) as `sluice serve` and the library run it: the store back end's
// outbox, the configured sinks, and a Dispatcher on its own threads. Built from a validated config
// at start and again at every reload (new sinks and contacts; a sink disabled by a 410 comes back).
#ifndef SLUICE_ENGINE_ALERT_DELIVERY_H_
#define SLUICE_ENGINE_ALERT_DELIVERY_H_

#include <memory>
#include <string>
#include <vector>

#include "sluice/alerts/dead_letters.h"
#include "sluice/alerts/dispatcher.h"
#include "sluice/alerts/sink.h"
#include "sluice/alerts/sinks.h"
#include "sluice/common/clock.h"
#include "sluice/config/config.h"
#include "sluice/engine/store_backend.h"
#include "sluice/limiter/outbox_source.h"
#include "sluice/metrics/metrics.h"
#include "sluice/registry/index.h"

namespace sluice::engine {

// What stays the same across reloads. Everything pointed to must outlive the AlertDelivery.
struct AlertDeliveryContext {
  StoreBackend* backend = nullptr;  // whose outbox is read
  const Clock* clock = nullptr;     // the host's
  metrics::Registry* registry = nullptr;
  alerts::DeadLetterList* dead_letters = nullptr;
  // Registry subjects' own email and webhook; may be null.
  const registry::Index* registry_index = nullptr;
  // Sinks of the caller's own (the library's in-process callback), after the configured ones; not
  // owned. Called on the dispatcher's threads.
  std::vector<alerts::Sink*> extra_sinks;
};

class AlertDelivery {
 public:
  // Builds and starts delivery for `cfg`.
  AlertDelivery(const config::Config& cfg, const AlertDeliveryContext& ctx);
  // Stops (see Stop()).
  ~AlertDelivery();
  AlertDelivery(const AlertDelivery&) = delete;
  AlertDelivery& operator=(const AlertDelivery&) = delete;

  // Waits for the sink calls in progress (each bounded by its timeout), acks what they completed
  // and leaves everything else in the outbox. Idempotent.
  void Stop();

 private:
  std::unique_ptr<OutboxSource> source_;
  std::vector<std::unique_ptr<alerts::Sink>> sinks_;
  std::unique_ptr<alerts::Dispatcher> dispatcher_;
};

// One sink per entry of `config.sinks`, in file order, named by type — "webhook", "slack",
// "email" — with "_2", "_3", … for the second and later sink of a type; then always a
// "subject_webhook" sink, which delivers to the subject's own keys[].webhook (and skips subjects
// without one), signed with that subject's keys[].webhook_secret (unsigned without one) — never
// with an operator's secret, which the customer would need to verify and could then forge with.
// REQUIRES: `config` passed sluice.yaml validation (secrets decode, URLs have the right scheme); a
// webhook sink whose secret does not decode fails every delivery as kPermanent instead of sending
// unsigned. `clock` must outlive the sinks. alerts::GlobalInit() has been called.
[[nodiscard]] std::vector<std::unique_ptr<alerts::Sink>> BuildSinks(
    const config::AlertsConfig& config, const Clock* clock, alerts::SinkOptions options);

// The body of GET /v1/alerts/dead: {"dead_letters":[{"event":{…},"sink","reason","attempts",
// "failed_at"}…],"dropped":N}, oldest first.
[[nodiscard]] std::string DeadLettersJson(const alerts::DeadLetterList& list);

}  // namespace sluice::engine

#endif  // SLUICE_ENGINE_ALERT_DELIVERY_H_
