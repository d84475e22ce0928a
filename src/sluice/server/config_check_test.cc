#include "sluice/server/config_check.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "sluice/config/config.h"

namespace sluice::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kPlans[] = R"(
plans:
  free:
    limits:
      - { name: per_minute, quota: 60, window: 1m }
)";

// CheckServable's message for kPlans + `yaml`, "OK" if it passes; the YAML itself must be valid.
std::string CheckOf(const std::string& yaml) {
  absl::StatusOr<config::Config> cfg = config::ParseConfig(absl::StrCat(kPlans, yaml), "s.yaml");
  if (!cfg.ok()) return absl::StrCat("config error: ", cfg.status().message());
  const absl::Status s = CheckServable(*cfg);
  return s.ok() ? "OK" : std::string(s.message());
}

TEST(CheckServableTest, DefaultsAreServable) { EXPECT_EQ(CheckOf(""), "OK"); }

TEST(CheckServableTest, BadPercentEscapeInRedisPasswordIsRefusedWithoutQuotingIt) {
  const std::string error = CheckOf(
      "store:\n  type: redis\n  redis: { url: \"redis://app:s3cr%zzet@10.0.0.5:6379/0\" }\n");
  EXPECT_EQ(error,
            "s.yaml: store.redis.url: redis URL credentials: bad percent-encoding (write a literal "
            "% as %25)");
  EXPECT_THAT(error, Not(HasSubstr("s3cr")));
}

TEST(CheckServableTest, BadRedisPortIsRefused) {
  EXPECT_EQ(CheckOf("store:\n  type: redis\n  redis: { url: \"redis://10.0.0.5:99999/0\" }\n"),
            "s.yaml: store.redis.url: bad redis port (want 1-65535 in digits)");
}

TEST(CheckServableTest, NoPartOfABadRedisUrlIsQuoted) {
  // A password where it does not belong: after a forgotten @, or in a query.
  for (const char* url :
       {"redis://h:SECRETPW", "redis://h:6379/0?password=SECRETPW", "redis://h?password=SECRETPW",
        "redis://SECRET PW", "redis://h/SECRETPW", "redis://[SECRETPW]:1"}) {
    const std::string error =
        CheckOf(absl::StrCat("store:\n  type: redis\n  redis: { url: \"", url, "\" }\n"));
    EXPECT_THAT(error, HasSubstr("s.yaml: store.redis.url: ")) << url;
    EXPECT_THAT(error, Not(HasSubstr("SECRETPW"))) << url;
  }
}

TEST(CheckServableTest, AUserInTheRedisUrlNeedsAPassword) {
  EXPECT_EQ(CheckOf("store:\n  type: redis\n  redis: { url: \"redis://bob@h:6379\" }\n"),
            "s.yaml: store.redis.url: the URL's user needs a password: user:password@, or "
            "SLUICE_REDIS_PASSWORD_FILE");
  EXPECT_EQ(CheckOf("store:\n  type: redis\n  redis: { url: \"redis://bob:@h:6379\" }\n"),
            "s.yaml: store.redis.url: the URL's user needs a password: user:password@, or "
            "SLUICE_REDIS_PASSWORD_FILE");
  EXPECT_EQ(CheckOf("store:\n  type: redis\n  redis: { url: \"redis://bob:pw@h:6379\" }\n"), "OK");
}

TEST(CheckServableTest, RedisUrlIsNotParsedForTheMemoryStore) {
  EXPECT_EQ(CheckOf("store:\n  type: memory\n  redis: { url: \"redis://a:%zz@h/0\" }\n"), "OK");
}

TEST(CheckServableTest, RedissWithTheSystemTrustStoreIsServable) {
  EXPECT_EQ(CheckOf("store:\n  type: redis\n  redis: { url: \"rediss://:pw@10.0.0.5:6379\" }\n"),
            "OK");
}

TEST(CheckServableTest, UnreadableTlsFileIsRefusedNamingTheField) {
  EXPECT_EQ(CheckOf("store:\n  type: redis\n  redis:\n    url: \"rediss://10.0.0.5\"\n"
                    "    tls: { ca_file: /nonexistent-dir/ca.pem }\n"),
            "s.yaml: store.redis.tls.ca_file: /nonexistent-dir/ca.pem: No such file or directory");
}

TEST(CheckServableTest, TlsFilesAreNotLoadedForTheMemoryStore) {
  EXPECT_EQ(CheckOf("store:\n  type: memory\n  redis:\n    url: \"rediss://10.0.0.5\"\n"
                    "    tls: { ca_file: /nonexistent-dir/ca.pem }\n"),
            "OK");
}

TEST(CheckServableTest, SnapshotInAMissingDirectoryIsRefused) {
  EXPECT_EQ(CheckOf("store:\n  memory: { snapshot_path: /nonexistent-dir/state.snap }\n"),
            "s.yaml: store.memory.snapshot_path: directory /nonexistent-dir does not exist");
}

