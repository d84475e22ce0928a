// Options::clock: a libsluice Limiter reckons windows, expiries and alert times by the clock it is
// given (the memory store), through the public API only.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "sluice/embed/test_clock.h"
#include "sluice/limiter.h"
#include "sluice/options.h"
#include "sluice/status.h"

namespace sluice::lib {
namespace {

using std::chrono::hours;
using testing_util::FakeClock;
using testing_util::kADayIntoA744hWindow;

// One plan "free" with one limit of 2 per 31-day window, alerting at 100%.
Options ClockedOptions(std::shared_ptr<const Clock> clock) {
  Options options;
  options.plans.push_back(
      PlanOptions{.name = "free",
                  .limits = {LimitOptions{
                      .name = "per_window", .quota = 2, .window = "744h", .alert_at = {100}}}});
  options.clock = std::move(clock);
  return options;
}

std::unique_ptr<Limiter> OpenClocked(Options options) {
  Result<std::unique_ptr<Limiter>> limiter = Limiter::Open(std::move(options));
  EXPECT_TRUE(limiter.ok()) << limiter.status().message();
  return limiter.ok() ? *std::move(limiter) : nullptr;
}

class LimiterClockTest : public ::testing::Test {
 protected:
  Decision Decide(Limiter& limiter) {
    Result<Decision> d = limiter.Decide({.subject = "user-1", .plan = "free"});
    EXPECT_TRUE(d.ok()) << d.status().message();
    return d.ok() ? *std::move(d) : Decision{};
  }

  std::shared_ptr<FakeClock> clock_ = std::make_shared<FakeClock>(kADayIntoA744hWindow);
};

TEST_F(LimiterClockTest, WindowsEndWhenTheGivenClockSays) {
  std::unique_ptr<Limiter> limiter = OpenClocked(ClockedOptions(clock_));
  ASSERT_NE(limiter, nullptr);
  EXPECT_TRUE(Decide(*limiter).allowed);
  EXPECT_TRUE(Decide(*limiter).allowed);
  const Decision denied = Decide(*limiter);
  EXPECT_FALSE(denied.allowed);
  EXPECT_EQ(denied.retry_after, hours(30 * 24));

  clock_->Advance(hours(30 * 24) - std::chrono::seconds(1));
  EXPECT_FALSE(Decide(*limiter).allowed);
  EXPECT_EQ(Decide(*limiter).retry_after, std::chrono::seconds(1));
  clock_->Advance(std::chrono::seconds(1));
  const Decision next_window = Decide(*limiter);
  EXPECT_TRUE(next_window.allowed);
  ASSERT_EQ(next_window.limits.size(), 1u);
  EXPECT_EQ(next_window.limits[0].used, 1);
  EXPECT_EQ(next_window.limits[0].reset_after, hours(744));
}

TEST_F(LimiterClockTest, UsageResetsWhenTheGivenClockSays) {
  std::unique_ptr<Limiter> limiter = OpenClocked(ClockedOptions(clock_));
  ASSERT_NE(limiter, nullptr);
  Decide(*limiter);
  Result<std::vector<LimitUsage>> usage = limiter->Usage("user-1", "free");
  ASSERT_TRUE(usage.ok());
  ASSERT_EQ(usage->size(), 1u);
  EXPECT_EQ((*usage)[0].used, 1);
  EXPECT_EQ((*usage)[0].reset_after, hours(30 * 24));

  clock_->Advance(hours(30 * 24));
  usage = limiter->Usage("user-1", "free");
  ASSERT_TRUE(usage.ok());
  EXPECT_EQ((*usage)[0].used, 0);
}

// The clock stands years behind the host's: by the host's clock, that window ended long ago.
TEST_F(LimiterClockTest, SweepKeepsWhatHasNotEndedByTheGivenClock) {
  char dir[] = "/tmp/sluice-embed-clock-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  Options options = ClockedOptions(clock_);
  options.store = MemoryStoreOptions{.snapshot_path = std::string(dir) + "/state.snap"};
  std::unique_ptr<Limiter> limiter = OpenClocked(std::move(options));
  ASSERT_NE(limiter, nullptr);
  Decide(*limiter);
  EXPECT_EQ(limiter->Sweep(), 0u);
  Result<std::vector<LimitUsage>> usage = limiter->Usage("user-1", "free");
  ASSERT_TRUE(usage.ok());
  EXPECT_EQ((*usage)[0].used, 1);
  EXPECT_TRUE(limiter->Close().ok());
  std::filesystem::remove_all(dir);
}

TEST_F(LimiterClockTest, AlertsAreStampedByTheGivenClock) {
  std::mutex mu;
  std::condition_variable delivered;
  std::vector<AlertEvent> events;
  Options options = ClockedOptions(clock_);
  options.alerts.callback = [&](const AlertEvent& e) {
    std::lock_guard lock(mu);
    events.push_back(e);
    delivered.notify_all();
  };
  std::unique_ptr<Limiter> limiter = OpenClocked(std::move(options));
  ASSERT_NE(limiter, nullptr);
  Decide(*limiter);
  Decide(*limiter);  // 100%
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(
        delivered.wait_for(lock, std::chrono::seconds(10), [&] { return !events.empty(); }));
  }
  ASSERT_TRUE(limiter->Close().ok());
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].threshold, 100);
  EXPECT_EQ(events[0].occurred_at, kADayIntoA744hWindow);
  EXPECT_EQ(events[0].window_start, kADayIntoA744hWindow - hours(24));
  EXPECT_EQ(events[0].window_end, kADayIntoA744hWindow + hours(30 * 24));
}

}  // namespace
}  // namespace sluice::lib
