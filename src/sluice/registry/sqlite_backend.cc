#include "sluice/registry/sqlite_backend.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <filesystem>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "sluice/common/log.h"
#include "sluice/common/strings.h"
#include "sluice/registry/record_codec.h"

namespace sluice::registry {
namespace {

constexpr absl::Duration kIdempotencyTtl = absl::Hours(24);
constexpr absl::Duration kPurgeEvery = absl::Minutes(1);

// Both tables are kept in key order (WITHOUT ROWID): the load reads subjects by id and keys by
// subject without sorting, which is the order Index::Replace takes fastest.
constexpr const char* kSchema = R"sql(
CREATE TABLE subjects (
  id TEXT PRIMARY KEY NOT NULL,
  plan TEXT NOT NULL,
  email TEXT NOT NULL,
  webhook TEXT NOT NULL,
  webhook_secret TEXT NOT NULL,
  metadata TEXT NOT NULL,
  disabled INTEGER NOT NULL,
  overrides TEXT NOT NULL,   -- [{"limit": "daily", "quota": 5, "until": <us> or null}]
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE keys (
  id INTEGER NOT NULL UNIQUE,   -- the uint64 id as a signed 64-bit integer
  digest BLOB NOT NULL UNIQUE,  -- 32 bytes
  subject TEXT NOT NULL REFERENCES subjects (id) ON DELETE CASCADE,
  prefix TEXT NOT NULL,
  name TEXT NOT NULL,
  expires_at INTEGER,           -- null: never
  created_at INTEGER NOT NULL,
  PRIMARY KEY (subject, id)
) WITHOUT ROWID;
CREATE TABLE idempotency (
  key TEXT PRIMARY KEY NOT NULL,
  fingerprint TEXT NOT NULL,
  key_id INTEGER NOT NULL,
  created_at INTEGER NOT NULL
);
CREATE INDEX idempotency_by_age ON idempotency (created_at);
)sql";

// Schema version 2: the credit ledger. A grant's idempotency key is kept with it (for as long as
// its subject), so a retried grant is never applied twice; a subject's credits are the balance of
// its last grant.
constexpr const char* kCreditsSchema = R"sql(
CREATE TABLE credit_grants (
  subject TEXT NOT NULL REFERENCES subjects (id) ON DELETE CASCADE,
  seq INTEGER NOT NULL,
  at INTEGER NOT NULL,
  amount INTEGER NOT NULL,
  reason TEXT NOT NULL,
  actor TEXT NOT NULL,
  balance INTEGER NOT NULL,
  idempotency_key TEXT NOT NULL,
  fingerprint TEXT NOT NULL,
  PRIMARY KEY (subject, seq),
  UNIQUE (subject, idempotency_key)
) WITHOUT ROWID;
)sql";

int64_t Micros(absl::Time t) { return absl::ToUnixMicros(t); }
absl::Time FromMicros(int64_t us) { return absl::FromUnixMicros(us); }
int64_t AsSigned(uint64_t id) { return static_cast<int64_t>(id); }
uint64_t AsUnsigned(int64_t id) { return static_cast<uint64_t>(id); }

// A prepared statement, reset after every use.
class Stmt {
 public:
  Stmt() = default;
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  ~Stmt() { sqlite3_finalize(stmt_); }

  int Prepare(sqlite3* db, const char* sql) {
    return sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &stmt_, nullptr);
  }
  Stmt& Bind(int i, int64_t v) {
    sqlite3_bind_int64(stmt_, i, v);
    return *this;
  }
  Stmt& Bind(int i, std::string_view v) {
    sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& Bind(int i, const Digest& d) {
    sqlite3_bind_blob(stmt_, i, d.data(), static_cast<int>(d.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& BindNull(int i) {
    sqlite3_bind_null(stmt_, i);
    return *this;
  }
  // SQLITE_ROW, SQLITE_DONE or an error.
  int Step() { return sqlite3_step(stmt_); }
  void Reset() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
  int64_t Int(int col) const { return sqlite3_column_int64(stmt_, col); }
  bool IsNull(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }
  std::string_view Text(int col) const {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, col));
    return p == nullptr
               ? std::string_view()
               : std::string_view(p, static_cast<size_t>(sqlite3_column_bytes(stmt_, col)));
  }
  std::optional<Digest> Blob(int col) const {
    const void* p = sqlite3_column_blob(stmt_, col);
    Digest d{};
    if (p == nullptr || sqlite3_column_bytes(stmt_, col) != static_cast<int>(d.size())) {
      return std::nullopt;
    }
    std::memcpy(d.data(), p, d.size());
    return d;
  }

 private:
  sqlite3_stmt* stmt_ = nullptr;
};

// Resets a statement when the scope ends, whatever path leaves it.
class Resetting {
 public:
  explicit Resetting(Stmt& s) : s_(s) {}
  ~Resetting() { s_.Reset(); }
  Resetting(const Resetting&) = delete;
  Resetting& operator=(const Resetting&) = delete;

 private:
  Stmt& s_;
};

absl::Status ErrnoError(int error, std::string_view what, const std::string& path) {
  const std::string text =
      absl::StrCat(ToAbsl(what), " ", path, ": ", std::generic_category().message(error));
  return error == EACCES || error == EPERM ? absl::PermissionDeniedError(text)
                                           : absl::InternalError(text);
}

// The single-writer lock: an exclusive flock on "<path>.lock", holding the owner's pid for the
// message another process gets (as the memory store's snapshot lock does).
absl::StatusOr<int> AcquireLock(const std::string& path) {
  const std::string lock_path = absl::StrCat(path, ".lock");
  const int fd =
      ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600);
  if (fd < 0) return ErrnoError(errno, "cannot create lock file", lock_path);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat("lock file ", lock_path, " is not a regular file"));
  }
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    if (error == EINTR) continue;
    if (error != EWOULDBLOCK) {
      ::close(fd);
      return ErrnoError(error, "cannot lock", lock_path);
    }
    char buffer[32] = {};
    const ssize_t n = ::pread(fd, buffer, sizeof(buffer) - 1, 0);
    ::close(fd);
    int pid = 0;
    const bool known =
        n > 0 && absl::SimpleAtoi(absl::StripAsciiWhitespace(absl::string_view(buffer, n)), &pid);
    return absl::FailedPreconditionError(
        absl::StrCat("registry ", path, " is in use by another process (",
                     known ? absl::StrCat("pid ", pid, " holds ") : std::string("lock "), lock_path,
                     known ? "" : " is held", ")"));
  }
  const std::string pid = absl::StrCat(::getpid(), "\n");
  if (::ftruncate(fd, 0) == 0) {
    [[maybe_unused]] const ssize_t written = ::pwrite(fd, pid.data(), pid.size(), 0);
  }
  return fd;
}

