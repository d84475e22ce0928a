#include "sluice/store/memory/memory_store.h"

#include <algorithm>
#include <atomic>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "sluice/limiter/limiter.h"
#include "sluice/limiter/store_conformance.h"

namespace sluice {
namespace {

class MemoryHarness final : public StoreHarness {
 public:
  explicit MemoryHarness(MemoryStore::Options options = {}) : store_(options) {}
  Store& store() override { return store_; }
  // The memory store answers before Decide returns: there is nothing to drive.
  void RunUntil(const std::function<bool()>& ready) override { ASSERT_TRUE(ready()); }
  std::vector<AlertEvent> TakeEvents() override {
    std::vector<AlertEvent> out;
    for (Outbox::Entry& e : store_.outbox().Read(0, SIZE_MAX)) {
      store_.outbox().Ack(e.seq);
      out.push_back(std::move(e.event));
    }
    return out;
  }
  void PlantCounter(const StoreRequest& req, size_t limit, int64_t value) override {
    std::vector<MemoryStore::SubjectState> states;
    bool found = false;
    store_.ForEach([&](const MemoryStore::SubjectState& st) {
      states.push_back(st);
      found = found || st.subject == req.subject;
    });
    if (!found) {
      MemoryStore::SubjectState st{.subject = std::string(req.subject)};
      for (const Limit& l : req.plan->limits) {
        st.counters.push_back({.tag = static_cast<uint16_t>(l.tag)});
      }
      st.alerts = req.plan->alerts;
      states.push_back(std::move(st));
    }
    const auto tag = static_cast<uint16_t>(req.plan->limits[limit].tag);
    for (MemoryStore::SubjectState& st : states) {
      if (st.subject != req.subject) continue;
      st.expires = absl::ToUnixSeconds(req.windows[limit].end) + 60;
      auto c = std::find_if(st.counters.begin(), st.counters.end(),
                            [&](const MemoryStore::Counter& k) { return k.tag == tag; });
      if (c == st.counters.end()) c = st.counters.insert(st.counters.end(), {.tag = tag});
      c->used = value;
      c->window = static_cast<uint32_t>(req.windows[limit].id);
    }
    store_.Restore(std::move(states));
  }
  std::optional<absl::Time> ExpiryOf(const StoreRequest& req, size_t limit) override {
    (void)limit;  // one expiry per subject
    std::optional<absl::Time> expiry;
    store_.ForEach([&](const MemoryStore::SubjectState& st) {
      if (st.subject == req.subject) expiry = absl::FromUnixSeconds(st.expires);
    });
    return expiry;
  }
  MemoryStore& memory() { return store_; }

 private:
  MemoryStore store_;
};

INSTANTIATE_TEST_SUITE_P(Memory, StoreConformanceTest,
                         ::testing::Values(StoreHarnessFactory{
                             "memory", [] { return std::make_unique<MemoryHarness>(); }}),
                         StoreHarnessName);
INSTANTIATE_TEST_SUITE_P(Memory, AlgorithmConformanceTest,
                         ::testing::Values(StoreHarnessFactory{
                             "memory", [] { return std::make_unique<MemoryHarness>(); }}),
                         StoreHarnessName);
INSTANTIATE_TEST_SUITE_P(Memory, ReservationConformanceTest,
                         ::testing::Values(StoreHarnessFactory{
                             "memory", [] { return std::make_unique<MemoryHarness>(); }}),
                         StoreHarnessName);

// Memory-store specifics: sweeping, a full outbox, reloads, and concurrency.
class MemoryStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { UseLimits({{"per_minute", 10, "1m", {80, 100}}}); }

  struct L {
    std::string name;
    int64_t quota;
    std::string window;
    std::vector<int> alert_at;
  };
  void UseLimits(const std::vector<L>& limits) {
    config::Config cfg;
    config::PlanConfig plan{.name = "p"};
    for (const L& l : limits) {
      plan.limits.push_back({.name = l.name,
                             .quota = l.quota,
                             .window = *config::ParseWindow(l.window),
                             .alert_at = l.alert_at});
    }
    cfg.plans.push_back(plan);
    limiter_ =
        std::make_unique<Limiter>(*PlanSet::FromConfig(cfg), &store_, &clock_, LimiterOptions{});
  }
  Decision Check(const std::string& subject, int64_t cost = 1) {
    Decision out;
    limiter_->Decide({.subject = subject, .plan = "p", .cost = cost},
                     [&](absl::StatusOr<Decision> d) { out = *d; });
    return out;
  }

