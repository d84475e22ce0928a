#include "sluice/frontend/cost.h"

#include <gtest/gtest.h>

#include "absl/status/status.h"

namespace sluice::frontend {
namespace {

TEST(ParseCostTest, ReadsDigitsFromZeroToTheMaximumCost) {
  EXPECT_EQ(*ParseCost("0"), 0);
  EXPECT_EQ(*ParseCost("1"), 1);
  EXPECT_EQ(*ParseCost("0042"), 42);
  EXPECT_EQ(*ParseCost("1000000"), 1000000);
}

TEST(ParseCostTest, RefusesAnythingButDigitsWithinTheRangeSayingWhatIsWanted) {
  for (const char* text :
       {"", "1000001", "18446744073709551617", "-1", "+1", "1.0", " 1", "1 ", "0x1", "1e3", "１"}) {
    const absl::StatusOr<int64_t> cost = ParseCost(text);
    EXPECT_EQ(cost.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_EQ(cost.status().message(), "must be an integer from 0 to 1000000") << text;
  }
}

}  // namespace
}  // namespace sluice::frontend
