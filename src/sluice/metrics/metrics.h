// Counters, gauges and histograms with Prometheus text exposition, format 0.0.4 (docs/http.md,
// `GET /metrics`).
//
//   metrics::Registry registry;  // owned by the server and passed down; there is no global one
//   metrics::CounterFamily& decisions = registry.AddCounterFamily(
//       "sluice_decisions_total", "Decisions by plan and result.", {"plan", "result"});
//   metrics::Counter& free_allowed = decisions.WithLabels({"free", "allowed"});  // cache this
//   free_allowed.Inc();
//   std::string body = registry.Render();  // served with kContentType
//
// Ownership: a Registry owns every metric and family registered with it; the references it hands
// out stay valid for the Registry's lifetime. Nothing is ever removed.
//
// Thread safety: everything here is thread-safe. Updating a Counter, Gauge or Histogram is a few
// relaxed atomic operations and takes no lock. Registration and Family::WithLabels take a mutex, so
// hot paths look their metrics up once and keep the reference.
//
// Names: metric names must match [a-zA-Z_:][a-zA-Z0-9_:]* and label names [a-zA-Z_][a-zA-Z0-9_]*
// (not starting with "__"; "le" is reserved for histograms). A registration that breaks these
// rules, or that reuses a name with another type or shape, is a programming error: debug builds
// assert; release builds log an error and return a working metric that is never rendered.
#ifndef SLUICE_METRICS_METRICS_H_
#define SLUICE_METRICS_METRICS_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/time/time.h"

namespace sluice::metrics {

// The Content-Type of Registry::Render()'s output.
inline constexpr std::string_view kContentType = "text/plain; version=0.0.4; charset=utf-8";

// A monotonically increasing count.
class Counter {
 public:
  Counter() = default;
  Counter(const Counter&) = delete;
  Counter& operator=(const Counter&) = delete;

  void Inc(uint64_t n = 1) { value_.fetch_add(n, std::memory_order_relaxed); }
  [[nodiscard]] uint64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> value_{0};
};

// A value that goes up and down.
class Gauge {
 public:
  Gauge() = default;
  Gauge(const Gauge&) = delete;
  Gauge& operator=(const Gauge&) = delete;

  void Set(int64_t value) { value_.store(value, std::memory_order_relaxed); }
  void Add(int64_t delta) { value_.fetch_add(delta, std::memory_order_relaxed); }
  [[nodiscard]] int64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> value_{0};
};

// Observations (in seconds) counted into fixed buckets. A value v falls into the first bucket whose
// upper bound b satisfies v <= b; the "+Inf" bucket is implicit.
class Histogram {
 public:
  // REQUIRES: `bounds` finite and strictly increasing. (Otherwise they are sorted, de-duplicated
  // and stripped of infinities and NaNs.)
  explicit Histogram(std::vector<double> bounds);
  Histogram(const Histogram&) = delete;
  Histogram& operator=(const Histogram&) = delete;

  // NaN is ignored.
  void Observe(double seconds);
  void Observe(absl::Duration d) { Observe(absl::ToDoubleSeconds(d)); }

  struct Snapshot {
    std::vector<uint64_t> cumulative;  // one per bound, then +Inf; cumulative.back() == count
    double sum = 0;
    uint64_t count = 0;
  };
  // Taken while other threads may observe: each bucket is read once, so the buckets and the
  // count always agree; the sum may include an observation the buckets do not yet (or vice versa).
  [[nodiscard]] Snapshot snapshot() const;
  [[nodiscard]] const std::vector<double>& bounds() const { return bounds_; }

 private:
  const std::vector<double> bounds_;
  std::vector<std::atomic<uint64_t>> counts_;  // per bucket, not cumulative; last is +Inf
  std::atomic<double> sum_{0};
};

namespace internal {
// Orders label-value lists lexicographically; compares std::string and std::string_view lists.
struct LabelValuesLess {
  using is_transparent = void;
  template <typename A, typename B>
  bool operator()(const A& a, const B& b) const {
    return std::lexicographical_compare(
        a.begin(), a.end(), b.begin(), b.end(),
        [](std::string_view x, std::string_view y) { return x < y; });
  }
};
}  // namespace internal

// Metrics of one type sharing a name and a fixed list of label names; one child per distinct list
// of label values, created on first use. Obtained from Registry::Add*Family.
template <typename T>
class Family {
 public:
  Family(const Family&) = delete;
  Family& operator=(const Family&) = delete;

  // Returns the child for `values`, creating it on first use; the same values always return the
  // same object. Takes a mutex: callers on a hot path keep the reference.
  // REQUIRES: values.size() == label_names().size() (debug builds assert; release builds pad
  // with "" or drop the extra values).
  T& WithLabels(std::initializer_list<std::string_view> values) {
    return WithLabels(std::span<const std::string_view>(values.begin(), values.size()));
  }
  T& WithLabels(std::span<const std::string_view> values);
  T& WithLabels(std::span<const std::string> values);

