#include "sluice/limiter/degraded_ledger.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "sluice/config/config.h"
#include "sluice/limiter/limiter.h"
#include "sluice/limiter/test_counting_store.h"

namespace sluice {
namespace {

using testing_util::CountingStore;

// The ledger on its own: one subject's part of a decision under a plan of two limits.
class DegradedLedgerTest : public ::testing::Test {
 protected:
  DegradedLedgerTest() {
    plan_.quotas = {10, 100};
    plan_.tags = {1, 2};
    windows_ = {
        WindowBounds{
            .id = 1, .start = absl::FromUnixSeconds(60), .end = absl::FromUnixSeconds(120)},
        WindowBounds{
            .id = 1, .start = absl::FromUnixSeconds(0), .end = absl::FromUnixSeconds(86400)}};
  }
  DegradedLedger::Part Part(std::string_view subject, int64_t cost = 1) {
    return {.subject = subject, .plan = &plan_, .windows = windows_, .cost = cost};
  }
  // A degraded decision of `subject`; its known usage after it in `used`.
  bool Admit(std::string_view subject, int64_t cost = 1,
             absl::InlinedVector<int64_t, 4>* used = nullptr) {
    const DegradedLedger::Part part = Part(subject, cost);
    absl::InlinedVector<int64_t, 4> out[1];
    const bool allowed = ledger_.AdmitDegraded(absl::MakeConstSpan(&part, 1), now_, out);
    if (used != nullptr) *used = out[0];
    return allowed;
  }
  bool DeniesAfter(std::string_view subject, int64_t cost = 1) {
    const DegradedLedger::Part part = Part(subject, cost);
    absl::InlinedVector<int64_t, 4> out[1];
    return ledger_.DeniesAfterDegraded(absl::MakeConstSpan(&part, 1), now_, out);
  }
  void Observe(std::string_view subject, std::vector<int64_t> used) {
    ledger_.Observe(Part(subject), used, now_);
  }

