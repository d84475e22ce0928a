#include "sluice/alerts/http_sink.h"

#include <curl/curl.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/time.h"
#include "sluice/alerts/curl_handle.h"
#include "sluice/alerts/event_json.h"
#include "sluice/alerts/retry.h"
#include "sluice/alerts/webhook_signature.h"
#include "sluice/common/strings.h"

namespace sluice::alerts {
namespace {

using Kind = HttpSinkParams::Kind;

// A receiver's body is never used; this much is read (and dropped) before the transfer is cut.
constexpr size_t kMaxResponseBody = 64 * 1024;

struct BodySink {
  size_t received = 0;
  bool capped = false;
};

// Drops the response body; stops the transfer once more than kMaxResponseBody has arrived.
size_t DiscardBody(char* /*data*/, size_t size, size_t nmemb, void* userdata) {
  auto* sink = static_cast<BodySink*>(userdata);
  sink->received += size * nmemb;
  if (sink->received > kMaxResponseBody) {
    sink->capped = true;
    return 0;  // libcurl ends the transfer with CURLE_WRITE_ERROR
  }
  return size * nmemb;
}

// Appends "name: value"; false when out of memory.
bool AddHeader(SlistPtr& list, const std::string& line) {
  curl_slist* head = curl_slist_append(list.get(), line.c_str());
  if (head == nullptr) return false;
  if (list == nullptr) list.reset(head);  // appending to a non-empty list keeps its head
  return true;
}

std::string CurlError(CURLcode code) {
  return absl::StrCat("curl ", static_cast<int>(code), ": ", curl_easy_strerror(code));
}

Outcome TransportFailure(CURLcode code) {
  switch (code) {
    // The URL can never work: retrying only fills the dead-letter list later.
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_URL_MALFORMAT:
      return {.kind = Outcome::Kind::kPermanent, .detail = CurlError(code)};
    default:
      // Refused, reset, timed out, DNS, TLS: the receiver may be back later.
      return {.kind = Outcome::Kind::kRetry, .detail = CurlError(code)};
  }
}

Outcome FromStatus(long status, CURL* curl, absl::Time now, absl::Duration max_retry_after) {
  Outcome out{.detail = absl::StrCat("http ", status)};
  if (status >= 200 && status <= 299) {
    out.kind = Outcome::Kind::kDelivered;
  } else if (status == 410) {
    out.kind = Outcome::Kind::kGone;
  } else if (status == 408 || status == 429 || (status >= 500 && status <= 599)) {
    out.kind = Outcome::Kind::kRetry;
    curl_header* header = nullptr;
    // request -1: the last request of the transfer, the only one since redirects are not followed.
    if (curl_easy_header(curl, "Retry-After", 0, CURLH_HEADER, -1, &header) == CURLHE_OK) {
      out.retry_after = ParseRetryAfter(header->value, now, max_retry_after);
    }
  } else {
    // Other 4xx: the receiver refuses this event as sent. 3xx: redirects are not followed — the
    // signed request would be replayed to a host the operator never configured (and a 303 would
    // turn it into a GET), so the operator must fix the URL instead.
    out.kind = Outcome::Kind::kPermanent;
  }
  return out;
}

std::string SlackEscape(std::string_view text) {
  return absl::StrReplaceAll(ToAbsl(text), {{"&", "&amp;"}, {"<", "&lt;"}, {">", "&gt;"}});
}

// POSTs `body` as JSON to `url` with the extra `headers` and maps the answer to an Outcome.
Outcome PostJson(const std::string& url, const std::vector<std::string>& headers,
                 const std::string& body, const HttpSinkParams& params) {
  CurlPtr curl(curl_easy_init());
  SlistPtr header_list;
  bool ok = curl != nullptr && AddHeader(header_list, "Content-Type: application/json") &&
            // No "Expect: 100-continue" round trip: the body is small.
            AddHeader(header_list, "Expect:");
  for (const std::string& h : headers) ok = ok && AddHeader(header_list, h);
  if (!ok) return {.kind = Outcome::Kind::kRetry, .detail = "out of memory"};

  CURL* h = curl.get();
  BodySink body_sink;
  curl_easy_setopt(h, CURLOPT_URL, url.c_str());
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
  // Timeouts must not use SIGALRM: the dispatcher has several threads.
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(absl::ToInt64Milliseconds(params.options.connect_timeout)));
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS,
                   static_cast<long>(absl::ToInt64Milliseconds(params.options.timeout)));
  // TLS verification stays at libcurl's defaults (peer and host verified); never turned off.
  curl_easy_setopt(h, CURLOPT_USERAGENT, "sluice-alerts");
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, header_list.get());
  curl_easy_setopt(h, CURLOPT_POST, 1L);
  curl_easy_setopt(h, CURLOPT_POSTFIELDS, body.data());
  curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, DiscardBody);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &body_sink);

  const CURLcode code = curl_easy_perform(h);
  long status = 0;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
  // A capped body still has a complete status line: the receiver has answered.
  if (code != CURLE_OK && !(code == CURLE_WRITE_ERROR && body_sink.capped && status > 0)) {
    return TransportFailure(code);
  }
  Outcome out = FromStatus(status, h, params.clock->Now(), params.options.max_retry_after);
  if (out.kind == Outcome::Kind::kGone && params.kind == HttpSinkParams::Kind::kSubjectWebhook) {
    // One subject's endpoint is gone, not the sink: every subject has its own URL, so disabling
    // the sink would silence all of them. This event is done for; the others still go out.
    out.kind = Outcome::Kind::kPermanent;
    out.detail = "http 410 (the subject's webhook is gone)";
  }
  return out;
}

}  // namespace

