// Reservations, concurrency limits and settlement (docs/semantics.md, Reservations and
// Concurrency) as conformance cases: every store that supports reservations instantiates
// ReservationConformanceTest (see store_conformance.h).
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "sluice/limiter/store_conformance.h"

namespace sluice {
namespace {

using config::LimitConfig;
using config::PlanConfig;
using config::WindowSpec;
using Outcome = StoreSettleResult::Outcome;

LimitConfig Counting(std::string name, int64_t quota, std::string window,
                     std::vector<int> alert_at = {}) {
  return {.name = std::move(name),
          .quota = quota,
          .window = *config::ParseWindow(window),
          .alert_at = std::move(alert_at)};
}

}  // namespace

ReserveDecision ReservationConformanceTest::Reserve(const std::string& subject, int64_t hold,
                                                    absl::Duration ttl, int64_t cost,
                                                    const std::string& plan) {
  std::optional<absl::StatusOr<ReserveDecision>> out;
  limiter_->Reserve(
      {.decision = {.subject = subject, .plan = plan, .cost = cost}, .hold = hold, .ttl = ttl},
      [&](absl::StatusOr<ReserveDecision> d) { out = std::move(d); });
  harness_->RunUntil([&] { return out.has_value(); });
  EXPECT_TRUE(out.has_value() && out->ok()) << (out ? out->status().ToString() : "no answer");
  return out.has_value() && out->ok() ? **out : ReserveDecision{};
}

SettleDecision ReservationConformanceTest::End(const std::string& id, ReservationEnd end,
                                               int64_t cost) {
  std::optional<absl::StatusOr<SettleDecision>> out;
  limiter_->Settle({.id = id, .cost = cost, .end = end},
                   [&](absl::StatusOr<SettleDecision> d) { out = std::move(d); });
  harness_->RunUntil([&] { return out.has_value(); });
  EXPECT_TRUE(out.has_value() && out->ok()) << (out ? out->status().ToString() : "no answer");
  return out.has_value() && out->ok() ? **out : SettleDecision{};
}

size_t ReservationConformanceTest::ExpireDue() {
  std::optional<absl::StatusOr<size_t>> out;
  limiter_->ExpireDue(1000, [&](absl::StatusOr<size_t> n) { out = std::move(n); });
  harness_->RunUntil([&] { return out.has_value(); });
  EXPECT_TRUE(out.has_value() && out->ok());
  return out.has_value() && out->ok() ? **out : 0;
}

void ReservationConformanceTest::UseReservationPlans(bool charge_on_expiry) {
  UsePlans({PlanConfig{
      .name = "p",
      .timezone = "UTC",
      .limits = {Counting("per_minute", 100, "1m"), Counting("daily", 1000, "day", {80, 100}),
                 Counting("inflight", 3, "concurrent")},
      .on_reservation_expiry = charge_on_expiry ? PlanConfig::OnReservationExpiry::kCharge
                                                : PlanConfig::OnReservationExpiry::kRelease}});
}

TEST_P(ReservationConformanceTest, AHoldCountsAgainstEveryRequestUntilSettled) {
  UseReservationPlans();
  const ReserveDecision r = Reserve("u", 60);
  ASSERT_TRUE(r.decision.allowed);
  ASSERT_FALSE(r.id.empty());
  EXPECT_EQ(r.decision.limits[0].held, 60);
  EXPECT_EQ(r.decision.limits[0].used, 0);
  EXPECT_EQ(r.decision.limits[0].remaining, 40);
  EXPECT_EQ(r.decision.limits[2].held, 1);  // one slot in flight
  // 60 held + 41 > 100: denied, and nothing consumed.
  const Decision denied = Check("u", 41);
  EXPECT_FALSE(denied.allowed);
  EXPECT_TRUE(denied.limits[0].violated);
  EXPECT_EQ(denied.limits[0].used, 0);
  EXPECT_TRUE(Check("u", 40).allowed);

  // The real cost is charged and the hold released in one step.
  const SettleDecision s = End(r.id, ReservationEnd::kSettle, 25);
  EXPECT_EQ(s.outcome, Outcome::kEnded);
  EXPECT_EQ(s.charged, 25);
  EXPECT_EQ(s.decision.limits[0].used, 65);
  EXPECT_EQ(s.decision.limits[0].held, 0);
  EXPECT_EQ(s.decision.limits[1].used, 65);
  EXPECT_EQ(s.decision.limits[2].held, 0);
  EXPECT_EQ(s.decision.limits[2].used, 0);
  EXPECT_TRUE(Check("u", 35).allowed);
  EXPECT_FALSE(Check("u", 1).allowed);
}

TEST_P(ReservationConformanceTest, ASettlePastTheQuotaChargesInFullAndDeniesTheNextRequest) {
  UseReservationPlans();
  const ReserveDecision r = Reserve("u", 10);
  ASSERT_TRUE(r.decision.allowed);
  const SettleDecision s = End(r.id, ReservationEnd::kSettle, 130);
  EXPECT_EQ(s.outcome, Outcome::kEnded);
  EXPECT_EQ(s.decision.limits[0].used, 130);  // the work was done: charged in full
  EXPECT_EQ(s.decision.limits[0].overshoot, 30);
  EXPECT_EQ(s.decision.limits[0].remaining, 0);
  EXPECT_EQ(s.decision.limits[1].overshoot, 0);
  EXPECT_FALSE(Check("u", 1).allowed);
  EXPECT_FALSE(Reserve("u", 0).decision.allowed);
}

TEST_P(ReservationConformanceTest, SettlingAgainAnswersTheSameOrConflicts) {
  UseReservationPlans();
  const ReserveDecision r = Reserve("u", 10);
  ASSERT_TRUE(r.decision.allowed);
  EXPECT_EQ(End(r.id, ReservationEnd::kSettle, 7).outcome, Outcome::kEnded);
  const SettleDecision again = End(r.id, ReservationEnd::kSettle, 7);
  EXPECT_EQ(again.outcome, Outcome::kRepeated);
  EXPECT_EQ(again.decision.limits[0].used, 7);  // charged once
  EXPECT_EQ(End(r.id, ReservationEnd::kSettle, 8).outcome, Outcome::kConflict);
  EXPECT_EQ(End(r.id, ReservationEnd::kRelease).outcome, Outcome::kConflict);
  EXPECT_EQ(UsageOf("u")[0].used, 7);
}

TEST_P(ReservationConformanceTest, ReleaseChargesNothingAndFreesTheSlot) {
  UseReservationPlans();
  const ReserveDecision r = Reserve("u", 50);
  ASSERT_TRUE(r.decision.allowed);
  EXPECT_EQ(End(r.id, ReservationEnd::kRelease).outcome, Outcome::kEnded);
  EXPECT_EQ(End(r.id, ReservationEnd::kRelease).outcome, Outcome::kRepeated);
  EXPECT_EQ(End(r.id, ReservationEnd::kSettle, 1).outcome, Outcome::kConflict);
  const std::vector<LimitUsage> usage = UsageOf("u");
  EXPECT_EQ(usage[0].used, 0);
  EXPECT_TRUE(Check("u", 100).allowed);
}

TEST_P(ReservationConformanceTest, AnUnknownIdIsNotFound) {
  UseReservationPlans();
  const ReserveDecision r = Reserve("u", 1);
  ASSERT_TRUE(r.decision.allowed);
  // The same subject and plan with another random part: a well-formed id of no reservation.
  std::string other = r.id;
  other[4] = other[4] == 'a' ? 'b' : 'a';
  EXPECT_EQ(End(other, ReservationEnd::kSettle, 1).outcome, Outcome::kNotFound);
  // Another subject's id with this reservation's random part is not this reservation either.
  const ReserveDecision theirs = Reserve("v", 1);
  ASSERT_TRUE(theirs.decision.allowed);
  std::string forged = theirs.id;
  forged.replace(4, 26, r.id.substr(4, 26));
  EXPECT_EQ(End(forged, ReservationEnd::kSettle, 1).outcome, Outcome::kNotFound);
}

TEST_P(ReservationConformanceTest, AReportIsChargedDespiteHoldsAndFullConcurrentSlots) {
  UseReservationPlans();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Reserve("u", 30).decision.allowed);  // 90 held, 3 slots
  ASSERT_FALSE(Check("u", 1).allowed);                                         // no slot left
  const Decision d = Report("u", 40);  // 90 held + 40 > 100, and no slot: still charged
  EXPECT_TRUE(d.allowed);
  EXPECT_FALSE(d.limits[0].violated);
  EXPECT_FALSE(d.limits[2].violated);
  EXPECT_EQ(d.limits[0].used, 40);
  EXPECT_EQ(UsageOf("u")[0].used, 40);
}

