#include "sluice/store/redis/connection.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/common/stderr_capture.h"
#include "sluice/store/redis/test_redis_server.h"

extern char** environ;

namespace sluice::redis {
namespace {

using testing_util::CanConnect;
using testing_util::FreePort;
using testing_util::kRedisServer;
using testing_util::PumpUntil;
using testing_util::RedisServer;
using testing_util::SendAndWait;

namespace asio = boost::asio;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class ConnectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(access(kRedisServer, X_OK), 0) << kRedisServer << " is required for these tests";
    port_ = FreePort();
    ASSERT_TRUE(server_.Start(port_));
  }

  void TearDown() override { server_.Kill(); }

  ConnectionOptions Options() {
    return {.port = port_, .command_timeout = 1s, .reconnect_min = 10ms, .reconnect_max = 100ms};
  }

  template <typename Pred>
  bool RunUntil(Pred done, std::chrono::milliseconds timeout = 5s) {
    return PumpUntil(io_, done, timeout);
  }

  bool WaitConnected(Connection& conn) {
    return RunUntil([&] { return conn.connected(); });
  }

  absl::StatusOr<Reply> Call(Connection& conn, std::vector<std::string> argv) {
    return SendAndWait(io_, conn, std::move(argv));
  }

  asio::io_context io_;
  uint16_t port_ = 0;
  RedisServer server_;
};

TEST_F(ConnectionTest, SetThenGetRoundTrips) {
  Connection conn(io_, Options());
  conn.Start();
  ASSERT_TRUE(WaitConnected(conn));

  const std::string value("v\r\n\0x", 5);  // any bytes
  auto set = Call(conn, {"SET", "k", value});
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_TRUE(set->is_status());
  EXPECT_EQ(set->str, "OK");

  auto get = Call(conn, {"GET", "k"});
  ASSERT_TRUE(get.ok()) << get.status();
  ASSERT_TRUE(get->is_string());
  EXPECT_EQ(get->str, value);
}

TEST_F(ConnectionTest, SelectsTheConfiguredDbBeforeAnyCommand) {
  ConnectionOptions db1 = Options();
  db1.db = 1;
  Connection in_db1(io_, db1);
  Connection in_db0(io_, Options());
  in_db1.Start();
  in_db0.Start();
  ASSERT_TRUE(WaitConnected(in_db1));
  ASSERT_TRUE(WaitConnected(in_db0));

  ASSERT_TRUE(Call(in_db1, {"SET", "k", "one"}).ok());
  auto from_db0 = Call(in_db0, {"GET", "k"});
  ASSERT_TRUE(from_db0.ok()) << from_db0.status();
  EXPECT_TRUE(from_db0->is_nil());
  auto from_db1 = Call(in_db1, {"GET", "k"});
  ASSERT_TRUE(from_db1.ok()) << from_db1.status();
  EXPECT_EQ(from_db1->str, "one");
}

TEST_F(ConnectionTest, AuthenticatesAsTheUrlsUserWithTheDecodedPassword) {
  Connection admin(io_, Options());
  admin.Start();
  ASSERT_TRUE(WaitConnected(admin));
  auto created =
      Call(admin, {"ACL", "SETUSER", "alice", "on", ">p@ss/w%rd: x", "~*", "&*", "+@all"});
  ASSERT_TRUE(created.ok() && created->is_status()) << created.status();

  auto parsed =
      ParseRedisUrl("redis://alice:p%40ss%2Fw%25rd%3A%20x@127.0.0.1:" + std::to_string(port_));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ConnectionOptions options = Options();
  options.username = parsed->username;
  options.password = parsed->password;
  Connection alice(io_, options);
  alice.Start();
  ASSERT_TRUE(WaitConnected(alice));
  auto who = Call(alice, {"ACL", "WHOAMI"});
  ASSERT_TRUE(who.ok()) << who.status();
  EXPECT_EQ(who->str, "alice");

  // The same password still encoded is a wrong password: Redis logs the failed AUTH and the
  // connection never counts as connected.
  options.password = "p%40ss%2Fw%25rd%3A%20x";
  Connection wrong(io_, options);
  wrong.Start();
  ASSERT_TRUE(RunUntil([&] {
    auto log = Call(admin, {"ACL", "LOG"});
    return log.ok() && log->is_array() && !log->elements.empty();
  }));
  EXPECT_FALSE(wrong.connected());
}

