#include "sluice/http/access_log.h"

#include "gtest/gtest.h"
#include "sluice/config/config.h"
#include "sluice/metrics/metrics.h"

namespace sluice::http {
namespace {

using config::AccessLogConfig;
using config::AccessLogMode;

AccessLogConfig Mode(AccessLogMode mode, double sample = 1.0) {
  return AccessLogConfig{.mode = mode, .sample = sample, .max_per_second = 1000};
}

TEST(AccessLogTest, OffLogsNothing) {
  AccessLog log(nullptr);
  EXPECT_FALSE(log.Wants(Mode(AccessLogMode::kOff), /*allowed=*/false, /*degraded=*/false));
  EXPECT_FALSE(log.Wants(Mode(AccessLogMode::kOff), /*allowed=*/true, /*degraded=*/true));
}

TEST(AccessLogTest, DeniedLogsDenialsAndDegradedAnswersOnly) {
  AccessLog log(nullptr);
  EXPECT_TRUE(log.Wants(Mode(AccessLogMode::kDenied), /*allowed=*/false, /*degraded=*/false));
  EXPECT_TRUE(log.Wants(Mode(AccessLogMode::kDenied), /*allowed=*/true, /*degraded=*/true));
  EXPECT_FALSE(log.Wants(Mode(AccessLogMode::kDenied), /*allowed=*/true, /*degraded=*/false));
}

TEST(AccessLogTest, AllLogsEveryAllowedDecisionAtSampleOne) {
  AccessLog log(nullptr);
  for (int i = 0; i < 100; ++i) {
    EXPECT_TRUE(log.Wants(Mode(AccessLogMode::kAll), /*allowed=*/true, /*degraded=*/false));
  }
}

TEST(AccessLogTest, SampleZeroLogsNoAllowedDecisionButEveryDenial) {
  AccessLog log(nullptr);
  for (int i = 0; i < 100; ++i) {
    EXPECT_FALSE(log.Wants(Mode(AccessLogMode::kAll, 0), /*allowed=*/true, /*degraded=*/false));
    EXPECT_TRUE(log.Wants(Mode(AccessLogMode::kAll, 0), /*allowed=*/false, /*degraded=*/false));
  }
}

TEST(AccessLogTest, SampleLogsAboutThatShareOfAllowedDecisions) {
  AccessLog log(nullptr, /*seed=*/42);
  int logged = 0;
  constexpr int kDecisions = 20000;
  for (int i = 0; i < kDecisions; ++i) {
    logged += log.Wants(Mode(AccessLogMode::kAll, 0.25), /*allowed=*/true, /*degraded=*/false);
  }
  // Binomial(20000, 0.25): the standard deviation is about 61; 500 is more than 8 of them.
  EXPECT_NEAR(logged, kDecisions / 4, 500);
}

TEST(AccessLogTest, AdmitsAtMostTheCapPerSecondAndCountsTheRest) {
  metrics::Counter dropped;
  AccessLog log(&dropped);
  int admitted = 0;
  for (int i = 0; i < 10; ++i) admitted += log.Admit(3, /*now_seconds=*/100);
  EXPECT_EQ(admitted, 3);
  EXPECT_EQ(dropped.value(), 7u);
}

TEST(AccessLogTest, ANewSecondAdmitsAgain) {
  metrics::Counter dropped;
  AccessLog log(&dropped);
  for (int i = 0; i < 5; ++i) (void)log.Admit(2, 100);
  EXPECT_TRUE(log.Admit(2, 101));
  EXPECT_TRUE(log.Admit(2, 101));
  EXPECT_FALSE(log.Admit(2, 101));
  EXPECT_EQ(dropped.value(), 4u);
}

TEST(AccessLogTest, AStragglerFromAnEarlierSecondDoesNotRestartTheCount) {
  metrics::Counter dropped;
  AccessLog log(&dropped);
  EXPECT_TRUE(log.Admit(2, 101));
  EXPECT_TRUE(log.Admit(2, 101));
  // A thread that read the clock in second 100 and was preempted arrives late: it is counted
  // against second 101, which is full, and does not open a new budget for it or for 101.
  EXPECT_FALSE(log.Admit(2, 100));
  EXPECT_FALSE(log.Admit(2, 101));
  EXPECT_EQ(dropped.value(), 2u);
}

}  // namespace
}  // namespace sluice::http
