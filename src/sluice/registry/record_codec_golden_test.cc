// The subjects' overrides as both registry back ends store and read them, byte for byte: the
// SQLite file's overrides column and the Redis subject record. Stored registries outlive the
// binaries that wrote them, so what is written, and which stored texts are taken, refused or
// read with `until` ignored, is pinned here.
#include <sqlite3.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "sluice/common/strings.h"
#include "sluice/registry/index.h"
#include "sluice/registry/model.h"
#include "sluice/registry/sqlite_backend.h"
#include "sluice/store/redis/redis_registry.h"

namespace sluice::registry {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'700'000'000);
const absl::Time kUntil = absl::FromUnixMicros(1'700'000'123'456'789);

Subject MakeSubject(std::vector<Override> overrides) {
  Subject s;
  s.id = "alice";
  s.plan = "free";
  s.overrides = std::move(overrides);
  s.created_at = s.updated_at = kT0;
  return s;
}

// An SQLite registry in a temporary directory: subjects go in through the backend, the column
// is read and written with SQL, and the file is loaded again as a server start loads it.
class SqliteOverridesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string dir = (std::filesystem::temp_directory_path() / "sluice_codec_XXXXXX").string();
    ASSERT_NE(::mkdtemp(dir.data()), nullptr);
    dir_ = dir;
    path_ = dir_ + "/registry.db";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Stores `s` through the backend, then closes it.
  void Store(Subject s) {
    absl::StatusOr<std::unique_ptr<SqliteBackend>> backend = SqliteBackend::Open({.path = path_});
    ASSERT_TRUE(backend.ok()) << backend.status();
    Index index;
    ASSERT_TRUE((*backend)->Start(&index).ok());
    std::promise<absl::StatusOr<ChangeResult>> answer;
    (*backend)->Apply(
        {.kind = Change::Kind::kPutSubject, .subject = std::move(s)},
        [&answer](absl::StatusOr<ChangeResult> r) { answer.set_value(std::move(r)); });
    std::future<absl::StatusOr<ChangeResult>> future = answer.get_future();
    ASSERT_EQ(future.wait_for(std::chrono::seconds(30)), std::future_status::ready);
    absl::StatusOr<ChangeResult> r = future.get();
    ASSERT_TRUE(r.ok()) << r.status();
  }

  // Runs one SQL statement on the file; `column` receives the first column of the last row.
  void Sql(const std::string& sql, std::string* column = nullptr) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
    sqlite3_stmt* stmt = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr), SQLITE_OK)
        << sqlite3_errmsg(db);
    int rc;
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
      if (column != nullptr) {
        *column = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
      }
    }
    EXPECT_EQ(rc, SQLITE_DONE) << sqlite3_errmsg(db);
    sqlite3_finalize(stmt);
    sqlite3_close(db);
  }

  std::string StoredOverrides() {
    std::string text = "(no row)";
    Sql("SELECT overrides FROM subjects WHERE id = 'alice'", &text);
    return text;
  }

  // Stores alice in a new file, sets her overrides column to `text`, and loads the file as a
  // start does.
  absl::StatusOr<std::vector<Override>> Load(std::string_view text) {
    path_ = absl::StrCat(dir_, "/registry", ++files_, ".db");
    Store(MakeSubject({}));
    Sql(absl::StrCat("UPDATE subjects SET overrides = '", ToAbsl(text), "' WHERE id = 'alice'"));
    Index index;
    if (absl::Status s = SqliteBackend::ReadInto(path_, &index); !s.ok()) return s;
    std::shared_ptr<const Subject> alice = index.FindSubject("alice");
    if (alice == nullptr) return absl::NotFoundError("alice was not loaded");
    return alice->overrides;
  }

  std::string dir_;
  std::string path_;
  int files_ = 0;
};

TEST_F(SqliteOverridesTest, StoresAnOverrideWithItsUntilInMicroseconds) {
  Store(MakeSubject({{.limit = "daily", .quota = 5, .until = kUntil}}));
  EXPECT_EQ(StoredOverrides(), R"([{"limit":"daily","quota":5,"until":1700000123456789}])");
}

