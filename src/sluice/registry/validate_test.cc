#include "sluice/registry/validate.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sluice/config/config.h"
#include "sluice/registry/keys.h"

namespace sluice::registry {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

const absl::Time kNow = absl::FromUnixSeconds(1'700'000'000);  // 2023-11-14T22:13:20Z

PlanSet Plans() {
  config::Config cfg;
  cfg.plans.push_back(
      {.name = "free",
       .limits = {{.name = "per_minute", .quota = 60, .window = *config::ParseWindow("1m")},
                  {.name = "daily", .quota = 1000, .window = *config::ParseWindow("day")}}});
  cfg.plans.push_back(
      {.name = "pro",
       .limits = {{.name = "daily", .quota = 1, .window = *config::ParseWindow("day")}}});
  cfg.plans.push_back({.name = "rates",
                       .limits = {{.name = "sliding",
                                   .quota = 60,
                                   .window = *config::ParseWindow("1m"),
                                   .algorithm = config::Algorithm::kSliding},
                                  {.name = "gcra",
                                   .quota = 60,
                                   .window = *config::ParseWindow("1s"),
                                   .algorithm = config::Algorithm::kGcra}}});
  return *PlanSet::FromConfig(cfg);
}

class SubjectBodyTest : public ::testing::Test {
 protected:
  absl::StatusOr<Subject> Parse(std::string_view body, std::string_view id = "alice") {
    return ParseSubjectBody(id, body, plans_, kNow);
  }
  // The error message of a body that must be refused.
  std::string Error(std::string_view body, std::string_view id = "alice") {
    absl::StatusOr<Subject> s = Parse(body, id);
    if (s.ok()) return "(accepted)";
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(s.status().message());
  }
  // The error message of a body holding a number beyond a double's range.
  std::string NumberError(std::string_view body) {
    absl::StatusOr<Subject> s = Parse(body);
    if (s.ok()) return "(accepted)";
    EXPECT_EQ(s.status().code(), absl::StatusCode::kOutOfRange);
    return std::string(s.status().message());
  }

  PlanSet plans_ = Plans();
};

TEST_F(SubjectBodyTest, MinimalBodyIsAPlan) {
  absl::StatusOr<Subject> s = Parse(R"({"plan":"free"})");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->id, "alice");
  EXPECT_EQ(s->plan, "free");
  EXPECT_EQ(s->metadata, "{}");
  EXPECT_FALSE(s->disabled);
  EXPECT_TRUE(s->overrides.empty());
}

TEST_F(SubjectBodyTest, AnOverrideOfASlidingOrGcraLimitIsOneItCanEnforce) {
  EXPECT_EQ(Error(R"({"plan":"rates","overrides":{"sliding":{"quota":10000000}}})"),
            "overrides.sliding.quota: at most 9999999 for a sliding limit");
  EXPECT_EQ(Error(R"({"plan":"rates","overrides":{"gcra":{"quota":300000}}})"),
            "overrides.gcra.quota: a gcra limit admits at most one unit per microsecond and an "
            "interval (window / quota) of whole microseconds below 1ms: at most 1000000 for window "
            "1s");
  absl::StatusOr<Subject> s = Parse(
      R"({"plan":"rates","overrides":{"sliding":{"quota":9999999},"gcra":{"quota":250000}}})");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->overrides.size(), 2u);
}