// NotFound if nothing is at `path`; FailedPrecondition if an empty file is. SQLite would take an
// empty file for a new database, and a registry truncated to nothing (a full disk, a bad
// restore) would start as an empty one: every key refused, without a word.
absl::Status CheckNotEmpty(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    const int error = errno;
    if (error == ENOENT) {
      return absl::NotFoundError(absl::StrCat("registry ", path, ": no such file"));
    }
    return ErrnoError(error, "cannot read registry", path);
  }
  if (S_ISREG(st.st_mode) && st.st_size == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "registry ", path,
        " is empty (0 bytes), not a registry: restore it from a backup, or remove it to start with "
        "an empty registry"));
  }
  return absl::OkStatus();
}

// FailedPrecondition if "<path>-wal" is there without its database: the registry was removed
// (or moved) without its write-ahead log, which holds its latest changes; SQLite would replay it
// onto a new file.
absl::Status CheckNoOrphanLog(const std::string& path) {
  const std::string wal = absl::StrCat(path, "-wal");
  struct stat st {};
  if (::lstat(wal.c_str(), &st) != 0) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("registry ", path, " does not exist but its write-ahead log ", wal,
                   " does: restore the registry beside it, or remove ", wal, " (and ", path,
                   "-shm) to start with an empty registry"));
}

// Syncs the directory that holds `path`, so that a rename into it survives a power loss.
absl::Status SyncDirectory(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const std::string dir = parent.empty() ? std::string(".") : parent.string();
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoError(errno, "cannot open directory", dir);
  const int rc = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  return rc == 0 ? absl::OkStatus() : ErrnoError(error, "cannot sync directory", dir);
}

// Writes a new registry at `path`, where no file is: built in "<path>.new" and renamed into
// place, so that `path` is never a database without its schema (a crash leaves no file, or a
// whole registry). Only then may an empty file, or a database without sluice's tables, be taken
// for damage and refused. REQUIRES: the registry's lock is held (the ".new" file is its own).
absl::Status CreateDatabase(const std::string& path) {
  const std::string temp = absl::StrCat(path, ".new");
  // A crash during an earlier creation may have left one, with its rollback journal.
  for (const std::string& stale : {temp, absl::StrCat(temp, "-journal")}) {
    if (::unlink(stale.c_str()) != 0 && errno != ENOENT) {
      return ErrnoError(errno, "cannot remove", stale);
    }
  }
  // Private from its first byte, whatever the umask: it holds webhook secrets, customers'
  // addresses and key digests (SQLite gives its journal, -wal and -shm the main file's mode).
  const int created =
      ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (created < 0) return ErrnoError(errno, "cannot create", temp);
  ::close(created);
  const auto failed = [&temp](absl::Status s) {
    ::unlink(temp.c_str());
    return s;
  };
  sqlite3* db = nullptr;
  const int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW;
  if (sqlite3_open_v2(temp.c_str(), &db, flags, nullptr) != SQLITE_OK) {
    const std::string error = db != nullptr ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close_v2(db);
    return failed(
        absl::UnavailableError(absl::StrCat("registry ", temp, ": cannot open: ", error)));
  }
  // A rollback journal (SQLite's default) and synchronous=FULL: the commit is on disk when it
  // returns, and the journal is gone. Open switches the file to WAL.
  const std::string create =
      absl::StrCat("PRAGMA synchronous = FULL; BEGIN IMMEDIATE;", kSchema, kCreditsSchema,
                   "PRAGMA user_version = ", SqliteBackend::kSchemaVersion, "; COMMIT;");
  char* error = nullptr;
  if (sqlite3_exec(db, create.c_str(), nullptr, nullptr, &error) != SQLITE_OK) {
    absl::Status s = absl::UnavailableError(absl::StrCat(
        "registry ", temp, ": cannot create the schema: ", error == nullptr ? "error" : error));
    sqlite3_free(error);
    sqlite3_close_v2(db);
    return failed(std::move(s));
  }
  if (sqlite3_close(db) != SQLITE_OK) {
    sqlite3_close_v2(db);
    return failed(absl::UnavailableError(absl::StrCat("registry ", temp, ": cannot close")));
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int rename_error = errno;
    return failed(ErrnoError(rename_error, absl::StrCat("cannot rename ", temp, " to"), path));
  }
  return SyncDirectory(path);
}

}  // namespace

