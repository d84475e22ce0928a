#include "sluice/engine/alert_delivery.h"

#include <map>
#include <string>
#include <string_view>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "sluice/alerts/email_sink.h"
#include "sluice/alerts/event_json.h"
#include "sluice/alerts/http_sink.h"
#include "sluice/alerts/sinks.h"
#include "sluice/common/strings.h"

namespace sluice::engine {
namespace {

// subject -> its email and webhook from keys[] (the first key of a subject that names one).
using Contacts = absl::flat_hash_map<std::string, alerts::Contact>;

Contacts ContactsOf(const config::Config& cfg) {
  Contacts contacts;
  for (const config::KeyConfig& key : cfg.keys) {
    alerts::Contact& c = contacts[key.subject];
    if (c.email.empty()) c.email = key.email;
    if (c.webhook.empty()) {
      c.webhook = key.webhook;
      c.webhook_secret = key.webhook_secret;
    }
  }
  return contacts;
}

// "webhook", "webhook_2", "webhook_3", …
std::string NextName(std::map<std::string, int>& seen, const std::string& type) {
  const int n = ++seen[type];
  return n == 1 ? type : absl::StrCat(type, "_", n);
}

}  // namespace

std::vector<std::unique_ptr<alerts::Sink>> BuildSinks(const config::AlertsConfig& config,
                                                      const Clock* clock,
                                                      alerts::SinkOptions options) {
  std::vector<std::unique_ptr<alerts::Sink>> sinks;
  std::map<std::string, int> seen;
  for (const config::SinkConfig& sink : config.sinks) {
    switch (sink.type) {
      case config::SinkConfig::Type::kWebhook:
        sinks.push_back(std::make_unique<alerts::HttpSink>(alerts::HttpSinkParams{
            .kind = alerts::HttpSinkParams::Kind::kWebhook,
            .name = NextName(seen, "webhook"),
            .url = sink.url,
            .secret = sink.secret,
            .clock = clock,
            .options = options,
        }));
        break;
      case config::SinkConfig::Type::kSlack:
        sinks.push_back(std::make_unique<alerts::HttpSink>(alerts::HttpSinkParams{
            .kind = alerts::HttpSinkParams::Kind::kSlack,
            .name = NextName(seen, "slack"),
            .url = sink.url,
            .clock = clock,
            .options = options,
        }));
        break;
      case config::SinkConfig::Type::kEmail:
        sinks.push_back(std::make_unique<alerts::EmailSink>(alerts::EmailSinkParams{
            .name = NextName(seen, "email"),
            .smtp_url = sink.smtp_url,
            .from = sink.from,
            .to = sink.to,
            .clock = clock,
            .options = options,
        }));
        break;
    }
  }
  sinks.push_back(std::make_unique<alerts::HttpSink>(alerts::HttpSinkParams{
      .kind = alerts::HttpSinkParams::Kind::kSubjectWebhook,
      .name = "subject_webhook",
      .clock = clock,
      .options = options,
  }));
  return sinks;
}

AlertDelivery::AlertDelivery(const config::Config& cfg, const AlertDeliveryContext& ctx) {
  source_ = ctx.backend->NewOutboxSource(cfg.alerts.lease);
  sinks_ = BuildSinks(cfg.alerts, ctx.clock, alerts::SinkOptions{});
  std::vector<alerts::Sink*> sinks;
  for (const auto& s : sinks_) sinks.push_back(s.get());
  sinks.insert(sinks.end(), ctx.extra_sinks.begin(), ctx.extra_sinks.end());
  auto contacts = std::make_shared<const Contacts>(ContactsOf(cfg));
  dispatcher_ = std::make_unique<alerts::Dispatcher>(
      source_.get(), std::move(sinks), ctx.clock,
      alerts::DispatcherOptions{
          .retry = cfg.alerts.retry,
          // The config file's keys first, then the registry (read at delivery time, so a
          // changed address applies to the next alert).
          .contacts = [contacts,
                       index = ctx.registry_index](std::string_view subject) -> alerts::Contact {
            auto it = contacts->find(ToAbsl(subject));
            if (it != contacts->end()) return it->second;
            if (index != nullptr) {
              if (std::shared_ptr<const registry::Subject> s = index->FindSubject(subject)) {
                return alerts::Contact{
                    .email = s->email, .webhook = s->webhook, .webhook_secret = s->webhook_secret};
              }
            }
            return alerts::Contact{};
          },
          .dead_letters = ctx.dead_letters,
          .metrics = ctx.registry});
  dispatcher_->Start();
}

AlertDelivery::~AlertDelivery() { Stop(); }

void AlertDelivery::Stop() {
  if (dispatcher_ != nullptr) dispatcher_->Stop();
}

std::string DeadLettersJson(const alerts::DeadLetterList& list) {
  nlohmann::json letters = nlohmann::json::array();
  for (const alerts::DeadLetter& d : list.Snapshot()) {
    letters.push_back({{"event", nlohmann::json::parse(alerts::EventJson(d.event))},
                       {"sink", d.sink},
                       {"reason", d.reason},
                       {"attempts", d.attempts},
                       {"failed_at", alerts::Rfc3339Millis(d.failed_at)}});
  }
  nlohmann::json out = {{"dead_letters", std::move(letters)}, {"dropped", list.dropped()}};
  return out.dump();
}

}  // namespace sluice::engine
