#include "sluice/common/stable_hash.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

// Published FNV-1a 64 test vectors: the value must never drift, snapshots depend on it.
TEST(StableHashTest, MatchesFnv1aVectors) {
  EXPECT_EQ(StableHash64(""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(StableHash64("a"), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(StableHash64("foobar"), 0x85944171f73967e8ULL);
}

TEST(StableHashTest, ChainingEqualsHashingTheConcatenation) {
  EXPECT_EQ(StableHash64("bar", StableHash64("foo")), StableHash64("foobar"));
}

}  // namespace
}  // namespace sluice