struct SqliteBackend::State {
  Options options;
  SystemClock system_clock;
  const Clock* clock = nullptr;
  int lock_fd = -1;
  sqlite3* db = nullptr;
  Index* index = nullptr;

  Stmt begin, commit, rollback;
  Stmt subject_created, upsert_subject, delete_subject;
  Stmt subject_key_count, digest_taken, key_id_taken, insert_key, delete_key;
  Stmt find_idempotency, insert_idempotency, purge_idempotency;
  Stmt find_grant, last_grant, insert_grant, read_grants;
  absl::Time last_purge = absl::InfinitePast();
  bool has_credits = false;  // the file has the credit ledger (schema version 2)

  // A change, or a read of the ledger (`read` set: runs on the writer thread, which owns `db`).
  struct Item {
    Change change;
    ChangeCallback done;
    absl::AnyInvocable<void() &&> read;
  };
  mutable std::mutex mu;
  std::condition_variable wake;
  std::deque<Item> queue;              // guarded by mu; at most options.queue_limit
  std::deque<ChangeCallback> refused;  // guarded by mu; answered by the writer first
  bool stopping = false;               // guarded by mu
  bool started = false;                // guarded by mu
  std::thread writer;
  std::atomic<uint64_t> queue_full{0};
  std::atomic<uint64_t> failed{0};

  ~State() {
    if (db != nullptr) sqlite3_close_v2(db);
    if (lock_fd >= 0) ::close(lock_fd);  // releases the lock
  }

  absl::Status DbError(std::string_view what) const {
    return absl::UnavailableError(
        absl::StrCat("registry ", options.path, ": ", ToAbsl(what), ": ", sqlite3_errmsg(db)));
  }

  // The schema version of the open file. FailedPrecondition if it is no SQLite database or a
  // newer sluice wrote it.
  absl::StatusOr<int> SchemaVersion() {
    Stmt user_version;
    int rc = user_version.Prepare(db, "PRAGMA user_version");
    if (rc == SQLITE_OK) rc = user_version.Step();  // the first read: a non-database fails here
    if (rc != SQLITE_ROW) {
      if ((rc & 0xff) == SQLITE_NOTADB) {
        return absl::FailedPreconditionError(
            absl::StrCat("registry ", options.path, " is not an SQLite database"));
      }
      return DbError("cannot read the schema version");
    }
    const int64_t version = user_version.Int(0);
    if (version > kSchemaVersion) {
      return absl::FailedPreconditionError(absl::StrCat(
          "registry ", options.path, " has schema version ", version, "; this sluice knows ",
          kSchemaVersion, " (a newer sluice wrote it: upgrade, or use another file)"));
    }
    return static_cast<int>(version);
  }

