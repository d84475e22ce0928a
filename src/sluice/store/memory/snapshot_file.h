// The memory store's snapshot file as an operator sees it at start: is its place usable, did a
// killed writer leave temporary files behind, and does another process already own it.
//
// SaveSnapshot (snapshot.h) writes "<snapshot_path>.tmp.<pid>" and renames it over the snapshot;
// a process killed between the two leaves that temporary file behind for good. Only one process
// may write a snapshot file: two would overwrite each other's counters every interval.
#ifndef SLUICE_STORE_MEMORY_SNAPSHOT_FILE_H_
#define SLUICE_STORE_MEMORY_SNAPSHOT_FILE_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace sluice {
inline namespace memory {

// OK if `snapshot_path` can hold a snapshot: its directory exists and is a directory, and the path
// itself, if it exists, is a regular file (not a directory, FIFO or device). Otherwise
// InvalidArgument saying what is wrong (without the config key path, which the caller adds), e.g.
// "directory /var/lib/sluice does not exist". Does not check permissions.
[[nodiscard]] absl::Status CheckSnapshotPath(const std::string& snapshot_path);

// True if `file_name` (a name without directory) is a temporary file SaveSnapshot writes for
// the snapshot named `snapshot_name`: "<snapshot_name>.tmp.<digits>".
[[nodiscard]] bool IsSnapshotTempName(std::string_view snapshot_name, std::string_view file_name);

// Removes the temporary files a killed writer left beside `snapshot_path` (regular files only).
// Returns how many were removed. REQUIRES: this process holds the path's SnapshotLock, so no
// other writer is using them.
[[nodiscard]] absl::StatusOr<size_t> RemoveStaleSnapshotTemps(const std::string& snapshot_path);

// An exclusive flock(2) on "<snapshot_path>.lock", held until this object is destroyed. The lock
// file records the holder's pid (for the message another process gets); it is never deleted,
// since deleting a lock file lets two processes lock two different files. The descriptor is
// close-on-exec. Movable, not copyable.
class SnapshotLock {
 public:
  // Takes the lock without waiting. Another holder: FailedPrecondition
  // "snapshot /x/state.snap is in use by another process (pid 123 holds /x/state.snap.lock)".
  // The lock file cannot be created or locked: the errno error, naming the file.
  [[nodiscard]] static absl::StatusOr<SnapshotLock> Acquire(const std::string& snapshot_path);

  SnapshotLock(SnapshotLock&& other) noexcept;
  SnapshotLock& operator=(SnapshotLock&& other) noexcept;
  SnapshotLock(const SnapshotLock&) = delete;
  SnapshotLock& operator=(const SnapshotLock&) = delete;
  ~SnapshotLock();

  // "<snapshot_path>.lock".
  [[nodiscard]] const std::string& lock_path() const { return lock_path_; }

 private:
  SnapshotLock(int fd, std::string lock_path) : fd_(fd), lock_path_(std::move(lock_path)) {}

  int fd_ = -1;
  std::string lock_path_;
};

}  // namespace memory
}  // namespace sluice

#endif  // SLUICE_STORE_MEMORY_SNAPSHOT_FILE_H_