  PlanQuotas plan_;
  std::vector<WindowBounds> windows_;
  absl::Time now_ = absl::FromUnixSeconds(90);
  DegradedLedgerStats stats_;
  DegradedLedger ledger_{1000, &stats_};
};

TEST_F(DegradedLedgerTest, WithNothingSeenDegradedAdmissionsStopAtTheQuota) {
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(Admit("u")) << i;
  absl::InlinedVector<int64_t, 4> used;
  EXPECT_FALSE(Admit("u", 1, &used));
  EXPECT_EQ(used, (absl::InlinedVector<int64_t, 4>{10, 10}));
  EXPECT_EQ(stats_.admitted.load(), 10u);
  EXPECT_EQ(stats_.denied.load(), 1u);
}

TEST_F(DegradedLedgerTest, WhatTheStoreReportedCountsAgainstTheQuota) {
  Observe("u", {7, 40});
  absl::InlinedVector<int64_t, 4> used;
  ASSERT_TRUE(Admit("u", 3, &used));
  EXPECT_EQ(used, (absl::InlinedVector<int64_t, 4>{10, 43}));
  EXPECT_FALSE(Admit("u"));
  // An older, lower report does not lower what is known.
  Observe("u", {2, 2});
  EXPECT_FALSE(Admit("u"));
}

TEST_F(DegradedLedgerTest, AdmissionIsAllOrNothingAcrossLimits) {
  Observe("u", {0, 99});
  EXPECT_FALSE(Admit("u", 2));  // the daily limit has room for 1 only
  absl::InlinedVector<int64_t, 4> used;
  ASSERT_TRUE(Admit("u", 1, &used));
  EXPECT_EQ(used, (absl::InlinedVector<int64_t, 4>{1, 100}));
}

TEST_F(DegradedLedgerTest, AShadowLimitNeverDenies) {
  plan_.shadow = {true, false};
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(Admit("u")) << i;
}

TEST_F(DegradedLedgerTest, ANewWindowStartsAfresh) {
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(Admit("u"));
  ASSERT_FALSE(Admit("u"));
  windows_[0] = {.id = 2, .start = absl::FromUnixSeconds(120), .end = absl::FromUnixSeconds(180)};
  now_ = absl::FromUnixSeconds(150);
  absl::InlinedVector<int64_t, 4> used;
  ASSERT_TRUE(Admit("u", 1, &used));
  EXPECT_EQ(used, (absl::InlinedVector<int64_t, 4>{1, 11}));  // the day goes on
}

TEST_F(DegradedLedgerTest, APeekCountsNothing) {
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(Admit("u", 0));
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(Admit("u"));
}

TEST_F(DegradedLedgerTest, OnlyASubjectAdmittedDegradedIsDeniedWithoutTheStore) {
  Observe("u", {10, 10});
  EXPECT_FALSE(DeniesAfter("u"));  // the store knows all of it: ask the store
  Observe("v", {8, 8});
  ASSERT_TRUE(Admit("v", 2));
  EXPECT_TRUE(DeniesAfter("v"));
  EXPECT_FALSE(DeniesAfter("v", 0));  // a peek asks the store
  // The store's own count (without this instance's degraded 2) rises: still 2 on top of it.
  Observe("w", {0, 0});
  ASSERT_TRUE(Admit("w", 2));
  Observe("w", {7, 7});
  EXPECT_FALSE(DeniesAfter("w"));  // 7 + 2 + 1 fits 10
  Observe("w", {8, 8});
  EXPECT_TRUE(DeniesAfter("w"));
}

TEST_F(DegradedLedgerTest, AResetForgetsTheSubject) {
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(Admit("u"));
  ledger_.Forget("u");
  EXPECT_FALSE(DeniesAfter("u"));
  EXPECT_TRUE(Admit("u"));
}

TEST_F(DegradedLedgerTest, AGroupIsAdmittedAsAWhole) {
  const std::vector<DegradedLedger::Part> parts = {Part("a", 4), Part("b", 4)};
  std::vector<absl::InlinedVector<int64_t, 4>> used(2);
  Observe("b", {5, 5});
  ASSERT_TRUE(ledger_.AdmitDegraded(parts, now_, absl::MakeSpan(used)));
  EXPECT_EQ(used[0][0], 4);
  EXPECT_EQ(used[1][0], 9);
  EXPECT_FALSE(ledger_.AdmitDegraded(parts, now_, absl::MakeSpan(used)));  // b has 1 left
  EXPECT_TRUE(Admit("a", 6));  // nothing of a's was counted by the denied group
}

TEST_F(DegradedLedgerTest, AFullLedgerKeepsDegradedSubjectsAndDeniesWhenOnlyTheyAreLeft) {
  DegradedLedger small(16, &stats_);  // one subject per shard
  auto admit = [&](const std::string& subject) {
    const DegradedLedger::Part part = Part(subject);
    absl::InlinedVector<int64_t, 4> out[1];
    return small.AdmitDegraded(absl::MakeConstSpan(&part, 1), now_, out);
  };
  // Subjects admitted degraded in every shard: none can be dropped before its window ends.
  for (int i = 0; small.size() < 16 && i < 10000; ++i) (void)admit("s" + std::to_string(i));
  ASSERT_EQ(small.size(), 16u);
  const uint64_t full = stats_.full.load();
  EXPECT_FALSE(admit("newcomer"));
  EXPECT_EQ(stats_.full.load(), full + 1);
  // Once their windows have ended, they make room.
  now_ = absl::FromUnixSeconds(90000);
  windows_[0] = {
      .id = 9, .start = absl::FromUnixSeconds(89940), .end = absl::FromUnixSeconds(90000 + 60)};
  windows_[1] = {
      .id = 2, .start = absl::FromUnixSeconds(86400), .end = absl::FromUnixSeconds(172800)};
  EXPECT_TRUE(admit("newcomer"));
}

TEST_F(DegradedLedgerTest, AFullLedgerMakesRoomForADegradedAdmissionByDroppingAnObservation) {
  DegradedLedger small(16, &stats_);
  for (int i = 0; small.size() < 16 && i < 10000; ++i) {
    small.Observe(Part("s" + std::to_string(i)), std::vector<int64_t>{1, 1}, now_);
  }
  ASSERT_EQ(small.size(), 16u);
  const DegradedLedger::Part part = Part("newcomer");
  absl::InlinedVector<int64_t, 4> out[1];
  EXPECT_TRUE(small.AdmitDegraded(absl::MakeConstSpan(&part, 1), now_, out));
  EXPECT_EQ(small.size(), 16u);
}

// The ledger through the Limiter: a store that fails under on_store_error: allow.
class LimiterLedgerTest : public ::testing::Test {
 protected:
  LimiterLedgerTest() {
    config::Config cfg;
    cfg.plans.push_back(
        {.name = "free",
         .limits = {{.name = "per_minute", .quota = 10, .window = *config::ParseWindow("1m")}}});
    plans_ = *PlanSet::FromConfig(cfg);
    Rebuild(config::OnStoreError::kAllow);
  }
  // A new Limiter (as a reload makes) on the same store and ledger.
  void Rebuild(config::OnStoreError policy) {
    limiter_.emplace(plans_, &store_, &clock_,
                     LimiterOptions{.on_store_error = policy, .degraded_ledger = &ledger_});
  }
  Decision Decide(std::string_view subject, int64_t cost = 1) {
    std::optional<absl::StatusOr<Decision>> out;
    limiter_->Decide({.subject = subject, .plan = "free", .cost = cost},
                     [&](absl::StatusOr<Decision> d) { out = std::move(d); });
    EXPECT_TRUE(out.has_value() && out->ok());
    return **out;
  }
  int Admitted(std::string_view subject, int n) {
    int admitted = 0;
    for (int i = 0; i < n; ++i) admitted += Decide(subject).allowed ? 1 : 0;
    return admitted;
  }