  // FailedPrecondition unless the open file holds sluice's registry: a version and its tables.
  // Another program's database (or the wrong path) is never taken for an empty registry, nor
  // written to.
  absl::Status CheckIsRegistry(int version) {
    int64_t tables = 0;
    if (version > 0) {
      Stmt count;
      if (count.Prepare(db,
                        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND "
                        "name IN ('subjects', 'keys', 'idempotency')") != SQLITE_OK ||
          count.Step() != SQLITE_ROW) {
        return DbError("cannot read the schema");
      }
      tables = count.Int(0);
    }
    if (tables == 3) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(
        "registry ", options.path,
        " is an SQLite database without sluice's registry in it (another program's database, or "
        "the wrong path)"));
  }

  absl::Status Exec(const char* sql) {
    char* error = nullptr;
    if (sqlite3_exec(db, sql, nullptr, nullptr, &error) != SQLITE_OK) {
      absl::Status s = absl::UnavailableError(
          absl::StrCat("registry ", options.path, ": ", error == nullptr ? "error" : error));
      sqlite3_free(error);
      return s;
    }
    return absl::OkStatus();
  }

  absl::Status Prepare() {
    struct {
      Stmt* stmt;
      const char* sql;
    } const all[] = {
        {&begin, "BEGIN IMMEDIATE"},
        {&commit, "COMMIT"},
        {&rollback, "ROLLBACK"},
        {&subject_created, "SELECT created_at FROM subjects WHERE id = ?1"},
        {&upsert_subject,
         "INSERT INTO subjects (id, plan, email, webhook, webhook_secret, metadata, disabled, "
         "overrides, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) "
         "ON CONFLICT (id) DO UPDATE SET plan = ?2, email = ?3, webhook = ?4, "
         "webhook_secret = ?5, metadata = ?6, disabled = ?7, overrides = ?8, updated_at = ?10"},
        {&delete_subject, "DELETE FROM subjects WHERE id = ?1"},
        {&subject_key_count, "SELECT count(*) FROM keys WHERE subject = ?1"},
        {&digest_taken, "SELECT 1 FROM keys WHERE digest = ?1"},
        {&key_id_taken, "SELECT 1 FROM keys WHERE id = ?1"},
        {&insert_key,
         "INSERT INTO keys (id, digest, subject, prefix, name, expires_at, created_at) "
         "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"},
        {&delete_key, "DELETE FROM keys WHERE id = ?1"},
        {&find_idempotency, "SELECT fingerprint, key_id FROM idempotency WHERE key = ?1"},
        {&insert_idempotency,
         "INSERT INTO idempotency (key, fingerprint, key_id, created_at) VALUES (?1, ?2, ?3, ?4)"},
        {&purge_idempotency, "DELETE FROM idempotency WHERE created_at < ?1"},
        {&find_grant,
         "SELECT fingerprint, seq, at, amount, reason, actor, balance FROM credit_grants "
         "WHERE subject = ?1 AND idempotency_key = ?2"},
        {&last_grant,
         "SELECT seq, balance FROM credit_grants WHERE subject = ?1 ORDER BY seq DESC LIMIT 1"},
        {&insert_grant,
         "INSERT INTO credit_grants (subject, seq, at, amount, reason, actor, balance, "
         "idempotency_key, fingerprint) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"},
        {&read_grants,
         "SELECT seq, at, amount, reason, actor, balance FROM credit_grants "
         "WHERE subject = ?1 AND seq < ?2 ORDER BY seq DESC LIMIT ?3"},
    };
    for (const auto& [stmt, sql] : all) {
      if (stmt->Prepare(db, sql) != SQLITE_OK) return DbError("cannot prepare a statement");
    }
    return absl::OkStatus();
  }

  // A step that must finish (no row): SQLITE_DONE, else the error.
  absl::Status Run(Stmt& stmt, std::string_view what) {
    Resetting reset(stmt);
    return stmt.Step() == SQLITE_DONE ? absl::OkStatus() : DbError(what);
  }

  // Performs `change` in one transaction; on any error nothing is left of it.
  absl::StatusOr<ChangeResult> Perform(Change& change) {
    if (absl::Status s = Run(begin, "cannot begin a transaction"); !s.ok()) return s;
    absl::StatusOr<ChangeResult> result = PerformInTransaction(change);
    if (!result.ok() || result->replayed) {
      [[maybe_unused]] absl::Status s = Run(rollback, "rollback");
      return result;
    }
    if (absl::Status s = Run(commit, "cannot commit"); !s.ok()) {
      if (!sqlite3_get_autocommit(db)) [[maybe_unused]]
        absl::Status r = Run(rollback, "rollback");
      return s;
    }
    return result;
  }

  absl::StatusOr<ChangeResult> PerformInTransaction(Change& change) {
    ChangeResult result;
    switch (change.kind) {
      case Change::Kind::kPutSubject: {
        Subject& s = change.subject;
        {
          Resetting reset(subject_created);
          const int rc = subject_created.Bind(1, s.id).Step();
          if (rc == SQLITE_ROW) {
            s.created_at = FromMicros(subject_created.Int(0));  // a replacement keeps it
          } else if (rc == SQLITE_DONE) {
            result.created = true;
          } else {
            return DbError("cannot read a subject");
          }
        }
        {
          // The credits are the ledger's, whatever the change says (a replacement keeps them).
          Resetting reset(last_grant);
          const int rc = last_grant.Bind(1, s.id).Step();
          if (rc != SQLITE_ROW && rc != SQLITE_DONE) return DbError("cannot read the ledger");
          s.credits = rc == SQLITE_ROW ? last_grant.Int(1) : 0;
        }
        upsert_subject.Bind(1, s.id)
            .Bind(2, s.plan)
            .Bind(3, s.email)
            .Bind(4, s.webhook)
            .Bind(5, s.webhook_secret)
            .Bind(6, s.metadata)
            .Bind(7, int64_t{s.disabled})
            .Bind(8, OverridesText(s.overrides))
            .Bind(9, Micros(s.created_at))
            .Bind(10, Micros(s.updated_at));
        if (absl::Status st = Run(upsert_subject, "cannot write a subject"); !st.ok()) return st;
        return result;
      }
      case Change::Kind::kDeleteSubject: {
        delete_subject.Bind(1, change.subject_id);
        if (absl::Status st = Run(delete_subject, "cannot delete a subject"); !st.ok()) return st;
        if (sqlite3_changes(db) == 0) return absl::NotFoundError("no such subject");
        return result;
      }
      case Change::Kind::kAddKey:
        return AddKey(change);
      case Change::Kind::kGrantCredits:
        return GrantCredits(change);
      case Change::Kind::kRevokeKey: {
        delete_key.Bind(1, AsSigned(change.key_id));
        if (absl::Status st = Run(delete_key, "cannot delete a key"); !st.ok()) return st;
        if (sqlite3_changes(db) == 0) return absl::NotFoundError("no such key");
        return result;
      }
    }
    return absl::InternalError("unknown change kind");
  }

  // Reads the grant of `find_grant`'s current row.
  static CreditGrant GrantAt(const Stmt& row, int first) {
    return CreditGrant{.seq = row.Int(first),
                       .amount = row.Int(first + 2),
                       .reason = std::string(row.Text(first + 3)),
                       .actor = std::string(row.Text(first + 4)),
                       .at = FromMicros(row.Int(first + 1)),
                       .balance = row.Int(first + 5)};
  }

  absl::StatusOr<ChangeResult> GrantCredits(Change& change) {
    ChangeResult result;
    const std::string& subject = change.subject_id;
    {
      Resetting reset(find_grant);
      const int rc = find_grant.Bind(1, subject).Bind(2, change.idempotency_key).Step();
      if (rc == SQLITE_ROW) {
        if (find_grant.Text(0) != change.fingerprint) {
          return absl::FailedPreconditionError("idempotency key reused for a different request");
        }
        result.replayed = true;
        result.grant = GrantAt(find_grant, 1);
        return result;
      }
      if (rc != SQLITE_DONE) return DbError("cannot read the credit ledger");
    }
    {
      Resetting reset(subject_created);
      const int rc = subject_created.Bind(1, subject).Step();
      if (rc == SQLITE_DONE) return absl::NotFoundError("no such subject");
      if (rc != SQLITE_ROW) return DbError("cannot read a subject");
    }
    int64_t seq = 0;
    int64_t balance = 0;
    {
      Resetting reset(last_grant);
      const int rc = last_grant.Bind(1, subject).Step();
      if (rc == SQLITE_ROW) {
        seq = last_grant.Int(0);
        balance = last_grant.Int(1);
      } else if (rc != SQLITE_DONE) {
        return DbError("cannot read the credit ledger");
      }
    }
    CreditGrant& g = change.grant;
    if (g.amount > kMaxCredits - balance) {
      return absl::OutOfRangeError(absl::StrCat("the credits would exceed ", kMaxCredits));
    }
    if (seq >= kMaxCreditGrants) {
      return absl::OutOfRangeError(
          absl::StrCat("a subject has at most ", kMaxCreditGrants, " grants"));
    }
    g.seq = seq + 1;
    g.balance = balance + g.amount;
    insert_grant.Bind(1, subject)
        .Bind(2, g.seq)
        .Bind(3, Micros(g.at))
        .Bind(4, g.amount)
        .Bind(5, g.reason)
        .Bind(6, g.actor)
        .Bind(7, g.balance)
        .Bind(8, change.idempotency_key)
        .Bind(9, change.fingerprint);
    if (absl::Status s = Run(insert_grant, "cannot write a grant"); !s.ok()) return s;
    result.grant = g;
    return result;
  }

  absl::StatusOr<CreditPage> ReadGrants(const std::string& subject, int64_t before, size_t limit) {
    {
      Resetting reset(subject_created);
      const int rc = subject_created.Bind(1, subject).Step();
      if (rc == SQLITE_DONE) return absl::NotFoundError("no such subject");
      if (rc != SQLITE_ROW) return DbError("cannot read a subject");
    }
    CreditPage page;
    Resetting reset(read_grants);
    read_grants.Bind(1, subject)
        .Bind(2, before > 0 ? before : std::numeric_limits<int64_t>::max())
        .Bind(3, static_cast<int64_t>(limit) + 1);
    int rc = SQLITE_OK;
    while ((rc = read_grants.Step()) == SQLITE_ROW) {
      if (page.grants.size() == limit) {
        page.next_before = page.grants.back().seq;
        break;
      }
      page.grants.push_back(GrantAt(read_grants, 0));
    }
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return DbError("cannot read the credit ledger");
    return page;
  }

  absl::StatusOr<ChangeResult> AddKey(Change& change) {
    ChangeResult result;
    const Key& key = change.key;
    const absl::Time now = clock->Now();
    if (now - last_purge >= kPurgeEvery) {
      purge_idempotency.Bind(1, Micros(now - kIdempotencyTtl));
      if (absl::Status s = Run(purge_idempotency, "cannot purge idempotency records"); !s.ok()) {
        return s;
      }
      last_purge = now;
    }
    if (!change.idempotency_key.empty()) {
      Resetting reset(find_idempotency);
      const int rc = find_idempotency.Bind(1, change.idempotency_key).Step();
      if (rc == SQLITE_ROW) {
        if (find_idempotency.Text(0) != change.fingerprint) {
          return absl::FailedPreconditionError("idempotency key reused for a different request");
        }
        result.replayed = true;
        result.key_id = AsUnsigned(find_idempotency.Int(1));
        return result;
      }
      if (rc != SQLITE_DONE) return DbError("cannot read idempotency records");
    }
    {
      Resetting reset(subject_created);
      const int rc = subject_created.Bind(1, key.subject).Step();
      if (rc == SQLITE_DONE) return absl::NotFoundError("no such subject");
      if (rc != SQLITE_ROW) return DbError("cannot read a subject");
    }
    {
      Resetting reset(subject_key_count);
      if (subject_key_count.Bind(1, key.subject).Step() != SQLITE_ROW) {
        return DbError("cannot count keys");
      }
      if (subject_key_count.Int(0) >= static_cast<int64_t>(kMaxKeysPerSubject)) {
        return absl::ResourceExhaustedError(
            absl::StrCat("a subject has at most ", kMaxKeysPerSubject, " keys"));
      }
    }
    {
      Resetting reset(digest_taken);
      const int rc = digest_taken.Bind(1, key.digest).Step();
      if (rc == SQLITE_ROW) return absl::AlreadyExistsError("a key with this digest exists");
      if (rc != SQLITE_DONE) return DbError("cannot read keys");
    }
    {
      Resetting reset(key_id_taken);
      const int rc = key_id_taken.Bind(1, AsSigned(key.id)).Step();
      if (rc == SQLITE_ROW) return absl::AlreadyExistsError("a key with this id exists");
      if (rc != SQLITE_DONE) return DbError("cannot read keys");
    }
    insert_key.Bind(1, AsSigned(key.id))
        .Bind(2, key.digest)
        .Bind(3, key.subject)
        .Bind(4, key.prefix)
        .Bind(5, key.name)
        .Bind(7, Micros(key.created_at));
    if (key.expires_at) {
      insert_key.Bind(6, Micros(*key.expires_at));
    } else {
      insert_key.BindNull(6);
    }
    if (absl::Status s = Run(insert_key, "cannot write a key"); !s.ok()) return s;
    if (!change.idempotency_key.empty()) {
      insert_idempotency.Bind(1, change.idempotency_key)
          .Bind(2, change.fingerprint)
          .Bind(3, AsSigned(key.id))
          .Bind(4, Micros(now));
      if (absl::Status s = Run(insert_idempotency, "cannot write an idempotency record"); !s.ok()) {
        return s;
      }
    }
    result.key_id = key.id;
    return result;
  }

  void ApplyToIndex(Change& change) {
    switch (change.kind) {
      case Change::Kind::kPutSubject:
        index->PutSubject(std::move(change.subject));
        break;
      case Change::Kind::kDeleteSubject:
        index->DeleteSubject(change.subject_id);
        break;
      case Change::Kind::kAddKey:
        index->AddKey(std::move(change.key));
        break;
      case Change::Kind::kRevokeKey:
        index->RevokeKey(change.key_id);
        break;
      case Change::Kind::kGrantCredits:
        if (std::shared_ptr<const Subject> s = index->FindSubject(change.subject_id)) {
          Subject updated = *s;
          updated.credits = change.grant.balance;
          index->PutSubject(std::move(updated));
        }
        break;
    }
  }

  absl::Status Load() {
    std::vector<Subject> subjects;
    std::vector<Key> keys;
    Stmt read_subjects;
    Stmt read_keys;
    if (read_subjects.Prepare(
            db,
            "SELECT id, plan, email, webhook, webhook_secret, metadata, "
            "disabled, overrides, created_at, updated_at FROM subjects ORDER BY id") != SQLITE_OK ||
        read_keys.Prepare(db,
                          "SELECT id, digest, subject, prefix, name, expires_at, created_at "
                          "FROM keys ORDER BY subject, id") != SQLITE_OK) {
      return DbError("cannot prepare the load");
    }
    if (absl::Status s = Exec("BEGIN"); !s.ok()) return s;  // one consistent read
    int rc = SQLITE_OK;
    while ((rc = read_subjects.Step()) == SQLITE_ROW) {
      Subject& s = subjects.emplace_back();
      s.id = read_subjects.Text(0);
      s.plan = read_subjects.Text(1);
      s.email = read_subjects.Text(2);
      s.webhook = read_subjects.Text(3);
      s.webhook_secret = read_subjects.Text(4);
      s.metadata = read_subjects.Text(5);
      s.disabled = read_subjects.Int(6) != 0;
      const std::string_view overrides = read_subjects.Text(7);
      if (overrides != "[]") {
        // An "until" no sluice writes has always been read as no end here.
        absl::StatusOr<std::vector<Override>> parsed =
            ParseOverridesText(overrides, {.bad_until = BadUntil::kIgnore});
        if (!parsed.ok()) {
          [[maybe_unused]] absl::Status r = Exec("ROLLBACK");
          return absl::DataLossError(absl::StrCat("registry ", options.path, ": subject ", s.id,
                                                  ": ", parsed.status().message()));
        }
        s.overrides = *std::move(parsed);
      }
      s.created_at = FromMicros(read_subjects.Int(8));
      s.updated_at = FromMicros(read_subjects.Int(9));
    }
    if (rc == SQLITE_DONE) {
      while ((rc = read_keys.Step()) == SQLITE_ROW) {
        Key& k = keys.emplace_back();
        k.id = AsUnsigned(read_keys.Int(0));
        const std::optional<Digest> digest = read_keys.Blob(1);
        if (!digest) {
          [[maybe_unused]] absl::Status r = Exec("ROLLBACK");
          return absl::DataLossError(absl::StrCat("registry ", options.path, ": key ",
                                                  KeyIdText(k.id), " has no 32-byte digest"));
        }
        k.digest = *digest;
        k.subject = read_keys.Text(2);
        k.prefix = read_keys.Text(3);
        k.name = read_keys.Text(4);
        if (!read_keys.IsNull(5)) k.expires_at = FromMicros(read_keys.Int(5));
        k.created_at = FromMicros(read_keys.Int(6));
      }
    }
    if (rc == SQLITE_DONE && has_credits) rc = LoadCredits(subjects);
    const absl::Status read = rc == SQLITE_DONE ? absl::OkStatus() : DbError("cannot load");
    [[maybe_unused]] absl::Status r = Exec("COMMIT");
    if (!read.ok()) return read;
    index->Replace(std::move(subjects), std::move(keys));
    return absl::OkStatus();
  }

  // Sets each subject's credits to the balance of its last grant. `subjects` is sorted by id, as
  // are the totals read. SQLITE_DONE, or the error.
  int LoadCredits(std::vector<Subject>& subjects) {
    Stmt totals;
    if (totals.Prepare(db,
                       "SELECT subject, max(seq), balance FROM credit_grants GROUP BY subject "
                       "ORDER BY subject") != SQLITE_OK) {
      return SQLITE_ERROR;
    }
    int rc = SQLITE_OK;
    auto next = subjects.begin();
    while ((rc = totals.Step()) == SQLITE_ROW) {
      const std::string_view id = totals.Text(0);
      while (next != subjects.end() && next->id < id) ++next;
      if (next != subjects.end() && next->id == id) next->credits = totals.Int(2);
    }
    return rc;
  }

  // One debug line per write: the change's kind and the record it names (a subject id or a key
  // id, never a key, digest, secret or webhook), its outcome and duration.
  static void LogWrite(const Change& change, const absl::StatusOr<ChangeResult>& result,
                       absl::Duration took) {
    if (!LogEnabled(LogLevel::kDebug)) return;
    Log line(LogLevel::kDebug, "registry write");
    switch (change.kind) {
      case Change::Kind::kPutSubject:
        line.Str("change", "put_subject").Str("subject", change.subject.id);
        break;
      case Change::Kind::kDeleteSubject:
        line.Str("change", "delete_subject").Str("subject", change.subject_id);
        break;
      case Change::Kind::kAddKey:
        line.Str("change", "add_key")
            .Str("subject", change.key.subject)
            .Str("key_id", KeyIdText(change.key.id));
        break;
      case Change::Kind::kRevokeKey:
        line.Str("change", "revoke_key").Str("key_id", KeyIdText(change.key_id));
        break;
      case Change::Kind::kGrantCredits:
        line.Str("change", "grant_credits").Str("subject", change.subject_id);
        break;
    }
    line.Str("backend", "sqlite").Double("ms", absl::ToDoubleMilliseconds(took));
    if (result.ok()) {
      line.Bool("ok", true).Bool("replayed", result->replayed);
    } else {
      line.Bool("ok", false).Error(result.status());
    }
  }

  void WriterLoop() {
    std::unique_lock lock(mu);
    for (;;) {
      wake.wait(lock, [&] { return stopping || !queue.empty() || !refused.empty(); });
      while (!refused.empty()) {
        ChangeCallback done = std::move(refused.front());
        refused.pop_front();
        lock.unlock();
        std::move(done)(absl::UnavailableError("registry write queue full"));
        lock.lock();
      }
      if (queue.empty()) {
        if (stopping) return;
        continue;
      }
      Item item = std::move(queue.front());
      queue.pop_front();
      lock.unlock();
      if (item.read) {
        std::move(item.read)();
        lock.lock();
        continue;
      }
      const absl::Time write_start = absl::Now();
      absl::StatusOr<ChangeResult> result = Perform(item.change);
      LogWrite(item.change, result, absl::Now() - write_start);
      if (result.ok() && !result->replayed) {
        ApplyToIndex(item.change);
      } else if (!result.ok() && absl::IsUnavailable(result.status())) {
        failed.fetch_add(1, std::memory_order_relaxed);
      }
      std::move(item.done)(std::move(result));
      lock.lock();
    }
  }
};

