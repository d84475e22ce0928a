#include "sluice/alerts/dispatcher.h"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/alerts/retry.h"
#include "sluice/common/clock.h"
#include "sluice/common/stderr_capture.h"
#include "sluice/limiter/sample_alert_event.h"
#include "sluice/metrics/metrics.h"

namespace sluice::alerts {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using Kind = Outcome::Kind;

const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);

// Every fake notifies this when its state changes; tests wait on it with a deadline.
class Changes {
 public:
  void Notify() {
    { std::lock_guard lock(mu_); }
    cv_.notify_all();
  }
  // Re-checks `ready` on every change (and every 5 ms for dispatcher-side state) for up to 5 s.
  bool WaitUntil(const std::function<bool()>& ready) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    std::unique_lock lock(mu_);
    while (!ready()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      cv_.wait_for(lock, std::chrono::milliseconds(5));
    }
    return true;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
};

AlertEvent Event(std::string subject, int threshold = 80) {
  return testing_util::SampleAlertEvent(std::move(subject), threshold);
}

// A sink that answers from a script, one outcome per attempt (the last one repeats), and records
// every call with the fake time it was made at. Optionally blocks each call until Release().
class ScriptedSink final : public Sink {
 public:
  struct Call {
    std::string event_id;
    int attempt = 0;
    absl::Time at;
    Contact contact;
  };

  ScriptedSink(std::string name, std::vector<Outcome> script, const Clock* clock, Changes* changes)
      : name_(std::move(name)), script_(std::move(script)), clock_(clock), changes_(changes) {}

  const std::string& name() const override { return name_; }

  Outcome Deliver(const AlertEvent& event, const Contact& contact, int attempt) override {
    Outcome out;
    {
      std::unique_lock lock(mu_);
      calls_.push_back({event.Id(), attempt, clock_->Now(), contact});
      ++running_;
      cv_.wait(lock, [&] { return !blocked_; });
      --running_;
      out = script_[std::min<size_t>(attempt, script_.size()) - 1];
    }
    changes_->Notify();
    return out;
  }

  void Block() {
    std::lock_guard lock(mu_);
    blocked_ = true;
  }
  void Release() {
    {
      std::lock_guard lock(mu_);
      blocked_ = false;
    }
    cv_.notify_all();
  }
  std::vector<Call> calls() const {
    std::lock_guard lock(mu_);
    return calls_;
  }
  size_t call_count() const {
    std::lock_guard lock(mu_);
    return calls_.size();
  }
  int running() const {
    std::lock_guard lock(mu_);
    return running_;
  }

 private:
  const std::string name_;
  const std::vector<Outcome> script_;
  const Clock* clock_;
  Changes* changes_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Call> calls_;
  bool blocked_ = false;
  int running_ = 0;
};

// An outbox held in the test: events added by Add() are fetched once; acks are recorded.
class FakeSource final : public OutboxSource {
 public:
  explicit FakeSource(Changes* changes) : changes_(changes) {}

  void Add(AlertEvent event, int64_t deliveries = 1) {
    std::lock_guard lock(mu_);
    const std::string id = absl::StrCat(next_++);
    fresh_.push_back({.handle = {.id = id}, .event = std::move(event), .deliveries = deliveries});
  }
  void LoseOnNextRenew(OutboxHandle h) {
    std::lock_guard lock(mu_);
    lose_.push_back(std::move(h));
  }
  void set_lease(absl::Duration d) { lease_ = d; }
  std::vector<std::string> acked() const {
    std::lock_guard lock(mu_);
    return acked_;
  }
  int renewals() const {
    std::lock_guard lock(mu_);
    return renewals_;
  }

  // While set, every Fetch fails (a store, or one cluster node, that is down).
  void set_fetch_fails(bool fails) {
    std::lock_guard lock(mu_);
    fetch_fails_ = fails;
  }
  int failed_fetches() const {
    std::lock_guard lock(mu_);
    return failed_fetches_;
  }

