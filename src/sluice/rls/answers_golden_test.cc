// The Rate Limit Service's answers, whole, as they are today: every kind of answer sluice's own
// mapping gives (an admission, one with a shadow limit that would have denied, one with the store
// failing under allow, a denial, a store failure under deny, each refusal) and the answers to an
// envoy.ratelimit_config request (admitted, denied, store failure). Each golden is the message in
// protobuf's text format (every field, the headers in their order, the bodies byte for byte), and
// an answer must serialize to exactly the bytes the golden does; the admission's hand-written wire
// bytes are compared with them too.
//
// A deliberate change of an answer updates its golden in the same commit.
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/time/time.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "sluice/config/config.h"
#include "sluice/config/ratelimit_file.h"
#include "sluice/rls/mapping.h"
#include "sluice/rls/ratelimit_request.h"
#include "sluice/rls/ratelimit_rules.h"

namespace sluice::rls {
namespace {

std::string Text(const google::protobuf::Message& message) {
  std::string out;
  google::protobuf::TextFormat::PrintToString(message, &out);
  return out;
}

// The golden `text` as a message.
rlsv3::RateLimitResponse Golden(const std::string& text) {
  rlsv3::RateLimitResponse want;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &want)) << text;
  return want;
}

// Whether `got` serializes to the bytes of the golden `want`; both are shown when not.
::testing::AssertionResult IsGolden(const rlsv3::RateLimitResponse& got, const std::string& want) {
  const rlsv3::RateLimitResponse golden = Golden(want);
  if (got.SerializeAsString() == golden.SerializeAsString()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "got:\n" << Text(got) << "golden:\n" << Text(golden);
}

class DecisionAnswersGoldenTest : public ::testing::Test {
 protected:
  DecisionAnswersGoldenTest() {
    per_minute_ = {.name = "per_minute", .quota = 60, .window = *config::ParseWindow("1m")};
    daily_ = {.name = "daily", .quota = 5000, .window = *config::ParseWindow("day")};
    trial_ = {.name = "trial", .quota = 10, .window = *config::ParseWindow("1h"), .shadow = true};
    plan_.name = "free";
  }

  // Admitted: 59 left this minute (42 s to go), 4999 today (a 24-hour day, 36012 s to go).
  Decision Admitted() const {
    Decision d{.plan = &plan_, .allowed = true};
    d.limits.push_back({.limit = &per_minute_,
                        .used = 1,
                        .remaining = 59,
                        .reset_after = 42,
                        .window_start = kNow - absl::Seconds(18),
                        .window_end = kNow + absl::Seconds(42)});
    d.limits.push_back({.limit = &daily_,
                        .used = 1,
                        .remaining = 4999,
                        .reset_after = 36012,
                        .window_start = kMidnight,
                        .window_end = kMidnight + absl::Hours(24)});
    return d;
  }
  Decision Shadowed() const {
    Decision d = Admitted();
    d.limits.push_back(
        {.limit = &trial_, .used = 10, .remaining = 0, .reset_after = 1200, .would_deny = true});
    return d;
  }
  Decision Denied() const {
    Decision d = Admitted();
    d.allowed = false;
    d.retry_after = 42;
    d.limits[0].used = 60;
    d.limits[0].remaining = 0;
    d.limits[0].violated = true;
    return d;
  }
  Decision Failed(bool allowed) const {
    Decision d = Admitted();
    d.allowed = allowed;
    d.degraded = true;
    d.failure = StoreFailure::kTimeout;
    return d;
  }
  static rlsv3::RateLimitResponse Respond(const Decision& d, size_t descriptors) {
    rlsv3::RateLimitResponse res;
    DecisionResponse(d, descriptors, {.subject = "user-1", .plan = "free"}, &res);
    return res;
  }

  static constexpr absl::Time kMidnight = absl::FromUnixSeconds(1796083200);  // 2026-12-01
  static constexpr absl::Time kNow = absl::FromUnixSeconds(1796083200 + 50388);

  Limit per_minute_;
  Limit daily_;
  Limit trial_;
  Plan plan_;
};

// Admitted, two descriptors.
constexpr char kAdmission[] =
    R"pb(overall_code: OK
         statuses {
           code: OK
           current_limit { requests_per_unit: 60 unit: MINUTE name: "per_minute" }
           limit_remaining: 59
           duration_until_reset { seconds: 42 }
         }
         statuses {
           code: OK
           current_limit { requests_per_unit: 60 unit: MINUTE name: "per_minute" }
           limit_remaining: 59
           duration_until_reset { seconds: 42 }
         }
         response_headers_to_add {
           key: "RateLimit-Policy"
           value: "\"per_minute\";q=60;w=60, \"daily\";q=5000;w=86400"
         }
         response_headers_to_add {
           key: "RateLimit"
           value: "\"per_minute\";r=59;t=42, \"daily\";r=4999;t=36012"
         }
         response_headers_to_add { key: "X-RateLimit-Limit" value: "60" }
         response_headers_to_add { key: "X-RateLimit-Remaining" value: "59" }
         response_headers_to_add { key: "X-RateLimit-Reset" value: "42" }
         response_headers_to_add { key: "Sluice-Subject" value: "user-1" }
         response_headers_to_add { key: "Sluice-Plan" value: "free" }
         request_headers_to_add { key: "Sluice-Subject" value: "user-1" }
         request_headers_to_add { key: "Sluice-Plan" value: "free" }
    )pb";