SqliteBackend::SqliteBackend(std::unique_ptr<State> state) : state_(std::move(state)) {}

SqliteBackend::~SqliteBackend() { Stop(); }

absl::StatusOr<std::unique_ptr<SqliteBackend>> SqliteBackend::Open(Options options) {
  auto state = std::make_unique<State>();
  state->options = std::move(options);
  state->clock = state->options.clock != nullptr ? state->options.clock : &state->system_clock;
  const std::string& path = state->options.path;
  if (path.empty()) return absl::InvalidArgumentError("registry path is empty");
  const bool in_memory = path == ":memory:";
  if (!in_memory) {
    absl::StatusOr<int> fd = AcquireLock(path);
    if (!fd.ok()) return fd.status();
    state->lock_fd = *fd;
    // A database is created only where no file is; whatever is there is a registry or refused.
    if (absl::Status present = CheckNotEmpty(path); absl::IsNotFound(present)) {
      if (absl::Status s = CheckNoOrphanLog(path); !s.ok()) return s;
      if (absl::Status s = CreateDatabase(path); !s.ok()) return s;
    } else if (!present.ok()) {
      return present;
    }
  }
  int flags =
      SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW | SQLITE_OPEN_EXRESCODE;
  if (in_memory) flags |= SQLITE_OPEN_CREATE;
  if (sqlite3_open_v2(path.c_str(), &state->db, flags, nullptr) != SQLITE_OK) {
    return absl::UnavailableError(absl::StrCat(
        "registry ", path,
        ": cannot open: ", state->db != nullptr ? sqlite3_errmsg(state->db) : "out of memory"));
  }
  // SQLite opens a file it may not write read-only without a word; every change would then fail
  // while the server looked ready.
  if (sqlite3_db_readonly(state->db, "main") == 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("registry ", path,
                     ": the file is not writable by this process (check its owner and mode)"));
  }
  sqlite3_extended_result_codes(state->db, 1);
  absl::StatusOr<int> version = state->SchemaVersion();
  if (!version.ok()) return version.status();
  // Checked before anything is written: a file that is not a registry is left as it was.
  if (!in_memory) {
    if (absl::Status s = state->CheckIsRegistry(*version); !s.ok()) return s;
  }
  for (const char* pragma : {"PRAGMA journal_mode = WAL", "PRAGMA synchronous = FULL",
                             "PRAGMA foreign_keys = ON", "PRAGMA busy_timeout = 5000"}) {
    if (absl::Status s = state->Exec(pragma); !s.ok()) return s;
  }
  if (in_memory) {
    const std::string create = absl::StrCat("BEGIN IMMEDIATE;", kSchema, kCreditsSchema,
                                            "PRAGMA user_version = ", kSchemaVersion, "; COMMIT;");
    if (absl::Status s = state->Exec(create.c_str()); !s.ok()) {
      [[maybe_unused]] absl::Status r = state->Exec("ROLLBACK");
      return s;
    }
  }
  if (!in_memory && *version == 1) {
    // A registry of an earlier sluice: the ledger is added, in one transaction (a sluice that
    // only knows version 1 then refuses the file rather than lose the credits).
    const std::string upgrade = absl::StrCat("BEGIN IMMEDIATE;", kCreditsSchema,
                                             "PRAGMA user_version = ", kSchemaVersion, "; COMMIT;");
    if (absl::Status s = state->Exec(upgrade.c_str()); !s.ok()) {
      [[maybe_unused]] absl::Status r = state->Exec("ROLLBACK");
      return s;
    }
  }
  state->has_credits = true;
  if (absl::Status s = state->Prepare(); !s.ok()) return s;
  return std::make_unique<SqliteBackend>(std::move(state));
}

