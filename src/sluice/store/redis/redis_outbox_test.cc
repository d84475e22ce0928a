#include "sluice/store/redis/redis_outbox.h"

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/alerts/dispatcher.h"
#include "sluice/common/clock.h"
#include "sluice/limiter/sample_alert_event.h"
#include "sluice/store/redis/test_redis_server.h"

namespace sluice::redis {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using namespace std::chrono_literals;

AlertEvent Event(std::string subject, int threshold = 80) {
  return ::sluice::testing_util::SampleAlertEvent(std::move(subject), threshold);
}

class RedisOutboxTest : public ::testing::Test {
 protected:
  static constexpr int kBuckets = 4;

  void SetUp() override {
    port_ = testing_util::FreePort();
    ASSERT_TRUE(server_.Start(port_)) << "cannot start " << testing_util::kRedisServer;
    connection_ = std::make_unique<Connection>(
        io_, ConnectionOptions{.port = port_, .command_timeout = 2000ms});
    connection_->Start();
    RunUntil([&] { return connection_->connected(); });
  }

  void RunUntil(const std::function<bool()>& ready) {
    if (!testing_util::PumpUntil(io_, ready)) ADD_FAILURE() << "redis did not answer within 5 s";
  }

  Reply Command(std::vector<std::string> argv) {
    absl::StatusOr<Reply> reply = testing_util::SendAndWait(io_, *connection_, std::move(argv));
    EXPECT_TRUE(reply.ok()) << reply.status();
    return reply.ok() ? *std::move(reply) : Reply{};
  }

  std::string Stream(int bucket) { return OutboxStreamKey("sl", bucket); }

  // Writes `e` the way decide.lua does; returns the entry id.
  std::string Add(int bucket, const AlertEvent& e) {
    return Command({"XADD",
                    Stream(bucket),
                    "*",
                    "type",
                    "quota.threshold_reached",
                    "subject",
                    e.subject,
                    "plan",
                    e.plan,
                    "limit",
                    e.limit,
                    "threshold",
                    absl::StrCat(e.threshold),
                    "used",
                    absl::StrCat(e.used),
                    "quota",
                    absl::StrCat(e.quota),
                    "window_start",
                    absl::StrCat(absl::ToUnixSeconds(e.window_start)),
                    "window_end",
                    absl::StrCat(absl::ToUnixSeconds(e.window_end)),
                    "occurred_at_ms",
                    absl::StrCat(absl::ToUnixMillis(e.occurred_at))})
        .str;
  }

  std::unique_ptr<RedisOutbox> Outbox(std::string consumer,
                                      absl::Duration min_idle = absl::Seconds(60)) {
    return std::make_unique<RedisOutbox>(RedisOutboxOptions{
        .connection = {.port = port_, .command_timeout = 2000ms},
        .buckets = kBuckets,
        .consumer = std::move(consumer),
        .claim_min_idle = min_idle,
    });
  }

  // Makes entry `id` look idle for 100 s (as if its holder had stalled), keeping its owner.
  void AgePending(int bucket, const std::string& id, const std::string& owner) {
    Command({"XCLAIM", Stream(bucket), "sluice", owner, "0", id, "IDLE", "100000", "JUSTID"});
  }

  // `holder` (consumer `name`) fetches the one event of bucket 1 and then stalls: its lease looks
  // 100 s old.
  std::optional<OutboxItem> FetchAndStall(RedisOutbox& holder, const std::string& name) {
    absl::StatusOr<std::vector<OutboxItem>> held = holder.Fetch(10);
    if (!held.ok() || held->size() != 1) {
      ADD_FAILURE() << "expected one entry, got " << (held.ok() ? held->size() : 0) << " "
                    << held.status();
      return std::nullopt;
    }
    AgePending(1, (*held)[0].handle.id, name);
    return (*held)[0];
  }

  int64_t Len(int bucket) { return Command({"XLEN", Stream(bucket)}).integer; }
  int64_t PendingCount(int bucket) {
    return Command({"XPENDING", Stream(bucket), "sluice"}).elements.at(0).integer;
  }

  static std::vector<AlertEvent> Events(const std::vector<OutboxItem>& items) {
    std::vector<AlertEvent> out;
    for (const auto& item : items) out.push_back(item.event);
    return out;
  }