  absl::StatusOr<std::vector<OutboxItem>> Fetch(size_t max) override {
    std::unique_lock lock(mu_);
    if (fetch_fails_) {
      ++failed_fetches_;
      lock.unlock();
      changes_->Notify();
      return absl::UnavailableError("redis: not connected");
    }
    std::vector<OutboxItem> out;
    while (!fresh_.empty() && out.size() < max) {
      out.push_back(std::move(fresh_.front()));
      fresh_.erase(fresh_.begin());
    }
    return out;
  }
  absl::StatusOr<std::vector<OutboxItem>> Claim(size_t) override {
    return std::vector<OutboxItem>{};
  }
  absl::Status Ack(const OutboxHandle& h) override {
    {
      std::lock_guard lock(mu_);
      acked_.push_back(h.id);
    }
    changes_->Notify();
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<OutboxHandle>> Renew(std::span<const OutboxHandle>) override {
    std::vector<OutboxHandle> lost;
    {
      std::lock_guard lock(mu_);
      ++renewals_;
      lost.swap(lose_);
    }
    changes_->Notify();
    return lost;
  }
  absl::Duration lease() const override { return lease_; }
  absl::StatusOr<OutboxStats> Stats() override {
    std::lock_guard lock(mu_);
    return OutboxStats{.depth = static_cast<int64_t>(fresh_.size())};
  }

 private:
  Changes* changes_;
  absl::Duration lease_ = absl::InfiniteDuration();  // set before Start()
  mutable std::mutex mu_;
  std::vector<OutboxItem> fresh_;
  std::vector<OutboxHandle> lose_;
  std::vector<std::string> acked_;
  int renewals_ = 0;
  int next_ = 1;
  bool fetch_fails_ = false;
  int failed_fetches_ = 0;
};

Outcome Delivered() { return {.kind = Kind::kDelivered}; }
Outcome Retry(std::optional<absl::Duration> after = std::nullopt) {
  return {.kind = Kind::kRetry, .retry_after = after, .detail = "503"};
}
Outcome Permanent() { return {.kind = Kind::kPermanent, .detail = "400 bad request"}; }
Outcome Gone() { return {.kind = Kind::kGone, .detail = "410"}; }

class DispatcherTest : public ::testing::Test {
 protected:
  static constexpr uint32_t kSeed = 42;

  ScriptedSink& AddSink(std::string name, std::vector<Outcome> script) {
    sinks_.push_back(
        std::make_unique<ScriptedSink>(std::move(name), std::move(script), &clock_, &changes_));
    return *sinks_.back();
  }

  Dispatcher& Start(DispatcherOptions options = {}) {
    std::vector<Sink*> sinks;
    for (auto& s : sinks_) sinks.push_back(s.get());
    options.retry = retry_;
    options.poll_interval = absl::Milliseconds(5);
    options.metrics = &registry_;
    options.random = absl::BitGenRef(random_);
    if (!options.contacts) {
      options.contacts = [](std::string_view subject) {
        return Contact{.email = std::string(subject) + "@example.com"};
      };
    }
    dispatcher_ =
        std::make_unique<Dispatcher>(&source_, std::move(sinks), &clock_, std::move(options));
    dispatcher_->Start();
    return *dispatcher_;
  }

  void Advance(absl::Duration d) {
    clock_.Advance(d);
    dispatcher_->Wake();
  }

