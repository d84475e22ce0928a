#include "sluice/metrics/metrics.h"

#include <cassert>
#include <charconv>
#include <cmath>
#include <type_traits>
#include <utility>

#include "sluice/common/log.h"

namespace sluice::metrics {
namespace {

std::vector<double> SanitizeBounds(std::vector<double> bounds) {
  std::erase_if(bounds, [](double b) { return !std::isfinite(b); });
  std::sort(bounds.begin(), bounds.end());
  bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
  return bounds;
}

bool IsNameChar(char c, bool allow_colon, bool first) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') return true;
  if (c == ':') return allow_colon;
  return !first && c >= '0' && c <= '9';
}

bool IsValidName(std::string_view name, bool allow_colon) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (!IsNameChar(name[i], allow_colon, i == 0)) return false;
  }
  return true;
}

// Returns what is wrong with a metric name and its label names, or "" if nothing is.
std::string CheckNames(std::string_view name, const std::vector<std::string>& label_names,
                       bool is_histogram) {
  if (!IsValidName(name, /*allow_colon=*/true)) {
    return "metric name must match [a-zA-Z_:][a-zA-Z0-9_:]*";
  }
  for (size_t i = 0; i < label_names.size(); ++i) {
    const std::string& label = label_names[i];
    if (!IsValidName(label, /*allow_colon=*/false)) {
      return "label name \"" + label + "\" must match [a-zA-Z_][a-zA-Z0-9_]*";
    }
    if (label.starts_with("__")) return "label name \"" + label + "\" is reserved (\"__\")";
    if (is_histogram && label == "le") return "label name \"le\" is reserved for histograms";
    if (std::find(label_names.begin(), label_names.begin() + i, label) != label_names.begin() + i) {
      return "label name \"" + label + "\" is repeated";
    }
  }
  return "";
}

void AppendEscaped(std::string& out, std::string_view s, bool escape_quote) {
  for (char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && escape_quote) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
}

template <typename Int>
void AppendInt(std::string& out, Int v) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  out.append(buf, end);
}

// The fewest digits that read back as the same double, laid out as Go's strconv.FormatFloat(v, 'g',
// -1, 64) does (what Prometheus' own clients print): fixed notation for exponents in [-4, 6), so
// 0.0001 stays "0.0001" where std::to_chars alone would pick the shorter "1e-04". Prometheus
// spellings for NaN and the infinities.
void AppendDouble(std::string& out, double v) {
  if (std::isnan(v)) {
    out += "NaN";
    return;
  }
  if (std::isinf(v)) {
    out += v > 0 ? "+Inf" : "-Inf";
    return;
  }
  char buf[64];
  char* end = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific).ptr;
  const char* e = std::find(buf, end, 'e');
  int exponent = 0;
  std::from_chars(e + (e[1] == '+' ? 2 : 1), end, exponent);
  if (exponent >= -4 && exponent < 6) {
    end = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::fixed).ptr;
  }
  out.append(buf, end);
}

// Appends `name{labels} ` (or `name ` without labels); the caller appends the value and newline.
void AppendSeries(std::string& out, std::string_view name, std::string_view suffix,
                  std::string_view labels) {
  out += name;
  out += suffix;
  if (!labels.empty()) {
    out += '{';
    out += labels;
    out += '}';
  }
  out += ' ';
}

void AppendSamples(std::string& out, std::string_view name, std::string_view labels,
                   const Counter& c) {
  AppendSeries(out, name, "", labels);
  AppendInt(out, c.value());
  out += '\n';
}

void AppendSamples(std::string& out, std::string_view name, std::string_view labels,
                   const Gauge& g) {
  AppendSeries(out, name, "", labels);
  AppendInt(out, g.value());
  out += '\n';
}

void AppendSamples(std::string& out, std::string_view name, std::string_view labels,
                   const Histogram& h) {
  const Histogram::Snapshot snap = h.snapshot();
  std::string bucket_labels(labels);
  if (!bucket_labels.empty()) bucket_labels += ',';
  const size_t prefix = bucket_labels.size();
  for (size_t i = 0; i < snap.cumulative.size(); ++i) {
    bucket_labels.resize(prefix);
    bucket_labels += "le=\"";
    if (i < h.bounds().size()) {
      AppendDouble(bucket_labels, h.bounds()[i]);
    } else {
      bucket_labels += "+Inf";
    }
    bucket_labels += '"';
    AppendSeries(out, name, "_bucket", bucket_labels);
    AppendInt(out, snap.cumulative[i]);
    out += '\n';
  }
  AppendSeries(out, name, "_sum", labels);
  AppendDouble(out, snap.sum);
  out += '\n';
  AppendSeries(out, name, "_count", labels);
  AppendInt(out, snap.count);
  out += '\n';
}