TEST(CheckServableTest, RatelimitConfigIsLoadedAndABadFileIsNamed) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("sluice-rlcheck-" + std::to_string(::getpid())))
          .string();
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/a.yaml") << "domain: a\ndescriptors:\n  - key: k\n"
                                    "    rate_limit: {unit: minute, requests_per_unit: 5}\n";
  EXPECT_EQ(CheckOf("envoy: { ratelimit_config: " + dir + " }\n"), "OK");
  std::ofstream(dir + "/b.yaml") << "domain: b\ndescriptors:\n  - key: k\n"
                                    "    rate_limit: {unit: fortnight, requests_per_unit: 5}\n";
  EXPECT_EQ(CheckOf("envoy: { ratelimit_config: " + dir + " }\n"),
            absl::StrCat("s.yaml: envoy.ratelimit_config: ", dir,
                         "/b.yaml: descriptors[0].rate_limit.unit: unknown unit \"fortnight\" "
                         "(want second, minute, hour, day, week, month or year)"));
  EXPECT_THAT(CheckOf("envoy: { ratelimit_config: " + dir + "/missing.yaml }\n"),
              HasSubstr("envoy.ratelimit_config: " + dir + "/missing.yaml: cannot open"));
  std::filesystem::remove_all(dir);
}

TEST(CheckServableTest, SnapshotInAnExistingDirectoryIsServable) {
  EXPECT_EQ(CheckOf(absl::StrCat("store:\n  memory: { snapshot_path: ",
                                 std::filesystem::temp_directory_path().string(), "/x.snap }\n")),
            "OK");
}

TEST(CheckServableTest, TheRegistryKeptBesideTheSnapshotFollowsTheSnapshotsRules) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("sluice-beside-" + std::to_string(::getpid())))
          .string();
  std::filesystem::create_directories(dir + "/state.snap.registry.db");  // a directory
  EXPECT_EQ(CheckOf("store:\n  memory: { snapshot_path: " + dir + "/state.snap }\n"),
            absl::StrCat("s.yaml: store.memory.snapshot_path: the registry kept beside it "
                         "(registry_path is not set), ",
                         dir, "/state.snap.registry.db, is a directory (want the path of a file)"));
  // With registry_path set, that file is not the registry's.
  EXPECT_EQ(CheckOf("store:\n  memory: { snapshot_path: " + dir +
                    "/state.snap, registry_path: " + dir + "/registry.db }\n"),
            "OK");
  std::filesystem::remove_all(dir);
}

TEST(CheckRegistryFileTest, ReadsTheFileServeWouldOpenAndSaysWhyItIsNoRegistry) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("sluice-regfile-" + std::to_string(::getpid())))
          .string();
  std::filesystem::create_directories(dir);
  absl::StatusOr<config::Config> cfg = config::ParseConfig(
      absl::StrCat(kPlans, "store:\n  memory: { snapshot_path: ", dir, "/state.snap }\n"),
      "s.yaml");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  std::string note;
  EXPECT_TRUE(CheckRegistryFile(*cfg, &note).ok());
  EXPECT_EQ(note, "");  // no file yet: nothing to check, nothing created
  EXPECT_FALSE(std::filesystem::exists(dir + "/state.snap.registry.db"));
  std::ofstream{dir + "/state.snap.registry.db"};  // truncated to nothing
  EXPECT_TRUE(CheckRegistryFile(*cfg, &note).ok());
  EXPECT_EQ(note, absl::StrCat("note: registry ", dir,
                               "/state.snap.registry.db is empty (0 bytes), not a registry: "
                               "restore it from a backup, or remove it to start with an empty "
                               "registry: the plans its subjects are on were not checked"));
  std::filesystem::remove_all(dir);
}

TEST(CheckServableTest, PlaintextKeyAndItsHashAreOneKey) {
  // SHA-256 of "demo-hashed-key".
  EXPECT_THAT(CheckOf("keys:\n"
                      "  - { key: demo-hashed-key, subject: a, plan: free }\n"
                      "  - { key_sha256: "
                      "01bc727c90fb6f9cf915487e84abeb3ba1339efc6ba94f928583977a76bab05e, subject: "
                      "b, plan: free }\n"),
              HasSubstr("s.yaml: keys[1]"));
}

TEST(CheckServableTest, AReadTokenThatIsAlsoTheReadWriteTokenIsRefused) {
  // SHA-256 of "demo-hashed-key".
  constexpr char kDigest[] = "01bc727c90fb6f9cf915487e84abeb3ba1339efc6ba94f928583977a76bab05e";
  EXPECT_EQ(CheckOf(absl::StrCat("server:\n  admin_token: demo-hashed-key\n  admin_tokens:\n"
                                 "    - { name: ok, token: another-token-0123, access: read }\n"
                                 "    - { name: dash, token_sha256: ",
                                 kDigest, ", access: read }\n")),
            "s.yaml: server.admin_tokens[1]: the same token as server.admin_token (give each token "
            "once)");
  EXPECT_EQ(CheckOf("server:\n  admin_token: shared-admin-token\n  admin_tokens:\n"
                    "    - { name: dash, token: shared-admin-token, access: read }\n"),
            "s.yaml: server.admin_tokens[0]: the same token as server.admin_token (give each token "
            "once)");
  EXPECT_EQ(CheckOf("server:\n  admin_token: demo-hashed-key\n  admin_tokens:\n"
                    "    - { name: dash, token: another-token-0123, access: read }\n"),
            "OK");
}

