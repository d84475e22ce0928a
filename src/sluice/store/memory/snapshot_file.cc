#include "sluice/store/memory/snapshot_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace sluice {
inline namespace memory {
namespace {

absl::Status ErrnoError(int error, absl::string_view what, const std::string& path) {
  const std::string text =
      absl::StrCat(what, " ", path, ": ", std::generic_category().message(error));
  return error == EACCES || error == EPERM ? absl::PermissionDeniedError(text)
                                           : absl::InternalError(text);
}

struct Split {
  std::string dir;   // "." when the path has none
  std::string name;  // the last component
};

Split SplitPath(const std::string& path) {
  const std::filesystem::path p(path);
  return {p.has_parent_path() ? p.parent_path().string() : std::string("."), p.filename().string()};
}

}  // namespace

absl::Status CheckSnapshotPath(const std::string& snapshot_path) {
  const Split split = SplitPath(snapshot_path);
  if (split.name.empty() || split.name == "." || split.name == "..") {
    return absl::InvalidArgumentError("must name a file, not a directory");
  }
  struct stat st {};
  if (::stat(split.dir.c_str(), &st) != 0) {
    const int error = errno;
    if (error == ENOENT) {
      return absl::InvalidArgumentError(absl::StrCat("directory ", split.dir, " does not exist"));
    }
    return absl::InvalidArgumentError(
        absl::StrCat("directory ", split.dir, ": ", std::generic_category().message(error)));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(split.dir, " is not a directory"));
  }
  if (::stat(snapshot_path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      return absl::InvalidArgumentError("is a directory (want the path of a file)");
    }
    // Loading a FIFO would wait for a writer forever, a device such as /dev/zero never ends.
    if (!S_ISREG(st.st_mode)) return absl::InvalidArgumentError("is not a regular file");
  }
  return absl::OkStatus();
}

bool IsSnapshotTempName(std::string_view snapshot_name, std::string_view file_name) {
  if (snapshot_name.empty() || !file_name.starts_with(snapshot_name)) return false;
  std::string_view rest = file_name.substr(snapshot_name.size());
  constexpr std::string_view kTemp = ".tmp.";
  if (!rest.starts_with(kTemp)) return false;
  rest.remove_prefix(kTemp.size());
  return !rest.empty() && rest.size() <= 10 &&
         std::all_of(rest.begin(), rest.end(), [](char c) { return c >= '0' && c <= '9'; });
}

absl::StatusOr<size_t> RemoveStaleSnapshotTemps(const std::string& snapshot_path) {
  const Split split = SplitPath(snapshot_path);
  const int dfd = ::open(split.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return ErrnoError(errno, "open directory", split.dir);
  DIR* dir = ::fdopendir(dfd);
  if (dir == nullptr) {
    const int error = errno;
    ::close(dfd);
    return ErrnoError(error, "read directory", split.dir);
  }
  size_t removed = 0;
  absl::Status status;
  while (const dirent* entry = ::readdir(dir)) {
    if (!IsSnapshotTempName(split.name, entry->d_name)) continue;
    struct stat st {};
    // Never follow a link or touch anything but a plain file a writer could have left.
    if (::fstatat(dfd, entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) {
      continue;
    }
    if (::unlinkat(dfd, entry->d_name, 0) == 0) {
      ++removed;
    } else if (errno != ENOENT && status.ok()) {
      status = ErrnoError(errno, "remove", absl::StrCat(split.dir, "/", entry->d_name));
    }
  }
  ::closedir(dir);  // closes dfd
  if (!status.ok()) return status;
  return removed;
}

absl::StatusOr<SnapshotLock> SnapshotLock::Acquire(const std::string& snapshot_path) {
  std::string lock_path = absl::StrCat(snapshot_path, ".lock");
  const int fd =
      ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600);
  if (fd < 0) return ErrnoError(errno, "cannot create lock file", lock_path);
  SnapshotLock lock(fd, std::move(lock_path));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("lock file ", lock.lock_path_, " is not a regular file"));
  }
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    if (error == EINTR) continue;
    if (error != EWOULDBLOCK) return ErrnoError(error, "cannot lock", lock.lock_path_);
    char buffer[32] = {};
    const ssize_t n = ::pread(fd, buffer, sizeof(buffer) - 1, 0);
    int pid = 0;
    const bool known =
        n > 0 && absl::SimpleAtoi(absl::StripAsciiWhitespace(absl::string_view(buffer, n)), &pid);
    return absl::FailedPreconditionError(
        absl::StrCat("snapshot ", snapshot_path, " is in use by another process (",
                     known ? absl::StrCat("pid ", pid, " holds ") : std::string("lock "),
                     lock.lock_path_, known ? "" : " is held", ")"));
  }
  // Best effort: the pid only improves the message another process gets.
  const std::string pid = absl::StrCat(::getpid(), "\n");
  if (::ftruncate(fd, 0) == 0) {
    [[maybe_unused]] const ssize_t written = ::pwrite(fd, pid.data(), pid.size(), 0);
  }
  return lock;
}

SnapshotLock::SnapshotLock(SnapshotLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), lock_path_(std::move(other.lock_path_)) {}

SnapshotLock& SnapshotLock::operator=(SnapshotLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    lock_path_ = std::move(other.lock_path_);
  }
  return *this;
}

SnapshotLock::~SnapshotLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

}  // namespace memory
}  // namespace sluice