std::string SlackText(const AlertEvent& event) {
  return SlackEscape(absl::StrCat(event.subject, " reached ", event.threshold, "% of the ",
                                  event.limit, " limit on plan ", event.plan, ": ", event.used,
                                  " of ", event.quota, " used. Resets at ",
                                  Rfc3339Seconds(event.window_end), "."));
}

HttpSink::HttpSink(HttpSinkParams params) : params_(std::move(params)) {
  if (params_.secret.empty()) {
    key_ = std::string();
  } else if (absl::StatusOr<std::string> key = DecodeWebhookSecret(params_.secret); key.ok()) {
    key_ = *std::move(key);
  }
}

Outcome HttpSink::Deliver(const AlertEvent& event, const Contact& contact, int /*attempt*/) {
  if (params_.kind == Kind::kSlack) {
    const nlohmann::json body{{"text", SlackText(event)}};
    return PostJson(params_.url, {},
                    body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), params_);
  }

  const std::string& url = params_.kind == Kind::kSubjectWebhook ? contact.webhook : params_.url;
  if (url.empty()) {
    return {.kind = Outcome::Kind::kSkipped, .detail = "no webhook for this subject"};
  }
  // The subject's own webhook is signed with the subject's own secret: the operator's secret must
  // never be handed to a customer (they could then forge events to the operator's webhook).
  std::optional<std::string> subject_key;
  if (params_.kind == Kind::kSubjectWebhook) {
    if (contact.webhook_secret.empty()) {
      subject_key = std::string();
    } else if (absl::StatusOr<std::string> k = DecodeWebhookSecret(contact.webhook_secret);
               k.ok()) {
      subject_key = *std::move(k);
    }
  }
  const std::optional<std::string>& key =
      params_.kind == Kind::kSubjectWebhook ? subject_key : key_;
  if (!key.has_value()) {
    return {.kind = Outcome::Kind::kPermanent, .detail = "webhook secret is not valid base64"};
  }
  const std::string body = EventJson(event);
  const std::string id = event.Id();
  // A fresh timestamp on every attempt: receivers reject stale ones to stop replays, and the
  // signature covers it, so the signature is fresh too. The id stays, for de-duplication.
  const int64_t timestamp = absl::ToUnixSeconds(params_.clock->Now());
  std::vector<std::string> headers = {absl::StrCat("webhook-id: ", id),
                                      absl::StrCat("webhook-timestamp: ", timestamp)};
  if (!key->empty()) {
    headers.push_back(absl::StrCat("webhook-signature: ", SignWebhook(*key, id, timestamp, body)));
  }
  return PostJson(url, headers, body, params_);
}

}  // namespace sluice::alerts