  uint16_t port_ = 0;
  testing_util::RedisServer server_;
  boost::asio::io_context io_;
  std::unique_ptr<Connection> connection_;
};

TEST_F(RedisOutboxTest, DeliversEntriesWrittenBeforeTheGroupExisted) {
  const std::string id = Add(2, Event("user-1"));
  auto outbox = Outbox("a");

  absl::StatusOr<std::vector<OutboxItem>> items = outbox->Fetch(10);
  ASSERT_TRUE(items.ok()) << items.status();
  ASSERT_EQ(items->size(), 1u);
  EXPECT_EQ((*items)[0].event, Event("user-1")) << "every field parsed back";
  EXPECT_EQ((*items)[0].handle, (OutboxHandle{.stream = 2, .id = id}));
  EXPECT_EQ((*items)[0].deliveries, 1);
  EXPECT_EQ(Command({"XINFO", "GROUPS", Stream(0)}).elements.size(), 1u)
      << "the group exists on every bucket";
}

TEST_F(RedisOutboxTest, FetchHandsOutEachNewEntryOnce) {
  auto outbox = Outbox("a");
  ASSERT_TRUE(outbox->Fetch(10)->empty());
  Add(0, Event("user-1"));
  Add(3, Event("user-2"));

  absl::StatusOr<std::vector<OutboxItem>> items = outbox->Fetch(10);
  ASSERT_TRUE(items.ok()) << items.status();
  EXPECT_THAT(Events(*items), ::testing::UnorderedElementsAre(Event("user-1"), Event("user-2")));
  EXPECT_THAT(*outbox->Fetch(10), IsEmpty());
}

TEST_F(RedisOutboxTest, FetchReturnsAtMostMaxAcrossBuckets) {
  auto outbox = Outbox("a");
  for (int i = 0; i < 6; ++i) Add(i % kBuckets, Event(absl::StrCat("user-", i)));

  size_t total = 0;
  for (int round = 0; round < 10 && total < 6; ++round) {
    absl::StatusOr<std::vector<OutboxItem>> items = outbox->Fetch(2);
    ASSERT_TRUE(items.ok()) << items.status();
    EXPECT_LE(items->size(), 2u);
    total += items->size();
  }
  EXPECT_EQ(total, 6u);
}

TEST_F(RedisOutboxTest, AckAcknowledgesAndDeletesTheEntry) {
  Add(1, Event("user-1"));
  auto outbox = Outbox("a");
  absl::StatusOr<std::vector<OutboxItem>> items = outbox->Fetch(10);
  ASSERT_TRUE(items.ok() && items->size() == 1);
  EXPECT_EQ(PendingCount(1), 1);

  ASSERT_TRUE(outbox->Ack((*items)[0].handle).ok());
  EXPECT_EQ(PendingCount(1), 0);
  EXPECT_EQ(Len(1), 0) << "deleted: decide.lua bounds the stream by its length";
  EXPECT_TRUE(outbox->Ack((*items)[0].handle).ok()) << "acking twice is harmless";
}

TEST_F(RedisOutboxTest, AbandonedEntryIsClaimedByAnotherConsumerAfterTheLease) {
  Add(1, Event("user-1"));
  auto a = Outbox("a");
  auto b = Outbox("b");
  absl::StatusOr<std::vector<OutboxItem>> held = a->Fetch(10);
  ASSERT_TRUE(held.ok() && held->size() == 1);
  EXPECT_THAT(*b->Claim(10), IsEmpty()) << "fresh: still leased to a";

  AgePending(1, (*held)[0].handle.id, "a");  // a crashed 100 s ago
  absl::StatusOr<std::vector<OutboxItem>> claimed = b->Claim(10);
  ASSERT_TRUE(claimed.ok()) << claimed.status();
  ASSERT_EQ(claimed->size(), 1u);
  EXPECT_EQ((*claimed)[0].event, Event("user-1"));
  EXPECT_EQ((*claimed)[0].handle, (*held)[0].handle);
  EXPECT_EQ((*claimed)[0].deliveries, 2) << "the delivery counter travels with the entry";
  EXPECT_THAT(*b->Claim(10), IsEmpty());
}

TEST_F(RedisOutboxTest, RenewedEntryIsNotClaimed) {
  Add(1, Event("user-1"));
  auto a = Outbox("a");
  auto b = Outbox("b");
  std::optional<OutboxItem> held = FetchAndStall(*a, "a");
  ASSERT_TRUE(held.has_value());
  const std::vector<OutboxHandle> handles = {held->handle};
  absl::StatusOr<std::vector<OutboxHandle>> lost = a->Renew(handles);
  ASSERT_TRUE(lost.ok()) << lost.status();
  EXPECT_THAT(*lost, IsEmpty());
  EXPECT_THAT(*b->Claim(10), IsEmpty()) << "renewal reset the idle time";
  const Reply pending = Command({"XPENDING", Stream(1), "sluice", "-", "+", "10"});
  ASSERT_EQ(pending.elements.size(), 1u);
  EXPECT_EQ(pending.elements[0].elements[1].str, "a");
  EXPECT_EQ(pending.elements[0].elements[3].integer, 1) << "renewal counts no delivery";
}

TEST_F(RedisOutboxTest, RenewReportsEntriesClaimedByOthersAndDoesNotTakeThemBack) {
  Add(1, Event("user-1"));
  auto a = Outbox("a");
  auto b = Outbox("b");
  std::optional<OutboxItem> held = FetchAndStall(*a, "a");
  ASSERT_TRUE(held.has_value());
  ASSERT_EQ(b->Claim(10)->size(), 1u);

  const std::vector<OutboxHandle> handles = {held->handle};
  absl::StatusOr<std::vector<OutboxHandle>> lost = a->Renew(handles);
  ASSERT_TRUE(lost.ok()) << lost.status();
  EXPECT_THAT(*lost, ElementsAre(held->handle));
  const Reply pending = Command({"XPENDING", Stream(1), "sluice", "-", "+", "10"});
  ASSERT_EQ(pending.elements.size(), 1u);
  EXPECT_EQ(pending.elements[0].elements[1].str, "b");
}

TEST_F(RedisOutboxTest, ANewOutboxWithTheSameConsumerResumesItsPendingEntries) {
  Add(0, Event("user-1"));
  Add(2, Event("user-2"));
  {
    auto before_reload = Outbox("a");
    ASSERT_EQ(before_reload->Fetch(10)->size(), 2u);
  }
  Add(3, Event("user-3"));
  auto after_reload = Outbox("a");

  absl::StatusOr<std::vector<OutboxItem>> resumed = after_reload->Fetch(10);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_THAT(Events(*resumed), ::testing::UnorderedElementsAre(Event("user-1"), Event("user-2")));
  absl::StatusOr<std::vector<OutboxItem>> fresh = after_reload->Fetch(10);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_THAT(Events(*fresh), ElementsAre(Event("user-3")));
  EXPECT_THAT(*after_reload->Fetch(10), IsEmpty());
}

TEST_F(RedisOutboxTest, MalformedEntriesAreRemovedAndCounted) {
  Command({"XADD", Stream(0), "*", "type", "quota.threshold_reached", "subject", "user-1"});
  Add(0, Event("user-2"));
  auto outbox = Outbox("a");

  absl::StatusOr<std::vector<OutboxItem>> items = outbox->Fetch(10);
  ASSERT_TRUE(items.ok()) << items.status();
  EXPECT_THAT(Events(*items), ElementsAre(Event("user-2")));
  EXPECT_EQ(outbox->malformed(), 1u);
  EXPECT_EQ(Len(0), 1) << "only the good entry is left";
}

TEST_F(RedisOutboxTest, StatsCountUndeliveredEntriesAndTheOldest) {
  auto outbox = Outbox("a");
  AlertEvent older = Event("user-1");
  older.occurred_at -= absl::Minutes(5);
  Add(0, Event("user-2"));
  Add(3, older);

  absl::StatusOr<OutboxStats> stats = outbox->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->depth, 2);
  EXPECT_EQ(stats->oldest_event, older.occurred_at);
}