TEST(ConnectionLogTest, ADatabaseTheServerDoesNotHaveIsRefusedPlainlyAsAnError) {
  const uint16_t port = FreePort();
  RedisServer server;
  ASSERT_TRUE(server.Start(port, {"--databases", "4"}));
  std::optional<StderrCapture> capture(std::in_place);
  boost::asio::io_context io;
  {
    Connection conn(io, ConnectionOptions{.port = port,
                                          .db = 4,
                                          .command_timeout = 1s,
                                          .reconnect_min = 10ms,
                                          .reconnect_max = 100ms});
    conn.Start();
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (capture->Text().find("redis connection failed") == std::string::npos &&
           std::chrono::steady_clock::now() < deadline) {
      io.run_one_for(10ms);
    }
    EXPECT_FALSE(conn.connected());
    conn.Stop();
  }
  const std::string log = capture->Text();
  capture.reset();
  EXPECT_THAT(log, ::testing::HasSubstr(R"("level":"error")"));
  EXPECT_THAT(log, ::testing::HasSubstr("SELECT 4 refused"));
  EXPECT_THAT(log, ::testing::HasSubstr("the server has no database 4"));
}

TEST(ConnectionLogTest, ARefusedAuthNeverLogsThePassword) {
  // With AUTH renamed away, Redis's error reply quotes the command's arguments: the password.
  const uint16_t port = FreePort();
  RedisServer server;
  ASSERT_TRUE(server.Start(port, {"--rename-command", "AUTH", ""}));
  const std::string password = "hunter2-not-for-logs";
  std::optional<StderrCapture> capture(std::in_place);
  const auto read_log = [&] { return capture->Text(); };
  boost::asio::io_context io;
  {
    Connection conn(io, ConnectionOptions{.port = port,
                                          .password = password,
                                          .command_timeout = 1s,
                                          .reconnect_min = 10ms,
                                          .reconnect_max = 100ms});
    conn.Start();
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (read_log().find("redis connection failed") == std::string::npos &&
           std::chrono::steady_clock::now() < deadline) {
      io.run_one_for(10ms);
    }
    conn.Stop();
  }
  const std::string log = read_log();
  capture.reset();
  EXPECT_THAT(log, ::testing::HasSubstr("AUTH refused (ERR)"));
  EXPECT_EQ(log.find(password), std::string::npos) << log;
}

TEST_F(ConnectionTest, CommandsIssuedTogetherArePipelinedAndAnsweredInOrder) {
  Connection conn(io_, Options());
  conn.Start();
  ASSERT_TRUE(WaitConnected(conn));
  const uint64_t writes_before = conn.writes();
  const uint64_t sent_before = conn.commands_sent();

  constexpr int kCommands = 1000;
  std::vector<int> order;
  std::vector<int64_t> values;
  for (int i = 0; i < kCommands; ++i) {
    conn.Send({"INCR", "counter"}, [&, i](absl::StatusOr<Reply> r) {
      order.push_back(i);
      values.push_back(r.ok() && r->is_integer() ? r->integer : -1);
    });
  }
  ASSERT_TRUE(RunUntil([&] { return order.size() == kCommands; }));

  for (int i = 0; i < kCommands; ++i) {
    ASSERT_EQ(order[i], i);
    ASSERT_EQ(values[i], i + 1);
  }
  const uint64_t writes = conn.writes() - writes_before;
  const uint64_t sent = conn.commands_sent() - sent_before;
  EXPECT_EQ(sent, uint64_t{kCommands});
  EXPECT_LT(writes, sent);
  std::cout << "pipelining: " << sent << " commands in " << writes << " writes\n";
  RecordProperty("writes", static_cast<int>(writes));
}

