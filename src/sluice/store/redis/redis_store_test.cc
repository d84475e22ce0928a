#include "sluice/store/redis/redis_store.h"

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "absl/strings/str_cat.h"
#include "absl/time/civil_time.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "sluice/config/config.h"
#include "sluice/limiter/plan.h"
#include "sluice/limiter/store_conformance.h"
#include "sluice/store/redis/test_redis_server.h"

namespace sluice::redis {
namespace {

using namespace std::chrono_literals;

// docs/semantics.md on a real redis-server: the same suite the memory store passes.
class RedisHarness final : public StoreHarness {
 public:
  // `deadline`: RedisStoreOptions::decision_deadline (zero: none), which also lets decide.lua
  // skip reading a sliding or gcra limit's next window while no other call can have written it.
  explicit RedisHarness(absl::Duration deadline = absl::ZeroDuration()) {
    const uint16_t port = testing_util::FreePort();
    if (!server_.Start(port)) {
      ADD_FAILURE() << "cannot start " << testing_util::kRedisServer;
      return;
    }
    connection_ = std::make_unique<Connection>(
        io_, ConnectionOptions{.port = port, .command_timeout = std::chrono::milliseconds(2000)});
    connection_->Start();
    RunUntil([&] { return connection_->connected(); });
    store_ = std::make_unique<RedisStore>([this] { return connection_.get(); },
                                          RedisStoreOptions{.buckets = 4,
                                                            .outbox_max = 1000,
                                                            .redis_clock = &redis_clock_,
                                                            .decision_deadline = deadline});
  }

  Store& store() override { return *store_; }

  void RunUntil(const std::function<bool()>& ready) override {
    if (!testing_util::PumpUntil(io_, ready)) ADD_FAILURE() << "redis did not answer within 5 s";
  }

  Reply Command(std::vector<std::string> argv) {
    absl::StatusOr<Reply> reply = testing_util::SendAndWait(io_, *connection_, std::move(argv));
    EXPECT_TRUE(reply.ok()) << reply.status();
    return reply.ok() ? *std::move(reply) : Reply{};
  }

  void PlantCounter(const StoreRequest& req, size_t limit, int64_t value) override {
    const std::string key = store_->CounterKey(req, limit);
    // A gcra limit's value as the memory store keeps it (microseconds after its window's start),
    // as decide.lua keeps it (after its period's start: a period is two windows); a negative one
    // as it is (no integer decide.lua writes).
    const WindowBounds& w = req.windows[limit];
    if (req.plan->limits[limit].algorithm == config::Algorithm::kGcra && value >= 0) {
      value += w.id % 2 * absl::ToInt64Microseconds(w.end - w.start);
    }
    Command({"HSET", key, std::string(req.subject), std::to_string(value)});
    Command({"EXPIRE", key, "3600"});
  }

  // Redis's expiry on the store's clock: the suite's fake clock runs apart from Redis's.
  std::optional<absl::Time> ExpiryOf(const StoreRequest& req, size_t limit) override {
    const Reply at = Command({"EXPIRETIME", store_->CounterKey(req, limit)});
    if (!at.is_integer() || at.integer < 0) return std::nullopt;
    return req.now + (absl::FromUnixSeconds(at.integer) - redis_clock_.Now());
  }

  // Reads and empties every bucket's outbox stream.
  std::vector<AlertEvent> TakeEvents() override {
    std::vector<AlertEvent> events;
    for (int b = 0; b < 4; ++b) {
      const std::string key = store_->OutboxKey(b);
      Reply entries = Command({"XRANGE", key, "-", "+"});
      for (const Reply& entry : entries.elements) {
        std::map<std::string, std::string> f;
        const Reply& fields = entry.elements[1];
        for (size_t i = 0; i + 1 < fields.elements.size(); i += 2) {
          f[fields.elements[i].str] = fields.elements[i + 1].str;
        }
        events.push_back(
            AlertEvent{.subject = f["subject"],
                       .plan = f["plan"],
                       .limit = f["limit"],
                       .threshold = std::stoi(f["threshold"]),
                       .used = std::stoll(f["used"]),
                       .quota = std::stoll(f["quota"]),
                       .window_start = absl::FromUnixSeconds(std::stoll(f["window_start"])),
                       .window_end = absl::FromUnixSeconds(std::stoll(f["window_end"])),
                       .occurred_at = absl::FromUnixMillis(std::stoll(f["occurred_at_ms"]))});
      }
      Command({"DEL", key});
    }
    return events;
  }

 private:
  testing_util::RedisServer server_;
  boost::asio::io_context io_;
  SystemClock redis_clock_;
  std::unique_ptr<Connection> connection_;
  std::unique_ptr<RedisStore> store_;
};

// A store on a connection with a short timeout, to freeze Redis under a decision.
class RedisStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    port_ = testing_util::FreePort();
    ASSERT_TRUE(server_.Start(port_)) << "cannot start " << testing_util::kRedisServer;
    UsePlanAlertingAt({});
  }
  // The plan "p": one limit, per_minute, of 10 per minute, alerting at `alert_at`.
  void UsePlanAlertingAt(std::vector<int> alert_at) {
    config::LimitConfig limit{
        .name = "per_minute",
        .quota = 10,
        .window = {.kind = config::WindowSpec::Kind::kFixed, .length = absl::Minutes(1)}};
    limit.window.text = "1m";
    limit.alert_at = std::move(alert_at);
    config::PlanConfig plan{.name = "p", .timezone = "UTC"};
    plan.limits.push_back(std::move(limit));
    config::Config cfg;
    cfg.plans.push_back(std::move(plan));
    absl::StatusOr<PlanSet> plans = PlanSet::FromConfig(cfg);
    ASSERT_TRUE(plans.ok()) << plans.status();
    plans_ = std::make_unique<PlanSet>(*std::move(plans));
  }
  void TearDown() override { server_.Resume(); }

