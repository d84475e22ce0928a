#include "sluice/registry/sqlite_backend.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "sluice/common/clock.h"
#include "sluice/registry/keys.h"

namespace sluice::registry {
namespace {

using ::testing::HasSubstr;

const absl::Time kT0 = absl::FromUnixSeconds(1'700'000'000);

class SqliteBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string dir = (std::filesystem::temp_directory_path() / "sluice_registry_XXXXXX").string();
    ASSERT_NE(::mkdtemp(dir.data()), nullptr);
    dir_ = dir;
    path_ = dir_ + "/registry.db";
    Reopen();
  }
  void TearDown() override {
    backend_.reset();
    std::filesystem::remove_all(dir_);
  }

  absl::StatusOr<std::unique_ptr<SqliteBackend>> OpenAt(const std::string& path) {
    return SqliteBackend::Open({.path = path, .queue_limit = 4, .clock = &clock_});
  }
  // Closes the backend (if any) and opens the file again into a fresh index.
  void Reopen() {
    backend_.reset();
    index_ = std::make_unique<Index>();
    absl::StatusOr<std::unique_ptr<SqliteBackend>> backend = OpenAt(path_);
    ASSERT_TRUE(backend.ok()) << backend.status();
    backend_ = *std::move(backend);
    ASSERT_TRUE(backend_->Start(index_.get()).ok());
  }

  // Applies `change` and waits for its answer.
  absl::StatusOr<ChangeResult> Apply(Change change) {
    std::promise<absl::StatusOr<ChangeResult>> answer;
    std::future<absl::StatusOr<ChangeResult>> future = answer.get_future();
    backend_->Apply(std::move(change),
                    [&answer](absl::StatusOr<ChangeResult> r) { answer.set_value(std::move(r)); });
    if (future.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
      return absl::DeadlineExceededError("no answer");
    }
    return future.get();
  }

  static Subject MakeSubject(std::string id, std::string plan = "free") {
    Subject s;
    s.id = std::move(id);
    s.plan = std::move(plan);
    s.created_at = s.updated_at = kT0;
    return s;
  }
  static Key MakeKey(uint64_t id, std::string subject, std::string_view plaintext) {
    return {.id = id,
            .subject = std::move(subject),
            .digest = DigestOf(plaintext),
            .prefix = std::string(plaintext.substr(0, 8)),
            .created_at = kT0};
  }
  absl::StatusOr<ChangeResult> Put(Subject s) {
    return Apply({.kind = Change::Kind::kPutSubject, .subject = std::move(s)});
  }
  absl::StatusOr<ChangeResult> Put(std::string id) { return Put(MakeSubject(std::move(id))); }
  absl::StatusOr<ChangeResult> AddKey(Key k, std::string idempotency_key = "",
                                      std::string fingerprint = "") {
    return Apply({.kind = Change::Kind::kAddKey,
                  .key = std::move(k),
                  .idempotency_key = std::move(idempotency_key),
                  .fingerprint = std::move(fingerprint)});
  }
  absl::StatusOr<ChangeResult> Delete(std::string id) {
    return Apply({.kind = Change::Kind::kDeleteSubject, .subject_id = std::move(id)});
  }
  absl::StatusOr<ChangeResult> Revoke(uint64_t id) {
    return Apply({.kind = Change::Kind::kRevokeKey, .key_id = id});
  }
  absl::StatusOr<ChangeResult> Grant(std::string subject, int64_t amount, std::string key,
                                     std::string fingerprint = "") {
    if (fingerprint.empty()) fingerprint = absl::StrCat(amount);
    return Apply({.kind = Change::Kind::kGrantCredits,
                  .subject_id = std::move(subject),
                  .grant = {.amount = amount, .reason = "top-up", .actor = "admin", .at = kT0},
                  .idempotency_key = std::move(key),
                  .fingerprint = std::move(fingerprint)});
  }
  absl::StatusOr<CreditPage> Ledger(std::string subject, int64_t before = 0, size_t limit = 100) {
    std::promise<absl::StatusOr<CreditPage>> answer;
    std::future<absl::StatusOr<CreditPage>> future = answer.get_future();
    backend_->ReadCredits(std::move(subject), before, limit,
                          [&answer](absl::StatusOr<CreditPage> r) { answer.set_value(r); });
    if (future.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
      return absl::DeadlineExceededError("no answer");
    }
    return future.get();
  }
  int64_t CreditsOf(std::string_view id) {
    std::shared_ptr<const Subject> s = index_->FindSubject(id);
    return s == nullptr ? -1 : s->credits;
  }
  bool Valid(std::string_view plaintext) {
    return index_->FindByDigest(DigestOf(plaintext), kT0).state == Index::KeyState::kValid;
  }

