#include "sluice/registry/keys.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "absl/strings/ascii.h"

namespace sluice::registry {
namespace {

TEST(GenerateKeyTest, IsSkAndThirtyTwoBase32Characters) {
  absl::StatusOr<GeneratedKey> key = GenerateKey();
  ASSERT_TRUE(key.ok()) << key.status();
  ASSERT_EQ(key->plaintext.size(), 3u + 32u);
  EXPECT_EQ(key->plaintext.substr(0, 3), "sk_");
  for (char c : key->plaintext.substr(3)) {
    EXPECT_TRUE((c >= 'a' && c <= 'z') || (c >= '2' && c <= '7')) << c;
  }
}

TEST(GenerateKeyTest, DigestAndPrefixDescribeThePlaintext) {
  absl::StatusOr<GeneratedKey> key = GenerateKey();
  ASSERT_TRUE(key.ok());
  EXPECT_EQ(key->digest, DigestOf(key->plaintext));
  EXPECT_EQ(key->prefix, key->plaintext.substr(0, 8));
}

TEST(GenerateKeyTest, KeysDiffer) {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) EXPECT_TRUE(seen.insert(GenerateKey()->plaintext).second);
}

TEST(DigestTest, IsSha256) {
  EXPECT_EQ(DigestHex(DigestOf("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(DigestTest, HexRoundTripsInEitherCase) {
  const Digest d = DigestOf("abc");
  EXPECT_EQ(*ParseDigestHex(DigestHex(d)), d);
  EXPECT_EQ(*ParseDigestHex(absl::AsciiStrToUpper(DigestHex(d))), d);
}

TEST(DigestTest, ParseRefusesWrongLengthAndNonHex) {
  const std::string hex = DigestHex(DigestOf("abc"));
  EXPECT_FALSE(ParseDigestHex(hex.substr(1)).ok());
  EXPECT_FALSE(ParseDigestHex(hex + "0").ok());
  EXPECT_FALSE(ParseDigestHex("g" + hex.substr(1)).ok());
  EXPECT_EQ(ParseDigestHex("").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(NewKeyIdTest, IsNeverZeroAndDiffers) {
  std::set<uint64_t> seen;
  for (int i = 0; i < 1000; ++i) {
    absl::StatusOr<uint64_t> id = NewKeyId();
    ASSERT_TRUE(id.ok());
    EXPECT_NE(*id, 0u);
    EXPECT_TRUE(seen.insert(*id).second);
  }
}

TEST(RedactKeysTest, CutsEveryKeyToItsDisplayPrefix) {
  const std::string key = "sk_abcdefghijklmnopqrstuvwxyz234567";
  EXPECT_EQ(RedactKeys("/v1/keys/" + key), "/v1/keys/sk_abcde...");
  EXPECT_EQ(RedactKeys("/a/" + key + "/b/" + key + "x"), "/a/sk_abcde.../b/sk_abcde...x");
  // Not a key: too short, or a character base32 does not have.
  EXPECT_EQ(RedactKeys("/v1/keys/sk_abc"), "/v1/keys/sk_abc");
  EXPECT_EQ(RedactKeys("/sk_abcdefghijklmnopqrstuvwxyz23456A"),
            "/sk_abcdefghijklmnopqrstuvwxyz23456A");
  EXPECT_EQ(RedactKeys("/sk_sk_abcdefghijklmnopqrstuvwxyz234567"), "/sk_sk_abcde...");
  EXPECT_EQ(RedactKeys(""), "");
}

}  // namespace
}  // namespace sluice::registry