// What a server thread does when one wake-up reads several requests: each handler sends its own
// command. They leave in one write (the write waits for the handlers already queued), not the
// first alone and the rest after it — or, with more than flush_every of them, in a write per
// flush_every commands and one for the rest.
// On a connection with `flush_every`, sends each batch's INCRs from handlers of their own, all of
// a batch posted before any runs (the requests read in one wake-up); returns the writes per batch.
std::vector<uint64_t> WritesPerWakeUp(asio::io_context& io, ConnectionOptions options,
                                      int flush_every, const std::vector<int>& batches) {
  options.flush_every = flush_every;
  Connection conn(io, options);
  conn.Start();
  if (!PumpUntil(
          io, [&] { return conn.connected(); }, 5s)) {
    ADD_FAILURE() << "no connection";
    return {};
  }
  std::vector<uint64_t> writes;
  int sent = 0;
  for (const int handlers : batches) {
    const uint64_t writes_before = conn.writes();
    int answered = 0;
    for (int i = 0; i < handlers; ++i) {
      boost::asio::post(io, [&] {
        conn.Send({"INCR", "handlers"}, [&](absl::StatusOr<Reply> r) {
          if (r.ok() && r->is_integer()) ++answered;
        });
      });
    }
    EXPECT_TRUE(PumpUntil(
        io, [&] { return answered == handlers; }, 5s));
    writes.push_back(conn.writes() - writes_before);
    sent += handlers;
  }
  EXPECT_EQ(conn.commands_sent(), static_cast<uint64_t>(sent));
  return writes;
}

TEST_F(ConnectionTest, CommandsOfOneWakeUpLeaveInWritesOfFlushEvery) {
  // Fewer than flush_every wait for the rest of the wake-up and leave together; every flush_every
  // commands leave at once (Redis starts on them while the rest are read).
  EXPECT_THAT(WritesPerWakeUp(io_, Options(), 4, {3, 8, 10}), ElementsAre(1u, 2u, 3u));
}

TEST_F(ConnectionTest, ALargeFlushEveryKeepsAWakeUpInOneWrite) {
  EXPECT_THAT(WritesPerWakeUp(io_, Options(), 1000, {50}), ElementsAre(1u));
}

TEST_F(ConnectionTest, ErrorReplyIsAnOkResultOfTypeError) {
  Connection conn(io_, Options());
  conn.Start();
  ASSERT_TRUE(WaitConnected(conn));

  auto reply = Call(conn, {"NOSUCHCOMMAND", "x"});
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_TRUE(reply->is_error());
  EXPECT_THAT(reply->str, HasSubstr("ERR"));

  auto after = Call(conn, {"PING"});  // the connection is still usable
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->str, "PONG");
}

TEST_F(ConnectionTest, SlowReplyTimesOutAndTheLateReplyIsDiscarded) {
  ConnectionOptions fast = Options();
  fast.command_timeout = 50ms;
  Connection conn(io_, fast);
  Connection other(io_, Options());
  conn.Start();
  other.Start();
  ASSERT_TRUE(WaitConnected(conn));
  ASSERT_TRUE(WaitConnected(other));

  std::optional<absl::StatusOr<Reply>> sleep_result;
  other.Send({"DEBUG", "SLEEP", "0.3"},
             [&](absl::StatusOr<Reply> r) { sleep_result = std::move(r); });

  // The server may not be asleep yet when the first command arrives; the first command that times
  // out is the one under test.
  std::optional<Clock::duration> elapsed;
  const auto give_up = Clock::now() + 2s;
  while (!elapsed && Clock::now() < give_up) {
    std::optional<absl::StatusOr<Reply>> result;
    const auto start = Clock::now();
    conn.Send({"ECHO", "early"}, [&](absl::StatusOr<Reply> r) { result = std::move(r); });
    ASSERT_TRUE(RunUntil([&] { return result.has_value(); }));
    if (result->ok()) continue;
    ASSERT_EQ(result->status().code(), absl::StatusCode::kDeadlineExceeded) << result->status();
    elapsed = Clock::now() - start;
  }
  ASSERT_TRUE(elapsed.has_value()) << "no command timed out";
  EXPECT_LT(*elapsed, fast.command_timeout + 50ms);

  ASSERT_TRUE(RunUntil([&] { return sleep_result.has_value(); }));
  ASSERT_TRUE(sleep_result->ok()) << sleep_result->status();
  ASSERT_FALSE((*sleep_result)->is_error()) << (*sleep_result)->str;

  auto next = Call(conn, {"ECHO", "mine"});
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->str, "mine");
}

