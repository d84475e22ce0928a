// libsluice's Limiter over Redis, against a throwaway redis-server: blocking and asynchronous
// decisions, usage and reset through the library's I/O thread, and a Redis that is not there.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include "sluice/limiter.h"
#include "sluice/options.h"
#include "sluice/status.h"
#include "sluice/store/redis/test_redis_server.h"

namespace sluice::lib {
namespace {

using ::testing::Each;
using ::testing::ElementsAre;

Options RedisOptions(uint16_t port, OnStoreError on_error = OnStoreError::kAllow) {
  Options options;
  options.plans.push_back(
      PlanOptions{.name = "free",
                  .limits = {LimitOptions{.name = "per_window", .quota = 5, .window = "744h"}}});
  // Generous for a sanitizer build on a loaded machine; a healthy answer takes well under 1 ms.
  options.store = RedisStoreOptions{.url = "redis://127.0.0.1:" + std::to_string(port) + "/0",
                                    .timeout = std::chrono::milliseconds(500)};
  options.on_store_error = on_error;
  return options;
}

class RedisLimiterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const uint16_t port = redis::testing_util::FreePort();
    ASSERT_TRUE(server_.Start(port)) << "cannot start " << redis::testing_util::kRedisServer;
    Result<std::unique_ptr<Limiter>> limiter = Limiter::Open(RedisOptions(port));
    ASSERT_TRUE(limiter.ok()) << limiter.status().message();
    limiter_ = *std::move(limiter);
  }

  Decision Decide(const std::string& subject) {
    Result<Decision> d = limiter_->Decide({.subject = subject, .plan = "free"});
    EXPECT_TRUE(d.ok()) << d.status().message();
    return d.ok() ? *std::move(d) : Decision{};
  }

  redis::testing_util::RedisServer server_;
  std::unique_ptr<Limiter> limiter_;
};

TEST_F(RedisLimiterTest, BlockingDecisionsAllowUpToTheQuota) {
  EXPECT_EQ(limiter_->store_kind(), "redis");
  std::vector<bool> allowed;
  std::vector<bool> degraded;
  for (int i = 0; i < 7; ++i) {
    const Decision d = Decide("user-1");
    allowed.push_back(d.allowed);
    degraded.push_back(d.degraded);
  }
  EXPECT_THAT(allowed, ElementsAre(true, true, true, true, true, false, false));
  EXPECT_THAT(degraded, Each(false));
}

TEST_F(RedisLimiterTest, AsyncDecisionsAnswerOnTheIoThread) {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Result<Decision>> answers;
  std::vector<std::thread::id> threads;
  for (int i = 0; i < 7; ++i) {
    limiter_->DecideAsync({.subject = "user-2", .plan = "free"}, [&](Result<Decision> d) {
      std::lock_guard lock(mu);
      answers.push_back(std::move(d));
      threads.push_back(std::this_thread::get_id());
      cv.notify_all();
    });
  }
  std::unique_lock lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return answers.size() == 7; }));
  int allowed = 0;
  for (const Result<Decision>& d : answers) {
    ASSERT_TRUE(d.ok()) << d.status().message();
    EXPECT_FALSE(d->degraded);
    allowed += d->allowed ? 1 : 0;
  }
  EXPECT_EQ(allowed, 5);
  EXPECT_THAT(threads, Each(threads.front()));
  EXPECT_NE(threads.front(), std::this_thread::get_id());
}

TEST_F(RedisLimiterTest, BlockingCallFromTheIoThreadIsRefused) {
  std::mutex mu;
  std::condition_variable cv;
  std::optional<StatusCode> nested;
  limiter_->DecideAsync({.subject = "user-3", .plan = "free"}, [&](Result<Decision>) {
    const StatusCode code = limiter_->Decide({.subject = "user-3", .plan = "free"}).status().code();
    std::lock_guard lock(mu);
    nested = code;
    cv.notify_all();
  });
  std::unique_lock lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return nested.has_value(); }));
  EXPECT_EQ(*nested, StatusCode::kFailedPrecondition);
}

TEST_F(RedisLimiterTest, UsageAndResetGoThroughRedis) {
  for (int i = 0; i < 3; ++i) Decide("user-4");
  Result<std::vector<LimitUsage>> usage = limiter_->Usage("user-4", "free");
  ASSERT_TRUE(usage.ok()) << usage.status().message();
  ASSERT_EQ(usage->size(), 1u);
  EXPECT_EQ((*usage)[0].used, 3);
  EXPECT_EQ((*usage)[0].remaining, 2);
  ASSERT_TRUE(limiter_->ResetUsage("user-4", "free").ok());
  usage = limiter_->Usage("user-4", "free");
  ASSERT_TRUE(usage.ok());
  EXPECT_EQ((*usage)[0].used, 0);
}