  bool WaitUntil(const std::function<bool()>& ready) { return changes_.WaitUntil(ready); }
  bool WaitForCalls(const ScriptedSink& sink, size_t n) {
    return WaitUntil([&] { return sink.call_count() >= n; });
  }
  bool WaitForAcks(size_t n) {
    return WaitUntil([&] { return source_.acked().size() >= n; });
  }
  // Waits until the only pending delivery of `sink` has made `attempts` calls and is not running.
  std::optional<PendingDelivery> WaitForRetryScheduled(const std::string& sink, int attempts) {
    std::optional<PendingDelivery> found;
    WaitUntil([&] {
      for (const PendingDelivery& p : dispatcher_->Pending()) {
        if (p.sink == sink && p.attempts == attempts && !p.in_flight) {
          found = p;
          return true;
        }
      }
      return false;
    });
    return found;
  }
  uint64_t Deliveries(std::string_view sink, std::string_view outcome) {
    return registry_.AddCounterFamily("sluice_alert_deliveries_total", "", {"sink", "outcome"})
        .WithLabels({sink, outcome})
        .value();
  }

  config::RetryConfig retry_{
      .max_attempts = 5, .first_delay = absl::Seconds(5), .max_delay = absl::Hours(1)};
  FakeClock clock_{kT0};
  Changes changes_;
  FakeSource source_{&changes_};
  metrics::Registry registry_;
  std::mt19937 random_{kSeed};
  std::vector<std::unique_ptr<ScriptedSink>> sinks_;
  std::unique_ptr<Dispatcher> dispatcher_;
};

TEST_F(DispatcherTest, DeliversEachEventOnceToEverySinkThenAcks) {
  ScriptedSink& a = AddSink("a", {Delivered()});
  ScriptedSink& b = AddSink("b", {Delivered()});
  source_.Add(Event("user-1"));
  source_.Add(Event("user-2"));
  Start();

  ASSERT_TRUE(WaitForAcks(2));
  dispatcher_->Stop();
  EXPECT_EQ(a.call_count(), 2u);
  EXPECT_EQ(b.call_count(), 2u);
  EXPECT_THAT(source_.acked(), ::testing::UnorderedElementsAre("1", "2"));
  EXPECT_EQ(a.calls()[0].attempt, 1);
  EXPECT_THAT(dispatcher_->Pending(), IsEmpty());
  EXPECT_EQ(Deliveries("a", "delivered"), 2u);
}

TEST_F(DispatcherTest, EachSinkCallIsObservedInItsSinksHistogram) {
  ScriptedSink& a = AddSink("a", {Retry(), Delivered()});
  AddSink("b", {Delivered()});
  source_.Add(Event("user-1"));
  Start();
  ASSERT_TRUE(WaitForRetryScheduled("a", 1).has_value());
  Advance(absl::Hours(1));  // past any backoff
  ASSERT_TRUE(WaitForAcks(1));
  dispatcher_->Stop();
  EXPECT_EQ(a.call_count(), 2u);
  metrics::HistogramFamily& seconds =
      registry_.AddHistogramFamily("sluice_alert_sink_duration_seconds", "", {"sink"},
                                   {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30});
  EXPECT_EQ(seconds.WithLabels({"a"}).snapshot().count, 2u);
  EXPECT_EQ(seconds.WithLabels({"b"}).snapshot().count, 1u);
}

TEST_F(DispatcherTest, AnOutboxThatKeepsFailingIsLoggedOnceAMinuteAndCountedEveryTime) {
  StderrCapture log;
  source_.set_fetch_fails(true);
  Start();
  // Every poll fails; each is counted, but only the first is logged within the minute.
  for (int i = 1; i <= 20; ++i) {
    Advance(absl::Milliseconds(10));
    ASSERT_TRUE(WaitUntil([&] { return source_.failed_fetches() >= i; })) << i;
  }
  dispatcher_.reset();  // its thread has counted every failure it saw
  const uint64_t errors = registry_.AddCounter("sluice_alert_source_errors_total", "").value();
  EXPECT_EQ(errors, static_cast<uint64_t>(source_.failed_fetches()));
  EXPECT_GE(errors, 20u);
  EXPECT_EQ(log.Count("alert outbox read failed"), 1u) << log.Text();
}

TEST_F(DispatcherTest, PassesTheSubjectsContactToTheSink) {
  ScriptedSink& a = AddSink("a", {Delivered()});
  source_.Add(Event("user-7"));
  Start();

  ASSERT_TRUE(WaitForAcks(1));
  EXPECT_EQ(a.calls()[0].contact.email, "user-7@example.com");
  EXPECT_EQ(a.calls()[0].event_id, Event("user-7").Id());
}

TEST_F(DispatcherTest, RetriesFollowTheBackoffSchedule) {
  ScriptedSink& a = AddSink("a", {Retry(), Retry(), Delivered()});
  source_.Add(Event("user-1"));
  Start();
  std::mt19937 mirror(kSeed);  // the dispatcher draws the same numbers in the same order

  const absl::Duration first = NextRetryDelay(retry_, 1, std::nullopt, mirror);
  std::optional<PendingDelivery> p = WaitForRetryScheduled("a", 1);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->next_attempt, kT0 + first);
  EXPECT_LE(first, absl::Seconds(5));

