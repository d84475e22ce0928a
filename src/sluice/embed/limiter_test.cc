// libsluice's Limiter (include/sluice/limiter.h) over the memory store, through the public API
// only. Windows are "744h" (31 days, epoch-aligned) unless a test is about windows, so that a
// test straddles a window's end only if it runs across that instant (once a month).
#include "sluice/limiter.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "sluice/embed/test_clock.h"
#include "sluice/options.h"
#include "sluice/status.h"

namespace sluice::lib {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kLongWindow[] = "744h";

// One plan "free": `per_window` 5 per long window, alerting at 80% and 100%, and `big` 1000.
Options FreeOptions() {
  Options options;
  options.plans.push_back(PlanOptions{
      .name = "free",
      .limits = {
          LimitOptions{
              .name = "per_window", .quota = 5, .window = kLongWindow, .alert_at = {100, 80}},
          LimitOptions{.name = "big", .quota = 1000, .window = kLongWindow}}});
  return options;
}

std::unique_ptr<Limiter> OpenOrDie(Options options) {
  Result<std::unique_ptr<Limiter>> limiter = Limiter::Open(std::move(options));
  EXPECT_TRUE(limiter.ok()) << limiter.status().message();
  return limiter.ok() ? *std::move(limiter) : nullptr;
}

std::string OpenError(Options options) {
  Result<std::unique_ptr<Limiter>> limiter = Limiter::Open(std::move(options));
  EXPECT_FALSE(limiter.ok());
  if (limiter.ok()) return "";
  EXPECT_EQ(limiter.status().code(), StatusCode::kInvalidArgument);
  return limiter.status().message();
}

class MemoryLimiterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    limiter_ = OpenOrDie(FreeOptions());
    ASSERT_NE(limiter_, nullptr);
  }

  Decision Decide(const std::string& subject, int64_t cost = 1) {
    Result<Decision> d = limiter_->Decide({.subject = subject, .plan = "free", .cost = cost});
    EXPECT_TRUE(d.ok()) << d.status().message();
    return d.ok() ? *std::move(d) : Decision{};
  }

  int64_t Used(const std::string& subject, size_t limit) {
    Result<std::vector<LimitUsage>> usage = limiter_->Usage(subject, "free");
    EXPECT_TRUE(usage.ok()) << usage.status().message();
    return usage.ok() && limit < usage->size() ? (*usage)[limit].used : -1;
  }

  std::unique_ptr<Limiter> limiter_;
};

TEST_F(MemoryLimiterTest, AllowsUpToTheQuotaThenDenies) {
  std::vector<bool> allowed;
  for (int i = 0; i < 7; ++i) allowed.push_back(Decide("user-1").allowed);
  EXPECT_THAT(allowed, ElementsAre(true, true, true, true, true, false, false));
}

TEST_F(MemoryLimiterTest, DecisionReportsEveryLimit) {
  const Decision d = Decide("user-1", 2);
  EXPECT_TRUE(d.allowed);
  EXPECT_FALSE(d.degraded);
  EXPECT_EQ(d.retry_after.count(), 0);
  ASSERT_EQ(d.limits.size(), 2u);
  EXPECT_EQ(d.limits[0].name, "per_window");
  EXPECT_EQ(d.limits[0].quota, 5);
  EXPECT_EQ(d.limits[0].used, 2);
  EXPECT_EQ(d.limits[0].remaining, 3);
  EXPECT_GT(d.limits[0].reset_after.count(), 0);
  EXPECT_FALSE(d.limits[0].violated);
  EXPECT_EQ(d.limits[1].name, "big");
  EXPECT_EQ(d.limits[1].remaining, 998);
}

