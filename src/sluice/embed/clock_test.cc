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

// Reservations through the public API: hold, settle in full past the quota, release, extend,
// and the expiry that charges the estimate by the library's clock.
class ReservationApiTest : public LimiterClockTest {
 protected:
  void SetUp() override {
    Options options;
    options.plans.push_back(PlanOptions{
        .name = "llm",
        .limits = {LimitOptions{.name = "tokens", .quota = 100, .window = "744h"},
                   LimitOptions{.name = "inflight", .quota = 2, .window = "concurrent"}}});
    options.clock = clock_;
    limiter_ = OpenClocked(std::move(options));
    ASSERT_NE(limiter_, nullptr);
  }
  Reservation Reserve(int64_t estimate, std::chrono::milliseconds ttl = std::chrono::minutes(1)) {
    Result<Reservation> r =
        limiter_->Reserve({.subject = "user-1", .plan = "llm", .estimate = estimate, .ttl = ttl});
    EXPECT_TRUE(r.ok()) << r.status().message();
    return r.ok() ? *std::move(r) : Reservation{};
  }
  // tokens' (used, held) now.
  std::pair<int64_t, int64_t> Tokens() {
    Result<Decision> d = limiter_->Decide({.subject = "user-1", .plan = "llm", .cost = 0});
    EXPECT_TRUE(d.ok());
    return d.ok() ? std::pair{d->limits[0].used, d->limits[0].held} : std::pair<int64_t, int64_t>{};
  }
  std::unique_ptr<Limiter> limiter_;
};

TEST_F(ReservationApiTest, ASettleChargesTheRealCostInFullAndAnswersTheSameAgain) {
  const Reservation r = Reserve(30);
  ASSERT_FALSE(r.id.empty());
  EXPECT_EQ(r.decision.limits[0].held, 30);
  EXPECT_EQ(r.decision.limits[1].held, 1);
  EXPECT_EQ(r.expires_at, clock_->Now() + std::chrono::minutes(1));
  Result<Decision> settled = limiter_->Settle(r.id, 120);
  ASSERT_TRUE(settled.ok()) << settled.status().message();
  EXPECT_EQ(settled->limits[0].used, 120);
  EXPECT_EQ(settled->limits[0].overshoot, 20);
  EXPECT_TRUE(limiter_->Settle(r.id, 120).ok());
  EXPECT_EQ(limiter_->Settle(r.id, 121).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(limiter_->Release(r.id).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(Tokens(), (std::pair<int64_t, int64_t>(120, 0)));
}

TEST_F(ReservationApiTest, TwoSlotsInFlightThenReleaseGivesOneBack) {
  const Reservation a = Reserve(0);
  const Reservation b = Reserve(0);
  ASSERT_FALSE(a.id.empty());
  ASSERT_FALSE(b.id.empty());
  const Reservation c = Reserve(0);
  EXPECT_FALSE(c.decision.allowed);
  EXPECT_TRUE(c.id.empty());
  EXPECT_TRUE(limiter_->Release(a.id).ok());
  EXPECT_TRUE(limiter_->Release(a.id).ok());  // again: the same answer
  EXPECT_TRUE(Reserve(0).decision.allowed);
  EXPECT_EQ(limiter_->Release("rsv_nonsense").code(), StatusCode::kInvalidArgument);
}

TEST_F(ReservationApiTest, AnUnsettledReservationIsChargedItsEstimateAtItsExpiry) {
  const Reservation r = Reserve(40, std::chrono::seconds(10));
  ASSERT_FALSE(r.id.empty());
  Result<std::chrono::system_clock::time_point> extended =
      limiter_->Extend(r.id, std::chrono::seconds(20));
  ASSERT_TRUE(extended.ok());
  EXPECT_EQ(*extended, clock_->Now() + std::chrono::seconds(20));
  clock_->Advance(std::chrono::seconds(15));
  (void)limiter_->ExpireReservations();
  EXPECT_EQ(Tokens(), (std::pair<int64_t, int64_t>(0, 40)));  // extended: still held
  clock_->Advance(std::chrono::seconds(5));
  (void)limiter_->ExpireReservations();  // the background expirer may have been first
  EXPECT_EQ(Tokens(), (std::pair<int64_t, int64_t>(40, 0)));
  EXPECT_EQ(limiter_->Settle(r.id, 1).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(limiter_->Extend(r.id, std::chrono::seconds(5)).status().code(),
            StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace sluice::lib