  Advance(first);
  ASSERT_TRUE(WaitForCalls(a, 2));
  const absl::Duration second = NextRetryDelay(retry_, 2, std::nullopt, mirror);
  p = WaitForRetryScheduled("a", 2);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->next_attempt, kT0 + first + second);
  EXPECT_LE(second, absl::Seconds(10));

  Advance(second);
  ASSERT_TRUE(WaitForAcks(1));
  const std::vector<ScriptedSink::Call> calls = a.calls();
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_EQ(calls[0].at, kT0);
  EXPECT_EQ(calls[1].at, kT0 + first);
  EXPECT_EQ(calls[2].at, kT0 + first + second);
  EXPECT_EQ(calls[2].attempt, 3);
}

TEST_F(DispatcherTest, RetryAfterIsTheMinimumWait) {
  retry_.first_delay = absl::Seconds(1);
  AddSink("a", {Retry(absl::Seconds(120)), Delivered()});
  source_.Add(Event("user-1"));
  Start();

  std::optional<PendingDelivery> p = WaitForRetryScheduled("a", 1);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->next_attempt, kT0 + absl::Seconds(120));
}

TEST_F(DispatcherTest, NoCallBeforeTheRetryIsDue) {
  ScriptedSink& a = AddSink("a", {Retry(absl::Seconds(60)), Delivered()});
  source_.Add(Event("user-1"));
  Start();
  ASSERT_TRUE(WaitForRetryScheduled("a", 1).has_value());

  Advance(absl::Seconds(59));
  ASSERT_TRUE(WaitForRetryScheduled("a", 1).has_value());
  Advance(absl::Seconds(1));
  ASSERT_TRUE(WaitForCalls(a, 2));
  EXPECT_EQ(a.calls()[1].at, kT0 + absl::Seconds(60));
}

TEST_F(DispatcherTest, SinkThatSucceededIsNotCalledAgainWhileAnotherRetries) {
  ScriptedSink& a = AddSink("a", {Delivered()});
  ScriptedSink& b = AddSink("b", {Retry(absl::Seconds(30)), Retry(absl::Seconds(30)), Delivered()});
  source_.Add(Event("user-1"));
  Start();

  ASSERT_TRUE(WaitForRetryScheduled("b", 1).has_value());
  Advance(absl::Seconds(30));
  ASSERT_TRUE(WaitForRetryScheduled("b", 2).has_value());
  EXPECT_THAT(source_.acked(), IsEmpty()) << "acked before every sink was done";
  Advance(absl::Seconds(30));
  ASSERT_TRUE(WaitForAcks(1));

  EXPECT_EQ(a.call_count(), 1u);
  EXPECT_EQ(b.call_count(), 3u);
}

