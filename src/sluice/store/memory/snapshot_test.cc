#include "sluice/store/memory/snapshot.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include <gtest/gtest.h>

#include "sluice/config/config.h"
#include "sluice/limiter/limiter.h"

namespace sluice {
namespace {

class SnapshotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("sluice_snapshot_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "state.snap").string();
    config::Config cfg;
    cfg.plans.push_back({.name = "p",
                         .limits = {{.name = "per_minute",
                                     .quota = 10,
                                     .window = *config::ParseWindow("1m"),
                                     .alert_at = {80, 100}},
                                    {.name = "daily",
                                     .quota = 100,
                                     .window = *config::ParseWindow("day"),
                                     .alert_at = {}}}});
    plans_ = std::make_unique<PlanSet>(*PlanSet::FromConfig(cfg));
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Replaces the plan's per_minute alert percentages (a reload).
  void AlertAt(std::vector<int> alert_at) {
    config::Config cfg;
    cfg.plans.push_back({.name = "p",
                         .limits = {{.name = "per_minute",
                                     .quota = 10,
                                     .window = *config::ParseWindow("1m"),
                                     .alert_at = std::move(alert_at)},
                                    {.name = "daily",
                                     .quota = 100,
                                     .window = *config::ParseWindow("day"),
                                     .alert_at = {}}}});
    plans_ = std::make_unique<PlanSet>(*PlanSet::FromConfig(cfg));
  }
  // Thresholds of the events in `store`'s outbox.
  static std::vector<int> Thresholds(const MemoryStore& store) {
    std::vector<int> out;
    for (const Outbox::Entry& e : store.outbox().All()) out.push_back(e.event.threshold);
    return out;
  }
  Decision Check(MemoryStore& store, const std::string& subject, int64_t cost = 1) {
    Limiter limiter(*plans_, &store, &clock_, {});
    Decision out;
    limiter.Decide({.subject = subject, .plan = "p", .cost = cost},
                   [&](absl::StatusOr<Decision> d) { out = *d; });
    return out;
  }
  Decision CheckWith(MemoryStore& store, const std::string& subject, const Plan& plan,
                     int64_t cost = 1) {
    Limiter limiter(*plans_, &store, &clock_, {});
    Decision out;
    limiter.Decide({.subject = subject, .cost = cost, .effective_plan = &plan},
                   [&](absl::StatusOr<Decision> d) { out = *d; });
    return out;
  }
  std::string ReadFile() {
    std::ifstream in(path_, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }
  void WriteFile(const std::string& data) { std::ofstream(path_, std::ios::binary) << data; }

  std::filesystem::path dir_;
  std::string path_;
  FakeClock clock_{absl::FromUnixSeconds(1796040000)};
  std::unique_ptr<PlanSet> plans_;
};

TEST_F(SnapshotTest, RoundTripKeepsCountersFlagsAndUndeliveredEvents) {
  MemoryStore before;
  ASSERT_TRUE(Check(before, "alice", 8).allowed);  // fires 80%
  ASSERT_TRUE(Check(before, "bob", 3).allowed);
  SnapshotStats saved;
  ASSERT_TRUE(SaveSnapshot(before, path_, &saved).ok());
  EXPECT_EQ(saved.subjects, 2u);
  EXPECT_EQ(saved.events, 1u);

  MemoryStore after;
  SnapshotStats loaded;
  ASSERT_TRUE(LoadSnapshot(path_, after, &loaded).ok());
  EXPECT_EQ(loaded.subjects, 2u);
  EXPECT_EQ(after.subject_count(), 2u);
  ASSERT_EQ(after.outbox().size(), 1u);
  EXPECT_EQ(after.outbox().All()[0].event, before.outbox().All()[0].event);
  // Counters continue where they were, and the fired 80% does not fire again.
  Decision d = Check(after, "alice", 1);
  EXPECT_EQ(d.limits[0].used, 9);
  EXPECT_EQ(d.limits[1].used, 9);
  EXPECT_EQ(after.outbox().size(), 1u);
  EXPECT_EQ(Check(after, "bob", 0).limits[0].used, 3);
}

// Reserves `hold` for `subject` under plan "p"; the reservation's id ("" when denied).
std::string ReserveFor(Limiter& limiter, const std::string& subject, int64_t hold) {
  std::string id;
  limiter.Reserve({.decision = {.subject = subject, .plan = "p", .cost = 0}, .hold = hold},
                  [&](absl::StatusOr<ReserveDecision> r) {
                    if (r.ok()) id = r->id;
                  });
  return id;
}
StoreSettleResult::Outcome SettleWith(Limiter& limiter, const std::string& id, int64_t cost) {
  StoreSettleResult::Outcome outcome = StoreSettleResult::Outcome::kNotFound;
  limiter.Settle({.id = id, .cost = cost}, [&](absl::StatusOr<SettleDecision> s) {
    if (s.ok()) outcome = s->outcome;
  });
  return outcome;
}

TEST_F(SnapshotTest, ReservationsSurviveARestartWithWhatTheyHoldAndHowTheyEnded) {
  MemoryStore before;
  Limiter limiter(*plans_, &before, &clock_, {});
  const std::string open = ReserveFor(limiter, "alice", 4);
  const std::string settled = ReserveFor(limiter, "alice", 3);
  ASSERT_FALSE(open.empty());
  ASSERT_FALSE(settled.empty());
  ASSERT_EQ(SettleWith(limiter, settled, 2), StoreSettleResult::Outcome::kEnded);
  SnapshotStats saved;
  ASSERT_TRUE(SaveSnapshot(before, path_, &saved).ok());
  EXPECT_EQ(saved.reservations, 2u);

  MemoryStore after;
  SnapshotStats loaded;
  ASSERT_TRUE(LoadSnapshot(path_, after, &loaded, {.now = clock_.Now()}).ok());
  EXPECT_EQ(loaded.reservations, 2u);
  EXPECT_EQ(after.open_reservations(), 1u);
  // 2 charged + 4 held of 10: 4 more fit, 5 do not.
  EXPECT_FALSE(Check(after, "alice", 5).allowed);
  EXPECT_TRUE(Check(after, "alice", 4).allowed);
  Limiter restarted(*plans_, &after, &clock_, {});
  EXPECT_EQ(SettleWith(restarted, settled, 2), StoreSettleResult::Outcome::kRepeated);
  EXPECT_EQ(SettleWith(restarted, open, 1), StoreSettleResult::Outcome::kEnded);
  EXPECT_EQ(Check(after, "alice", 0).limits[0].used, 7);
  EXPECT_EQ(Check(after, "alice", 0).limits[0].held, 0);
}

TEST_F(SnapshotTest, AYearWindowsCounterSurvivesARestartEarlyInTheYear) {
  config::Config cfg;
  cfg.plans.push_back({.name = "p",
                       .timezone = "Europe/Paris",
                       .limits = {{.name = "yearly",
                                   .quota = 1000,
                                   .window = *config::ParseWindow("year"),
                                   .alert_at = {1}}}});
  plans_ = std::make_unique<PlanSet>(*PlanSet::FromConfig(cfg));
  // 2028-01-02 in Paris: the leap year's window ends 365 days later, far beyond any month.
  clock_.Set(absl::FromCivil(absl::CivilSecond(2028, 1, 2, 12, 0, 0), plans_->Find("p")->tz));
  MemoryStore before;
  const Decision first = Check(before, "alice", 10);  // fires 1%
  ASSERT_TRUE(first.allowed);
  ASSERT_EQ(first.limits[0].window_end - first.limits[0].window_start, absl::Hours(24 * 366));
  ASSERT_TRUE(SaveSnapshot(before, path_).ok());

  MemoryStore after;
  SnapshotStats loaded;
  ASSERT_TRUE(LoadSnapshot(path_, after, &loaded, {.now = clock_.Now()}).ok());
  EXPECT_EQ(loaded.subjects, 1u);
  EXPECT_EQ(loaded.dropped_subjects, 0u);
  EXPECT_EQ(loaded.events, 1u);
  EXPECT_EQ(loaded.dropped_events, 0u);
  // Months later, the same year's counter continues and the fired 1% does not fire again.
  clock_.Advance(absl::Hours(24 * 300));
  EXPECT_EQ(Check(after, "alice", 1).limits[0].used, 11);
  EXPECT_EQ(after.outbox().size(), 1u);
  // The entry is kept until the year (and its grace) is over, then swept.
  EXPECT_EQ(after.Sweep(first.limits[0].window_end), 0u);
  EXPECT_EQ(after.Sweep(first.limits[0].window_end + absl::Hours(1)), 1u);
}

TEST_F(SnapshotTest, FiredThresholdsSurviveARestartWithChangedAlertPercentages) {
  MemoryStore before;
  ASSERT_TRUE(Check(before, "alice", 8).allowed);  // fires 80% of [80, 100]
  ASSERT_TRUE(SaveSnapshot(before, path_).ok());
  AlertAt({50, 80, 100});
  MemoryStore after;
  ASSERT_TRUE(LoadSnapshot(path_, after).ok());
  ASSERT_TRUE(Check(after, "alice", 1).allowed);
  // 50% is new (it fires), 80% was sent before the restart (it does not fire again).
  EXPECT_EQ(Thresholds(after), (std::vector<int>{80, 50}));
}

// A version 1 file (before alert layouts were saved) is still read, its fired bits by position.
TEST_F(SnapshotTest, VersionOneFilesAreStillRead) {
  auto put = [](std::string& out, uint64_t v, int bytes) {  // little-endian
    for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  };
  const Plan& plan = *plans_->Find("p");
  std::string p;
  put(p, 1, 8);  // one subject: plan tag, subject, expiry, counters
  put(p, plan.tag, 8);
  put(p, 5, 4);
  p += "alice";
  put(p, 1796040000 + 86400 + 60, 8);
  put(p, 2, 4);
  put(p, 8, 8);  // per_minute: used, window id (the fake clock's minute), tag, fired bits
  put(p, 1796040000 / 60, 4);
  put(p, LegacyLimitTag(plan.limits[0].name), 2);
  put(p, 0b01, 2);  // 80% fired
  put(p, 8, 8);     // daily
  put(p, 1796040000 / 86400, 4);
  put(p, LegacyLimitTag(plan.limits[1].name), 2);
  put(p, 0, 2);
  put(p, 0, 8);  // no events
  std::string file = "SLUICESN";
  put(file, 1, 4);  // version 1, payload length and CRC
  put(file, p.size(), 8);
  put(file, Crc32(p), 4);
  WriteFile(file + p);

  MemoryStore store;
  ASSERT_TRUE(LoadSnapshot(path_, store).ok());
  Decision d = Check(store, "alice", 1);
  EXPECT_EQ(d.limits[0].used, 9);
  EXPECT_EQ(d.limits[1].used, 9);
  EXPECT_TRUE(store.outbox().All().empty());  // 80% stays fired
  ASSERT_TRUE(Check(store, "alice", 1).allowed);
  EXPECT_EQ(Thresholds(store), std::vector<int>{100});
}

TEST_F(SnapshotTest, ThresholdsFiredUnderAnotherQuotaSurviveARestart) {
  MemoryStore before;
  const Plan raised = plans_->Find("p")->WithQuotas({20, 100});
  ASSERT_TRUE(Check(before, "alice", 8).allowed);  // 80% of 10
  ASSERT_TRUE(CheckWith(before, "alice", raised, 1).allowed);
  ASSERT_EQ(before.other_quota_count(), 1u);
  ASSERT_TRUE(SaveSnapshot(before, path_).ok());
  MemoryStore after;
  ASSERT_TRUE(LoadSnapshot(path_, after).ok());
  EXPECT_EQ(after.other_quota_count(), 1u);
  // Back under the plan's own quota: its 80% was sent before the restart and is not sent again.
  Decision d = Check(after, "alice", 1);
  EXPECT_EQ(d.limits[0].used, 10);
  EXPECT_EQ(Thresholds(after), (std::vector<int>{80, 100}));
}

TEST_F(SnapshotTest, NewEventsAreNumberedAfterRestoredOnes) {
  MemoryStore before;
  ASSERT_TRUE(Check(before, "alice", 8).allowed);
  ASSERT_TRUE(SaveSnapshot(before, path_).ok());
  MemoryStore after;
  ASSERT_TRUE(LoadSnapshot(path_, after).ok());
  ASSERT_TRUE(Check(after, "bob", 8).allowed);
  std::vector<Outbox::Entry> events = after.outbox().All();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_LT(events[0].seq, events[1].seq);
  EXPECT_EQ(events[1].event.subject, "bob");
}

TEST_F(SnapshotTest, SaveReplacesTheFileAtomicallyAndLeavesNoTemporaryFile) {
  MemoryStore store;
  ASSERT_TRUE(Check(store, "alice").allowed);
  ASSERT_TRUE(SaveSnapshot(store, path_).ok());
  ASSERT_TRUE(Check(store, "bob").allowed);
  ASSERT_TRUE(SaveSnapshot(store, path_).ok());
  size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
    (void)entry;
    ++files;
  }
  EXPECT_EQ(files, 1u);
  MemoryStore loaded;
  ASSERT_TRUE(LoadSnapshot(path_, loaded).ok());
  EXPECT_EQ(loaded.subject_count(), 2u);
}

TEST_F(SnapshotTest, MissingFileIsNotFound) {
  MemoryStore store;
  EXPECT_EQ(LoadSnapshot(path_, store).code(), absl::StatusCode::kNotFound);
}

TEST_F(SnapshotTest, UnwritableDirectoryIsAnError) {
  MemoryStore store;
  absl::Status s = SaveSnapshot(store, (dir_ / "missing" / "state.snap").string());
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("missing"), std::string::npos) << s;
}

class DamagedSnapshotTest : public SnapshotTest {
 protected:
  // Saves a snapshot with state, damages it with `damage`, and expects DataLoss mentioning `why`
  // with the target store untouched.
  void ExpectRejected(const std::function<void(std::string&)>& damage, const std::string& why) {
    MemoryStore before;
    ASSERT_TRUE(Check(before, "alice", 8).allowed);
    ASSERT_TRUE(SaveSnapshot(before, path_).ok());
    std::string data = ReadFile();
    damage(data);
    WriteFile(data);

    MemoryStore target;
    ASSERT_TRUE(Check(target, "carol", 2).allowed);
    absl::Status s = LoadSnapshot(path_, target);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_NE(s.message().find(why), std::string::npos) << s;
    EXPECT_NE(s.message().find(path_), std::string::npos) << s;
    EXPECT_EQ(target.subject_count(), 1u);
    EXPECT_EQ(Check(target, "carol", 0).limits[0].used, 2);
  }
};

TEST_F(DamagedSnapshotTest, TruncatedFileIsRejected) {
  ExpectRejected([](std::string& d) { d.resize(d.size() - 5); }, "torn write");
}

TEST_F(DamagedSnapshotTest, FlippedByteIsRejected) {
  ExpectRejected([](std::string& d) { d[d.size() / 2 + 12] ^= 0x40; }, "checksum mismatch");
}

TEST_F(DamagedSnapshotTest, ForeignFileIsRejected) {
  ExpectRejected([](std::string& d) { d.replace(0, 8, "NOTSLUIC"); }, "bad magic");
}

TEST_F(DamagedSnapshotTest, HeaderOnlyFragmentIsRejected) {
  ExpectRejected([](std::string& d) { d.resize(10); }, "shorter than its header");
}

TEST_F(DamagedSnapshotTest, FutureVersionIsRejected) {
  ExpectRejected([](std::string& d) { d[8] = 9; }, "unsupported version 9");
}

// Files with a valid checksum but values no decision could have produced.
class CraftedSnapshotTest : public SnapshotTest {
 protected:
  static void Put(std::string& out, uint64_t v, int bytes) {  // little-endian
    for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  static void PutStr(std::string& out, std::string_view s) {
    Put(out, s.size(), 4);
    out += s;
  }
  struct Crafted {
    std::string subject = "alice";
    uint64_t plan_tag = 0;  // 0: plan "p"'s
    int64_t expires = 1796040000 + 86400 + 60;
    int64_t used = 8;
    std::vector<int> percents = {80, 100};  // per_minute's layout
  };
  struct CraftedEvent {
    uint64_t seq = 1;
    std::string subject = "alice";
    int32_t threshold = 80;
    int64_t used = 8;
    int64_t quota = 10;
    int64_t window_start = 1796040000;
    int64_t window_end = 1796040060;
  };
  // A version 2 payload: `subjects` under plan "p" (one per_minute counter in the fake clock's
  // minute), then `events`.
  std::string Payload(const std::vector<Crafted>& subjects,
                      const std::vector<CraftedEvent>& events = {}) {
    const Plan& plan = *plans_->Find("p");
    std::string p;
    Put(p, subjects.size(), 8);
    for (const Crafted& c : subjects) {
      Put(p, c.plan_tag != 0 ? c.plan_tag : plan.tag, 8);
      PutStr(p, c.subject);
      Put(p, static_cast<uint64_t>(c.expires), 8);
      Put(p, 1, 4);
      Put(p, static_cast<uint64_t>(c.used), 8);
      Put(p, 1796040000 / 60, 4);
      Put(p, LegacyLimitTag(plan.limits[0].name), 2);
      Put(p, 0, 2);
      Put(p, 1, 1);  // a layout: one limit
      Put(p, 1, 4);
      Put(p, LegacyLimitTag(plan.limits[0].name), 2);
      Put(p, c.percents.size(), 1);
      for (int percent : c.percents) Put(p, static_cast<uint64_t>(percent), 1);
    }
    Put(p, events.size(), 8);
    for (const CraftedEvent& e : events) {
      Put(p, e.seq, 8);
      PutStr(p, e.subject);
      PutStr(p, "p");
      PutStr(p, "per_minute");
      Put(p, static_cast<uint32_t>(e.threshold), 4);
      Put(p, static_cast<uint64_t>(e.used), 8);
      Put(p, static_cast<uint64_t>(e.quota), 8);
      Put(p, static_cast<uint64_t>(e.window_start * 1'000'000), 8);
      Put(p, static_cast<uint64_t>(e.window_end * 1'000'000), 8);
      Put(p, static_cast<uint64_t>(e.window_start * 1'000'000), 8);
    }
    return p;
  }
  void WritePayload(const std::string& p) {
    std::string file = "SLUICESN";
    Put(file, 2, 4);
    Put(file, p.size(), 8);
    Put(file, Crc32(p), 4);
    WriteFile(file + p);
  }
};

TEST_F(CraftedSnapshotTest, AReservationWhoseIdNamesAnotherSubjectIsDropped) {
  MemoryStore before;
  Limiter limiter(*plans_, &before, &clock_, {});
  ASSERT_FALSE(ReserveFor(limiter, "mallory", 4).empty());
  ASSERT_FALSE(ReserveFor(limiter, "alice", 1).empty());
  ASSERT_TRUE(SaveSnapshot(before, path_).ok());
  // The same file with the first reservation's subject changed (its id still names "mallory"),
  // and a checksum that matches.
  std::string file = ReadFile();
  std::string payload = file.substr(24);
  const size_t at = payload.find("mallory");
  ASSERT_NE(at, std::string::npos);
  payload.replace(at, 7, "mallorz");
  std::string header = file.substr(0, 20);
  Put(header, Crc32(payload), 4);
  WriteFile(header + payload);

  MemoryStore after;
  SnapshotStats loaded;
  ASSERT_TRUE(LoadSnapshot(path_, after, &loaded).ok());
  EXPECT_EQ(loaded.reservations, 1u);
  EXPECT_EQ(loaded.dropped_reservations, 1u);
  EXPECT_EQ(Check(after, "mallorz", 0).limits[0].held, 0);
  EXPECT_EQ(Check(after, "alice", 0).limits[0].held, 1);
}

TEST_F(CraftedSnapshotTest, ImpossibleCountersAreDroppedAndCountedTheRestIsLoaded) {
  WritePayload(Payload({{.subject = "alice"},
                        {.subject = "mallory", .used = -5},
                        {.subject = "eve", .used = INT64_MAX},
                        {.subject = "trudy", .used = kMaxUsed + 1},
                        {.subject = "bad subject"}}));
  MemoryStore store;
  SnapshotStats stats;
  ASSERT_TRUE(LoadSnapshot(path_, store, &stats).ok());
  EXPECT_EQ(stats.subjects, 1u);
  EXPECT_EQ(stats.dropped_subjects, 4u);
  EXPECT_EQ(Check(store, "alice", 0).limits[0].used, 8);
  for (const std::string subject : {"mallory", "eve", "trudy"}) {
    Decision d = Check(store, subject, 1);
    EXPECT_TRUE(d.allowed) << subject;
    EXPECT_EQ(d.limits[0].used, 1) << subject;  // a fresh counter, not the crafted one
  }
}

TEST_F(CraftedSnapshotTest, AnExpiryBeyondAnyWindowIsDroppedWhenTheLoaderKnowsTheTime) {
  WritePayload(Payload({{.subject = "alice"},
                        {.subject = "bob", .expires = 1796040000 + 10LL * 365 * 86400},
                        {.subject = "carol", .expires = -1}}));
  MemoryStore store;
  SnapshotStats stats;
  ASSERT_TRUE(LoadSnapshot(path_, store, &stats, {.now = clock_.Now()}).ok());
  EXPECT_EQ(stats.subjects, 1u);
  EXPECT_EQ(stats.dropped_subjects, 2u);
}

TEST_F(CraftedSnapshotTest, AnExpiryAsFarAsAYearIsKeptButNoFurther) {
  const int64_t now = 1796040000;
  WritePayload(Payload({{.subject = "alice", .expires = now + 366LL * 86400 + 60},
                        {.subject = "bob", .expires = now + 369LL * 86400},
                        {.subject = "carol", .expires = int64_t{UINT32_MAX}}}));
  MemoryStore store;
  SnapshotStats stats;
  ASSERT_TRUE(LoadSnapshot(path_, store, &stats, {.now = clock_.Now()}).ok());
  EXPECT_EQ(stats.subjects, 1u);
  EXPECT_EQ(stats.dropped_subjects, 2u);
  // What was kept is swept once its expiry has passed: it does not live forever.
  EXPECT_EQ(store.Sweep(absl::FromUnixSeconds(now + 366LL * 86400 + 61)), 1u);
  EXPECT_EQ(store.subject_count(), 0u);
}

TEST_F(CraftedSnapshotTest, AnAlertLayoutThatNoPlanHasIsDropped) {
  WritePayload(Payload({{.subject = "a", .percents = {100, 80}},
                        {.subject = "b", .percents = {0}},
                        {.subject = "c", .percents = {80, 80}},
                        {.subject = "d", .percents = {101}},
                        {.subject = "e", .percents = {50, 100}}}));
  MemoryStore store;
  SnapshotStats stats;
  ASSERT_TRUE(LoadSnapshot(path_, store, &stats).ok());
  EXPECT_EQ(stats.subjects, 1u);
  EXPECT_EQ(stats.dropped_subjects, 4u);
}

TEST_F(CraftedSnapshotTest, ImpossibleEventsAreDroppedAndCounted) {
  WritePayload(Payload({}, {{.seq = 5},
                            {.seq = 5},  // not after the previous one
                            {.seq = 6, .threshold = 0},
                            {.seq = 7, .used = -1},
                            {.seq = 8, .quota = 0},
                            {.seq = 9, .window_start = 1796040060, .window_end = 1796040000},
                            {.seq = 10, .subject = "no spaces"},
                            {.seq = UINT64_MAX},
                            {.seq = 11}}));
  MemoryStore store;
  SnapshotStats stats;
  ASSERT_TRUE(LoadSnapshot(path_, store, &stats).ok());
  EXPECT_EQ(stats.events, 2u);
  EXPECT_EQ(stats.dropped_events, 7u);
  ASSERT_EQ(store.outbox().All().size(), 2u);
  EXPECT_EQ(store.outbox().All()[1].seq, 11u);
}

// A version-2 file has a record per (plan, subject); usage now follows the subject, so the
// records of one subject are merged: the larger counters win, then the later expiry.
TEST_F(CraftedSnapshotTest, AVersionTwoSubjectUnderTwoPlansKeepsTheLargerCounters) {
  WritePayload(Payload({{.subject = "alice", .plan_tag = 1, .used = 7},
                        {.subject = "alice", .plan_tag = 2, .used = 3},
                        {.subject = "bob", .plan_tag = 1, .used = 2},
                        {.subject = "bob", .plan_tag = 2, .used = 5}}));
  MemoryStore store;
  SnapshotStats stats;
  ASSERT_TRUE(LoadSnapshot(path_, store, &stats).ok());
  EXPECT_EQ(stats.subjects, 2u);
  EXPECT_EQ(stats.dropped_subjects, 2u);
  EXPECT_EQ(Check(store, "alice", 0).limits[0].used, 7);
  EXPECT_EQ(Check(store, "bob", 0).limits[0].used, 5);
}

TEST_F(CraftedSnapshotTest, AVersionTwoSubjectUnderTwoPlansWithEqualCountersKeepsTheLaterExpiry) {
  const int64_t t = 1796040000;
  WritePayload(Payload({{.subject = "alice", .plan_tag = 1, .expires = t + 200},
                        {.subject = "alice", .plan_tag = 2, .expires = t + 100}}));
  MemoryStore store;
  ASSERT_TRUE(LoadSnapshot(path_, store).ok());
  EXPECT_EQ(store.Sweep(absl::FromUnixSeconds(t + 150)), 0u);
  EXPECT_EQ(store.subject_count(), 1u);
}

TEST_F(CraftedSnapshotTest, AVersionTwoCounterIsFoundByItsLimitsName) {
  WritePayload(Payload({{.subject = "alice", .used = 8}}));
  MemoryStore store;
  ASSERT_TRUE(LoadSnapshot(path_, store).ok());
  Decision d = Check(store, "alice", 1);
  EXPECT_EQ(d.limits[0].used, 9);
  EXPECT_EQ(d.limits[1].used, 1);  // daily was not in the record
}

TEST_F(CraftedSnapshotTest, CountsLargerThanTheFileAreRefusedWithoutAllocating) {
  auto expect_refused = [&](const std::string& payload, const std::string& why) {
    WritePayload(payload);
    MemoryStore store;
    absl::Status s = LoadSnapshot(path_, store);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_NE(s.message().find(why), std::string::npos) << s;
  };
  std::string p;
  Put(p, uint64_t{1} << 60, 8);  // 2^60 subjects in a few bytes
  Put(p, 0, 8);
  expect_refused(p, "subject count does not match the data");

  p = Payload({{}});
  p.replace(8 + 8 + 4 + 5 + 8, 4, std::string("\xff\xff\xff\x7f", 4));  // 2^31 counters
  expect_refused(p, "limit count does not match the data");

  p.clear();
  Put(p, 1, 8);
  Put(p, 1, 8);
  Put(p, 0xffffffff, 4);  // a 4 GiB subject name
  p += std::string(32, 'x');
  expect_refused(p, "truncated record");

  p = Payload({});
  p.replace(8, 8, std::string("\0\0\0\0\0\0\0\x10", 8));  // 2^60 events
  expect_refused(p, "event count does not match the data");
}

TEST(Crc32Test, MatchesTheStandardCheckValue) {
  EXPECT_EQ(Crc32("123456789"), 0xCBF43926u);
  EXPECT_EQ(Crc32(""), 0u);
}

}  // namespace
}  // namespace sluice
