#include "sluice/metrics/process.h"

#include <fcntl.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace sluice::metrics {
namespace {

using ::testing::HasSubstr;

TEST(CpuSecondsFromStatTest, AddsUserAndSystemTicks) {
  // Fields 14 and 15 (utime 250, stime 50) at 100 ticks a second.
  const std::string stat = "4242 (sluice) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0";
  EXPECT_EQ(CpuSecondsFromStat(stat, 100), 3.0);
}

TEST(CpuSecondsFromStatTest, CountsFieldsAfterTheLastParenthesisOfTheCommand) {
  const std::string stat = "7 (a) b (c)) S 1 7 7 0 -1 0 0 0 0 0 10 30 0 0 20 0";
  EXPECT_EQ(CpuSecondsFromStat(stat, 10), 4.0);
}

TEST(CpuSecondsFromStatTest, RefusesWhatDoesNotParse) {
  EXPECT_EQ(CpuSecondsFromStat("no parenthesis", 100), std::nullopt);
  EXPECT_EQ(CpuSecondsFromStat("1 (x) S 1 2", 100), std::nullopt);
  EXPECT_EQ(CpuSecondsFromStat("1 (x) S 1 1 1 0 -1 0 0 0 0 0 x 1", 100), std::nullopt);
  EXPECT_EQ(CpuSecondsFromStat("1 (x) S 1 1 1 0 -1 0 0 0 0 0 1 1", 0), std::nullopt);
}

TEST(SampleProcessTest, SeesThisProcess) {
  std::optional<ProcessSample> before = SampleProcess();
  ASSERT_TRUE(before.has_value());
  EXPECT_GT(before->resident_bytes, 1024 * 1024);
  EXPECT_GE(before->open_fds, 3);  // stdin, stdout, stderr
  EXPECT_GT(before->max_fds, 0);
  // One more open descriptor is seen.
  const int fd = ::open("/dev/null", O_RDONLY);
  ASSERT_GE(fd, 0);
  std::optional<ProcessSample> after = SampleProcess();
  ::close(fd);
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(after->open_fds, before->open_fds + 1);
}

TEST(RegisterProcessMetricsTest, RendersTheConventionalNames) {
  Registry registry;
  RegisterProcessMetrics(registry, 1764547200);
  const std::string text = registry.Render();
  EXPECT_THAT(text, HasSubstr("# TYPE process_cpu_seconds_total counter"));
  EXPECT_THAT(text, HasSubstr("# TYPE process_resident_memory_bytes gauge"));
  EXPECT_THAT(text, HasSubstr("# TYPE process_open_fds gauge"));
  EXPECT_THAT(text, HasSubstr("# TYPE process_max_fds gauge"));
  // Rendered with the fewest digits that read back as the same value.
  EXPECT_THAT(text, HasSubstr("process_start_time_seconds 1.7645472e+09\n"));
}

}  // namespace
}  // namespace sluice::metrics
