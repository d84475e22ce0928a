#include "sluice/alerts/http_sink.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "sluice/alerts/event_json.h"
#include "sluice/alerts/sinks.h"
#include "sluice/alerts/test_receiver.h"
#include "sluice/alerts/webhook_signature.h"
#include "sluice/common/clock.h"
#include "sluice/limiter/sample_alert_event.h"

namespace sluice::alerts {
namespace {

using ::sluice::alerts::loopback::HttpReceiver;
using ::sluice::alerts::loopback::HttpRequest;
using ::sluice::alerts::loopback::HttpResponse;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
using Kind = Outcome::Kind;

constexpr char kSecret[] = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

AlertEvent Event() { return testing_util::SampleAlertEvent(); }

std::string Key() { return DecodeWebhookSecret(kSecret).value_or(""); }

bool Verifies(const HttpRequest& r) {
  return VerifyWebhook(Key(), r.Header("webhook-id"), r.Header("webhook-timestamp"), r.body,
                       r.Header("webhook-signature"));
}

class HttpSinkTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { ASSERT_TRUE(GlobalInit().ok()); }

  HttpSink Sink(HttpSinkParams::Kind kind, std::string url, std::string secret = kSecret) {
    return HttpSink({.kind = kind,
                     .name = "test",
                     .url = std::move(url),
                     .secret = std::move(secret),
                     .clock = &clock_,
                     .options = options_});
  }
  HttpSink Webhook(std::string secret = kSecret) {
    return Sink(HttpSinkParams::Kind::kWebhook, receiver_.Url(), std::move(secret));
  }
  // One delivery to a receiver answering `response`.
  Outcome DeliverAnswered(HttpResponse response) {
    receiver_.set_response(std::move(response));
    return Webhook().Deliver(Event(), {}, 1);
  }