  FakeClock clock_{absl::FromUnixSeconds(1796040000)};
  MemoryStore store_{MemoryStore::Options{.shards = 8, .outbox_capacity = 4}};
  std::unique_ptr<Limiter> limiter_;
};

TEST_F(MemoryStoreTest, DeniedRequestOfANewSubjectCreatesNoEntry) {
  UseLimits({{"per_minute", 10, "1m", {80}}});
  EXPECT_FALSE(Check("alice", 11).allowed);
  EXPECT_EQ(store_.subject_count(), 0u);
}

TEST_F(MemoryStoreTest, FirstDenialKeepsOnlyTheHundredPercentFlag) {
  EXPECT_FALSE(Check("alice", 11).allowed);
  EXPECT_EQ(store_.subject_count(), 1u);
  EXPECT_EQ(store_.outbox().size(), 1u);
  EXPECT_TRUE(Check("alice", 1).allowed);
  EXPECT_EQ(Check("alice", 0).limits[0].used, 1);
}

TEST_F(MemoryStoreTest, PeekCreatesNoEntry) {
  EXPECT_TRUE(Check("alice", 0).allowed);
  EXPECT_EQ(store_.subject_count(), 0u);
}

TEST_F(MemoryStoreTest, SweepDropsSubjectsWhoseWindowsEndedAndKeepsActiveOnes) {
  ASSERT_TRUE(Check("alice").allowed);
  clock_.Advance(absl::Seconds(90));
  ASSERT_TRUE(Check("bob").allowed);
  // alice's window ended 30 s ago, within the 60 s grace: kept.
  EXPECT_EQ(store_.Sweep(clock_.Now()), 0u);
  clock_.Advance(absl::Seconds(31));
  EXPECT_EQ(store_.Sweep(clock_.Now()), 1u);
  EXPECT_EQ(store_.subject_count(), 1u);
}

TEST_F(MemoryStoreTest, FullOutboxLeavesTheThresholdArmed) {
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(Check("s" + std::to_string(i), 8).allowed);
  ASSERT_EQ(store_.outbox().size(), 4u);
  ASSERT_TRUE(Check("alice", 8).allowed);  // crosses 80%, but there is no room to record it
  EXPECT_EQ(store_.outbox().refused(), 1u);
  store_.outbox().Ack(1);
  ASSERT_TRUE(Check("alice", 1).allowed);  // next request fires it after all
  std::vector<Outbox::Entry> events = store_.outbox().Read(0, 10);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events.back().event.subject, "alice");
  EXPECT_EQ(events.back().event.used, 9);
}

TEST_F(MemoryStoreTest, CountersSurviveAReloadThatReordersLimits) {
  UseLimits({{"a", 10, "1m", {}}, {"b", 20, "1h", {}}});
  ASSERT_TRUE(Check("alice", 3).allowed);
  UseLimits({{"c", 5, "1m", {}}, {"b", 20, "1h", {}}, {"a", 10, "1m", {}}});
  Decision d = Check("alice", 1);
  EXPECT_EQ(d.limits[0].used, 1);  // c is new
  EXPECT_EQ(d.limits[1].used, 4);  // b kept its count
  EXPECT_EQ(d.limits[2].used, 4);  // a kept its count
}

TEST_F(MemoryStoreTest, AQuotaChangedByAReloadHasThresholdsOfItsOwn) {
  ASSERT_TRUE(Check("alice", 8).allowed);
  store_.outbox().Ack(1);
  UseLimits({{"per_minute", 20, "1m", {80, 100}}});
  ASSERT_TRUE(Check("alice", 7).allowed);  // 15: 80% of 10 was sent, 80% of 20 is not reached
  EXPECT_EQ(store_.outbox().size(), 0u);
  ASSERT_TRUE(Check("alice", 1).allowed);  // 16 = 80% of 20
  ASSERT_EQ(store_.outbox().size(), 1u);
  EXPECT_EQ(store_.outbox().Read(0, 1)[0].event.quota, 20);
}