// Older builds stored "until":null here; the Redis back end has always left the member out, and
// both readers take both.
TEST_F(SqliteOverridesTest, StoresAnOverrideWithoutUntilWithoutTheMember) {
  Store(MakeSubject({{.limit = "daily", .quota = 5}}));
  EXPECT_EQ(StoredOverrides(), R"([{"limit":"daily","quota":5}])");
}

TEST_F(SqliteOverridesTest, StoresNoOverridesAsAnEmptyArray) {
  Store(MakeSubject({}));
  EXPECT_EQ(StoredOverrides(), "[]");
}

TEST_F(SqliteOverridesTest, StoresOverridesInTheirOrder) {
  Store(MakeSubject({{.limit = "daily", .quota = 5, .until = kUntil},
                     {.limit = "monthly", .quota = -1},
                     {.limit = "x\"]\\", .quota = 1'000'000'000'000'000}}));
  EXPECT_EQ(StoredOverrides(), R"([{"limit":"daily","quota":5,"until":1700000123456789},)"
                               R"({"limit":"monthly","quota":-1},)"
                               R"({"limit":"x\"]\\","quota":1000000000000000}])");
}

TEST_F(SqliteOverridesTest, StoresInvalidUtf8AsReplacementCharacters) {
  Store(MakeSubject({{.limit = "a\xff", .quota = 1}}));
  EXPECT_EQ(StoredOverrides(), "[{\"limit\":\"a\xef\xbf\xbd\",\"quota\":1}]");
}

TEST_F(SqliteOverridesTest, ReadsAnIntegerUntil) {
  absl::StatusOr<std::vector<Override>> o =
      Load(R"([{"limit":"daily","quota":5,"until":1700000123456789}])");
  ASSERT_TRUE(o.ok()) << o.status();
  ASSERT_EQ(o->size(), 1u);
  EXPECT_EQ((*o)[0].limit, "daily");
  EXPECT_EQ((*o)[0].quota, 5);
  EXPECT_EQ((*o)[0].until, kUntil);
}

TEST_F(SqliteOverridesTest, ReadsANullOrAbsentUntilAsNone) {
  for (std::string_view text :
       {R"([{"limit":"daily","quota":5,"until":null}])", R"([{"limit":"daily","quota":5}])",
        R"([{"until":null,"quota":5,"limit":"daily"}])"}) {
    absl::StatusOr<std::vector<Override>> o = Load(text);
    ASSERT_TRUE(o.ok()) << text << ": " << o.status();
    ASSERT_EQ(o->size(), 1u) << text;
    EXPECT_EQ((*o)[0].limit, "daily");
    EXPECT_EQ((*o)[0].quota, 5);
    EXPECT_EQ((*o)[0].until, std::nullopt) << text;
  }
}

TEST_F(SqliteOverridesTest, IgnoresAnUntilThatIsNeitherAnIntegerNorNull) {
  for (std::string_view text : {R"([{"limit":"daily","quota":5,"until":"2030-01-01T00:00:00Z"}])",
                                R"([{"limit":"daily","quota":5,"until":1.5}])",
                                R"([{"limit":"daily","quota":5,"until":true}])",
                                R"([{"limit":"daily","quota":5,"until":[1]}])"}) {
    absl::StatusOr<std::vector<Override>> o = Load(text);
    ASSERT_TRUE(o.ok()) << text << ": " << o.status();
    ASSERT_EQ(o->size(), 1u) << text;
    EXPECT_EQ((*o)[0].quota, 5);
    EXPECT_EQ((*o)[0].until, std::nullopt) << text;
  }
}

TEST_F(SqliteOverridesTest, RefusesAColumnThatIsNotAnArray) {
  for (std::string_view text : {R"({"limit":"daily","quota":5})", "[", "null", ""}) {
    absl::StatusOr<std::vector<Override>> o = Load(text);
    EXPECT_EQ(o.status().code(), absl::StatusCode::kDataLoss) << text;
    EXPECT_EQ(o.status().message(),
              absl::StrCat("registry ", path_, ": subject alice: overrides is not a JSON array"))
        << text;
  }
}

TEST_F(SqliteOverridesTest, RefusesAnOverrideWithoutAStringLimitAndAnIntegerQuota) {
  for (std::string_view text :
       {R"([{"limit":"daily"}])", R"([{"quota":5}])", R"([{"limit":1,"quota":5}])",
        R"([{"limit":"daily","quota":"5"}])", R"([{"limit":"daily","quota":5.5}])", R"([5])",
        R"([{"limit":"daily","quota":5},null])"}) {
    absl::StatusOr<std::vector<Override>> o = Load(text);
    EXPECT_EQ(o.status().code(), absl::StatusCode::kDataLoss) << text;
    EXPECT_EQ(o.status().message(), absl::StrCat("registry ", path_,
                                                 ": subject alice: an override is not "
                                                 "{limit, quota, until}"))
        << text;
  }
}

// The Redis record: one JSON object per subject, the overrides an array inside it.
std::string RedisRecordWith(std::string_view overrides) {
  return absl::StrCat(
      R"({"plan":"free","email":"","webhook":"","webhook_secret":"","metadata":"{}",)",
      R"("disabled":false,"overrides":)", ToAbsl(overrides),
      R"(,"created_at":1700000000000000,"updated_at":1700000000000000})");
}

TEST(RedisOverridesTest, WritesUntilOnlyWhenThereIsOne) {
  EXPECT_EQ(redis::SubjectRecord(MakeSubject({{.limit = "daily", .quota = 5, .until = kUntil},
                                              {.limit = "monthly", .quota = -1}})),
            RedisRecordWith(R"([{"limit":"daily","quota":5,"until":1700000123456789},)"
                            R"({"limit":"monthly","quota":-1}])"));
  EXPECT_EQ(redis::SubjectRecord(MakeSubject({})), RedisRecordWith("[]"));
}

TEST(RedisOverridesTest, ReadsAnIntegerOrAbsentUntil) {
  std::optional<Subject> s = redis::ParseSubject(
      "alice", RedisRecordWith(R"([{"limit":"daily","quota":5,"until":1700000123456789},)"
                               R"({"quota":-1,"limit":"monthly"}])"));
  ASSERT_TRUE(s.has_value());
  ASSERT_EQ(s->overrides.size(), 2u);
  EXPECT_EQ(s->overrides[0].limit, "daily");
  EXPECT_EQ(s->overrides[0].quota, 5);
  EXPECT_EQ(s->overrides[0].until, kUntil);
  EXPECT_EQ(s->overrides[1].limit, "monthly");
  EXPECT_EQ(s->overrides[1].quota, -1);
  EXPECT_EQ(s->overrides[1].until, std::nullopt);
  s = redis::ParseSubject("alice", RedisRecordWith("[]"));
  ASSERT_TRUE(s.has_value());
  EXPECT_TRUE(s->overrides.empty());
}

// SQLite files of older builds hold "until":null; Redis records never did, and older builds
// refuse them (which is why no writer writes it).
TEST(RedisOverridesTest, ReadsANullUntilAsNone) {
  std::optional<Subject> s = redis::ParseSubject(
      "alice", RedisRecordWith(R"([{"limit":"daily","quota":5,"until":null}])"));
  ASSERT_TRUE(s.has_value());
  ASSERT_EQ(s->overrides.size(), 1u);
  EXPECT_EQ(s->overrides[0].quota, 5);
  EXPECT_EQ(s->overrides[0].until, std::nullopt);
}

TEST(RedisOverridesTest, RefusesTheRecordForAnUntilThatIsNotAnInteger) {
  for (std::string_view until : {R"("2030-01-01T00:00:00Z")", "1.5", "true", "[1]"}) {
    EXPECT_FALSE(redis::ParseSubject(
                     "alice", RedisRecordWith(absl::StrCat(
                                  R"([{"limit":"daily","quota":5,"until":)", ToAbsl(until), "}]")))
                     .has_value())
        << until;
  }
}

TEST(RedisOverridesTest, RefusesTheRecordForAnOverrideWithoutAStringLimitAndAnIntegerQuota) {
  for (std::string_view overrides :
       {R"([{"limit":"daily"}])", R"([{"quota":5}])", R"([{"limit":1,"quota":5}])",
        R"([{"limit":"daily","quota":"5"}])", R"([{"limit":"daily","quota":5.5}])", R"([5])",
        R"([{"limit":"daily","quota":5},null])", R"({"limit":"daily","quota":5})", "null"}) {
    EXPECT_FALSE(redis::ParseSubject("alice", RedisRecordWith(overrides)).has_value()) << overrides;
  }
}

}  // namespace
}  // namespace sluice::registry