absl::Status SqliteBackend::ReadInto(const std::string& path, Index* index) {
  if (absl::Status s = CheckNotEmpty(path); !s.ok()) return s;
  State state;
  state.options.path = path;
  state.index = index;
  const int flags =
      SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW | SQLITE_OPEN_EXRESCODE;
  if (sqlite3_open_v2(path.c_str(), &state.db, flags, nullptr) != SQLITE_OK) {
    return absl::UnavailableError(absl::StrCat(
        "registry ", path,
        ": cannot open: ", state.db != nullptr ? sqlite3_errmsg(state.db) : "out of memory"));
  }
  absl::StatusOr<int> version = state.SchemaVersion();
  if (!version.ok()) return version.status();
  if (absl::Status s = state.CheckIsRegistry(*version); !s.ok()) return s;
  state.has_credits = *version >= 2;
  return state.Load();
}

absl::Status SqliteBackend::Start(Index* index) {
  State& st = *state_;
  {
    std::lock_guard lock(st.mu);
    if (st.started) return absl::FailedPreconditionError("registry already started");
  }
  st.index = index;
  if (absl::Status s = st.Load(); !s.ok()) return s;
  std::lock_guard lock(st.mu);
  st.started = true;
  st.writer = std::thread([&st] { st.WriterLoop(); });
  return absl::OkStatus();
}

