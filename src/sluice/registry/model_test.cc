#include "sluice/registry/model.h"

#include <gtest/gtest.h>

namespace sluice::registry {
namespace {

TEST(KeyIdTest, TextIsKeyAndSixteenLowercaseHexDigits) {
  EXPECT_EQ(KeyIdText(0x1a2b), "key_0000000000001a2b");
  EXPECT_EQ(KeyIdText(~uint64_t{0}), "key_ffffffffffffffff");
}

TEST(KeyIdTest, ParseIsTheInverse) {
  for (uint64_t id : {uint64_t{1}, uint64_t{0xdeadbeefcafef00d}, ~uint64_t{0}}) {
    EXPECT_EQ(ParseKeyId(KeyIdText(id)), id);
  }
}

TEST(KeyIdTest, ParseRefusesAnythingElse) {
  for (const char* text : {"", "key_", "key_123", "key_0000000000001A2B", "kex_0000000000001a2b",
                           "key_0000000000001a2b0", "key_000000000000 a2b", "0000000000001a2b"}) {
    EXPECT_EQ(ParseKeyId(text), std::nullopt) << text;
  }
}

}  // namespace
}  // namespace sluice::registry
