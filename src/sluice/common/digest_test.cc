#include "sluice/common/digest.h"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "sluice/common/hex.h"

namespace sluice {
namespace {

std::string Sha256Hex(std::string_view data) {
  const std::optional<Sha256Digest> digest = Sha256(data);
  return digest ? EncodeHex(*digest) : "(failed)";
}

// Test vectors of FIPS 180-2 (and the empty input).
TEST(Sha256Test, MatchesTheStandardVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256Test, ReusingTheContextGivesTheSameDigestEachTime) {
  const std::string first = Sha256Hex("sk_key");
  EXPECT_EQ(Sha256Hex("something else"), Sha256Hex("something else"));
  EXPECT_EQ(Sha256Hex("sk_key"), first);
}

TEST(Sha256Test, ThreadsHashIndependently) {
  const std::string want = Sha256Hex("abc");
  std::vector<std::string> got(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < got.size(); ++t) {
    threads.emplace_back([&got, t] {
      for (int i = 0; i < 100; ++i) got[t] = Sha256Hex(i % 2 == 0 ? "abc" : "xyz");
      got[t] = Sha256Hex("abc");
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::string& g : got) EXPECT_EQ(g, want);
}

TEST(Sha1HexTest, IsLowerCaseHexOfTheStandardVectors) {
  EXPECT_EQ(Sha1Hex(""), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
  EXPECT_EQ(Sha1Hex("abc"), "a9993e364706816aba3e25717850c26c9cd0d89d");
}

TEST(ConstantTimeEqualsTest, EqualOnlyForTheSameBytesAndSize) {
  const Sha256Digest a = *Sha256("a");
  Sha256Digest b = a;
  EXPECT_TRUE(ConstantTimeEquals(a, b));
  b[31] ^= 1;
  EXPECT_FALSE(ConstantTimeEquals(a, b));
  b = a;
  b[0] ^= 0x80;
  EXPECT_FALSE(ConstantTimeEquals(a, b));
  EXPECT_FALSE(
      ConstantTimeEquals(std::span<const uint8_t>(a), std::span<const uint8_t>(a).first(31)));
}

TEST(ConstantTimeEqualsTest, StringsOfDifferentSizesAreNotEqual) {
  EXPECT_TRUE(ConstantTimeEquals(std::string_view("token"), std::string_view("token")));
  EXPECT_FALSE(ConstantTimeEquals(std::string_view("token"), std::string_view("tokex")));
  EXPECT_FALSE(ConstantTimeEquals(std::string_view("token"), std::string_view("token2")));
  EXPECT_FALSE(ConstantTimeEquals(std::string_view(""), std::string_view("t")));
  EXPECT_TRUE(ConstantTimeEquals(std::string_view(""), std::string_view("")));
}

}  // namespace
}  // namespace sluice