TEST_P(ReservationConformanceTest, AConcurrentLimitCapsReservationsInFlight) {
  UseReservationPlans();
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    const ReserveDecision r = Reserve("u", 0);
    ASSERT_TRUE(r.decision.allowed) << i;
    ids.push_back(r.id);
  }
  const ReserveDecision fourth = Reserve("u", 0);
  EXPECT_FALSE(fourth.decision.allowed);
  EXPECT_TRUE(fourth.id.empty());
  EXPECT_TRUE(fourth.decision.limits[2].violated);
  EXPECT_EQ(fourth.decision.limits[2].held, 3);
  // A plain request needs a free slot too, but takes none.
  EXPECT_FALSE(Check("u", 1).allowed);
  EXPECT_TRUE(Check("u", 0).allowed);  // a peek is never denied
  EXPECT_EQ(End(ids[0], ReservationEnd::kSettle, 1).outcome, Outcome::kEnded);
  EXPECT_TRUE(Check("u", 1).allowed);
  EXPECT_TRUE(Reserve("u", 0).decision.allowed);
  EXPECT_FALSE(Reserve("u", 0).decision.allowed);
}

TEST_P(ReservationConformanceTest, AnExpiredReservationIsChargedItsEstimateExactlyOnce) {
  UseReservationPlans(/*charge_on_expiry=*/true);
  const ReserveDecision r = Reserve("u", 30, absl::Seconds(10));
  ASSERT_TRUE(r.decision.allowed);
  clock_->Advance(absl::Seconds(9));
  EXPECT_EQ(ExpireDue(), 0u);
  clock_->Advance(absl::Seconds(1));
  EXPECT_EQ(ExpireDue(), 1u);
  EXPECT_EQ(ExpireDue(), 0u);
  const std::vector<LimitUsage> usage = UsageOf("u");
  EXPECT_EQ(usage[0].used, 30);
  EXPECT_EQ(usage[1].used, 30);
  // Ended: a late settle conflicts, and charges nothing more.
  EXPECT_EQ(End(r.id, ReservationEnd::kSettle, 5).outcome, Outcome::kConflict);
  EXPECT_EQ(UsageOf("u")[0].used, 30);
  EXPECT_TRUE(Reserve("u", 0).decision.allowed);  // its slot came back
}