TEST_F(ConnectionTest, ReplyAfterTheTimeoutGoesToTheLateCallback) {
  ConnectionOptions fast = Options();
  fast.command_timeout = 50ms;
  fast.breaker_failures = 0;
  Connection conn(io_, fast);
  conn.Start();
  ASSERT_TRUE(WaitConnected(conn));

  server_.Pause();
  std::optional<absl::StatusOr<Reply>> result;
  std::optional<Reply> late;
  conn.Send(
      {"INCR", "k"}, [&](absl::StatusOr<Reply> r) { result = std::move(r); },
      [&](Reply r) { late = std::move(r); });
  ASSERT_TRUE(RunUntil([&] { return result.has_value(); }));
  EXPECT_EQ(result->status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_FALSE(late.has_value());
  server_.Resume();

  // The command did run: its reply reaches the late callback, and only it.
  ASSERT_TRUE(RunUntil([&] { return late.has_value(); }));
  EXPECT_EQ(late->integer, 1);
  auto next = Call(conn, {"GET", "k"});
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->str, "1");
}

TEST_F(ConnectionTest, LostServerFailsPendingCommandsAndReconnectsAfterRestart) {
  Connection conn(io_, Options());
  conn.Start();
  ASSERT_TRUE(WaitConnected(conn));

  std::optional<absl::StatusOr<Reply>> blocked;
  conn.Send({"BLPOP", "never-pushed", "0"},
            [&](absl::StatusOr<Reply> r) { blocked = std::move(r); });
  server_.Kill();
  ASSERT_TRUE(RunUntil([&] { return blocked.has_value(); }));
  EXPECT_EQ(blocked->status().code(), absl::StatusCode::kUnavailable) << blocked->status();

  auto while_down = Call(conn, {"PING"});
  EXPECT_EQ(while_down.status().code(), absl::StatusCode::kUnavailable) << while_down.status();

  ASSERT_TRUE(server_.Start(port_));
  absl::StatusOr<Reply> ping = absl::UnavailableError("not tried");
  const auto deadline = Clock::now() + 10s;
  while (Clock::now() < deadline) {
    ping = Call(conn, {"PING"});
    if (ping.ok()) break;
    RunUntil([] { return false; }, 20ms);  // let the reconnect loop make progress
  }
  ASSERT_TRUE(ping.ok()) << ping.status();
  EXPECT_EQ(ping->str, "PONG");
}

TEST_F(ConnectionTest, SendWhileDisconnectedFailsWithUnavailableAfterSendReturns) {
  Connection conn(io_, Options());  // never started
  bool called = false;
  absl::Status status;
  conn.Send({"PING"}, [&](absl::StatusOr<Reply> r) {
    called = true;
    status = r.status();
  });
  EXPECT_FALSE(called);  // posted, not run inside Send
  ASSERT_TRUE(RunUntil([&] { return called; }));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
}

TEST_F(ConnectionTest, CommandsOverMaxPendingAreRejected) {
  ConnectionOptions options = Options();
  options.max_pending = 2;
  Connection conn(io_, options);
  conn.Start();
  ASSERT_TRUE(WaitConnected(conn));

  std::vector<absl::StatusCode> codes;
  for (int i = 0; i < 3; ++i) {
    conn.Send({"PING"}, [&](absl::StatusOr<Reply> r) { codes.push_back(r.status().code()); });
  }
  ASSERT_TRUE(RunUntil([&] { return codes.size() == 3; }));
  // The rejection is posted at once, before either reply arrives.
  EXPECT_EQ(codes[0], absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(codes[1], absl::StatusCode::kOk);
  EXPECT_EQ(codes[2], absl::StatusCode::kOk);
}

TEST_F(ConnectionTest, BreakerOpensAfterConsecutiveTimeoutsAndClosesWhenRedisAnswersAgain) {
  ConnectionOptions options = Options();
  options.command_timeout = 30ms;
  options.breaker_failures = 3;
  options.breaker_probe_interval = 20ms;
  Connection conn(io_, options);
  conn.Start();
  ASSERT_TRUE(WaitConnected(conn));

  server_.Pause();
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(conn.circuit_open());
    auto r = Call(conn, {"PING"});
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
  }
  EXPECT_TRUE(conn.circuit_open());
  EXPECT_EQ(conn.circuit_opened(), 1u);

  // Open: no waiting at all.
  const auto start = Clock::now();
  auto fast = Call(conn, {"PING"});
  EXPECT_LT(Clock::now() - start, 10ms);
  EXPECT_EQ(fast.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(std::string(fast.status().message()), kCircuitOpenMessage);

  // Probes keep timing out while Redis is stopped: still open.
  RunUntil([] { return false; }, 100ms);
  EXPECT_TRUE(conn.circuit_open());

  server_.Resume();
  ASSERT_TRUE(RunUntil([&] { return !conn.circuit_open(); }, 1s));
  auto after = Call(conn, {"ECHO", "back"});
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->str, "back");
}

