#include "sluice/alerts/email_sink.h"

#include <curl/curl.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "sluice/alerts/curl_handle.h"
#include "sluice/alerts/event_json.h"

namespace sluice::alerts {
namespace {

// Appends `item`; false when out of memory.
bool Append(SlistPtr& list, const std::string& item) {
  curl_slist* head = curl_slist_append(list.get(), item.c_str());
  if (head == nullptr) return false;
  if (list == nullptr) list.reset(head);  // appending to a non-empty list keeps its head
  return true;
}

// An address that can go between <> in "RCPT TO:" and into a To: header as it is: visible ASCII
// without the characters that delimit addresses or lists in either place, one @ with text on
// both sides. (sluice.yaml's validation already refuses spaces and control characters.)
bool IsPlainAddress(std::string_view address) {
  const size_t at = address.find('@');
  return at != std::string_view::npos && at > 0 && at + 1 < address.size() &&
         address.find('@', at + 1) == std::string_view::npos &&
         std::all_of(address.begin(), address.end(), [](char c) {
           return c > ' ' && c < 0x7f && std::strchr("<>,;\"\\()[]", c) == nullptr;
         });
}

std::vector<std::string> Recipients(const Contact& contact, const std::vector<std::string>& to) {
  std::vector<std::string> out;
  auto add = [&out](const std::string& address) {
    if (IsPlainAddress(address) && std::find(out.begin(), out.end(), address) == out.end()) {
      out.push_back(address);
    }
  };
  if (!contact.email.empty()) add(contact.email);
  for (const std::string& address : to) add(address);
  return out;
}

// Feeds the message to libcurl's upload.
struct Upload {
  std::string_view rest;
};

size_t ReadMessage(char* buffer, size_t size, size_t nitems, void* userdata) {
  auto* upload = static_cast<Upload*>(userdata);
  const size_t n = std::min(size * nitems, upload->rest.size());
  std::memcpy(buffer, upload->rest.data(), n);
  upload->rest.remove_prefix(n);
  return n;
}

std::string CurlError(CURLcode code) {
  return absl::StrCat("curl ", static_cast<int>(code), ": ", curl_easy_strerror(code));
}

}  // namespace

std::string EmailMessage(const AlertEvent& event, const std::string& from,
                         const std::vector<std::string>& to, absl::Time date) {
  const std::string id = event.Id();
  // Names in events are validated ASCII ([A-Za-z0-9._:@/+=-] at most), so no header needs
  // RFC 2047 encoding and no line comes near the 998-byte limit.
  return absl::StrCat(
      // RFC 5322 §3.3, always in UTC.
      "Date: ", absl::FormatTime("%a, %d %b %Y %H:%M:%S +0000", date, absl::UTCTimeZone()), "\r\n",
      "From: ", from, "\r\n", "To: ", absl::StrJoin(to, ", "), "\r\n", "Subject: [sluice] ",
      event.subject, " reached ", event.threshold, "% of ", event.limit, " (", event.plan, ")\r\n",
      "Message-ID: <", id, "@sluice>\r\n", "MIME-Version: 1.0\r\n",
      "Content-Type: text/plain; charset=utf-8\r\n", "Content-Transfer-Encoding: 7bit\r\n",
      // RFC 3834: an automatic message; well-behaved autoresponders stay quiet.
      "Auto-Submitted: auto-generated\r\n", "\r\n",
      // The body. A line may start with the subject, which may start with '.': libcurl
      // dot-stuffs the DATA section (RFC 5321 §4.5.2), so nothing is escaped here.
      event.subject, " reached ", event.threshold, "% of the ", event.limit, " limit on plan ",
      event.plan, ".\r\n", "\r\n", "Used:       ", event.used, " of ", event.quota, "\r\n",
      "Window:     ", Rfc3339Seconds(event.window_start), " to ", Rfc3339Seconds(event.window_end),
      "\r\n", "Resets at:  ", Rfc3339Seconds(event.window_end), "\r\n",
      "Reached at: ", Rfc3339Millis(event.occurred_at), "\r\n", "Alert id:   ", id, "\r\n");
}

EmailSink::EmailSink(EmailSinkParams params) : params_(std::move(params)) {}

Outcome EmailSink::Deliver(const AlertEvent& event, const Contact& contact, int /*attempt*/) {
  const std::vector<std::string> recipients = Recipients(contact, params_.to);
  if (recipients.empty()) {
    return {.kind = Outcome::Kind::kSkipped, .detail = "no email recipient"};
  }
  if (!IsPlainAddress(params_.from)) {
    return {.kind = Outcome::Kind::kPermanent, .detail = "unusable from address"};
  }
  const std::string message = EmailMessage(event, params_.from, recipients, params_.clock->Now());

  CurlPtr curl(curl_easy_init());
  SlistPtr rcpt;
  bool ok = curl != nullptr;
  for (const std::string& address : recipients) {
    ok = ok && Append(rcpt, absl::StrCat("<", address, ">"));
  }
  if (!ok) return {.kind = Outcome::Kind::kRetry, .detail = "out of memory"};

  CURL* h = curl.get();
  Upload upload{message};
  const std::string mail_from = absl::StrCat("<", params_.from, ">");
  curl_easy_setopt(h, CURLOPT_URL, params_.smtp_url.c_str());
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "smtp,smtps");
  // Timeouts must not use SIGALRM: the dispatcher has several threads.
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(absl::ToInt64Milliseconds(params_.options.connect_timeout)));
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS,
                   static_cast<long>(absl::ToInt64Milliseconds(params_.options.timeout)));
  // smtps:// verifies the server with libcurl's defaults; smtp:// stays plain (see the header).
  curl_easy_setopt(h, CURLOPT_MAIL_FROM, mail_from.c_str());
  curl_easy_setopt(h, CURLOPT_MAIL_RCPT, rcpt.get());
  curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
  curl_easy_setopt(h, CURLOPT_READFUNCTION, ReadMessage);
  curl_easy_setopt(h, CURLOPT_READDATA, &upload);
  curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(message.size()));

  const CURLcode code = curl_easy_perform(h);
  long reply = 0;  // the last SMTP reply code libcurl saw
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &reply);
  if (code == CURLE_OK) {
    return {.kind = Outcome::Kind::kDelivered, .detail = absl::StrCat("smtp ", reply)};
  }
  if (reply >= 500 && reply <= 599) {
    return {.kind = Outcome::Kind::kPermanent, .detail = absl::StrCat("smtp ", reply)};
  }
  if (reply >= 400 && reply <= 499) {
    return {.kind = Outcome::Kind::kRetry, .detail = absl::StrCat("smtp ", reply)};
  }
  if (code == CURLE_UNSUPPORTED_PROTOCOL || code == CURLE_URL_MALFORMAT) {
    return {.kind = Outcome::Kind::kPermanent, .detail = CurlError(code)};
  }
  return {.kind = Outcome::Kind::kRetry, .detail = CurlError(code)};
}

}  // namespace sluice::alerts