TEST_F(SubjectBodyTest, EveryFieldIsRead) {
  absl::StatusOr<Subject> s = Parse(R"({"plan":"free","email":"a@example.com",
      "webhook":"https://example.com/h","webhook_secret":"whsec_c2VjcmV0",
      "metadata":{"b":[1,2], "a":"x"},"disabled":true,
      "overrides":{"per_minute":{"quota":5},"daily":{"quota":7,"until":"2030-01-01T00:00:00Z"}}})");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->email, "a@example.com");
  EXPECT_EQ(s->webhook, "https://example.com/h");
  EXPECT_EQ(s->webhook_secret, "whsec_c2VjcmV0");
  EXPECT_EQ(s->metadata, R"({"a":"x","b":[1,2]})");
  EXPECT_TRUE(s->disabled);
  ASSERT_EQ(s->overrides.size(), 2u);
  EXPECT_EQ(s->overrides[0].limit, "daily");  // sorted by limit
  EXPECT_EQ(s->overrides[0].quota, 7);
  EXPECT_EQ(s->overrides[0].until, absl::FromUnixSeconds(1893456000));
  EXPECT_EQ(s->overrides[1].limit, "per_minute");
  EXPECT_EQ(s->overrides[1].until, std::nullopt);
}

TEST_F(SubjectBodyTest, NullAndEmptyMeanNone) {
  absl::StatusOr<Subject> s =
      Parse(R"({"plan":"free","email":null,"webhook":"","metadata":null,"overrides":null})");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->email, "");
  EXPECT_EQ(s->metadata, "{}");
}