TEST_F(ConnectionTest, AnAnswerInTimeResetsTheTimeoutCount) {
  ConnectionOptions options = Options();
  options.command_timeout = 30ms;
  options.breaker_failures = 2;
  Connection conn(io_, options);
  conn.Start();
  ASSERT_TRUE(WaitConnected(conn));
  for (int round = 0; round < 3; ++round) {
    server_.Pause();
    EXPECT_EQ(Call(conn, {"PING"}).status().code(), absl::StatusCode::kDeadlineExceeded);
    server_.Resume();
    // The late reply to the timed-out PING arrives first and is dropped; this one is in time.
    ASSERT_TRUE(Call(conn, {"PING"}).ok());
  }
  EXPECT_FALSE(conn.circuit_open());
  EXPECT_EQ(conn.circuit_opened(), 0u);
}

// A Redis peer driven by the test, on the test's io_context: it answers the handshake's PING, then
// counts the PINGs it is sent and answers each only when told to (Answer).
class ScriptedPeer {
 public:
  explicit ScriptedPeer(asio::io_context& io)
      : io_(io), acceptor_(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)), peer_(io) {
    acceptor_.async_accept(peer_, [this](const boost::system::error_code& ec) {
      if (ec) return;
      // As Redis does: without it, Nagle holds a reply back until the previous one is acked.
      peer_.set_option(tcp::no_delay(true));
      Read();
    });
  }

  uint16_t port() const { return acceptor_.local_endpoint().port(); }
  // PINGs received after the handshake's.
  size_t received() const { return pings_ > 0 ? pings_ - 1 : 0; }

  // Writes `n` replies at once (synchronously: they are in the client's socket when this returns).
  void Answer(size_t n) {
    std::string replies;
    for (size_t i = 0; i < n; ++i) replies += "+PONG\r\n";
    asio::write(peer_, asio::buffer(replies));
  }

 private:
  void Read() {
    peer_.async_read_some(asio::buffer(buf_),
                          [this](const boost::system::error_code& ec, size_t n) {
                            if (ec) return;
                            received_.append(buf_.data(), n);
                            for (size_t at; (at = received_.find("PING")) != std::string::npos;) {
                              received_.erase(0, at + 4);
                              if (++pings_ == 1) Answer(1);  // the handshake
                            }
                            Read();
                          });
  }

  asio::io_context& io_;
  tcp::acceptor acceptor_;
  tcp::socket peer_;
  std::array<char, 4096> buf_{};
  std::string received_;
  size_t pings_ = 0;
};

ConnectionOptions PeerOptions(uint16_t port, std::chrono::milliseconds timeout,
                              std::chrono::milliseconds max_wait) {
  return {.port = port,
          .command_timeout = timeout,
          .max_wait = max_wait,
          .reconnect_min = 10ms,
          .reconnect_max = 100ms};
}