TEST_F(MemoryStoreTest, TheOutboxListenerHearsOfEachDecisionThatRecordedEvents) {
  int calls = 0;
  // The listener runs with no shard lock held: calling back into the store does not deadlock.
  store_.outbox().SetListener([&] {
    ++calls;
    EXPECT_EQ(store_.subject_count(), 1u);
  });
  ASSERT_TRUE(Check("alice", 7).allowed);  // below 80%: nothing recorded
  EXPECT_EQ(calls, 0);
  ASSERT_TRUE(Check("alice", 3).allowed);  // 80% and 100% in one decision: one call
  EXPECT_EQ(calls, 1);
  store_.outbox().SetListener(nullptr);
  clock_.Advance(absl::Minutes(1));
  ASSERT_TRUE(Check("alice", 10).allowed);  // records again, nobody listening
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(store_.outbox().size(), 4u);
}

TEST_F(MemoryStoreTest, ASweepKeepsTheAlertLayoutOfAnEntryNotTouchedSinceAReload) {
  ASSERT_TRUE(Check("alice", 8).allowed);  // 80% fired under [80, 100]
  store_.outbox().Ack(1);
  UseLimits({{"per_minute", 10, "1m", {50, 80, 100}}});
  for (int i = 0; i < 32; ++i) ASSERT_TRUE(Check("s" + std::to_string(i)).allowed);
  ASSERT_EQ(store_.Sweep(clock_.Now()), 0u);
  // alice's bits are still read through the layout she was written under: 50% is new, 80% is not.
  ASSERT_TRUE(Check("alice").allowed);
  std::vector<Outbox::Entry> events = store_.outbox().Read(0, SIZE_MAX);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].event.threshold, 50);
}

TEST_F(MemoryStoreTest, ASubjectHasOneEntryWhateverPlansCountIt) {
  ASSERT_TRUE(Check("alice", 3).allowed);
  const Plan raised = limiter_->plans().Find("p")->WithQuotas({20});
  Decision out;
  limiter_->Decide({.subject = "alice", .cost = 1, .effective_plan = &raised},
                   [&](absl::StatusOr<Decision> d) { out = *d; });
  EXPECT_EQ(out.limits[0].used, 4);
  EXPECT_EQ(store_.subject_count(), 1u);
}

TEST_F(MemoryStoreTest, BitsOfAnotherQuotaAreKeptOnlyOnceAQuotaChangesAndSweptWithTheWindow) {
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(Check("s" + std::to_string(i), 8).allowed);
  EXPECT_EQ(store_.other_quota_count(), 0u);  // no quota ever changed: nothing on the side
  const Plan raised = limiter_->plans().Find("p")->WithQuotas({20});
  limiter_->Decide({.subject = "s0", .cost = 1, .effective_plan = &raised},
                   [](absl::StatusOr<Decision>) {});
  EXPECT_EQ(store_.other_quota_count(), 1u);  // s0's 80% of 10, until 10 is in force again
  ASSERT_TRUE(Check("s1").allowed);
  EXPECT_EQ(store_.other_quota_count(), 1u);
  clock_.Advance(absl::Minutes(1) + absl::Seconds(61));
  EXPECT_EQ(store_.Sweep(clock_.Now()), 20u);
  EXPECT_EQ(store_.other_quota_count(), 0u);
}

TEST_F(MemoryStoreTest, AResetClearsTheBitsOfEveryQuota) {
  ASSERT_TRUE(Check("alice", 8).allowed);  // 80% of 10
  const Plan raised = limiter_->plans().Find("p")->WithQuotas({20});
  limiter_->Decide({.subject = "alice", .cost = 1, .effective_plan = &raised},
                   [](absl::StatusOr<Decision>) {});
  ASSERT_EQ(store_.other_quota_count(), 1u);
  limiter_->Reset("alice", "p", "", [](absl::Status s) { EXPECT_TRUE(s.ok()); });
  EXPECT_EQ(store_.other_quota_count(), 0u);
  EXPECT_EQ(store_.subject_count(), 0u);
}