TEST_F(RedisOutboxTest, RecreatesTheGroupWhenRedisLostIt) {
  auto outbox = Outbox("a");
  ASSERT_TRUE(outbox->Fetch(10).ok());
  Command({"FLUSHALL"});
  EXPECT_FALSE(outbox->Fetch(10).ok()) << "NOGROUP";
  Add(1, Event("user-1"));
  absl::StatusOr<std::vector<OutboxItem>> items = outbox->Fetch(10);
  ASSERT_TRUE(items.ok()) << items.status();
  EXPECT_THAT(Events(*items), ElementsAre(Event("user-1")));
}

TEST_F(RedisOutboxTest, ABucketWhoseGroupCannotBeCreatedDoesNotHoldBackTheOthers) {
  // Bucket 2's key is not a stream (as a bucket whose node is down fails): XGROUP CREATE fails
  // there only.
  Command({"SET", Stream(2), "not a stream"});
  Add(1, Event("user-1"));
  auto outbox = Outbox("a");
  absl::StatusOr<std::vector<OutboxItem>> items = outbox->Fetch(10);
  ASSERT_TRUE(items.ok()) << items.status();
  EXPECT_THAT(Events(*items), ElementsAre(Event("user-1")));
  EXPECT_TRUE(outbox->Claim(10).ok());
}