std::string RenderLabelPairs(const std::vector<std::string>& names,
                             std::span<const std::string_view> values) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += ',';
    out += names[i];
    out += "=\"";
    AppendEscaped(out, values[i], /*escape_quote=*/true);
    out += '"';
  }
  return out;
}

template <typename T>
constexpr std::string_view TypeName() {
  if constexpr (std::is_same_v<T, Counter> || std::is_same_v<T, CounterFamily>) {
    return "counter";
  } else if constexpr (std::is_same_v<T, Histogram> || std::is_same_v<T, HistogramFamily>) {
    return "histogram";
  } else {
    return "gauge";
  }
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(SanitizeBounds(std::move(bounds))), counts_(bounds_.size() + 1) {}

void Histogram::Observe(double seconds) {
  if (std::isnan(seconds)) return;
  const size_t bucket = std::lower_bound(bounds_.begin(), bounds_.end(), seconds) - bounds_.begin();
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(seconds, std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot snap;
  snap.cumulative.reserve(counts_.size());
  for (const std::atomic<uint64_t>& c : counts_) {
    snap.count += c.load(std::memory_order_relaxed);
    snap.cumulative.push_back(snap.count);
  }
  snap.sum = sum_.load(std::memory_order_relaxed);
  return snap;
}

template <typename T>
Family<T>::Family(std::vector<std::string> label_names, std::vector<double> bounds)
    : label_names_(std::move(label_names)), bounds_(SanitizeBounds(std::move(bounds))) {}

template <typename T>
T& Family<T>::WithLabels(std::span<const std::string_view> values) {
  assert(values.size() == label_names_.size() && "WithLabels: wrong number of label values");
  std::vector<std::string_view> fixed;
  if (values.size() != label_names_.size()) {
    fixed.assign(values.begin(), values.begin() + std::min(values.size(), label_names_.size()));
    fixed.resize(label_names_.size());
    values = fixed;
  }
  {
    std::shared_lock lock(mu_);
    if (auto it = children_.find(values); it != children_.end()) return *it->second.metric;
  }
  std::unique_lock lock(mu_);
  auto it = children_.find(values);
  if (it == children_.end()) {
    std::unique_ptr<T> child;
    if constexpr (std::is_same_v<T, Histogram>) {
      child = std::make_unique<Histogram>(bounds_);
    } else {
      child = std::make_unique<T>();
    }
    it = children_
             .emplace(std::vector<std::string>(values.begin(), values.end()),
                      Child{RenderLabelPairs(label_names_, values), std::move(child)})
             .first;
  }
  return *it->second.metric;
}

template <typename T>
T& Family<T>::WithLabels(std::span<const std::string> values) {
  std::vector<std::string_view> views(values.begin(), values.end());
  return WithLabels(std::span<const std::string_view>(views));
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

Registry::Registry() = default;
Registry::~Registry() = default;

template <typename M, typename SameShape>
M& Registry::Add(std::string_view name, std::string_view help, std::string problem,
                 std::unique_ptr<M> fresh, SameShape same_shape) {
  M& metric = *fresh;
  std::lock_guard lock(mu_);
  if (problem.empty()) {
    auto existing = std::find_if(entries_.begin(), entries_.end(),
                                 [&](const Entry& e) { return e.name == name; });
    if (existing == entries_.end()) {
      entries_.push_back({std::string(name), std::string(help), std::move(fresh)});
      return metric;
    }
    if (auto* held = std::get_if<std::unique_ptr<M>>(&existing->metric);
        held != nullptr && same_shape(**held)) {
      return **held;
    }
    problem = "name already registered with another type, label names or bounds";
  }
  Reject(name, problem, std::move(fresh));
  return metric;
}

void Registry::Reject(std::string_view name, std::string_view problem, Metric metric) {
  Log(LogLevel::kError, "metric rejected; it will not be rendered")
      .Str("name", name)
      .Str("problem", problem);
  assert(false && "invalid metric registration (see the log line above)");
  rejected_.push_back(std::move(metric));
}

Counter& Registry::AddCounter(std::string_view name, std::string_view help) {
  return Add(name, help, CheckNames(name, {}, false), std::make_unique<Counter>(),
             [](const Counter&) { return true; });
}

Gauge& Registry::AddGauge(std::string_view name, std::string_view help) {
  return Add(name, help, CheckNames(name, {}, false), std::make_unique<Gauge>(),
             [](const Gauge&) { return true; });
}

Histogram& Registry::AddHistogram(std::string_view name, std::string_view help,
                                  std::vector<double> bounds) {
  auto fresh = std::make_unique<Histogram>(std::move(bounds));
  const std::vector<double>& b = fresh->bounds();
  return Add(name, help, CheckNames(name, {}, true), std::move(fresh),
             [&b](const Histogram& h) { return h.bounds() == b; });
}

CounterFamily& Registry::AddCounterFamily(std::string_view name, std::string_view help,
                                          std::vector<std::string> label_names) {
  std::string problem = CheckNames(name, label_names, false);
  std::unique_ptr<CounterFamily> fresh(new CounterFamily(std::move(label_names), {}));
  const std::vector<std::string>& labels = fresh->label_names();
  return Add(name, help, std::move(problem), std::move(fresh),
             [&labels](const CounterFamily& f) { return f.label_names() == labels; });
}

GaugeFamily& Registry::AddGaugeFamily(std::string_view name, std::string_view help,
                                      std::vector<std::string> label_names) {
  std::string problem = CheckNames(name, label_names, false);
  std::unique_ptr<GaugeFamily> fresh(new GaugeFamily(std::move(label_names), {}));
  const std::vector<std::string>& labels = fresh->label_names();
  return Add(name, help, std::move(problem), std::move(fresh),
             [&labels](const GaugeFamily& f) { return f.label_names() == labels; });
}

HistogramFamily& Registry::AddHistogramFamily(std::string_view name, std::string_view help,
                                              std::vector<std::string> label_names,
                                              std::vector<double> bounds) {
  std::string problem = CheckNames(name, label_names, true);
  std::unique_ptr<HistogramFamily> fresh(
      new HistogramFamily(std::move(label_names), std::move(bounds)));
  const HistogramFamily& want = *fresh;
  return Add(name, help, std::move(problem), std::move(fresh), [&want](const HistogramFamily& f) {
    return f.label_names() == want.label_names() && f.bounds_ == want.bounds_;
  });
}

void Registry::AddCallbackGauge(std::string_view name, std::string_view help,
                                std::function<double()> sample) {
  AddCallback(name, help, std::move(sample), /*counter=*/false);
}

void Registry::AddCallbackCounter(std::string_view name, std::string_view help,
                                  std::function<double()> sample) {
  AddCallback(name, help, std::move(sample), /*counter=*/true);
}

void Registry::AddCallback(std::string_view name, std::string_view help,
                           std::function<double()> sample, bool counter) {
  std::string problem = CheckNames(name, {}, /*is_histogram=*/false);
  if (problem.empty() && !sample) problem = "callback gauge without a callback";
  std::lock_guard lock(mu_);
  if (problem.empty() && std::any_of(entries_.begin(), entries_.end(),
                                     [&](const Entry& e) { return e.name == name; })) {
    problem = "name already registered";
  }
  if (!problem.empty()) {
    Reject(name, problem, std::move(sample));
    return;
  }
  if (counter) {
    entries_.push_back({std::string(name), std::string(help), CallbackCounter{std::move(sample)}});
  } else {
    entries_.push_back({std::string(name), std::string(help), std::move(sample)});
  }
}

std::string Registry::Render() const {
  std::string out;
  std::lock_guard lock(mu_);
  for (const Entry& e : entries_) {
    std::visit(
        [&](const auto& metric) {
          using M = std::decay_t<decltype(metric)>;
          out += "# HELP ";
          out += e.name;
          out += ' ';
          AppendEscaped(out, e.help, /*escape_quote=*/false);
          out += "\n# TYPE ";
          out += e.name;
          out += ' ';
          if constexpr (std::is_same_v<M, std::function<double()>>) {
            out += "gauge\n";
            AppendSeries(out, e.name, "", "");
            AppendDouble(out, metric());
            out += '\n';
          } else if constexpr (std::is_same_v<M, CallbackCounter>) {
            out += "counter\n";
            AppendSeries(out, e.name, "", "");
            AppendDouble(out, metric.sample());
            out += '\n';
          } else {
            using T = typename M::element_type;
            out += TypeName<T>();
            out += '\n';
            if constexpr (std::is_same_v<T, Counter> || std::is_same_v<T, Gauge> ||
                          std::is_same_v<T, Histogram>) {
              AppendSamples(out, e.name, "", *metric);
            } else {
              metric->ForEachChild([&](std::string_view labels, const auto& child) {
                AppendSamples(out, e.name, labels, child);
              });
            }
          }
        },
        e.metric);
  }
  return out;
}

}  // namespace sluice::metrics
