#include "sluice/alerts/sinks.h"

#include <curl/curl.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "sluice/alerts/email_sink.h"
#include "sluice/alerts/http_sink.h"

namespace sluice::alerts {
namespace {

// "webhook", "webhook_2", "webhook_3", …
std::string NextName(std::map<std::string, int>& seen, const std::string& type) {
  const int n = ++seen[type];
  return n == 1 ? type : absl::StrCat(type, "_", n);
}

}  // namespace

absl::Status GlobalInit() {
  // A function-local static runs curl_global_init exactly once, even with concurrent callers.
  static const CURLcode code = curl_global_init(CURL_GLOBAL_DEFAULT);
  if (code != CURLE_OK) {
    return absl::InternalError(absl::StrCat("curl_global_init: ", curl_easy_strerror(code)));
  }
  return absl::OkStatus();
}

std::vector<std::unique_ptr<Sink>> BuildSinks(const config::AlertsConfig& config,
                                              const Clock* clock, SinkOptions options) {
  std::vector<std::unique_ptr<Sink>> sinks;
  std::map<std::string, int> seen;
  for (const config::SinkConfig& sink : config.sinks) {
    switch (sink.type) {
      case config::SinkConfig::Type::kWebhook:
        sinks.push_back(std::make_unique<HttpSink>(HttpSinkParams{
            .kind = HttpSinkParams::Kind::kWebhook,
            .name = NextName(seen, "webhook"),
            .url = sink.url,
            .secret = sink.secret,
            .clock = clock,
            .options = options,
        }));
        break;
      case config::SinkConfig::Type::kSlack:
        sinks.push_back(std::make_unique<HttpSink>(HttpSinkParams{
            .kind = HttpSinkParams::Kind::kSlack,
            .name = NextName(seen, "slack"),
            .url = sink.url,
            .clock = clock,
            .options = options,
        }));
        break;
      case config::SinkConfig::Type::kEmail:
        sinks.push_back(std::make_unique<EmailSink>(EmailSinkParams{
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
  sinks.push_back(std::make_unique<HttpSink>(HttpSinkParams{
      .kind = HttpSinkParams::Kind::kSubjectWebhook,
      .name = "subject_webhook",
      .clock = clock,
      .options = options,
  }));
  return sinks;
}

}  // namespace sluice::alerts