  // Connects with `timeout` per command; the store's deadline is `deadline` (none: the timeout).
  void Connect(std::chrono::milliseconds timeout,
               std::optional<absl::Duration> deadline = std::nullopt, int breaker_failures = 0,
               absl::Duration clock_error = absl::Milliseconds(1)) {
    connection_ = std::make_unique<Connection>(
        io_, ConnectionOptions{
                 .port = port_, .command_timeout = timeout, .breaker_failures = breaker_failures});
    connection_->Start();
    ASSERT_TRUE(testing_util::PumpUntil(io_, [&] { return connection_->connected(); }));
    store_ = std::make_unique<RedisStore>(
        [this] { return connection_.get(); },
        RedisStoreOptions{.buckets = 4,
                          .redis_clock = &clock_,
                          .decision_deadline = deadline.value_or(absl::FromChrono(timeout)),
                          .clock_error = clock_error,
                          .observe_round_trip = [this](RedisCommandKind kind, absl::Duration d) {
                            observed_.emplace_back(kind, d);
                          }});
  }

  StoreRequest Request(int64_t cost = 1) {
    const Plan* plan = plans_->Find("p");
    now_ = clock_.Now();
    window_ = plan->limits[0].window_cache->Get(plan->limits[0].window, plan->tz, now_);
    return {.subject = "alice", .plan = plan, .cost = cost, .now = now_, .windows = {&window_, 1}};
  }

  absl::StatusOr<StoreResult> Decide(const StoreRequest& req) {
    std::optional<absl::StatusOr<StoreResult>> out;
    store_->Decide(req, [&](absl::StatusOr<StoreResult> r) { out = std::move(r); });
    EXPECT_TRUE(testing_util::PumpUntil(io_, [&] { return out.has_value(); }));
    return out.value_or(absl::UnknownError("no answer"));
  }

  // The text of req.subject's counter of the plan's limit `i` (decide.lua's field).
  std::string Counter(const StoreRequest& req, size_t i = 0) {
    absl::StatusOr<Reply> r = testing_util::SendAndWait(
        io_, *connection_, {"HGET", store_->CounterKey(req, i), std::string(req.subject)});
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() && r->is_string() ? r->str : "(nil)";
  }
  // Replaces the plan with one limit of `window` in Europe/Paris.
  void UsePlanWith(std::string_view window) {
    config::Config cfg;
    cfg.plans = {config::PlanConfig{
        .name = "p",
        .timezone = "Europe/Paris",
        .limits = {config::LimitConfig{
            .name = "calendar", .quota = 10, .window = *config::ParseWindow(window)}}}};
    absl::StatusOr<PlanSet> plans = PlanSet::FromConfig(cfg);
    ASSERT_TRUE(plans.ok()) << plans.status();
    plans_ = std::make_unique<PlanSet>(*std::move(plans));
  }
  int64_t ExpireTime(const std::string& key) {
    absl::StatusOr<Reply> r = testing_util::SendAndWait(io_, *connection_, {"EXPIRETIME", key});
    EXPECT_TRUE(r.ok() && r->is_integer()) << key;
    return r.ok() ? r->integer : 0;
  }
  void SetCounter(const StoreRequest& req, const std::string& value) {
    absl::StatusOr<Reply> r = testing_util::SendAndWait(
        io_, *connection_, {"HSET", store_->CounterKey(req, 0), std::string(req.subject), value});
    EXPECT_TRUE(r.ok()) << r.status();
  }

  testing_util::RedisServer server_;
  uint16_t port_ = 0;
  boost::asio::io_context io_;
  SystemClock clock_;
  std::unique_ptr<PlanSet> plans_;
  std::unique_ptr<Connection> connection_;
  std::unique_ptr<RedisStore> store_;
  absl::Time now_;
  WindowBounds window_;
  std::vector<std::pair<RedisCommandKind, absl::Duration>> observed_;  // round trips, in order
};

// Plan "p": "s", sliding, 10 a minute, then `more` limits.
absl::StatusOr<PlanSet> SlidingPlans(std::vector<config::LimitConfig> more) {
  config::Config cfg;
  cfg.plans = {config::PlanConfig{.name = "p", .timezone = "UTC"}};
  cfg.plans[0].limits.push_back({.name = "s",
                                 .quota = 10,
                                 .window = *config::ParseWindow("1m"),
                                 .algorithm = config::Algorithm::kSliding});
  for (config::LimitConfig& l : more) cfg.plans[0].limits.push_back(std::move(l));
  return PlanSet::FromConfig(cfg);
}