  PlanSet plans_;
  CountingStore store_;
  DegradedLedger ledger_;
  // 2026-11-30T23:59:00Z: a whole minute ahead.
  FakeClock clock_{absl::FromUnixSeconds(1796083140)};
  std::optional<Limiter> limiter_;
};

TEST_F(LimiterLedgerTest, WhileTheStoreFailsASubjectGetsWhatItsQuotaLeaves) {
  ASSERT_EQ(Admitted("u", 4), 4);
  store_.failure = StoreFailure::kTimeout;
  // Denied by the ledger: 6 are left, not 7. The answer says why, and that it was degraded.
  Decision d = Decide("u", 7);
  EXPECT_TRUE(d.degraded);
  EXPECT_EQ(d.failure, StoreFailure::kTimeout);
  EXPECT_FALSE(d.allowed);
  EXPECT_TRUE(d.limits[0].violated);
  EXPECT_EQ(d.limits[0].used, 4);
  EXPECT_EQ(d.retry_after, 60);
  Decision first = Decide("u");
  EXPECT_TRUE(first.allowed);
  EXPECT_TRUE(first.degraded);
  EXPECT_EQ(first.limits[0].used, 5);
  EXPECT_EQ(first.limits[0].remaining, 5);
  EXPECT_EQ(Admitted("u", 20), 5);
  // Spent by what this instance admitted degraded: denied without the store, a certain denial.
  const int calls = store_.decides;
  Decision spent = Decide("u");
  EXPECT_FALSE(spent.allowed);
  EXPECT_EQ(store_.decides, calls);
  EXPECT_EQ(spent.limits[0].used, 10);
  EXPECT_TRUE(spent.limits[0].violated);
}

TEST_F(LimiterLedgerTest, AReloadKeepsWhatWasAdmittedDegraded) {
  store_.failure = StoreFailure::kConnection;
  ASSERT_EQ(Admitted("u", 10), 10);
  Rebuild(config::OnStoreError::kAllow);
  EXPECT_EQ(Admitted("u", 5), 0);
}

TEST_F(LimiterLedgerTest, OnceTheStoreAnswersAgainWhatWasAdmittedDegradedStillCounts) {
  ASSERT_EQ(Admitted("u", 3), 3);
  store_.failure = StoreFailure::kTimeout;
  ASSERT_EQ(Admitted("u", 5), 5);
  store_.failure.reset();
  // The store has counted 3; this instance admitted 5 more: 2 are left, and the store is not
  // asked once they are spent.
  EXPECT_EQ(Admitted("u", 2), 2);
  const int calls = store_.decides;
  Decision d = Decide("u");
  EXPECT_FALSE(d.allowed);
  EXPECT_FALSE(d.degraded);
  EXPECT_EQ(store_.decides, calls);
  EXPECT_EQ(d.limits[0].used, 10);
}

TEST_F(LimiterLedgerTest, UnderDenyEveryDegradedDecisionIsDenied) {
  Rebuild(config::OnStoreError::kDeny);
  store_.failure = StoreFailure::kTimeout;
  EXPECT_EQ(Admitted("u", 5), 0);
}

TEST_F(LimiterLedgerTest, AnAdminResetForgetsWhatWasAdmittedDegraded) {
  store_.failure = StoreFailure::kTimeout;
  ASSERT_EQ(Admitted("u", 10), 10);
  std::optional<absl::Status> reset;
  limiter_->Reset("u", "free", "", [&](absl::Status s) { reset = s; });
  ASSERT_TRUE(reset.has_value() && reset->ok());
  EXPECT_EQ(Admitted("u", 3), 3);
}

TEST_F(LimiterLedgerTest, AReportTheStoreCannotAnswerIsAllowedAndCountedByTheLedger) {
  ASSERT_EQ(Admitted("u", 8), 8);
  store_.failure = StoreFailure::kTimeout;
  std::optional<absl::StatusOr<Decision>> out;
  limiter_->Decide({.subject = "u", .plan = "free", .cost = 5, .mode = DecideMode::kReport},
                   [&](absl::StatusOr<Decision> d) { out = std::move(d); });
  ASSERT_TRUE(out.has_value() && out->ok());
  EXPECT_TRUE((*out)->allowed);
  EXPECT_TRUE((*out)->degraded);
  EXPECT_EQ((*out)->limits[0].used, 13);
  EXPECT_FALSE((*out)->limits[0].violated);
  // What the report charged is known: nothing is left, with the store down or back.
  EXPECT_EQ(Admitted("u", 3), 0);
  store_.failure.reset();
  EXPECT_EQ(Admitted("u", 3), 0);
}

TEST_F(LimiterLedgerTest, AReportIsNotDeniedByWhatWasAdmittedDegraded) {
  store_.failure = StoreFailure::kTimeout;
  ASSERT_EQ(Admitted("u", 10), 10);
  store_.failure.reset();
  ASSERT_FALSE(Decide("u").allowed);  // denied by the ledger, without the store
  const int calls = store_.decides;
  std::optional<absl::StatusOr<Decision>> out;
  limiter_->Decide({.subject = "u", .plan = "free", .cost = 2, .mode = DecideMode::kReport},
                   [&](absl::StatusOr<Decision> d) { out = std::move(d); });
  ASSERT_TRUE(out.has_value() && out->ok());
  EXPECT_TRUE((*out)->allowed);
  EXPECT_FALSE((*out)->degraded);
  EXPECT_EQ(store_.decides, calls + 1);  // charged in the store
}

TEST_F(LimiterLedgerTest, AGroupTheStoreCannotAnswerIsDecidedAgainstTheLedger) {
  const Plan& free = *plans_.Find("free");
  auto group = [&](int64_t cost) {
    std::optional<absl::StatusOr<std::vector<Decision>>> out;
    limiter_->DecideGroup("",
                          {GroupPart{.subject = "a", .plan = &free, .cost = cost},
                           GroupPart{.subject = "b", .plan = &free, .cost = cost}},
                          [&](absl::StatusOr<std::vector<Decision>> d) { out = std::move(d); });
    EXPECT_TRUE(out.has_value() && out->ok());
    return (**out)[0].allowed;
  };
  ASSERT_TRUE(group(6));
  store_.failure = StoreFailure::kTimeout;
  EXPECT_TRUE(group(4));
  EXPECT_FALSE(group(1));
  store_.failure.reset();
  EXPECT_FALSE(group(1));  // the ledger denies it: both parts are spent
}

}  // namespace
}  // namespace sluice
