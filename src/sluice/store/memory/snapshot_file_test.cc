#include "sluice/store/memory/snapshot_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;

class SnapshotFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/sluice-snapshot-file-test-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
    snapshot_ = dir_ + "/state.snap";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string PathOf(const std::string& name) const { return dir_ + "/" + name; }
  void Touch(const std::string& name) const { std::ofstream(PathOf(name)) << "x"; }
  bool Exists(const std::string& name) const { return std::filesystem::exists(PathOf(name)); }

  std::string dir_;
  std::string snapshot_;
};

TEST_F(SnapshotFileTest, PathInAnExistingDirectoryIsUsable) {
  EXPECT_TRUE(CheckSnapshotPath(snapshot_).ok());
  EXPECT_TRUE(CheckSnapshotPath("relative.snap").ok());
}

TEST_F(SnapshotFileTest, MissingDirectoryIsNamed) {
  EXPECT_EQ(
      CheckSnapshotPath(dir_ + "/no/such/state.snap"),
      absl::InvalidArgumentError(absl::StrCat("directory ", dir_, "/no/such does not exist")));
}

TEST_F(SnapshotFileTest, DirectoryThatIsAFileIsRefused) {
  Touch("plain");
  EXPECT_EQ(CheckSnapshotPath(PathOf("plain/state.snap")),
            absl::InvalidArgumentError(absl::StrCat(dir_, "/plain is not a directory")));
}

TEST_F(SnapshotFileTest, SnapshotPathThatIsADirectoryIsRefused) {
  EXPECT_FALSE(CheckSnapshotPath(dir_).ok());
  EXPECT_FALSE(CheckSnapshotPath(dir_ + "/").ok());
}

TEST_F(SnapshotFileTest, SnapshotPathThatIsAFifoOrDeviceIsRefused) {
  ASSERT_EQ(::mkfifo(snapshot_.c_str(), 0600), 0);
  EXPECT_EQ(CheckSnapshotPath(snapshot_), absl::InvalidArgumentError("is not a regular file"));
  EXPECT_EQ(CheckSnapshotPath("/dev/zero"), absl::InvalidArgumentError("is not a regular file"));
}

TEST_F(SnapshotFileTest, LockFileThatIsAFifoIsRefusedWithoutBlocking) {
  ASSERT_EQ(::mkfifo((snapshot_ + ".lock").c_str(), 0600), 0);
  absl::StatusOr<SnapshotLock> lock = SnapshotLock::Acquire(snapshot_);
  ASSERT_FALSE(lock.ok());
  EXPECT_THAT(lock.status().message(), HasSubstr("is not a regular file"));
}

TEST_F(SnapshotFileTest, TempNamesAreTheSnapshotNameDotTmpDotPid) {
  EXPECT_TRUE(IsSnapshotTempName("state.snap", "state.snap.tmp.123"));
  EXPECT_FALSE(IsSnapshotTempName("state.snap", "state.snap"));
  EXPECT_FALSE(IsSnapshotTempName("state.snap", "state.snap.tmp."));
  EXPECT_FALSE(IsSnapshotTempName("state.snap", "state.snap.tmp.12a"));
  EXPECT_FALSE(IsSnapshotTempName("state.snap", "state.snap.lock"));
  EXPECT_FALSE(IsSnapshotTempName("state.snap", "other.snap.tmp.123"));
  EXPECT_FALSE(IsSnapshotTempName("state.snap", "xstate.snap.tmp.123"));
}

TEST_F(SnapshotFileTest, StaleTempFilesAreRemovedAndNothingElse) {
  Touch("state.snap");
  Touch("state.snap.tmp.4242");
  Touch("state.snap.tmp.1");
  Touch("state.snap.lock");
  Touch("state.snap.bak");
  Touch("other.snap.tmp.4242");
  absl::StatusOr<size_t> removed = RemoveStaleSnapshotTemps(snapshot_);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(*removed, 2u);
  EXPECT_FALSE(Exists("state.snap.tmp.4242"));
  EXPECT_FALSE(Exists("state.snap.tmp.1"));
  EXPECT_TRUE(Exists("state.snap"));
  EXPECT_TRUE(Exists("state.snap.lock"));
  EXPECT_TRUE(Exists("state.snap.bak"));
  EXPECT_TRUE(Exists("other.snap.tmp.4242"));
}

TEST_F(SnapshotFileTest, TempNamedDirectoryOrLinkIsLeftAlone) {
  std::filesystem::create_directory(PathOf("state.snap.tmp.7"));
  Touch("target");
  std::filesystem::create_symlink(PathOf("target"), PathOf("state.snap.tmp.8"));
  absl::StatusOr<size_t> removed = RemoveStaleSnapshotTemps(snapshot_);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(*removed, 0u);
  EXPECT_TRUE(Exists("state.snap.tmp.7"));
  EXPECT_TRUE(Exists("target"));
}

TEST_F(SnapshotFileTest, SecondLockOfTheSameSnapshotIsRefusedNamingTheHolder) {
  absl::StatusOr<SnapshotLock> first = SnapshotLock::Acquire(snapshot_);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->lock_path(), snapshot_ + ".lock");
  absl::StatusOr<SnapshotLock> second = SnapshotLock::Acquire(snapshot_);
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(second.status())) << second.status();
  EXPECT_THAT(second.status().message(),
              HasSubstr(absl::StrCat("snapshot ", snapshot_, " is in use by another process (pid ",
                                     ::getpid(), " holds ", snapshot_, ".lock)")));
}

TEST_F(SnapshotFileTest, LockIsFreeAgainOnceItsHolderIsGone) {
  {
    absl::StatusOr<SnapshotLock> first = SnapshotLock::Acquire(snapshot_);
    ASSERT_TRUE(first.ok()) << first.status();
    SnapshotLock moved = *std::move(first);  // the moved-from object must not release it
    EXPECT_FALSE(SnapshotLock::Acquire(snapshot_).ok());
  }
  EXPECT_TRUE(SnapshotLock::Acquire(snapshot_).ok());
  EXPECT_TRUE(Exists("state.snap.lock"));  // never deleted
}

TEST_F(SnapshotFileTest, LockDescriptorIsCloseOnExec) {
  absl::StatusOr<SnapshotLock> lock = SnapshotLock::Acquire(snapshot_);
  ASSERT_TRUE(lock.ok()) << lock.status();
  bool found = false;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    if (std::filesystem::read_symlink(entry.path(), ec) != snapshot_ + ".lock") continue;
    const int fd = std::stoi(entry.path().filename().string());
    EXPECT_NE(::fcntl(fd, F_GETFD) & FD_CLOEXEC, 0);
    found = true;
  }
  EXPECT_TRUE(found);
}

TEST_F(SnapshotFileTest, LockInAMissingDirectoryIsAnError) {
  absl::StatusOr<SnapshotLock> lock = SnapshotLock::Acquire(dir_ + "/missing/state.snap");
  ASSERT_FALSE(lock.ok());
  EXPECT_THAT(lock.status().message(), HasSubstr("No such file or directory"));
}

}  // namespace
}  // namespace sluice