// A sliding limit's state moves to the current window's hash at its first admission there, and
// the previous window's field goes: one field per subject, every key with its expiry.
TEST_F(RedisStoreTest, ASlidingLimitKeepsOneFieldPerSubjectInAHashThatExpires) {
  Connect(std::chrono::milliseconds(2000));
  absl::StatusOr<PlanSet> plans = SlidingPlans({});
  ASSERT_TRUE(plans.ok()) << plans.status();
  const Plan* plan = plans->Find("p");
  const absl::Time t1 = clock_.Now();
  const WindowBounds w1 = WindowAt(plan->limits[0].window, plan->tz, t1);
  const StoreRequest first{
      .subject = "alice", .plan = plan, .cost = 3, .now = t1, .windows = {&w1, 1}};
  ASSERT_TRUE(Decide(first).ok());
  const std::string key1 = store_->CounterKey(first, 0);
  EXPECT_NE(key1.find(":s:s:60s:"), std::string::npos) << key1;
  EXPECT_EQ(Counter(first), "3");  // prev 0, cur 3
  EXPECT_GT(ExpireTime(key1), 0);
  const absl::Time t2 = t1 + absl::Minutes(1);
  const WindowBounds w2 = WindowAt(plan->limits[0].window, plan->tz, t2);
  const StoreRequest second{
      .subject = "alice", .plan = plan, .cost = 1, .now = t2, .windows = {&w2, 1}};
  absl::StatusOr<StoreResult> r = Decide(second);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->used[0], 1);
  EXPECT_EQ(r->prev_at(0), 3);
  EXPECT_EQ(Counter(second), "300000001");  // prev 3, cur 1
  EXPECT_GT(ExpireTime(store_->CounterKey(second, 0)), 0);
  EXPECT_EQ(Counter(first), "(nil)");  // moved, not copied
}

// A call that another limit denies leaves every key as it was, with its expiry: the previous
// window's field a sliding limit moves is deleted only once the call is admitted (deleting a
// hash's last field deletes the hash, and a restored one would have no expiry).
TEST_F(RedisStoreTest, ADeniedCallLeavesTheSlidingLimitsPreviousWindowWithItsExpiry) {
  Connect(std::chrono::milliseconds(2000));
  absl::StatusOr<PlanSet> plans = SlidingPlans(
      {config::LimitConfig{.name = "daily", .quota = 1, .window = *config::ParseWindow("day")}});
  ASSERT_TRUE(plans.ok()) << plans.status();
  const Plan* plan = plans->Find("p");
  // Minutes inside one UTC day.
  const absl::Time t1 =
      absl::FromUnixSeconds(absl::ToUnixSeconds(clock_.Now()) / 86400 * 86400 + 3600);
  const WindowBounds w1[] = {WindowAt(plan->limits[0].window, plan->tz, t1),
                             WindowAt(plan->limits[1].window, plan->tz, t1)};
  const StoreRequest first{.subject = "bob", .plan = plan, .cost = 1, .now = t1, .windows = w1};
  ASSERT_TRUE(Decide(first)->allowed);
  const std::string key1 = store_->CounterKey(first, 0);
  const int64_t expiry = ExpireTime(key1);
  ASSERT_GT(expiry, 0);
  const absl::Time t2 = t1 + absl::Minutes(1);
  const WindowBounds w2[] = {WindowAt(plan->limits[0].window, plan->tz, t2),
                             WindowAt(plan->limits[1].window, plan->tz, t2)};
  const StoreRequest second{.subject = "bob", .plan = plan, .cost = 1, .now = t2, .windows = w2};
  absl::StatusOr<StoreResult> denied = Decide(second);
  ASSERT_TRUE(denied.ok()) << denied.status();
  EXPECT_FALSE(denied->allowed);  // the daily limit is full
  EXPECT_EQ(Counter(first), "1");
  EXPECT_EQ(ExpireTime(key1), expiry);
  EXPECT_EQ(Counter(second), "(nil)");
}

TEST_F(RedisStoreTest, EachAnsweredCommandReportsItsRoundTripByKind) {
  Connect(2000ms);
  const StoreRequest req = Request();
  ASSERT_TRUE(Decide(req).ok());
  std::optional<absl::Status> reset;
  store_->Reset(req, std::nullopt, [&](absl::Status s) { reset = s; });
  ASSERT_TRUE(testing_util::PumpUntil(io_, [&] { return reset.has_value(); }));
  ASSERT_EQ(observed_.size(), 2u);
  EXPECT_EQ(observed_[0].first, RedisCommandKind::kDecide);
  EXPECT_EQ(observed_[1].first, RedisCommandKind::kReset);
  for (const auto& [kind, d] : observed_) {
    EXPECT_GT(d, absl::ZeroDuration()) << RedisCommandKindName(kind);
    EXPECT_LT(d, absl::Seconds(2)) << RedisCommandKindName(kind);
  }
}

// "rsv_" + 26 base32 characters, then plan "p" and subject "alice" in base64url.
constexpr std::string_view kReservationId = "rsv_abcdefghijklmnopqrstuvwxyz.cA.YWxpY2U";