  FakeClock clock_{absl::FromUnixSeconds(1'796'046'313)};
  SinkOptions options_{.connect_timeout = absl::Seconds(2), .timeout = absl::Seconds(5)};
  HttpReceiver receiver_;
};

TEST_F(HttpSinkTest, WebhookPostsTheEventJsonWithStandardWebhooksHeaders) {
  const Outcome outcome = Webhook().Deliver(Event(), {}, 1);
  EXPECT_EQ(outcome.kind, Kind::kDelivered);
  EXPECT_EQ(outcome.detail, "http 200");

  const std::vector<HttpRequest> requests = receiver_.WaitForRequests(1);
  ASSERT_EQ(requests.size(), 1u);
  const HttpRequest& r = requests[0];
  EXPECT_EQ(r.method, "POST");
  EXPECT_EQ(r.target, "/hooks");
  EXPECT_EQ(r.Header("content-type"), "application/json");
  EXPECT_EQ(r.body, EventJson(Event()));
  EXPECT_EQ(r.Header("webhook-id"), Event().Id());
  EXPECT_EQ(r.Header("webhook-timestamp"), "1796046313");
  EXPECT_THAT(r.Header("webhook-signature"), StartsWith("v1,"));
  EXPECT_TRUE(Verifies(r));
}

TEST_F(HttpSinkTest, EveryAttemptKeepsTheIdButIsStampedAndSignedAfresh) {
  HttpSink sink = Webhook();
  ASSERT_EQ(sink.Deliver(Event(), {}, 1).kind, Kind::kDelivered);
  clock_.Advance(absl::Seconds(90));
  ASSERT_EQ(sink.Deliver(Event(), {}, 2).kind, Kind::kDelivered);

  const std::vector<HttpRequest> requests = receiver_.WaitForRequests(2);
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[0].Header("webhook-id"), requests[1].Header("webhook-id"));
  EXPECT_EQ(requests[0].Header("webhook-timestamp"), "1796046313");
  EXPECT_EQ(requests[1].Header("webhook-timestamp"), "1796046403");
  EXPECT_NE(requests[0].Header("webhook-signature"), requests[1].Header("webhook-signature"));
  EXPECT_TRUE(Verifies(requests[0]));
  EXPECT_TRUE(Verifies(requests[1]));
}

TEST_F(HttpSinkTest, WithoutASecretThereIsNoSignatureHeader) {
  ASSERT_EQ(Webhook("").Deliver(Event(), {}, 1).kind, Kind::kDelivered);
  const std::vector<HttpRequest> requests = receiver_.WaitForRequests(1);
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_FALSE(requests[0].HasHeader("webhook-signature"));
  EXPECT_EQ(requests[0].Header("webhook-id"), Event().Id());
}

TEST_F(HttpSinkTest, OneSinkDeliversFromSeveralThreadsAtOnce) {
  HttpSink sink = Webhook();
  std::atomic<int> delivered{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 3; ++i) {
        if (sink.Deliver(Event(), {}, 1).kind == Kind::kDelivered) ++delivered;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(delivered.load(), 12);
  const std::vector<HttpRequest> requests = receiver_.WaitForRequests(12);
  ASSERT_EQ(requests.size(), 12u);
  for (const HttpRequest& r : requests) EXPECT_TRUE(Verifies(r));
}

TEST_F(HttpSinkTest, AnyTwoHundredIsDelivered) {
  EXPECT_EQ(DeliverAnswered({.status = 204}).kind, Kind::kDelivered);
  EXPECT_EQ(DeliverAnswered({.status = 202}).kind, Kind::kDelivered);
}

TEST_F(HttpSinkTest, ServerErrorIsRetried) {
  const Outcome outcome = DeliverAnswered({.status = 500});
  EXPECT_EQ(outcome.kind, Kind::kRetry);
  EXPECT_EQ(outcome.detail, "http 500");
  EXPECT_EQ(outcome.retry_after, std::nullopt);
}

TEST_F(HttpSinkTest, RequestTimeoutIsRetried) {
  EXPECT_EQ(DeliverAnswered({.status = 408}).kind, Kind::kRetry);
}

TEST_F(HttpSinkTest, TooManyRequestsIsRetriedAfterWhatTheReceiverAsked) {
  const Outcome outcome = DeliverAnswered({.status = 429, .headers = {{"Retry-After", "2"}}});
  EXPECT_EQ(outcome.kind, Kind::kRetry);
  EXPECT_EQ(outcome.retry_after, absl::Seconds(2));
}

TEST_F(HttpSinkTest, RetryAfterDateIsReadAgainstTheInjectedClock) {
  // The fake clock is 2026-11-30T13:45:13Z; the receiver asks for 13:45:43.
  const Outcome outcome = DeliverAnswered(
      {.status = 503, .headers = {{"Retry-After", "Mon, 30 Nov 2026 13:45:43 GMT"}}});
  EXPECT_EQ(outcome.kind, Kind::kRetry);
  EXPECT_EQ(outcome.retry_after, absl::Seconds(30));
}

TEST_F(HttpSinkTest, RetryAfterIsBoundedByTheOptions) {
  options_.max_retry_after = absl::Minutes(10);
  const Outcome outcome = DeliverAnswered({.status = 429, .headers = {{"Retry-After", "86400"}}});
  EXPECT_EQ(outcome.retry_after, absl::Minutes(10));
}

TEST_F(HttpSinkTest, GarbageRetryAfterIsIgnored) {
  const Outcome outcome = DeliverAnswered({.status = 503, .headers = {{"Retry-After", "soon"}}});
  EXPECT_EQ(outcome.kind, Kind::kRetry);
  EXPECT_EQ(outcome.retry_after, std::nullopt);
}

TEST_F(HttpSinkTest, GoneIsGone) {
  const Outcome outcome = DeliverAnswered({.status = 410});
  EXPECT_EQ(outcome.kind, Kind::kGone);
  EXPECT_EQ(outcome.detail, "http 410");
}

// Each subject has its own URL: one customer's 410 must not silence the sink for every subject.
TEST_F(HttpSinkTest, AGoneSubjectWebhookIsPermanentForThatEventNotGone) {
  receiver_.set_response({.status = 410});
  HttpSink sink = Sink(HttpSinkParams::Kind::kSubjectWebhook, "");
  const Outcome outcome = sink.Deliver(Event(), {.webhook = receiver_.Url()}, 1);
  EXPECT_EQ(outcome.kind, Kind::kPermanent);
  EXPECT_EQ(outcome.detail, "http 410 (the subject's webhook is gone)");
}

TEST_F(HttpSinkTest, OtherClientErrorsArePermanent) {
  EXPECT_EQ(DeliverAnswered({.status = 400}).kind, Kind::kPermanent);
  EXPECT_EQ(DeliverAnswered({.status = 401}).kind, Kind::kPermanent);
  EXPECT_EQ(DeliverAnswered({.status = 404}).kind, Kind::kPermanent);
}

TEST_F(HttpSinkTest, RedirectIsPermanentAndNotFollowed) {
  const Outcome outcome =
      DeliverAnswered({.status = 302, .headers = {{"Location", receiver_.Url("/elsewhere")}}});
  EXPECT_EQ(outcome.kind, Kind::kPermanent);
  EXPECT_EQ(outcome.detail, "http 302");
  // Deliver has returned, so a followed redirect would already have been sent.
  const std::vector<HttpRequest> requests = receiver_.WaitForRequests(2, absl::Milliseconds(200));
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].target, "/hooks");
}

TEST_F(HttpSinkTest, LargeResponseBodyIsNotReadToTheEnd) {
  const Outcome outcome = DeliverAnswered({.status = 200, .body = std::string(1 << 20, 'x')});
  EXPECT_EQ(outcome.kind, Kind::kDelivered);
  EXPECT_EQ(outcome.detail, "http 200");
}

TEST_F(HttpSinkTest, ConnectionRefusedIsRetried) {
  const std::string url = absl::StrCat("http://127.0.0.1:", loopback::UnusedPort(), "/hooks");
  const Outcome outcome = Sink(HttpSinkParams::Kind::kWebhook, url).Deliver(Event(), {}, 1);
  EXPECT_EQ(outcome.kind, Kind::kRetry);
  EXPECT_THAT(outcome.detail, StartsWith("curl 7: "));
}

TEST_F(HttpSinkTest, ReceiverThatNeverAnswersIsRetriedWithinTheTimeout) {
  options_.timeout = absl::Milliseconds(300);
  receiver_.set_response({.never_answer = true});
  const auto start = std::chrono::steady_clock::now();
  const Outcome outcome = Webhook().Deliver(Event(), {}, 1);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(outcome.kind, Kind::kRetry);
  EXPECT_THAT(outcome.detail, StartsWith("curl 28: "));
  EXPECT_GE(elapsed, std::chrono::milliseconds(250));
  EXPECT_LT(elapsed, std::chrono::milliseconds(2000));
  EXPECT_EQ(receiver_.WaitForRequests(1).size(), 1u);  // it did get the request
}

TEST_F(HttpSinkTest, DetailNeverShowsTheUrlOrTheSecret) {
  receiver_.set_response({.status = 503});
  const Outcome answered =
      Sink(HttpSinkParams::Kind::kWebhook, receiver_.Url("/hooks?token=s3cr3t-t0ken"))
          .Deliver(Event(), {}, 1);
  const Outcome refused =
      Sink(HttpSinkParams::Kind::kWebhook,
           absl::StrCat("http://user:s3cr3t-t0ken@127.0.0.1:", loopback::UnusedPort(), "/"))
          .Deliver(Event(), {}, 1);
  for (const Outcome& o : {answered, refused}) {
    EXPECT_THAT(o.detail, Not(HasSubstr("s3cr3t")));
    EXPECT_THAT(o.detail, Not(HasSubstr("127.0.0.1")));
    EXPECT_THAT(o.detail, Not(HasSubstr("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")));
  }
}

TEST_F(HttpSinkTest, OnlyHttpAndHttpsAreSpoken) {
  const Outcome outcome =
      Sink(HttpSinkParams::Kind::kWebhook, "file:///etc/passwd").Deliver(Event(), {}, 1);
  EXPECT_EQ(outcome.kind, Kind::kPermanent);
  EXPECT_THAT(outcome.detail, StartsWith("curl 1: "));  // CURLE_UNSUPPORTED_PROTOCOL
}

TEST_F(HttpSinkTest, SecretThatDoesNotDecodeFailsClosedWithoutSending) {
  const Outcome outcome = Webhook("whsec_!!!").Deliver(Event(), {}, 1);
  EXPECT_EQ(outcome.kind, Kind::kPermanent);
  EXPECT_TRUE(receiver_.WaitForRequests(1, absl::Milliseconds(100)).empty());
}

TEST_F(HttpSinkTest, SlackGetsReadableText) {
  const Outcome outcome = Sink(HttpSinkParams::Kind::kSlack, receiver_.Url("/services/T/B/X"), "")
                              .Deliver(Event(), {}, 1);
  EXPECT_EQ(outcome.kind, Kind::kDelivered);
  const std::vector<HttpRequest> requests = receiver_.WaitForRequests(1);
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].target, "/services/T/B/X");
  EXPECT_EQ(requests[0].Header("content-type"), "application/json");
  EXPECT_FALSE(requests[0].HasHeader("webhook-signature"));
  const nlohmann::json body = nlohmann::json::parse(requests[0].body);
  EXPECT_EQ(body, (nlohmann::json{{"text",
                                   "user-42 reached 80% of the daily limit on plan free: 4000 of "
                                   "5000 used. Resets at 2026-12-01T00:00:00Z."}}));
}