// A burst longer than the timeout is no stall: Redis answers one command of the queue every 20 ms,
// 200 ms for ten, and none of them times out at 40 ms; nor does the breaker open.
TEST(ConnectionDeadlineTest, AQueueRedisKeepsAnsweringOutlastsTheTimeout) {
  asio::io_context io;
  ScriptedPeer peer(io);
  ConnectionOptions options = PeerOptions(peer.port(), 40ms, 5s);
  options.breaker_failures = 3;
  Connection conn(io, options);
  conn.Start();
  ASSERT_TRUE(PumpUntil(io, [&] { return conn.connected(); }));

  constexpr size_t kCommands = 10;
  std::vector<std::optional<absl::StatusOr<Reply>>> results(kCommands);
  for (size_t i = 0; i < kCommands; ++i) {
    conn.Send({"PING"}, [&results, i](absl::StatusOr<Reply> r) { results[i] = std::move(r); });
  }
  ASSERT_TRUE(PumpUntil(io, [&] { return peer.received() == kCommands; }));
  asio::steady_timer cadence(io);
  size_t answered = 0;
  std::function<void()> next = [&] {
    cadence.expires_after(20ms);
    cadence.async_wait([&](const boost::system::error_code&) {
      peer.Answer(1);
      if (++answered < kCommands) next();
    });
  };
  next();
  ASSERT_TRUE(PumpUntil(io, [&] { return results.back().has_value(); }));
  for (size_t i = 0; i < kCommands; ++i) {
    ASSERT_TRUE(results[i].has_value()) << i;
    EXPECT_TRUE(results[i]->ok()) << i << ": " << results[i]->status();
  }
  EXPECT_EQ(conn.circuit_opened(), 0u);
}

// However Redis keeps answering, no command is waited for longer than max_wait: at one reply per
// 20 ms and max_wait 100 ms, the first commands of the queue are answered and the last time out.
TEST(ConnectionDeadlineTest, NoCommandWaitsLongerThanMaxWait) {
  asio::io_context io;
  ScriptedPeer peer(io);
  ConnectionOptions options = PeerOptions(peer.port(), 40ms, 100ms);
  options.breaker_failures = 0;
  Connection conn(io, options);
  conn.Start();
  ASSERT_TRUE(PumpUntil(io, [&] { return conn.connected(); }));

  constexpr size_t kCommands = 10;
  std::vector<std::optional<absl::StatusOr<Reply>>> results(kCommands);
  for (size_t i = 0; i < kCommands; ++i) {
    conn.Send({"PING"}, [&results, i](absl::StatusOr<Reply> r) { results[i] = std::move(r); });
  }
  const auto sent = Clock::now();
  ASSERT_TRUE(PumpUntil(io, [&] { return peer.received() == kCommands; }));
  asio::steady_timer cadence(io);
  size_t answered = 0;
  std::function<void()> next = [&] {
    cadence.expires_after(20ms);
    cadence.async_wait([&](const boost::system::error_code&) {
      peer.Answer(1);
      if (++answered < kCommands) next();
    });
  };
  next();
  ASSERT_TRUE(PumpUntil(io, [&] { return results.back().has_value(); }));
  // The last command was given up at max_wait, not when its reply came (200 ms).
  EXPECT_LT(Clock::now() - sent, 190ms);
  for (size_t i = 0; i < 2; ++i) EXPECT_TRUE(results[i]->ok()) << i << ": " << results[i]->status();
  for (size_t i = 7; i < kCommands; ++i) {
    EXPECT_EQ(results[i]->status().code(), absl::StatusCode::kDeadlineExceeded) << i;
  }
}

// A reply that arrived while this thread was busy is read before anything times out: here the
// thread is held past the command's timeout, and the peer's reply is written just before the
// timeout (from a timer that fires ahead of the connection's in the same turn of the loop), so
// the reply waits in the socket, unread, when the connection's timer runs.
TEST(ConnectionDeadlineTest, ARepliedCommandIsNotTimedOutBecauseTheThreadWasBusy) {
  asio::io_context io;
  ScriptedPeer peer(io);
  Connection conn(io, PeerOptions(peer.port(), 30ms, 5s));
  conn.Start();
  ASSERT_TRUE(PumpUntil(io, [&] { return conn.connected(); }));

  std::optional<absl::StatusOr<Reply>> result;
  conn.Send({"PING"}, [&](absl::StatusOr<Reply> r) { result = std::move(r); });
  asio::steady_timer reply_timer(io);
  reply_timer.expires_after(29ms);
  reply_timer.async_wait([&](const boost::system::error_code&) { peer.Answer(1); });
  // Busy past both timers: they then fire in one turn, the peer's first.
  asio::post(io, [] { std::this_thread::sleep_for(60ms); });
  ASSERT_TRUE(PumpUntil(io, [&] { return result.has_value(); }));
  ASSERT_TRUE(result->ok()) << result->status();
  EXPECT_EQ((*result)->str, "PONG");
}

