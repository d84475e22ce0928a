#include "sluice/alerts/webhook_signature.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace sluice::alerts {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The test vector the Standard Webhooks reference libraries share (cross-checked with Python's
// hmac module): secret, msg id, timestamp, payload, signature.
constexpr char kSecret[] = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
constexpr char kId[] = "msg_p5jXN8AQM9LWM0D4loKWxJek";
constexpr int64_t kTimestamp = 1614265330;
constexpr char kBody[] = R"({"test": 2432232314})";
constexpr char kSignature[] = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

std::string Key() {
  absl::StatusOr<std::string> key = DecodeWebhookSecret(kSecret);
  EXPECT_TRUE(key.ok()) << key.status();
  return key.ok() ? *key : "";
}

TEST(WebhookSignatureTest, MatchesTheStandardWebhooksTestVector) {
  EXPECT_EQ(SignWebhook(Key(), kId, kTimestamp, kBody), kSignature);
}

TEST(WebhookSignatureTest, SecretDecodesToTheBase64Bytes) { EXPECT_EQ(Key().size(), 24u); }

TEST(WebhookSignatureTest, SecretWithoutPrefixIsTheSameKey) {
  absl::StatusOr<std::string> bare = DecodeWebhookSecret("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(*bare, Key());
}

TEST(WebhookSignatureTest, RejectsSecretsThatAreNotStandardBase64) {
  for (const char* bad : {"", "whsec_", "whsec_not base64", "whsec_a-b_c", "whsec_%%%%"}) {
    const absl::StatusOr<std::string> key = DecodeWebhookSecret(bad);
    ASSERT_FALSE(key.ok()) << bad;
    EXPECT_EQ(key.status().code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(WebhookSignatureTest, ErrorNeverQuotesTheSecret) {
  const absl::StatusOr<std::string> key = DecodeWebhookSecret("whsec_c2VjcmV0!");
  ASSERT_FALSE(key.ok());
  EXPECT_THAT(key.status().message(), Not(HasSubstr("c2VjcmV0")));
}

TEST(WebhookSignatureTest, VerifiesItsOwnSignature) {
  EXPECT_TRUE(VerifyWebhook(Key(), kId, "1614265330", kBody, kSignature));
}

TEST(WebhookSignatureTest, VerifyFindsTheV1EntryAmongSeveral) {
  EXPECT_TRUE(VerifyWebhook(Key(), kId, "1614265330", kBody,
                            std::string("v1a,c29tZXRoaW5nZWxzZQ== v1,AAAA ") + kSignature));
}

TEST(WebhookSignatureTest, VerifyRejectsAnyChange) {
  EXPECT_FALSE(VerifyWebhook(Key(), kId, "1614265330", R"({"test": 2432232315})", kSignature));
  EXPECT_FALSE(VerifyWebhook(Key(), "msg_other", "1614265330", kBody, kSignature));
  EXPECT_FALSE(VerifyWebhook(Key(), kId, "1614265331", kBody, kSignature));
  EXPECT_FALSE(VerifyWebhook("another key", kId, "1614265330", kBody, kSignature));
  EXPECT_FALSE(VerifyWebhook(Key(), kId, "1614265330", kBody, ""));
  EXPECT_FALSE(VerifyWebhook(Key(), kId, "1614265330", kBody,
                             "v2,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="));
}

}  // namespace
}  // namespace sluice::alerts