  FakeClock clock_{kT0};
  std::string dir_;
  std::string path_;
  std::unique_ptr<Index> index_;
  std::unique_ptr<SqliteBackend> backend_;
};

TEST_F(SqliteBackendTest, PutCreatesThenReplaces) {
  absl::StatusOr<ChangeResult> r = Put("alice");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->created);
  ASSERT_NE(index_->FindSubject("alice"), nullptr);
  Subject changed = MakeSubject("alice", "pro");
  changed.created_at = kT0 + absl::Hours(1);  // a replacement keeps the first created_at
  changed.updated_at = kT0 + absl::Hours(1);
  r = Put(changed);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->created);
  EXPECT_EQ(index_->FindSubject("alice")->plan, "pro");
  EXPECT_EQ(index_->FindSubject("alice")->created_at, kT0);
  EXPECT_EQ(index_->FindSubject("alice")->updated_at, kT0 + absl::Hours(1));
}

TEST_F(SqliteBackendTest, PutKeepsTheKeys) {
  ASSERT_TRUE(Put("alice").ok());
  ASSERT_TRUE(AddKey(MakeKey(1, "alice", "sk_a")).ok());
  ASSERT_TRUE(Put(MakeSubject("alice", "pro")).ok());
  EXPECT_TRUE(Valid("sk_a"));
  Reopen();
  EXPECT_TRUE(Valid("sk_a"));  // not cascaded away by the replacement
}

TEST_F(SqliteBackendTest, DoneRunsAfterTheIndexHasTheChange) {
  std::promise<bool> seen;
  backend_->Apply({.kind = Change::Kind::kPutSubject, .subject = MakeSubject("alice")},
                  [&](absl::StatusOr<ChangeResult>) {
                    seen.set_value(index_->FindSubject("alice") != nullptr);
                  });
  EXPECT_TRUE(seen.get_future().get());
}

TEST_F(SqliteBackendTest, DeleteSubjectRemovesItsKeys) {
  ASSERT_TRUE(Put("alice").ok());
  ASSERT_TRUE(AddKey(MakeKey(1, "alice", "sk_a1")).ok());
  ASSERT_TRUE(AddKey(MakeKey(2, "alice", "sk_a2")).ok());
  ASSERT_TRUE(Delete("alice").ok());
  EXPECT_FALSE(Valid("sk_a1"));
  EXPECT_EQ(index_->FindSubject("alice"), nullptr);
  Reopen();
  EXPECT_EQ(index_->key_count(), 0u);
  EXPECT_EQ(index_->subject_count(), 0u);
  // Recreated, it has no keys left over in the file either.
  ASSERT_TRUE(Put("alice").ok());
  Reopen();
  EXPECT_TRUE(index_->KeysOf("alice").empty());
}