TEST_F(HttpSinkTest, SlackTextEscapesControlCharacters) {
  AlertEvent event = Event();
  event.subject = "<!channel>&";
  EXPECT_THAT(SlackText(event), StartsWith("&lt;!channel&gt;&amp; reached"));
}

TEST_F(HttpSinkTest, SubjectWebhookGoesToTheContactsUrlSigned) {
  HttpSink sink = Sink(HttpSinkParams::Kind::kSubjectWebhook, "");
  const Outcome outcome = sink.Deliver(
      Event(),
      {.email = "dev@example.com", .webhook = receiver_.Url("/mine"), .webhook_secret = kSecret},
      1);
  EXPECT_EQ(outcome.kind, Kind::kDelivered);
  const std::vector<HttpRequest> requests = receiver_.WaitForRequests(1);
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].target, "/mine");
  EXPECT_EQ(requests[0].body, EventJson(Event()));
  EXPECT_TRUE(Verifies(requests[0]));
}

TEST_F(HttpSinkTest, SubjectWebhookSkipsASubjectWithoutOne) {
  HttpSink sink = Sink(HttpSinkParams::Kind::kSubjectWebhook, receiver_.Url());
  const Outcome outcome = sink.Deliver(Event(), {.email = "dev@example.com"}, 1);
  EXPECT_EQ(outcome.kind, Kind::kSkipped);
  EXPECT_TRUE(receiver_.WaitForRequests(1, absl::Milliseconds(100)).empty());
}

TEST(GlobalInitTest, CanBeCalledMoreThanOnce) {
  EXPECT_TRUE(GlobalInit().ok());
  EXPECT_TRUE(GlobalInit().ok());
}

}  // namespace
}  // namespace sluice::alerts
