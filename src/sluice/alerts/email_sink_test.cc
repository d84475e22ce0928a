#include "sluice/alerts/email_sink.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "sluice/alerts/sinks.h"
#include "sluice/alerts/test_receiver.h"
#include "sluice/common/clock.h"
#include "sluice/limiter/sample_alert_event.h"

namespace sluice::alerts {
namespace {

using ::sluice::alerts::loopback::SmtpReceiver;
using ::sluice::alerts::loopback::SmtpScript;
using ::sluice::alerts::loopback::SmtpSession;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
using Kind = Outcome::Kind;

AlertEvent Event() { return testing_util::SampleAlertEvent(); }

// The header lines of a DATA section, up to the blank line.
std::vector<std::string> HeaderLines(const std::string& data) {
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t end = data.find("\r\n"); end != std::string::npos && end != start;
       start = end + 2, end = data.find("\r\n", start)) {
    lines.push_back(data.substr(start, end - start));
  }
  return lines;
}

class EmailSinkTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { ASSERT_TRUE(GlobalInit().ok()); }

  EmailSink Sink(std::string url, std::vector<std::string> to = {"ops@example.com"}) {
    return EmailSink(
        {.name = "email",
         .smtp_url = std::move(url),
         .from = "alerts@example.com",
         .to = std::move(to),
         .clock = &clock_,
         .options = {.connect_timeout = absl::Seconds(2), .timeout = absl::Seconds(5)}});
  }
  // One delivery to a receiver playing `script`; its session in `session`.
  Outcome DeliverTo(SmtpScript script, SmtpSession* session = nullptr) {
    SmtpReceiver receiver(std::move(script));
    const Outcome outcome = Sink(receiver.Url()).Deliver(Event(), {.email = "dev@example.com"}, 1);
    const std::vector<SmtpSession> sessions = receiver.WaitForSessions(1);
    EXPECT_EQ(sessions.size(), 1u);
    if (session != nullptr && !sessions.empty()) *session = sessions[0];
    return outcome;
  }