TEST_P(ReservationConformanceTest, AnExpiredReservationIsReleasedWhenThePlanSaysSo) {
  UseReservationPlans(/*charge_on_expiry=*/false);
  const ReserveDecision r = Reserve("u", 30, absl::Seconds(10));
  ASSERT_TRUE(r.decision.allowed);
  clock_->Advance(absl::Seconds(10));
  EXPECT_EQ(ExpireDue(), 1u);
  EXPECT_EQ(UsageOf("u")[0].used, 0);
  EXPECT_TRUE(Check("u", 100).allowed);
}

TEST_P(ReservationConformanceTest, ExtendingMovesTheExpiry) {
  UseReservationPlans();
  const ReserveDecision r = Reserve("u", 30, absl::Seconds(10));
  ASSERT_TRUE(r.decision.allowed);
  clock_->Advance(absl::Seconds(8));
  std::optional<absl::StatusOr<StoreExtendResult>> ext;
  limiter_->Extend(r.id, absl::Seconds(10),
                   [&](absl::StatusOr<StoreExtendResult> e) { ext = std::move(e); });
  harness_->RunUntil([&] { return ext.has_value(); });
  ASSERT_TRUE(ext->ok());
  EXPECT_EQ((*ext)->outcome, StoreExtendResult::Outcome::kExtended);
  EXPECT_EQ((*ext)->expires_at, clock_->Now() + absl::Seconds(10));
  clock_->Advance(absl::Seconds(5));
  EXPECT_EQ(ExpireDue(), 0u);  // due at +18 s now, not +10 s
  EXPECT_FALSE(Check("u", 71).allowed);
  clock_->Advance(absl::Seconds(5));
  EXPECT_EQ(ExpireDue(), 1u);
}

TEST_P(ReservationConformanceTest, DueReservationsAreFoundByTheirExpiryWhateverEndedOrMoved) {
  UseReservationPlans();
  const ReserveDecision a = Reserve("u", 1, absl::Seconds(30));
  const ReserveDecision b = Reserve("v", 1, absl::Seconds(20));
  const ReserveDecision c = Reserve("w", 1, absl::Seconds(10));
  ASSERT_TRUE(a.decision.allowed && b.decision.allowed && c.decision.allowed);
  // a moves ahead of the others, c is settled before it is due.
  std::optional<absl::StatusOr<StoreExtendResult>> ext;
  limiter_->Extend(a.id, absl::Seconds(5),
                   [&](absl::StatusOr<StoreExtendResult> e) { ext = std::move(e); });
  harness_->RunUntil([&] { return ext.has_value(); });
  ASSERT_TRUE(ext->ok());
  EXPECT_EQ(End(c.id, ReservationEnd::kSettle, 1).outcome, Outcome::kEnded);
  clock_->Advance(absl::Seconds(5));
  EXPECT_EQ(ExpireDue(), 1u);  // a, at its new expiry
  clock_->Advance(absl::Seconds(10));
  EXPECT_EQ(ExpireDue(), 0u);  // c was settled
  clock_->Advance(absl::Seconds(5));
  EXPECT_EQ(ExpireDue(), 1u);  // b
  clock_->Advance(absl::Seconds(20));
  EXPECT_EQ(ExpireDue(), 0u);  // a's first expiry finds nothing
  EXPECT_EQ(End(a.id, ReservationEnd::kSettle, 1).outcome, Outcome::kConflict);
  EXPECT_EQ(UsageOf("u")[0].used, 1);
  EXPECT_EQ(UsageOf("v")[0].used, 1);
}