void SqliteBackend::Apply(Change change, ChangeCallback done) {
  State& st = *state_;
  std::unique_lock lock(st.mu);
  if (st.stopping || !st.started) {
    lock.unlock();
    std::move(done)(absl::UnavailableError("registry is not running"));
    return;
  }
  if (st.queue.size() >= st.options.queue_limit) {
    st.queue_full.fetch_add(1, std::memory_order_relaxed);
    st.refused.push_back(std::move(done));
  } else {
    st.queue.push_back({std::move(change), std::move(done)});
  }
  lock.unlock();
  st.wake.notify_one();
}

void SqliteBackend::ReadCredits(std::string subject, int64_t before, size_t limit,
                                CreditPageCallback done) {
  State& st = *state_;
  std::unique_lock lock(st.mu);
  if (st.stopping || !st.started || st.queue.size() >= st.options.queue_limit) {
    lock.unlock();
    std::move(done)(absl::UnavailableError("the registry is not running or its queue is full"));
    return;
  }
  st.queue.push_back({.read = [&st, subject = std::move(subject), before, limit,
                               done = std::move(done)]() mutable {
    std::move(done)(st.ReadGrants(subject, before, limit));
  }});
  lock.unlock();
  st.wake.notify_one();
}

void SqliteBackend::Stop() {
  State& st = *state_;
  {
    std::lock_guard lock(st.mu);
    if (st.stopping) return;
    st.stopping = true;
  }
  st.wake.notify_one();
  if (st.writer.joinable()) st.writer.join();
}

SqliteBackend::Stats SqliteBackend::stats() const {
  const State& st = *state_;
  std::lock_guard lock(st.mu);
  return {.queue_full = st.queue_full.load(std::memory_order_relaxed),
          .failed = st.failed.load(std::memory_order_relaxed),
          .queued = st.queue.size()};
}

}  // namespace sluice::registry