TEST(ShadowLimiterTest, AShadowLimitNeverDeniesButSaysWhenItWould) {
  Options options = FreeOptions();
  options.plans[0].limits[1].quota = 2;
  options.plans[0].limits[1].shadow = true;
  std::unique_ptr<Limiter> limiter = OpenOrDie(std::move(options));
  for (int i = 1; i <= 5; ++i) {
    Result<Decision> d = limiter->Decide({.subject = "user-1", .plan = "free"});
    ASSERT_TRUE(d.ok());
    EXPECT_TRUE(d->allowed) << i;
    EXPECT_EQ(d->limits[1].used, i);
    EXPECT_EQ(d->limits[1].would_deny, i > 2) << i;
    EXPECT_FALSE(d->limits[1].violated);
  }
}

TEST_F(MemoryLimiterTest, ExhaustedLimitIsViolatedWithRetryAfter) {
  for (int i = 0; i < 5; ++i) Decide("user-1");
  const Decision d = Decide("user-1");
  EXPECT_FALSE(d.allowed);
  ASSERT_EQ(d.limits.size(), 2u);
  EXPECT_TRUE(d.limits[0].violated);
  EXPECT_FALSE(d.limits[1].violated);
  EXPECT_EQ(d.limits[0].remaining, 0);
  EXPECT_EQ(d.limits[0].retry_after, d.limits[0].reset_after);
  EXPECT_EQ(d.limits[1].retry_after.count(), 0);
  EXPECT_EQ(d.retry_after, d.limits[0].reset_after);
  EXPECT_GT(d.retry_after.count(), 0);
}

TEST_F(MemoryLimiterTest, DeniedRequestConsumesNothing) {
  for (int i = 0; i < 4; ++i) Decide("user-1");
  EXPECT_FALSE(Decide("user-1", 2).allowed);
  EXPECT_EQ(Used("user-1", 0), 4);
  EXPECT_EQ(Used("user-1", 1), 4);
  EXPECT_TRUE(Decide("user-1").allowed);
}

TEST_F(MemoryLimiterTest, CostZeroIsAPeek) {
  Decide("user-1", 3);
  const Decision peek = Decide("user-1", 0);
  EXPECT_TRUE(peek.allowed);
  EXPECT_EQ(peek.limits[0].used, 3);
  EXPECT_EQ(Used("user-1", 0), 3);
}

TEST_F(MemoryLimiterTest, SubjectsAreCountedApart) {
  for (int i = 0; i < 5; ++i) Decide("user-1");
  EXPECT_FALSE(Decide("user-1").allowed);
  EXPECT_TRUE(Decide("user-2").allowed);
}

TEST_F(MemoryLimiterTest, UsageReadsWithoutSpending) {
  Decide("user-1", 3);
  Result<std::vector<LimitUsage>> usage = limiter_->Usage("user-1", "free");
  ASSERT_TRUE(usage.ok()) << usage.status().message();
  ASSERT_EQ(usage->size(), 2u);
  EXPECT_EQ((*usage)[0].name, "per_window");
  EXPECT_EQ((*usage)[0].used, 3);
  EXPECT_EQ((*usage)[0].remaining, 2);
  EXPECT_GT((*usage)[0].reset_after.count(), 0);
  EXPECT_TRUE((*usage)[0].fired.empty());
  EXPECT_EQ(Used("user-1", 0), 3);
}

TEST_F(MemoryLimiterTest, UsageListsFiredThresholds) {
  for (int i = 0; i < 4; ++i) Decide("user-1");
  Result<std::vector<LimitUsage>> usage = limiter_->Usage("user-1", "free");
  ASSERT_TRUE(usage.ok());
  EXPECT_THAT((*usage)[0].fired, ElementsAre(80));
}

TEST_F(MemoryLimiterTest, ResetOfOneLimitKeepsTheOthers) {
  Decide("user-1", 5);
  ASSERT_TRUE(limiter_->ResetUsage("user-1", "free", "per_window").ok());
  EXPECT_EQ(Used("user-1", 0), 0);
  EXPECT_EQ(Used("user-1", 1), 5);
  EXPECT_TRUE(Decide("user-1").allowed);
}

TEST_F(MemoryLimiterTest, ResetOfThePlanClearsEveryLimit) {
  Decide("user-1", 5);
  ASSERT_TRUE(limiter_->ResetUsage("user-1", "free").ok());
  EXPECT_EQ(Used("user-1", 0), 0);
  EXPECT_EQ(Used("user-1", 1), 0);
}