TEST_F(RedisLimiterTest, RedisHasNoSnapshotAndNothingToSweep) {
  EXPECT_EQ(limiter_->SaveSnapshot().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(limiter_->Sweep(), 0u);
}

TEST_F(RedisLimiterTest, CloseWaitsForAsyncDecisionsInProgress) {
  std::atomic<int> answered{0};
  for (int i = 0; i < 20; ++i) {
    limiter_->DecideAsync({.subject = "user-5", .plan = "free"},
                          [&](Result<Decision>) { ++answered; });
  }
  ASSERT_TRUE(limiter_->Close().ok());
  EXPECT_EQ(answered.load(), 20);
}

// A Redis Cluster of one master that serves every slot: the library finds it from the seed,
// routes each decision by its hash tag, and the counter is in that node.
TEST(RedisLimiterClusterTest, ClusterNodesDecideThroughTheCluster) {
  namespace tu = redis::testing_util;
  const uint16_t port = tu::FreePort();
  char dir[] = "/tmp/sluice-cluster-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  tu::RedisServer server;
  ASSERT_TRUE(server.Start(port, {"--cluster-enabled", "yes", "--cluster-config-file",
                                  std::string(dir) + "/nodes.conf", "--dir", dir}));
  boost::asio::io_context io;
  redis::Connection admin(
      io, redis::ConnectionOptions{.port = port, .command_timeout = std::chrono::seconds(2)});
  admin.Start();
  ASSERT_TRUE(tu::PumpUntil(io, [&] { return admin.connected(); }));
  ASSERT_TRUE(tu::SendAndWait(io, admin, {"CLUSTER", "ADDSLOTSRANGE", "0", "16383"}).ok());
  // The node takes the slots on its own clock (cluster cron): poll its state, bounded.
  ASSERT_TRUE(tu::PumpUntil(
      io,
      [&] {
        absl::StatusOr<redis::Reply> info = tu::SendAndWait(io, admin, {"CLUSTER", "INFO"});
        return info.ok() && info->str.find("cluster_state:ok") != std::string::npos;
      },
      std::chrono::seconds(10)));

  Options options = RedisOptions(port);
  auto& store = std::get<RedisStoreOptions>(options.store);
  store.url = RedisStoreOptions{}.url;
  store.cluster_nodes = {"127.0.0.1:" + std::to_string(port)};
  store.key_prefix = "clu";
  Result<std::unique_ptr<Limiter>> limiter = Limiter::Open(options);
  ASSERT_TRUE(limiter.ok()) << limiter.status().message();
  std::vector<bool> allowed;
  for (int i = 0; i < 7; ++i) {
    Result<Decision> d = (*limiter)->Decide({.subject = "user-1", .plan = "free"});
    ASSERT_TRUE(d.ok()) << d.status().message();
    // The first may come before the slot map: degraded then, and not charged.
    if (d->degraded) {
      ASSERT_EQ(i, 0) << d->degraded_reason;
      --i;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the map's first refresh
      continue;
    }
    allowed.push_back(d->allowed);
  }
  EXPECT_THAT(allowed, ElementsAre(true, true, true, true, true, false, false));
  absl::StatusOr<redis::Reply> keys = tu::SendAndWait(io, admin, {"KEYS", "clu:*:h:*"});
  ASSERT_TRUE(keys.ok());
  ASSERT_EQ(keys->elements.size(), 1u);
  absl::StatusOr<redis::Reply> used =
      tu::SendAndWait(io, admin, {"HGET", keys->elements[0].str, "user-1"});
  ASSERT_TRUE(used.ok());
  EXPECT_EQ(used->str, "5");
  ASSERT_TRUE((*limiter)->Close().ok());
  admin.Stop();
  server.Kill();
  std::filesystem::remove_all(dir);
}

TEST(RedisLimiterUnreachableTest, DecisionsAreDegradedPerOnStoreError) {
  // Nothing listens on this port.
  const uint16_t port = redis::testing_util::FreePort();
  Result<std::unique_ptr<Limiter>> limiter = Limiter::Open(RedisOptions(port, OnStoreError::kDeny));
  ASSERT_TRUE(limiter.ok()) << limiter.status().message();
  Result<Decision> d = (*limiter)->Decide({.subject = "user-1", .plan = "free"});
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_TRUE(d->degraded);
  EXPECT_FALSE(d->allowed);
  EXPECT_FALSE(d->degraded_reason.empty());
  ASSERT_EQ(d->limits.size(), 1u);
  EXPECT_EQ(d->limits[0].remaining, 5);
}

}  // namespace
}  // namespace sluice::lib
