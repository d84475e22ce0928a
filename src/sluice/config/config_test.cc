#include "sluice/config/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <string_view>
#include <tuple>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace sluice::config {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::StartsWith;

// The smallest valid configuration: one plan with one limit.
constexpr char kPlans[] = R"(
plans:
  free:
    limits:
      - { name: per_minute, quota: 60, window: 1m }
)";

// SHA-256 of "demo-hashed-key".
constexpr char kHash[] = "01bc727c90fb6f9cf915487e84abeb3ba1339efc6ba94f928583977a76bab05e";

// Every field set, none to its default.
constexpr char kFull[] = R"(
server:
  listen: "0.0.0.0:8081"
  admin_listen: "[::1]:9091"
  admin_token: admin-token-1
  threads: 4
  api_key_header: X-Key
  deny_status: 403
  authorize_prefix: /authz
  anonymous_plan: anon
  trusted_proxies: [10.0.0.0/8, "fd00::/8", 192.168.1.1]
store:
  type: redis
  memory: { snapshot_path: /var/lib/sluice/state.snap, snapshot_interval: 30s }
  redis: { url: "redis://10.0.0.5:6380/2", timeout: 50ms, key_prefix: myapp }
on_store_error: deny
plans:
  pro:
    timezone: Europe/Berlin
    limits:
      - { name: per_second, quota: 50, window: 10s }
      - { name: monthly, quota: 2000000, window: month, alert_at: [100, 50, 80] }
  anon:
    limits:
      - { name: hourly, quota: 100, window: 2h }
      - { name: daily, quota: 500, window: day }
keys:
  - { key: k-one, subject: "user:1", plan: pro, email: a@example.com, webhook: "https://e.com/h" }
  - key_sha256: 01bc727c90fb6f9cf915487e84abeb3ba1339efc6ba94f928583977a76bab05e
    subject: user-2
    plan: anon
alerts:
  sinks:
    - { type: webhook, url: "http://127.0.0.1:9999/hooks", secret: whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw }
    - { type: slack, url: "https://hooks.slack.com/services/T/B/X" }
    - type: email
      smtp_url: "smtps://mail.example.com:465"
      from: alerts@example.com
      to: [ops@example.com, b@example.com]
  retry: { max_attempts: 3, first_delay: 500ms, max_delay: 10m }
)";

// kPlans followed by `sections`.
std::string WithPlan(const std::string& sections) { return absl::StrCat(kPlans, sections); }

// A configuration whose only limit is `limit` (a flow map's contents).
std::string WithLimit(const std::string& limit) {
  return absl::StrCat("plans:\n  free:\n    limits:\n      - { ", limit, " }\n");
}

class ConfigTest : public ::testing::Test {
 protected:
  // Parses `yaml` named "test.yaml" in errors.
  static absl::StatusOr<Config> Parse(std::string_view yaml) {
    return ParseConfig(yaml, "test.yaml");
  }
  // The error message for `yaml`, or "OK" when it is valid.
  static std::string ErrorOf(std::string_view yaml) {
    absl::StatusOr<Config> config = Parse(yaml);
    return config.ok() ? "OK" : std::string(config.status().message());
  }
};

// ------------------------------------------------------------------------------------------
// Valid files.

TEST_F(ConfigTest, FullConfigParsesEveryField) {
  absl::StatusOr<Config> config = Parse(kFull);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->path, "test.yaml");

  const ServerConfig& server = config->server;
  EXPECT_EQ(server.listen, "0.0.0.0:8081");
  EXPECT_EQ(server.admin_listen, "[::1]:9091");
  EXPECT_EQ(server.admin_token, "admin-token-1");
  EXPECT_EQ(server.threads, 4);
  EXPECT_EQ(server.api_key_header, "X-Key");
  EXPECT_EQ(server.deny_status, 403);
  EXPECT_EQ(server.authorize_prefix, "/authz");
  EXPECT_EQ(server.anonymous_plan, "anon");
  EXPECT_THAT(server.trusted_proxies, ElementsAre("10.0.0.0/8", "fd00::/8", "192.168.1.1"));

  const StoreConfig& store = config->store;
  EXPECT_EQ(store.type, StoreType::kRedis);
  EXPECT_EQ(store.memory.snapshot_path, "/var/lib/sluice/state.snap");
  EXPECT_EQ(store.memory.snapshot_interval, absl::Seconds(30));
  EXPECT_EQ(store.redis.url, "redis://10.0.0.5:6380/2");
  EXPECT_EQ(store.redis.timeout, absl::Milliseconds(50));
  EXPECT_EQ(store.redis.key_prefix, "myapp");
  EXPECT_EQ(config->on_store_error, OnStoreError::kDeny);

  ASSERT_EQ(config->plans.size(), 2u);
  const PlanConfig& pro = config->plans[0];
  EXPECT_EQ(pro.name, "pro");
  EXPECT_EQ(pro.timezone, "Europe/Berlin");
  ASSERT_EQ(pro.limits.size(), 2u);
  EXPECT_EQ(pro.limits[0].name, "per_second");
  EXPECT_EQ(pro.limits[0].quota, 50);
  EXPECT_EQ(
      pro.limits[0].window,
      (WindowSpec{.kind = WindowSpec::Kind::kFixed, .length = absl::Seconds(10), .text = "10s"}));
  EXPECT_THAT(pro.limits[0].alert_at, IsEmpty());
  EXPECT_EQ(pro.limits[1].name, "monthly");
  EXPECT_EQ(pro.limits[1].quota, 2000000);
  EXPECT_EQ(pro.limits[1].window.kind, WindowSpec::Kind::kMonth);
  EXPECT_THAT(pro.limits[1].alert_at, ElementsAre(50, 80, 100));
  const PlanConfig& anon = config->plans[1];
  EXPECT_EQ(anon.name, "anon");
  EXPECT_EQ(anon.timezone, "UTC");
  ASSERT_EQ(anon.limits.size(), 2u);
  EXPECT_EQ(anon.limits[0].window.length, absl::Hours(2));
  EXPECT_EQ(anon.limits[1].window.kind, WindowSpec::Kind::kDay);
  EXPECT_EQ(anon.limits[1].quota, 500);

  ASSERT_EQ(config->keys.size(), 2u);
  EXPECT_EQ(config->keys[0].key, "k-one");
  EXPECT_EQ(config->keys[0].key_sha256, "");
  EXPECT_EQ(config->keys[0].subject, "user:1");
  EXPECT_EQ(config->keys[0].plan, "pro");
  EXPECT_EQ(config->keys[0].email, "a@example.com");
  EXPECT_EQ(config->keys[0].webhook, "https://e.com/h");
  EXPECT_EQ(config->keys[1].key, "");
  EXPECT_EQ(config->keys[1].key_sha256, kHash);
  EXPECT_EQ(config->keys[1].subject, "user-2");
  EXPECT_EQ(config->keys[1].plan, "anon");
  EXPECT_EQ(config->keys[1].email, "");
  EXPECT_EQ(config->keys[1].webhook, "");

  const AlertsConfig& alerts = config->alerts;
  ASSERT_EQ(alerts.sinks.size(), 3u);
  EXPECT_EQ(alerts.sinks[0].type, SinkConfig::Type::kWebhook);
  EXPECT_EQ(alerts.sinks[0].url, "http://127.0.0.1:9999/hooks");
  EXPECT_EQ(alerts.sinks[0].secret, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
  EXPECT_EQ(alerts.sinks[1].type, SinkConfig::Type::kSlack);
  EXPECT_EQ(alerts.sinks[1].url, "https://hooks.slack.com/services/T/B/X");
  EXPECT_EQ(alerts.sinks[2].type, SinkConfig::Type::kEmail);
  EXPECT_EQ(alerts.sinks[2].smtp_url, "smtps://mail.example.com:465");
  EXPECT_EQ(alerts.sinks[2].from, "alerts@example.com");
  EXPECT_THAT(alerts.sinks[2].to, ElementsAre("ops@example.com", "b@example.com"));
  EXPECT_EQ(alerts.retry.max_attempts, 3);
  EXPECT_EQ(alerts.retry.first_delay, absl::Milliseconds(500));
  EXPECT_EQ(alerts.retry.max_delay, absl::Minutes(10));
}

TEST_F(ConfigTest, OmittedSectionsTakeTheirDefaults) {
  absl::StatusOr<Config> config = Parse(kPlans);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->server.listen, "127.0.0.1:8080");
  EXPECT_EQ(config->server.admin_listen, "127.0.0.1:9090");
  EXPECT_EQ(config->server.grpc_listen, "");
  EXPECT_EQ(config->envoy.descriptor_keys.api_key, "api_key");
  EXPECT_EQ(config->envoy.descriptor_keys.cost, "cost");
  EXPECT_EQ(config->server.admin_token, "");
  EXPECT_EQ(config->server.threads, 0);
  EXPECT_EQ(config->server.api_key_header, "X-API-Key");
  EXPECT_EQ(config->server.deny_status, 429);
  EXPECT_EQ(config->server.authorize_prefix, "/v1/authorize");
  EXPECT_EQ(config->server.anonymous_plan, "");
  EXPECT_EQ(config->server.anonymous_ipv4_prefix, 32);
  EXPECT_EQ(config->server.anonymous_ipv6_prefix, 64);
  EXPECT_THAT(config->server.trusted_proxies, IsEmpty());
  EXPECT_EQ(config->store.type, StoreType::kMemory);
  EXPECT_EQ(config->store.memory.snapshot_path, "");
  EXPECT_EQ(config->store.memory.snapshot_interval, absl::Seconds(1));
  EXPECT_EQ(config->store.redis.url, "redis://127.0.0.1:6379/0");
  EXPECT_EQ(config->store.redis.timeout, absl::Milliseconds(20));
  EXPECT_EQ(config->store.redis.key_prefix, "sl");
  EXPECT_EQ(config->on_store_error, OnStoreError::kAllow);
  ASSERT_EQ(config->plans.size(), 1u);
  EXPECT_EQ(config->plans[0].timezone, "UTC");
  EXPECT_THAT(config->plans[0].limits[0].alert_at, IsEmpty());
  EXPECT_THAT(config->keys, IsEmpty());
  EXPECT_THAT(config->alerts.sinks, IsEmpty());
  EXPECT_EQ(config->alerts.retry.max_attempts, 10);
  EXPECT_EQ(config->alerts.retry.first_delay, absl::Seconds(5));
  EXPECT_EQ(config->alerts.retry.max_delay, absl::Hours(1));
  EXPECT_EQ(config->alerts.lease, absl::Seconds(60));
}

TEST_F(ConfigTest, AlertLeaseIsReadAndBounded) {
  absl::StatusOr<Config> config = ParseConfig(WithPlan("alerts:\n  lease: 5s\n"), "test.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->alerts.lease, absl::Seconds(5));
  EXPECT_EQ(ErrorOf(WithPlan("alerts:\n  lease: 500ms\n")),
            "test.yaml: alerts.lease: must be at least 1s, got 500ms");
}

TEST_F(ConfigTest, AccessLogIsOffByDefault) {
  absl::StatusOr<Config> config = Parse(WithPlan(""));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->server.access_log.mode, AccessLogMode::kOff);
  EXPECT_EQ(config->server.access_log.sample, 1.0);
  EXPECT_EQ(config->server.access_log.max_per_second, 1000);
}

TEST_F(ConfigTest, AccessLogReadsModeSampleAndCap) {
  absl::StatusOr<Config> config =
      Parse(WithPlan("server:\n  access_log: { mode: all, sample: 0.25, max_per_second: 50 }\n"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->server.access_log.mode, AccessLogMode::kAll);
  EXPECT_EQ(config->server.access_log.sample, 0.25);
  EXPECT_EQ(config->server.access_log.max_per_second, 50);
  EXPECT_EQ(Parse(WithPlan("server:\n  access_log: { mode: denied }\n"))->server.access_log.mode,
            AccessLogMode::kDenied);
}

TEST_F(ConfigTest, AccessLogErrorsNameTheField) {
  EXPECT_EQ(ErrorOf(WithPlan("server:\n  access_log: { mode: some }\n")),
            "test.yaml: server.access_log.mode: unknown access log mode \"some\" (want off, "
            "denied or all)");
  EXPECT_EQ(ErrorOf(WithPlan("server:\n  access_log: { sample: 1.5 }\n")),
            "test.yaml: server.access_log.sample: must be a number from 0 to 1, got \"1.5\"");
  EXPECT_EQ(ErrorOf(WithPlan("server:\n  access_log: { sample: nan }\n")),
            "test.yaml: server.access_log.sample: must be a number from 0 to 1, got \"nan\"");
  EXPECT_EQ(ErrorOf(WithPlan("server:\n  access_log: { max_per_second: 0 }\n")),
            "test.yaml: server.access_log.max_per_second: must be between 1 and 1000000, got 0");
  EXPECT_THAT(ErrorOf(WithPlan("server:\n  access_log: { level: 1 }\n")),
              HasSubstr("server.access_log.level: unknown field"));
}

TEST_F(ConfigTest, ShutdownDelayMayBeZeroInAnyUnitAndIsBounded) {
  for (const char* zero : {"0", "0ms", "0s", "0m", "0h"}) {
    absl::StatusOr<Config> config =
        Parse(WithPlan(absl::StrCat("server:\n  shutdown_delay: ", zero, "\n")));
    ASSERT_TRUE(config.ok()) << zero << ": " << config.status();
    EXPECT_EQ(config->server.shutdown_delay, absl::ZeroDuration()) << zero;
  }
  EXPECT_EQ(Parse(WithPlan(""))->server.shutdown_delay, absl::Seconds(5));
  EXPECT_EQ(ErrorOf(WithPlan("server:\n  shutdown_delay: 11m\n")),
            "test.yaml: server.shutdown_delay: must be at most 10m, got 11m");
}

TEST_F(ConfigTest, GrpcTimeoutsHaveDefaultsAndAreRead) {
  absl::StatusOr<Config> defaults = Parse(WithPlan(""));
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->server.grpc_handshake_timeout, absl::Seconds(10));
  EXPECT_EQ(defaults->server.grpc_idle_timeout, absl::Minutes(5));
  EXPECT_EQ(defaults->server.grpc_request_timeout, absl::Seconds(10));
  EXPECT_EQ(defaults->server.grpc_write_timeout, absl::Seconds(10));
  absl::StatusOr<Config> set =
      Parse(WithPlan("server:\n  grpc_handshake_timeout: 3s\n  grpc_idle_timeout: 1h\n"
                     "  grpc_request_timeout: 1500ms\n  grpc_write_timeout: 2m\n"));
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->server.grpc_handshake_timeout, absl::Seconds(3));
  EXPECT_EQ(set->server.grpc_idle_timeout, absl::Hours(1));
  EXPECT_EQ(set->server.grpc_request_timeout, absl::Milliseconds(1500));
  EXPECT_EQ(set->server.grpc_write_timeout, absl::Minutes(2));
}