  FakeClock clock_{absl::FromUnixSeconds(1'796'046'313)};
};

TEST_F(EmailSinkTest, MessageHasTheHeadersAndBodyReceiversNeed) {
  EXPECT_EQ(EmailMessage(Event(), "alerts@example.com", {"dev@example.com", "ops@example.com"},
                         absl::FromUnixSeconds(1'796'046'313)),
            "Date: Mon, 30 Nov 2026 13:45:13 +0000\r\n"
            "From: alerts@example.com\r\n"
            "To: dev@example.com, ops@example.com\r\n"
            "Subject: [sluice] user-42 reached 80% of daily (free)\r\n"
            "Message-ID: <qa_d4e39afdf669701a8133aafb7ce44067@sluice>\r\n"
            "MIME-Version: 1.0\r\n"
            "Content-Type: text/plain; charset=utf-8\r\n"
            "Content-Transfer-Encoding: 7bit\r\n"
            "Auto-Submitted: auto-generated\r\n"
            "\r\n"
            "user-42 reached 80% of the daily limit on plan free.\r\n"
            "\r\n"
            "Used:       4000 of 5000\r\n"
            "Window:     2026-11-30T00:00:00Z to 2026-12-01T00:00:00Z\r\n"
            "Resets at:  2026-12-01T00:00:00Z\r\n"
            "Reached at: 2026-11-30T13:45:12.123Z\r\n"
            "Alert id:   qa_d4e39afdf669701a8133aafb7ce44067\r\n");
}

TEST_F(EmailSinkTest, SendsOneMessageToTheSubjectAndTheConfiguredRecipients) {
  SmtpSession session;
  const Outcome outcome = DeliverTo({}, &session);
  EXPECT_EQ(outcome.kind, Kind::kDelivered);
  EXPECT_EQ(outcome.detail, "smtp 250");
  EXPECT_EQ(session.mail_from, "<alerts@example.com>");
  EXPECT_THAT(session.rcpt_to, ElementsAre("<dev@example.com>", "<ops@example.com>"));
  const std::vector<std::string> headers = HeaderLines(session.data);
  EXPECT_THAT(headers, ::testing::IsSupersetOf({
                           "Date: Mon, 30 Nov 2026 13:45:13 +0000",
                           "From: alerts@example.com",
                           "To: dev@example.com, ops@example.com",
                           "Subject: [sluice] user-42 reached 80% of daily (free)",
                           "Message-ID: <qa_d4e39afdf669701a8133aafb7ce44067@sluice>",
                           "MIME-Version: 1.0",
                           "Content-Type: text/plain; charset=utf-8",
                       }));
  EXPECT_THAT(session.data, HasSubstr("\r\n\r\nuser-42 reached 80% of the daily limit"));
  EXPECT_THAT(session.commands.back(), "QUIT");
}

TEST_F(EmailSinkTest, EveryLineEndsInCrLf) {
  SmtpSession session;
  ASSERT_EQ(DeliverTo({}, &session).kind, Kind::kDelivered);
  for (size_t i = 0; i < session.data.size(); ++i) {
    if (session.data[i] == '\n') {
      ASSERT_TRUE(i > 0 && session.data[i - 1] == '\r') << "bare LF at " << i;
    }
  }
}

TEST_F(EmailSinkTest, MessageIdIsTheSameOnEveryAttemptAndDateIsNot) {
  SmtpReceiver receiver;
  EmailSink sink = Sink(receiver.Url());
  ASSERT_EQ(sink.Deliver(Event(), {}, 1).kind, Kind::kDelivered);
  clock_.Advance(absl::Minutes(5));
  ASSERT_EQ(sink.Deliver(Event(), {}, 2).kind, Kind::kDelivered);
  const std::vector<SmtpSession> sessions = receiver.WaitForSessions(2);
  ASSERT_EQ(sessions.size(), 2u);
  const std::string id = "Message-ID: <qa_d4e39afdf669701a8133aafb7ce44067@sluice>";
  EXPECT_THAT(HeaderLines(sessions[0].data), ::testing::Contains(id));
  EXPECT_THAT(HeaderLines(sessions[1].data), ::testing::Contains(id));
  EXPECT_THAT(HeaderLines(sessions[1].data),
              ::testing::Contains("Date: Mon, 30 Nov 2026 13:50:13 +0000"));
}

TEST_F(EmailSinkTest, ARecipientGivenTwiceGetsOneCopy) {
  SmtpReceiver receiver;
  const Outcome outcome = Sink(receiver.Url(), {"dev@example.com", "ops@example.com"})
                              .Deliver(Event(), {.email = "dev@example.com"}, 1);
  ASSERT_EQ(outcome.kind, Kind::kDelivered);
  const std::vector<SmtpSession> sessions = receiver.WaitForSessions(1);
  ASSERT_EQ(sessions.size(), 1u);
  EXPECT_THAT(sessions[0].rcpt_to, ElementsAre("<dev@example.com>", "<ops@example.com>"));
}

TEST_F(EmailSinkTest, ConfiguredRecipientsAloneAreEnough) {
  SmtpReceiver receiver;
  ASSERT_EQ(Sink(receiver.Url()).Deliver(Event(), {}, 1).kind, Kind::kDelivered);
  const std::vector<SmtpSession> sessions = receiver.WaitForSessions(1);
  ASSERT_EQ(sessions.size(), 1u);
  EXPECT_THAT(sessions[0].rcpt_to, ElementsAre("<ops@example.com>"));
}

TEST_F(EmailSinkTest, NoRecipientIsSkippedWithoutConnecting) {
  SmtpReceiver receiver;
  const Outcome outcome = Sink(receiver.Url(), {}).Deliver(Event(), {}, 1);
  EXPECT_EQ(outcome.kind, Kind::kSkipped);
  EXPECT_TRUE(receiver.WaitForSessions(1, absl::Milliseconds(100)).empty());
}

TEST_F(EmailSinkTest, AddressesThatCouldInjectAreLeftOut) {
  SmtpReceiver receiver;
  const Outcome outcome =
      Sink(receiver.Url(), {"a@b>\r\nRCPT TO:<evil@x", "x@y, z@w", "ops@example.com"})
          .Deliver(Event(), {}, 1);
  ASSERT_EQ(outcome.kind, Kind::kDelivered);
  const std::vector<SmtpSession> sessions = receiver.WaitForSessions(1);
  ASSERT_EQ(sessions.size(), 1u);
  EXPECT_THAT(sessions[0].rcpt_to, ElementsAre("<ops@example.com>"));
}

TEST_F(EmailSinkTest, LibcurlDotStuffsALineStartingWithADot) {
  AlertEvent event = Event();
  event.subject = ".hidden";
  SmtpReceiver receiver;
  ASSERT_EQ(Sink(receiver.Url()).Deliver(event, {}, 1).kind, Kind::kDelivered);
  const std::vector<SmtpSession> sessions = receiver.WaitForSessions(1);
  ASSERT_EQ(sessions.size(), 1u);
  EXPECT_THAT(sessions[0].data, HasSubstr("\r\n\r\n..hidden reached 80%"));
}

TEST_F(EmailSinkTest, RefusedRecipientIsPermanent) {
  const Outcome outcome = DeliverTo({.rcpt = "550 5.1.1 No such user"});
  EXPECT_EQ(outcome.kind, Kind::kPermanent);
  EXPECT_EQ(outcome.detail, "smtp 550");
}

TEST_F(EmailSinkTest, RefusedMessageIsPermanent) {
  SmtpSession session;
  const Outcome outcome = DeliverTo({.end_of_data = "554 5.7.1 Rejected"}, &session);
  EXPECT_EQ(outcome.kind, Kind::kPermanent);
  EXPECT_EQ(outcome.detail, "smtp 554");
  EXPECT_FALSE(session.data.empty());
}

TEST_F(EmailSinkTest, TemporaryFailureIsRetried) {
  const Outcome outcome = DeliverTo({.mail = "451 4.3.0 Try again later"});
  EXPECT_EQ(outcome.kind, Kind::kRetry);
  EXPECT_EQ(outcome.detail, "smtp 451");
}

TEST_F(EmailSinkTest, ServerNotReadyIsRetried) {
  const Outcome outcome = DeliverTo({.greeting = "421 4.3.2 Too busy"});
  EXPECT_EQ(outcome.kind, Kind::kRetry);
}

TEST_F(EmailSinkTest, ConnectionRefusedIsRetried) {
  const Outcome outcome =
      Sink(absl::StrCat("smtp://127.0.0.1:", loopback::UnusedPort())).Deliver(Event(), {}, 1);
  EXPECT_EQ(outcome.kind, Kind::kRetry);
  EXPECT_THAT(outcome.detail, StartsWith("curl 7: "));
}

TEST_F(EmailSinkTest, DetailNeverShowsTheUrl) {
  const Outcome outcome =
      Sink(absl::StrCat("smtp://user:s3cr3t@127.0.0.1:", loopback::UnusedPort()))
          .Deliver(Event(), {}, 1);
  EXPECT_THAT(outcome.detail, Not(HasSubstr("s3cr3t")));
  EXPECT_THAT(outcome.detail, Not(HasSubstr("127.0.0.1")));
}

TEST_F(EmailSinkTest, OnlySmtpAndSmtpsAreSpoken) {
  const Outcome outcome = Sink("http://127.0.0.1:1/").Deliver(Event(), {}, 1);
  EXPECT_EQ(outcome.kind, Kind::kPermanent);
}

}  // namespace
}  // namespace sluice::alerts