// Many threads on one subject admit exactly the quota and fire each threshold once.
TEST(MemoryStoreConcurrencyTest, SixteenThreadsAdmitExactlyTheQuota) {
  constexpr int kThreads = 16;
  constexpr int kPerThread = 2000;
  constexpr int64_t kQuota = 5000;
  config::Config cfg;
  cfg.plans.push_back({.name = "p",
                       .limits = {{.name = "daily",
                                   .quota = kQuota,
                                   .window = *config::ParseWindow("day"),
                                   .alert_at = {50, 80, 100}},
                                  {.name = "per_hour",
                                   .quota = 1'000'000,
                                   .window = *config::ParseWindow("1h"),
                                   .alert_at = {}}}});
  FakeClock clock(absl::FromUnixSeconds(1796040000));
  MemoryStore store;
  Limiter limiter(*PlanSet::FromConfig(cfg), &store, &clock, {});

  std::atomic<int64_t> allowed{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      while (!go.load()) std::this_thread::yield();
      for (int i = 0; i < kPerThread; ++i) {
        limiter.Decide({.subject = "hot", .plan = "p", .cost = 1}, [&](absl::StatusOr<Decision> d) {
          if (d.ok() && d->allowed) allowed.fetch_add(1);
        });
      }
    });
  }
  go.store(true);
  for (std::thread& t : threads) t.join();

  EXPECT_EQ(allowed.load(), kQuota);
  std::vector<Outbox::Entry> events = store.outbox().Read(0, 100);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].event.threshold, 50);
  EXPECT_EQ(events[0].event.used, 2500);
  EXPECT_EQ(events[1].event.threshold, 80);
  EXPECT_EQ(events[1].event.used, 4000);
  EXPECT_EQ(events[2].event.threshold, 100);
  EXPECT_EQ(events[2].event.used, 5000);
}