TEST_F(SqliteBackendTest, DeleteOfAnAbsentSubjectIsNotFound) {
  EXPECT_EQ(Delete("ghost").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(SqliteBackendTest, AddKeyToAnAbsentSubjectIsNotFound) {
  EXPECT_EQ(AddKey(MakeKey(1, "ghost", "sk_g")).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(index_->key_count(), 0u);
}

TEST_F(SqliteBackendTest, AddKeyWithATakenDigestIsAlreadyExists) {
  ASSERT_TRUE(Put("alice").ok());
  ASSERT_TRUE(Put("bob").ok());
  ASSERT_TRUE(AddKey(MakeKey(1, "alice", "sk_same")).ok());
  EXPECT_EQ(AddKey(MakeKey(2, "bob", "sk_same")).status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(index_->FindByDigest(DigestOf("sk_same"), kT0).subject->id, "alice");
  EXPECT_FALSE(index_->FindKey(2).has_value());
}

TEST_F(SqliteBackendTest, AddKeyWithATakenIdIsAlreadyExists) {
  ASSERT_TRUE(Put("alice").ok());
  ASSERT_TRUE(AddKey(MakeKey(1, "alice", "sk_a")).ok());
  EXPECT_EQ(AddKey(MakeKey(1, "alice", "sk_b")).status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(Valid("sk_a"));
  EXPECT_FALSE(Valid("sk_b"));
}

TEST_F(SqliteBackendTest, AddKeyBeyondTheLimitIsResourceExhausted) {
  ASSERT_TRUE(Put("alice").ok());
  for (uint64_t i = 1; i <= kMaxKeysPerSubject; ++i) {
    ASSERT_TRUE(AddKey(MakeKey(i, "alice", absl::StrCat("sk_", i))).ok());
  }
  EXPECT_EQ(AddKey(MakeKey(1000, "alice", "sk_more")).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_FALSE(Valid("sk_more"));
  EXPECT_EQ(index_->KeysOf("alice").size(), kMaxKeysPerSubject);
}

TEST_F(SqliteBackendTest, FailedAddKeyLeavesNothing) {
  ASSERT_TRUE(Put("alice").ok());
  ASSERT_TRUE(AddKey(MakeKey(1, "alice", "sk_a")).ok());
  // Refused (digest taken): neither a key nor the idempotency record is kept...
  EXPECT_FALSE(AddKey(MakeKey(2, "alice", "sk_a"), "idem-1", "fp-1").ok());
  // ...so the same idempotency key makes a key afterwards, not a replay.
  absl::StatusOr<ChangeResult> r = AddKey(MakeKey(3, "alice", "sk_c"), "idem-1", "fp-1");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->replayed);
  EXPECT_EQ(r->key_id, 3u);
  Reopen();
  EXPECT_EQ(index_->key_count(), 2u);
}

TEST_F(SqliteBackendTest, RevokeKey) {
  ASSERT_TRUE(Put("alice").ok());
  ASSERT_TRUE(AddKey(MakeKey(1, "alice", "sk_a")).ok());
  ASSERT_TRUE(Revoke(1).ok());
  EXPECT_FALSE(Valid("sk_a"));
  EXPECT_EQ(Revoke(1).status().code(), absl::StatusCode::kNotFound);
  Reopen();
  EXPECT_FALSE(Valid("sk_a"));
}

TEST_F(SqliteBackendTest, EverythingSurvivesAReopen) {
  Subject s = MakeSubject("alice", "pro");
  s.email = "a@example.com";
  s.webhook = "https://example.com/h";
  s.webhook_secret = "whsec_c2VjcmV0";
  s.metadata = R"({"team":"x"})";
  s.disabled = true;
  s.overrides = {{.limit = "daily", .quota = 5, .until = kT0 + absl::Hours(3)},
                 {.limit = "per_minute", .quota = 9}};
  ASSERT_TRUE(Put(s).ok());
  Key k = MakeKey(0xfedcba9876543210, "alice", "sk_abcdefgh");  // above INT64_MAX
  k.name = "ci";
  k.expires_at = kT0 + absl::Hours(1);
  ASSERT_TRUE(AddKey(k).ok());
  Reopen();
  const std::shared_ptr<const Subject> got = index_->FindSubject("alice");
  ASSERT_NE(got, nullptr);
  EXPECT_EQ(got->plan, "pro");
  EXPECT_EQ(got->email, "a@example.com");
  EXPECT_EQ(got->webhook, "https://example.com/h");
  EXPECT_EQ(got->webhook_secret, "whsec_c2VjcmV0");
  EXPECT_EQ(got->metadata, R"({"team":"x"})");
  EXPECT_TRUE(got->disabled);
  ASSERT_EQ(got->overrides.size(), 2u);
  EXPECT_EQ(got->overrides[0].until, kT0 + absl::Hours(3));
  EXPECT_EQ(got->overrides[1].until, std::nullopt);
  const std::optional<Key> key = index_->FindKey(0xfedcba9876543210);
  ASSERT_TRUE(key.has_value());
  EXPECT_EQ(key->digest, k.digest);
  EXPECT_EQ(key->prefix, "sk_abcde");
  EXPECT_EQ(key->name, "ci");
  EXPECT_EQ(key->expires_at, kT0 + absl::Hours(1));
  EXPECT_EQ(key->created_at, kT0);
}

TEST_F(SqliteBackendTest, IdempotentRetryReplaysTheFirstKey) {
  ASSERT_TRUE(Put("alice").ok());
  ASSERT_TRUE(AddKey(MakeKey(1, "alice", "sk_a"), "idem", "fp").ok());
  absl::StatusOr<ChangeResult> r = AddKey(MakeKey(2, "alice", "sk_b"), "idem", "fp");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->replayed);
  EXPECT_EQ(r->key_id, 1u);
  EXPECT_FALSE(Valid("sk_b"));
  EXPECT_EQ(index_->key_count(), 1u);
}

TEST_F(SqliteBackendTest, IdempotencyKeyWithAnotherFingerprintIsFailedPrecondition) {
  ASSERT_TRUE(Put("alice").ok());
  ASSERT_TRUE(AddKey(MakeKey(1, "alice", "sk_a"), "idem", "fp").ok());
  EXPECT_EQ(AddKey(MakeKey(2, "alice", "sk_b"), "idem", "other").status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(Valid("sk_b"));
}

TEST_F(SqliteBackendTest, IdempotencyRecordsExpireAfterADay) {
  ASSERT_TRUE(Put("alice").ok());
  ASSERT_TRUE(AddKey(MakeKey(1, "alice", "sk_a"), "idem", "fp").ok());
  clock_.Advance(absl::Hours(24) + absl::Minutes(1));
  absl::StatusOr<ChangeResult> r = AddKey(MakeKey(2, "alice", "sk_b"), "idem", "other");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->replayed);
}

TEST_F(SqliteBackendTest, ASecondProcessIsRefused) {
  absl::StatusOr<std::unique_ptr<SqliteBackend>> second = OpenAt(path_);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status().message(), HasSubstr("in use by another process"));
  EXPECT_THAT(second.status().message(), HasSubstr(absl::StrCat("pid ", ::getpid())));
  backend_.reset();
  EXPECT_TRUE(OpenAt(path_).ok());  // the lock goes with the backend
}

TEST_F(SqliteBackendTest, ANewFileIsPrivateWhateverTheUmask) {
  const std::string path = dir_ + "/new.db";
  const mode_t old_umask = ::umask(022);
  absl::StatusOr<std::unique_ptr<SqliteBackend>> opened = OpenAt(path);
  ::umask(old_umask);
  ASSERT_TRUE(opened.ok()) << opened.status();
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(SqliteBackendTest, AFileThatIsNotADatabaseIsRefused) {
  const std::string path = dir_ + "/junk.db";
  std::ofstream(path) << std::string(8192, 'x');
  absl::StatusOr<std::unique_ptr<SqliteBackend>> opened = OpenAt(path);
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(opened.status().message(), HasSubstr("is not an SQLite database"));
  EXPECT_THAT(opened.status().message(), HasSubstr(path));
}

TEST_F(SqliteBackendTest, ANewerSchemaIsRefusedAndLeftAlone) {
  const std::string path = dir_ + "/newer.db";
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "PRAGMA user_version = 3", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  absl::StatusOr<std::unique_ptr<SqliteBackend>> opened = OpenAt(path);
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(opened.status().message(), HasSubstr("schema version 3"));
}

// The file's bytes, to show a refused file was left as it was.
std::string Contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// An SQLite database of another program at `path`, with `user_version` set.
void WriteForeignDatabase(const std::string& path, int user_version) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  const std::string sql =
      absl::StrCat("CREATE TABLE orders (id INTEGER PRIMARY KEY, total INTEGER);",
                   "INSERT INTO orders VALUES (1, 100); PRAGMA user_version = ", user_version);
  ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
}

TEST_F(SqliteBackendTest, AnEmptyFileIsRefusedAndLeftAlone) {
  const std::string path = dir_ + "/empty.db";
  std::ofstream{path};
  absl::StatusOr<std::unique_ptr<SqliteBackend>> opened = OpenAt(path);
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(opened.status().message(),
            absl::StrCat("registry ", path,
                         " is empty (0 bytes), not a registry: restore it from a backup, or "
                         "remove it to start with an empty registry"));
  EXPECT_EQ(std::filesystem::file_size(path), 0u);
  EXPECT_FALSE(std::filesystem::exists(path + "-wal"));
}

TEST_F(SqliteBackendTest, AnotherProgramsDatabaseIsRefusedAndLeftAlone) {
  // Without a version (SQLite's default, 0) and with one that happens to be sluice's.
  for (const int user_version : {0, SqliteBackend::kSchemaVersion}) {
    const std::string path = absl::StrCat(dir_, "/orders", user_version, ".db");
    WriteForeignDatabase(path, user_version);
    const std::string before = Contents(path);
    absl::StatusOr<std::unique_ptr<SqliteBackend>> opened = OpenAt(path);
    ASSERT_FALSE(opened.ok()) << user_version;
    EXPECT_EQ(opened.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(opened.status().message(),
              absl::StrCat("registry ", path,
                           " is an SQLite database without sluice's registry in it (another "
                           "program's database, or the wrong path)"));
    EXPECT_EQ(Contents(path), before) << user_version;  // not even switched to WAL
  }
}

TEST_F(SqliteBackendTest, ARegistryTruncatedWhileRunningIsRefusedAtTheNextStart) {
  ASSERT_TRUE(Put("alice").ok());
  Reopen();  // the close wrote everything into the file: no log to fall back on
  ASSERT_EQ(::truncate(path_.c_str(), 0), 0);
  EXPECT_EQ(Put("bob").status().code(), absl::StatusCode::kUnavailable);
  backend_.reset();
  absl::StatusOr<std::unique_ptr<SqliteBackend>> opened = OpenAt(path_);
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(opened.status().message(), HasSubstr(absl::StrCat(path_, " is empty (0 bytes)")));
}

TEST_F(SqliteBackendTest, ANewFileIsCreatedWholeUnderItsName) {
  const std::string path = dir_ + "/new.db";
  std::ofstream(path + ".new") << "left by a creation that crashed";
  backend_.reset();
  {
    absl::StatusOr<std::unique_ptr<SqliteBackend>> opened = OpenAt(path);
    ASSERT_TRUE(opened.ok()) << opened.status();
  }
  EXPECT_FALSE(std::filesystem::exists(path + ".new"));
  Index index;
  EXPECT_TRUE(SqliteBackend::ReadInto(path, &index).ok());
}

TEST_F(SqliteBackendTest, AWriteAheadLogWithoutItsDatabaseIsRefused) {
  const std::string path = dir_ + "/moved.db";
  std::ofstream(path + "-wal") << std::string(4096, 'w');
  absl::StatusOr<std::unique_ptr<SqliteBackend>> opened = OpenAt(path);
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(opened.status().message(),
              HasSubstr(absl::StrCat("registry ", path, " does not exist but its write-ahead log ",
                                     path, "-wal does")));
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_EQ(std::filesystem::file_size(path + "-wal"), 4096u);
}

TEST_F(SqliteBackendTest, ReadIntoRefusesWhatOpenRefuses) {
  const std::string empty = dir_ + "/empty.db";
  std::ofstream{empty};
  const std::string foreign = dir_ + "/orders.db";
  WriteForeignDatabase(foreign, 0);
  for (const std::string& path : {empty, foreign}) {
    Index index;
    const absl::Status read = SqliteBackend::ReadInto(path, &index);
    EXPECT_EQ(read.code(), absl::StatusCode::kFailedPrecondition) << path;
    EXPECT_EQ(read.message(), OpenAt(path).status().message()) << path;
  }
  Index index;
  EXPECT_EQ(SqliteBackend::ReadInto(dir_ + "/absent.db", &index).code(),
            absl::StatusCode::kNotFound);
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/absent.db"));
  ASSERT_TRUE(Put("alice").ok());
  EXPECT_TRUE(SqliteBackend::ReadInto(path_, &index).ok());
  EXPECT_NE(index.FindSubject("alice"), nullptr);
}

TEST_F(SqliteBackendTest, InMemoryRegistryWorks) {
  backend_.reset();
  Index index;
  absl::StatusOr<std::unique_ptr<SqliteBackend>> opened = OpenAt(":memory:");
  ASSERT_TRUE(opened.ok()) << opened.status();
  backend_ = *std::move(opened);
  ASSERT_TRUE(backend_->Start(&index).ok());
  ASSERT_TRUE(Put("alice").ok());
  EXPECT_NE(index.FindSubject("alice"), nullptr);
  backend_.reset();
}

TEST_F(SqliteBackendTest, AFullQueueRefusesWithUnavailable) {
  ASSERT_TRUE(Put("alice").ok());
  // Hold the writer inside a `done` so that the queue (limit 4) fills behind it.
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::promise<void> holding;
  backend_->Apply({.kind = Change::Kind::kPutSubject, .subject = MakeSubject("held")},
                  [&holding, released](absl::StatusOr<ChangeResult>) {
                    holding.set_value();
                    released.wait();
                  });
  holding.get_future().wait();
  std::vector<std::future<absl::StatusOr<ChangeResult>>> answers;
  std::vector<std::promise<absl::StatusOr<ChangeResult>>> promises(5);
  for (int i = 0; i < 5; ++i) {
    answers.push_back(promises[i].get_future());
    backend_->Apply(
        {.kind = Change::Kind::kPutSubject, .subject = MakeSubject(absl::StrCat("s", i))},
        [&promises, i](absl::StatusOr<ChangeResult> r) { promises[i].set_value(std::move(r)); });
  }
  EXPECT_EQ(backend_->stats().queued, 4u);
  EXPECT_EQ(backend_->stats().queue_full, 1u);
  release.set_value();
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(answers[i].get().ok());
  const absl::StatusOr<ChangeResult> refused = answers[4].get();
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(refused.status().message(), "registry write queue full");
  EXPECT_EQ(index_->FindSubject("s4"), nullptr);
}

TEST_F(SqliteBackendTest, StopFinishesPendingWritesAndThenRefuses) {
  std::promise<absl::StatusOr<ChangeResult>> answer;
  backend_->Apply({.kind = Change::Kind::kPutSubject, .subject = MakeSubject("alice")},
                  [&answer](absl::StatusOr<ChangeResult> r) { answer.set_value(std::move(r)); });
  backend_->Stop();
  EXPECT_TRUE(answer.get_future().get().ok());
  EXPECT_EQ(Put("bob").status().code(), absl::StatusCode::kUnavailable);
  backend_->Stop();  // idempotent
  Reopen();
  EXPECT_NE(index_->FindSubject("alice"), nullptr);
}

// Credits.

TEST_F(SqliteBackendTest, AGrantAddsToTheSubjectsCreditsAndIsNumbered) {
  ASSERT_TRUE(Put("alice").ok());
  absl::StatusOr<ChangeResult> first = Grant("alice", 100, "k1");
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(first->replayed);
  EXPECT_EQ(first->grant.seq, 1);
  EXPECT_EQ(first->grant.balance, 100);
  absl::StatusOr<ChangeResult> second = Grant("alice", 50, "k2");
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->grant.seq, 2);
  EXPECT_EQ(second->grant.balance, 150);
  EXPECT_EQ(CreditsOf("alice"), 150);
}

TEST_F(SqliteBackendTest, ARetriedGrantIsReplayedNotAppliedTwice) {
  ASSERT_TRUE(Put("alice").ok());
  ASSERT_TRUE(Grant("alice", 100, "k1").ok());
  absl::StatusOr<ChangeResult> again = Grant("alice", 100, "k1");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->replayed);
  EXPECT_EQ(again->grant.seq, 1);
  EXPECT_EQ(again->grant.balance, 100);
  EXPECT_EQ(again->grant.reason, "top-up");
  EXPECT_EQ(CreditsOf("alice"), 100);
}

TEST_F(SqliteBackendTest, AnIdempotencyKeyReusedForAnotherGrantIsRefused) {
  ASSERT_TRUE(Put("alice").ok());
  ASSERT_TRUE(Grant("alice", 100, "k1").ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(Grant("alice", 7, "k1").status()));
  EXPECT_EQ(CreditsOf("alice"), 100);
}

TEST_F(SqliteBackendTest, AGrantToAnAbsentSubjectIsNotFound) {
  EXPECT_TRUE(absl::IsNotFound(Grant("nobody", 1, "k1").status()));
  EXPECT_TRUE(absl::IsNotFound(Ledger("nobody").status()));
}

TEST_F(SqliteBackendTest, CreditsNeverExceedTheLargestQuota) {
  ASSERT_TRUE(Put("alice").ok());
  ASSERT_TRUE(Grant("alice", kMaxCredits - 1, "k1").ok());
  EXPECT_TRUE(absl::IsOutOfRange(Grant("alice", 2, "k2").status()));
  ASSERT_TRUE(Grant("alice", 1, "k3").ok());
  EXPECT_EQ(CreditsOf("alice"), kMaxCredits);
}

TEST_F(SqliteBackendTest, TheLedgerIsNewestFirstInPages) {
  ASSERT_TRUE(Put("alice").ok());
  for (int i = 1; i <= 5; ++i) ASSERT_TRUE(Grant("alice", i, absl::StrCat("k", i)).ok());
  absl::StatusOr<CreditPage> page = Ledger("alice", 0, 2);
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_EQ(page->grants.size(), 2u);
  EXPECT_EQ(page->grants[0].seq, 5);
  EXPECT_EQ(page->grants[0].balance, 15);
  EXPECT_EQ(page->grants[1].seq, 4);
  EXPECT_EQ(page->next_before, 4);
  absl::StatusOr<CreditPage> last = Ledger("alice", 2, 2);
  ASSERT_TRUE(last.ok()) << last.status();
  ASSERT_EQ(last->grants.size(), 1u);
  EXPECT_EQ(last->grants[0].seq, 1);
  EXPECT_EQ(last->grants[0].actor, "admin");
  EXPECT_EQ(last->next_before, 0);
}

TEST_F(SqliteBackendTest, CreditsAndTheLedgerSurviveAReopenAndAReplaceOfTheSubject) {
  ASSERT_TRUE(Put("alice").ok());
  ASSERT_TRUE(Grant("alice", 100, "k1").ok());
  ASSERT_TRUE(Put("alice").ok());  // a replacement keeps the credits
  EXPECT_EQ(CreditsOf("alice"), 100);
  Reopen();
  EXPECT_EQ(CreditsOf("alice"), 100);
  EXPECT_TRUE(Grant("alice", 100, "k1")->replayed);
  absl::StatusOr<CreditPage> page = Ledger("alice");
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_EQ(page->grants.size(), 1u);
}

TEST_F(SqliteBackendTest, ADeletedSubjectTakesItsCreditsWithIt) {
  ASSERT_TRUE(Put("alice").ok());
  ASSERT_TRUE(Grant("alice", 100, "k1").ok());
  ASSERT_TRUE(Delete("alice").ok());
  ASSERT_TRUE(Put("alice").ok());
  EXPECT_EQ(CreditsOf("alice"), 0);
  EXPECT_FALSE(Grant("alice", 100, "k1")->replayed);
}

TEST_F(SqliteBackendTest, ARegistryOfSchemaVersionOneIsUpgradedWithItsSubjectsKept) {
  const std::string path = dir_ + "/v1.db";
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    const char* v1 =
        "CREATE TABLE subjects (id TEXT PRIMARY KEY NOT NULL, plan TEXT NOT NULL, email TEXT NOT "
        "NULL, webhook TEXT NOT NULL, webhook_secret TEXT NOT NULL, metadata TEXT NOT NULL, "
        "disabled INTEGER NOT NULL, overrides TEXT NOT NULL, created_at INTEGER NOT NULL, "
        "updated_at INTEGER NOT NULL) WITHOUT ROWID;"
        "CREATE TABLE keys (id INTEGER NOT NULL UNIQUE, digest BLOB NOT NULL UNIQUE, subject TEXT "
        "NOT NULL REFERENCES subjects (id) ON DELETE CASCADE, prefix TEXT NOT NULL, name TEXT NOT "
        "NULL, expires_at INTEGER, created_at INTEGER NOT NULL, PRIMARY KEY (subject, id)) "
        "WITHOUT ROWID;"
        "CREATE TABLE idempotency (key TEXT PRIMARY KEY NOT NULL, fingerprint TEXT NOT NULL, "
        "key_id INTEGER NOT NULL, created_at INTEGER NOT NULL);"
        "INSERT INTO subjects VALUES ('bob', 'free', '', '', '', '{}', 0, '[]', 1, 1);"
        "PRAGMA user_version = 1;";
    ASSERT_EQ(sqlite3_exec(db, v1, nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
  }
  Index v1_index;
  ASSERT_TRUE(SqliteBackend::ReadInto(path, &v1_index).ok());  // read as it stands
  EXPECT_NE(v1_index.FindSubject("bob"), nullptr);
  path_ = path;
  Reopen();
  EXPECT_NE(index_->FindSubject("bob"), nullptr);
  absl::StatusOr<ChangeResult> granted = Grant("bob", 5, "k1");
  ASSERT_TRUE(granted.ok()) << granted.status();
  Reopen();
  EXPECT_EQ(CreditsOf("bob"), 5);
}

}  // namespace
}  // namespace sluice::registry
