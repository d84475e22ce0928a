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

// A sender that keeps what it is given — how each command was sent, and its callbacks — for the
// test to answer (later, as CommandSender requires).
class RecordingSender final : public CommandSender {
 public:
  enum class Way { kSend, kSendShared, kDespiteBreaker };
  struct Sent {
    Way way;
    LuaScript::Argv argv;
    std::shared_ptr<const LuaScript::Argv> shared;  // SendShared's
    Callback done;
    LateCallback late;
  };

  void Start() override {}
  void Stop() override {}
  void Send(std::vector<std::string> argv, Callback done, LateCallback late) override {
    sent.push_back({Way::kSend, std::move(argv), nullptr, std::move(done), std::move(late)});
  }
  void SendShared(std::shared_ptr<const std::vector<std::string>> argv, Callback done,
                  LateCallback late) override {
    sent.push_back({Way::kSendShared, *argv, argv, std::move(done), std::move(late)});
  }
  void SendDespiteBreaker(std::vector<std::string> argv, Callback done,
                          LateCallback late) override {
    sent.push_back(
        {Way::kDespiteBreaker, std::move(argv), nullptr, std::move(done), std::move(late)});
  }
  [[nodiscard]] bool connected() const override { return true; }

  // Answers the `i`-th command sent (its callback taken out first: an answer may send more).
  void Answer(size_t i, Reply reply) {
    Callback done = std::move(sent[i].done);
    std::move(done)(std::move(reply));
  }

  std::vector<Sent> sent;
};

Reply ErrorReply(std::string text) { return Reply{.type = Reply::Type::kError, .str = text}; }
Reply StringReply(std::string text) { return Reply{.type = Reply::Type::kString, .str = text}; }

TEST(LuaScriptCommandTest, AnEvalShaCommandNamesTheScriptByItsSha) {
  const LuaScript script(kEcho);
  EXPECT_EQ(script.send(), LuaScript::Send::kEvalSha);
  EXPECT_EQ(script.Command(2), (LuaScript::Argv{"EVALSHA", Sha1Hex(kEcho), "2"}));
}

TEST(LuaScriptCommandTest, AnEvalCommandCarriesTheScriptsText) {
  const LuaScript script(kEcho, LuaScript::Send::kEval);
  EXPECT_EQ(script.Command(1), (LuaScript::Argv{"EVAL", "return ARGV[1]", "1"}));
}

TEST(LuaScriptCommandTest, ACommandHasRoomForTheWordsTheCallerAppends) {
  EXPECT_GE(LuaScript(kEcho).Command(2, 5).capacity(), 8u);
  EXPECT_GE(LuaScript(kEcho, LuaScript::Send::kEval).Command(2, 5).capacity(), 8u);
}

// An EVAL command goes out once, as the caller made it (not copied), and whatever comes back —
// even a NOSCRIPT, which only EVALSHA can earn — is the caller's answer; so is a late reply.
TEST(LuaScriptSendTest, AnEvalCommandIsSentOnceAsItIs) {
  const LuaScript script(kEcho, LuaScript::Send::kEval);
  RecordingSender sender;
  auto argv = std::make_shared<const LuaScript::Argv>([&] {
    LuaScript::Argv a = script.Command(0);
    a.push_back("x");
    return a;
  }());
  std::optional<absl::StatusOr<Reply>> reply;
  std::optional<Reply> late;
  script.Run(
      &sender, argv, [&](absl::StatusOr<Reply> r) { reply = std::move(r); },
      [&](Reply r) { late = std::move(r); });
  ASSERT_EQ(sender.sent.size(), 1u);
  EXPECT_EQ(sender.sent[0].way, RecordingSender::Way::kSendShared);
  EXPECT_EQ(sender.sent[0].shared, argv);
  sender.Answer(0, ErrorReply("NOSCRIPT No matching script."));
  ASSERT_TRUE(reply.has_value());
  ASSERT_TRUE(reply->ok());
  EXPECT_EQ((*reply)->str, "NOSCRIPT No matching script.");
  EXPECT_EQ(sender.sent.size(), 1u);
  ASSERT_NE(sender.sent[0].late, nullptr);
  std::move(sender.sent[0].late)(StringReply("x"));
  ASSERT_TRUE(late.has_value());
  EXPECT_EQ(late->str, "x");
}

TEST(LuaScriptSendTest, AnEvalCommandDespiteTheBreakerGoesOutDespiteIt) {
  const LuaScript script(kEcho, LuaScript::Send::kEval);
  RecordingSender sender;
  std::optional<absl::StatusOr<Reply>> reply;
  script.Run(&sender, std::make_shared<const LuaScript::Argv>(script.Command(0)),
             [&](absl::StatusOr<Reply> r) { reply = std::move(r); }, nullptr,
             {.despite_breaker = true});
  ASSERT_EQ(sender.sent.size(), 1u);
  EXPECT_EQ(sender.sent[0].way, RecordingSender::Way::kDespiteBreaker);
  EXPECT_EQ(sender.sent[0].argv, script.Command(0));
  sender.Answer(0, StringReply("ok"));
  ASSERT_TRUE(reply.has_value() && reply->ok());
  EXPECT_EQ((*reply)->str, "ok");
}