// Time this thread spent elsewhere is not Redis's silence: held busy 100 ms past a 30 ms timeout,
// the connection still gives Redis a whole timeout of attention afterwards, and the reply that
// comes 10 ms after the thread is free is taken.
TEST(ConnectionDeadlineTest, AStallIsNotCountedFromTimeTheThreadSpentElsewhere) {
  asio::io_context io;
  ScriptedPeer peer(io);
  Connection conn(io, PeerOptions(peer.port(), 30ms, 5s));
  conn.Start();
  ASSERT_TRUE(PumpUntil(io, [&] { return conn.connected(); }));

  std::optional<absl::StatusOr<Reply>> result;
  conn.Send({"PING"}, [&](absl::StatusOr<Reply> r) { result = std::move(r); });
  ASSERT_TRUE(PumpUntil(io, [&] { return peer.received() == 1; }));
  asio::post(io, [] { std::this_thread::sleep_for(100ms); });
  asio::steady_timer reply_timer(io);
  reply_timer.expires_after(110ms);
  reply_timer.async_wait([&](const boost::system::error_code&) { peer.Answer(1); });
  ASSERT_TRUE(PumpUntil(io, [&] { return result.has_value(); }));
  ASSERT_TRUE(result->ok()) << result->status();
}

// A peer that takes the connection but does not answer yet: the connection is not made until
// Redis has answered the PING that ends the handshake.
TEST(ConnectionHandshakeTest, ConnectedOnlyOnceThePingIsAnswered) {
  asio::io_context io;
  tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  tcp::socket peer(io);
  bool accepted = false;
  acceptor.async_accept(peer, [&](const boost::system::error_code& ec) { accepted = !ec; });
  Connection conn(io, {.port = acceptor.local_endpoint().port(),
                       .command_timeout = 1s,
                       .reconnect_min = 10ms,
                       .reconnect_max = 100ms});
  conn.Start();
  ASSERT_TRUE(PumpUntil(io, [&] { return accepted; }));

  std::string received;
  std::array<char, 256> buf{};
  bool reading = false;
  const auto read_more = [&] {
    if (reading) return;
    reading = true;
    peer.async_read_some(asio::buffer(buf), [&](const boost::system::error_code& ec, size_t n) {
      reading = false;
      if (!ec) received.append(buf.data(), n);
    });
  };
  ASSERT_TRUE(PumpUntil(io, [&] {
    read_more();
    return received.find("PING") != std::string::npos;
  }));
  EXPECT_EQ(received, "*1\r\n$4\r\nPING\r\n");
  EXPECT_FALSE(conn.connected());

  asio::write(peer, asio::buffer(std::string_view("+PONG\r\n")));
  EXPECT_TRUE(PumpUntil(io, [&] { return conn.connected(); }));
  EXPECT_EQ(conn.commands_sent(), 0u);  // the handshake is not counted
}

TEST(ConnectionHandshakeTest, RedissWithoutAContextNeverConnects) {
  asio::io_context io;
  tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  bool accepted = false;
  tcp::socket peer(io);
  acceptor.async_accept(peer, [&](const boost::system::error_code& ec) { accepted = !ec; });
  ConnectionOptions options{.port = acceptor.local_endpoint().port()};
  options.tls.enabled = true;  // and no context
  Connection conn(io, options);
  conn.Start();
  // Every attempt fails before it dials: not even the TCP connection is made.
  EXPECT_FALSE(PumpUntil(
      io, [&] { return accepted || conn.connected(); }, 300ms));
}

TEST(ParseRedisUrlTest, ReadsUserPasswordHostPortAndDb) {
  auto options = ParseRedisUrl("redis://alice:s3cr:et@redis.internal:6380/3");
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->username, "alice");
  EXPECT_EQ(options->password, "s3cr:et");
  EXPECT_EQ(options->host, "redis.internal");
  EXPECT_EQ(options->port, 6380);
  EXPECT_EQ(options->db, 3);
}

TEST(ParseRedisUrlTest, DecodesPercentEncodedCredentials) {
  auto options = ParseRedisUrl("redis://us%40er:p%2Fw%25d%3a%20x@localhost:6380");
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->username, "us@er");
  EXPECT_EQ(options->password, "p/w%d: x");
  EXPECT_EQ(options->host, "localhost");
  EXPECT_EQ(options->port, 6380);
}