TEST_F(MemoryLimiterTest, ResetOfAnUnknownLimitIsNotFound) {
  const Status s = limiter_->ResetUsage("user-1", "free", "nope");
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
}

TEST_F(MemoryLimiterTest, BadRequestsNameTheField) {
  Result<Decision> plan = limiter_->Decide({.subject = "user-1", .plan = "gold"});
  EXPECT_EQ(plan.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(plan.status().message(), HasSubstr("plan"));
  Result<Decision> subject = limiter_->Decide({.subject = "user 1", .plan = "free"});
  EXPECT_EQ(subject.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(subject.status().message(), StartsWith("subject"));
  Result<Decision> cost = limiter_->Decide({.subject = "user-1", .plan = "free", .cost = -1});
  EXPECT_EQ(cost.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(cost.status().message(), StartsWith("cost"));
  EXPECT_EQ(limiter_->Usage("user-1", "gold").status().code(), StatusCode::kNotFound);
}

TEST_F(MemoryLimiterTest, DecideAsyncAnswersBeforeItReturns) {
  bool called = false;
  limiter_->DecideAsync({.subject = "user-1", .plan = "free"}, [&](Result<Decision> d) {
    ASSERT_TRUE(d.ok());
    EXPECT_TRUE(d->allowed);
    called = true;
  });
  EXPECT_TRUE(called);
  EXPECT_EQ(Used("user-1", 0), 1);
}

TEST_F(MemoryLimiterTest, ConcurrentDecisionsNeverExceedTheQuota) {
  std::atomic<int> allowed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 300; ++i) {
        Result<Decision> spend = limiter_->Decide({.subject = "hot", .plan = "free"});
        if (spend.ok() && spend->allowed) ++allowed;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(allowed.load(), 5);
}

TEST_F(MemoryLimiterTest, CallsAfterCloseAreRefused) {
  ASSERT_TRUE(limiter_->Close().ok());
  EXPECT_TRUE(limiter_->Close().ok());  // idempotent
  EXPECT_EQ(limiter_->Decide({.subject = "user-1", .plan = "free"}).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(limiter_->Usage("user-1", "free").status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(limiter_->ResetUsage("user-1", "free").code(), StatusCode::kFailedPrecondition);
  std::optional<StatusCode> async;
  limiter_->DecideAsync({.subject = "user-1", .plan = "free"},
                        [&](Result<Decision> d) { async = d.status().code(); });
  EXPECT_EQ(async, StatusCode::kFailedPrecondition);
}

TEST_F(MemoryLimiterTest, CloseFromItsOwnCallbackIsRefusedInsteadOfHanging) {
  std::optional<StatusCode> inside;
  limiter_->DecideAsync({.subject = "user-1", .plan = "free"},
                        [&](Result<Decision>) { inside = limiter_->Close().code(); });
  EXPECT_EQ(inside, StatusCode::kFailedPrecondition);
  // Nothing was closed: the limiter still decides, and closes from outside.
  EXPECT_TRUE(Decide("user-1").allowed);
  EXPECT_TRUE(limiter_->Close().ok());
}

TEST_F(MemoryLimiterTest, DestroyingItFromItsOwnCallbackAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the maintainer thread runs
  EXPECT_DEATH(
      {
        limiter_->DecideAsync({.subject = "user-1", .plan = "free"},
                              [&](Result<Decision>) { limiter_.reset(); });
      },
      "destroyed from its own callback");
}

TEST_F(MemoryLimiterTest, DescribesItself) {
  EXPECT_EQ(limiter_->store_kind(), "memory");
  EXPECT_THAT(limiter_->plans(), ElementsAre("free"));
}

// Options are validated as sluice.yaml is, and the error names the field.
TEST(CalendarWindowTest, WeekAndYearEndAtMondayAndNewYear) {
  Options options;
  options.plans.push_back(
      PlanOptions{.name = "cal",
                  .limits = {LimitOptions{.name = "weekly", .quota = 100, .window = "week"},
                             LimitOptions{.name = "yearly", .quota = 3, .window = "year"}}});
  std::unique_ptr<Limiter> limiter = OpenOrDie(std::move(options));
  ASSERT_NE(limiter, nullptr);
  ASSERT_TRUE(limiter->Decide({.subject = "u", .plan = "cal", .cost = 3})->allowed);
  Result<Decision> denied = limiter->Decide({.subject = "u", .plan = "cal"});
  const auto now = std::chrono::system_clock::now();
  ASSERT_TRUE(denied.ok());
  EXPECT_FALSE(denied->allowed);
  // The plan's zone is UTC: the civil calendar of std::chrono gives the ends.
  using namespace std::chrono;
  const sys_days today = floor<days>(now);
  const sys_days new_year{(year_month_day{today}.year() + years{1}) / January / 1};
  const sys_days next_monday = today + days{8 - weekday{today}.iso_encoding()};
  ASSERT_EQ(denied->limits.size(), 2u);
  EXPECT_FALSE(denied->limits[0].violated);
  EXPECT_NEAR(denied->limits[0].reset_after.count(),
              duration_cast<seconds>(next_monday - now).count(), 2);
  EXPECT_TRUE(denied->limits[1].violated);
  EXPECT_NEAR(denied->limits[1].retry_after.count(), duration_cast<seconds>(new_year - now).count(),
              2);
}

TEST(MemoryLimiterOptionsTest, QuotaOutOfRangeNamesTheLimit) {
  Options options = FreeOptions();
  options.plans[0].limits[1].quota = 0;
  EXPECT_EQ(OpenError(std::move(options)),
            "plans.free.limits[1].quota: must be at least 1 (0 only for a limit with window: "
            "credit)");
}

TEST(MemoryLimiterOptionsTest, BadWindowNamesTheLimit) {
  Options options = FreeOptions();
  options.plans[0].limits[0].window = "5x";
  EXPECT_EQ(OpenError(std::move(options)),
            "plans.free.limits[0].window: bad window \"5x\" (want Ns, Nm, Nh, day, week, month, "
            "year, concurrent or credit)");
}

TEST(MemoryLimiterOptionsTest, NoPlanIsRefused) {
  EXPECT_EQ(OpenError(Options{}), "plans: at least one plan is required");
}

TEST(MemoryLimiterOptionsTest, RepeatedAlertPercentageIsRefused) {
  Options options = FreeOptions();
  options.plans[0].limits[0].alert_at = {80, 80};
  EXPECT_EQ(OpenError(std::move(options)),
            "plans.free.limits[0].alert_at[1]: duplicate percentage 80");
}

TEST(MemoryLimiterOptionsTest, UnknownTimeZoneIsRefused) {
  Options options = FreeOptions();
  options.plans[0].timezone = "Europe/Atlantis";
  EXPECT_EQ(OpenError(std::move(options)),
            "plans.free.timezone: unknown time zone \"Europe/Atlantis\"");
}

TEST(MemoryLimiterOptionsTest, StoreSettingsAreChecked) {
  Options memory = FreeOptions();
  memory.store = MemoryStoreOptions{.snapshot_interval = std::chrono::milliseconds(1)};
  EXPECT_EQ(OpenError(std::move(memory)),
            "store.memory.snapshot_interval: must be at least 100ms, got 1ms");
  Options redis = FreeOptions();
  redis.store = RedisStoreOptions{.url = "http://127.0.0.1:6379"};
  EXPECT_EQ(OpenError(std::move(redis)),
            "store.redis.url: must be a redis:// or rediss:// (TLS) URL, e.g. "
            "redis://127.0.0.1:6379/0");
}

TEST(MemoryLimiterOptionsTest, RedisTlsSettingsAreChecked) {
  Options plaintext = FreeOptions();
  plaintext.store = RedisStoreOptions{.url = "redis://127.0.0.1:6379", .tls = {.ca_file = "/ca"}};
  EXPECT_EQ(OpenError(std::move(plaintext)),
            "store.redis.tls: set, but store.redis.url is not a rediss:// URL (TLS is on only "
            "with rediss://, or with cluster_nodes)");
  Options missing = FreeOptions();
  missing.store =
      RedisStoreOptions{.url = "rediss://127.0.0.1:6379", .tls = {.ca_file = "/nonexistent/ca"}};
  EXPECT_EQ(OpenError(std::move(missing)),
            "store.redis.tls.ca_file: /nonexistent/ca: No such file or directory");
}

TEST(MemoryLimiterOptionsTest, RedisClusterSettingsAreChecked) {
  Options both = FreeOptions();
  both.store =
      RedisStoreOptions{.url = "redis://10.0.0.1:6379", .cluster_nodes = {"10.0.0.2:6379"}};
  EXPECT_EQ(OpenError(std::move(both)),
            "store.redis.cluster_nodes: cannot be set together with store.redis.url (the seeds "
            "replace the URL: leave it at its default)");
  Options bad = FreeOptions();
  bad.store = RedisStoreOptions{.cluster_nodes = {"10.0.0.2"}};
  EXPECT_THAT(OpenError(std::move(bad)), HasSubstr("store.redis.cluster_nodes[0]: "));
  // An ACL user: with a password, on a cluster, named as Redis names users.
  const auto with_user = [](RedisStoreOptions redis) {
    Options o = FreeOptions();
    o.store = std::move(redis);
    return OpenError(std::move(o));
  };
  EXPECT_EQ(with_user({.cluster_nodes = {"10.0.0.2:6379"}, .username = "app"}),
            "store.redis.username: needs a password");
  EXPECT_THAT(with_user({.password = "pw", .username = "app"}),
              HasSubstr("store.redis.username: only with cluster_nodes"));
  EXPECT_THAT(with_user({.password = "pw", .cluster_nodes = {"10.0.0.2:6379"}, .username = "a b"}),
              HasSubstr("store.redis.username: want 1-128"));
  Options tls_plaintext = FreeOptions();
  tls_plaintext.store = RedisStoreOptions{.tls = {.enabled = true}};
  EXPECT_THAT(OpenError(std::move(tls_plaintext)),
              HasSubstr("store.redis.tls: set, but store.redis.url is not a rediss:// URL"));
  Options tls_cluster = FreeOptions();
  tls_cluster.store = RedisStoreOptions{.tls = {.ca_file = "/nonexistent/ca", .enabled = true},
                                        .cluster_nodes = {"10.0.0.2:6379"}};
  EXPECT_EQ(OpenError(std::move(tls_cluster)),
            "store.redis.tls.ca_file: /nonexistent/ca: No such file or directory");
}

TEST(MemoryLimiterOptionsTest, BadWebhookIsRefused) {
  Options options = FreeOptions();
  options.alerts.webhooks.push_back({.url = "ftp://example.com"});
  EXPECT_EQ(OpenError(std::move(options)),
            "alerts.sinks[0].url: must be an http:// or https:// URL");
}

class SnapshotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/sluice-embed-test-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Windows of 31 days, the longest fixed window, on a clock that stands a day into one and does
  // not move: the test's counters cannot reset half-way.
  Options WithSnapshot() const {
    Options options = FreeOptions();
    for (LimitOptions& limit : options.plans[0].limits) limit.window = "744h";
    options.store = MemoryStoreOptions{.snapshot_path = dir_ + "/state.snap"};
    options.clock = clock_;
    return options;
  }
  // The limiter decides by the fixture's clock: its window ends 30 days on.
  static void AwayFromTheWindowsEnd(Limiter& limiter) {
    Result<Decision> peek = limiter.Decide({.subject = "user-1", .plan = "free", .cost = 0});
    ASSERT_TRUE(peek.ok());
    ASSERT_EQ(peek->limits[0].reset_after, std::chrono::hours(30 * 24));
  }

  std::string dir_;
  std::shared_ptr<const Clock> clock_ =
      std::make_shared<testing_util::FakeClock>(testing_util::kADayIntoA744hWindow);
};

TEST_F(SnapshotTest, CountersSurviveCloseAndOpen) {
  {
    std::unique_ptr<Limiter> limiter = OpenOrDie(WithSnapshot());
    ASSERT_NE(limiter, nullptr);
    AwayFromTheWindowsEnd(*limiter);
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(limiter->Decide({.subject = "user-1", .plan = "free"})->allowed);
    }
    ASSERT_TRUE(limiter->Close().ok());
  }
  std::unique_ptr<Limiter> reopened = OpenOrDie(WithSnapshot());
  ASSERT_NE(reopened, nullptr);
  Result<std::vector<LimitUsage>> usage = reopened->Usage("user-1", "free");
  ASSERT_TRUE(usage.ok());
  EXPECT_EQ((*usage)[0].used, 3);
  EXPECT_TRUE(reopened->Decide({.subject = "user-1", .plan = "free", .cost = 2})->allowed);
  EXPECT_FALSE(reopened->Decide({.subject = "user-1", .plan = "free"})->allowed);
}

TEST_F(SnapshotTest, SaveSnapshotWritesWhatAnotherLimiterLoads) {
  std::unique_ptr<Limiter> limiter = OpenOrDie(WithSnapshot());
  ASSERT_NE(limiter, nullptr);
  AwayFromTheWindowsEnd(*limiter);
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(limiter->Decide({.subject = "user-1", .plan = "free"})->allowed);
  }
  ASSERT_TRUE(limiter->SaveSnapshot().ok());
  // A backup of the file, taken while the first limiter still runs, holds both decisions.
  Options copy = WithSnapshot();
  copy.store = MemoryStoreOptions{.snapshot_path = dir_ + "/backup.snap"};
  std::filesystem::copy_file(dir_ + "/state.snap", dir_ + "/backup.snap");
  std::unique_ptr<Limiter> restored = OpenOrDie(std::move(copy));
  ASSERT_NE(restored, nullptr);
  Result<std::vector<LimitUsage>> usage = restored->Usage("user-1", "free");
  ASSERT_TRUE(usage.ok());
  EXPECT_EQ((*usage)[0].used, 2);
  // Nothing has ended: a sweep keeps every counter.
  EXPECT_EQ(limiter->Sweep(), 0u);
  ASSERT_TRUE(limiter->Close().ok());
  EXPECT_EQ(limiter->SaveSnapshot().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(limiter->Sweep(), 0u);
}

TEST_F(MemoryLimiterTest, SaveSnapshotWithoutAPathIsFailedPrecondition) {
  EXPECT_EQ(limiter_->SaveSnapshot().code(), StatusCode::kFailedPrecondition);
}

TEST_F(SnapshotTest, ASecondLimiterOnTheSameSnapshotIsRefused) {
  std::unique_ptr<Limiter> first = OpenOrDie(WithSnapshot());
  ASSERT_NE(first, nullptr);
  Result<std::unique_ptr<Limiter>> second = Limiter::Open(WithSnapshot());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status().message(), HasSubstr("in use by another process"));
}

TEST_F(SnapshotTest, DamagedSnapshotIsDataLoss) {
  {
    std::unique_ptr<Limiter> limiter = OpenOrDie(WithSnapshot());
    ASSERT_NE(limiter, nullptr);
    ASSERT_TRUE(limiter->Decide({.subject = "user-1", .plan = "free"}).ok());
  }
  std::filesystem::resize_file(dir_ + "/state.snap", 10);
  Result<std::unique_ptr<Limiter>> limiter = Limiter::Open(WithSnapshot());
  ASSERT_FALSE(limiter.ok());
  EXPECT_EQ(limiter.status().code(), StatusCode::kDataLoss);
}

TEST_F(SnapshotTest, OpenFileReadsSluiceYaml) {
  const std::string path = dir_ + "/sluice.yaml";
  std::ofstream(path) << "plans:\n  free:\n    limits:\n"
                         "      - { name: per_window, quota: 2, window: 744h }\n";
  Result<std::unique_ptr<Limiter>> limiter = Limiter::OpenFile(path);
  ASSERT_TRUE(limiter.ok()) << limiter.status().message();
  EXPECT_THAT((*limiter)->plans(), ElementsAre("free"));
  EXPECT_TRUE((*limiter)->Decide({.subject = "u", .plan = "free", .cost = 2})->allowed);
  EXPECT_FALSE((*limiter)->Decide({.subject = "u", .plan = "free"})->allowed);
}

TEST_F(SnapshotTest, OpenFileNamesTheFileAndTheField) {
  const std::string path = dir_ + "/sluice.yaml";
  std::ofstream(path) << "plans:\n  free:\n    limits:\n"
                         "      - { name: per_window, quota: 0, window: 1m }\n";
  Result<std::unique_ptr<Limiter>> limiter = Limiter::OpenFile(path);
  ASSERT_FALSE(limiter.ok());
  EXPECT_EQ(limiter.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(limiter.status().message(),
            path +
                ": plans.free.limits[0].quota: must be at least 1 (0 only for a limit with "
                "window: credit)");
}

// Alert events received by the callback, waited for with a deadline.
class Received {
 public:
  AlertCallback Callback() {
    return [this](const AlertEvent& e) {
      std::lock_guard lock(mu_);
      events_.push_back(e);
      changed_.notify_all();
    };
  }
  bool WaitFor(size_t n) {
    std::unique_lock lock(mu_);
    return changed_.wait_for(lock, std::chrono::seconds(10), [&] { return events_.size() >= n; });
  }
  std::vector<AlertEvent> events() {
    std::lock_guard lock(mu_);
    return events_;
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  std::vector<AlertEvent> events_;
};

TEST(MemoryLimiterAlertTest, CallbackFiresOnceAt80AndOnceAt100) {
  Received received;
  Options options = FreeOptions();
  options.alerts.callback = received.Callback();
  std::unique_ptr<Limiter> limiter = OpenOrDie(std::move(options));
  ASSERT_NE(limiter, nullptr);
  for (int i = 0; i < 7; ++i) ASSERT_TRUE(limiter->Decide({.subject = "u", .plan = "free"}).ok());
  ASSERT_TRUE(received.WaitFor(2));
  // Close waits for the delivery in progress: whatever was fired has been handed over.
  ASSERT_TRUE(limiter->Close().ok());
  const std::vector<AlertEvent> events = received.events();
  ASSERT_EQ(events.size(), 2u);
  std::vector<int> thresholds = {events[0].threshold, events[1].threshold};
  std::sort(thresholds.begin(), thresholds.end());
  EXPECT_THAT(thresholds, ElementsAre(80, 100));
  for (const AlertEvent& e : events) {
    EXPECT_EQ(e.subject, "u");
    EXPECT_EQ(e.plan, "free");
    EXPECT_EQ(e.limit, "per_window");
    EXPECT_EQ(e.quota, 5);
    EXPECT_THAT(e.id, StartsWith("qa_"));
    EXPECT_LT(e.window_start, e.window_end);
  }
  EXPECT_NE(events[0].id, events[1].id);
}

TEST(MemoryLimiterAlertTest, ThrowingCallbackDoesNotStopTheLimiter) {
  std::atomic<int> calls{0};
  Options options = FreeOptions();
  options.alerts.callback = [&](const AlertEvent&) {
    ++calls;
    throw std::runtime_error("receiver bug");
  };
  std::unique_ptr<Limiter> limiter = OpenOrDie(std::move(options));
  ASSERT_NE(limiter, nullptr);
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(limiter->Decide({.subject = "u", .plan = "free"}).ok());
  EXPECT_TRUE(limiter->Decide({.subject = "v", .plan = "free"})->allowed);
  EXPECT_TRUE(limiter->Close().ok());
}

}  // namespace
}  // namespace sluice::lib
