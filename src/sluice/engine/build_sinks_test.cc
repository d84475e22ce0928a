#include "sluice/engine/alert_delivery.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "sluice/alerts/test_receiver.h"
#include "sluice/alerts/webhook_signature.h"
#include "sluice/common/clock.h"
#include "sluice/config/config.h"
#include "sluice/limiter/sample_alert_event.h"

namespace sluice::engine {
namespace {

using alerts::DecodeWebhookSecret;
using alerts::GlobalInit;
using alerts::Outcome;
using alerts::Sink;
using alerts::VerifyWebhook;

using ::sluice::alerts::loopback::HttpReceiver;
using ::sluice::alerts::loopback::HttpRequest;
using ::testing::ElementsAre;
using Kind = Outcome::Kind;
using Type = config::SinkConfig::Type;

constexpr char kSecret[] = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

AlertEvent Event() { return testing_util::SampleAlertEvent(); }

class BuildSinksTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { ASSERT_TRUE(GlobalInit().ok()); }

  std::vector<std::string> Names() {
    std::vector<std::string> names;
    for (const auto& sink : BuildSinks(config_, &clock_, {})) names.push_back(sink->name());
    return names;
  }
  // The subject_webhook sink (always the last one).
  std::unique_ptr<Sink> SubjectWebhook() {
    std::vector<std::unique_ptr<Sink>> sinks = BuildSinks(config_, &clock_, {});
    return std::move(sinks.back());
  }

  config::AlertsConfig config_;
  FakeClock clock_{absl::FromUnixSeconds(1'796'046'313)};
};

TEST_F(BuildSinksTest, WithNoSinksConfiguredOnlyTheSubjectWebhookExists) {
  EXPECT_THAT(Names(), ElementsAre("subject_webhook"));
}

TEST_F(BuildSinksTest, NamesSinksByTypeAndNumbersRepeats) {
  config_.sinks = {{.type = Type::kWebhook, .url = "http://127.0.0.1:1/a"},
                   {.type = Type::kSlack, .url = "https://hooks.slack.com/services/x"},
                   {.type = Type::kWebhook, .url = "http://127.0.0.1:1/b"},
                   {.type = Type::kEmail, .smtp_url = "smtp://127.0.0.1:1", .from = "a@b.c"},
                   {.type = Type::kEmail, .smtp_url = "smtp://127.0.0.1:2", .from = "a@b.c"},
                   {.type = Type::kWebhook, .url = "http://127.0.0.1:1/c"}};
  EXPECT_THAT(Names(), ElementsAre("webhook", "slack", "webhook_2", "email", "email_2", "webhook_3",
                                   "subject_webhook"));
}

TEST_F(BuildSinksTest, SubjectWebhookIsSignedWithTheSubjectsOwnSecretNotTheOperators) {
  config_.sinks = {{.type = Type::kWebhook, .url = "http://127.0.0.1:1/a", .secret = kSecret}};
  constexpr char kSubjectSecret[] = "whsec_c2Vjb25kLXNlY3JldC1ieXRlcy0xMjM0";
  HttpReceiver receiver;
  const Outcome outcome = SubjectWebhook()->Deliver(
      Event(), {.webhook = receiver.Url(), .webhook_secret = kSubjectSecret}, 1);
  ASSERT_EQ(outcome.kind, Kind::kDelivered);
  const std::vector<HttpRequest> requests = receiver.WaitForRequests(1);
  ASSERT_EQ(requests.size(), 1u);
  const HttpRequest& r = requests[0];
  EXPECT_TRUE(VerifyWebhook(DecodeWebhookSecret(kSubjectSecret).value_or(""),
                            r.Header("webhook-id"), r.Header("webhook-timestamp"), r.body,
                            r.Header("webhook-signature")));
  EXPECT_FALSE(VerifyWebhook(DecodeWebhookSecret(kSecret).value_or(""), r.Header("webhook-id"),
                             r.Header("webhook-timestamp"), r.body, r.Header("webhook-signature")));
}

TEST_F(BuildSinksTest, SubjectWebhookIsUnsignedWhenTheSubjectHasNoSecret) {
  config_.sinks = {{.type = Type::kWebhook, .url = "http://127.0.0.1:1/a", .secret = kSecret}};
  HttpReceiver receiver;
  ASSERT_EQ(SubjectWebhook()->Deliver(Event(), {.webhook = receiver.Url()}, 1).kind,
            Kind::kDelivered);
  const std::vector<HttpRequest> requests = receiver.WaitForRequests(1);
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_FALSE(requests[0].HasHeader("webhook-signature"));
}

TEST_F(BuildSinksTest, RetryAfterIsHonouredBeyondMaxDelayUpToTheSinkBound) {
  config_.retry.max_delay = absl::Minutes(2);
  HttpReceiver receiver({.status = 429, .headers = {{"Retry-After", "600"}}});
  const Outcome outcome = SubjectWebhook()->Deliver(Event(), {.webhook = receiver.Url()}, 1);
  EXPECT_EQ(outcome.kind, Kind::kRetry);
  EXPECT_EQ(outcome.retry_after, absl::Minutes(10));
}

}  // namespace
}  // namespace sluice::engine
