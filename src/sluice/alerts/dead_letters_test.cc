#include "sluice/alerts/dead_letters.h"

#include "gtest/gtest.h"

namespace sluice::alerts {
namespace {

DeadLetter Letter(std::string sink) { return DeadLetter{.sink = std::move(sink), .attempts = 1}; }

TEST(DeadLetterListTest, KeepsTheNewestAndCountsDrops) {
  DeadLetterList list(2);
  list.Add(Letter("a"));
  list.Add(Letter("b"));
  list.Add(Letter("c"));

  const std::vector<DeadLetter> letters = list.Snapshot();
  ASSERT_EQ(letters.size(), 2u);
  EXPECT_EQ(letters[0].sink, "b");
  EXPECT_EQ(letters[1].sink, "c");
  EXPECT_EQ(list.dropped(), 1u);
  EXPECT_EQ(list.size(), 2u);
}

TEST(DeadLetterListTest, ZeroCapacityKeepsNothing) {
  DeadLetterList list(0);
  list.Add(Letter("a"));
  EXPECT_EQ(list.size(), 0u);
  EXPECT_EQ(list.dropped(), 1u);
}

}  // namespace
}  // namespace sluice::alerts
