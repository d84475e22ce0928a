// Delivers alerts as plain-text email over SMTP (libcurl).
#ifndef SLUICE_ALERTS_EMAIL_SINK_H_
#define SLUICE_ALERTS_EMAIL_SINK_H_

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "sluice/alerts/sink.h"
#include "sluice/alerts/sinks.h"
#include "sluice/common/clock.h"
#include "sluice/limiter/alert_event.h"

namespace sluice::alerts {

struct EmailSinkParams {
  std::string name;      // Sink::name()
  std::string smtp_url;  // smtp://host[:port] or smtps://host[:port]; user:password@ for AUTH
  std::string from;      // envelope sender and From:
  std::vector<std::string> to;   // fixed recipients, in addition to the subject's own address
  const Clock* clock = nullptr;  // for the Date: header; must outlive the sink
  SinkOptions options;
};

// Thread-safe: each Deliver uses its own libcurl handle. Immutable after construction.
//
// Recipients are Contact::email (when set) followed by the configured `to`, duplicates removed;
// addresses that could not be written safely into a header or an SMTP command (spaces, control
// characters, any of <>,;"\()[]) are left out. No recipient: kSkipped. One message goes to all
// of them; if the server refuses any recipient, the attempt fails as a whole (libcurl's default).
//
// TLS: smtps:// is TLS from the first byte, verified with the system's CA store. smtp:// is plain
// text with no STARTTLS: an opportunistic upgrade (CURLUSESSL_TRY) would fail delivery outright
// to a local relay that offers STARTTLS with a certificate we cannot verify, and a plaintext
// fallback would not protect against an attacker who strips the offer anyway. Use smtps:// for a
// relay across a network you do not trust.
//
// Outcomes: the server accepted the message (250 after DATA) kDelivered; an SMTP 5xx reply
// kPermanent; a 4xx reply or a transport failure kRetry. Outcome::detail is "smtp 550" or
// "curl 7: Couldn't connect to server" — never the URL (it may carry a password).
// REQUIRES: GlobalInit() has been called.
class EmailSink final : public Sink {
 public:
  explicit EmailSink(EmailSinkParams params);

  [[nodiscard]] const std::string& name() const override { return params_.name; }
  Outcome Deliver(const AlertEvent& event, const Contact& contact, int attempt) override;

 private:
  EmailSinkParams params_;
};

// The whole RFC 5322 message, CRLF line endings, before SMTP dot-stuffing (libcurl does that):
// Date (`date`), From, To, Subject "[sluice] user-42 reached 80% of daily (free)", Message-ID
// "<qa_…@sluice>" (the event id: the same on every attempt, so mail systems and people can
// de-duplicate), MIME-Version, Content-Type text/plain; charset=utf-8, Auto-Submitted, then the
// body. `to` is written as given.
[[nodiscard]] std::string EmailMessage(const AlertEvent& event, const std::string& from,
                                       const std::vector<std::string>& to, absl::Time date);

}  // namespace sluice::alerts

#endif  // SLUICE_ALERTS_EMAIL_SINK_H_
