#include "sluice/store/redis/lua_script.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "gtest/gtest.h"
#include "sluice/store/redis/connection.h"
#include "sluice/store/redis/test_redis_server.h"

namespace sluice::redis {
namespace {

using testing_util::PumpUntil;
using testing_util::SendAndWait;
using namespace std::chrono_literals;

constexpr std::string_view kEcho = "return ARGV[1]";

class LuaScriptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    port_ = testing_util::FreePort();
    ASSERT_TRUE(server_.Start(port_)) << "cannot start " << testing_util::kRedisServer;
    conn_ = std::make_unique<Connection>(
        io_,
        ConnectionOptions{
            .port = port_, .command_timeout = 2s, .reconnect_min = 10ms, .reconnect_max = 100ms});
    conn_->Start();
    ASSERT_TRUE(PumpUntil(io_, [&] { return conn_->connected(); }));
  }

  // The calls Redis counted of `command` ("script|load", "evalsha") since the last CONFIG
  // RESETSTAT.
  int64_t Calls(std::string_view command) {
    absl::StatusOr<Reply> info = SendAndWait(io_, *conn_, {"INFO", "commandstats"});
    EXPECT_TRUE(info.ok()) << info.status();
    const std::string field = "cmdstat_" + std::string(command) + ":calls=";
    const size_t at = info->str.find(field);
    if (at == std::string::npos) return 0;
    return std::stoll(info->str.substr(at + field.size()));
  }

  // Runs `n` calls of `script` at once; their replies in order.
  std::vector<absl::StatusOr<Reply>> RunTogether(const LuaScript& script, int n) {
    std::vector<std::optional<absl::StatusOr<Reply>>> replies(n);
    for (int i = 0; i < n; ++i) {
      script.Run(conn_.get(),
                 std::make_shared<const LuaScript::Argv>(
                     LuaScript::Argv{"EVALSHA", script.sha(), "0", std::to_string(i)}),
                 [&replies, i](absl::StatusOr<Reply> r) { replies[i] = std::move(r); });
    }
    EXPECT_TRUE(PumpUntil(io_, [&] {
      for (const auto& r : replies) {
        if (!r.has_value()) return false;
      }
      return true;
    }));
    std::vector<absl::StatusOr<Reply>> out;
    for (auto& r : replies) out.push_back(r.value_or(absl::InternalError("no reply")));
    return out;
  }

  uint16_t port_ = 0;
  testing_util::RedisServer server_;
  boost::asio::io_context io_;
  std::unique_ptr<Connection> conn_;
};

TEST_F(LuaScriptTest, ShaIsTheScriptsSha1InHex) {
  EXPECT_EQ(Sha1Hex(""), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
  EXPECT_EQ(LuaScript(kEcho).sha(), Sha1Hex(kEcho));
}

// A burst on a connection to a Redis without the script: every command is answered NOSCRIPT,
// and one SCRIPT LOAD serves them all.
TEST_F(LuaScriptTest, ABurstThatFindsNoScriptLoadsItOnce) {
  const LuaScript script(kEcho);
  ASSERT_TRUE(SendAndWait(io_, *conn_, {"CONFIG", "RESETSTAT"}).ok());
  std::vector<absl::StatusOr<Reply>> replies = RunTogether(script, 100);
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(replies[i].ok()) << i << ": " << replies[i].status();
    EXPECT_EQ(replies[i]->str, std::to_string(i));
  }
  EXPECT_EQ(Calls("script|load"), 1);
  EXPECT_EQ(Calls("evalsha"), 200);  // each once refused, once run
}

// SCRIPT FLUSH (or a restart, a failover) between two bursts: the second loads it again, once.
TEST_F(LuaScriptTest, AScriptFlushedMeanwhileIsLoadedAgainOnce) {
  const LuaScript script(kEcho);
  ASSERT_TRUE(RunTogether(script, 10).back().ok());
  ASSERT_TRUE(SendAndWait(io_, *conn_, {"SCRIPT", "FLUSH"}).ok());
  ASSERT_TRUE(SendAndWait(io_, *conn_, {"CONFIG", "RESETSTAT"}).ok());
  for (const absl::StatusOr<Reply>& r : RunTogether(script, 50)) ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Calls("script|load"), 1);
}

// A load that fails (here: the script does not compile) is what the caller is told, after the
// retries, rather than NOSCRIPT.
TEST_F(LuaScriptTest, AFailedLoadIsReportedToTheCaller) {
  const LuaScript broken("this is not lua");
  std::vector<absl::StatusOr<Reply>> replies = RunTogether(broken, 3);
  for (const absl::StatusOr<Reply>& r : replies) {
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("SCRIPT LOAD"), std::string_view::npos) << r.status();
  }
}

// Commands that find the script run once each: NOSCRIPT means the script did not run, and
// nothing else is sent again.
TEST_F(LuaScriptTest, ACommandThatRanIsNeverSentAgain) {
  const LuaScript incr("return redis.call('INCR', KEYS[1])");
  std::vector<std::optional<absl::StatusOr<Reply>>> replies(20);
  for (int i = 0; i < 20; ++i) {
    incr.Run(
        conn_.get(),
        std::make_shared<const LuaScript::Argv>(LuaScript::Argv{"EVALSHA", incr.sha(), "1", "n"}),
        [&replies, i](absl::StatusOr<Reply> r) { replies[i] = std::move(r); });
  }
  ASSERT_TRUE(PumpUntil(io_, [&] { return replies.back().has_value(); }));
  absl::StatusOr<Reply> n = SendAndWait(io_, *conn_, {"GET", "n"});
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->str, "20");
}

}  // namespace
}  // namespace sluice::redis