TEST_P(ReservationConformanceTest, AlertsFireOnChargedUsageNeverOnHolds) {
  UseReservationPlans();
  // Holding 900 of the daily 1,000 crosses no threshold.
  const ReserveDecision r = Reserve("u", 90);
  ASSERT_TRUE(r.decision.allowed);
  EXPECT_TRUE(harness_->TakeEvents().empty());
  // Charging 800 (past the per-minute quota, in full) fires the daily 80% once.
  const SettleDecision s = End(r.id, ReservationEnd::kSettle, 800);
  ASSERT_EQ(s.outcome, Outcome::kEnded);
  std::vector<AlertEvent> events;
  harness_->RunUntil([&] {
    for (AlertEvent& e : harness_->TakeEvents()) events.push_back(std::move(e));
    return !events.empty();
  });
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].limit, "daily");
  EXPECT_EQ(events[0].threshold, 80);
  EXPECT_EQ(events[0].used, 800);
}

TEST_P(ReservationConformanceTest, AReservationMayChargeACostAtOnceAndHoldOnlyASlot) {
  UseReservationPlans();
  // A gateway's lease: the request's cost is charged now, the lease holds a slot.
  const ReserveDecision r = Reserve("u", 0, absl::Seconds(60), /*cost=*/5);
  ASSERT_TRUE(r.decision.allowed);
  EXPECT_EQ(r.decision.limits[0].used, 5);
  EXPECT_EQ(r.decision.limits[0].held, 0);
  EXPECT_EQ(r.decision.limits[2].held, 1);
  EXPECT_EQ(End(r.id, ReservationEnd::kRelease).outcome, Outcome::kEnded);
  EXPECT_EQ(UsageOf("u")[0].used, 5);
}

TEST_P(ReservationConformanceTest, BadInputIsRefusedWithTheField) {
  UseReservationPlans();
  std::optional<absl::StatusOr<ReserveDecision>> out;
  limiter_->Reserve(
      {.decision = {.subject = "u", .plan = "p", .cost = 0}, .hold = 1, .ttl = absl::Hours(2)},
      [&](absl::StatusOr<ReserveDecision> d) { out = std::move(d); });
  harness_->RunUntil([&] { return out.has_value(); });
  EXPECT_TRUE(absl::IsInvalidArgument(out->status()));
  EXPECT_NE(out->status().message().find("ttl"), std::string::npos);
  out.reset();
  limiter_->Reserve({.decision = {.subject = "u", .plan = "p", .cost = 0}, .hold = kMaxCost + 1},
                    [&](absl::StatusOr<ReserveDecision> d) { out = std::move(d); });
  harness_->RunUntil([&] { return out.has_value(); });
  EXPECT_TRUE(absl::IsInvalidArgument(out->status()));
  std::optional<absl::StatusOr<SettleDecision>> settled;
  limiter_->Settle({.id = "rsv_nonsense", .cost = 1},
                   [&](absl::StatusOr<SettleDecision> d) { settled = std::move(d); });
  harness_->RunUntil([&] { return settled.has_value(); });
  EXPECT_TRUE(absl::IsInvalidArgument(settled->status()));
}

TEST(ReservationIdTest, NamesItsSubjectAndPlanAndOnlyInOneSpelling) {
  const std::string id = "rsv_abcdefghijklmnopqrstuvwxyz.ZnJlZQ.dXNlci80Mg";
  const std::optional<ReservationRef> ref = ParseReservationId(id);
  ASSERT_TRUE(ref.has_value());
  EXPECT_EQ(ref->plan, "free");
  EXPECT_EQ(ref->subject, "user/42");
  EXPECT_FALSE(ParseReservationId("rsv_abcdefghijklmnopqrstuvwxyz.ZnJlZQ.dXNlci80Mg=="));
  EXPECT_FALSE(ParseReservationId("rsv_ABCDEFGHIJKLMNOPQRSTUVWXYZ.ZnJlZQ.dXNlci80Mg"));
  EXPECT_FALSE(ParseReservationId("rsv_abcdefghijklmnopqrstuvwxyz.ZnJlZQ"));
  EXPECT_FALSE(ParseReservationId("rsv_abcdefghijklmnopqrstuvwxyz.ZnJlZQ.IA"));  // " "
  EXPECT_FALSE(ParseReservationId("key_abcdefghijklmnopqrstuvwxyz.ZnJlZQ.dXNlci80Mg"));
  EXPECT_FALSE(ParseReservationId(""));
}

}  // namespace sluice