TEST_F(RedisStoreTest, EveryKeyOfAReservationSharesTheSubjectsHashTagAndExpires) {
  Connect(2000ms);
  const StoreRequest req = Request(/*cost=*/0);
  std::optional<absl::StatusOr<StoreResult>> reserved;
  store_->Reserve(
      {.decide = req, .hold = 4, .id = kReservationId, .expires_at = req.now + absl::Minutes(1)},
      [&](absl::StatusOr<StoreResult> r) { reserved = std::move(r); });
  ASSERT_TRUE(testing_util::PumpUntil(io_, [&] { return reserved.has_value(); }));
  ASSERT_TRUE(reserved->ok()) << reserved->status();
  EXPECT_TRUE((*reserved)->allowed);
  EXPECT_EQ((*reserved)->held_at(0), 4);

  absl::StatusOr<Reply> keys = testing_util::SendAndWait(io_, *connection_, {"KEYS", "*"});
  ASSERT_TRUE(keys.ok());
  std::vector<std::string> names;
  for (const Reply& key : keys->elements) names.push_back(key.str);
  std::sort(names.begin(), names.end());
  const std::string tag = store_->Tag("alice");
  EXPECT_EQ(names, (std::vector<std::string>{tag + ":hold:alice",
                                             tag + ":rsv:rsv_abcdefghijklmnopqrstuvwxyz",
                                             tag + ":rsvdue"}));
  const int64_t expires = absl::ToUnixSeconds(req.now + absl::Minutes(1));
  // The hold outlives its reservation by the grace; the record and the due set by 10 minutes.
  EXPECT_NEAR(ExpireTime(tag + ":hold:alice"), expires + 60, 1);
  EXPECT_NEAR(ExpireTime(tag + ":rsv:rsv_abcdefghijklmnopqrstuvwxyz"), expires + 600, 1);
  EXPECT_NEAR(ExpireTime(tag + ":rsvdue"), expires + 600, 1);

  std::optional<absl::StatusOr<std::vector<DueReservation>>> due;
  store_->DueReservations(
      req.now + absl::Minutes(1), 10,
      [&](absl::StatusOr<std::vector<DueReservation>> d) { due = std::move(d); });
  ASSERT_TRUE(testing_util::PumpUntil(io_, [&] { return due.has_value(); }));
  ASSERT_TRUE(due->ok());
  ASSERT_EQ((*due)->size(), 1u);
  EXPECT_EQ((**due)[0].id, kReservationId);
  EXPECT_EQ((**due)[0].subject, "alice");
  EXPECT_EQ((**due)[0].plan, "p");

  // Released: the hold hash and the due entry go; the record stays, to answer a repeat.
  std::optional<absl::StatusOr<StoreSettleResult>> ended;
  store_->Settle({.decide = req, .id = kReservationId, .end = ReservationEnd::kRelease},
                 [&](absl::StatusOr<StoreSettleResult> r) { ended = std::move(r); });
  ASSERT_TRUE(testing_util::PumpUntil(io_, [&] { return ended.has_value(); }));
  ASSERT_TRUE(ended->ok());
  EXPECT_EQ((*ended)->outcome, StoreSettleResult::Outcome::kEnded);
  keys = testing_util::SendAndWait(io_, *connection_, {"KEYS", "*"});
  ASSERT_TRUE(keys.ok());
  ASSERT_EQ(keys->elements.size(), 1u);
  EXPECT_EQ(keys->elements[0].str, tag + ":rsv:rsv_abcdefghijklmnopqrstuvwxyz");
}

TEST_F(RedisStoreTest, AnExpiryOfAForgottenReservationTakesItOutOfTheDueSet) {
  Connect(2000ms);
  const StoreRequest req = Request(/*cost=*/0);
  // Due, but its record is gone (no instance ran for 10 minutes past its expiry).
  const std::string due = store_->DueKey(store_->BucketOf("alice"));
  ASSERT_TRUE(testing_util::SendAndWait(io_, *connection_,
                                        {"ZADD", due, "1000", std::string(kReservationId)})
                  .ok());
  ASSERT_TRUE(testing_util::SendAndWait(io_, *connection_, {"EXPIRE", due, "60"}).ok());
  std::optional<absl::StatusOr<StoreSettleResult>> ended;
  store_->Settle({.decide = req, .id = kReservationId, .end = ReservationEnd::kExpire},
                 [&](absl::StatusOr<StoreSettleResult> r) { ended = std::move(r); });
  ASSERT_TRUE(testing_util::PumpUntil(io_, [&] { return ended.has_value(); }));
  ASSERT_TRUE(ended->ok()) << ended->status();
  EXPECT_EQ((*ended)->outcome, StoreSettleResult::Outcome::kNotFound);
  absl::StatusOr<Reply> left = testing_util::SendAndWait(io_, *connection_, {"ZCARD", due});
  ASSERT_TRUE(left.ok());
  EXPECT_EQ(left->integer, 0);
}

TEST_F(RedisStoreTest, AReservationMadeAfterTheCallerGaveUpIsReleasedAndItsCostRefunded) {
  Connect(50ms, /*deadline=*/absl::Seconds(30));
  const StoreRequest req = Request(/*cost=*/2);
  ASSERT_TRUE(Decide(Request(0)).ok());  // the connection is up and decide.lua loaded
  // Loaded too, so that the stalled call is the reservation itself.
  std::optional<absl::StatusOr<StoreExtendResult>> extended;
  store_->Extend("alice", kReservationId, req.now + absl::Minutes(1), req.now,
                 [&](absl::StatusOr<StoreExtendResult> e) { extended = std::move(e); });
  ASSERT_TRUE(testing_util::PumpUntil(io_, [&] { return extended.has_value(); }));
  ASSERT_TRUE(extended->ok()) << extended->status();
  EXPECT_EQ((*extended)->outcome, StoreExtendResult::Outcome::kNotFound);

  server_.Pause();
  std::optional<absl::StatusOr<StoreResult>> out;
  store_->Reserve(
      {.decide = req, .hold = 4, .id = kReservationId, .expires_at = req.now + absl::Minutes(1)},
      [&](absl::StatusOr<StoreResult> r) { out = std::move(r); });
  ASSERT_TRUE(testing_util::PumpUntil(io_, [&] { return out.has_value(); }));
  EXPECT_EQ(StoreFailureOf(out->status()), StoreFailure::kTimeout);
  server_.Resume();
  ASSERT_TRUE(testing_util::PumpUntil(io_, [&] { return store_->refunds() == 1; }));
  EXPECT_EQ(store_->late_admissions(), 1u);
  EXPECT_EQ(Counter(req), "(nil)");  // the cost it charged at once, taken back
  absl::StatusOr<Reply> state = testing_util::SendAndWait(
      io_, *connection_,
      {"HGET", store_->Tag("alice") + ":rsv:rsv_abcdefghijklmnopqrstuvwxyz", "state"});
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->str, "release");
  absl::StatusOr<Reply> held = testing_util::SendAndWait(
      io_, *connection_, {"EXISTS", store_->Tag("alice") + ":hold:alice"});
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(held->integer, 0);
}

