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
  static constexpr int kSchemaVersion = 1;

  struct Options {
    std::string path;  // ":memory:" for a registry that lives as long as the backend (tests)
    // Changes waiting for the writer; one more is refused with Unavailable "registry write queue
    // full" (and counted).
    size_t queue_limit = 1024;
    // For the 24-hour expiry of idempotency records. Null: the system clock.
    const Clock* clock = nullptr;
  };

  // Opens (creating if needed) and checks the file, takes the lock, creates or checks the schema.
  // Errors: FailedPrecondition if another process holds the registry, the file is not an SQLite
  // database, or its schema is newer than kSchemaVersion; Unavailable/Internal/PermissionDenied
  // for I/O failures. Every message names the path.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<SqliteBackend>> Open(Options options);

  // Reads the file as it stands into `index`, without the lock and without writing anything (a
  // running server may hold the file): what `sluice check-config` checks the plans against.
  // NotFound if there is no file; FailedPrecondition if it is no SQLite database or its schema
  // is newer than kSchemaVersion.
  [[nodiscard]] static absl::Status ReadInto(const std::string& path, Index* index);

  ~SqliteBackend() override;  // Stop()

  absl::Status Start(Index* index) override;
  // REQUIRES: Start succeeded. After Stop, Apply answers Unavailable at once, inside Apply (the
  // only case where `done` runs there).
  void Apply(Change change, ChangeCallback done) override;
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