// Open reservations are bounded: past max_reservations a reserve is refused until one ends; ended
// ones are remembered up to as many, the oldest forgotten first.
TEST(MemoryStoreReservationTest, OpenReservationsAreBoundedAndEndedOnesNeverStopNewOnes) {
  MemoryStore store(MemoryStore::Options{.shards = 1, .max_reservations = 2});
  FakeClock clock(absl::FromUnixSeconds(1796040000));
  config::Config cfg;
  cfg.plans.push_back(
      {.name = "p",
       .limits = {{.name = "per_hour", .quota = 1'000, .window = *config::ParseWindow("1h")}}});
  Limiter limiter(*PlanSet::FromConfig(cfg), &store, &clock, {});
  const auto reserve = [&] {
    absl::StatusOr<ReserveDecision> out = absl::UnknownError("no answer");
    limiter.Reserve(
        {.decision = {.subject = "u", .plan = "p", .cost = 0}, .hold = 1, .ttl = absl::Seconds(10)},
        [&](absl::StatusOr<ReserveDecision> r) { out = std::move(r); });
    return out;
  };
  const auto settle = [&](const std::string& id) {
    absl::StatusOr<SettleDecision> out = absl::UnknownError("no answer");
    limiter.Settle({.id = id, .cost = 1}, [&](absl::StatusOr<SettleDecision> s) { out = s; });
    return out;
  };
  absl::StatusOr<ReserveDecision> first = reserve();
  ASSERT_TRUE(first.ok());
  absl::StatusOr<ReserveDecision> second = reserve();
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(reserve().status()));
  EXPECT_EQ(store.open_reservations(), 2u);
  ASSERT_EQ(settle(first->id)->outcome, StoreSettleResult::Outcome::kEnded);
  EXPECT_EQ(store.open_reservations(), 1u);
  // An ended reservation takes no room: a hundred more reserve and settle at this rate.
  std::vector<std::string> ended = {first->id};
  for (int i = 0; i < 100; ++i) {
    absl::StatusOr<ReserveDecision> r = reserve();
    ASSERT_TRUE(r.ok()) << i;
    ASSERT_EQ(settle(r->id)->outcome, StoreSettleResult::Outcome::kEnded);
    ended.push_back(r->id);
  }
  // The two ended last are remembered (a repeated settle answers the same), older ones not.
  EXPECT_EQ(settle(ended[100])->outcome, StoreSettleResult::Outcome::kRepeated);
  EXPECT_EQ(settle(ended[99])->outcome, StoreSettleResult::Outcome::kRepeated);
  EXPECT_EQ(settle(ended[0])->outcome, StoreSettleResult::Outcome::kNotFound);
  ASSERT_TRUE(reserve().ok());
  EXPECT_TRUE(absl::IsResourceExhausted(reserve().status()));
  EXPECT_EQ(store.open_reservations(), 2u);
  ASSERT_EQ(settle(second->id)->outcome, StoreSettleResult::Outcome::kEnded);
  clock.Advance(absl::Seconds(10) + kReservationMemory);
  store.Sweep(clock.Now());
  EXPECT_TRUE(reserve().ok());
}

// Group decisions lock every part's shard once: with one shard, all parts share it (std::mutex
// is not recursive, so locking it twice would hang).
TEST(MemoryStoreGroupTest, PartsInOneShardAreDecidedUnderOneLock) {
  MemoryStore store(MemoryStore::Options{.shards = 1});
  FakeClock clock(absl::FromUnixSeconds(1796040000));
  config::Config cfg;
  cfg.plans.push_back(
      {.name = "p",
       .limits = {{.name = "per_minute", .quota = 10, .window = *config::ParseWindow("1m")}}});
  Limiter limiter(*PlanSet::FromConfig(cfg), &store, &clock, LimiterOptions{});
  const Plan* plan = limiter.plans().Find("p");
  std::vector<std::string> subjects;
  std::vector<GroupPart> parts;
  for (int i = 0; i < static_cast<int>(kMaxGroupParts); ++i) {
    subjects.push_back("s" + std::to_string(i));
  }
  for (const std::string& s : subjects) parts.push_back({.subject = s, .plan = plan, .cost = 10});
  std::optional<absl::StatusOr<std::vector<Decision>>> out;
  limiter.DecideGroup("", parts, [&](absl::StatusOr<std::vector<Decision>> d) { out = *d; });
  ASSERT_TRUE(out.has_value() && out->ok());
  EXPECT_TRUE((**out)[0].allowed);
  EXPECT_EQ(store.subject_count(), kMaxGroupParts);
}

// Two threads deciding groups over the same subjects in opposite orders: no deadlock, and the
// groups are all-or-nothing, so every subject ends at the same count, exactly the quota.
TEST(MemoryStoreGroupTest, ConcurrentOverlappingGroupsAreAtomicAndDoNotDeadlock) {
  MemoryStore store(MemoryStore::Options{.shards = 8});
  FakeClock clock(absl::FromUnixSeconds(1796040000));
  config::Config cfg;
  cfg.plans.push_back(
      {.name = "p",
       .limits = {{.name = "per_minute", .quota = 1000, .window = *config::ParseWindow("1m")}}});
  Limiter limiter(*PlanSet::FromConfig(cfg), &store, &clock, LimiterOptions{});
  const Plan* plan = limiter.plans().Find("p");
  std::vector<std::string> subjects;
  for (int i = 0; i < 12; ++i) subjects.push_back("u" + std::to_string(i));
  std::atomic<int> admitted{0};
  auto run = [&](bool reversed) {
    std::vector<GroupPart> parts;
    for (const std::string& s : subjects) parts.push_back({.subject = s, .plan = plan, .cost = 1});
    if (reversed) std::reverse(parts.begin(), parts.end());
    for (int i = 0; i < 800; ++i) {
      limiter.DecideGroup("", parts, [&](absl::StatusOr<std::vector<Decision>> d) {
        if (d.ok() && d->front().allowed) admitted.fetch_add(1);
      });
    }
  };
  std::thread a(run, false);
  std::thread b(run, true);
  a.join();
  b.join();
  EXPECT_EQ(admitted.load(), 1000);
  for (const std::string& s : subjects) {
    std::vector<LimitUsage> u;
    limiter.Usage(s, "p", [&](absl::StatusOr<std::vector<LimitUsage>> r) { u = *r; });
    EXPECT_EQ(u[0].used, 1000) << s;
  }
}

}  // namespace
}  // namespace sluice