TEST_F(RedisStoreTest, ACommandThatTimedOutIsNotObservedButItsRefundIs) {
  Connect(50ms, /*deadline=*/absl::Seconds(30));
  const StoreRequest req = Request();
  ASSERT_TRUE(Decide(req).ok());
  observed_.clear();
  server_.Pause();
  std::optional<absl::StatusOr<StoreResult>> out;
  store_->Decide(req, [&](absl::StatusOr<StoreResult> r) { out = std::move(r); });
  ASSERT_TRUE(testing_util::PumpUntil(io_, [&] { return out.has_value(); }));
  EXPECT_TRUE(observed_.empty());
  server_.Resume();
  ASSERT_TRUE(testing_util::PumpUntil(io_, [&] { return store_->refunds() == 1; }));
  ASSERT_EQ(observed_.size(), 1u);
  EXPECT_EQ(observed_[0].first, RedisCommandKind::kRefund);
}

// The bug: the script's deadline was the timeout plus 100 ms, so a Redis that resumed within
// 100 ms after the caller had answered degraded still charged the request.
TEST_F(RedisStoreTest, ADecisionThatRunsAfterTheCallerGaveUpChangesNothing) {
  Connect(50ms);
  const StoreRequest req = Request();
  server_.Pause();
  std::optional<absl::StatusOr<StoreResult>> out;
  store_->Decide(req, [&](absl::StatusOr<StoreResult> r) { out = std::move(r); });
  ASSERT_TRUE(testing_util::PumpUntil(io_, [&] { return out.has_value(); }));
  EXPECT_EQ(StoreFailureOf(out->status()), StoreFailure::kTimeout);
  server_.Resume();  // well within the old 100 ms allowance

  EXPECT_EQ(Counter(req), "(nil)");
  EXPECT_EQ(store_->late_admissions(), 0u);
}

// Executed in time by Redis, but the reply came after the connection gave up: the caller answered
// degraded, so the admission is taken back.
TEST_F(RedisStoreTest, AnAdmissionWhoseReplyCameAfterTheTimeoutIsRefunded) {
  Connect(50ms, /*deadline=*/absl::Seconds(30));
  const StoreRequest req = Request(3);
  ASSERT_TRUE(Decide(req).ok());  // 3 used, in time
  server_.Pause();
  std::optional<absl::StatusOr<StoreResult>> out;
  store_->Decide(req, [&](absl::StatusOr<StoreResult> r) { out = std::move(r); });
  ASSERT_TRUE(testing_util::PumpUntil(io_, [&] { return out.has_value(); }));
  EXPECT_EQ(StoreFailureOf(out->status()), StoreFailure::kTimeout);
  server_.Resume();

  ASSERT_TRUE(testing_util::PumpUntil(io_, [&] { return store_->refunds() == 1; }));
  EXPECT_EQ(store_->late_admissions(), 1u);
  EXPECT_EQ(Counter(req), "3");
}

// The bug: the refund was sent with Send(), which the breaker — opened by the stall's timeouts
// and still open when the stall's late replies arrive — refused at once.
TEST_F(RedisStoreTest, TheRefundGoesOutWhileTheBreakerIsStillOpen) {
  Connect(50ms, /*deadline=*/absl::Seconds(30), /*breaker_failures=*/1);
  const StoreRequest req = Request(3);
  ASSERT_TRUE(Decide(req).ok());  // loads the script; 3 used
  server_.Pause();
  std::optional<absl::StatusOr<StoreResult>> out;
  store_->Decide(req, [&](absl::StatusOr<StoreResult> r) { out = std::move(r); });
  ASSERT_TRUE(testing_util::PumpUntil(io_, [&] { return out.has_value(); }));
  EXPECT_EQ(StoreFailureOf(out->status()), StoreFailure::kTimeout);
  EXPECT_TRUE(connection_->circuit_open());
  server_.Resume();

  ASSERT_TRUE(testing_util::PumpUntil(io_, [&] { return store_->refunds() == 1; }));
  ASSERT_TRUE(testing_util::PumpUntil(io_, [&] { return !connection_->circuit_open(); }));
  EXPECT_EQ(Counter(req), "3");
}

// The bug: with a timeout shorter than the clock's error bound (store.redis.timeout may be 1 ms),
// the deadline was already past when the command left, and every decision came back "late".
TEST_F(RedisStoreTest, AClockErrorBoundAboveTheTimeoutDoesNotMakeEveryDecisionLate) {
  Connect(2000ms, /*deadline=*/absl::Milliseconds(400), /*breaker_failures=*/0,
          /*clock_error=*/absl::Seconds(1));
  absl::StatusOr<StoreResult> r = Decide(Request());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->allowed);
}

