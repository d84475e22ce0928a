#include "sluice/server/cpus.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace sluice::server {
namespace {

using ::testing::Optional;

TEST(ParseProcSelfCgroupTest, ReadsTheUnifiedPath) {
  const CgroupMembership m = ParseProcSelfCgroup("0::/system.slice/sluice.service\n");
  EXPECT_EQ(m.v2, "/system.slice/sluice.service");
  EXPECT_EQ(m.v1_cpu, std::nullopt);
}

TEST(ParseProcSelfCgroupTest, ReadsTheV1CpuControllerWhereverItIsListed) {
  const CgroupMembership m = ParseProcSelfCgroup(
      "9:name=systemd:/\n4:memory:/m\n3:cpu,cpuacct:/docker/abc\n2:cpuset:/\n0::/\n");
  EXPECT_EQ(m.v1_cpu, "/docker/abc");
  EXPECT_EQ(m.v2, "/");
  EXPECT_EQ(ParseProcSelfCgroup("2:cpuacct:/a\n1:cpu:/b\n").v1_cpu, "/b");
}

TEST(ParseProcSelfCgroupTest, PathMayHoldColonsAndGarbageIsSkipped) {
  const CgroupMembership m = ParseProcSelfCgroup("junk\n0::/a:b\n");
  EXPECT_EQ(m.v2, "/a:b");
}

TEST(ParseCpuMaxTest, QuotaOverPeriod) {
  EXPECT_THAT(ParseCpuMax("150000 100000\n"), Optional(1.5));
  EXPECT_THAT(ParseCpuMax("200000 100000"), Optional(2.0));
}

TEST(ParseCpuMaxTest, MaxAndGarbageMeanNoLimit) {
  EXPECT_EQ(ParseCpuMax("max 100000\n"), std::nullopt);
  EXPECT_EQ(ParseCpuMax(""), std::nullopt);
  EXPECT_EQ(ParseCpuMax("100000"), std::nullopt);
  EXPECT_EQ(ParseCpuMax("a b"), std::nullopt);
  EXPECT_EQ(ParseCpuMax("100000 0"), std::nullopt);
}

TEST(ParseCfsQuotaTest, QuotaOverPeriodAndMinusOneIsNoLimit) {
  EXPECT_THAT(ParseCfsQuota("50000\n", "100000\n"), Optional(0.5));
  EXPECT_EQ(ParseCfsQuota("-1\n", "100000\n"), std::nullopt);
  EXPECT_EQ(ParseCfsQuota("x", "100000"), std::nullopt);
}

TEST(CpusAllowedTest, QuotaIsRoundedUpAndCapsTheAffinity) {
  EXPECT_EQ(CpusAllowed(8, 1.5), 2u);
  EXPECT_EQ(CpusAllowed(8, 2.0), 2u);
  EXPECT_EQ(CpusAllowed(8, 0.1), 1u);
  EXPECT_EQ(CpusAllowed(2, 16.0), 2u);
  EXPECT_EQ(CpusAllowed(4, std::nullopt), 4u);
  EXPECT_EQ(CpusAllowed(0, std::nullopt), 1u);
}

class CgroupFsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/sluice-cpus-test-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    root_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  void Write(const std::string& relative, const std::string& text) {
    const std::filesystem::path path = root_ + relative;
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path) << text;
  }
  std::string root_;
};

TEST_F(CgroupFsTest, V2QuotaOfTheProcessCgroup) {
  Write("/cpu.max", "max 100000\n");
  Write("/system.slice/cpu.max", "max 100000\n");
  Write("/system.slice/sluice.service/cpu.max", "250000 100000\n");
  EXPECT_THAT(CgroupCpuQuota(root_, "0::/system.slice/sluice.service\n"), Optional(2.5));
}

TEST_F(CgroupFsTest, V2ParentQuotaBindsTheChild) {
  Write("/a/cpu.max", "100000 100000\n");
  Write("/a/b/cpu.max", "400000 100000\n");
  EXPECT_THAT(CgroupCpuQuota(root_, "0::/a/b\n"), Optional(1.0));
}

TEST_F(CgroupFsTest, V2WithoutAnyQuotaIsNoLimit) {
  Write("/a/cpu.max", "max 100000\n");
  EXPECT_EQ(CgroupCpuQuota(root_, "0::/a\n"), std::nullopt);
  EXPECT_EQ(CgroupCpuQuota(root_, ""), std::nullopt);
}

TEST_F(CgroupFsTest, V1QuotaUnderEitherMountName) {
  Write("/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "150000\n");
  Write("/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
  EXPECT_THAT(CgroupCpuQuota(root_, "3:cpu,cpuacct:/docker/abc\n"), Optional(1.5));
}

TEST_F(CgroupFsTest, V1ContainerSeesItsOwnCgroupAtTheMountRoot) {
  // Without a cgroup namespace the path names the host's cgroup, which is mounted as the root.
  Write("/cpu/cpu.cfs_quota_us", "300000\n");
  Write("/cpu/cpu.cfs_period_us", "100000\n");
  EXPECT_THAT(CgroupCpuQuota(root_, "1:cpu:/docker/abc\n"), Optional(3.0));
}

TEST(AvailableCpusTest, IsAtLeastOneAndAtMostTheMachine) {
  const unsigned cpus = AvailableCpus();
  EXPECT_GE(cpus, 1u);
  EXPECT_LE(cpus, static_cast<unsigned>(::sysconf(_SC_NPROCESSORS_CONF)));
}

}  // namespace
}  // namespace sluice::server