TEST_F(DispatcherTest, GoneDisablesTheSinkForEveryLaterEvent) {
  ScriptedSink& a = AddSink("a", {Gone()});
  ScriptedSink& b = AddSink("b", {Delivered()});
  source_.Add(Event("user-1"));
  Start();
  ASSERT_TRUE(WaitForAcks(1));

  source_.Add(Event("user-2"));
  dispatcher_->Wake();
  ASSERT_TRUE(WaitForAcks(2));
  EXPECT_EQ(a.call_count(), 1u);
  EXPECT_EQ(b.call_count(), 2u);
  EXPECT_THAT(dispatcher_->DisabledSinks(), ElementsAre("a"));
  EXPECT_THAT(dispatcher_->DeadLetters(), IsEmpty());
  EXPECT_EQ(Deliveries("a", "gone"), 1u);
  EXPECT_EQ(Deliveries("a", "disabled"), 1u);
}

TEST_F(DispatcherTest, PermanentRefusalGoesToTheDeadLetters) {
  AddSink("a", {Permanent()});
  ScriptedSink& b = AddSink("b", {Delivered()});
  source_.Add(Event("user-1"));
  Start();

  ASSERT_TRUE(WaitForAcks(1));
  EXPECT_EQ(b.call_count(), 1u);
  const std::vector<DeadLetter> dead = dispatcher_->DeadLetters();
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].sink, "a");
  EXPECT_EQ(dead[0].event, Event("user-1"));
  EXPECT_EQ(dead[0].attempts, 1);
  EXPECT_EQ(dead[0].failed_at, kT0);
  EXPECT_THAT(dead[0].reason, HasSubstr("permanent: 400 bad request"));
  EXPECT_EQ(Deliveries("a", "dead"), 1u);
}

TEST_F(DispatcherTest, ExhaustedAttemptsGoToTheDeadLetters) {
  retry_.max_attempts = 3;
  ScriptedSink& a = AddSink("a", {Retry(absl::Seconds(10))});
  source_.Add(Event("user-1"));
  Start();

  for (int attempt = 1; attempt < 3; ++attempt) {
    ASSERT_TRUE(WaitForRetryScheduled("a", attempt).has_value());
    Advance(absl::Seconds(10));
  }
  ASSERT_TRUE(WaitForAcks(1));
  EXPECT_EQ(a.call_count(), 3u);
  const std::vector<DeadLetter> dead = dispatcher_->DeadLetters();
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].attempts, 3);
  EXPECT_THAT(dead[0].reason, HasSubstr("gave up after 3 attempts: 503"));
  EXPECT_EQ(dead[0].failed_at, kT0 + absl::Seconds(20));
}

TEST_F(DispatcherTest, DeadLettersGoToTheListPassedIn) {
  DeadLetterList list(10);
  AddSink("a", {Permanent()});
  source_.Add(Event("user-1"));
  Start({.dead_letters = &list});

  ASSERT_TRUE(WaitForAcks(1));
  EXPECT_EQ(list.size(), 1u);
}

TEST_F(DispatcherTest, EventHandedOutTooOftenIsDeadLetteredWithoutCalls) {
  ScriptedSink& a = AddSink("a", {Delivered()});
  source_.Add(Event("user-1"), /*deliveries=*/4);
  Start({.max_deliveries = 3});

  ASSERT_TRUE(WaitForAcks(1));
  EXPECT_EQ(a.call_count(), 0u);
  ASSERT_EQ(dispatcher_->DeadLetters().size(), 1u);
  EXPECT_THAT(dispatcher_->DeadLetters()[0].reason, HasSubstr("handed out 4 times"));
}

TEST_F(DispatcherTest, StopLeavesUndeliveredEventsUnacked) {
  AddSink("a", {Delivered()});
  ScriptedSink& b = AddSink("b", {Retry()});
  source_.Add(Event("user-1"));
  Start();
  ASSERT_TRUE(WaitForRetryScheduled("b", 1).has_value());

  dispatcher_->Stop();
  EXPECT_THAT(source_.acked(), IsEmpty());
  EXPECT_EQ(b.call_count(), 1u);
}