TEST_F(RedisStoreTest, ALateDenialIsNotRefunded) {
  Connect(50ms, /*deadline=*/absl::Seconds(30));
  const StoreRequest req = Request(10);
  ASSERT_TRUE(Decide(req).ok());  // full
  server_.Pause();
  std::optional<absl::StatusOr<StoreResult>> out;
  store_->Decide(req, [&](absl::StatusOr<StoreResult> r) { out = std::move(r); });
  ASSERT_TRUE(testing_util::PumpUntil(io_, [&] { return out.has_value(); }));
  server_.Resume();
  EXPECT_EQ(Counter(req), "10");  // after the late reply, in FIFO order
  EXPECT_EQ(store_->late_admissions(), 0u);
  EXPECT_EQ(store_->refunds(), 0u);
}

TEST_F(RedisStoreTest, ACounterKeyHoldingNoValidCounterDeniesAndStaysUntouched) {
  Connect(2000ms);
  const StoreRequest req = Request();
  const std::string key = store_->CounterKey(req, 0);
  for (const std::string bad : {"-5", "garbage", "007", "1e3", "9223372036854775807",
                                "9007199254740993", "1000000000000001", " 1", ""}) {
    SetCounter(req, bad);
    for (int64_t cost : {0, 1}) {
      absl::StatusOr<StoreResult> r = Decide(Request(cost));
      ASSERT_TRUE(r.ok()) << bad << ": " << r.status();
      EXPECT_FALSE(r->allowed) << bad;
      EXPECT_EQ(r->used[0], -1) << bad;
    }
    EXPECT_EQ(Counter(req), bad);
  }
  // A key of another type: the same, instead of a script error.
  ASSERT_TRUE(testing_util::SendAndWait(io_, *connection_, {"DEL", key}).ok());
  ASSERT_TRUE(testing_util::SendAndWait(io_, *connection_, {"SET", key, "1"}).ok());
  absl::StatusOr<StoreResult> r = Decide(Request());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->allowed);
}

// Flags live in the counter hash ("#<subject>"); a flag hash written before they moved there is
// still read (its threshold does not fire again), reported by Usage, and cleared by Reset.
TEST_F(RedisStoreTest, AFlagInTheEarlierFlagHashCountsIsReportedAndIsReset) {
  UsePlanAlertingAt({50, 80});
  Connect(2000ms);
  const StoreRequest req = Request(8);
  const std::string earlier = store_->FlagsKey(req, 0);
  ASSERT_TRUE(testing_util::SendAndWait(io_, *connection_, {"HSET", earlier, "50:10", "1"}).ok());
  ASSERT_TRUE(Decide(req).ok());
  EXPECT_EQ(store_->events_recorded(), 1u);  // 80% only
  absl::StatusOr<Reply> flags =
      testing_util::SendAndWait(io_, *connection_, {"HGET", store_->CounterKey(req, 0), "#alice"});
  ASSERT_TRUE(flags.ok() && flags->is_string()) << flags.status();
  EXPECT_EQ(flags->str, "50:10 80:10");  // the earlier flag copied beside the counter

  auto usage = [&] {
    std::optional<absl::StatusOr<std::vector<LimitUsage>>> out;
    store_->Usage(req, [&](absl::StatusOr<std::vector<LimitUsage>> u) { out = std::move(u); });
    EXPECT_TRUE(testing_util::PumpUntil(io_, [&] { return out.has_value(); }));
    return out.value_or(absl::UnknownError("no answer"));
  };
  absl::StatusOr<std::vector<LimitUsage>> before = usage();
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ((*before)[0].used, 8);
  EXPECT_EQ((*before)[0].fired, (std::vector<int>{50, 80}));
  // An earlier flag key of another type hides nothing of the counter hash's flags.
  ASSERT_TRUE(testing_util::SendAndWait(io_, *connection_, {"DEL", earlier}).ok());
  ASSERT_TRUE(testing_util::SendAndWait(io_, *connection_, {"SET", earlier, "x"}).ok());
  absl::StatusOr<std::vector<LimitUsage>> beside = usage();
  ASSERT_TRUE(beside.ok()) << beside.status();
  EXPECT_EQ((*beside)[0].fired, (std::vector<int>{50, 80}));

  std::optional<absl::Status> reset;
  store_->Reset(req, std::nullopt, [&](absl::Status s) { reset = s; });
  ASSERT_TRUE(testing_util::PumpUntil(io_, [&] { return reset.has_value(); }));
  ASSERT_TRUE(reset->ok()) << *reset;
  absl::StatusOr<std::vector<LimitUsage>> after = usage();
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ((*after)[0].used, 0);
  EXPECT_TRUE((*after)[0].fired.empty());
  absl::StatusOr<Reply> keys = testing_util::SendAndWait(io_, *connection_, {"DBSIZE"});
  ASSERT_TRUE(keys.ok() && keys->is_integer());
  EXPECT_EQ(keys->integer, 1);  // the outbox only
}