TEST_F(ConfigTest, GrpcTimeoutsAreBoundedInclusively) {
  // The key, its largest value, and one just past it as written and as the error shows it.
  for (const auto& [name, max, over, over_text] :
       {std::tuple{"grpc_handshake_timeout", "5m", "301s", "5m1s"},
        std::tuple{"grpc_idle_timeout", "24h", "1441m", "24h1m"},
        std::tuple{"grpc_request_timeout", "10m", "601s", "10m1s"},
        std::tuple{"grpc_write_timeout", "10m", "601s", "10m1s"}}) {
    const auto with = [&](const char* value) {
      return WithPlan(absl::StrCat("server:\n  ", name, ": ", value, "\n"));
    };
    EXPECT_TRUE(Parse(with("1s")).ok()) << name;
    EXPECT_TRUE(Parse(with(max)).ok()) << name;
    EXPECT_EQ(ErrorOf(with("999ms")),
              absl::StrCat("test.yaml: server.", name, ": must be at least 1s, got 999ms"));
    EXPECT_EQ(ErrorOf(with(over)), absl::StrCat("test.yaml: server.", name, ": must be at most ",
                                                max, ", got ", over_text));
    EXPECT_EQ(ErrorOf(with("0s")),
              absl::StrCat("test.yaml: server.", name,
                           ": bad duration \"0s\" (must be greater than zero)"));
    EXPECT_EQ(ErrorOf(with("[1s]")),
              absl::StrCat("test.yaml: server.", name, ": expected a duration, got a list"));
  }
}

TEST_F(ConfigTest, AdminTokensAreNamedAndReadOnlyByDefault) {
  absl::StatusOr<Config> config = Parse(WithPlan(
      "server:\n  admin_tokens:\n"
      "    - { name: prometheus, token: \"0123456789abcdef\" }\n"
      "    - { name: billing, token_sha256: "
      "\"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\", access: write }\n"));
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_EQ(config->server.admin_tokens.size(), 2u);
  EXPECT_EQ(config->server.admin_tokens[0].name, "prometheus");
  EXPECT_FALSE(config->server.admin_tokens[0].write);
  EXPECT_TRUE(config->server.admin_tokens[1].write);
  const std::string list = "server:\n  admin_tokens:\n";
  EXPECT_EQ(ErrorOf(WithPlan(list + "    - { name: a, token: short }\n")),
            "test.yaml: server.admin_tokens[0].token: must be 16-512 printable ASCII characters "
            "without spaces");
  EXPECT_EQ(ErrorOf(WithPlan(list + "    - { name: a }\n")),
            "test.yaml: server.admin_tokens[0]: set exactly one of token and token_sha256");
  EXPECT_EQ(ErrorOf(WithPlan(list + "    - { name: admin, token: 0123456789abcdef }\n")),
            "test.yaml: server.admin_tokens[0].name: the name \"admin\" is server.admin_token's "
            "(pick another)");
  EXPECT_EQ(ErrorOf(WithPlan(list + "    - { name: a, token: 0123456789abcdef }\n"
                                    "    - { name: a, token: 0123456789abcdeg }\n")),
            "test.yaml: server.admin_tokens[1].name: duplicate token name \"a\"");
  EXPECT_EQ(ErrorOf(WithPlan(list + "    - { name: a, token: 0123456789abcdef }\n"
                                    "    - { name: b, token: 0123456789abcdef }\n")),
            "test.yaml: server.admin_tokens[1].token: the same token is given twice");
  EXPECT_EQ(
      ErrorOf(WithPlan(list + "    - { name: a, token: 0123456789abcdef, access: all }\n")),
      "test.yaml: server.admin_tokens[0].access: unknown access \"all\" (want read or write)");
}