TEST_F(RedisOutboxTest, ClaimSkipsAFailingBucketAndReturnsWhatTheOthersGave) {
  Add(1, Event("user-1"));
  Add(3, Event("user-3"));
  auto holder = Outbox("a");
  absl::StatusOr<std::vector<OutboxItem>> held = holder->Fetch(10);
  ASSERT_TRUE(held.ok()) << held.status();
  ASSERT_EQ(held->size(), 2u);
  auto other = Outbox("b");
  ASSERT_TRUE(other->Claim(10).ok());  // its groups are ready; nothing is idle yet
  for (const OutboxItem& item : *held) {
    AgePending(static_cast<int>(item.handle.stream), item.handle.id, "a");
  }
  // Bucket 2 now fails (claimed between buckets 1 and 3).
  Command({"DEL", Stream(2)});
  Command({"SET", Stream(2), "not a stream"});
  absl::StatusOr<std::vector<OutboxItem>> claimed = other->Claim(10);
  ASSERT_TRUE(claimed.ok()) << claimed.status();
  EXPECT_THAT(Events(*claimed), ::testing::UnorderedElementsAre(Event("user-1"), Event("user-3")));
}

TEST_F(RedisOutboxTest, FailsCleanlyWhenRedisIsDown) {
  auto outbox = std::make_unique<RedisOutbox>(
      RedisOutboxOptions{.connection = {.port = testing_util::FreePort(), .command_timeout = 100ms},
                         .buckets = kBuckets,
                         .consumer = "a"});
  EXPECT_FALSE(outbox->Fetch(10).ok());
  EXPECT_FALSE(outbox->Claim(10).ok());
  EXPECT_FALSE(outbox->Stats().ok());
}

// Redis gone after the outbox had its connection: every call fails at once, not after a command
// timeout per stream (the dispatcher's thread, and a reload or stop waiting for it, would be held
// that long: 64 streams x 2 s in production).
TEST_F(RedisOutboxTest, ALostConnectionFailsEveryCallAtOnce) {
  std::unique_ptr<RedisOutbox> outbox = Outbox("a");
  ASSERT_TRUE(outbox->Fetch(10).ok());
  server_.Kill();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(outbox->Claim(10).ok());
    EXPECT_FALSE(outbox->Fetch(10).ok());
  }
  // Six calls over kBuckets streams, each of which waited for the 2 s timeout before.
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
}

class RecordingSink final : public alerts::Sink {
 public:
  const std::string& name() const override { return name_; }
  alerts::Outcome Deliver(const AlertEvent& event, const alerts::Contact&, int) override {
    {
      std::lock_guard lock(mu_);
      subjects_.push_back(event.subject);
    }
    cv_.notify_all();
    return {.kind = alerts::Outcome::Kind::kDelivered};
  }
  std::vector<std::string> WaitForCalls(size_t n) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, 5s, [&] { return subjects_.size() >= n; });
    return subjects_;
  }

 private:
  const std::string name_ = "webhook";
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> subjects_;
};

TEST_F(RedisOutboxTest, DispatcherDeliversEveryBucketsEntriesAndEmptiesTheStreams) {
  for (int i = 0; i < 6; ++i) Add(i % kBuckets, Event(absl::StrCat("user-", i)));
  auto outbox = Outbox("a");
  RecordingSink sink;
  SystemClock clock;
  alerts::Dispatcher dispatcher(outbox.get(), {&sink}, &clock,
                                {.poll_interval = absl::Milliseconds(10)});
  dispatcher.Start();

  EXPECT_THAT(sink.WaitForCalls(6), ::testing::UnorderedElementsAre("user-0", "user-1", "user-2",
                                                                    "user-3", "user-4", "user-5"));
  // The coordinator acks right after the last result; Stop() acks whatever has finished.
  dispatcher.Stop();
  EXPECT_EQ(dispatcher.acked(), 6u);
  for (int b = 0; b < kBuckets; ++b) {
    EXPECT_EQ(Len(b), 0) << "bucket " << b;
    EXPECT_EQ(PendingCount(b), 0) << "bucket " << b;
  }
}

TEST(OutboxStreamKeyTest, MatchesTheStoreLayout) {
  EXPECT_EQ(OutboxStreamKey("sl", 17), "sl:{17}:outbox");
}

TEST(DefaultConsumerNameTest, IsUniquePerInstance) {
  EXPECT_NE(DefaultConsumerName(), DefaultConsumerName());
}

}  // namespace
}  // namespace sluice::redis
