#include "sluice/store/redis/clock_sync.h"

#include <chrono>
#include <memory>

#include <boost/asio/io_context.hpp>

#include "gtest/gtest.h"
#include "sluice/store/redis/test_redis_server.h"

namespace sluice::redis {
namespace {

using namespace std::chrono_literals;

Reply Str(std::string s) { return Reply{.type = Reply::Type::kString, .str = std::move(s)}; }

TEST(ParseTimeReplyTest, ReadsSecondsAndMicroseconds) {
  Reply r{.type = Reply::Type::kArray, .elements = {Str("1796083170"), Str("123456")}};
  absl::StatusOr<absl::Time> t = ParseTimeReply(r);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t, absl::FromUnixMicros(1796083170123456));
}

TEST(ParseTimeReplyTest, RejectsAnythingElse) {
  EXPECT_FALSE(ParseTimeReply(Str("1796083170")).ok());
  EXPECT_FALSE(ParseTimeReply(Reply{.type = Reply::Type::kArray, .elements = {Str("1")}}).ok());
  EXPECT_FALSE(
      ParseTimeReply(Reply{.type = Reply::Type::kArray, .elements = {Str("x"), Str("1")}}).ok());
  EXPECT_FALSE(
      ParseTimeReply(Reply{.type = Reply::Type::kArray, .elements = {Str("1"), Str("1000000")}})
          .ok());
}

// The local clock is the fake one, 1 h behind the host (and Redis) clock: the synced clock must
// measure the hour and then read Redis's time.
TEST(ClockSyncTest, MeasuresTheOffsetToRedisTime) {
  const uint16_t port = testing_util::FreePort();
  testing_util::RedisServer server;
  ASSERT_TRUE(server.Start(port));
  boost::asio::io_context io;
  Connection connection(io, ConnectionOptions{.port = port, .command_timeout = 2000ms});
  connection.Start();

  class BehindClock final : public Clock {
   public:
    absl::Time Now() const override { return host_.Now() - absl::Hours(1); }
    SystemClock host_;
  } local;
  OffsetClock synced(&local);
  int first_samples = 0;
  ClockSync sync(io, &connection, &local, &synced,
                 {.interval = absl::Seconds(30),
                  .retry = absl::Milliseconds(10),
                  .max_rtt = absl::Seconds(1),
                  .on_first_sample = [&] { ++first_samples; }});
  sync.Start();
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (sync.samples() == 0 && std::chrono::steady_clock::now() < deadline) {
    io.run_one_for(50ms);
  }
  ASSERT_EQ(sync.samples(), 1u);
  EXPECT_EQ(first_samples, 1);
  EXPECT_TRUE(synced.synced());
  const absl::Duration error = synced.Now() - SystemClock().Now();
  EXPECT_LT(absl::AbsDuration(error), absl::Milliseconds(50)) << error;
  EXPECT_GT(synced.offset(), absl::Minutes(59));
  sync.Stop();
  connection.Stop();
}

}  // namespace
}  // namespace sluice::redis