TEST_F(DecisionAnswersGoldenTest, Admission) {
  EXPECT_TRUE(IsGolden(Respond(Admitted(), 2), kAdmission));
}

// Every admission is written by hand, without the message: the same bytes.
TEST_F(DecisionAnswersGoldenTest, AdmissionWireBytes) {
  std::string wire;
  AppendAdmissionWire(Admitted(), 2, {.subject = "user-1", .plan = "free"}, &wire);
  EXPECT_EQ(absl::BytesToHexString(wire),
            absl::BytesToHexString(Golden(kAdmission).SerializeAsString()));
}

TEST_F(DecisionAnswersGoldenTest, AdmissionWithAShadowLimitThatWouldHaveDenied) {
  EXPECT_TRUE(IsGolden(
      Respond(Shadowed(), 1),
      R"pb(overall_code: OK
           statuses {
             code: OK
             current_limit { requests_per_unit: 60 unit: MINUTE name: "per_minute" }
             limit_remaining: 59
             duration_until_reset { seconds: 42 }
           }
           response_headers_to_add { key: "Sluice-Shadow-Denied" value: "trial" }
           response_headers_to_add {
             key: "RateLimit-Policy"
             value: "\"per_minute\";q=60;w=60, \"daily\";q=5000;w=86400, \"trial\";q=10;w=3600"
           }
           response_headers_to_add {
             key: "RateLimit"
             value: "\"per_minute\";r=59;t=42, \"daily\";r=4999;t=36012, \"trial\";r=0;t=1200"
           }
           response_headers_to_add { key: "X-RateLimit-Limit" value: "60" }
           response_headers_to_add { key: "X-RateLimit-Remaining" value: "59" }
           response_headers_to_add { key: "X-RateLimit-Reset" value: "42" }
           response_headers_to_add { key: "Sluice-Subject" value: "user-1" }
           response_headers_to_add { key: "Sluice-Plan" value: "free" }
           request_headers_to_add { key: "Sluice-Subject" value: "user-1" }
           request_headers_to_add { key: "Sluice-Plan" value: "free" }
      )pb"));
}

TEST_F(DecisionAnswersGoldenTest, AdmissionWhileTheStoreFailsUnderAllow) {
  EXPECT_TRUE(
      IsGolden(Respond(Failed(true), 1),
               R"pb(overall_code: OK
                    statuses {
                      code: OK
                      current_limit { requests_per_unit: 60 unit: MINUTE name: "per_minute" }
                      limit_remaining: 59
                      duration_until_reset { seconds: 42 }
                    }
                    response_headers_to_add { key: "Sluice-Degraded" value: "1" }
                    response_headers_to_add {
                      key: "RateLimit-Policy"
                      value: "\"per_minute\";q=60;w=60, \"daily\";q=5000;w=86400"
                    }
                    response_headers_to_add {
                      key: "RateLimit"
                      value: "\"per_minute\";r=59;t=42, \"daily\";r=4999;t=36012"
                    }
                    response_headers_to_add { key: "X-RateLimit-Limit" value: "60" }
                    response_headers_to_add { key: "X-RateLimit-Remaining" value: "59" }
                    response_headers_to_add { key: "X-RateLimit-Reset" value: "42" }
                    response_headers_to_add { key: "Sluice-Subject" value: "user-1" }
                    response_headers_to_add { key: "Sluice-Plan" value: "free" }
                    request_headers_to_add { key: "Sluice-Subject" value: "user-1" }
                    request_headers_to_add { key: "Sluice-Plan" value: "free" }
               )pb"));
}

TEST_F(DecisionAnswersGoldenTest, Denial) {
  EXPECT_TRUE(IsGolden(
      Respond(Denied(), 2),
      R"pb(overall_code: OVER_LIMIT
           statuses {
             code: OVER_LIMIT
             current_limit { requests_per_unit: 60 unit: MINUTE name: "per_minute" }
             duration_until_reset { seconds: 42 }
           }
           statuses {
             code: OVER_LIMIT
             current_limit { requests_per_unit: 60 unit: MINUTE name: "per_minute" }
             duration_until_reset { seconds: 42 }
           }
           response_headers_to_add { key: "Content-Type" value: "application/problem+json" }
           response_headers_to_add {
             key: "RateLimit-Policy"
             value: "\"per_minute\";q=60;w=60, \"daily\";q=5000;w=86400"
           }
           response_headers_to_add {
             key: "RateLimit"
             value: "\"per_minute\";r=0;t=42, \"daily\";r=4999;t=36012"
           }
           response_headers_to_add { key: "X-RateLimit-Limit" value: "60" }
           response_headers_to_add { key: "X-RateLimit-Remaining" value: "0" }
           response_headers_to_add { key: "X-RateLimit-Reset" value: "42" }
           response_headers_to_add { key: "Retry-After" value: "42" }
           response_headers_to_add { key: "Sluice-Subject" value: "user-1" }
           response_headers_to_add { key: "Sluice-Plan" value: "free" }
           raw_body: "{\"type\":\"https://iana.org/assignments/http-problem-types#quota-exceeded"
                     "\","
                     "\"title\":\"Request cannot be satisfied as assigned quota has been exceeded"
                     "\",\"status\":429,"
                     "\"detail\":\"Quota exceeded: per_minute; retry after 42 seconds.\","
                     "\"violated-policies\":[\"per_minute\"]}"
      )pb"));
}

TEST_F(DecisionAnswersGoldenTest, DenialWithAShadowLimitThatWouldHaveDenied) {
  Decision d = Denied();
  d.limits.push_back(
      {.limit = &trial_, .used = 10, .remaining = 0, .reset_after = 1200, .would_deny = true});
  EXPECT_TRUE(IsGolden(
      Respond(d, 1),
      R"pb(overall_code: OVER_LIMIT
           statuses {
             code: OVER_LIMIT
             current_limit { requests_per_unit: 60 unit: MINUTE name: "per_minute" }
             duration_until_reset { seconds: 42 }
           }
           response_headers_to_add { key: "Content-Type" value: "application/problem+json" }
           response_headers_to_add { key: "Sluice-Shadow-Denied" value: "trial" }
           response_headers_to_add {
             key: "RateLimit-Policy"
             value: "\"per_minute\";q=60;w=60, \"daily\";q=5000;w=86400, \"trial\";q=10;w=3600"
           }
           response_headers_to_add {
             key: "RateLimit"
             value: "\"per_minute\";r=0;t=42, \"daily\";r=4999;t=36012, \"trial\";r=0;t=1200"
           }
           response_headers_to_add { key: "X-RateLimit-Limit" value: "60" }
           response_headers_to_add { key: "X-RateLimit-Remaining" value: "0" }
           response_headers_to_add { key: "X-RateLimit-Reset" value: "42" }
           response_headers_to_add { key: "Retry-After" value: "42" }
           response_headers_to_add { key: "Sluice-Subject" value: "user-1" }
           response_headers_to_add { key: "Sluice-Plan" value: "free" }
           raw_body: "{\"type\":\"https://iana.org/assignments/http-problem-types#quota-exceeded"
                     "\","
                     "\"title\":\"Request cannot be satisfied as assigned quota has been exceeded"
                     "\",\"status\":429,"
                     "\"detail\":\"Quota exceeded: per_minute; retry after 42 seconds.\","
                     "\"violated-policies\":[\"per_minute\"]}"
      )pb"));
}

TEST_F(DecisionAnswersGoldenTest, StoreFailureUnderDeny) {
  EXPECT_TRUE(IsGolden(
      Respond(Failed(false), 1),
      R"pb(overall_code: OVER_LIMIT
           statuses {
             code: OVER_LIMIT
             current_limit { requests_per_unit: 60 unit: MINUTE name: "per_minute" }
             duration_until_reset { seconds: 42 }
           }
           response_headers_to_add { key: "Content-Type" value: "application/problem+json" }
           response_headers_to_add { key: "Sluice-Degraded" value: "1" }
           response_headers_to_add {
             key: "RateLimit-Policy"
             value: "\"per_minute\";q=60;w=60, \"daily\";q=5000;w=86400"
           }
           response_headers_to_add {
             key: "RateLimit"
             value: "\"per_minute\";r=59;t=42, \"daily\";r=4999;t=36012"
           }
           response_headers_to_add { key: "X-RateLimit-Limit" value: "60" }
           response_headers_to_add { key: "X-RateLimit-Remaining" value: "59" }
           response_headers_to_add { key: "X-RateLimit-Reset" value: "42" }
           raw_body: "{\"type\":\"about:blank\",\"title\":\"Service Unavailable\",\"status\":503,"
                     "\"detail\":\"the rate limit store is unavailable and on_store_error is deny"
                     "\"}"
      )pb"));
}

TEST(RefusalAnswersGoldenTest, UnknownKey) {
  EXPECT_TRUE(IsGolden(
      RefusalResponse({.status = 401, .title = "Unauthorized", .detail = "unknown API key"}, 2),
      R"pb(overall_code: OVER_LIMIT
           statuses { code: OVER_LIMIT }
           statuses { code: OVER_LIMIT }
           response_headers_to_add { key: "Content-Type" value: "application/problem+json" }
           response_headers_to_add { key: "WWW-Authenticate" value: "Bearer" }
           raw_body: "{\"type\":\"about:blank\",\"title\":\"Unauthorized\",\"status\":401,"
                     "\"detail\":\"unknown API key\"}"
      )pb"));
}

TEST(RefusalAnswersGoldenTest, ExpiredKey) {
  EXPECT_TRUE(IsGolden(
      RefusalResponse({.status = 401, .title = "Unauthorized", .detail = "API key expired"}, 1),
      R"pb(overall_code: OVER_LIMIT
           statuses { code: OVER_LIMIT }
           response_headers_to_add { key: "Content-Type" value: "application/problem+json" }
           response_headers_to_add { key: "WWW-Authenticate" value: "Bearer" }
           raw_body: "{\"type\":\"about:blank\",\"title\":\"Unauthorized\",\"status\":401,"
                     "\"detail\":\"API key expired\"}"
      )pb"));
}

TEST(RefusalAnswersGoldenTest, DisabledSubject) {
  EXPECT_TRUE(IsGolden(
      RefusalResponse({.status = 403,
                       .title = "Forbidden",
                       .detail = "subject \"off-1\" is disabled",
                       .disabled = true},
                      1),
      R"pb(overall_code: OVER_LIMIT
           statuses { code: OVER_LIMIT }
           response_headers_to_add { key: "Content-Type" value: "application/problem+json" }
           raw_body: "{\"type\":\"about:blank\",\"title\":\"Forbidden\",\"status\":403,"
                     "\"detail\":\"subject \\\"off-1\\\" is disabled\"}"
      )pb"));
}

TEST(RefusalAnswersGoldenTest, RegistryLoading) {
  EXPECT_TRUE(IsGolden(
      RefusalResponse({.status = 503,
                       .title = "Service Unavailable",
                       .detail = "the registry of API keys is still loading; retry shortly",
                       .retry_soon = true},
                      1),
      R"pb(overall_code: OVER_LIMIT
           statuses { code: OVER_LIMIT }
           response_headers_to_add { key: "Content-Type" value: "application/problem+json" }
           response_headers_to_add { key: "Retry-After" value: "1" }
           raw_body: "{\"type\":\"about:blank\",\"title\":\"Service Unavailable\",\"status\":503,"
                     "\"detail\":\"the registry of API keys is still loading; retry shortly\"}"
      )pb"));
}

TEST(RefusalAnswersGoldenTest, PlanUnknownHere) {
  EXPECT_TRUE(IsGolden(
      RefusalResponse(
          {.status = 503,
           .title = "Service Unavailable",
           .detail = "subject \"elsewhere-1\" is on plan \"gold\", which this instance's "
                     "configuration does not define"},
          1),
      R"pb(overall_code: OVER_LIMIT
           statuses { code: OVER_LIMIT }
           response_headers_to_add { key: "Content-Type" value: "application/problem+json" }
           raw_body: "{\"type\":\"about:blank\",\"title\":\"Service Unavailable\",\"status\":503,"
                     "\"detail\":\"subject \\\"elsewhere-1\\\" is on plan \\\"gold\\\","
                     " which this instance\'s configuration does not define\"}"
      )pb"));
}

constexpr char kRules[] = R"(
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: path
    value: /beta
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 5, name: beta}
)";

class RuleAnswersGoldenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<config::RateLimitFile> file = config::ParseRateLimitFile(kRules, "r.yaml");
    ASSERT_TRUE(file.ok()) << file.status();
    absl::StatusOr<std::shared_ptr<const RlRuleSet>> set = RlRuleSet::Build({*file});
    ASSERT_TRUE(set.ok()) << set.status();
    rules_ = *set;
    rlsv3::RateLimitRequest req;
    req.set_domain("edge");
    auto add = [&req](const char* key, const char* value) {
      auto* e = req.add_descriptors()->add_entries();
      e->set_key(key);
      e->set_value(value);
    };
    add("remote_address", "10.0.0.1");
    add("path", "/beta");
    add("path", "/elsewhere");
    absl::StatusOr<RlQuery> q = ParseRlRequest(req, *rules_);
    ASSERT_TRUE(q.ok()) << q.status();
    query_ = *std::move(q);
    ASSERT_EQ(query_.parts.size(), 2u);
  }

  // Part `i` decided with `used` after the call, 30 s before its window resets.
  Decision Part(size_t i, bool allowed, int64_t used, bool over) const {
    const Limit& limit = query_.parts[i].plan->limits[0];
    Decision d{.plan = query_.parts[i].plan, .allowed = allowed};
    d.limits.push_back({.limit = &limit,
                        .used = used,
                        .remaining = std::max<int64_t>(limit.quota - used, 0),
                        .reset_after = 30,
                        .violated = !limit.shadow && over,
                        .would_deny = limit.shadow && over});
    if (!allowed) d.retry_after = 30;
    return d;
  }

  std::shared_ptr<const RlRuleSet> rules_;
  RlQuery query_;
};

TEST_F(RuleAnswersGoldenTest, Admission) {
  EXPECT_TRUE(IsGolden(RlResponse(query_, {Part(0, true, 1, false), Part(1, true, 5, false)}),
                       R"pb(overall_code: OK
                            statuses {
                              code: OK
                              current_limit { requests_per_unit: 3 unit: MINUTE }
                              limit_remaining: 2
                              duration_until_reset { seconds: 30 }
                            }
                            statuses {
                              code: OK
                              current_limit { requests_per_unit: 5 unit: HOUR name: "beta" }
                              duration_until_reset { seconds: 30 }
                            }
                            statuses { code: OK }
                            response_headers_to_add {
                              key: "RateLimit-Policy"
                              value: "\"edge.remote_address\";q=3;w=60, \"beta\";q=5;w=3600"
                            }
                            response_headers_to_add {
                              key: "RateLimit"
                              value: "\"edge.remote_address\";r=2;t=30, \"beta\";r=0;t=30"
                            }
                            response_headers_to_add { key: "X-RateLimit-Limit" value: "3" }
                            response_headers_to_add { key: "X-RateLimit-Remaining" value: "2" }
                            response_headers_to_add { key: "X-RateLimit-Reset" value: "30" }
                       )pb"));
}

TEST_F(RuleAnswersGoldenTest, AdmissionWithAShadowRuleOver) {
  EXPECT_TRUE(IsGolden(RlResponse(query_, {Part(0, true, 2, false), Part(1, true, 6, true)}),
                       R"pb(overall_code: OK
                            statuses {
                              code: OK
                              current_limit { requests_per_unit: 3 unit: MINUTE }
                              limit_remaining: 1
                              duration_until_reset { seconds: 30 }
                            }
                            statuses {
                              code: OK
                              current_limit { requests_per_unit: 5 unit: HOUR name: "beta" }
                              duration_until_reset { seconds: 30 }
                            }
                            statuses { code: OK }
                            response_headers_to_add { key: "Sluice-Shadow-Denied" value: "beta" }
                            response_headers_to_add {
                              key: "RateLimit-Policy"
                              value: "\"edge.remote_address\";q=3;w=60, \"beta\";q=5;w=3600"
                            }
                            response_headers_to_add {
                              key: "RateLimit"
                              value: "\"edge.remote_address\";r=1;t=30, \"beta\";r=0;t=30"
                            }
                            response_headers_to_add { key: "X-RateLimit-Limit" value: "3" }
                            response_headers_to_add { key: "X-RateLimit-Remaining" value: "1" }
                            response_headers_to_add { key: "X-RateLimit-Reset" value: "30" }
                       )pb"));
}

TEST_F(RuleAnswersGoldenTest, Denial) {
  EXPECT_TRUE(IsGolden(
      RlResponse(query_, {Part(0, false, 3, true), Part(1, false, 4, false)}),
      R"pb(overall_code: OVER_LIMIT
           statuses {
             code: OVER_LIMIT
             current_limit { requests_per_unit: 3 unit: MINUTE }
             duration_until_reset { seconds: 30 }
           }
           statuses {
             code: OK
             current_limit { requests_per_unit: 5 unit: HOUR name: "beta" }
             limit_remaining: 1
             duration_until_reset { seconds: 30 }
           }
           statuses { code: OK }
           response_headers_to_add { key: "Content-Type" value: "application/problem+json" }
           response_headers_to_add {
             key: "RateLimit-Policy"
             value: "\"edge.remote_address\";q=3;w=60, \"beta\";q=5;w=3600"
           }
           response_headers_to_add {
             key: "RateLimit"
             value: "\"edge.remote_address\";r=0;t=30, \"beta\";r=1;t=30"
           }
           response_headers_to_add { key: "X-RateLimit-Limit" value: "3" }
           response_headers_to_add { key: "X-RateLimit-Remaining" value: "0" }
           response_headers_to_add { key: "X-RateLimit-Reset" value: "30" }
           response_headers_to_add { key: "Retry-After" value: "30" }
           raw_body: "{\"type\":\"https://iana.org/assignments/http-problem-types#quota-exceeded"
                     "\","
                     "\"title\":\"Request cannot be satisfied as assigned quota has been exceeded"
                     "\",\"status\":429,"
                     "\"detail\":\"Quota exceeded: edge.remote_address; retry after 30 seconds.\""
                     ",\"violated-policies\":[\"edge.remote_address\"]}"
      )pb"));
}

TEST_F(RuleAnswersGoldenTest, StoreFailureUnderDeny) {
  std::vector<Decision> decisions = {Part(0, false, 0, false), Part(1, false, 0, false)};
  for (Decision& d : decisions) {
    d.degraded = true;
    d.failure = StoreFailure::kConnection;
  }
  EXPECT_TRUE(IsGolden(
      RlResponse(query_, decisions),
      R"pb(overall_code: OVER_LIMIT
           statuses {
             code: OVER_LIMIT
             current_limit { requests_per_unit: 3 unit: MINUTE }
             duration_until_reset { seconds: 30 }
           }
           statuses {
             code: OVER_LIMIT
             current_limit { requests_per_unit: 5 unit: HOUR name: "beta" }
             duration_until_reset { seconds: 30 }
           }
           statuses { code: OK }
           response_headers_to_add { key: "Content-Type" value: "application/problem+json" }
           response_headers_to_add { key: "Sluice-Degraded" value: "1" }
           response_headers_to_add {
             key: "RateLimit-Policy"
             value: "\"edge.remote_address\";q=3;w=60, \"beta\";q=5;w=3600"
           }
           response_headers_to_add {
             key: "RateLimit"
             value: "\"edge.remote_address\";r=3;t=30, \"beta\";r=5;t=30"
           }
           response_headers_to_add { key: "X-RateLimit-Limit" value: "3" }
           response_headers_to_add { key: "X-RateLimit-Remaining" value: "3" }
           response_headers_to_add { key: "X-RateLimit-Reset" value: "30" }
           raw_body: "{\"type\":\"about:blank\",\"title\":\"Service Unavailable\",\"status\":503,"
                     "\"detail\":\"the rate limit store is unavailable and on_store_error is deny"
                     "\"}"
      )pb"));
}

TEST_F(RuleAnswersGoldenTest, StoreFailureUnderAllow) {
  std::vector<Decision> decisions = {Part(0, true, 0, false), Part(1, true, 0, false)};
  for (Decision& d : decisions) {
    d.degraded = true;
    d.failure = StoreFailure::kConnection;
  }
  EXPECT_TRUE(IsGolden(RlResponse(query_, decisions),
                       R"pb(overall_code: OK
                            statuses {
                              code: OK
                              current_limit { requests_per_unit: 3 unit: MINUTE }
                              limit_remaining: 3
                              duration_until_reset { seconds: 30 }
                            }
                            statuses {
                              code: OK
                              current_limit { requests_per_unit: 5 unit: HOUR name: "beta" }
                              limit_remaining: 5
                              duration_until_reset { seconds: 30 }
                            }
                            statuses { code: OK }
                            response_headers_to_add { key: "Sluice-Degraded" value: "1" }
                            response_headers_to_add {
                              key: "RateLimit-Policy"
                              value: "\"edge.remote_address\";q=3;w=60, \"beta\";q=5;w=3600"
                            }
                            response_headers_to_add {
                              key: "RateLimit"
                              value: "\"edge.remote_address\";r=3;t=30, \"beta\";r=5;t=30"
                            }
                            response_headers_to_add { key: "X-RateLimit-Limit" value: "3" }
                            response_headers_to_add { key: "X-RateLimit-Remaining" value: "3" }
                            response_headers_to_add { key: "X-RateLimit-Reset" value: "30" }
                       )pb"));
}

}  // namespace
}  // namespace sluice::rls