// A Redis that refuses writes (here NOREPLICAS: min-replicas-to-write without replicas) still
// denies an exhausted subject; only a decision that would be admitted is an error (degraded).
TEST_F(RedisStoreTest, ARedisRefusingWritesStillDeniesAnExhaustedSubject) {
  Connect(2000ms);
  const StoreRequest req = Request();
  SetCounter(req, "10");
  ASSERT_TRUE(
      testing_util::SendAndWait(io_, *connection_, {"CONFIG", "SET", "min-replicas-to-write", "1"})
          .ok());
  absl::StatusOr<StoreResult> denied = Decide(req);
  ASSERT_TRUE(denied.ok()) << denied.status();
  EXPECT_FALSE(denied->allowed);
  EXPECT_EQ(denied->used[0], 10);
  SetCounter(req, "3");  // a client's own write outside a script is refused too
  absl::StatusOr<Reply> counter = testing_util::SendAndWait(
      io_, *connection_, {"HGET", store_->CounterKey(req, 0), std::string(req.subject)});
  ASSERT_TRUE(counter.ok() && counter->is_string());
  EXPECT_EQ(counter->str, "10");
  ASSERT_TRUE(
      testing_util::SendAndWait(io_, *connection_, {"CONFIG", "SET", "min-replicas-to-write", "0"})
          .ok());
  SetCounter(req, "3");
  ASSERT_TRUE(
      testing_util::SendAndWait(io_, *connection_, {"CONFIG", "SET", "min-replicas-to-write", "1"})
          .ok());
  absl::StatusOr<StoreResult> refused = Decide(req);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable) << refused.status();
  EXPECT_EQ(StoreFailureOf(refused.status()), StoreFailure::kReadOnly) << refused.status();
  EXPECT_EQ(Counter(req), "3");
  ASSERT_TRUE(
      testing_util::SendAndWait(io_, *connection_, {"CONFIG", "SET", "min-replicas-to-write", "0"})
          .ok());
}

TEST_F(RedisStoreTest, ACounterAtTheMaximumQuotaDeniesWithoutOverflow) {
  Connect(2000ms);
  const StoreRequest req = Request(1'000'000);
  SetCounter(req, "1000000000000000");
  absl::StatusOr<StoreResult> r = Decide(req);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->allowed);
  EXPECT_EQ(r->used[0], 1'000'000'000'000'000);
}

TEST_F(RedisStoreTest, EveryChargeOfACreditPushesItsCounterHashsExpiryAYearAhead) {
  UsePlanWith("credit");
  Connect(2000ms);
  const StoreRequest req = Request();
  const std::string key = store_->CounterKey(req, 0);
  EXPECT_NE(key.find(absl::StrCat(":h:calendar:credit:0:", store_->SlotOf("alice"))),
            std::string::npos)
      << key;
  ASSERT_TRUE(Decide(req).ok());
  const int64_t horizon = ExpireTime(key);
  EXPECT_GE(horizon, absl::ToUnixSeconds(window_.end) + 60);
  // As if the last charge were long ago: the next one pushes the expiry forward again.
  absl::StatusOr<Reply> r = testing_util::SendAndWait(
      io_, *connection_, {"EXPIREAT", key, absl::StrCat(absl::ToUnixSeconds(now_) + 3600)});
  ASSERT_TRUE(r.ok()) << r.status();
  absl::StatusOr<StoreResult> second = Decide(req);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->used[0], 2);  // the same window: it never resets
  EXPECT_GE(ExpireTime(key), horizon);
}

TEST_F(RedisStoreTest, AYearWindowsCounterIsNamedByYearAndZoneAndLivesUntilNewYearPlusGrace) {
  UsePlanWith("year");
  Connect(2000ms);
  const StoreRequest req = Request();
  absl::TimeZone paris;
  ASSERT_TRUE(absl::LoadTimeZone("Europe/Paris", &paris));
  const absl::CivilYear year = absl::ToCivilYear(now_, paris);
  const std::string key = store_->CounterKey(req, 0);
  EXPECT_NE(key.find(absl::StrCat(":h:calendar:year@Europe/Paris:", year.year() - 1970, ":",
                                  store_->SlotOf("alice"))),
            std::string::npos)
      << key;
  absl::StatusOr<StoreResult> r = Decide(req);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->allowed);
  EXPECT_EQ(Counter(req), "1");
  // EXPIREAT is the next New Year in Paris plus the 60 s grace (rounded up to a whole second).
  const int64_t new_year = absl::ToUnixSeconds(absl::FromCivil(year + 1, paris));
  const int64_t expires = ExpireTime(key);
  EXPECT_GE(expires, new_year + 60);
  EXPECT_LE(expires, new_year + 61);
}

TEST_F(RedisStoreTest, AWeekWindowsCounterIsNamedByWeekAndZoneAndLivesUntilMondayPlusGrace) {
  UsePlanWith("week");
  Connect(2000ms);
  const StoreRequest req = Request();
  absl::TimeZone paris;
  ASSERT_TRUE(absl::LoadTimeZone("Europe/Paris", &paris));
  const absl::CivilDay today = absl::ToCivilDay(now_, paris);
  const absl::CivilDay monday = today - static_cast<int>(absl::GetWeekday(today));  // monday = 0
  const int64_t week = (monday - absl::CivilDay(1969, 12, 29)) / 7;
  const std::string key = store_->CounterKey(req, 0);
  EXPECT_NE(
      key.find(absl::StrCat(":h:calendar:week@Europe/Paris:", week, ":", store_->SlotOf("alice"))),
      std::string::npos)
      << key;
  absl::StatusOr<StoreResult> r = Decide(req);
  ASSERT_TRUE(r.ok()) << r.status();
  const int64_t next_monday = absl::ToUnixSeconds(absl::FromCivil(monday + 7, paris));
  const int64_t expires = ExpireTime(key);
  EXPECT_GE(expires, next_monday + 60);
  EXPECT_LE(expires, next_monday + 61);
}