// Sets an environment variable for one scope (the test process is this test's alone).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() { unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

TEST(CheckServableTest, TheEnvironmentsAdminTokenIsCheckedAsServeReadsIt) {
  const std::string entry =
      "server:\n  admin_tokens:\n    - { name: dash, token: shared-admin-token, access: read }\n";
  EXPECT_EQ(CheckOf(entry), "OK");
  {
    ScopedEnv env("SLUICE_ADMIN_TOKEN", "shared-admin-token");
    EXPECT_EQ(CheckOf(entry),
              "s.yaml: server.admin_tokens[0]: the same token as SLUICE_ADMIN_TOKEN (give each "
              "token once)");
    // The file's token comes first: the variable is not read then.
    EXPECT_EQ(CheckOf("server:\n  admin_token: file-admin-token\n  admin_tokens:\n"
                      "    - { name: dash, token: shared-admin-token, access: read }\n"),
              "OK");
  }
  {
    ScopedEnv env("SLUICE_ADMIN_TOKEN", "has a space");
    EXPECT_EQ(CheckOf(""), "SLUICE_ADMIN_TOKEN: must be printable ASCII without spaces");
  }
  const std::string path = ::testing::TempDir() + "/admin-token-" + std::to_string(getpid());
  std::ofstream(path) << "shared-admin-token\n";
  {
    ScopedEnv env("SLUICE_ADMIN_TOKEN_FILE", path);
    EXPECT_EQ(CheckOf(entry),
              "s.yaml: server.admin_tokens[0]: the same token as SLUICE_ADMIN_TOKEN_FILE (give "
              "each token once)");
    absl::StatusOr<config::Config> cfg = config::ParseConfig(kPlans, "s.yaml");
    ASSERT_TRUE(cfg.ok());
    absl::StatusOr<AdminTokenSource> resolved = ResolveAdminToken(*cfg);
    ASSERT_TRUE(resolved.ok()) << resolved.status();
    EXPECT_EQ(resolved->token, "shared-admin-token");  // one trailing newline stripped
  }
  std::filesystem::remove(path);
  {
    ScopedEnv env("SLUICE_ADMIN_TOKEN_FILE", path);
    EXPECT_THAT(CheckOf(""), HasSubstr("SLUICE_ADMIN_TOKEN_FILE: " + path + ": cannot open"));
  }
}

TEST(CheckServableTest, PlanesOnTheSamePortOfAWildcardOverlap) {
  EXPECT_EQ(CheckOf("server: { listen: \"0.0.0.0:8080\", admin_listen: \"127.0.0.1:8080\" }\n"),
            "s.yaml: server.admin_listen: overlaps server.listen (port 8080 on the same or a "
            "wildcard address)");
  EXPECT_THAT(CheckOf("server: { listen: \"[::]:8080\", admin_listen: \"127.0.0.1:8080\" }\n"),
              HasSubstr("overlaps"));
  EXPECT_THAT(
      CheckOf(
          "server: { listen: \"127.0.0.1:8080\", admin_listen: \"[::ffff:127.0.0.1]:8080\" }\n"),
      HasSubstr("overlaps"));
}

TEST(CheckServableTest, GrpcListenerOverlappingAnotherPlaneIsRefused) {
  EXPECT_EQ(CheckOf("server: { listen: \"127.0.0.1:8080\", grpc_listen: \"0.0.0.0:8080\" }\n"),
            "s.yaml: server.grpc_listen: overlaps server.listen (port 8080 on the same or a "
            "wildcard address)");
  EXPECT_THAT(CheckOf("server: { admin_listen: \"127.0.0.1:9090\", grpc_listen: \"[::]:9090\" }\n"),
              HasSubstr("overlaps server.admin_listen"));
  EXPECT_EQ(CheckOf("server: { grpc_listen: \"127.0.0.1:8081\" }\n"), "OK");
}

TEST(CheckServableTest, PlanesOnDistinctAddressesOrPortsAreServable) {
  EXPECT_EQ(CheckOf("server: { listen: \"127.0.0.1:8080\", admin_listen: \"127.0.0.2:8080\" }\n"),
            "OK");
  EXPECT_EQ(CheckOf("server: { listen: \"0.0.0.0:8080\", admin_listen: \"0.0.0.0:9090\" }\n"),
            "OK");
}

}  // namespace
}  // namespace sluice::server