TEST_F(ConfigTest, RegistryPathIsReadAndDiffersFromTheSnapshot) {
  absl::StatusOr<Config> config =
      Parse(WithPlan("store:\n  memory: { registry_path: /var/lib/sluice/registry.db }\n"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->store.memory.registry_path, "/var/lib/sluice/registry.db");
  EXPECT_EQ(ErrorOf(WithPlan("store:\n  memory: { registry_path: x.db, snapshot_path: x.db }\n")),
            "test.yaml: store.memory.registry_path: must differ from snapshot_path");
}

TEST_F(ConfigTest, TheRegistryIsKeptBesideTheSnapshotWithoutARegistryPath) {
  MemoryStoreConfig memory{.snapshot_path = "/var/lib/sluice/state.snap"};
  EXPECT_EQ(RegistryFile(memory), "/var/lib/sluice/state.snap.registry.db");
  memory.registry_path = "/srv/registry.db";
  EXPECT_EQ(RegistryFile(memory), "/srv/registry.db");
  EXPECT_EQ(RegistryFile({.registry_path = "/srv/registry.db"}), "/srv/registry.db");
  EXPECT_EQ(RegistryFile({}), "");  // nothing persisted: in memory
}

TEST_F(ConfigTest, FieldWrittenWithoutValueTakesItsDefault) {
  absl::StatusOr<Config> config =
      Parse(WithPlan("server:\n  threads:\n  deny_status: ~\nstore:\n"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->server.threads, 0);
  EXPECT_EQ(config->server.deny_status, 429);
}

TEST_F(ConfigTest, AlertPercentagesAreSortedAscending) {
  absl::StatusOr<Config> config =
      Parse(WithLimit("name: daily, quota: 10, window: day, alert_at: [100, 50, 80]"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_THAT(config->plans[0].limits[0].alert_at, ElementsAre(50, 80, 100));
}

TEST_F(ConfigTest, ALimitOrAPlanMayBeShadow) {
  absl::StatusOr<Config> config = Parse(
      "plans:\n"
      "  free:\n"
      "    limits:\n"
      "      - { name: per_minute, quota: 10, window: 1m }\n"
      "      - { name: trial, quota: 3, window: 1m, shadow: true }\n"
      "  beta:\n"
      "    shadow: true\n"
      "    limits:\n"
      "      - { name: daily, quota: 5, window: day, shadow: false }\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_FALSE(config->plans[0].shadow);
  EXPECT_FALSE(config->plans[0].limits[0].shadow);
  EXPECT_TRUE(config->plans[0].limits[1].shadow);
  EXPECT_TRUE(config->FindPlan("beta")->shadow);
}

TEST_F(ConfigTest, APlanMayCapWorkInFlightAndSayWhatExpiredReservationsCharge) {
  absl::StatusOr<Config> config = Parse(
      "plans:\n"
      "  llm:\n"
      "    on_reservation_expiry: release\n"
      "    limits:\n"
      "      - { name: tokens, quota: 10000, window: 1m }\n"
      "      - { name: inflight, quota: 10, window: concurrent }\n"
      "  free:\n"
      "    limits:\n"
      "      - { name: daily, quota: 5, window: day }\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->plans[0].on_reservation_expiry, PlanConfig::OnReservationExpiry::kRelease);
  EXPECT_EQ(config->plans[0].limits[1].window.kind, WindowSpec::Kind::kConcurrent);
  EXPECT_EQ(config->plans[1].on_reservation_expiry, PlanConfig::OnReservationExpiry::kCharge);
}

TEST_F(ConfigTest, AConcurrentLimitHasNoAlertsAndWorksWithEveryStore) {
  EXPECT_EQ(ErrorOf(WithLimit("name: inflight, quota: 5, window: concurrent, alert_at: [80]")),
            "test.yaml: plans.free.limits[0].alert_at: a concurrent limit has no alerts (it "
            "counts requests in flight, not usage)");
  absl::StatusOr<Config> redis = Parse(absl::StrCat(
      "store: { type: redis }\n", WithLimit("name: inflight, quota: 5, window: concurrent")));
  ASSERT_TRUE(redis.ok()) << redis.status();
  EXPECT_EQ(redis->plans[0].limits[0].window.kind, WindowSpec::Kind::kConcurrent);
  EXPECT_EQ(
      ErrorOf("plans:\n  free:\n    on_reservation_expiry: later\n    limits:\n"
              "      - { name: daily, quota: 5, window: day }\n"),
      "test.yaml: plans.free.on_reservation_expiry: unknown reservation expiry policy \"later\" "
      "(want charge or release)");
}

TEST_F(ConfigTest, ALimitMayBeSlidingOrGcraWithABurst) {
  absl::StatusOr<Config> c = Parse(absl::StrCat(
      "plans:\n  free:\n    limits:\n",
      "      - { name: a, quota: 60, window: 1m, algorithm: sliding, alert_at: [80] }\n",
      "      - { name: b, quota: 60, window: 1m, algorithm: gcra, burst: 10 }\n",
      "      - { name: c, quota: 60, window: 1m, algorithm: gcra }\n",
      "      - { name: d, quota: 5000, window: day, algorithm: fixed }\n"));
  ASSERT_TRUE(c.ok()) << c.status();
  const std::vector<LimitConfig>& limits = c->plans[0].limits;
  EXPECT_EQ(limits[0].algorithm, config::Algorithm::kSliding);
  EXPECT_EQ(limits[1].algorithm, config::Algorithm::kGcra);
  EXPECT_EQ(limits[1].burst, 10);
  EXPECT_EQ(limits[2].burst, 0);  // the quota
  EXPECT_EQ(limits[3].algorithm, config::Algorithm::kFixed);
}

TEST_F(ConfigTest, RefusesAnAlgorithmWhereItCannotDecide) {
  const std::string at = "test.yaml: plans.free.limits[0].";
  EXPECT_EQ(ErrorOf(WithLimit("name: a, quota: 5, window: 1m, algorithm: token")),
            at + "algorithm: unknown algorithm \"token\" (want fixed, sliding or gcra)");
  EXPECT_EQ(ErrorOf(WithLimit("name: a, quota: 5, window: day, algorithm: sliding")),
            at + "algorithm: a day window is a calendar quota and stays fixed (sliding and gcra "
                 "need a window of Ns, Nm or Nh)");
  EXPECT_EQ(ErrorOf(WithLimit("name: a, quota: 5, window: month, algorithm: gcra")),
            at + "algorithm: a month window is a calendar quota and stays fixed (sliding and "
                 "gcra need a window of Ns, Nm or Nh)");
  EXPECT_EQ(ErrorOf(WithLimit("name: a, quota: 5, window: credit, algorithm: gcra")),
            at + "algorithm: a credit limit never resets and stays fixed (sliding and gcra need "
                 "a window of Ns, Nm or Nh)");
  EXPECT_EQ(ErrorOf(WithLimit("name: a, quota: 5, window: concurrent, algorithm: sliding")),
            at + "algorithm: a concurrent limit counts requests in flight and has no algorithm "
                 "(leave algorithm out)");
  EXPECT_EQ(ErrorOf(WithLimit("name: a, quota: 5, window: 1m, burst: 2")),
            at + "burst: only a gcra limit has a burst (set algorithm: gcra, or leave burst out)");
  EXPECT_EQ(ErrorOf(WithLimit("name: a, quota: 5, window: 1m, algorithm: gcra, burst: 0")),
            at + "burst: must be between 1 and 1000000000000000, got 0");
  EXPECT_EQ(ErrorOf(WithLimit("name: a, quota: 5, window: 1m, algorithm: gcra, burst: 6")),
            at + "burst: must be between 1 and the quota 5, got 6 (for bursts above the quota, "
                 "write the same rate over a longer window: 10 a second with bursts of 100 is "
                 "quota 600, window 1m, burst 100)");
  EXPECT_EQ(ErrorOf(WithLimit("name: a, quota: 5, window: 1m, algorithm: gcra, alert_at: [80]")),
            at + "alert_at: a gcra limit has no alerts (a rate has no quota to reach)");
  EXPECT_EQ(ErrorOf(WithLimit("name: a, quota: 1000001, window: 1s, algorithm: gcra")),
            at + "quota: a gcra limit admits at most one unit per microsecond: at most 1000000 "
                 "for window 1s, got 1000001");
  EXPECT_EQ(ErrorOf(WithLimit("name: a, quota: 300000, window: 1s, algorithm: gcra")),
            at + "quota: a gcra limit's interval between units (window / quota) must be a whole "
                 "number of microseconds or at least 1ms: 1s / 300000 is not (pick a quota that "
                 "divides 1000000, or at most 1000)");
  EXPECT_EQ(ErrorOf(WithLimit("name: a, quota: 250000, window: 1s, algorithm: gcra")), "OK");
  EXPECT_EQ(ErrorOf(WithLimit("name: a, quota: 7, window: 1m, algorithm: gcra")), "OK");
  EXPECT_EQ(ErrorOf(WithLimit("name: a, quota: 10000000, window: 1m, algorithm: sliding")),
            at + "quota: a sliding limit's quota is at most 9999999 (its two windows' counts share "
                 "one counter), got 10000000");
  EXPECT_EQ(ErrorOf(absl::StrCat("store: { type: redis }\n",
                                 WithLimit("name: a, quota: 5, window: 1m, algorithm: gcra"))),
            "OK");
}

TEST_F(ConfigTest, ShadowIsTrueOrFalse) {
  EXPECT_EQ(ErrorOf(WithLimit("name: daily, quota: 5, window: day, shadow: yes")),
            "test.yaml: plans.free.limits[0].shadow: expected true or false, got \"yes\"");
  EXPECT_EQ(ErrorOf(WithLimit("name: daily, quota: 5, window: day, shadow: [true]")),
            "test.yaml: plans.free.limits[0].shadow: expected true or false, got a list");
}

TEST_F(ConfigTest, FindPlanReturnsThePlanOrNull) {
  absl::StatusOr<Config> config = Parse(kFull);
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_NE(config->FindPlan("anon"), nullptr);
  EXPECT_EQ(config->FindPlan("anon")->name, "anon");
  EXPECT_EQ(config->FindPlan("gold"), nullptr);
}

TEST_F(ConfigTest, ExampleFileIsValidAndHasItsThreePlans) {
  absl::StatusOr<Config> config =
      LoadConfigFile(absl::StrCat(SLUICE_SOURCE_DIR, "/examples/sluice.yaml"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->path, absl::StrCat(SLUICE_SOURCE_DIR, "/examples/sluice.yaml"));
  EXPECT_NE(config->FindPlan("free"), nullptr);
  EXPECT_NE(config->FindPlan("pro"), nullptr);
  EXPECT_NE(config->FindPlan("anonymous"), nullptr);
  EXPECT_EQ(config->server.anonymous_plan, "anonymous");
  EXPECT_EQ(config->keys.size(), 3u);
  EXPECT_EQ(config->keys[2].key_sha256, kHash);
}

// ------------------------------------------------------------------------------------------
// Files and YAML syntax.

TEST_F(ConfigTest, MissingFileIsAnErrorNamingIt) {
  absl::StatusOr<Config> config = LoadConfigFile("/nonexistent/sluice.yaml");
  EXPECT_EQ(config.status(),
            absl::InvalidArgumentError(
                "/nonexistent/sluice.yaml: cannot open: No such file or directory"));
}

TEST_F(ConfigTest, YamlSyntaxErrorGivesLineAndColumn) {
  EXPECT_EQ(ErrorOf("plans:\n  free: [a, b\n"),
            "test.yaml: line 3, column 1: end of sequence flow not found");
}

TEST_F(ConfigTest, ErrorsAreInvalidArgument) {
  EXPECT_EQ(Parse("plans: {}").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ConfigTest, TopLevelMustBeAMap) {
  EXPECT_EQ(ErrorOf("- a\n- b\n"), "test.yaml: expected a map at the top level, got a list");
}

TEST_F(ConfigTest, SecondDocumentIsRejected) {
  EXPECT_EQ(ErrorOf(absl::StrCat(kPlans, "---\n", kPlans)),
            "test.yaml: expected one YAML document, found 2");
}

// ------------------------------------------------------------------------------------------
// Structure: unknown, repeated and mistyped fields.

TEST_F(ConfigTest, UnknownFieldNamesItsPathAndTheExpectedFields) {
  EXPECT_EQ(ErrorOf(WithLimit("name: daily, qouta: 5, window: day")),
            "test.yaml: plans.free.limits[0].qouta: unknown field (expected one of: name, quota, "
            "window, alert_at, shadow, algorithm, burst)");
}

TEST_F(ConfigTest, UnknownTopLevelFieldIsRejected) {
  EXPECT_EQ(ErrorOf(WithPlan("serv: {}\n")),
            "test.yaml: serv: unknown field (expected one of: server, store, on_store_error, "
            "plans, keys, alerts, envoy)");
}

TEST_F(ConfigTest, RepeatedFieldIsRejected) {
  EXPECT_EQ(ErrorOf(WithPlan("server:\n  threads: 1\n  threads: 2\n")),
            "test.yaml: server.threads: duplicate field");
}

TEST_F(ConfigTest, MapWhereStringExpectedIsRejected) {
  EXPECT_EQ(ErrorOf(WithPlan("server: {listen: {host: a}}\n")),
            "test.yaml: server.listen: expected a string, got a map");
}

TEST_F(ConfigTest, ScalarWhereListExpectedIsRejectedWithoutQuotingIt) {
  EXPECT_EQ(ErrorOf(WithPlan("keys: my-secret-key\n")),
            "test.yaml: keys: expected a list, got a scalar");
}

// ------------------------------------------------------------------------------------------
// Plans and limits.

TEST_F(ConfigTest, NoPlansIsRejected) {
  EXPECT_EQ(ErrorOf("server: {threads: 1}\n"), "test.yaml: plans: at least one plan is required");
  EXPECT_EQ(ErrorOf(""), "test.yaml: plans: at least one plan is required");
  EXPECT_EQ(ErrorOf("plans: {}\n"), "test.yaml: plans: at least one plan is required");
}

TEST_F(ConfigTest, DuplicatePlanNameIsRejected) {
  EXPECT_EQ(
      ErrorOf(absl::StrCat(kPlans, "  free:\n    limits: [{name: a, quota: 1, window: 1s}]\n")),
      "test.yaml: plans.free: duplicate plan name \"free\"");
}

TEST_F(ConfigTest, BadPlanNameIsRejected) {
  EXPECT_EQ(ErrorOf("plans:\n  my plan:\n    limits: [{name: a, quota: 1, window: 1s}]\n"),
            "test.yaml: plans.my plan: bad plan name \"my plan\" (want 1-64 characters of A-Z "
            "a-z 0-9 _ . -)");
}

TEST_F(ConfigTest, PlanWithoutLimitsIsRejected) {
  EXPECT_EQ(ErrorOf("plans:\n  free:\n    limits: []\n"),
            "test.yaml: plans.free.limits: at least one limit is required");
  EXPECT_EQ(ErrorOf("plans:\n  free:\n    timezone: UTC\n"),
            "test.yaml: plans.free.limits: at least one limit is required");
}

TEST_F(ConfigTest, DuplicateLimitNameIsRejected) {
  EXPECT_EQ(ErrorOf("plans:\n  free:\n    limits:\n"
                    "      - {name: daily, quota: 1, window: day}\n"
                    "      - {name: daily, quota: 2, window: month}\n"),
            "test.yaml: plans.free.limits[1].name: duplicate limit name \"daily\"");
}

TEST_F(ConfigTest, BadLimitNameIsRejected) {
  EXPECT_EQ(ErrorOf(WithLimit("name: \"per minute\", quota: 1, window: 1m")),
            "test.yaml: plans.free.limits[0].name: bad limit name \"per minute\" (want 1-64 "
            "characters of A-Z a-z 0-9 _ . -)");
}

TEST_F(ConfigTest, MissingQuotaIsRejected) {
  EXPECT_EQ(ErrorOf(WithLimit("name: daily, window: day")),
            "test.yaml: plans.free.limits[0].quota: missing required field");
}

TEST_F(ConfigTest, QuotaZeroIsRejectedOutsideACreditLimit) {
  EXPECT_EQ(ErrorOf(WithLimit("name: daily, quota: 0, window: day")),
            "test.yaml: plans.free.limits[0].quota: must be at least 1 (0 only for a limit with "
            "window: credit)");
}

TEST_F(ConfigTest, ACreditLimitMayStartWithNothingGranted) {
  absl::StatusOr<Config> config =
      Parse(WithLimit("name: credits, quota: 0, window: credit, alert_at: [80, 100]"));
  ASSERT_TRUE(config.ok()) << config.status();
  const LimitConfig& limit = config->plans[0].limits[0];
  EXPECT_EQ(limit.quota, 0);
  EXPECT_EQ(limit.window, (WindowSpec{.kind = WindowSpec::Kind::kCredit, .text = "credit"}));
}

TEST_F(ConfigTest, ACreditLimitsQuotaIsBoundedLikeAnyOther) {
  EXPECT_EQ(ErrorOf(WithLimit("name: credits, quota: -1, window: credit")),
            "test.yaml: plans.free.limits[0].quota: must be between 0 and 1000000000000000, got "
            "-1");
}

TEST_F(ConfigTest, QuotaAboveOneQuadrillionIsRejected) {
  EXPECT_EQ(ErrorOf(WithLimit("name: daily, quota: 1000000000000001, window: day")),
            "test.yaml: plans.free.limits[0].quota: must be between 1 and 1000000000000000, got "
            "1000000000000001");
}

TEST_F(ConfigTest, NonIntegerQuotaIsRejected) {
  EXPECT_EQ(ErrorOf(WithLimit("name: daily, quota: abc, window: day")),
            "test.yaml: plans.free.limits[0].quota: expected an integer, got \"abc\"");
  EXPECT_EQ(ErrorOf(WithLimit("name: daily, quota: 1.5, window: day")),
            "test.yaml: plans.free.limits[0].quota: expected an integer, got \"1.5\"");
}

TEST_F(ConfigTest, BadWindowIsRejected) {
  EXPECT_EQ(
      ErrorOf(WithLimit("name: daily, quota: 1, window: 5x")),
      "test.yaml: plans.free.limits[0].window: bad window \"5x\" (want Ns, Nm, Nh, day, week, "
      "month, year, concurrent or credit)");
}

TEST_F(ConfigTest, UnknownTimeZoneIsRejected) {
  EXPECT_EQ(ErrorOf("plans:\n  free:\n    timezone: Mars/Base\n"
                    "    limits: [{name: a, quota: 1, window: day}]\n"),
            "test.yaml: plans.free.timezone: unknown time zone \"Mars/Base\"");
}

TEST_F(ConfigTest, TimeZoneThatIsAPathIsRejected) {
  EXPECT_EQ(ErrorOf("plans:\n  free:\n    timezone: /etc/localtime\n"
                    "    limits: [{name: a, quota: 1, window: day}]\n"),
            "test.yaml: plans.free.timezone: unknown time zone \"/etc/localtime\"");
}

TEST_F(ConfigTest, AlertAtZeroIsRejected) {
  EXPECT_EQ(ErrorOf(WithLimit("name: daily, quota: 1, window: day, alert_at: [0]")),
            "test.yaml: plans.free.limits[0].alert_at[0]: must be between 1 and 100, got 0");
}

TEST_F(ConfigTest, AlertAtAbove100IsRejected) {
  EXPECT_EQ(ErrorOf(WithLimit("name: daily, quota: 1, window: day, alert_at: [80, 101]")),
            "test.yaml: plans.free.limits[0].alert_at[1]: must be between 1 and 100, got 101");
}

TEST_F(ConfigTest, DuplicateAlertAtIsRejected) {
  EXPECT_EQ(ErrorOf(WithLimit("name: daily, quota: 1, window: day, alert_at: [80, 90, 80]")),
            "test.yaml: plans.free.limits[0].alert_at[2]: duplicate percentage 80");
}

TEST_F(ConfigTest, MoreThan16AlertPercentagesAreRejected) {
  EXPECT_EQ(
      ErrorOf(WithLimit("name: d, quota: 1, window: day, "
                        "alert_at: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17]")),
      "test.yaml: plans.free.limits[0].alert_at: at most 16 percentages, got 17");
}

// ------------------------------------------------------------------------------------------
// Durations and windows.

TEST(ParseDurationTest, AcceptsAnIntegerAndAUnit) {
  EXPECT_EQ(*ParseDuration("20ms"), absl::Milliseconds(20));
  EXPECT_EQ(*ParseDuration("1s"), absl::Seconds(1));
  EXPECT_EQ(*ParseDuration("5m"), absl::Minutes(5));
  EXPECT_EQ(*ParseDuration("1h"), absl::Hours(1));
}

TEST(ParseDurationTest, RejectsMissingUnitsAndGarbage) {
  for (const char* text : {"", "5", "s", "-5s", "1.5s", "5 s", " 5s", "5d", "5sec", "1h30m"}) {
    EXPECT_EQ(ParseDuration(text).status(),
              absl::InvalidArgumentError(absl::StrCat(
                  "bad duration \"", text,
                  "\" (want a whole number and a unit: ms, s, m or h, e.g. 20ms, 5m)")))
        << text;
  }
}

TEST(ParseDurationTest, RejectsZero) {
  EXPECT_EQ(ParseDuration("0s").status(),
            absl::InvalidArgumentError("bad duration \"0s\" (must be greater than zero)"));
}

TEST(ParseDurationTest, RejectsOverflow) {
  EXPECT_EQ(ParseDuration("99999999999999999999h").status(),
            absl::InvalidArgumentError("bad duration \"99999999999999999999h\" (too large)"));
  EXPECT_EQ(ParseDuration("9000000000000000h").status(),
            absl::InvalidArgumentError("bad duration \"9000000000000000h\" (too large)"));
}

TEST_F(ConfigTest, BadDurationInConfigNamesItsPath) {
  EXPECT_EQ(ErrorOf(WithPlan("store:\n  memory: {snapshot_interval: 5x}\n")),
            "test.yaml: store.memory.snapshot_interval: bad duration \"5x\" (want a whole number "
            "and a unit: ms, s, m or h, e.g. 20ms, 5m)");
}

TEST_F(ConfigTest, ZeroDurationInConfigIsRejected) {
  EXPECT_EQ(ErrorOf(WithPlan("store:\n  redis: {timeout: 0ms}\n")),
            "test.yaml: store.redis.timeout: bad duration \"0ms\" (must be greater than zero)");
}

TEST(ParseWindowTest, FixedWindowsKeepTheirTextAndLength) {
  EXPECT_EQ(
      *ParseWindow("1s"),
      (WindowSpec{.kind = WindowSpec::Kind::kFixed, .length = absl::Seconds(1), .text = "1s"}));
  EXPECT_EQ(
      *ParseWindow("5m"),
      (WindowSpec{.kind = WindowSpec::Kind::kFixed, .length = absl::Minutes(5), .text = "5m"}));
  EXPECT_EQ(
      *ParseWindow("24h"),
      (WindowSpec{.kind = WindowSpec::Kind::kFixed, .length = absl::Hours(24), .text = "24h"}));
}

TEST(ParseWindowTest, AFixedWindowIsAtMostThirtyOneDays) {
  for (const char* text : {"744h", "44640m", "2678400s"}) {
    absl::StatusOr<WindowSpec> w = ParseWindow(text);
    ASSERT_TRUE(w.ok()) << text;
    EXPECT_EQ(w->length, absl::Hours(24 * 31)) << text;
  }
  for (const char* text : {"745h", "44641m", "2678401s", "1000000h"}) {
    EXPECT_EQ(ParseWindow(text).status(),
              absl::InvalidArgumentError(absl::StrCat(
                  "bad window \"", text,
                  "\": a fixed window is at most 31 days (744h); use month for a monthly quota")))
        << text;
  }
}

TEST(ParseWindowTest, DayWeekMonthAndYearAreCalendarPeriods) {
  EXPECT_EQ(*ParseWindow("day"), (WindowSpec{.kind = WindowSpec::Kind::kDay, .text = "day"}));
  EXPECT_EQ(*ParseWindow("week"), (WindowSpec{.kind = WindowSpec::Kind::kWeek, .text = "week"}));
  EXPECT_EQ(*ParseWindow("month"), (WindowSpec{.kind = WindowSpec::Kind::kMonth, .text = "month"}));
  EXPECT_EQ(*ParseWindow("year"), (WindowSpec{.kind = WindowSpec::Kind::kYear, .text = "year"}));
}

TEST_F(ConfigTest, YearAndWeekWindowsAreReadFromTheFile) {
  absl::StatusOr<Config> config = Parse(
      "plans:\n  free:\n    timezone: Europe/Paris\n    limits:\n"
      "      - { name: weekly, quota: 700, window: week }\n"
      "      - { name: yearly, quota: 36500, window: year, alert_at: [90] }\n");
  ASSERT_TRUE(config.ok()) << config.status();
  const PlanConfig& plan = config->plans[0];
  ASSERT_EQ(plan.limits.size(), 2u);
  EXPECT_EQ(plan.limits[0].window, (WindowSpec{.kind = WindowSpec::Kind::kWeek, .text = "week"}));
  EXPECT_EQ(plan.limits[1].window, (WindowSpec{.kind = WindowSpec::Kind::kYear, .text = "year"}));
}

TEST(ParseWindowTest, RejectsAnythingElse) {
  for (const char* text : {"", "0m", "5x", "1d", "Day", "1ms", "m", "-1m", "1.5h", "1 m", "Year",
                           "years", "1y", "1w", "weekly", "week ", "2week"}) {
    EXPECT_EQ(ParseWindow(text).status(),
              absl::InvalidArgumentError(absl::StrCat(
                  "bad window \"", text,
                  "\" (want Ns, Nm, Nh, day, week, month, year, concurrent or credit)")))
        << text;
  }
}

// ------------------------------------------------------------------------------------------
// Keys.

TEST_F(ConfigTest, KeyWithUnknownPlanIsRejected) {
  EXPECT_EQ(ErrorOf(WithPlan("keys:\n  - {key: k1, subject: u1, plan: gold}\n")),
            "test.yaml: keys[0].plan: unknown plan \"gold\"");
}

TEST_F(ConfigTest, DuplicateKeyNamesTheEarlierEntryButNotTheKey) {
  const std::string error =
      ErrorOf(WithPlan("keys:\n"
                       "  - {key: sekrit-key-123, subject: u1, plan: free}\n"
                       "  - {key: sekrit-key-123, subject: u2, plan: free}\n"));
  EXPECT_EQ(error, "test.yaml: keys[1].key: duplicate key (same as keys[0])");
  EXPECT_THAT(error, Not(HasSubstr("sekrit")));
}

TEST_F(ConfigTest, DuplicateKeySha256IsRejected) {
  EXPECT_EQ(
      ErrorOf(WithPlan(absl::StrCat("keys:\n  - {key: other, subject: u0, plan: free}\n",
                                    "  - {key_sha256: ", kHash, ", subject: u1, plan: free}\n",
                                    "  - {key_sha256: ", kHash, ", subject: u2, plan: free}\n"))),
      "test.yaml: keys[2].key_sha256: duplicate key (same as keys[1])");
}

TEST_F(ConfigTest, KeyNeedsExactlyOneOfKeyAndKeySha256) {
  EXPECT_EQ(ErrorOf(WithPlan(absl::StrCat("keys:\n  - {key: k1, key_sha256: ", kHash,
                                          ", subject: u1, plan: free}\n"))),
            "test.yaml: keys[0]: set exactly one of key and key_sha256");
  EXPECT_EQ(ErrorOf(WithPlan("keys:\n  - {subject: u1, plan: free}\n")),
            "test.yaml: keys[0]: set exactly one of key and key_sha256");
}

TEST_F(ConfigTest, KeyWithSpacesIsRejectedWithoutQuotingIt) {
  EXPECT_EQ(ErrorOf(WithPlan("keys:\n  - {key: \"my key\", subject: u1, plan: free}\n")),
            "test.yaml: keys[0].key: must be 1-512 printable ASCII characters without spaces");
}

TEST_F(ConfigTest, BadKeySha256IsRejected) {
  EXPECT_EQ(
      ErrorOf(WithPlan("keys:\n  - {key_sha256: ABCDEF, subject: u1, plan: free}\n")),
      "test.yaml: keys[0].key_sha256: must be 64 lowercase hex characters (a SHA-256 digest)");
}

TEST_F(ConfigTest, BadSubjectIsRejected) {
  EXPECT_EQ(ErrorOf(WithPlan("keys:\n  - {key: k1, subject: \"user 1\", plan: free}\n")),
            "test.yaml: keys[0].subject: bad subject \"user 1\" (want 1-200 bytes of A-Z a-z 0-9 . "
            "_ : @ / + = -)");
}

TEST_F(ConfigTest, RuleSubjectsAreReserved) {
  EXPECT_EQ(ErrorOf(WithPlan("keys:\n  - {key: k1, subject: \"rl:edge/ip=1\", plan: free}\n")),
            "test.yaml: keys[0].subject: subjects beginning \"rl:\" are reserved (they hold "
            "envoy.ratelimit_config's counters)");
}

TEST_F(ConfigTest, KeyWithoutSubjectIsRejected) {
  EXPECT_EQ(ErrorOf(WithPlan("keys:\n  - {key: k1, plan: free}\n")),
            "test.yaml: keys[0].subject: missing required field");
}

TEST_F(ConfigTest, BadKeyEmailIsRejected) {
  EXPECT_EQ(ErrorOf(WithPlan("keys:\n  - {key: k1, subject: u1, plan: free, email: a@b@c}\n")),
            "test.yaml: keys[0].email: bad email address \"a@b@c\" (want name@domain: exactly one "
            "@ with text on both sides, visible ASCII, none of <>,;\"\\()[])");
  // Addresses the email sink would skip without a word are refused here instead.
  for (const char* email : {"\"<a@b.c>\"", "\"a,b@c.d\"", "\"a(x)@b.c\"", "\"\u00e9@b.c\""}) {
    EXPECT_THAT(ErrorOf(WithPlan(absl::StrCat(
                    "keys:\n  - {key: k1, subject: u1, plan: free, email: ", email, "}\n"))),
                HasSubstr("keys[0].email: bad email address"))
        << email;
  }
}

TEST_F(ConfigTest, KeyWebhookMustBeHttp) {
  EXPECT_EQ(ErrorOf(WithPlan("keys:\n  - {key: k1, subject: u1, plan: free, webhook: "
                             "\"ftp://x\"}\n")),
            "test.yaml: keys[0].webhook: must be an http:// or https:// URL");
}

TEST_F(ConfigTest, KeyWebhookSecretIsReadAndChecked) {
  absl::StatusOr<Config> config = ParseConfig(
      WithPlan("keys:\n  - {key: k1, subject: u1, plan: free, webhook: \"https://e.com/h\", "
               "webhook_secret: whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw}\n"),
      "test.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->keys[0].webhook_secret, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
  EXPECT_EQ(ErrorOf(WithPlan("keys:\n  - {key: k1, subject: u1, plan: free, webhook: "
                             "\"https://e.com/h\", webhook_secret: s3cr3t}\n")),
            "test.yaml: keys[0].webhook_secret: must be \"whsec_\" followed by base64 (Standard "
            "Webhooks)");
  EXPECT_EQ(ErrorOf(WithPlan("keys:\n  - {key: k1, subject: u1, plan: free, "
                             "webhook_secret: whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw}\n")),
            "test.yaml: keys[0].webhook_secret: set without a webhook to sign");
}

// ------------------------------------------------------------------------------------------
// Server.

TEST_F(ConfigTest, AnonymousPlanMustNameAPlan) {
  EXPECT_EQ(ErrorOf(WithPlan("server: {anonymous_plan: anon}\n")),
            "test.yaml: server.anonymous_plan: unknown plan \"anon\"");
}

TEST_F(ConfigTest, BadTrustedProxyCidrIsRejected) {
  EXPECT_EQ(ErrorOf(WithPlan("server: {trusted_proxies: [10.0.0.0/8, 10.0.0.0/33]}\n")),
            "test.yaml: server.trusted_proxies[1]: bad CIDR \"10.0.0.0/33\" (want an IPv4 or IPv6 "
            "address or CIDR, e.g. 10.0.0.0/8 or fd00::/8)");
}

TEST_F(ConfigTest, TrustedProxiesAcceptAddressesAndCidrsOfBothFamilies) {
  EXPECT_EQ(ErrorOf(WithPlan("server:\n  trusted_proxies: [127.0.0.1, 0.0.0.0/0, \"::1\", "
                             "\"2001:db8::/32\", \"::/0\"]\n")),
            "OK");
  for (const char* bad : {"10.0.0/8", "::1/129", "10.0.0.0/", "host.example", "10.0.0.0/x"}) {
    EXPECT_THAT(ErrorOf(WithPlan(absl::StrCat("server: {trusted_proxies: [\"", bad, "\"]}\n"))),
                HasSubstr("bad CIDR"))
        << bad;
  }
}

TEST_F(ConfigTest, BadListenAddressIsRejected) {
  EXPECT_EQ(ErrorOf(WithPlan("server: {listen: \"127.0.0.1:70000\"}\n")),
            "test.yaml: server.listen: bad address \"127.0.0.1:70000\" (want ip:port, e.g. "
            "127.0.0.1:8080 or [::1]:8080, port 1-65535)");
  for (const char* bad : {"127.0.0.1", "127.0.0.1:0", ":8080", "::1:8080", "[::1]8080",
                          "localhost:8080", "[127.0.0.1]:80", "1.2.3.4:80x"}) {
    EXPECT_THAT(ErrorOf(WithPlan(absl::StrCat("server: {listen: \"", bad, "\"}\n"))),
                HasSubstr("bad address"))
        << bad;
  }
}

TEST_F(ConfigTest, ListenAcceptsIpv6InBrackets) {
  absl::StatusOr<Config> config = Parse(WithPlan("server: {listen: \"[::]:8080\"}\n"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->server.listen, "[::]:8080");
}

TEST_F(ConfigTest, AdminListenMustDifferFromListen) {
  EXPECT_EQ(ErrorOf(WithPlan("server: {admin_listen: \"127.0.0.1:8080\"}\n")),
            "test.yaml: server.admin_listen: must differ from server.listen");
}

TEST_F(ConfigTest, GrpcListenIsAnAddressOfItsOwn) {
  absl::StatusOr<Config> config = Parse(WithPlan("server: {grpc_listen: \"127.0.0.1:8081\"}\n"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->server.grpc_listen, "127.0.0.1:8081");
  EXPECT_THAT(ErrorOf(WithPlan("server: {grpc_listen: \"localhost:8081\"}\n")),
              HasSubstr("test.yaml: server.grpc_listen: bad address"));
  EXPECT_EQ(ErrorOf(WithPlan("server: {grpc_listen: \"127.0.0.1:9090\"}\n")),
            "test.yaml: server.grpc_listen: must differ from server.listen and "
            "server.admin_listen");
}

TEST_F(ConfigTest, EnvoyDescriptorKeysAreReadAndMustBeDistinct) {
  absl::StatusOr<Config> config =
      Parse(WithPlan("envoy: {descriptor_keys: {api_key: x-api-key, cost: weight}}\n"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->envoy.descriptor_keys.api_key, "x-api-key");
  EXPECT_EQ(config->envoy.descriptor_keys.subject, "subject");
  EXPECT_EQ(config->envoy.descriptor_keys.cost, "weight");
  EXPECT_EQ(ErrorOf(WithPlan("envoy: {descriptor_keys: {plan: subject}}\n")),
            "test.yaml: envoy.descriptor_keys.plan: \"subject\" is already another descriptor key");
  EXPECT_THAT(ErrorOf(WithPlan("envoy: {descriptor_keys: {cost: \"\"}}\n")),
              HasSubstr("envoy.descriptor_keys.cost: must be 1-128"));
  EXPECT_THAT(ErrorOf(WithPlan("envoy: {keys: {}}\n")), HasSubstr("envoy"));
}

TEST_F(ConfigTest, EnvoyReportDescriptorKeyDefaultsToReportAndIsDistinct) {
  absl::StatusOr<Config> none = Parse(WithPlan(""));
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->envoy.descriptor_keys.report, "report");
  absl::StatusOr<Config> config = Parse(WithPlan("envoy: {descriptor_keys: {report: spent}}\n"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->envoy.descriptor_keys.report, "spent");
  EXPECT_EQ(ErrorOf(WithPlan("envoy: {descriptor_keys: {report: cost}}\n")),
            "test.yaml: envoy.descriptor_keys.report: \"cost\" is already another descriptor key");
}

TEST_F(ConfigTest, EnvoyRatelimitReportKeyIsOffUnlessSet) {
  absl::StatusOr<Config> none = Parse(WithPlan(""));
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->envoy.ratelimit_report_key, "");
  absl::StatusOr<Config> on = Parse(WithPlan("envoy: {ratelimit_report_key: sluice_report}\n"));
  ASSERT_TRUE(on.ok()) << on.status();
  EXPECT_EQ(on->envoy.ratelimit_report_key, "sluice_report");
  EXPECT_EQ(ErrorOf(WithPlan("envoy: {ratelimit_report_key: \"a b\"}\n")),
            "test.yaml: envoy.ratelimit_report_key: must be 0-128 printable ASCII characters "
            "without spaces");
}

TEST_F(ConfigTest, EnvoyRatelimitConfigIsAPathKeptAsWritten) {
  absl::StatusOr<Config> config = Parse(WithPlan("envoy: {ratelimit_config: rl/limits}\n"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->envoy.ratelimit_config, "rl/limits");
  absl::StatusOr<Config> none = Parse(WithPlan(""));
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->envoy.ratelimit_config, "");
  EXPECT_EQ(ErrorOf(WithPlan("envoy: {ratelimit_config: " + std::string(4097, 'p') + "}\n")),
            "test.yaml: envoy.ratelimit_config: must be a path of at most 4096 bytes");
  EXPECT_THAT(ErrorOf(WithPlan("envoy: {ratelimit_config: [a]}\n")),
              HasSubstr("envoy.ratelimit_config: expected a string"));
}

TEST_F(ConfigTest, EnvoyResponseDynamicMetadataIsOffUnlessAsked) {
  absl::StatusOr<Config> none = Parse(WithPlan(""));
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->envoy.response_dynamic_metadata);
  absl::StatusOr<Config> on = Parse(WithPlan("envoy: {response_dynamic_metadata: true}\n"));
  ASSERT_TRUE(on.ok()) << on.status();
  EXPECT_TRUE(on->envoy.response_dynamic_metadata);
  EXPECT_THAT(ErrorOf(WithPlan("envoy: {response_dynamic_metadata: sometimes}\n")),
              HasSubstr("envoy.response_dynamic_metadata"));
}

TEST_F(ConfigTest, DenyStatusMustBe4xx) {
  EXPECT_EQ(ErrorOf(WithPlan("server: {deny_status: 500}\n")),
            "test.yaml: server.deny_status: must be between 400 and 499, got 500");
}

TEST_F(ConfigTest, AnonymousPrefixesAreRead) {
  absl::StatusOr<Config> config =
      Parse(WithPlan("server: {anonymous_ipv4_prefix: 24, anonymous_ipv6_prefix: 48}\n"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->server.anonymous_ipv4_prefix, 24);
  EXPECT_EQ(config->server.anonymous_ipv6_prefix, 48);
  for (const char* bounds : {"{anonymous_ipv4_prefix: 1, anonymous_ipv6_prefix: 1}",
                             "{anonymous_ipv4_prefix: 32, anonymous_ipv6_prefix: 128}"}) {
    EXPECT_TRUE(Parse(WithPlan(absl::StrCat("server: ", bounds, "\n"))).ok()) << bounds;
  }
}

TEST_F(ConfigTest, AnonymousPrefixesOutsideTheirFamilysBitsAreRefusedNamingTheKey) {
  EXPECT_EQ(ErrorOf(WithPlan("server: {anonymous_ipv4_prefix: 33}\n")),
            "test.yaml: server.anonymous_ipv4_prefix: must be between 1 and 32, got 33");
  EXPECT_EQ(ErrorOf(WithPlan("server: {anonymous_ipv4_prefix: 0}\n")),
            "test.yaml: server.anonymous_ipv4_prefix: must be between 1 and 32, got 0");
  EXPECT_EQ(ErrorOf(WithPlan("server: {anonymous_ipv6_prefix: 129}\n")),
            "test.yaml: server.anonymous_ipv6_prefix: must be between 1 and 128, got 129");
  EXPECT_EQ(ErrorOf(WithPlan("server: {anonymous_ipv6_prefix: 0}\n")),
            "test.yaml: server.anonymous_ipv6_prefix: must be between 1 and 128, got 0");
  EXPECT_THAT(ErrorOf(WithPlan("server: {anonymous_ipv6_prefix: /64}\n")),
              HasSubstr("server.anonymous_ipv6_prefix: expected an integer"));
}

TEST_F(ConfigTest, ThreadsAbove1024AreRejected) {
  EXPECT_EQ(ErrorOf(WithPlan("server: {threads: 1025}\n")),
            "test.yaml: server.threads: must be between 0 and 1024, got 1025");
}

TEST_F(ConfigTest, ApiKeyHeaderMustBeAnHttpToken) {
  EXPECT_EQ(ErrorOf(WithPlan("server: {api_key_header: \"X API Key\"}\n")),
            "test.yaml: server.api_key_header: bad header name \"X API Key\" (want an HTTP token: "
            "letters, digits and !#$%&'*+-.^_`|~)");
}

TEST_F(ConfigTest, AuthorizePrefixMayBeAnyPlainPathBesideTheOtherRoutes) {
  for (const std::string prefix :
       {"/authz", "/v1/authorize", "/ext_authz/v1", "/v1/checks", "/a.b/c-d/~e"}) {
    absl::StatusOr<Config> config =
        Parse(WithPlan(absl::StrCat("server: {authorize_prefix: \"", prefix, "\"}\n")));
    ASSERT_TRUE(config.ok()) << prefix << ": " << config.status();
    EXPECT_EQ(config->server.authorize_prefix, prefix);
  }
}

TEST_F(ConfigTest, AuthorizePrefixThatCouldBeReadTwoWaysIsRejected) {
  const auto error = [&](const std::string& prefix) {
    return ErrorOf(WithPlan(absl::StrCat("server: {authorize_prefix: \"", prefix, "\"}\n")));
  };
  EXPECT_EQ(error("v1/authorize"),
            "test.yaml: server.authorize_prefix: must start with /, got \"v1/authorize\"");
  EXPECT_EQ(error(""), "test.yaml: server.authorize_prefix: must start with /, got \"\"");
  EXPECT_EQ(error("/authz?x=1"),
            "test.yaml: server.authorize_prefix: must be a path without a query or fragment, "
            "got \"/authz?x=1\"");
  EXPECT_EQ(error("/authz/"),
            "test.yaml: server.authorize_prefix: must not end in / or hold an empty segment "
            "(//), got \"/authz/\"");
  EXPECT_THAT(error("/"), HasSubstr("server.authorize_prefix: must not end in /"));
  EXPECT_THAT(error("/a//b"), HasSubstr("server.authorize_prefix: must not end in /"));
  EXPECT_EQ(error("/a/../v1/check"),
            "test.yaml: server.authorize_prefix: must not hold a . or .. segment, got "
            "\"/a/../v1/check\"");
  EXPECT_THAT(error("/a/./b"), HasSubstr("server.authorize_prefix: must not hold a . or .."));
  EXPECT_EQ(error("/a%2Fb"),
            "test.yaml: server.authorize_prefix: bad path \"/a%2Fb\" (want segments of A-Z a-z "
            "0-9 _ . - ~)");
  EXPECT_EQ(error("/" + std::string(128, 'a')),
            "test.yaml: server.authorize_prefix: must be at most 128 characters, got 129");
  EXPECT_EQ(error("/" + std::string(127, 'a')), "OK");
}

TEST_F(ConfigTest, AuthorizePrefixMayNotOverlapTheCheckRoute) {
  for (const std::string prefix : {"/v1/check", "/v1", "/v1/check/x"}) {
    EXPECT_EQ(ErrorOf(WithPlan(absl::StrCat("server: {authorize_prefix: \"", prefix, "\"}\n"))),
              absl::StrCat("test.yaml: server.authorize_prefix: \"", prefix,
                           "\" overlaps the data plane route /v1/check (pick a path beside it)"));
  }
}

TEST_F(ConfigTest, AdminTokenWithSpacesIsRejectedWithoutQuotingIt) {
  EXPECT_EQ(ErrorOf(WithPlan("server: {admin_token: \"my token\"}\n")),
            "test.yaml: server.admin_token: must be printable ASCII without spaces");
}

// ------------------------------------------------------------------------------------------
// Store.

TEST_F(ConfigTest, UnknownStoreTypeIsRejected) {
  EXPECT_EQ(ErrorOf(WithPlan("store: {type: mysql}\n")),
            "test.yaml: store.type: unknown store type \"mysql\" (want memory or redis)");
}

TEST_F(ConfigTest, RedissUrlWithTlsSettingsIsRead) {
  absl::StatusOr<Config> config = Parse(
      WithPlan("store:\n  redis:\n    url: \"rediss://redis.internal:6380\"\n"
               "    tls: { ca_file: /etc/ca.pem, cert_file: /etc/c.pem, key_file: /etc/k.pem, "
               "server_name: redis.example.com }\n"));
  ASSERT_TRUE(config.ok()) << config.status();
  const RedisTlsConfig& tls = config->store.redis.tls;
  EXPECT_EQ(tls.ca_file, "/etc/ca.pem");
  EXPECT_EQ(tls.cert_file, "/etc/c.pem");
  EXPECT_EQ(tls.key_file, "/etc/k.pem");
  EXPECT_EQ(tls.server_name, "redis.example.com");
}

TEST_F(ConfigTest, RedissUrlWithoutTlsSettingsIsValid) {
  EXPECT_EQ(ErrorOf(WithPlan("store:\n  redis: {url: \"rediss://127.0.0.1:6379\"}\n")), "OK");
}

TEST_F(ConfigTest, TlsSettingsBesideClusterNodesAreValid) {
  // A cluster has no URL to say rediss://: store.redis.tls turns TLS on for its nodes.
  absl::StatusOr<Config> config =
      Parse(WithPlan("store:\n  type: redis\n  redis: {cluster_nodes: [\"10.0.0.1:6379\"], "
                     "tls: {server_name: redis.example.com}}\n"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->store.redis.tls.server_name, "redis.example.com");
}

TEST_F(ConfigTest, AnEmptyTlsBlockCountsAsTlsOn) {
  // `tls: {}` asks for TLS with the system's trust store: beside cluster_nodes it turns TLS on,
  // with a redis:// URL it is refused like any other tls key (never plaintext by surprise).
  absl::StatusOr<Config> config =
      Parse(WithPlan("store:\n  type: redis\n  redis: {cluster_nodes: [\"10.0.0.1:6379\"], "
                     "tls: {}}\n"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->store.redis.tls.any());
  EXPECT_THAT(ErrorOf(WithPlan("store:\n  redis: {url: \"redis://127.0.0.1:6379\", tls: {}}\n")),
              HasSubstr("store.redis.tls: set, but store.redis.url is not a rediss:// URL"));
  // So is `tls:` without a value (its fields commented out, say): TLS on, not plaintext.
  for (const char* empty : {"    tls:\n", "    tls: ~\n", "    tls:\n    #  ca_file: x.pem\n"}) {
    config = Parse(WithPlan(absl::StrCat(
        "store:\n  type: redis\n  redis:\n    cluster_nodes: [\"10.0.0.1:6379\"]\n", empty)));
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_TRUE(config->store.redis.tls.any()) << empty;
  }
  EXPECT_THAT(ErrorOf(WithPlan("store:\n  redis: {url: \"redis://127.0.0.1:6379\", tls: ~}\n")),
              HasSubstr("store.redis.tls: set, but store.redis.url is not a rediss:// URL"));
}

TEST_F(ConfigTest, TlsSettingsWithAPlaintextUrlAreRefused) {
  EXPECT_EQ(ErrorOf(WithPlan("store:\n  redis: {url: \"redis://127.0.0.1:6379\", "
                             "tls: {ca_file: /etc/ca.pem}}\n")),
            "test.yaml: store.redis.tls: set, but store.redis.url is not a rediss:// URL (TLS is "
            "on only with rediss://, or with cluster_nodes)");
  // The default URL is plaintext too.
  EXPECT_THAT(ErrorOf(WithPlan("store:\n  redis: {tls: {server_name: r.example.com}}\n")),
              HasSubstr("store.redis.tls: set, but store.redis.url is not a rediss:// URL"));
}

TEST_F(ConfigTest, ClientCertificateAndKeyGoTogether) {
  const std::string url = "store:\n  redis:\n    url: \"rediss://h\"\n";
  EXPECT_EQ(ErrorOf(WithPlan(url + "    tls: {cert_file: /etc/c.pem}\n")),
            "test.yaml: store.redis.tls.key_file: cert_file and key_file go together: set both "
            "for a client certificate, or neither");
  EXPECT_EQ(ErrorOf(WithPlan(url + "    tls: {key_file: /etc/k.pem}\n")),
            "test.yaml: store.redis.tls.cert_file: cert_file and key_file go together: set both "
            "for a client certificate, or neither");
}

TEST_F(ConfigTest, TlsServerNameMustBeADnsNameOrAnAddress) {
  const std::string url = "store:\n  redis:\n    url: \"rediss://h\"\n";
  for (const char* good : {"redis.example.com", "localhost", "10.0.0.5", "\"::1\"", "a_b.c"}) {
    EXPECT_EQ(ErrorOf(WithPlan(url + "    tls: {server_name: " + good + "}\n")), "OK") << good;
  }
  for (const char* bad : {"\"a b\"", "a..b", "-a.b", "\"*.example.com\"", "h/x"}) {
    EXPECT_THAT(ErrorOf(WithPlan(url + "    tls: {server_name: " + bad + "}\n")),
                HasSubstr("store.redis.tls.server_name: bad server name"))
        << bad;
  }
}

TEST_F(ConfigTest, UnknownTlsFieldIsRejected) {
  EXPECT_THAT(ErrorOf(WithPlan("store:\n  redis: {url: \"rediss://h\", tls: {verify: false}}\n")),
              HasSubstr("store.redis.tls.verify"));
}

TEST_F(ConfigTest, RedisUrlMustUseRedisScheme) {
  EXPECT_EQ(ErrorOf(WithPlan("store:\n  redis: {url: \"http://127.0.0.1:6379\"}\n")),
            "test.yaml: store.redis.url: must be a redis:// or rediss:// (TLS) URL, e.g. "
            "redis://127.0.0.1:6379/0");
}

TEST_F(ConfigTest, ClusterNodesAreSeedsInsteadOfTheUrl) {
  absl::StatusOr<Config> config =
      Parse(WithPlan("store:\n  type: redis\n  redis: {cluster_nodes: [\"10.0.0.1:6379\", "
                     "\"[fd00::1]:7000\"]}\n"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->store.redis.cluster_nodes,
            (std::vector<std::string>{"10.0.0.1:6379", "[fd00::1]:7000"}));
  EXPECT_FALSE(config->store.redis.url_set);
}

TEST_F(ConfigTest, ClusterNodesAndUrlTogetherAreRefused) {
  EXPECT_EQ(ErrorOf(WithPlan("store:\n  redis: {url: \"redis://127.0.0.1:6379\", "
                             "cluster_nodes: [\"127.0.0.1:7000\"]}\n")),
            "test.yaml: store.redis.cluster_nodes: cannot be set together with store.redis.url "
            "(the seeds replace the URL; the password comes from SLUICE_REDIS_PASSWORD_FILE)");
}

TEST_F(ConfigTest, BadClusterNodesAreRefused) {
  EXPECT_EQ(ErrorOf(WithPlan("store:\n  redis: {cluster_nodes: [\"127.0.0.1\"]}\n")),
            "test.yaml: store.redis.cluster_nodes[0]: bad seed node \"127.0.0.1\" (want host:port, "
            "e.g. 10.0.0.1:6379 or [fd00::1]:6379)");
  EXPECT_EQ(ErrorOf(WithPlan("store:\n  redis: {cluster_nodes: [\"a:1\", \"b:70000\"]}\n")),
            "test.yaml: store.redis.cluster_nodes[1]: bad seed node \"b:70000\" (want host:port, "
            "e.g. 10.0.0.1:6379 or [fd00::1]:6379)");
  EXPECT_EQ(ErrorOf(WithPlan("store:\n  redis: {cluster_nodes: [\"a:1\", \"a:1\"]}\n")),
            "test.yaml: store.redis.cluster_nodes[1]: \"a:1\" is the same node as "
            "cluster_nodes[0]");
  // Repeats are found in a canonical form: a name's case, an IPv6 address's spelling.
  for (const char* twice :
       {"\"Redis-1:7000\", \"redis-1:7000\"", "\"[::1]:7000\", \"[0:0::1]:7000\"",
        "\"10.0.0.1:7000\", \"10.0.0.2:7000\", \"10.0.0.1:7000\""}) {
    EXPECT_THAT(
        ErrorOf(WithPlan(absl::StrCat("store:\n  redis: {cluster_nodes: [", twice, "]}\n"))),
        HasSubstr("is the same node as cluster_nodes[0]"))
        << twice;
  }
  // Ports in plain digits only; hosts an IPv4 address, a bracketed IPv6 one or a DNS name.
  for (const char* node :
       {"127.0.0.1: 7001", "127.0.0.1:+7001", "127.0.0.1:07000", "h:0", "h:", "-host:6379",
        "host-:6379", "a..b:6379", "1.2.3.4.5:6379", "300.1.1.1:6379", "h/x:6379", ".h:6379"}) {
    EXPECT_THAT(
        ErrorOf(WithPlan(absl::StrCat("store:\n  redis: {cluster_nodes: [\"", node, "\"]}\n"))),
        HasSubstr("bad seed node"))
        << node;
  }
  for (const char* node : {"redis_1:6379", "r-1.example.com:65535", "10.0.0.1:1", "[fd00::1]:7000",
                           "[::ffff:10.0.0.1]:7000"}) {
    EXPECT_EQ(
        ErrorOf(WithPlan(absl::StrCat("store:\n  redis: {cluster_nodes: [\"", node, "\"]}\n"))),
        "OK")
        << node;
  }
  // A seed with credentials in it is refused without showing them.
  const std::string with_password =
      ErrorOf(WithPlan("store:\n  redis: {cluster_nodes: [\"user:s3cret@h:6379\"]}\n"));
  EXPECT_THAT(with_password, HasSubstr("store.redis.cluster_nodes[0]: a seed node is host:port "
                                       "only, without user:password@"));
  EXPECT_THAT(with_password, Not(HasSubstr("s3cret")));
  // An empty list is no cluster, and no quiet fall back to the default URL.
  EXPECT_EQ(ErrorOf(WithPlan("store:\n  redis: {cluster_nodes: []}\n")),
            "test.yaml: store.redis.cluster_nodes: expected at least one seed node (or no "
            "cluster_nodes)");
  // Nor is the key without a value (every seed commented out), or with `~`.
  for (const char* nothing : {"store:\n  redis:\n    cluster_nodes:\n    #  - \"a:1\"\n",
                              "store:\n  redis: {cluster_nodes: ~}\n"}) {
    EXPECT_EQ(ErrorOf(WithPlan(nothing)),
              "test.yaml: store.redis.cluster_nodes: expected at least one seed node (or no "
              "cluster_nodes)")
        << nothing;
  }
  // An IPv6 address without brackets (here its port forgotten) is no host "fd00:" on port 1;
  // brackets around a name are no address either.
  for (const char* node : {"fd00::1", "::1", "a:b:6379", "[redis]:6379"}) {
    EXPECT_THAT(
        ErrorOf(WithPlan(absl::StrCat("store:\n  redis: {cluster_nodes: [\"", node, "\"]}\n"))),
        HasSubstr("bad seed node"))
        << node;
  }
}

TEST_F(ConfigTest, AClusterTakesAnAclUserOnlyWithClusterNodes) {
  absl::StatusOr<Config> config =
      Parse(WithPlan("store:\n  type: redis\n  redis: {cluster_nodes: [\"10.0.0.1:6379\"], "
                     "username: sluice-app}\n"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->store.redis.username, "sluice-app");
  EXPECT_EQ(ErrorOf(WithPlan("store:\n  redis: {url: \"redis://h\", username: app}\n")),
            "test.yaml: store.redis.username: only with cluster_nodes (a single Redis takes its "
            "user in the URL, redis://user:password@host or redis://user@host)");
  for (const std::string& bad :
       std::vector<std::string>{"a b", std::string(129, 'u'), "caf\xc3\xa9", "tab\\t"}) {
    EXPECT_THAT(ErrorOf(WithPlan(absl::StrCat(
                    "store:\n  redis: {cluster_nodes: [\"a:1\"], username: \"", bad, "\"}\n"))),
                HasSubstr("store.redis.username: want 1-128 printable ASCII characters"))
        << bad;
  }
}

TEST_F(ConfigTest, BadRedisKeyPrefixIsRejected) {
  EXPECT_EQ(ErrorOf(WithPlan("store:\n  redis: {key_prefix: \"a:b\"}\n")),
            "test.yaml: store.redis.key_prefix: bad key prefix \"a:b\" (want 1-32 characters of "
            "A-Z a-z 0-9 _ . -)");
}

TEST_F(ConfigTest, UnknownStoreErrorPolicyIsRejected) {
  EXPECT_EQ(ErrorOf(WithPlan("on_store_error: maybe\n")),
            "test.yaml: on_store_error: unknown store error policy \"maybe\" (want allow or deny)");
}

// ------------------------------------------------------------------------------------------
// Alerts.

TEST_F(ConfigTest, UnknownSinkTypeIsRejected) {
  EXPECT_EQ(ErrorOf(WithPlan("alerts:\n  sinks:\n"
                             "    - {type: slack, url: \"https://hooks.slack.com/x\"}\n"
                             "    - {type: webhook, url: \"http://127.0.0.1/h\"}\n"
                             "    - {type: sms}\n")),
            "test.yaml: alerts.sinks[2].type: unknown sink type \"sms\" (want webhook, slack or "
            "email)");
}

TEST_F(ConfigTest, WebhookSecretMustStartWithWhsec) {
  const std::string error = ErrorOf(
      WithPlan("alerts:\n  sinks:\n    - {type: webhook, url: \"http://h/\", secret: s3cr3t}\n"));
  EXPECT_EQ(error,
            "test.yaml: alerts.sinks[0].secret: must be \"whsec_\" followed by base64 (Standard "
            "Webhooks)");
  EXPECT_THAT(error, Not(HasSubstr("s3cr3t")));
}

TEST_F(ConfigTest, WebhookSinkNeedsAnHttpUrl) {
  EXPECT_EQ(ErrorOf(WithPlan("alerts:\n  sinks:\n    - {type: webhook}\n")),
            "test.yaml: alerts.sinks[0].url: missing required field");
  EXPECT_EQ(ErrorOf(WithPlan("alerts:\n  sinks:\n    - {type: webhook, url: \"h:/x\"}\n")),
            "test.yaml: alerts.sinks[0].url: must be an http:// or https:// URL");
}

TEST_F(ConfigTest, EmailSinkNeedsSmtpUrlAndFrom) {
  EXPECT_EQ(ErrorOf(WithPlan("alerts:\n  sinks:\n    - {type: email, smtp_url: \"http://x\"}\n")),
            "test.yaml: alerts.sinks[0].smtp_url: must be an smtp:// or smtps:// URL");
  EXPECT_EQ(ErrorOf(WithPlan("alerts:\n  sinks:\n    - {type: email, smtp_url: \"smtp://x\"}\n")),
            "test.yaml: alerts.sinks[0].from: missing required field");
}

TEST_F(ConfigTest, FieldOfAnotherSinkTypeIsRejected) {
  EXPECT_EQ(ErrorOf(WithPlan("alerts:\n  sinks:\n"
                             "    - {type: slack, url: \"https://x\", secret: whsec_AAAA}\n")),
            "test.yaml: alerts.sinks[0].secret: not used by sinks of type slack (expected one "
            "of: type, url)");
}

TEST_F(ConfigTest, RetryMaxDelayBelowFirstDelayIsRejected) {
  EXPECT_EQ(ErrorOf(WithPlan("alerts:\n  retry: {first_delay: 10s, max_delay: 5s}\n")),
            "test.yaml: alerts.retry.max_delay: must be at least first_delay (10s), got 5s");
}

TEST_F(ConfigTest, RetryMaxAttemptsOutOfRangeIsRejected) {
  EXPECT_EQ(ErrorOf(WithPlan("alerts:\n  retry: {max_attempts: 0}\n")),
            "test.yaml: alerts.retry.max_attempts: must be between 1 and 100, got 0");
}

// ------------------------------------------------------------------------------------------
// Duration bounds.

TEST_F(ConfigTest, RedisTimeoutAboveTenSecondsIsRejected) {
  EXPECT_EQ(ErrorOf(WithPlan("store:\n  redis: {timeout: 3000000h}\n")),
            "test.yaml: store.redis.timeout: must be at most 10s, got 3000000h");
  EXPECT_EQ(ErrorOf(WithPlan("store:\n  redis: {timeout: 10001ms}\n")),
            "test.yaml: store.redis.timeout: must be at most 10s, got 10.001s");
}

TEST_F(ConfigTest, RedisTimeoutBoundsAreInclusive) {
  absl::StatusOr<Config> low = Parse(WithPlan("store:\n  redis: {timeout: 1ms}\n"));
  ASSERT_TRUE(low.ok()) << low.status();
  EXPECT_EQ(low->store.redis.timeout, absl::Milliseconds(1));
  absl::StatusOr<Config> high = Parse(WithPlan("store:\n  redis: {timeout: 10s}\n"));
  ASSERT_TRUE(high.ok()) << high.status();
  EXPECT_EQ(high->store.redis.timeout, absl::Seconds(10));
}

TEST_F(ConfigTest, RedisMaxWaitDefaultsToTenTimeoutsAndIsNeverBelowTheTimeout) {
  absl::StatusOr<Config> derived = Parse(WithPlan("store:\n  redis: {timeout: 30ms}\n"));
  ASSERT_TRUE(derived.ok()) << derived.status();
  EXPECT_EQ(derived->store.redis.EffectiveMaxWait(), absl::Milliseconds(300));
  absl::StatusOr<Config> set =
      Parse(WithPlan("store:\n  redis: {timeout: 30ms, max_wait: 30ms}\n"));
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->store.redis.EffectiveMaxWait(), absl::Milliseconds(30));
  EXPECT_EQ(ErrorOf(WithPlan("store:\n  redis: {timeout: 30ms, max_wait: 29ms}\n")),
            "test.yaml: store.redis.max_wait: must be at least store.redis.timeout (30ms), got "
            "29ms");
  EXPECT_EQ(ErrorOf(WithPlan("store:\n  redis: {max_wait: 61s}\n")),
            "test.yaml: store.redis.max_wait: must be at most 1m, got 1m1s");
}

TEST_F(ConfigTest, SnapshotIntervalIsBetween100msAndOneHour) {
  EXPECT_EQ(ErrorOf(WithPlan("store:\n  memory: {snapshot_interval: 99ms}\n")),
            "test.yaml: store.memory.snapshot_interval: must be at least 100ms, got 99ms");
  EXPECT_EQ(ErrorOf(WithPlan("store:\n  memory: {snapshot_interval: 61m}\n")),
            "test.yaml: store.memory.snapshot_interval: must be at most 1h, got 1h1m");
  EXPECT_EQ(ErrorOf(WithPlan("store:\n  memory: {snapshot_interval: 1h}\n")), "OK");
}

TEST_F(ConfigTest, AlertLeaseAboveOneHourIsRejected) {
  EXPECT_EQ(ErrorOf(WithPlan("alerts:\n  lease: 2h\n")),
            "test.yaml: alerts.lease: must be at most 1h, got 2h");
}

TEST_F(ConfigTest, RetryDelaysAreBounded) {
  EXPECT_EQ(ErrorOf(WithPlan("alerts:\n  retry: {first_delay: 10ms}\n")),
            "test.yaml: alerts.retry.first_delay: must be at least 100ms, got 10ms");
  EXPECT_EQ(ErrorOf(WithPlan("alerts:\n  retry: {first_delay: 2h, max_delay: 3h}\n")),
            "test.yaml: alerts.retry.first_delay: must be at most 1h, got 2h");
  EXPECT_EQ(ErrorOf(WithPlan("alerts:\n  retry: {max_delay: 25h}\n")),
            "test.yaml: alerts.retry.max_delay: must be at most 24h, got 25h");
}

// ------------------------------------------------------------------------------------------
// Hostile files: each is refused with a message, quickly and without exhausting memory or stack.

TEST_F(ConfigTest, DeeplyNestedFlowListIsNestedTooDeep) {
  const std::string yaml = "plans: " + std::string(100'000, '[');
  EXPECT_THAT(ErrorOf(yaml), HasSubstr("nested too deep (more than 64 levels)"));
}

TEST_F(ConfigTest, DeeplyNestedBlockMapsAreNestedTooDeep) {
  std::string yaml;
  for (int i = 0; i < 2'000; ++i) absl::StrAppend(&yaml, std::string(i, ' '), "a:\n");
  EXPECT_THAT(ErrorOf(yaml), HasSubstr("nested too deep (more than 64 levels)"));
}

TEST_F(ConfigTest, NestingWithinTheBoundIsJudgedByTheSchema) {
  const std::string yaml = "plans:\n  free: " + std::string(60, '[') + std::string(60, ']') + "\n";
  EXPECT_EQ(ErrorOf(yaml), "test.yaml: plans.free: expected a map, got a list");
}

TEST_F(ConfigTest, AliasBombIsRefusedBeforeItIsExpanded) {
  // Nine levels of ten aliases each: a billion values once expanded.
  std::string yaml = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i <= 9; ++i) {
    absl::StrAppend(&yaml, "a", i, ": &a", i, " [");
    for (int j = 0; j < 10; ++j) absl::StrAppend(&yaml, j == 0 ? "" : ", ", "*a", i - 1);
    absl::StrAppend(&yaml, "]\n");
  }
  EXPECT_THAT(ErrorOf(yaml),
              HasSubstr("too many values (more than 4000000 with aliases expanded)"));
}

TEST_F(ConfigTest, AliasBombInsideThePlansIsRefused) {
  // 10,000 plans sharing one alias of 1,000 limits: ten million limits once expanded.
  std::string yaml = "plans:\n  p0: { limits: &l [";
  for (int i = 0; i < 1000; ++i) {
    absl::StrAppend(&yaml, i == 0 ? "" : ", ", "{ name: l", i, ", quota: 1, window: 1m }");
  }
  absl::StrAppend(&yaml, "] }\n");
  for (int i = 1; i < 10'000; ++i) absl::StrAppend(&yaml, "  p", i, ": { limits: *l }\n");
  EXPECT_THAT(ErrorOf(yaml),
              HasSubstr("too many values (more than 4000000 with aliases expanded)"));
}

TEST_F(ConfigTest, HugeFlowListIsRefusedBeforeYamlCppReadsItAhead) {
  std::string yaml = "plans: [";
  for (int i = 0; i < 2'100'000; ++i) yaml += "x,";
  yaml += "]\n";
  EXPECT_EQ(ErrorOf(yaml), "test.yaml: too many values (more than 2000000 commas; got 2100000)");
}

TEST_F(ConfigTest, AliasToAnEnclosingValueIsRefused) {
  EXPECT_THAT(ErrorOf(WithPlan("keys: &k [*k]\n")),
              HasSubstr("alias refers to a value containing it"));
}

TEST_F(ConfigTest, AliasesStillWork) {
  absl::StatusOr<Config> config = Parse(
      "plans:\n  free: { limits: &l [{ name: m, quota: 1, window: 1m }] }\n"
      "  pro: { limits: *l }\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->plans[1].limits[0].name, "m");
}

TEST_F(ConfigTest, AnAliasedScalarReadsAsItsValueInEachPlace) {
  absl::StatusOr<Config> config =
      Parse(WithPlan("keys:\n"
                     "  - {key: k1, subject: &who user-1, plan: &plan free}\n"
                     "  - {key: k2, subject: *who, plan: *plan}\n"));
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_EQ(config->keys.size(), 2u);
  EXPECT_EQ(config->keys[1].subject, "user-1");
  EXPECT_EQ(config->keys[1].plan, "free");
}

TEST_F(ConfigTest, AnAliasedKeyIsADuplicateOfItsAnchor) {
  EXPECT_EQ(ErrorOf(WithPlan("keys:\n"
                             "  - {key: &k sekrit-key-123, subject: u1, plan: free}\n"
                             "  - {key: other, subject: u2, plan: free}\n"
                             "  - {key: *k, subject: u3, plan: free}\n")),
            "test.yaml: keys[2].key: duplicate key (same as keys[0])");
}

TEST_F(ConfigTest, ARepeatedFieldInAnAliasedMapIsStillSeen) {
  EXPECT_EQ(ErrorOf(WithPlan("keys:\n  - &m {key: k1, key: k2, subject: u1, plan: free}\n"
                             "  - *m\n")),
            "test.yaml: keys[0].key: duplicate field");
}

TEST_F(ConfigTest, AnEmptyFileHasNoPlans) {
  EXPECT_EQ(ErrorOf(""), "test.yaml: plans: at least one plan is required");
  EXPECT_EQ(ErrorOf("# nothing\n"), "test.yaml: plans: at least one plan is required");
  EXPECT_EQ(ErrorOf("---\n"), "test.yaml: plans: at least one plan is required");
}

TEST_F(ConfigTest, NulByteIsRefusedWithItsPosition) {
  EXPECT_EQ(ErrorOf(std::string("plans:\n  fr\0ee: {}\n", 19)),
            "test.yaml: line 2, column 5: NUL byte (a YAML file is text)");
}

TEST_F(ConfigTest, Utf16FileIsAskedToBeUtf8) {
  EXPECT_EQ(ErrorOf(std::string("\xff\xfep\0l\0a\0n\0s\0:\0", 14)),
            "test.yaml: not UTF-8 (looks like UTF-16 or UTF-32; save it as UTF-8)");
  EXPECT_EQ(ErrorOf(std::string("\0p\0l", 4)),
            "test.yaml: not UTF-8 (looks like UTF-16 or UTF-32; save it as UTF-8)");
}

TEST_F(ConfigTest, BinaryGarbageIsAnErrorNotACrash) {
  std::string garbage;
  uint32_t x = 12345;
  for (int i = 0; i < 100'000; ++i) {
    x = x * 1103515245 + 12345;
    garbage.push_back(static_cast<char>((x >> 16) % 255 + 1));  // no NUL: reach the parser
  }
  EXPECT_NE(ErrorOf(garbage), "OK");
}

TEST_F(ConfigTest, HugeScalarIsReportedWithoutQuotingAllOfIt) {
  const std::string yaml = WithPlan("store:\n  type: " + std::string(4 << 20, 'x') + "\n");
  const std::string error = ErrorOf(yaml);
  EXPECT_THAT(error, HasSubstr("store.type: unknown store type"));
  EXPECT_LT(error.size(), 300u);
}

TEST_F(ConfigTest, TextLargerThan16MiBIsRefused) {
  EXPECT_EQ(ErrorOf(std::string((16 << 20) + 1, '#')),
            "test.yaml: too large: 16777217 bytes (at most 16 MiB)");
}

TEST_F(ConfigTest, ManyPlansAndKeysAreReadInLinearTime) {
  // Quadratic name and plan checks took minutes here (about 2 under ASan); linear ones, seconds.
  std::string yaml = "plans:\n";
  for (int i = 0; i < 30'000; ++i) {
    absl::StrAppend(&yaml, "  p", i, ": { limits: [{ name: m, quota: 1, window: 1m }] }\n");
  }
  absl::StrAppend(&yaml, "keys:\n");
  for (int i = 0; i < 30'000; ++i) {
    absl::StrAppend(&yaml, "  - { key: k", i, ", subject: s", i, ", plan: p", 29'999 - i, " }\n");
  }
  const absl::Time start = absl::Now();
  absl::StatusOr<Config> config = Parse(yaml);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->plans.size(), 30'000u);
  EXPECT_LT(absl::Now() - start, absl::Seconds(60));
}

// ------------------------------------------------------------------------------------------
// Files that are not regular files, or too large.

class ConfigFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/sluice-config-test-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string PathOf(const std::string& name) const { return dir_ + "/" + name; }
  static std::string ErrorOf(const std::string& path) {
    absl::StatusOr<Config> config = LoadConfigFile(path);
    return config.ok() ? "OK" : std::string(config.status().message());
  }

  std::string dir_;
};

TEST_F(ConfigFileTest, DirectoryIsNotARegularFile) {
  EXPECT_EQ(ErrorOf(dir_), absl::StrCat(dir_, ": not a regular file (a directory)"));
}

TEST_F(ConfigFileTest, DevZeroIsRefusedWithoutReadingIt) {
  EXPECT_EQ(ErrorOf("/dev/zero"), "/dev/zero: not a regular file (a character device)");
}

TEST_F(ConfigFileTest, FifoIsRefusedWithoutBlocking) {
  const std::string fifo = PathOf("fifo.yaml");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(ErrorOf(fifo), absl::StrCat(fifo, ": not a regular file (a FIFO)"));
}

TEST_F(ConfigFileTest, FileLargerThan16MiBIsRefused) {
  const std::string path = PathOf("big.yaml");
  std::ofstream(path) << std::string(17 << 20, '#');
  EXPECT_EQ(ErrorOf(path), absl::StrCat(path, ": too large: 17825792 bytes (at most 16 MiB)"));
}

TEST_F(ConfigFileTest, RegularFileIsRead) {
  const std::string path = PathOf("ok.yaml");
  std::ofstream(path) << kPlans;
  absl::StatusOr<Config> config = LoadConfigFile(path);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->path, path);
}

TEST_F(ConfigFileTest, SymlinkToARegularFileIsFollowed) {
  const std::string path = PathOf("ok.yaml");
  std::ofstream(path) << kPlans;
  const std::string link = PathOf("link.yaml");
  ASSERT_EQ(::symlink(path.c_str(), link.c_str()), 0);
  EXPECT_EQ(ErrorOf(link), "OK");
}

// ------------------------------------------------------------------------------------------
// Environment variables (ApplyEnvironment), read through a fake getenv.

class EnvironmentTest : public ConfigFileTest {
 protected:
  static constexpr char kPassword[] = "s3cret-Pa55word";

  // kPlans plus `sections` with the environment `env_`; the error message, or "OK".
  std::string Apply(const std::string& sections = "") {
    absl::StatusOr<Config> parsed = ParseConfig(WithPlan(sections), "test.yaml");
    if (!parsed.ok()) return std::string(parsed.status().message());
    cfg_ = *std::move(parsed);
    const absl::Status s = ApplyEnvironment(cfg_, [this](const char* name) -> const char* {
      auto it = env_.find(name);
      return it == env_.end() ? nullptr : it->second.c_str();
    });
    return s.ok() ? "OK" : std::string(s.message());
  }
  // A file named `name` holding `content`; its path.
  std::string WriteFile(const std::string& name, const std::string& content) {
    const std::string path = PathOf(name);
    std::ofstream(path) << content;
    return path;
  }

  std::map<std::string, std::string> env_;
  Config cfg_;
};

TEST_F(EnvironmentTest, NoVariablesLeaveTheFileAsItIs) {
  EXPECT_EQ(Apply(), "OK");
  EXPECT_EQ(cfg_.store.redis.url, "redis://127.0.0.1:6379/0");
  EXPECT_EQ(cfg_.store.redis.url_source, "store.redis.url");
  EXPECT_EQ(cfg_.store.redis.password, "");
}

TEST_F(EnvironmentTest, RedisUrlReplacesTheFilesUrl) {
  env_["SLUICE_REDIS_URL"] = "redis://10.1.2.3:6380/4";
  EXPECT_EQ(Apply(), "OK");
  EXPECT_EQ(cfg_.store.redis.url, "redis://10.1.2.3:6380/4");
  EXPECT_EQ(cfg_.store.redis.url_source, "SLUICE_REDIS_URL");
}

TEST_F(EnvironmentTest, RedisUrlIsValidatedLikeTheFilesAndNamesTheVariable) {
  env_["SLUICE_REDIS_URL"] = absl::StrCat("http://user:", kPassword, "@host");
  EXPECT_EQ(
      Apply(),
      "SLUICE_REDIS_URL: must be a redis:// or rediss:// (TLS) URL, e.g. redis://127.0.0.1:6379/0");
  env_["SLUICE_REDIS_URL"] = absl::StrCat("rediss://:", kPassword, "@host");
  EXPECT_EQ(Apply(), "OK");
  env_["SLUICE_REDIS_URL"] = "redis://";
  EXPECT_THAT(Apply(), HasSubstr("SLUICE_REDIS_URL: must be a redis:// or rediss:// (TLS) URL"));
}

TEST_F(EnvironmentTest, PlaintextRedisUrlIsRefusedWhenTheFileSetsTls) {
  const std::string tls = "store:\n  redis: {url: \"rediss://h\", tls: {ca_file: /ca.pem}}\n";
  env_["SLUICE_REDIS_URL"] = "rediss://10.1.2.3:6380";
  EXPECT_EQ(Apply(tls), "OK");
  env_["SLUICE_REDIS_URL"] = "redis://10.1.2.3:6380";
  EXPECT_EQ(Apply(tls),
            "store.redis.tls: set, but SLUICE_REDIS_URL is not a rediss:// URL (TLS is on only "
            "with rediss://, or with cluster_nodes)");
}

TEST_F(EnvironmentTest, RedisUrlBesideClusterNodesIsRefused) {
  env_["SLUICE_REDIS_URL"] = "redis://10.1.2.3:6380";
  EXPECT_EQ(Apply("store:\n  redis: {cluster_nodes: [\"10.0.0.1:6379\"]}\n"),
            "store.redis.cluster_nodes: cannot be set together with SLUICE_REDIS_URL (the seeds "
            "replace the URL; the password comes from SLUICE_REDIS_PASSWORD_FILE)");
}

TEST_F(EnvironmentTest, AnAclUserNeedsThePasswordFile) {
  const std::string user = "store:\n  redis: {cluster_nodes: [\"10.0.0.1:6379\"], username: app}\n";
  EXPECT_EQ(Apply(user), "store.redis.username: needs a password: set SLUICE_REDIS_PASSWORD_FILE");
  env_["SLUICE_REDIS_PASSWORD_FILE"] = WriteFile("password", "s3cret\n");
  EXPECT_EQ(Apply(user), "OK");
  EXPECT_EQ(cfg_.store.redis.password, "s3cret");
}

TEST_F(EnvironmentTest, EmptyRedisUrlIsAnErrorNotTheFilesUrl) {
  env_["SLUICE_REDIS_URL"] = "";
  EXPECT_THAT(Apply(), HasSubstr("SLUICE_REDIS_URL: must be a redis:// or rediss:// (TLS) URL"));
}

TEST_F(EnvironmentTest, PasswordFileSetsThePasswordWithoutItsTrailingNewline) {
  env_["SLUICE_REDIS_PASSWORD_FILE"] = WriteFile("pw", absl::StrCat(kPassword, "\n"));
  EXPECT_EQ(Apply(), "OK");
  EXPECT_EQ(cfg_.store.redis.password, kPassword);
}

TEST_F(EnvironmentTest, OnlyOneTrailingNewlineIsStripped) {
  env_["SLUICE_REDIS_PASSWORD_FILE"] = WriteFile("pw", absl::StrCat(kPassword, "\n\n"));
  EXPECT_EQ(Apply(), "OK");
  EXPECT_EQ(cfg_.store.redis.password, absl::StrCat(kPassword, "\n"));
}

TEST_F(EnvironmentTest, PasswordFileWithoutNewlineIsTakenWhole) {
  env_["SLUICE_REDIS_PASSWORD_FILE"] = WriteFile("pw", kPassword);
  EXPECT_EQ(Apply(), "OK");
  EXPECT_EQ(cfg_.store.redis.password, kPassword);
}

TEST_F(EnvironmentTest, UrlAndPasswordFileCombine) {
  env_["SLUICE_REDIS_URL"] = "redis://app:old-password@10.0.0.9:6379/0";
  env_["SLUICE_REDIS_PASSWORD_FILE"] = WriteFile("pw", kPassword);
  EXPECT_EQ(Apply(), "OK");
  EXPECT_EQ(cfg_.store.redis.url, "redis://app:old-password@10.0.0.9:6379/0");
  EXPECT_EQ(cfg_.store.redis.password, kPassword);  // used instead of the URL's
}

TEST_F(EnvironmentTest, MissingPasswordFileNamesTheVariableAndThePath) {
  const std::string path = PathOf("nope");
  env_["SLUICE_REDIS_PASSWORD_FILE"] = path;
  EXPECT_EQ(Apply(), absl::StrCat("SLUICE_REDIS_PASSWORD_FILE: ", path,
                                  ": cannot open: No such file or directory"));
}

TEST_F(EnvironmentTest, EmptyPasswordFileIsAnError) {
  const std::string path = WriteFile("pw", "");
  env_["SLUICE_REDIS_PASSWORD_FILE"] = path;
  EXPECT_EQ(Apply(), absl::StrCat("SLUICE_REDIS_PASSWORD_FILE: ", path, ": empty"));
}

TEST_F(EnvironmentTest, PasswordFileOfOnlyANewlineIsEmpty) {
  const std::string path = WriteFile("pw", "\n");
  env_["SLUICE_REDIS_PASSWORD_FILE"] = path;
  EXPECT_EQ(Apply(), absl::StrCat("SLUICE_REDIS_PASSWORD_FILE: ", path, ": empty"));
}

TEST_F(EnvironmentTest, EmptyPasswordFileVariableIsAnError) {
  env_["SLUICE_REDIS_PASSWORD_FILE"] = "";
  EXPECT_EQ(Apply(), "SLUICE_REDIS_PASSWORD_FILE: : cannot open: No such file or directory");
}

TEST_F(EnvironmentTest, PasswordFileOver4KiBIsRefusedWithoutQuotingIt) {
  const std::string path = WriteFile("pw", std::string(4097, 'x'));
  env_["SLUICE_REDIS_PASSWORD_FILE"] = path;
  EXPECT_EQ(Apply(), absl::StrCat("SLUICE_REDIS_PASSWORD_FILE: ", path,
                                  ": too large: 4097 bytes (at most 4 KiB)"));
  WriteFile("pw", std::string(4096, 'x'));
  EXPECT_EQ(Apply(), "OK");
}

TEST_F(EnvironmentTest, PasswordFileThatIsADirectoryIsRefused) {
  env_["SLUICE_REDIS_PASSWORD_FILE"] = dir_;
  EXPECT_EQ(Apply(), absl::StrCat("SLUICE_REDIS_PASSWORD_FILE: ", dir_,
                                  ": not a regular file (a directory)"));
}

TEST_F(EnvironmentTest, UnopenablePasswordFileNamesThePathNotTheContent) {
  // Under a regular file, so that opening fails for root too (a mode of 0 would not stop root).
  const std::string path = WriteFile("pw", kPassword) + "/inner";
  env_["SLUICE_REDIS_PASSWORD_FILE"] = path;
  const std::string message = Apply();
  EXPECT_THAT(message, StartsWith(absl::StrCat("SLUICE_REDIS_PASSWORD_FILE: ", path, ": ")));
  EXPECT_THAT(message, Not(HasSubstr(kPassword)));
}

TEST_F(EnvironmentTest, NoMessageContainsThePassword) {
  const std::string url_with_password = absl::StrCat("http://app:", kPassword, "@h");
  for (const std::string& url : {url_with_password, absl::StrCat("rediss://:", kPassword, "@h")}) {
    env_.clear();
    env_["SLUICE_REDIS_URL"] = url;
    EXPECT_THAT(Apply(), Not(HasSubstr(kPassword))) << url;
  }
  env_.clear();
  env_["SLUICE_REDIS_PASSWORD_FILE"] = WriteFile("pw", std::string(5000, 'p') + kPassword);
  EXPECT_THAT(Apply(), AllOf(HasSubstr("too large"), Not(HasSubstr(kPassword))));
}

TEST_F(EnvironmentTest, UrlErrorComesBeforeThePasswordFileIsRead) {
  env_["SLUICE_REDIS_URL"] = "http://x";
  env_["SLUICE_REDIS_PASSWORD_FILE"] = PathOf("nope");
  EXPECT_THAT(Apply(), HasSubstr("SLUICE_REDIS_URL"));
}

// Validate on configurations built in code, as the library builds them.
class ValidateTest : public ::testing::Test {
 protected:
  ValidateTest() {
    PlanConfig free{.name = "free"};
    free.limits.push_back(LimitConfig{
        .name = "per_minute", .quota = 5, .window = *ParseWindow("1m"), .alert_at = {80, 100}});
    free.limits.push_back(
        LimitConfig{.name = "daily", .quota = 100, .window = *ParseWindow("day")});
    cfg_.plans.push_back(std::move(free));
  }

  std::string ErrorOf() const { return std::string(Validate(cfg_).message()); }

  Config cfg_;
};

TEST_F(ValidateTest, AcceptsAHandBuiltConfig) { EXPECT_TRUE(Validate(cfg_).ok()); }

TEST_F(ValidateTest, AcceptsWhatTheLoaderBuilt) {
  absl::StatusOr<Config> cfg = ParseConfig(kFull, "full.yaml");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_TRUE(Validate(*cfg).ok());
}

TEST_F(ValidateTest, QuotaOutOfRangeNamesPlanAndLimit) {
  cfg_.plans[0].limits[1].quota = 0;
  EXPECT_EQ(ErrorOf(),
            "plans.free.limits[1].quota: must be at least 1 (0 only for a limit with window: "
            "credit)");
  EXPECT_TRUE(absl::IsInvalidArgument(Validate(cfg_)));
}

TEST_F(ValidateTest, ACreditLimitOfZeroIsAccepted) {
  cfg_.plans[0].limits[1].quota = 0;
  cfg_.plans[0].limits[1].window = *ParseWindow("credit");
  EXPECT_TRUE(Validate(cfg_).ok()) << ErrorOf();
}

TEST_F(ValidateTest, NoPlansIsRefused) {
  cfg_.plans.clear();
  EXPECT_EQ(ErrorOf(), "plans: at least one plan is required");
}

TEST_F(ValidateTest, PlanWithoutNameIsNamedByPosition) {
  cfg_.plans[0].name.clear();
  EXPECT_EQ(ErrorOf(), "plans[0]: bad plan name \"\" (want 1-64 characters of A-Z a-z 0-9 _ . -)");
}

TEST_F(ValidateTest, DuplicatePlanIsRefused) {
  cfg_.plans.push_back(cfg_.plans[0]);
  EXPECT_EQ(ErrorOf(), "plans.free: duplicate plan name \"free\"");
}

TEST_F(ValidateTest, DuplicateLimitIsRefused) {
  cfg_.plans[0].limits[1].name = "per_minute";
  EXPECT_EQ(ErrorOf(), "plans.free.limits[1].name: duplicate limit name \"per_minute\"");
}

TEST_F(ValidateTest, PlanWithoutLimitsIsRefused) {
  cfg_.plans[0].limits.clear();
  EXPECT_EQ(ErrorOf(), "plans.free.limits: at least one limit is required");
}

TEST_F(ValidateTest, UnknownTimeZoneIsRefused) {
  cfg_.plans[0].timezone = "Mars/Olympus";
  EXPECT_EQ(ErrorOf(), "plans.free.timezone: unknown time zone \"Mars/Olympus\"");
}

TEST_F(ValidateTest, WindowNotBuiltByParseWindowIsChecked) {
  cfg_.plans[0].limits[0].window = WindowSpec{.length = absl::Milliseconds(500), .text = "0.5s"};
  EXPECT_EQ(ErrorOf(),
            "plans.free.limits[0].window: bad window \"0.5s\" (want Ns, Nm, Nh, day, week, month, "
            "year, concurrent or credit)");
}

TEST_F(ValidateTest, CalendarWindowsNeedNoLength) {
  for (const WindowSpec::Kind kind : {WindowSpec::Kind::kWeek, WindowSpec::Kind::kYear}) {
    cfg_.plans[0].limits[0].window = WindowSpec{.kind = kind, .text = "calendar"};
    EXPECT_TRUE(Validate(cfg_).ok()) << Validate(cfg_);
  }
}

TEST_F(ValidateTest, WindowKindOutsideTheEnumIsRefused) {
  cfg_.plans[0].limits[0].window =
      WindowSpec{.kind = static_cast<WindowSpec::Kind>(99), .text = "?"};
  EXPECT_EQ(ErrorOf(),
            "plans.free.limits[0].window: bad window \"?\" (want Ns, Nm, Nh, day, week, month, "
            "year, concurrent or credit)");
}

TEST_F(ValidateTest, AlertPercentagesMustBeInRangeAndIncreasing) {
  cfg_.plans[0].limits[0].alert_at = {80, 101};
  EXPECT_EQ(ErrorOf(), "plans.free.limits[0].alert_at[1]: must be between 1 and 100, got 101");
  cfg_.plans[0].limits[0].alert_at = {80, 80};
  EXPECT_EQ(ErrorOf(), "plans.free.limits[0].alert_at[1]: duplicate percentage 80");
  cfg_.plans[0].limits[0].alert_at = {100, 80};
  EXPECT_EQ(ErrorOf(), "plans.free.limits[0].alert_at[1]: percentages must be in increasing order");
}

TEST_F(ValidateTest, GrpcTimeoutsAreChecked) {
  cfg_.server.grpc_idle_timeout = absl::ZeroDuration();
  EXPECT_EQ(ErrorOf(), "server.grpc_idle_timeout: must be at least 1s, got 0");
  cfg_.server.grpc_idle_timeout = absl::Minutes(5);
  cfg_.server.grpc_write_timeout = absl::Hours(1);
  EXPECT_EQ(ErrorOf(), "server.grpc_write_timeout: must be at most 10m, got 1h");
}

TEST_F(ValidateTest, StoreSettingsAreChecked) {
  cfg_.store.redis.timeout = absl::Seconds(11);
  EXPECT_EQ(ErrorOf(), "store.redis.timeout: must be at most 10s, got 11s");
  cfg_.store.redis.timeout = absl::Milliseconds(20);
  cfg_.store.redis.url = "http://x";
  EXPECT_EQ(
      ErrorOf(),
      "store.redis.url: must be a redis:// or rediss:// (TLS) URL, e.g. redis://127.0.0.1:6379/0");
  cfg_.store.redis.url = "redis://127.0.0.1:6379/0";
  cfg_.store.redis.key_prefix = "";
  EXPECT_THAT(ErrorOf(), StartsWith("store.redis.key_prefix: bad key prefix \"\""));
  cfg_.store.redis.key_prefix = "sl";
  cfg_.store.memory.snapshot_interval = absl::Milliseconds(10);
  EXPECT_EQ(ErrorOf(), "store.memory.snapshot_interval: must be at least 100ms, got 10ms");
}

TEST_F(ValidateTest, SinksAreChecked) {
  cfg_.alerts.sinks.push_back(SinkConfig{.type = SinkConfig::Type::kWebhook});
  EXPECT_EQ(ErrorOf(), "alerts.sinks[0].url: missing required field");
  cfg_.alerts.sinks[0].url = "ftp://x";
  EXPECT_EQ(ErrorOf(), "alerts.sinks[0].url: must be an http:// or https:// URL");
  cfg_.alerts.sinks[0].url = "https://example.com/hook";
  cfg_.alerts.sinks[0].secret = "not-a-secret";
  EXPECT_EQ(ErrorOf(),
            "alerts.sinks[0].secret: must be \"whsec_\" followed by base64 (Standard Webhooks)");
  cfg_.alerts.sinks[0].secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
  EXPECT_TRUE(Validate(cfg_).ok());
}

TEST_F(ValidateTest, KeysAreCheckedAgainstThePlans) {
  cfg_.keys.push_back(KeyConfig{.key = "k1", .subject = "user-1", .plan = "gold"});
  EXPECT_EQ(ErrorOf(), "keys[0].plan: unknown plan \"gold\"");
  cfg_.keys[0].plan = "free";
  cfg_.keys.push_back(KeyConfig{.key = "k1", .subject = "user 2", .plan = "free"});
  EXPECT_EQ(ErrorOf(), "keys[1].key: duplicate key (same as keys[0])");
  cfg_.keys[1].key = "k2";
  EXPECT_THAT(ErrorOf(), StartsWith("keys[1].subject: bad subject \"user 2\""));
}

TEST_F(ValidateTest, AnonymousPlanMustExist) {
  cfg_.server.anonymous_plan = "anon";
  EXPECT_EQ(ErrorOf(), "server.anonymous_plan: unknown plan \"anon\"");
}

}  // namespace
}  // namespace sluice::config