INSTANTIATE_TEST_SUITE_P(Redis, StoreConformanceTest,
                         ::testing::Values(StoreHarnessFactory{
                             "redis", [] { return std::make_unique<RedisHarness>(); }}),
                         StoreHarnessName);
INSTANTIATE_TEST_SUITE_P(
    Redis, AlgorithmConformanceTest,
    ::testing::Values(StoreHarnessFactory{"redis", [] { return std::make_unique<RedisHarness>(); }},
                      StoreHarnessFactory{
                          "redis_with_deadline",
                          [] { return std::make_unique<RedisHarness>(absl::Seconds(2)); }}),
    StoreHarnessName);
INSTANTIATE_TEST_SUITE_P(Redis, ReservationConformanceTest,
                         ::testing::Values(StoreHarnessFactory{
                             "redis", [] { return std::make_unique<RedisHarness>(); }}),
                         StoreHarnessName);

// A group's parts, each its own subject, placed in group "order-7" (two parts of plan p).
struct GroupFixture {
  StoreRequest Part(const StoreRequest& base, std::string_view subject, int64_t cost) const {
    StoreRequest part = base;
    part.subject = subject;
    part.group = "order-7";
    part.cost = cost;
    return part;
  }
};

absl::StatusOr<StoreGroupResult> DecideGroupOn(boost::asio::io_context& io, RedisStore& store,
                                               const std::vector<StoreRequest>& parts) {
  std::optional<absl::StatusOr<StoreGroupResult>> out;
  store.DecideGroup({.group = "order-7", .parts = parts},
                    [&](absl::StatusOr<StoreGroupResult> r) { out = std::move(r); });
  EXPECT_TRUE(testing_util::PumpUntil(io, [&] { return out.has_value(); }));
  return out.value_or(absl::UnknownError("no answer"));
}

TEST_F(RedisStoreTest, EveryKeyOfAGroupSharesTheGroupsHashTagAndExpires) {
  Connect(2000ms);
  const StoreRequest base = Request();
  GroupFixture g;
  // Subjects whose own buckets differ, so the shared tag can only come from the group.
  std::vector<StoreRequest> parts;
  std::vector<std::string> subjects;
  for (int i = 0; subjects.size() < 3 && i < 100; ++i) {
    std::string s = "user-" + std::to_string(i);
    if (subjects.empty() || store_->BucketOf(s) != store_->BucketOf(subjects.back())) {
      subjects.push_back(s);
    }
  }
  ASSERT_EQ(subjects.size(), 3u);
  ASSERT_NE(store_->BucketOf(subjects[0]), store_->BucketOf(subjects[1]));
  for (const std::string& s : subjects) parts.push_back(g.Part(base, s, 2));
  absl::StatusOr<StoreGroupResult> r = DecideGroupOn(io_, *store_, parts);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->allowed);
  ASSERT_EQ(r->parts.size(), 3u);
  for (const StoreResult& part : r->parts) EXPECT_EQ(part.used[0], 2);

  absl::StatusOr<Reply> keys = testing_util::SendAndWait(io_, *connection_, {"KEYS", "*:h:*"});
  ASSERT_TRUE(keys.ok());
  ASSERT_GE(keys->elements.size(), 1u);
  ASSERT_LE(keys->elements.size(), 3u);  // the subjects' slots may coincide
  for (const StoreRequest& part : parts) EXPECT_EQ(Counter(part), "2") << part.subject;
  const std::string tag = store_->Tag("order-7") + ":";
  for (const Reply& key : keys->elements) {
    EXPECT_TRUE(key.str.starts_with(tag)) << key.str << " lacks " << tag;
    absl::StatusOr<Reply> ttl = testing_util::SendAndWait(io_, *connection_, {"TTL", key.str});
    ASSERT_TRUE(ttl.ok());
    EXPECT_GT(ttl->integer, 0) << key.str;
  }
  // A single decision of a group-placed subject finds the same counter.
  StoreRequest single = g.Part(base, subjects[1], 1);
  absl::StatusOr<StoreResult> one = Decide(single);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->used[0], 3);
}

TEST_F(RedisStoreTest, AGroupAdmissionWhoseReplyCameLateIsRefundedPartByPart) {
  Connect(50ms, /*deadline=*/absl::Seconds(30));
  const StoreRequest base = Request();
  GroupFixture g;
  std::vector<StoreRequest> parts = {g.Part(base, "alice", 3), g.Part(base, "bob", 0),
                                     g.Part(base, "carol", 5)};
  ASSERT_TRUE(DecideGroupOn(io_, *store_, parts).ok());  // loads the script: 3, 0, 5
  server_.Pause();
  std::optional<absl::StatusOr<StoreGroupResult>> out;
  store_->DecideGroup({.group = "order-7", .parts = parts},
                      [&](absl::StatusOr<StoreGroupResult> r) { out = std::move(r); });
  ASSERT_TRUE(testing_util::PumpUntil(io_, [&] { return out.has_value(); }));
  EXPECT_EQ(StoreFailureOf(out->status()), StoreFailure::kTimeout);
  server_.Resume();
  ASSERT_TRUE(testing_util::PumpUntil(io_, [&] { return store_->refunds() == 1; }));
  EXPECT_EQ(store_->late_admissions(), 1u);
  EXPECT_EQ(Counter(parts[0]), "3");
  EXPECT_EQ(Counter(parts[1]), "(nil)");
  EXPECT_EQ(Counter(parts[2]), "5");
}

}  // namespace
}  // namespace sluice::redis
