#include "sluice/store/memory/memory_outbox_source.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "sluice/alerts/dispatcher.h"
#include "sluice/common/clock.h"

namespace sluice::alerts {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);

AlertEvent Event(std::string subject) {
  return AlertEvent{.subject = std::move(subject),
                    .plan = "free",
                    .limit = "daily",
                    .threshold = 100,
                    .used = 10,
                    .quota = 10,
                    .window_start = kT0,
                    .window_end = kT0 + absl::Hours(24),
                    .occurred_at = kT0};
}

TEST(MemoryOutboxSourceTest, FetchHandsOutEachEventOnceAndAckRemovesIt) {
  Outbox outbox(10);
  ASSERT_TRUE(outbox.Push(Event("a")));
  ASSERT_TRUE(outbox.Push(Event("b")));
  MemoryOutboxSource source(&outbox);

  absl::StatusOr<std::vector<OutboxItem>> first = source.Fetch(1);
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(first->size(), 1u);
  EXPECT_EQ((*first)[0].event, Event("a"));
  absl::StatusOr<std::vector<OutboxItem>> second = source.Fetch(10);
  ASSERT_TRUE(second.ok());
  ASSERT_EQ(second->size(), 1u);
  EXPECT_EQ((*second)[0].event, Event("b"));
  EXPECT_TRUE(source.Fetch(10)->empty());

  ASSERT_TRUE(source.Ack((*first)[0].handle).ok());
  EXPECT_EQ(outbox.size(), 1u);
  EXPECT_EQ(source.Stats()->depth, 1);
  EXPECT_EQ(source.Stats()->oldest_event, kT0);
}

TEST(MemoryOutboxSourceTest, ANewSourceDeliversWhatTheOldOneDidNotAck) {
  Outbox outbox(10);
  ASSERT_TRUE(outbox.Push(Event("a")));
  {
    MemoryOutboxSource before_restart(&outbox);
    ASSERT_EQ(before_restart.Fetch(10)->size(), 1u);
  }
  MemoryOutboxSource after_restart(&outbox);
  absl::StatusOr<std::vector<OutboxItem>> items = after_restart.Fetch(10);
  ASSERT_TRUE(items.ok());
  ASSERT_EQ(items->size(), 1u);
  EXPECT_EQ((*items)[0].event, Event("a"));
}

TEST(MemoryOutboxSourceTest, NothingIsEverClaimedOrLost) {
  Outbox outbox(10);
  MemoryOutboxSource source(&outbox);
  EXPECT_TRUE(source.Claim(10)->empty());
  EXPECT_TRUE(source.Renew(std::vector<OutboxHandle>{{.id = "1"}})->empty());
  EXPECT_EQ(source.lease(), absl::InfiniteDuration());
}

class CountingSink final : public Sink {
 public:
  const std::string& name() const override { return name_; }
  Outcome Deliver(const AlertEvent&, const Contact&, int) override {
    {
      std::lock_guard lock(mu_);
      ++calls_;
    }
    cv_.notify_all();
    return {.kind = Outcome::Kind::kDelivered};
  }
  bool WaitForCalls(int n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(5), [&] { return calls_ >= n; });
  }
  // Re-checks `done` every 5 ms (the dispatcher acks after the call returns) for up to 5 s.
  bool WaitUntil(const std::function<bool()>& done) {
    std::unique_lock lock(mu_);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      cv_.wait_for(lock, std::chrono::milliseconds(5));
    }
    return true;
  }

 private:
  const std::string name_ = "webhook";
  std::mutex mu_;
  std::condition_variable cv_;
  int calls_ = 0;
};

TEST(MemoryOutboxSourceTest, DispatcherDeliversAndRemovesTheEvents) {
  Outbox outbox(10);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(outbox.Push(Event(absl::StrCat("user-", i))));
  MemoryOutboxSource source(&outbox);
  CountingSink sink;
  FakeClock clock(kT0);
  Dispatcher dispatcher(&source, {&sink}, &clock, {.poll_interval = absl::Milliseconds(5)});
  dispatcher.Start();

  ASSERT_TRUE(sink.WaitForCalls(3));
  ASSERT_TRUE(sink.WaitUntil([&] { return dispatcher.acked() == 3; }));
  dispatcher.Stop();
  EXPECT_EQ(outbox.size(), 0u);
}

// A MemoryOutboxSource that counts the dispatcher's reads.
class CountedSource final : public OutboxSource {
 public:
  explicit CountedSource(Outbox* outbox) : inner_(outbox) {}
  absl::StatusOr<std::vector<OutboxItem>> Fetch(size_t max) override {
    auto items = inner_.Fetch(max);
    ++fetches_;  // after the read: an event pushed from now on is not in it
    return items;
  }
  absl::StatusOr<std::vector<OutboxItem>> Claim(size_t max) override { return inner_.Claim(max); }
  absl::Status Ack(const OutboxHandle& handle) override { return inner_.Ack(handle); }
  absl::StatusOr<std::vector<OutboxHandle>> Renew(std::span<const OutboxHandle> held) override {
    return inner_.Renew(held);
  }
  absl::Duration lease() const override { return inner_.lease(); }
  absl::StatusOr<OutboxStats> Stats() override { return inner_.Stats(); }
  void SetWakeup(std::function<void()> wake) override { inner_.SetWakeup(std::move(wake)); }
  int fetches() const { return fetches_; }

 private:
  MemoryOutboxSource inner_;
  std::atomic<int> fetches_{0};
};

// With polls an hour apart, only the outbox's wake-up can bring a new event to the sink in time.
TEST(MemoryOutboxSourceTest, ARecordedEventWakesTheDispatcherInsteadOfWaitingForItsPoll) {
  Outbox outbox(10);
  CountedSource source(&outbox);
  CountingSink sink;
  FakeClock clock(kT0);
  Dispatcher dispatcher(&source, {&sink}, &clock,
                        {.poll_interval = absl::Hours(1), .stats_interval = absl::Hours(1)});
  dispatcher.Start();
  ASSERT_TRUE(sink.WaitUntil([&] { return source.fetches() >= 1; }));  // read the empty outbox
  ASSERT_TRUE(outbox.Push(Event("a")));
  outbox.NotifyRecorded();  // what the memory store does after a decision that recorded events
  ASSERT_TRUE(sink.WaitForCalls(1));
  dispatcher.Stop();
  // Stopped: the listener is withdrawn, so a later event reaches nobody (and nothing crashes).
  ASSERT_TRUE(outbox.Push(Event("b")));
  outbox.NotifyRecorded();
  EXPECT_EQ(outbox.size(), 1u);
}

TEST(MemoryOutboxSourceTest, StopDoesNotWaitOutThePollInterval) {
  Outbox outbox(10);
  ASSERT_TRUE(outbox.Push(Event("a")));
  MemoryOutboxSource source(&outbox);
  CountingSink sink;
  FakeClock clock(kT0);
  Dispatcher dispatcher(&source, {&sink}, &clock,
                        {.poll_interval = absl::Hours(1), .stats_interval = absl::Hours(1)});
  dispatcher.Start();
  ASSERT_TRUE(sink.WaitForCalls(1));
  const auto start = std::chrono::steady_clock::now();
  dispatcher.Stop();  // acks "a", then must leave at once rather than sleep until the next poll
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_EQ(outbox.size(), 0u);
}

}  // namespace
}  // namespace sluice::alerts
