// The embedded registry: one SQLite file, written by one process.
//
// Each Change is one transaction (BEGIN IMMEDIATE ... COMMIT), committed with synchronous=FULL in
// WAL mode: when `done` reports success the change is on disk (a kill -9 right after loses
// nothing). Writes run on the backend's own writer thread behind a bounded queue, so the thread
// that calls Apply never waits for an fsync; `done` runs on the writer thread after the commit and
// after the Index has the change.
//
// A second process opening the same file is refused (an flock on "<path>.lock"). The file carries
// a schema version (PRAGMA user_version); a file written by a newer sluice is refused, never
// rewritten. Times are stored as integer microseconds since the Unix epoch, key ids as the
// 64-bit integer they are, digests as 32-byte blobs.
#ifndef SLUICE_REGISTRY_SQLITE_BACKEND_H_
#define SLUICE_REGISTRY_SQLITE_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sluice/common/clock.h"
#include "sluice/registry/backend.h"
#include "sluice/registry/index.h"
#include "sluice/registry/model.h"

namespace sluice::registry {

class SqliteBackend final : public Backend {
 public:
  // The schema this version writes and reads.
  // Version 2 added the credit ledger; a version-1 file is upgraded when opened.
  static constexpr int kSchemaVersion = 2;

  struct Options {
    std::string path;  // ":memory:" for a registry that lives as long as the backend (tests)
    // Changes waiting for the writer; one more is refused with Unavailable "registry write queue
    // full" (and counted).
    size_t queue_limit = 1024;
    // For the 24-hour expiry of idempotency records. Null: the system clock.
    const Clock* clock = nullptr;
  };

  // Takes the lock, then opens and checks the file; where no file is, creates one (mode 0600,
  // whole: built beside it as "<path>.new" and renamed into place). A file that is there is used
  // only if it is a registry, and is never written before that is known.
  // Errors: FailedPrecondition if another process holds the registry, the file is empty (0
  // bytes), not an SQLite database, a database without the registry's tables, or of a schema
  // newer than kSchemaVersion, or if the file is absent but its write-ahead log ("<path>-wal") is
  // not; Unavailable/Internal/PermissionDenied for I/O failures. Every message names the path.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<SqliteBackend>> Open(Options options);

  // Reads the file as it stands into `index`, without the lock and without writing anything (a
  // running server may hold the file): what `sluice check-config` checks the plans against.
  // NotFound if there is no file; FailedPrecondition, with Open's message, for a file Open would
  // refuse as not a registry (empty, no SQLite database, no registry tables, a newer schema).
  [[nodiscard]] static absl::Status ReadInto(const std::string& path, Index* index);

  ~SqliteBackend() override;  // Stop()

  absl::Status Start(Index* index) override;
  // REQUIRES: Start succeeded. After Stop, Apply answers Unavailable at once, inside Apply (the
  // only case where `done` runs there).
  void Apply(Change change, ChangeCallback done) override;
  // Runs on the writer thread, in turn with the changes queued before it.
  void ReadCredits(std::string subject, int64_t before, size_t limit,
                   CreditPageCallback done) override;
  void Stop() override;

  struct Stats {
    uint64_t queue_full = 0;  // changes refused because the queue was full
    uint64_t failed = 0;      // changes that failed with Unavailable (SQLite errors)
    size_t queued = 0;        // changes waiting now
  };
  [[nodiscard]] Stats stats() const;

  struct State;  // public only for the implementation's helpers
  explicit SqliteBackend(std::unique_ptr<State> state);

 private:
  std::unique_ptr<State> state_;
};

}  // namespace sluice::registry

#endif  // SLUICE_REGISTRY_SQLITE_BACKEND_H_
