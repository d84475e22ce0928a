// RedisRegistry against a real redis-server: two instances on one Redis, each with its own Index,
// as two sluice processes would be.
#include "sluice/store/redis/redis_registry.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "sluice/registry/index.h"
#include "sluice/registry/keys.h"
#include "sluice/store/redis/registry_write_script.h"
#include "sluice/store/redis/test_redis_server.h"

namespace sluice::redis {
namespace {

using registry::Change;
using registry::ChangeResult;
using registry::Index;
using registry::Key;
using registry::Subject;
using testing_util::Clock;
using testing_util::RedisServer;
using testing_util::SendAndWait;
using namespace std::chrono_literals;

const absl::Time kT0 = absl::FromUnixSeconds(1700000000) + absl::Microseconds(123);

Subject MakeSubject(std::string id, std::string plan = "free") {
  return Subject{
      .id = std::move(id), .plan = std::move(plan), .created_at = kT0, .updated_at = kT0};
}

Key MakeKey(uint64_t id, std::string subject) {
  return Key{.id = id,
             .subject = std::move(subject),
             .digest = registry::DigestOf(absl::StrCat("sk_test_", id)),
             .prefix = "sk_test",
             .created_at = kT0};
}

Change Put(Subject s) { return Change{.kind = Change::Kind::kPutSubject, .subject = std::move(s)}; }
Change Delete(std::string id) {
  return Change{.kind = Change::Kind::kDeleteSubject, .subject_id = std::move(id)};
}
Change Add(Key k, std::string idempotency_key = "", std::string fingerprint = "") {
  return Change{.kind = Change::Kind::kAddKey,
                .key = std::move(k),
                .idempotency_key = std::move(idempotency_key),
                .fingerprint = std::move(fingerprint)};
}
Change Revoke(uint64_t id) { return Change{.kind = Change::Kind::kRevokeKey, .key_id = id}; }

Change Grant(std::string subject, int64_t amount, std::string key, std::string fingerprint = "") {
  if (fingerprint.empty()) fingerprint = absl::StrCat(amount);
  return Change{.kind = Change::Kind::kGrantCredits,
                .subject_id = std::move(subject),
                .grant = {.amount = amount, .reason = "top-up \"q4\"", .actor = "admin", .at = kT0},
                .idempotency_key = std::move(key),
                .fingerprint = std::move(fingerprint)};
}

absl::StatusOr<registry::CreditPage> LedgerOf(RedisRegistry& r, std::string subject,
                                              int64_t before = 0, size_t limit = 100) {
  auto result = std::make_shared<std::promise<absl::StatusOr<registry::CreditPage>>>();
  std::future<absl::StatusOr<registry::CreditPage>> f = result->get_future();
  r.ReadCredits(
      std::move(subject), before, limit,
      [result](absl::StatusOr<registry::CreditPage> p) { result->set_value(std::move(p)); });
  return f.get();
}

absl::StatusOr<ChangeResult> ApplyAndWait(RedisRegistry& r, Change change) {
  auto result = std::make_shared<std::promise<absl::StatusOr<ChangeResult>>>();
  std::future<absl::StatusOr<ChangeResult>> f = result->get_future();
  r.Apply(std::move(change),
          [result](absl::StatusOr<ChangeResult> res) { result->set_value(std::move(res)); });
  return f.get();
}

// Waits (checking every millisecond) until `ready()` holds; false if `timeout` passes first.
bool Eventually(const std::function<bool()>& ready, std::chrono::milliseconds timeout = 1000ms) {
  const auto deadline = Clock::now() + timeout;
  while (!ready()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

class RedisRegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    port_ = testing_util::FreePort();
    ASSERT_TRUE(server_.Start(port_));
    raw_ = std::make_unique<Connection>(
        io_, ConnectionOptions{.port = port_, .command_timeout = 2000ms});
    raw_->Start();
    ASSERT_TRUE(testing_util::PumpUntil(io_, [&] { return raw_->connected(); }));
  }

  RedisRegistryOptions Options() const {
    RedisRegistryOptions o;
    o.connection.port = port_;
    o.key_prefix = "t";
    o.start_timeout = 5000ms;
    return o;
  }

  // An instance with its own Index, started.
  struct Instance {
    Index index;
    std::unique_ptr<RedisRegistry> registry;
  };
  std::unique_ptr<Instance> Started(RedisRegistryOptions options) {
    auto i = std::make_unique<Instance>();
    i->registry = std::make_unique<RedisRegistry>(std::move(options));
    EXPECT_TRUE(i->registry->Start(&i->index).ok());
    return i;
  }
  std::unique_ptr<Instance> Started() { return Started(Options()); }

  Reply Raw(std::vector<std::string> argv) {
    absl::StatusOr<Reply> r = SendAndWait(io_, *raw_, std::move(argv));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : Reply{};
  }
  int64_t DbSize() { return Raw({"DBSIZE"}).integer; }

  uint16_t port_ = 0;
  RedisServer server_;
  boost::asio::io_context io_;
  std::unique_ptr<Connection> raw_;
};

TEST_F(RedisRegistryTest, AChangeOnOneInstanceIsInTheOthersIndexWithinOneSecond) {
  auto a = Started(), b = Started();
  ASSERT_TRUE(ApplyAndWait(*a->registry, Put(MakeSubject("user:1"))).ok());
  EXPECT_TRUE(Eventually([&] { return b->index.FindSubject("user:1") != nullptr; }));
  // Followed from the log (the counter moves just after the Index), not reloaded.
  EXPECT_TRUE(Eventually([&] { return b->registry->catch_ups() >= 1; }));
  EXPECT_EQ(b->registry->full_loads(), 1u);
}

TEST_F(RedisRegistryTest, AWriteIsInTheWritersIndexWhenReported) {
  auto a = Started();
  ASSERT_TRUE(ApplyAndWait(*a->registry, Put(MakeSubject("s"))).ok());
  EXPECT_NE(a->index.FindSubject("s"), nullptr);
  ASSERT_TRUE(ApplyAndWait(*a->registry, Add(MakeKey(7, "s"))).ok());
  EXPECT_EQ(a->index.FindByDigest(MakeKey(7, "s").digest, kT0).state, Index::KeyState::kValid);
  ASSERT_TRUE(ApplyAndWait(*a->registry, Revoke(7)).ok());
  EXPECT_EQ(a->index.FindByDigest(MakeKey(7, "s").digest, kT0).state, Index::KeyState::kUnknown);
  ASSERT_TRUE(ApplyAndWait(*a->registry, Delete("s")).ok());
  EXPECT_EQ(a->index.FindSubject("s"), nullptr);
}

TEST_F(RedisRegistryTest, EveryFieldRoundTripsToTheOtherInstance) {
  auto a = Started(), b = Started();
  Subject s = MakeSubject("acme", "pro");
  s.email = "ops@acme.example";
  s.webhook = "https://acme.example/hook";
  s.webhook_secret = "whsec_1";
  s.metadata = R"({"tier":"gold"})";
  s.disabled = true;
  s.overrides = {{.limit = "day", .quota = 1000000000000000},
                 {.limit = "minute", .quota = 5, .until = kT0 + absl::Hours(1)}};
  s.updated_at = kT0 + absl::Seconds(3);
  Key k = MakeKey(0xfedcba9876543210u, "acme");
  k.name = "ci";
  k.expires_at = kT0 + absl::Hours(24);
  ASSERT_TRUE(ApplyAndWait(*a->registry, Put(s)).ok());
  ASSERT_TRUE(ApplyAndWait(*a->registry, Add(k)).ok());
  ASSERT_TRUE(Eventually([&] { return b->index.FindKey(k.id).has_value(); }));

  std::shared_ptr<const Subject> got = b->index.FindSubject("acme");
  ASSERT_NE(got, nullptr);
  EXPECT_EQ(got->plan, "pro");
  EXPECT_EQ(got->email, s.email);
  EXPECT_EQ(got->webhook, s.webhook);
  EXPECT_EQ(got->webhook_secret, s.webhook_secret);
  EXPECT_EQ(got->metadata, s.metadata);
  EXPECT_TRUE(got->disabled);
  ASSERT_EQ(got->overrides.size(), 2u);
  EXPECT_EQ(got->overrides[0].quota, 1000000000000000);
  EXPECT_FALSE(got->overrides[0].until.has_value());
  EXPECT_EQ(got->overrides[1].until, kT0 + absl::Hours(1));
  EXPECT_EQ(got->created_at, kT0);
  EXPECT_EQ(got->updated_at, s.updated_at);
  std::optional<Key> key = b->index.FindKey(k.id);
  EXPECT_EQ(key->digest, k.digest);
  EXPECT_EQ(key->name, "ci");
  EXPECT_EQ(key->prefix, "sk_test");
  EXPECT_EQ(key->expires_at, k.expires_at);
  EXPECT_EQ(key->created_at, kT0);
}

TEST_F(RedisRegistryTest, PutSubjectReportsWhetherItCreated) {
  auto a = Started();
  absl::StatusOr<ChangeResult> first = ApplyAndWait(*a->registry, Put(MakeSubject("s")));
  absl::StatusOr<ChangeResult> second = ApplyAndWait(*a->registry, Put(MakeSubject("s", "pro")));
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_TRUE(first->created);
  EXPECT_FALSE(second->created);
  EXPECT_EQ(a->index.FindSubject("s")->plan, "pro");
}

TEST_F(RedisRegistryTest, ReplacingASubjectKeepsItsKeys) {
  auto a = Started(), b = Started();
  ASSERT_TRUE(ApplyAndWait(*a->registry, Put(MakeSubject("s"))).ok());
  ASSERT_TRUE(ApplyAndWait(*a->registry, Add(MakeKey(1, "s"))).ok());
  ASSERT_TRUE(ApplyAndWait(*a->registry, Put(MakeSubject("s", "pro"))).ok());
  // B may apply the entries in one round, each record at its latest state: the new plan can be
  // seen a moment before the key, never a key lost.
  ASSERT_TRUE(Eventually([&] { return b->registry->version() == a->registry->version(); }));
  EXPECT_EQ(b->index.FindSubject("s")->plan, "pro");
  EXPECT_EQ(b->index.KeysOf("s").size(), 1u);
}

TEST_F(RedisRegistryTest, AbsentRecordsAreNotFound) {
  auto a = Started();
  EXPECT_EQ(ApplyAndWait(*a->registry, Delete("nobody")).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(ApplyAndWait(*a->registry, Revoke(42)).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ApplyAndWait(*a->registry, Add(MakeKey(1, "nobody"))).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(DbSize(), 0);  // not even a version
}

TEST_F(RedisRegistryTest, ADuplicateDigestIsRefusedAndLeavesNothing) {
  auto a = Started();
  ASSERT_TRUE(ApplyAndWait(*a->registry, Put(MakeSubject("s"))).ok());
  ASSERT_TRUE(ApplyAndWait(*a->registry, Add(MakeKey(1, "s"))).ok());
  const int64_t keys_before = DbSize();
  const uint64_t version_before = a->registry->version();
  Key twin = MakeKey(1, "s");
  twin.id = 2;  // another id, the same digest
  EXPECT_EQ(ApplyAndWait(*a->registry, Add(twin, "idem-1", "fp")).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(DbSize(), keys_before);  // no key hash, no idempotency record, no log entry
  EXPECT_TRUE(Raw({"EXISTS", "t:{registry}:key:0000000000000002"}).integer == 0);
  EXPECT_EQ(Raw({"GET", "t:{registry}:version"}).str, absl::StrCat(version_before));
  EXPECT_FALSE(a->index.FindKey(2).has_value());
}

TEST_F(RedisRegistryTest, ASubjectHoldsAtMostTheMaximumNumberOfKeys) {
  auto a = Started();
  ASSERT_TRUE(ApplyAndWait(*a->registry, Put(MakeSubject("s"))).ok());
  for (uint64_t id = 1; id <= registry::kMaxKeysPerSubject; ++id) {
    ASSERT_TRUE(ApplyAndWait(*a->registry, Add(MakeKey(id, "s"))).ok());
  }
  EXPECT_EQ(ApplyAndWait(*a->registry, Add(MakeKey(1000, "s"))).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(a->index.KeysOf("s").size(), registry::kMaxKeysPerSubject);
}

TEST_F(RedisRegistryTest, ARetriedCreationIsAnsweredFromTheFirst) {
  auto a = Started(), b = Started();
  ASSERT_TRUE(ApplyAndWait(*a->registry, Put(MakeSubject("s"))).ok());
  absl::StatusOr<ChangeResult> first = ApplyAndWait(*a->registry, Add(MakeKey(5, "s"), "k1", "fp"));
  ASSERT_TRUE(first.ok());
  EXPECT_FALSE(first->replayed);
  EXPECT_EQ(first->key_id, 5u);
  const uint64_t version = a->registry->version();
  // The retry carries a new key (a new id and digest) but the same request: nothing is made.
  absl::StatusOr<ChangeResult> again = ApplyAndWait(*b->registry, Add(MakeKey(6, "s"), "k1", "fp"));
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->replayed);
  EXPECT_EQ(again->key_id, 5u);
  EXPECT_EQ(Raw({"GET", "t:{registry}:version"}).str, absl::StrCat(version));
  EXPECT_EQ(a->index.KeysOf("s").size(), 1u);
  const int64_t ttl = Raw({"TTL", "t:{registry}:idem:k1"}).integer;
  EXPECT_GT(ttl, 86000);
  EXPECT_LE(ttl, 86400);
}

TEST_F(RedisRegistryTest, AnIdempotencyKeyReusedForAnotherRequestIsRefused) {
  auto a = Started();
  ASSERT_TRUE(ApplyAndWait(*a->registry, Put(MakeSubject("s"))).ok());
  ASSERT_TRUE(ApplyAndWait(*a->registry, Add(MakeKey(5, "s"), "k1", "fp")).ok());
  EXPECT_EQ(ApplyAndWait(*a->registry, Add(MakeKey(6, "s"), "k1", "other")).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(a->index.FindKey(6).has_value());
}

TEST_F(RedisRegistryTest, DeletingASubjectRevokesItsKeysOnEveryInstance) {
  auto a = Started(), b = Started();
  ASSERT_TRUE(ApplyAndWait(*a->registry, Put(MakeSubject("s"))).ok());
  ASSERT_TRUE(ApplyAndWait(*a->registry, Add(MakeKey(1, "s"))).ok());
  ASSERT_TRUE(ApplyAndWait(*a->registry, Add(MakeKey(2, "s"))).ok());
  ASSERT_TRUE(Eventually([&] { return b->index.key_count() == 2; }));
  ASSERT_TRUE(ApplyAndWait(*a->registry, Delete("s")).ok());
  EXPECT_TRUE(Eventually(
      [&] { return b->index.FindSubject("s") == nullptr && b->index.key_count() == 0; }));
  EXPECT_EQ(b->index.FindByDigest(MakeKey(2, "s").digest, kT0).state, Index::KeyState::kUnknown);
  // Only the bookkeeping keys are left: version, epoch, log.
  EXPECT_EQ(DbSize(), 3);
}

TEST_F(RedisRegistryTest, AStartingInstanceLoadsWhatIsThere) {
  auto a = Started();
  for (int i = 0; i < 30; ++i) {
    ASSERT_TRUE(ApplyAndWait(*a->registry, Put(MakeSubject(absl::StrCat("s", i)))).ok());
    ASSERT_TRUE(ApplyAndWait(*a->registry, Add(MakeKey(i + 1, absl::StrCat("s", i)))).ok());
  }
  RedisRegistryOptions small = Options();
  small.batch_size = 7;  // several SSCAN/HGETALL rounds
  auto b = Started(small);
  EXPECT_EQ(b->index.subject_count(), 30u);
  EXPECT_EQ(b->index.key_count(), 30u);
  EXPECT_EQ(b->registry->version(), a->registry->version());
}

TEST_F(RedisRegistryTest, AFlushedRegistryIsReloaded) {
  auto a = Started(), b = Started();
  ASSERT_TRUE(ApplyAndWait(*a->registry, Put(MakeSubject("old"))).ok());
  ASSERT_TRUE(Eventually([&] { return b->index.FindSubject("old") != nullptr; }));
  Raw({"FLUSHALL"});
  EXPECT_TRUE(Eventually([&] { return b->index.subject_count() == 0; }));
  // As many writes as before the flush: the version is the same again, the epoch is not.
  ASSERT_TRUE(ApplyAndWait(*a->registry, Put(MakeSubject("new"))).ok());
  EXPECT_TRUE(Eventually([&] {
    return b->index.FindSubject("new") != nullptr && b->index.FindSubject("old") == nullptr;
  }));
  EXPECT_TRUE(Eventually([&] { return b->registry->full_loads() >= 2; }));
}

TEST_F(RedisRegistryTest, AFlushFollowedByAsManyWritesIsNoticed) {
  RedisRegistryOptions slow = Options();
  slow.poll_interval = 300ms;
  auto a = Started(), b = Started(slow);
  ASSERT_TRUE(ApplyAndWait(*a->registry, Put(MakeSubject("old"))).ok());
  ASSERT_TRUE(Eventually([&] { return b->index.FindSubject("old") != nullptr; }));
  // Wiped and rewritten to the same version within one poll of B: only the epoch differs.
  Raw({"MULTI"});
  Raw({"FLUSHALL"});
  Raw({"EVAL", std::string(kRegistryWriteScript), "3", "t:{registry}:version", "t:{registry}:epoch",
       "t:{registry}:log", "t:{registry}", "fresh-epoch", "100", "put_subject", "new",
       SubjectRecord(MakeSubject("new"))});
  Raw({"EXEC"});
  EXPECT_TRUE(Eventually([&] {
    return b->index.FindSubject("new") != nullptr && b->index.FindSubject("old") == nullptr;
  }));
}

TEST_F(RedisRegistryTest, ARestartedRedisIsReloaded) {
  auto a = Started(), b = Started();
  ASSERT_TRUE(ApplyAndWait(*a->registry, Put(MakeSubject("before"))).ok());
  ASSERT_TRUE(Eventually([&] { return b->index.FindSubject("before") != nullptr; }));
  server_.Kill();
  ASSERT_TRUE(server_.Start(port_));
  // The restarted Redis is empty (no persistence in the tests): so is the registry.
  EXPECT_TRUE(Eventually([&] { return b->index.subject_count() == 0; }, 3000ms));
  ASSERT_TRUE(Eventually([&] { return ApplyAndWait(*a->registry, Put(MakeSubject("after"))).ok(); },
                         3000ms));
  EXPECT_TRUE(Eventually([&] { return b->index.FindSubject("after") != nullptr; }));
  EXPECT_EQ(b->index.FindSubject("before"), nullptr);
}

TEST_F(RedisRegistryTest, ALogTrimmedPastAFollowerMakesItReload) {
  auto a = Started(), b = Started();
  ASSERT_TRUE(ApplyAndWait(*a->registry, Put(MakeSubject("s1"))).ok());
  ASSERT_TRUE(Eventually([&] { return b->index.FindSubject("s1") != nullptr; }));
  // Two changes and a trim that B cannot observe apart (one transaction).
  const std::vector<std::string> eval = {"EVAL",
                                         std::string(kRegistryWriteScript),
                                         "3",
                                         "t:{registry}:version",
                                         "t:{registry}:epoch",
                                         "t:{registry}:log",
                                         "t:{registry}",
                                         "unused",
                                         "100",
                                         "put_subject"};
  auto put = [&](std::string id) {
    std::vector<std::string> argv = eval;
    argv.push_back(id);
    argv.push_back(SubjectRecord(MakeSubject(id)));
    return argv;
  };
  Raw({"MULTI"});
  Raw(put("s2"));
  Raw(put("s3"));
  Raw({"XTRIM", "t:{registry}:log", "MAXLEN", "1"});
  Raw({"EXEC"});
  EXPECT_TRUE(Eventually([&] {
    return b->index.FindSubject("s2") != nullptr && b->index.FindSubject("s3") != nullptr;
  }));
  EXPECT_TRUE(Eventually([&] { return b->registry->full_loads() == 2; }));
}

TEST_F(RedisRegistryTest, AKilledConnectionReconnectsAndConverges) {
  auto a = Started(), b = Started();
  ASSERT_TRUE(ApplyAndWait(*a->registry, Put(MakeSubject("s1"))).ok());
  ASSERT_TRUE(Eventually([&] { return b->index.FindSubject("s1") != nullptr; }));
  Raw({"CLIENT", "KILL", "SKIPME", "yes"});  // both instances' connections
  ASSERT_TRUE(
      Eventually([&] { return ApplyAndWait(*a->registry, Put(MakeSubject("s2"))).ok(); }, 3000ms));
  EXPECT_TRUE(Eventually([&] { return b->index.FindSubject("s2") != nullptr; }));
  EXPECT_EQ(b->registry->full_loads(), 1u);  // the same server and epoch: the log sufficed
  // Each follower checked its new connection and named it (what tells the next one apart).
  EXPECT_TRUE(Eventually([&] {
    const Reply list = Raw({"CLIENT", "LIST"});
    size_t named = 0;
    for (size_t at = 0; (at = list.str.find("name=sluice-registry-", at)) != std::string::npos;
         ++at) {
      ++named;
    }
    return named == 2;
  }));
}

TEST_F(RedisRegistryTest, ScriptsFlushedFromRedisAreLoadedAgain) {
  auto a = Started(), b = Started();
  Raw({"SCRIPT", "FLUSH"});
  ASSERT_TRUE(ApplyAndWait(*a->registry, Put(MakeSubject("s"))).ok());
  EXPECT_TRUE(Eventually([&] { return b->index.FindSubject("s") != nullptr; }));
}

TEST_F(RedisRegistryTest, AnUnparsableRecordIsSkippedAndCounted) {
  Raw({"SET", "t:{registry}:subject:bad", R"({"plan":"free","created_at":"x","updated_at":0})"});
  Raw({"ZADD", "t:{registry}:subjects", "0", "bad"});
  Raw({"SET", "t:{registry}:subject:good", SubjectRecord(MakeSubject("good"))});
  Raw({"ZADD", "t:{registry}:subjects", "0", "good"});
  auto a = Started();
  EXPECT_EQ(a->index.subject_count(), 1u);
  EXPECT_NE(a->index.FindSubject("good"), nullptr);
  EXPECT_EQ(a->registry->malformed(), 1u);
}

TEST_F(RedisRegistryTest, WritesWhileRedisIsDownAreUnavailable) {
  auto a = Started();
  server_.Kill();
  ASSERT_TRUE(Eventually([&] {
    return ApplyAndWait(*a->registry, Put(MakeSubject("s"))).status().code() ==
           absl::StatusCode::kUnavailable;
  }));
  EXPECT_EQ(a->index.FindSubject("s"), nullptr);
}

TEST_F(RedisRegistryTest, StartFailsWithoutRedis) {
  server_.Kill();
  RedisRegistryOptions o = Options();
  o.start_timeout = 200ms;
  Index index;
  RedisRegistry r(o);
  EXPECT_EQ(r.Start(&index).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(ApplyAndWait(r, Put(MakeSubject("s"))).status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(RedisRegistryTest, WritesAfterStopAreUnavailable) {
  auto a = Started();
  a->registry->Stop();
  a->registry->Stop();  // idempotent
  EXPECT_EQ(ApplyAndWait(*a->registry, Put(MakeSubject("s"))).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST_F(RedisRegistryTest, ChangesAreAppliedInTheOrderTheyWereMade) {
  auto a = Started(), b = Started();
  // Sent back to back without waiting: the put must precede the key, the revoke follow it.
  std::vector<std::future<absl::StatusOr<ChangeResult>>> results;
  std::vector<Change> changes = {Put(MakeSubject("s")), Add(MakeKey(1, "s")), Add(MakeKey(2, "s")),
                                 Revoke(1)};
  for (Change& c : changes) {
    auto p = std::make_shared<std::promise<absl::StatusOr<ChangeResult>>>();
    results.push_back(p->get_future());
    a->registry->Apply(std::move(c), [p](absl::StatusOr<ChangeResult> r) { p->set_value(r); });
  }
  for (auto& f : results) EXPECT_TRUE(f.get().ok());
  ASSERT_TRUE(Eventually([&] { return b->registry->version() == a->registry->version(); }));
  EXPECT_TRUE(b->index.FindKey(2).has_value());
  EXPECT_FALSE(b->index.FindKey(1).has_value());
  EXPECT_FALSE(a->index.FindKey(1).has_value());
}

TEST(RegistryRecordTest, RecordsRoundTripAnyText) {
  Subject s = MakeSubject("a:b@c/d+e=f");
  s.email = "q\"uote\\back\x01ctl\u00e9\U0001F600";
  s.metadata = R"({"k":"v \"x\" [1,2]","n":[{"a":"]"}]})";
  s.webhook_secret = "\t\n\r\b\f/";
  s.overrides = {{.limit = "x\"]", .quota = 3, .until = kT0}};
  std::optional<Subject> back = ParseSubject(s.id, SubjectRecord(s));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->email, s.email);
  EXPECT_EQ(back->metadata, s.metadata);
  EXPECT_EQ(back->webhook_secret, s.webhook_secret);
  ASSERT_EQ(back->overrides.size(), 1u);
  EXPECT_EQ(back->overrides[0].limit, "x\"]");
  EXPECT_EQ(back->overrides[0].until, kT0);
  // Escapes another writer may use (surrogate pairs, \/), and unknown members, are accepted.
  back = ParseSubject("x", R"({"plan":"p\/q","email":"\ud83d\ude00\u00e9","extra":{"a":1},)"
                           R"("created_at":1,"updated_at":-2})");
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->plan, "p/q");
  EXPECT_EQ(back->email, "\U0001F600\u00e9");
  EXPECT_EQ(back->updated_at, absl::FromUnixMicros(-2));
}

TEST(RegistryRecordTest, MalformedRecordsDoNotParse) {
  for (std::string_view bad :
       {R"()", R"({)", R"([])", R"({"plan":"p","created_at":1})",  // updated_at missing
        R"({"plan":"p","created_at":1,"updated_at":1.5})",
        R"({"plan":"p","created_at":1,"updated_at":1} x)",
        R"({"plan":"p\x","created_at":1,"updated_at":1})",
        R"({"plan":"p\ud83d","created_at":1,"updated_at":1})",
        R"({"plan":"p","disabled":"yes","created_at":1,"updated_at":1})",
        R"({"plan":"p","overrides":[{"limit":1}],"created_at":1,"updated_at":1})",
        R"({"plan":"","created_at":1,"updated_at":1})", "{\"plan\":\"a\nb\"}"}) {
    EXPECT_FALSE(ParseSubject("x", bad).has_value()) << bad;
  }
  EXPECT_FALSE(ParseKey(1, R"({"subject":"s","digest":"zz","created_at":1})").has_value());
  EXPECT_FALSE(ParseKey(0, KeyRecord(MakeKey(1, "s"))).has_value());
  EXPECT_TRUE(ParseKey(1, KeyRecord(MakeKey(1, "s"))).has_value());
}

// The write script alone: an unknown kind is an error reply and writes nothing.
TEST_F(RedisRegistryTest, TheWriteScriptRefusesAnUnknownKind) {
  Reply r = Raw({"EVAL", std::string(kRegistryWriteScript), "3", "t:{registry}:version",
                 "t:{registry}:epoch", "t:{registry}:log", "t:{registry}", "e", "100", "rename"});
  EXPECT_TRUE(r.is_error());
  EXPECT_EQ(DbSize(), 0);
}

// A version key lowered by hand cannot make the log refuse the next entry (XADD needs a larger
// id): the script continues after the log's last id.
TEST_F(RedisRegistryTest, TheWriteScriptContinuesAfterTheLogsLastEntry) {
  auto a = Started();
  ASSERT_TRUE(ApplyAndWait(*a->registry, Put(MakeSubject("s1"))).ok());
  ASSERT_TRUE(ApplyAndWait(*a->registry, Put(MakeSubject("s2"))).ok());
  Raw({"SET", "t:{registry}:version", "0"});
  ASSERT_TRUE(ApplyAndWait(*a->registry, Put(MakeSubject("s3"))).ok());
  EXPECT_EQ(Raw({"GET", "t:{registry}:version"}).str, "3");
}

// Credits.

int64_t CreditsOf(const Index& index, std::string_view id) {
  std::shared_ptr<const Subject> s = index.FindSubject(id);
  return s == nullptr ? -1 : s->credits;
}

TEST_F(RedisRegistryTest, AGrantOnOneInstanceRaisesTheCreditsOfTheOthersWithinOneSecond) {
  auto a = Started(), b = Started();
  ASSERT_TRUE(ApplyAndWait(*a->registry, Put(MakeSubject("s"))).ok());
  absl::StatusOr<ChangeResult> granted = ApplyAndWait(*a->registry, Grant("s", 100, "k1"));
  ASSERT_TRUE(granted.ok()) << granted.status();
  EXPECT_FALSE(granted->replayed);
  EXPECT_EQ(granted->grant.seq, 1);
  EXPECT_EQ(granted->grant.balance, 100);
  EXPECT_EQ(granted->grant.reason, "top-up \"q4\"");
  EXPECT_EQ(CreditsOf(a->index, "s"), 100);
  EXPECT_TRUE(Eventually([&] { return CreditsOf(b->index, "s") == 100; }));
}

TEST_F(RedisRegistryTest, AGrantRetriedOnAnotherInstanceIsReplayedNotAppliedTwice) {
  auto a = Started(), b = Started();
  ASSERT_TRUE(ApplyAndWait(*a->registry, Put(MakeSubject("s"))).ok());
  ASSERT_TRUE(ApplyAndWait(*a->registry, Grant("s", 100, "k1")).ok());
  absl::StatusOr<ChangeResult> again = ApplyAndWait(*b->registry, Grant("s", 100, "k1"));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->replayed);
  EXPECT_EQ(again->grant.seq, 1);
  EXPECT_EQ(again->grant.balance, 100);
  absl::StatusOr<registry::CreditPage> ledger = LedgerOf(*b->registry, "s");
  ASSERT_TRUE(ledger.ok()) << ledger.status();
  EXPECT_EQ(ledger->grants.size(), 1u);
}

TEST_F(RedisRegistryTest, AnIdempotencyKeyReusedForAnotherGrantIsRefused) {
  auto a = Started();
  ASSERT_TRUE(ApplyAndWait(*a->registry, Put(MakeSubject("s"))).ok());
  ASSERT_TRUE(ApplyAndWait(*a->registry, Grant("s", 100, "k1")).ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(ApplyAndWait(*a->registry, Grant("s", 5, "k1")).status()));
  EXPECT_EQ(CreditsOf(a->index, "s"), 100);
}

TEST_F(RedisRegistryTest, AGrantToAnAbsentSubjectIsNotFoundAndCreditsAreBounded) {
  auto a = Started();
  EXPECT_TRUE(absl::IsNotFound(ApplyAndWait(*a->registry, Grant("nobody", 1, "k1")).status()));
  EXPECT_TRUE(absl::IsNotFound(LedgerOf(*a->registry, "nobody").status()));
  ASSERT_TRUE(ApplyAndWait(*a->registry, Put(MakeSubject("s"))).ok());
  ASSERT_TRUE(ApplyAndWait(*a->registry, Grant("s", registry::kMaxCredits, "k1")).ok());
  EXPECT_TRUE(absl::IsOutOfRange(ApplyAndWait(*a->registry, Grant("s", 1, "k2")).status()));
  EXPECT_EQ(CreditsOf(a->index, "s"), registry::kMaxCredits);
}

TEST_F(RedisRegistryTest, TheLedgerIsNewestFirstInPages) {
  auto a = Started();
  ASSERT_TRUE(ApplyAndWait(*a->registry, Put(MakeSubject("s"))).ok());
  for (int i = 1; i <= 5; ++i) {
    ASSERT_TRUE(ApplyAndWait(*a->registry, Grant("s", i, absl::StrCat("k", i))).ok());
  }
  absl::StatusOr<registry::CreditPage> page = LedgerOf(*a->registry, "s", 0, 2);
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_EQ(page->grants.size(), 2u);
  EXPECT_EQ(page->grants[0].seq, 5);
  EXPECT_EQ(page->grants[0].balance, 15);
  EXPECT_EQ(page->grants[1].seq, 4);
  EXPECT_EQ(page->next_before, 4);
  absl::StatusOr<registry::CreditPage> last = LedgerOf(*a->registry, "s", 2, 2);
  ASSERT_TRUE(last.ok()) << last.status();
  ASSERT_EQ(last->grants.size(), 1u);
  EXPECT_EQ(last->grants[0].seq, 1);
  EXPECT_EQ(last->grants[0].actor, "admin");
  EXPECT_EQ(last->grants[0].at, kT0);
  EXPECT_EQ(last->next_before, 0);
}

TEST_F(RedisRegistryTest, CreditsSurviveAReplaceOfTheSubjectAndAFreshStart) {
  auto a = Started(), b = Started();
  ASSERT_TRUE(ApplyAndWait(*a->registry, Put(MakeSubject("s"))).ok());
  ASSERT_TRUE(ApplyAndWait(*a->registry, Grant("s", 100, "k1")).ok());
  // A replacement on an instance that may not have seen the grant yet keeps it all the same.
  ASSERT_TRUE(ApplyAndWait(*b->registry, Put(MakeSubject("s", "pro"))).ok());
  EXPECT_EQ(CreditsOf(b->index, "s"), 100);
  EXPECT_TRUE(Eventually([&] {
    std::shared_ptr<const Subject> s = a->index.FindSubject("s");
    return s != nullptr && s->plan == "pro" && s->credits == 100;
  }));
  auto fresh = Started();
  EXPECT_EQ(CreditsOf(fresh->index, "s"), 100);
}

TEST_F(RedisRegistryTest, DeletingASubjectDeletesItsLedger) {
  auto a = Started();
  ASSERT_TRUE(ApplyAndWait(*a->registry, Put(MakeSubject("s"))).ok());
  ASSERT_TRUE(ApplyAndWait(*a->registry, Grant("s", 100, "k1")).ok());
  ASSERT_TRUE(ApplyAndWait(*a->registry, Delete("s")).ok());
  EXPECT_EQ(Raw({"EXISTS", "t:{registry}:credits:s"}).integer, 0);
  ASSERT_TRUE(ApplyAndWait(*a->registry, Put(MakeSubject("s"))).ok());
  EXPECT_EQ(CreditsOf(a->index, "s"), 0);
  EXPECT_FALSE(ApplyAndWait(*a->registry, Grant("s", 100, "k1"))->replayed);
}

}  // namespace
}  // namespace sluice::redis
