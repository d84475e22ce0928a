#include "sluice/store/redis/redis_store.h"

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "gtest/gtest.h"
#include "sluice/limiter/store_conformance.h"
#include "sluice/store/redis/test_redis_server.h"

namespace sluice::redis {
namespace {

using namespace std::chrono_literals;

// DESIGN §1 on a real redis-server: the same suite the memory store passes.
class RedisHarness final : public StoreHarness {
 public:
  RedisHarness() {
    const uint16_t port = testing_util::FreePort();
    if (!server_.Start(port)) {
      ADD_FAILURE() << "cannot start " << testing_util::kRedisServer;
      return;
    }
    connection_ = std::make_unique<Connection>(
        io_, ConnectionOptions{.port = port, .command_timeout = std::chrono::milliseconds(2000)});
    connection_->Start();
    RunUntil([&] { return connection_->connected(); });
    store_ = std::make_unique<RedisStore>(
        [this] { return connection_.get(); },
        RedisStoreOptions{.buckets = 4, .outbox_max = 1000, .redis_clock = &redis_clock_});
  }

  Store& store() override { return *store_; }

  void RunUntil(const std::function<bool()>& ready) override {
    if (!testing_util::PumpUntil(io_, ready)) ADD_FAILURE() << "redis did not answer within 5 s";
  }

  Reply Command(std::vector<std::string> argv) {
    absl::StatusOr<Reply> reply = testing_util::SendAndWait(io_, *connection_, std::move(argv));
    EXPECT_TRUE(reply.ok()) << reply.status();
    return reply.ok() ? *std::move(reply) : Reply{};
  }

  // Reads and empties every bucket's outbox stream.
  std::vector<AlertEvent> TakeEvents() override {
    std::vector<AlertEvent> events;
    for (int b = 0; b < 4; ++b) {
      const std::string key = store_->OutboxKey(b);
      Reply entries = Command({"XRANGE", key, "-", "+"});
      for (const Reply& entry : entries.elements) {
        std::map<std::string, std::string> f;
        const Reply& fields = entry.elements[1];
        for (size_t i = 0; i + 1 < fields.elements.size(); i += 2) {
          f[fields.elements[i].str] = fields.elements[i + 1].str;
        }
        events.push_back(
            AlertEvent{.subject = f["subject"],
                       .plan = f["plan"],
                       .limit = f["limit"],
                       .threshold = std::stoi(f["threshold"]),
                       .used = std::stoll(f["used"]),
                       .quota = std::stoll(f["quota"]),
                       .window_start = absl::FromUnixSeconds(std::stoll(f["window_start"])),
                       .window_end = absl::FromUnixSeconds(std::stoll(f["window_end"])),
                       .occurred_at = absl::FromUnixMillis(std::stoll(f["occurred_at_ms"]))});
      }
      Command({"DEL", key});
    }
    return events;
  }

 private:
  testing_util::RedisServer server_;
  boost::asio::io_context io_;
  SystemClock redis_clock_;
  std::unique_ptr<Connection> connection_;
  std::unique_ptr<RedisStore> store_;
};

INSTANTIATE_TEST_SUITE_P(Redis, StoreConformanceTest,
                         ::testing::Values(StoreHarnessFactory{
                             "redis", [] { return std::make_unique<RedisHarness>(); }}),
                         StoreHarnessName);

}  // namespace
}  // namespace sluice::redis
