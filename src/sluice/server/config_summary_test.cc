#include "sluice/server/config_summary.h"

#include <map>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::server {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(UrlHostTest, KeepsOnlyTheHost) {
  EXPECT_EQ(UrlHost("https://hooks.example.com/T000/B000/secret-path?x=1"), "hooks.example.com");
  EXPECT_EQ(UrlHost("redis://:s3cret@10.0.0.5:6380/2"), "10.0.0.5");
  EXPECT_EQ(UrlHost("smtps://user:pa@ss@mail.example.com:465"), "mail.example.com");
  EXPECT_EQ(UrlHost("http://[::1]:8080/hook"), "[::1]");
  EXPECT_EQ(UrlHost("not a url"), "");
}

// A getenv over a fixed map.
auto Env(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

TEST(AppliedEnvironmentTest, NamesTheVariablesThatChangedTheConfiguration) {
  config::Config cfg;
  cfg.store.redis.url_source = "SLUICE_REDIS_URL";
  cfg.store.redis.password = "from-a-file";
  EXPECT_THAT(AppliedEnvironment(cfg, Env({{"SLUICE_ADMIN_TOKEN", "t"}})),
              ElementsAre("SLUICE_REDIS_URL", "SLUICE_REDIS_PASSWORD_FILE", "SLUICE_ADMIN_TOKEN"));
}

TEST(AppliedEnvironmentTest, AnAdminTokenInTheFileWinsOverTheVariables) {
  config::Config cfg;
  cfg.server.admin_token = "in-the-file";
  EXPECT_THAT(AppliedEnvironment(cfg, Env({{"SLUICE_ADMIN_TOKEN", "t"}})), IsEmpty());
}

TEST(AppliedEnvironmentTest, TheTokenFileCountsOnlyWithoutTheTokenVariable) {
  config::Config cfg;
  EXPECT_THAT(AppliedEnvironment(cfg, Env({{"SLUICE_ADMIN_TOKEN_FILE", "/run/t"}})),
              ElementsAre("SLUICE_ADMIN_TOKEN_FILE"));
}

TEST(DescribeRegistryTest, SaysWhereTheRegistryLivesOrThatNothingKeepsIt) {
  config::Config cfg;
  EXPECT_EQ(DescribeRegistry(cfg),
            "in memory only, lost at exit (neither store.memory.registry_path nor snapshot_path "
            "is set)");
  cfg.store.memory.snapshot_path = "/var/lib/sluice/state.snap";
  EXPECT_EQ(DescribeRegistry(cfg),
            "/var/lib/sluice/state.snap.registry.db (beside the snapshot; "
            "store.memory.registry_path is not set)");
  cfg.store.memory.registry_path = "/var/lib/sluice/registry.db";
  EXPECT_EQ(DescribeRegistry(cfg), "/var/lib/sluice/registry.db");
  cfg.store.type = config::StoreType::kRedis;
  cfg.store.redis.key_prefix = "sl";
  EXPECT_EQ(DescribeRegistry(cfg), "in Redis, under sl:{registry}");
}

}  // namespace
}  // namespace sluice::server