  [[nodiscard]] const std::vector<std::string>& label_names() const { return label_names_; }

 private:
  friend class Registry;
  struct Child {
    std::string rendered_labels;  // `plan="free",result="allowed"`, escaped
    std::unique_ptr<T> metric;
  };

  Family(std::vector<std::string> label_names, std::vector<double> bounds);

  // Calls fn(rendered_labels, child) for each child in label-value order, holding a reader lock.
  template <typename Fn>
  void ForEachChild(Fn fn) const {
    std::shared_lock lock(mu_);
    for (const auto& [values, child] : children_) fn(child.rendered_labels, *child.metric);
  }

  const std::vector<std::string> label_names_;
  const std::vector<double> bounds_;  // each child's bucket bounds; empty unless T is Histogram
  // std::shared_mutex rather than absl::Mutex: Debian's abseil is not built for ThreadSanitizer,
  // which then cannot see absl::Mutex ordering and reports races that are not there.
  mutable std::shared_mutex mu_;
  std::map<std::vector<std::string>, Child, internal::LabelValuesLess> children_;  // by mu_
};

extern template class Family<Counter>;
extern template class Family<Gauge>;
extern template class Family<Histogram>;
using CounterFamily = Family<Counter>;
using GaugeFamily = Family<Gauge>;
using HistogramFamily = Family<Histogram>;

// Owns metrics and renders them. Registration is meant for start-up (it is linear in the number of
// metrics), though it is safe at any time.
class Registry {
 public:
  Registry();
  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Registering a name again with the same type (and the same label names and bounds) returns the
  // existing metric, so a component created once per thread can register its own metrics.
  Counter& AddCounter(std::string_view name, std::string_view help);
  Gauge& AddGauge(std::string_view name, std::string_view help);
  // `bounds`: bucket upper bounds in seconds, see Histogram.
  Histogram& AddHistogram(std::string_view name, std::string_view help, std::vector<double> bounds);
  CounterFamily& AddCounterFamily(std::string_view name, std::string_view help,
                                  std::vector<std::string> label_names);
  GaugeFamily& AddGaugeFamily(std::string_view name, std::string_view help,
                              std::vector<std::string> label_names);
  HistogramFamily& AddHistogramFamily(std::string_view name, std::string_view help,
                                      std::vector<std::string> label_names,
                                      std::vector<double> bounds);
  // A gauge whose value is `sample()`, called by every Render(). Names of callback gauges are never
  // shared: registering one twice is an error (see the file comment).
  // REQUIRES: `sample` is non-null, stays callable for the Registry's lifetime (or until the last
  // Render), is thread-safe, and does not call into this Registry (Render holds its lock).
  void AddCallbackGauge(std::string_view name, std::string_view help,
                        std::function<double()> sample);
  // The same for a counter kept elsewhere (e.g. an atomic in a module that cannot depend on
  // metrics/): rendered with `# TYPE counter`. `sample` must never decrease.
  void AddCallbackCounter(std::string_view name, std::string_view help,
                          std::function<double()> sample);

  // All metrics in registration order, each with `# HELP` and `# TYPE` lines; the children of a
  // family in label-value order.
  [[nodiscard]] std::string Render() const;

 private:
  struct CallbackCounter {
    std::function<double()> sample;
  };
  void AddCallback(std::string_view name, std::string_view help, std::function<double()> sample,
                   bool counter);
  using Metric =
      std::variant<std::unique_ptr<Counter>, std::unique_ptr<Gauge>, std::unique_ptr<Histogram>,
                   std::unique_ptr<CounterFamily>, std::unique_ptr<GaugeFamily>,
                   std::unique_ptr<HistogramFamily>, std::function<double()>, CallbackCounter>;
  struct Entry {
    std::string name;
    std::string help;
    Metric metric;
  };

  // Registers `fresh` under `name`, or returns the compatible metric already there. `problem` is
  // non-empty if the caller found the registration invalid.
  template <typename M, typename SameShape>
  M& Add(std::string_view name, std::string_view help, std::string problem,
         std::unique_ptr<M> fresh, SameShape same_shape);
  // REQUIRES: mu_ held.
  void Reject(std::string_view name, std::string_view problem, Metric metric);

  mutable std::mutex mu_;         // std::mutex for ThreadSanitizer, as in Family
  std::vector<Entry> entries_;    // guarded by mu_
  std::vector<Metric> rejected_;  // guarded by mu_; kept alive, never rendered
};

}  // namespace sluice::metrics

#endif  // SLUICE_METRICS_METRICS_H_