// Despite the breaker, an EVALSHA command, the SCRIPT LOAD its NOSCRIPT needs and its retry all
// go out despite it; without the option, none does.
TEST(LuaScriptSendTest, AnEvalShaCommandDespiteTheBreakerIsLoadedAndRetriedDespiteIt) {
  for (const bool despite : {true, false}) {
    SCOPED_TRACE(despite ? "despite the breaker" : "default");
    const LuaScript script(kEcho);
    RecordingSender sender;
    std::optional<absl::StatusOr<Reply>> reply;
    script.Run(&sender, std::make_shared<const LuaScript::Argv>(script.Command(0)),
               [&](absl::StatusOr<Reply> r) { reply = std::move(r); }, nullptr,
               {.despite_breaker = despite});
    ASSERT_EQ(sender.sent.size(), 1u);
    sender.Answer(0, ErrorReply("NOSCRIPT No matching script."));
    ASSERT_EQ(sender.sent.size(), 3u);  // the load and the retry, together
    EXPECT_EQ(sender.sent[1].argv, (LuaScript::Argv{"SCRIPT", "LOAD", std::string(kEcho)}));
    EXPECT_EQ(sender.sent[2].argv, script.Command(0));
    using Way = RecordingSender::Way;
    EXPECT_EQ(sender.sent[0].way, despite ? Way::kDespiteBreaker : Way::kSendShared);
    EXPECT_EQ(sender.sent[1].way, despite ? Way::kDespiteBreaker : Way::kSend);
    EXPECT_EQ(sender.sent[2].way, despite ? Way::kDespiteBreaker : Way::kSendShared);
    sender.Answer(1, StringReply(Sha1Hex(kEcho)));
    sender.Answer(2, StringReply("ran"));
    ASSERT_TRUE(reply.has_value() && reply->ok());
    EXPECT_EQ((*reply)->str, "ran");
  }
}

// EVAL on a real Redis: the script runs with its text in every command; nothing is loaded and
// no EVALSHA is sent.
TEST_F(LuaScriptTest, AnEvalScriptGoesOutAsEvalAndLoadsNothing) {
  const LuaScript script(kEcho, LuaScript::Send::kEval);
  ASSERT_TRUE(SendAndWait(io_, *conn_, {"SCRIPT", "FLUSH"}).ok());
  ASSERT_TRUE(SendAndWait(io_, *conn_, {"CONFIG", "RESETSTAT"}).ok());
  std::vector<std::optional<absl::StatusOr<Reply>>> replies(10);
  for (int i = 0; i < 10; ++i) {
    LuaScript::Argv argv = script.Command(0, 1);
    argv.push_back(std::to_string(i));
    script.Run(conn_.get(), std::make_shared<const LuaScript::Argv>(std::move(argv)),
               [&replies, i](absl::StatusOr<Reply> r) { replies[i] = std::move(r); });
  }
  ASSERT_TRUE(PumpUntil(io_, [&] { return replies.back().has_value(); }));
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(replies[i].has_value() && replies[i]->ok()) << i;
    EXPECT_EQ((*replies[i])->str, std::to_string(i));
  }
  EXPECT_EQ(Calls("eval"), 10);
  EXPECT_EQ(Calls("evalsha"), 0);
  EXPECT_EQ(Calls("script|load"), 0);
}

// A script Redis cannot run, sent with EVAL: its error reply is the caller's answer, after one
// command and no load.
TEST_F(LuaScriptTest, AnEvalScriptsErrorIsItsReplyAfterOneCommand) {
  const LuaScript broken("this is not lua", LuaScript::Send::kEval);
  ASSERT_TRUE(SendAndWait(io_, *conn_, {"CONFIG", "RESETSTAT"}).ok());
  std::optional<absl::StatusOr<Reply>> reply;
  broken.Run(conn_.get(), std::make_shared<const LuaScript::Argv>(broken.Command(0)),
             [&](absl::StatusOr<Reply> r) { reply = std::move(r); });
  ASSERT_TRUE(PumpUntil(io_, [&] { return reply.has_value(); }));
  ASSERT_TRUE(reply->ok()) << reply->status();
  EXPECT_TRUE((*reply)->is_error());
  EXPECT_EQ(Calls("eval"), 1);
  EXPECT_EQ(Calls("script|load"), 0);
  EXPECT_EQ(Calls("evalsha"), 0);
}

}  // namespace
}  // namespace sluice::redis