TEST(ParseRedisUrlTest, RejectsBadPercentEncodingWithoutQuotingTheSecret) {
  for (const char* url : {"redis://:50%@localhost", "redis://:ab%zzcd@localhost",
                          "redis://:ab%4@localhost", "redis://u%g1:pw@localhost"}) {
    auto options = ParseRedisUrl(url);
    ASSERT_FALSE(options.ok()) << url;
    EXPECT_EQ(options.status().code(), absl::StatusCode::kInvalidArgument) << url;
    EXPECT_EQ(options.status().message(),
              "redis URL credentials: bad percent-encoding (write a literal % as %25)");
  }
}

TEST(ParseRedisUrlTest, RejectsARawAtInTheCredentials) {
  auto options = ParseRedisUrl("redis://:SECRETPW@@localhost");
  ASSERT_FALSE(options.ok());
  EXPECT_EQ(options.status().message(), "redis URL credentials: write a literal @ as %40");
}

TEST(ParseRedisUrlTest, DefaultsPortAndDb) {
  auto options = ParseRedisUrl("redis://localhost");
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->host, "localhost");
  EXPECT_EQ(options->port, 6379);
  EXPECT_EQ(options->db, 0);
  EXPECT_TRUE(options->password.empty());
}

TEST(ParseRedisUrlTest, AcceptsPasswordWithoutUserAndIpv6) {
  auto options = ParseRedisUrl("redis://:pw@[::1]:7000");
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->username, "");
  EXPECT_EQ(options->password, "pw");
  EXPECT_EQ(options->host, "::1");
  EXPECT_EQ(options->port, 7000);
}

TEST(ParseRedisUrlTest, RedissTurnsTlsOnAndReadsTheRestAlike) {
  auto options = ParseRedisUrl("rediss://alice:pw@redis.internal:6380/2");
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_TRUE(options->tls.enabled);
  EXPECT_EQ(options->tls.context, nullptr);  // the caller's to set
  EXPECT_EQ(options->tls.server_name, "");
  EXPECT_EQ(options->username, "alice");
  EXPECT_EQ(options->password, "pw");
  EXPECT_EQ(options->host, "redis.internal");
  EXPECT_EQ(options->port, 6380);
  EXPECT_EQ(options->db, 2);
}

TEST(ParseRedisUrlTest, RedisLeavesTlsOff) {
  auto options = ParseRedisUrl("redis://localhost");
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_FALSE(options->tls.enabled);
}

TEST(ParseRedisUrlTest, RedissDefaultsPortAndTakesIpv6) {
  auto options = ParseRedisUrl("rediss://[::1]");
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_TRUE(options->tls.enabled);
  EXPECT_EQ(options->host, "::1");
  EXPECT_EQ(options->port, 6379);
}

TEST(ParseRedisUrlTest, OtherSchemesNameBothAccepted) {
  for (const char* url : {"redisss://h", "rediss:/h", "REDIS://h", "tls://h"}) {
    auto options = ParseRedisUrl(url);
    EXPECT_EQ(options.status().code(), absl::StatusCode::kInvalidArgument) << url;
    EXPECT_EQ(options.status().message(), "redis URL must start with redis:// or rediss://") << url;
  }
}

TEST(ParseRedisUrlTest, RejectsGarbage) {
  for (const char* url :
       {"", "localhost:6379", "http://localhost", "redis://", "redis://host:", "redis://host:port",
        "redis://host:70000", "redis://host/x", "redis://host/-1", "redis://ho st", "redis://[::1",
        "rediss://", "rediss://host:0", "rediss://:pw@", "redis://host?password=x",
        "redis://host/0?password=x", "redis://host#x", "redis://999.999.999.999",
        "redis://1.2.3"}) {
    EXPECT_EQ(ParseRedisUrl(url).status().code(), absl::StatusCode::kInvalidArgument) << url;
  }
}

TEST(ParseRedisUrlTest, AUserAloneTakesItsPasswordFromElsewhere) {
  auto options = ParseRedisUrl("redis://app@redis.internal");
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->username, "app");
  EXPECT_EQ(options->password, "");
  EXPECT_EQ(options->host, "redis.internal");
}

}  // namespace
}  // namespace sluice::redis
