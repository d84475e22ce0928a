#include "sluice/http/check_body.h"

#include <gtest/gtest.h>

#include <string>

#include "absl/status/status.h"
#include "sluice/common/strings.h"

namespace sluice::http {
namespace {

// The error message of parsing `body`, or "ok".
std::string ErrorOf(std::string_view body) {
  const absl::StatusOr<CheckBody> parsed = ParseCheckBody(body);
  if (parsed.ok()) return "ok";
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(ToStd(parsed.status().message()));
}

std::string CostHeaderErrorOf(std::string_view value) {
  const absl::StatusOr<int64_t> cost = ParseCostHeader(value);
  if (cost.ok()) return "ok";
  EXPECT_EQ(cost.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(ToStd(cost.status().message()));
}

constexpr char kCostError[] = "cost: must be an integer from 0 to 1000000";

TEST(ParseCheckBodyTest, ReadsSubjectPlanAndCost) {
  const absl::StatusOr<CheckBody> body =
      ParseCheckBody(R"({"subject":"user-42","plan":"free","cost":3})");
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_EQ(body->subject, "user-42");
  EXPECT_EQ(body->plan, "free");
  EXPECT_EQ(body->api_key, "");
  EXPECT_EQ(body->cost, 3);
}

TEST(ParseCheckBodyTest, ReadsAnApiKey) {
  const absl::StatusOr<CheckBody> body = ParseCheckBody(R"({"api_key":"demo-free-key"})");
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_EQ(body->api_key, "demo-free-key");
  EXPECT_EQ(body->subject, "");
  EXPECT_EQ(body->plan, "");
}

TEST(ParseCheckBodyTest, CostDefaultsToOne) {
  EXPECT_EQ(ParseCheckBody(R"({"api_key":"k"})")->cost, 1);
}

TEST(ParseCheckBodyTest, AcceptsTheCostBounds) {
  EXPECT_EQ(ParseCheckBody(R"({"api_key":"k","cost":0})")->cost, 0);
  EXPECT_EQ(ParseCheckBody(R"({"api_key":"k","cost":1000000})")->cost, 1000000);
}

TEST(ParseCheckBodyTest, RefusesACostOutOfRange) {
  EXPECT_EQ(ErrorOf(R"({"api_key":"k","cost":1000001})"), kCostError);
  EXPECT_EQ(ErrorOf(R"({"api_key":"k","cost":-1})"), kCostError);
  EXPECT_EQ(ErrorOf(R"({"api_key":"k","cost":18446744073709551615})"), kCostError);
  EXPECT_EQ(ErrorOf(R"({"api_key":"k","cost":-9223372036854775808})"), kCostError);
}

TEST(ParseCheckBodyTest, RefusesACostThatIsNotAnInteger) {
  for (const char* cost : {"1.5", "1.0", "1e2", "true", "null", R"("1")", "[1]", "{}"}) {
    EXPECT_EQ(ErrorOf(std::string(R"({"api_key":"k","cost":)") + cost + "}"), kCostError) << cost;
  }
}

// Numbers beyond a double's range: nlohmann refuses them while parsing, but the body is JSON and
// the member holding the number is what the client has to fix.
const std::string kHugeNumbers[] = {"1e400", "-1e400", "1E+999", std::string(60'000, '9'),
                                    "-" + std::string(400, '1')};

TEST(ParseCheckBodyTest, RefusesACostBeyondAnyNumberNamingTheCost) {
  for (const std::string& cost : kHugeNumbers) {
    EXPECT_EQ(ErrorOf(R"({"api_key":"k","cost":)" + cost + "}"),
              "cost: number out of range (must be an integer from 0 to 1000000)")
        << cost.substr(0, 20);
    EXPECT_EQ(ErrorOf(R"({"cost":)" + cost + R"(,"subject":"u","plan":"p"})"),
              "cost: number out of range (must be an integer from 0 to 1000000)")
        << cost.substr(0, 20);
  }
}

TEST(ParseCheckBodyTest, RefusesANumberBeyondAnyNumberInAStringFieldNamingIt) {
  for (const std::string& number : kHugeNumbers) {
    EXPECT_EQ(ErrorOf(R"({"subject":)" + number + R"(,"plan":"p"})"),
              "subject: number out of range");
    EXPECT_EQ(ErrorOf(R"({"subject":"u","plan":[)" + number + "]}"), "plan: number out of range");
    EXPECT_EQ(ErrorOf(R"({"api_key":{"a":)" + number + "}}"), "api_key: number out of range");
  }
}

TEST(ParseCheckBodyTest, NamesAnUnknownOrRepeatedFieldBeforeANumberOutOfRange) {
  EXPECT_EQ(ErrorOf(R"({"api_key":"k","costs":1e400})"), "costs: unknown field");
  EXPECT_EQ(ErrorOf(R"({"api_key":"k","cost":1,"cost":1e400})"), "cost: duplicate field");
  EXPECT_EQ(ErrorOf("1e400"), "body: number out of range");
}

TEST(ParseCheckBodyTest, TellsSmallAndLongNumbersThatADoubleHoldsFromThoseOutOfRange) {
  // These read as doubles (0, 1e300, 1): not integers, but in range.
  for (const std::string& cost : {std::string("1e-400"), "1" + std::string(300, '0'),
                                  "1" + std::string(30'000, '0') + "e-30000"}) {
    EXPECT_EQ(ErrorOf(R"({"api_key":"k","cost":)" + cost + "}"), kCostError) << cost.substr(0, 20);
  }
}

TEST(ParseCheckBodyTest, RefusesTextThatIsNotJson) {
  for (const char* body :
       {"", "{", "subject=u", R"({"api_key":"k",})", "{} {}", "{\"api_key\":\"\xff\"}"}) {
    EXPECT_EQ(ErrorOf(body), "body: not valid JSON") << body;
  }
  // nlohmann stops at a NUL: what follows it must not be ignored.
  EXPECT_EQ(ErrorOf(std::string("{\"subject\":\"u\"}\0junk", 20)), "body: not valid JSON");
}

TEST(ParseCheckBodyTest, RefusesJsonThatIsNotAnObject) {
  for (const char* body : {"[]", "1", R"("api_key")", "null"}) {
    EXPECT_EQ(ErrorOf(body), "body: must be a JSON object") << body;
  }
}

TEST(ParseCheckBodyTest, RefusesAnUnknownField) {
  EXPECT_EQ(ErrorOf(R"({"api_key":"k","foo":1})"), "foo: unknown field");
}

TEST(ParseCheckBodyTest, ReportsTheFirstUnknownFieldOfTheDocument) {
  EXPECT_EQ(ErrorOf(R"({"api_key":"k","zeta":1,"alpha":2})"), "zeta: unknown field");
}

TEST(ParseCheckBodyTest, ShortensAnUnknownFieldNameInTheError) {
  EXPECT_EQ(ErrorOf(R"({")" + std::string(1000, 'x') + R"(":1})"),
            std::string(64, 'x') + ": unknown field");
}

TEST(ParseCheckBodyTest, RefusesARepeatedField) {
  EXPECT_EQ(ErrorOf(R"({"subject":"a","plan":"free","subject":"b"})"), "subject: duplicate field");
}

TEST(ParseCheckBodyTest, NestedFieldsAreNotTopLevelFields) {
  EXPECT_EQ(ErrorOf(R"({"api_key":"k","x":{"api_key":"j"}})"), "x: unknown field");
}

TEST(ParseCheckBodyTest, RefusesStringFieldsOfOtherTypes) {
  EXPECT_EQ(ErrorOf(R"({"subject":42,"plan":"free"})"), "subject: must be a non-empty string");
  EXPECT_EQ(ErrorOf(R"({"subject":"u","plan":null})"), "plan: must be a non-empty string");
  EXPECT_EQ(ErrorOf(R"({"api_key":["k"]})"), "api_key: must be a non-empty string");
}

TEST(ParseCheckBodyTest, RefusesEmptyStrings) {
  EXPECT_EQ(ErrorOf(R"({"api_key":""})"), "api_key: must be a non-empty string");
  EXPECT_EQ(ErrorOf(R"({"subject":"","plan":"free"})"), "subject: must be a non-empty string");
}

TEST(ParseCheckBodyTest, RefusesAPlanWithoutSubject) {
  EXPECT_EQ(ErrorOf(R"({"plan":"free"})"), "subject: required with plan");
}

TEST(ParseCheckBodyTest, AcceptsASubjectWithoutPlan) {
  // A subject alone is valid: its plan comes from the registry.
  absl::StatusOr<CheckBody> alone = ParseCheckBody(R"({"subject":"u"})");
  ASSERT_TRUE(alone.ok());
  EXPECT_EQ(alone->subject, "u");
  EXPECT_EQ(alone->plan, "");
}

TEST(ParseCheckBodyTest, RefusesAnApiKeyTogetherWithASubject) {
  EXPECT_EQ(ErrorOf(R"({"api_key":"k","subject":"u","plan":"free"})"),
            "api_key: give either api_key or subject and plan");
  EXPECT_EQ(ErrorOf(R"({"api_key":"k","plan":"free"})"),
            "api_key: give either api_key or subject and plan");
}

TEST(ParseCheckBodyTest, RefusesABodyWithNeitherKeyNorSubject) {
  EXPECT_EQ(ErrorOf(R"({})"), "api_key: give either api_key or subject and plan");
  EXPECT_EQ(ErrorOf(R"({"cost":1})"), "api_key: give either api_key or subject and plan");
}

// Plain bodies are read without a JSON tree; any other spelling of the same object (escapes,
// other whitespace) goes through the full parser. Both must read the same thing.
TEST(ParseCheckBodyTest, ReadsAPlainBodyAsTheSameObjectSpelledOtherwise) {
  const struct {
    const char* plain;
    const char* escaped;
  } kCases[] = {
      {R"({"subject":"user-42","plan":"free","cost":3})",
       R"({"subject":"user\u002d42","plan":"fre\u0065","cost":3})"},
      {" \t\r\n{ \"api_key\" : \"k-1\" , \"cost\" : 1000000 } \n",
       R"({"api_key":"k\u002d1","cost":1000000})"},
      {R"({"subject":"a b/c","cost":0})", R"({"subject":"a b\/c","cost":0})"},
  };
  for (const auto& c : kCases) {
    const absl::StatusOr<CheckBody> a = ParseCheckBody(c.plain, BodyOf::kReserve);
    const absl::StatusOr<CheckBody> b = ParseCheckBody(c.escaped, BodyOf::kReserve);
    ASSERT_TRUE(a.ok()) << c.plain << ": " << a.status();
    ASSERT_TRUE(b.ok()) << c.escaped << ": " << b.status();
    EXPECT_EQ(a->subject, b->subject) << c.plain;
    EXPECT_EQ(a->plan, b->plan) << c.plain;
    EXPECT_EQ(a->api_key, b->api_key) << c.plain;
    EXPECT_EQ(a->cost, b->cost) << c.plain;
  }
  EXPECT_EQ(ParseCheckBody(R"({"subject":"a b/c","cost":0})")->subject, "a b/c");
  EXPECT_EQ(ParseCheckBody(R"({"subject":"s","ttl":"90s"})", BodyOf::kReserve)->ttl,
            absl::Seconds(90));
}

// Bodies close to the plain form that are not it: each gets the error of the full parser.
TEST(ParseCheckBodyTest, RefusesNearlyPlainBodiesWithTheParsersErrors) {
  EXPECT_EQ(ErrorOf(R"({"api_key":"k","cost":01})"), "body: not valid JSON");
  EXPECT_EQ(ErrorOf(R"({"api_key":"k","cost":1,})"), "body: not valid JSON");
  EXPECT_EQ(ErrorOf(R"({"api_key":"k"} x)"), "body: not valid JSON");
  EXPECT_EQ(ErrorOf(R"({"api_key":"k")"), "body: not valid JSON");
  EXPECT_EQ(ErrorOf(R"({"api_key":"k","cost":10000000})"), kCostError);
  EXPECT_EQ(ErrorOf(R"({"api_key":"k","cost":1.0})"), kCostError);
  EXPECT_EQ(ErrorOf(R"({"api_key":"k","cost":"1"})"), kCostError);
  EXPECT_EQ(ErrorOf(R"({"api_key":"","cost":1})"), "api_key: must be a non-empty string");
  EXPECT_EQ(ErrorOf(R"({"api_key":"k","api_key":"k"})"), "api_key: duplicate field");
  EXPECT_EQ(ErrorOf(R"({"api_key":"k","ttl":"60s"})"), "ttl: unknown field");
  EXPECT_EQ(ErrorOf(R"({})"), "api_key: give either api_key or subject and plan");
  EXPECT_EQ(ErrorOf(R"({"plan":"free"})"), "subject: required with plan");
  EXPECT_EQ(ErrorOf(R"({"api_key":"k","subject":"s"})"),
            "api_key: give either api_key or subject and plan");
  const absl::StatusOr<CheckBody> ttl =
      ParseCheckBody(R"({"subject":"s","ttl":"2h"})", BodyOf::kReserve);
  EXPECT_EQ(ttl.status().message(),
            "ttl: must be a duration such as \"60s\", more than 0 and at most 1h");
}

TEST(ParseSettleBodyTest, ReadsTheCostPlainOrSpelledOtherwise) {
  EXPECT_EQ(*ParseSettleBody(R"({"cost":7})"), 7);
  EXPECT_EQ(*ParseSettleBody(" { \"cost\" : 1000000 } "), 1000000);
  EXPECT_EQ(*ParseSettleBody(R"({"\u0063ost":7})"), 7);
  EXPECT_EQ(ParseSettleBody(R"({})").status().message(), "cost: required: the real cost");
  EXPECT_EQ(ParseSettleBody(R"({"cost":1000001})").status().message(), kCostError);
  EXPECT_EQ(ParseSettleBody(R"({"cost":7,"cost":7})").status().message(), "cost: duplicate field");
}

TEST(ParseCostHeaderTest, ReadsDigits) {
  EXPECT_EQ(*ParseCostHeader("0"), 0);
  EXPECT_EQ(*ParseCostHeader("25"), 25);
  EXPECT_EQ(*ParseCostHeader("1000000"), 1000000);
  EXPECT_EQ(*ParseCostHeader("0007"), 7);
}

TEST(ParseCostHeaderTest, RefusesAnythingElse) {
  for (const char* value :
       {"", "1000001", "99999999999999999999999", "-1", "+1", "1.5", " 1", "1 ", "0x10", "1e3"}) {
    EXPECT_EQ(CostHeaderErrorOf(value), "Sluice-Cost: must be an integer from 0 to 1000000")
        << value;
  }
}

}  // namespace
}  // namespace sluice::http