TEST_F(SubjectBodyTest, ErrorsStartWithTheFieldPath) {
  EXPECT_EQ(Error(R"({"plan":"gold"})"), R"(plan: unknown plan "gold")");
  EXPECT_EQ(Error(R"({})"), "plan: required");
  EXPECT_EQ(Error(""), "plan: required");
  EXPECT_EQ(Error(R"({"plan":1})"), "plan: must be a string");
  EXPECT_EQ(Error(R"({"plan":"free","frobnicate":1})"), "frobnicate: unknown field");
  EXPECT_EQ(Error(R"({"plan":"free",)"), "body: malformed JSON at byte 16");
  EXPECT_EQ(Error(R"([1])"), "body: must be a JSON object");
  // A repeated member, at any depth, is refused (nlohmann would keep the last without a word).
  EXPECT_EQ(Error(R"({"plan":"free","plan":"pro"})"), "body: member plan given twice");
  EXPECT_EQ(Error(R"({"plan":"free","overrides":{"daily":{"quota":5},"daily":{"quota":7}}})"),
            "body: member daily given twice");
  EXPECT_EQ(Error(R"({"plan":"free","metadata":{"a":{"x":1},"b":{"x":2}}})"), "(accepted)");
  EXPECT_THAT(Error(R"({"plan":"free"})", "bad id"), StartsWith("id: "));
  EXPECT_THAT(Error(R"({"plan":"free","email":"nope"})"), StartsWith("email: "));
  EXPECT_THAT(Error(R"({"plan":"free","email":"a b@c"})"), StartsWith("email: "));
  // Addresses the email sink would skip without a word.
  for (const char* email :
       {"<a@b.c>", "a,b@c.d", "a;b@c.d", "\\\"a\\\"@b.c", "a(x)@b.c", "a@[1.2.3.4]"}) {
    EXPECT_THAT(Error(absl::StrCat(R"({"plan":"free","email":")", email, R"("})")),
                StartsWith("email: "))
        << email;
  }
  // A number that would not be stored as sent; numbers that would are kept.
  for (const char* inexact : {"[123456789012345678901234567890]", "9007199254740993.0",
                              "-9007199254740993.0", "9.007199254740993e15"}) {
    EXPECT_THAT(Error(absl::StrCat(R"({"plan":"free","metadata":{"a":)", inexact, "}}")),
                StartsWith("metadata: holds a number of 2^53 or more"))
        << inexact;
  }
  EXPECT_EQ(
      Error(
          R"({"plan":"free","metadata":{"a":18446744073709551615,"b":-9007199254740992,"c":1.5e15}})"),
      "(accepted)");
  // Bytes after a NUL are not ignored: the body is no JSON text.
  EXPECT_EQ(Error(std::string_view("{\"plan\":\"free\"}\0garbage{{", 25)),
            "body: malformed JSON (a NUL byte)");
  EXPECT_THAT(Error(R"({"plan":"free","webhook":"ftp://x"})"),
              StartsWith("webhook: must be an http or https URL"));
  EXPECT_THAT(Error(R"({"plan":"free","webhook":"https://x","webhook_secret":"abc"})"),
              StartsWith("webhook_secret: must start with whsec_"));
  EXPECT_EQ(Error(R"({"plan":"free","webhook_secret":"whsec_c2VjcmV0"})"),
            "webhook_secret: set without a webhook to sign");
  EXPECT_EQ(Error(R"({"plan":"free","disabled":"yes"})"), "disabled: must be true or false");
}

TEST_F(SubjectBodyTest, MessagesNeverQuoteSecretsOrAddresses) {
  EXPECT_THAT(Error(R"({"plan":"free","webhook":"https://x","webhook_secret":"whsec_!!hunter2"})"),
              Not(HasSubstr("hunter2")));
  EXPECT_THAT(Error(R"({"plan":"free","email":"hunter2"})"), Not(HasSubstr("hunter2")));
  EXPECT_THAT(Error(R"({"plan":"free","webhook":"gopher://hunter2"})"), Not(HasSubstr("hunter2")));
}

TEST_F(SubjectBodyTest, OddFieldNamesAreQuotedInMessages) {
  EXPECT_EQ(Error(R"({"plan":"free","a b\n":1})"), R"("a b\n": unknown field)");
}

TEST_F(SubjectBodyTest, MetadataIsABoundedObject) {
  const std::string want = "metadata: must be a JSON object of at most 4096 bytes";
  EXPECT_EQ(Error(R"({"plan":"free","metadata":[1]})"), want);
  EXPECT_EQ(Error(R"({"plan":"free","metadata":"x"})"), want);
  const std::string big = std::string(4096 - 8, 'x');  // {"a":"..."} is 8 bytes more
  EXPECT_TRUE(Parse(absl::StrCat(R"({"plan":"free","metadata":{"a":")", big, R"("}})")).ok());
  EXPECT_EQ(Error(absl::StrCat(R"({"plan":"free","metadata":{"a":")", big, R"(x"}})")), want);
  EXPECT_TRUE(Parse(R"({"plan":"free","metadata":{"a":[[[[[[[1]]]]]]]}})").ok());  // depth 8
  EXPECT_THAT(Error(R"({"plan":"free","metadata":{"a":[[[[[[[[1]]]]]]]]}})"),
              StartsWith("metadata: nested deeper than 8"));
}

TEST_F(SubjectBodyTest, DeepBodyIsRefusedBeforeParsing) {
  const std::string deep = absl::StrCat(R"({"plan":"free","metadata":)", std::string(100000, '['),
                                        std::string(100000, ']'), "}");
  EXPECT_THAT(Error(deep), StartsWith("body: nested deeper than"));
}

TEST_F(SubjectBodyTest, OverridesNameLimitsOfThePlan) {
  EXPECT_EQ(Error(R"({"plan":"pro","overrides":{"per_minute":{"quota":5}}})"),
            R"(overrides.per_minute: no limit "per_minute" in plan "pro")");
  EXPECT_EQ(Error(R"({"plan":"free","overrides":[]})"),
            "overrides: must be a JSON object of limit names");
  EXPECT_EQ(Error(R"({"plan":"free","overrides":{"daily":5}})"),
            "overrides.daily: must be an object with a quota");
  EXPECT_EQ(Error(R"({"plan":"free","overrides":{"daily":{"quota":5,"x":1}}})"),
            "overrides.daily.x: unknown field");
}

TEST_F(SubjectBodyTest, OverrideQuotaIsAnIntegerInRange) {
  const std::string want = "overrides.daily.quota: must be an integer from 1 to 1000000000000000";
  for (const char* quota :
       {"0", "-1", "1.5", "\"5\"", "1000000000000001", "18446744073709551615"}) {
    EXPECT_EQ(Error(absl::StrCat(R"({"plan":"free","overrides":{"daily":{"quota":)", quota, "}}}")),
              want)
        << quota;
  }
  EXPECT_TRUE(Parse(R"({"plan":"free","overrides":{"daily":{"quota":1000000000000000}}})").ok());
  EXPECT_THAT(Error(R"({"plan":"free","overrides":{"daily":{}}})"),
              StartsWith("overrides.daily.quota: required"));
}

// Numbers beyond a double's range, which nlohmann refuses while parsing: the body is JSON all the
// same, and the member holding the number is what the client has to fix.
const std::string kHugeNumbers[] = {"1e400", "-1e400", "1E+999", std::string(60'000, '9'),
                                    "-" + std::string(400, '1')};

TEST_F(SubjectBodyTest, ANumberOutOfRangeNamesItsField) {
  for (const std::string& n : kHugeNumbers) {
    SCOPED_TRACE(n.substr(0, 20));
    EXPECT_EQ(NumberError(R"({"plan":"free","overrides":{"daily":{"quota":)" + n + "}}}"),
              "overrides.daily.quota: number out of range");
    EXPECT_EQ(NumberError(R"({"plan":"free","overrides":{"daily":{"quota":1,"until":)" + n + "}}}"),
              "overrides.daily.until: number out of range");
    EXPECT_EQ(NumberError(R"({"plan":"free","metadata":{"n":)" + n + "}}"),
              "metadata.n: number out of range");
    EXPECT_EQ(NumberError(R"({"plan":"free","metadata":{"a":[{"b":1},)" + n + "]}}"),
              "metadata.a: number out of range");
    EXPECT_EQ(NumberError(R"({"plan":"free","metadata":{"a b":{"c":)" + n + "}}}"),
              R"(metadata."a b".c: number out of range)");
    for (const char* field : {"plan", "email", "webhook", "webhook_secret", "disabled"}) {
      EXPECT_EQ(NumberError(absl::StrCat(R"({")", field, R"(":)", n, "}")),
                absl::StrCat(field, ": number out of range"));
    }
    EXPECT_EQ(NumberError(n), "body: number out of range");
  }
  // A member given twice before it is still the first fault.
  EXPECT_EQ(Error(R"({"plan":"free","plan":"pro","metadata":{"n":1e400}})"),
            "body: member plan given twice");
}

TEST_F(SubjectBodyTest, TinyAndLongNumbersADoubleHoldsAreNoneOutOfRange) {
  EXPECT_EQ(
      Error(R"({"plan":"free","metadata":{"a":1e-400,"b":0.)" + std::string(30'000, '1') + "}}"),
      "(accepted)");
}

TEST(KeyBodyTest, ANumberOutOfRangeNamesItsField) {
  for (const std::string& n : kHugeNumbers) {
    for (const char* field : {"name", "expires_at", "key_sha256"}) {
      const absl::Status status =
          ParseKeyBody(absl::StrCat(R"({")", field, R"(":)", n, "}"), kNow).status();
      EXPECT_EQ(status.code(), absl::StatusCode::kOutOfRange);
      EXPECT_EQ(status.message(), absl::StrCat(field, ": number out of range")) << n.substr(0, 20);
    }
  }
}

TEST_F(SubjectBodyTest, OverrideUntilIsAFutureRfc3339Time) {
  const std::string want =
      "overrides.daily.until: must be an RFC 3339 time in the future, before year 10000";
  // The last one is 10000-01-01T00:00:00Z in UTC, which RFC 3339 cannot write.
  for (const char* until : {"\"2020-01-01T00:00:00Z\"", "\"2023-11-14T22:13:20Z\"", "\"tomorrow\"",
                            "\"infinite-future\"", "\"2030-01-01\"", "5",
                            "\"9999-12-31T23:00:00-01:00\"", "\"2030-01-01T00:00:00+0530\""}) {
    EXPECT_EQ(Error(absl::StrCat(R"({"plan":"free","overrides":{"daily":{"quota":1,"until":)",
                                 until, "}}}")),
              want)
        << until;
  }
  absl::StatusOr<Subject> s = Parse(
      R"({"plan":"free","overrides":{"daily":{"quota":1,"until":"2030-01-01T01:00:00+01:00"}}})");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->overrides[0].until, absl::FromUnixSeconds(1893456000));
  EXPECT_TRUE(Parse(R"({"plan":"free","overrides":{"daily":{"quota":1,)"
                    R"("until":"9999-12-31T23:59:59Z"}}})")
                  .ok());
}

TEST(KeyBodyTest, EmptyBodyIsAnEmptyRequest) {
  for (const char* body : {"", "  ", "{}"}) {
    absl::StatusOr<KeyRequest> r = ParseKeyBody(body, kNow);
    ASSERT_TRUE(r.ok()) << body;
    EXPECT_EQ(r->name, "");
    EXPECT_FALSE(r->expires_at.has_value());
    EXPECT_FALSE(r->imported_digest.has_value());
  }
}

TEST(KeyBodyTest, FieldsAreRead) {
  const std::string hex = DigestHex(DigestOf("sk_x"));
  absl::StatusOr<KeyRequest> r = ParseKeyBody(
      absl::StrCat(R"({"name":"ci key","expires_at":"2030-01-01T00:00:00Z","key_sha256":")", hex,
                   R"("})"),
      kNow);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->name, "ci key");
  EXPECT_EQ(r->expires_at, absl::FromUnixSeconds(1893456000));
  EXPECT_EQ(r->imported_digest, DigestOf("sk_x"));
}

TEST(KeyBodyTest, ErrorsStartWithTheFieldPath) {
  auto error = [](std::string_view body) {
    return std::string(ParseKeyBody(body, kNow).status().message());
  };
  EXPECT_THAT(error(absl::StrCat(R"({"name":")", std::string(129, 'x'), R"("})")),
              StartsWith("name: must be at most 128"));
  EXPECT_THAT(error(R"({"name":"a\u0001"})"), StartsWith("name: "));
  EXPECT_EQ(error(R"({"expires_at":"2000-01-01T00:00:00Z"})"),
            "expires_at: must be an RFC 3339 time in the future, before year 10000");
  EXPECT_EQ(error(R"({"expires_at":"2030-01-01T00:00:00+0530"})"),
            "expires_at: must be an RFC 3339 time in the future, before year 10000");
  EXPECT_EQ(error(R"({"key_sha256":"abc"})"),
            "key_sha256: must be 64 hex digits (the SHA-256 of the key)");
  EXPECT_EQ(error(R"({"key":"x"})"), "key: unknown field");
  EXPECT_EQ(error("{"), "body: malformed JSON at byte 2");  // 1-based; the end counts as a byte
  EXPECT_EQ(error("{x}"), "body: malformed JSON at byte 2");
}

TEST(RenderTest, SubjectJsonNeverHasTheSecret) {
  Subject s;
  s.id = "alice";
  s.plan = "free";
  s.webhook = "https://example.com/h";
  s.webhook_secret = "whsec_c2VjcmV0";
  s.metadata = R"({"a":1})";
  s.overrides = {{.limit = "daily", .quota = 5, .until = absl::FromUnixSeconds(1893456000)},
                 {.limit = "per_minute", .quota = 2}};
  s.created_at = kNow;
  s.updated_at = kNow + absl::Milliseconds(1500);
  const nlohmann::json j = SubjectJson(s);
  EXPECT_EQ(j.dump().find("c2VjcmV0"), std::string::npos);
  EXPECT_EQ(j["webhook_secret_set"], true);
  EXPECT_EQ(j["email"], nullptr);
  EXPECT_EQ(j["metadata"]["a"], 1);
  EXPECT_EQ(j["overrides"]["daily"]["until"], "2030-01-01T00:00:00.000Z");
  EXPECT_EQ(j["overrides"]["per_minute"]["until"], nullptr);
  EXPECT_EQ(j["created_at"], "2023-11-14T22:13:20.000Z");
  EXPECT_EQ(j["updated_at"], "2023-11-14T22:13:21.500Z");
}

TEST(RenderTest, KeyJsonNeverHasTheDigest) {
  Key k{.id = 0x1a, .subject = "alice", .digest = DigestOf("sk_x"), .prefix = "sk_abcde"};
  k.created_at = kNow;
  nlohmann::json j = KeyJson(k);
  EXPECT_EQ(j["id"], "key_000000000000001a");
  EXPECT_EQ(j["prefix"], "sk_abcde");
  EXPECT_EQ(j["expires_at"], nullptr);
  EXPECT_EQ(j["imported"], false);
  EXPECT_EQ(j.dump().find(DigestHex(k.digest)), std::string::npos);
  k.prefix = "";
  EXPECT_EQ(KeyJson(k)["imported"], true);
}

TEST(Rfc3339Test, RoundTripsToTheMillisecond) {
  const absl::Time t = kNow + absl::Milliseconds(123);
  EXPECT_EQ(*ParseRfc3339(FormatRfc3339(t)), t);
  EXPECT_FALSE(ParseRfc3339("").ok());
  EXPECT_FALSE(ParseRfc3339("10000-01-01T00:00:00Z").ok());
}

TEST(Rfc3339Test, TakesTheDateTimeOfTheGrammar) {
  const absl::Time t2030 = absl::FromUnixSeconds(1893456000);  // 2030-01-01T00:00:00Z
  for (const auto& [text, want] : std::vector<std::pair<std::string, absl::Time>>{
           {"2030-01-01T00:00:00Z", t2030},
           {"2030-01-01t00:00:00z", t2030},  // either case (RFC 3339, 5.6)
           {"2030-01-01T05:30:00+05:30", t2030},
           {"2029-12-31T23:00:00-01:00", t2030},
           {"2030-01-01T00:00:00-00:00", t2030},
           {"2030-01-01T00:00:00.5Z", t2030 + absl::Milliseconds(500)},
           {"2030-01-01T00:00:00.000000001Z", t2030 + absl::Nanoseconds(1)},
           {"2016-12-31T23:59:60Z", absl::FromUnixSeconds(1483228800)},  // a leap second
       }) {
    absl::StatusOr<absl::Time> parsed = ParseRfc3339(text);
    ASSERT_TRUE(parsed.ok()) << text;
    EXPECT_EQ(*parsed, want) << text;
  }
}

TEST(Rfc3339Test, RefusesWhatTheGrammarDoesNotWrite) {
  for (const char* text : {
           "2030-01-01T00:00:00+0530",   // the offset's colon is not optional
           "2030-01-01T00:00:00+05",     // nor its minutes
           "2030-01-01T00:00:00",        // nor the offset
           "2030-01-01 00:00:00Z",       // T, not a space
           "2030-1-01T00:00:00Z",        // two digits each
           "2030-01-01T0:00:00Z",        //
           "2030-01-01T00:00Z",          // seconds are not optional
           "2030-01-01T00:00:00.Z",      // a fraction has digits
           " 2030-01-01T00:00:00Z",      // nothing around it
           "2030-01-01T00:00:00Z ",      //
           "+2030-01-01T00:00:00Z",      // four digits of year, no sign
           "2030-13-01T00:00:00Z",       // fields within their ranges
           "2030-02-30T00:00:00Z",       //
           "2030-01-01T24:00:00Z",       //
           "2030-01-01T00:60:00Z",       //
           "2030-01-01T00:00:61Z",       //
           "2030-01-01T00:00:00+24:00",  //
           "2030-01-01T00:00:00+05:60",  //
       }) {
    EXPECT_FALSE(ParseRfc3339(text).ok()) << text;
  }
}

}  // namespace
}  // namespace sluice::registry
