#include "sluice/engine/store_backend.h"

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <future>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/limiter/limiter.h"
#include "sluice/store/redis/test_redis_server.h"

namespace sluice::engine {
namespace {

using ::testing::HasSubstr;

config::Config OnePlan() {
  config::Config cfg;
  cfg.plans.push_back(config::PlanConfig{
      .name = "free",
      .limits = {config::LimitConfig{
          .name = "per_day", .quota = 3, .window = *config::ParseWindow("day")}}});
  return cfg;
}

// A fresh directory under the test's temporary directory.
std::string TempDir(const std::string& name) {
  std::filesystem::path dir =
      std::filesystem::temp_directory_path() / absl::StrCat("sluice_engine_", name, "_", getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

// Decides `cost` for `subject` on the memory store; the callback runs before Decide returns.
Decision DecideInline(const Limiter& limiter, std::string_view subject) {
  std::optional<Decision> out;
  limiter.Decide({.subject = subject, .plan = "free", .cost = 1},
                 [&](absl::StatusOr<Decision> d) { out = *d; });
  EXPECT_TRUE(out.has_value());
  return *out;
}

// The metric names a Render() output defines (its # TYPE lines).
std::set<std::string> MetricNames(const metrics::Registry& registry) {
  std::set<std::string> names;
  for (absl::string_view line : absl::StrSplit(registry.Render(), '\n')) {
    if (absl::ConsumePrefix(&line, "# TYPE ")) {
      names.insert(std::string(line.substr(0, line.find(' '))));
    }
  }
  return names;
}

TEST(MemoryBackendTest, CountsSurviveAStopAndAReopenThroughTheSnapshot) {
  config::Config cfg = OnePlan();
  cfg.store.memory.snapshot_path = TempDir("reopen") + "/state.snap";
  {
    absl::StatusOr<std::unique_ptr<StoreBackend>> backend =
        OpenStoreBackend(cfg, {.open_registry = false, .log = false});
    ASSERT_TRUE(backend.ok()) << backend.status();
    EXPECT_EQ((*backend)->kind(), "memory");
    EXPECT_EQ((*backend)->registry_backend(), nullptr);
    Limiter limiter(*PlanSet::FromConfig(cfg), (*backend)->store(), (*backend)->clock(),
                    (*backend)->limiter_options(cfg.on_store_error));
    EXPECT_TRUE(DecideInline(limiter, "user-1").allowed);
    EXPECT_TRUE(DecideInline(limiter, "user-1").allowed);
    ASSERT_TRUE((*backend)->Stop().ok());
  }
  absl::StatusOr<std::unique_ptr<StoreBackend>> again =
      OpenStoreBackend(cfg, {.open_registry = false, .log = false});
  ASSERT_TRUE(again.ok()) << again.status();
  Limiter limiter(*PlanSet::FromConfig(cfg), (*again)->store(), (*again)->clock(),
                  (*again)->limiter_options(cfg.on_store_error));
  // Two of three were used before the restart: one is left.
  EXPECT_TRUE(DecideInline(limiter, "user-1").allowed);
  EXPECT_FALSE(DecideInline(limiter, "user-1").allowed);
}

TEST(MemoryBackendTest, ASecondBackendOnTheSameSnapshotIsRefused) {
  config::Config cfg = OnePlan();
  cfg.store.memory.snapshot_path = TempDir("locked") + "/state.snap";
  absl::StatusOr<std::unique_ptr<StoreBackend>> first =
      OpenStoreBackend(cfg, {.open_registry = false, .log = false});
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<std::unique_ptr<StoreBackend>> second =
      OpenStoreBackend(cfg, {.open_registry = false, .log = false});
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(second.status().message(), HasSubstr("cannot lock snapshot"));
}

TEST(MemoryBackendTest, OpensTheSqliteRegistryAtRegistryPath) {
  config::Config cfg = OnePlan();
  cfg.store.memory.registry_path = TempDir("registry") + "/registry.db";
  absl::StatusOr<std::unique_ptr<StoreBackend>> backend = OpenStoreBackend(cfg, {.log = false});
  ASSERT_TRUE(backend.ok()) << backend.status();
  ASSERT_NE((*backend)->registry_backend(), nullptr);
  EXPECT_TRUE((*backend)->index()->loaded());
  EXPECT_TRUE(std::filesystem::exists(cfg.store.memory.registry_path));
  // The outbox reader reads this store's (empty) outbox.
  std::unique_ptr<OutboxSource> source = (*backend)->NewOutboxSource(absl::Seconds(60));
  absl::StatusOr<std::vector<OutboxItem>> items = source->Fetch(10);
  ASSERT_TRUE(items.ok());
  EXPECT_TRUE(items->empty());
}

// Puts subject `id` on plan "free" through `backend`'s registry and waits for the answer.
absl::Status PutSubject(StoreBackend& backend, std::string id) {
  registry::Subject subject;
  subject.id = std::move(id);
  subject.plan = "free";
  std::promise<absl::StatusOr<registry::ChangeResult>> answer;
  backend.registry_backend()->Apply(
      {.kind = registry::Change::Kind::kPutSubject, .subject = std::move(subject)},
      [&answer](absl::StatusOr<registry::ChangeResult> r) { answer.set_value(std::move(r)); });
  return answer.get_future().get().status();
}

TEST(MemoryBackendTest, WithASnapshotAndNoRegistryPathTheRegistryIsKeptBesideTheSnapshot) {
  config::Config cfg = OnePlan();
  cfg.store.memory.snapshot_path = TempDir("beside") + "/state.snap";
  {
    absl::StatusOr<std::unique_ptr<StoreBackend>> backend = OpenStoreBackend(cfg, {.log = false});
    ASSERT_TRUE(backend.ok()) << backend.status();
    ASSERT_TRUE(PutSubject(**backend, "acme").ok());
    ASSERT_TRUE((*backend)->Stop().ok());
  }
  EXPECT_TRUE(std::filesystem::exists(cfg.store.memory.snapshot_path + ".registry.db"));
  absl::StatusOr<std::unique_ptr<StoreBackend>> reopened = OpenStoreBackend(cfg, {.log = false});
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  EXPECT_NE((*reopened)->index()->FindSubject("acme"), nullptr);
}

TEST(MemoryBackendTest, WithNothingPersistedTheRegistryTakesWritesInMemory) {
  absl::StatusOr<std::unique_ptr<StoreBackend>> backend =
      OpenStoreBackend(OnePlan(), {.log = false});
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_TRUE(PutSubject(**backend, "acme").ok());
  EXPECT_NE((*backend)->index()->FindSubject("acme"), nullptr);
}

TEST(MemoryBackendTest, AnUnopenableRegistryIsAnErrorNamingIt) {
  config::Config cfg = OnePlan();
  cfg.store.memory.registry_path = "/nonexistent-dir/registry.db";
  absl::StatusOr<std::unique_ptr<StoreBackend>> backend = OpenStoreBackend(cfg, {.log = false});
  ASSERT_FALSE(backend.ok());
  EXPECT_THAT(backend.status().message(), HasSubstr("registry"));
}

TEST(RedisBackendTest, NeedsAnEventLoop) {
  config::Config cfg = OnePlan();
  cfg.store.type = config::StoreType::kRedis;
  cfg.store.redis.url = "redis://127.0.0.1:1";
  absl::StatusOr<std::unique_ptr<StoreBackend>> backend =
      OpenStoreBackend(cfg, {.open_registry = false, .log = false});
  ASSERT_FALSE(backend.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(backend.status())) << backend.status();
}

// Runs one io_context on its own thread, attached to the back end as loop 0.
class LoopThread {
 public:
  LoopThread() : work_(io_.get_executor()) {}
  void Start(StoreBackend* backend) {
    thread_ = std::thread([this, backend] {
      backend->Attach(0);
      io_.run();
    });
  }
  ~LoopThread() { Stop(); }
  void Stop() {
    work_.reset();
    io_.stop();
    if (thread_.joinable()) thread_.join();
  }
  boost::asio::io_context& io() { return io_; }

 private:
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  std::thread thread_;
};

TEST(RedisBackendTest, DecidesOnTheLoopAndExportsTheMemoryStoresMetricNames) {
  redis::testing_util::RedisServer server;
  const uint16_t port = redis::testing_util::FreePort();
  ASSERT_TRUE(server.Start(port));
  config::Config cfg = OnePlan();
  cfg.store.type = config::StoreType::kRedis;
  cfg.store.redis.url = absl::StrCat("redis://127.0.0.1:", port);
  cfg.store.redis.key_prefix = "engine_test";

  LoopThread loop;
  absl::StatusOr<std::unique_ptr<StoreBackend>> backend =
      OpenStoreBackend(cfg, {.loops = {&loop.io()}, .log = false});
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_EQ((*backend)->kind(), "redis");
  loop.Start(backend->get());
  ASSERT_TRUE((*backend)->WaitForStore(absl::Seconds(5)));

  Limiter limiter(*PlanSet::FromConfig(cfg), (*backend)->store(), (*backend)->clock(),
                  (*backend)->limiter_options(cfg.on_store_error));
  int allowed = 0;
  for (int i = 0; i < 5; ++i) {
    std::promise<Decision> answer;
    boost::asio::post(loop.io(), [&] {
      limiter.Decide({.subject = "user-1", .plan = "free", .cost = 1},
                     [&](absl::StatusOr<Decision> d) { answer.set_value(*d); });
    });
    Decision d = answer.get_future().get();
    EXPECT_FALSE(d.degraded);
    allowed += d.allowed ? 1 : 0;
  }
  EXPECT_EQ(allowed, 3);

  // A dashboard sees the same names whichever store runs.
  metrics::Registry redis_metrics;
  (*backend)->RegisterMetrics(redis_metrics);
  absl::StatusOr<std::unique_ptr<StoreBackend>> memory =
      OpenStoreBackend(OnePlan(), {.open_registry = false, .log = false});
  ASSERT_TRUE(memory.ok());
  metrics::Registry memory_metrics;
  (*memory)->RegisterMetrics(memory_metrics);
  EXPECT_EQ(MetricNames(redis_metrics), MetricNames(memory_metrics));
  EXPECT_TRUE(MetricNames(redis_metrics).contains("sluice_redis_late_admissions_total"));

  loop.Stop();
  EXPECT_TRUE((*backend)->Stop().ok());
}

}  // namespace
}  // namespace sluice::engine
