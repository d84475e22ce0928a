#include "sluice/metrics/metrics.h"

#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::metrics {
namespace {

using ::testing::HasSubstr;

TEST(RegistryTest, EmptyRegistryRendersNothing) {
  Registry registry;
  EXPECT_EQ(registry.Render(), "");
}

TEST(RegistryTest, CounterRendersHelpTypeAndValue) {
  Registry registry;
  Counter& denied = registry.AddCounter("sluice_denied_total", "Requests denied.");
  denied.Inc();
  denied.Inc(4);

  EXPECT_EQ(denied.value(), 5u);
  EXPECT_EQ(registry.Render(),
            "# HELP sluice_denied_total Requests denied.\n"
            "# TYPE sluice_denied_total counter\n"
            "sluice_denied_total 5\n");
}

TEST(RegistryTest, LabelledCounterRendersOneSeriesPerLabelValuesInSortedOrder) {
  Registry registry;
  CounterFamily& decisions = registry.AddCounterFamily(
      "sluice_decisions_total", "Decisions by plan and result.", {"plan", "result"});
  decisions.WithLabels({"pro", "allowed"}).Inc();
  decisions.WithLabels({"free", "denied"}).Inc(2);
  decisions.WithLabels({"free", "allowed"}).Inc(3);

  EXPECT_EQ(registry.Render(),
            "# HELP sluice_decisions_total Decisions by plan and result.\n"
            "# TYPE sluice_decisions_total counter\n"
            "sluice_decisions_total{plan=\"free\",result=\"allowed\"} 3\n"
            "sluice_decisions_total{plan=\"free\",result=\"denied\"} 2\n"
            "sluice_decisions_total{plan=\"pro\",result=\"allowed\"} 1\n");
}

TEST(RegistryTest, WithLabelsReturnsTheSameChildForTheSameValues) {
  Registry registry;
  CounterFamily& family = registry.AddCounterFamily("c_total", "c", {"plan"});
  Counter& first = family.WithLabels({"free"});
  family.WithLabels({"pro"});
  const std::vector<std::string> free_plan = {"free"};

  EXPECT_EQ(&family.WithLabels({"free"}), &first);
  EXPECT_EQ(&family.WithLabels(std::span<const std::string>(free_plan)), &first);
}

TEST(RegistryTest, FamilyWithoutChildrenRendersOnlyHelpAndType) {
  Registry registry;
  registry.AddGaugeFamily("sluice_open_connections", "Open connections.", {"listener"});

  EXPECT_EQ(registry.Render(),
            "# HELP sluice_open_connections Open connections.\n"
            "# TYPE sluice_open_connections gauge\n");
}

TEST(RegistryTest, GaugeRendersSetAndAddIncludingNegativeValues) {
  Registry registry;
  Gauge& gauge = registry.AddGauge("g", "A gauge.");
  gauge.Set(3);
  gauge.Add(-5);

  EXPECT_EQ(gauge.value(), -2);
  EXPECT_EQ(registry.Render(),
            "# HELP g A gauge.\n"
            "# TYPE g gauge\n"
            "g -2\n");
}

TEST(RegistryTest, HistogramBucketsAreCumulativeWithSumAndCount) {
  Registry registry;
  Histogram& latency = registry.AddHistogram("sluice_check_seconds", "Check latency.", {0.5, 1, 2});
  latency.Observe(0.125);
  latency.Observe(0.5);  // a bound belongs to its own bucket (le means <=)
  latency.Observe(absl::Milliseconds(750));
  latency.Observe(3);

  EXPECT_EQ(registry.Render(),
            "# HELP sluice_check_seconds Check latency.\n"
            "# TYPE sluice_check_seconds histogram\n"
            "sluice_check_seconds_bucket{le=\"0.5\"} 2\n"
            "sluice_check_seconds_bucket{le=\"1\"} 3\n"
            "sluice_check_seconds_bucket{le=\"2\"} 3\n"
            "sluice_check_seconds_bucket{le=\"+Inf\"} 4\n"
            "sluice_check_seconds_sum 4.375\n"
            "sluice_check_seconds_count 4\n");
}

TEST(RegistryTest, LabelledHistogramPutsLeAfterTheFamilyLabels) {
  Registry registry;
  HistogramFamily& family =
      registry.AddHistogramFamily("store_seconds", "Store latency.", {"store"}, {0.25});
  family.WithLabels({"redis"}).Observe(0.125);

  EXPECT_EQ(registry.Render(),
            "# HELP store_seconds Store latency.\n"
            "# TYPE store_seconds histogram\n"
            "store_seconds_bucket{store=\"redis\",le=\"0.25\"} 1\n"
            "store_seconds_bucket{store=\"redis\",le=\"+Inf\"} 1\n"
            "store_seconds_sum{store=\"redis\"} 0.125\n"
            "store_seconds_count{store=\"redis\"} 1\n");
}

TEST(RegistryTest, BucketBoundsUseTheShortestRoundTripForm) {
  Registry registry;
  registry.AddHistogram("h", "h", {0.00001, 0.0001, 0.00025, 0.1, 2.5, 10, 1e6});
  const std::string text = registry.Render();

  EXPECT_THAT(text, HasSubstr("h_bucket{le=\"1e-05\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("h_bucket{le=\"0.0001\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("h_bucket{le=\"0.00025\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("h_bucket{le=\"0.1\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("h_bucket{le=\"2.5\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("h_bucket{le=\"10\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("h_bucket{le=\"1e+06\"} 0\n"));
}

TEST(HistogramTest, UnsortedBoundsAreSortedAndNonFiniteOnesDropped) {
  Histogram histogram({1, 0.5, std::numeric_limits<double>::infinity(), 1});

  EXPECT_EQ(histogram.bounds(), (std::vector<double>{0.5, 1}));
}

TEST(HistogramTest, NanObservationIsIgnored) {
  Histogram histogram({1});
  histogram.Observe(std::numeric_limits<double>::quiet_NaN());

  EXPECT_EQ(histogram.snapshot().count, 0u);
  EXPECT_EQ(histogram.snapshot().sum, 0);
}

TEST(RegistryTest, LabelValuesAreEscaped) {
  Registry registry;
  CounterFamily& family = registry.AddCounterFamily("c_total", "c", {"subject"});
  family.WithLabels({"a\\b\"c\nd"}).Inc();

  EXPECT_THAT(registry.Render(), HasSubstr("c_total{subject=\"a\\\\b\\\"c\\nd\"} 1\n"));
}

TEST(RegistryTest, HelpEscapesBackslashAndNewlineButNotQuotes) {
  Registry registry;
  registry.AddCounter("c_total", "say \"hi\"\\now\nplease");

  EXPECT_THAT(registry.Render(), HasSubstr("# HELP c_total say \"hi\"\\\\now\\nplease\n"));
}

TEST(RegistryTest, CallbackGaugeIsSampledAtRenderTime) {
  Registry registry;
  double depth = 1;
  registry.AddCallbackGauge("sluice_outbox_depth", "Alerts waiting.", [&depth] { return depth; });

  depth = 7.5;
  EXPECT_EQ(registry.Render(),
            "# HELP sluice_outbox_depth Alerts waiting.\n"
            "# TYPE sluice_outbox_depth gauge\n"
            "sluice_outbox_depth 7.5\n");
  depth = 9;
  EXPECT_THAT(registry.Render(), HasSubstr("sluice_outbox_depth 9\n"));
}

TEST(RegistryTest, CallbackCounterIsRenderedAsACounter) {
  Registry registry;
  double hits = 3;
  registry.AddCallbackCounter("sluice_hits_total", "Hits.", [&hits] { return hits; });
  EXPECT_EQ(registry.Render(),
            "# HELP sluice_hits_total Hits.\n"
            "# TYPE sluice_hits_total counter\n"
            "sluice_hits_total 3\n");
  hits = 5;
  EXPECT_THAT(registry.Render(), HasSubstr("sluice_hits_total 5\n"));
}

TEST(RegistryTest, CallbackGaugeRendersNanAndInfinitiesInPrometheusSpelling) {
  Registry registry;
  registry.AddCallbackGauge("nan", "n", [] { return std::numeric_limits<double>::quiet_NaN(); });
  registry.AddCallbackGauge("inf", "i", [] { return std::numeric_limits<double>::infinity(); });
  registry.AddCallbackGauge("minf", "m", [] { return -std::numeric_limits<double>::infinity(); });
  const std::string text = registry.Render();

  EXPECT_THAT(text, HasSubstr("\nnan NaN\n"));
  EXPECT_THAT(text, HasSubstr("\ninf +Inf\n"));
  EXPECT_THAT(text, HasSubstr("\nminf -Inf\n"));
}

TEST(RegistryTest, RendersInRegistrationOrder) {
  Registry registry;
  registry.AddGauge("zeta", "z");
  registry.AddCounter("alpha_total", "a");
  registry.AddCallbackGauge("mid", "m", [] { return 0.0; });

  EXPECT_EQ(registry.Render(),
            "# HELP zeta z\n# TYPE zeta gauge\nzeta 0\n"
            "# HELP alpha_total a\n# TYPE alpha_total counter\nalpha_total 0\n"
            "# HELP mid m\n# TYPE mid gauge\nmid 0\n");
}

TEST(RegistryTest, RegisteringTheSameNameAndShapeAgainReturnsTheExistingMetric) {
  Registry registry;
  Counter& first = registry.AddCounter("c_total", "c");
  CounterFamily& family = registry.AddCounterFamily("f_total", "f", {"plan"});
  Histogram& histogram = registry.AddHistogram("h", "h", {1, 2});

  EXPECT_EQ(&registry.AddCounter("c_total", "c"), &first);
  EXPECT_EQ(&registry.AddCounterFamily("f_total", "f", {"plan"}), &family);
  EXPECT_EQ(&registry.AddHistogram("h", "h", {1, 2}), &histogram);
  EXPECT_EQ(registry.Render().find("# TYPE c_total"), registry.Render().rfind("# TYPE c_total"));
}

TEST(RegistryTest, ColonsAreAllowedInMetricNames) {
  Registry registry;
  registry.AddCounter("sluice:recorded_total", "r");

  EXPECT_THAT(registry.Render(), HasSubstr("\nsluice:recorded_total 0\n"));
}

TEST(RegistryTest, ConcurrentIncrementsFromFourThreadsSumExactly) {
  Registry registry;
  CounterFamily& family = registry.AddCounterFamily("c_total", "c", {"plan"});
  Histogram& histogram = registry.AddHistogram("h", "h", {0.5});
  constexpr int kThreads = 4;
  constexpr int kPerThread = 100000;

  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      Counter& counter = family.WithLabels({"free"});  // the children race to be created
      for (int i = 0; i < kPerThread; ++i) {
        counter.Inc();
        histogram.Observe(0.25);
      }
    });
  }
  for (std::thread& t : threads) t.join();

  EXPECT_EQ(family.WithLabels({"free"}).value(), uint64_t{kThreads} * kPerThread);
  EXPECT_EQ(histogram.snapshot().count, uint64_t{kThreads} * kPerThread);
  EXPECT_EQ(histogram.snapshot().sum, 0.25 * kThreads * kPerThread);
}

// Misuse asserts in debug builds; release builds log, keep a working metric and leave it out.
TEST(RegistryDeathTest, InvalidNamesAreLeftOutOfTheRendering) {
  Registry registry;

  EXPECT_DEBUG_DEATH(registry.AddCounter("1st_total", "bad").Inc(), "");
  EXPECT_DEBUG_DEATH(registry.AddCounter("has-dash", "bad").Inc(), "");
  EXPECT_DEBUG_DEATH(registry.AddCounterFamily("c_total", "bad", {"a:b"}), "");
  EXPECT_DEBUG_DEATH(registry.AddCounterFamily("d_total", "bad", {"__x"}), "");
  EXPECT_DEBUG_DEATH(registry.AddHistogramFamily("h", "bad", {"le"}, {1}), "");
  EXPECT_DEBUG_DEATH(registry.AddCallbackGauge("g", "bad", nullptr), "");
  EXPECT_EQ(registry.Render(), "");
}

TEST(RegistryDeathTest, ReusingANameWithAnotherTypeIsLeftOutOfTheRendering) {
  Registry registry;
  registry.AddCounter("x", "first");
  registry.AddCallbackGauge("y", "first", [] { return 1.0; });
  const std::string before = registry.Render();

  EXPECT_DEBUG_DEATH(registry.AddGauge("x", "second").Set(1), "");
  EXPECT_DEBUG_DEATH(registry.AddCounterFamily("x", "second", {"plan"}), "");
  EXPECT_DEBUG_DEATH(registry.AddCallbackGauge("y", "second", [] { return 2.0; }), "");
  EXPECT_EQ(registry.Render(), before);
}

TEST(FamilyDeathTest, WrongNumberOfLabelValuesIsPaddedInReleaseBuilds) {
  Registry registry;
  CounterFamily& family = registry.AddCounterFamily("c_total", "c", {"plan", "result"});

  EXPECT_DEBUG_DEATH(family.WithLabels({"free"}).Inc(), "");
#ifdef NDEBUG
  EXPECT_THAT(registry.Render(), HasSubstr("c_total{plan=\"free\",result=\"\"} 1\n"));
#endif
}

}  // namespace
}  // namespace sluice::metrics
