#include "sluice/grpc/h2_session.h"

#include <gtest/gtest.h>

#include <chrono>
#include <optional>

namespace sluice::rls {
namespace {

using std::chrono::nanoseconds;

TEST(PercentEncodeTest, PrintableAsciiStaysAndEverythingElseIsEscaped) {
  EXPECT_EQ(PercentEncode("plan \"x\": unknown"), "plan \"x\": unknown");
  EXPECT_EQ(PercentEncode("100%"), "100%25");
  EXPECT_EQ(PercentEncode("caf\xc3\xa9"), "caf%C3%A9");
  EXPECT_EQ(PercentEncode("a\nb\x7f"), "a%0Ab%7F");
  EXPECT_EQ(PercentEncode(""), "");
}

TEST(ParseGrpcTimeoutTest, EveryUnit) {
  EXPECT_EQ(ParseGrpcTimeout("2H"), std::chrono::hours(2));
  EXPECT_EQ(ParseGrpcTimeout("3M"), std::chrono::minutes(3));
  EXPECT_EQ(ParseGrpcTimeout("1S"), std::chrono::seconds(1));
  EXPECT_EQ(ParseGrpcTimeout("250m"), std::chrono::milliseconds(250));
  EXPECT_EQ(ParseGrpcTimeout("7u"), std::chrono::microseconds(7));
  EXPECT_EQ(ParseGrpcTimeout("99999999n"), nanoseconds(99'999'999));
}

TEST(ParseGrpcTimeoutTest, MalformedIsNullopt) {
  EXPECT_EQ(ParseGrpcTimeout(""), std::nullopt);
  EXPECT_EQ(ParseGrpcTimeout("S"), std::nullopt);
  EXPECT_EQ(ParseGrpcTimeout("10"), std::nullopt);
  EXPECT_EQ(ParseGrpcTimeout("10s"), std::nullopt);
  EXPECT_EQ(ParseGrpcTimeout("-1S"), std::nullopt);
  EXPECT_EQ(ParseGrpcTimeout("123456789S"), std::nullopt);  // at most 8 digits
  EXPECT_EQ(ParseGrpcTimeout("1 S"), std::nullopt);
}

}  // namespace
}  // namespace sluice::rls