TEST_F(DispatcherTest, StopWaitsForTheCallInProgressAndStartsNoOther) {
  ScriptedSink& a = AddSink("a", {Delivered()});
  a.Block();
  source_.Add(Event("user-1"));
  source_.Add(Event("user-2"));
  Start({.max_calls_per_sink = 1});
  ASSERT_TRUE(WaitUntil([&] { return a.running() == 1; }));

  dispatcher_->RequestStop();
  a.Release();
  dispatcher_->Stop();
  EXPECT_EQ(a.call_count(), 1u);
  EXPECT_THAT(source_.acked(), ElementsAre("1")) << "the finished event is acked, the other not";
}

TEST_F(DispatcherTest, ASlowSinkDoesNotHoldUpTheOthers) {
  ScriptedSink& slow = AddSink("slow", {Delivered()});
  ScriptedSink& fast = AddSink("fast", {Delivered()});
  slow.Block();
  for (int i = 0; i < 6; ++i) source_.Add(Event(absl::StrCat("user-", i)));
  Start({.workers = 3, .max_calls_per_sink = 2});

  ASSERT_TRUE(WaitForCalls(fast, 6));
  EXPECT_EQ(slow.running(), 2) << "the slow sink holds at most max_calls_per_sink workers";
  EXPECT_THAT(source_.acked(), IsEmpty());
  slow.Release();
  ASSERT_TRUE(WaitForAcks(6));
  EXPECT_EQ(slow.call_count(), 6u);
}

TEST_F(DispatcherTest, HoldsAtMostMaxEventsInFlight) {
  ScriptedSink& a = AddSink("a", {Retry(absl::Seconds(10)), Delivered()});
  for (int i = 0; i < 5; ++i) source_.Add(Event(absl::StrCat("user-", i)));
  Start({.max_events_in_flight = 2});

  // Two events held, both waiting for their retry; the other three stay in the outbox.
  auto both_waiting = [&] {
    const std::vector<PendingDelivery> pending = dispatcher_->Pending();
    return pending.size() == 2 && !pending[0].in_flight && !pending[1].in_flight;
  };
  ASSERT_TRUE(WaitUntil(both_waiting));
  EXPECT_EQ(a.call_count(), 2u);
  EXPECT_EQ(source_.Stats()->depth, 3);

  Advance(absl::Seconds(10));
  ASSERT_TRUE(WaitUntil([&] { return source_.acked().size() == 2 && both_waiting(); }));
  EXPECT_EQ(a.call_count(), 6u);
  Advance(absl::Seconds(10));
  ASSERT_TRUE(WaitUntil([&] {
    const std::vector<PendingDelivery> pending = dispatcher_->Pending();
    return source_.acked().size() == 4 && pending.size() == 1 && !pending[0].in_flight;
  }));
  EXPECT_EQ(a.call_count(), 9u);
  Advance(absl::Seconds(10));
  ASSERT_TRUE(WaitForAcks(5));
}

TEST_F(DispatcherTest, RenewsHeldEventsAndDropsTheOnesItLost) {
  source_.set_lease(absl::Seconds(30));
  ScriptedSink& a = AddSink("a", {Retry(absl::Seconds(60)), Delivered()});
  source_.Add(Event("user-1"));
  Start();
  ASSERT_TRUE(WaitForRetryScheduled("a", 1).has_value());

  source_.LoseOnNextRenew({.id = "1"});
  Advance(absl::Seconds(10));  // lease / 3
  ASSERT_TRUE(WaitUntil([&] { return source_.renewals() >= 1 && dispatcher_->Pending().empty(); }));
  Advance(absl::Seconds(60));
  dispatcher_->Stop();
  EXPECT_EQ(a.call_count(), 1u) << "another consumer owns the event now";
  EXPECT_THAT(source_.acked(), IsEmpty());
  EXPECT_EQ(Deliveries("a", "abandoned"), 1u);
}

}  // namespace
}  // namespace sluice::alerts
