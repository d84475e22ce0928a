// The limits sluice enforces, built once from a validated Config and immutable afterwards.
#ifndef SLUICE_LIMITER_PLAN_H_
#define SLUICE_LIMITER_PLAN_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "sluice/config/config.h"
#include "sluice/limiter/window.h"

namespace sluice {

// An alert threshold of a limit: fires when `used >= count` (count = ceil(quota * percent / 100)).
struct Threshold {
  int percent = 0;
  int64_t count = 0;
};

struct Limit {
  std::string name;
  int64_t quota = 0;
  config::WindowSpec window;
  std::vector<Threshold> thresholds;  // ascending by percent; at most kMaxThresholds
  uint32_t tag = 0;  // stable hash of the name: identifies the limit in saved state
  // Memo of the current window (shared by copies of this Limit; see WindowCache).
  std::shared_ptr<WindowCache> window_cache = std::make_shared<WindowCache>();
};

inline constexpr size_t kMaxThresholds = 16;

// The alert percentages of every limit of a plan, in the plan's order. A store that records fired
// thresholds as one bit per position in a limit's `thresholds` (the memory store) tags what it
// wrote with the layout's `id`; when a reload adds or removes a percentage, the bits are read
// again by percentage through the old layout instead of being shifted onto other thresholds (which
// would re-send one alert and lose another).
struct AlertLayout {
  struct LimitAlerts {
    uint16_t tag = 0;           // low 16 bits of Limit::tag
    std::vector<int> percents;  // ascending
  };
  std::vector<LimitAlerts> limits;
  // A hash of `limits`, never 0; equal layouts have equal ids (two different layouts of one plan
  // share one with probability 2^-32, and would then be read as the same).
  uint32_t id = 0;

  // Computes `id` from `limits`.
  void Seal();
  // The percentages of the limit whose tag is `tag`, or nullptr if there is none.
  [[nodiscard]] const std::vector<int>* PercentsOf(uint16_t tag) const;
};

struct Plan {
  std::string name;
  absl::TimeZone tz;
  std::vector<Limit> limits;  // at least one
  uint64_t tag = 0;           // stable hash of the name: identifies the plan in saved state
  // The plan's alert percentages (set by PlanSet::FromConfig; null in plans built by hand, which a
  // store then reads position by position) and their id, copied here for a cheap comparison.
  std::shared_ptr<const AlertLayout> alerts;
  uint32_t alert_layout = 0;

  // Index of the limit named `name` in `limits`, or -1.
  [[nodiscard]] int FindLimit(std::string_view name) const;
};

// Every plan of a configuration. Plan pointers stay valid for the PlanSet's lifetime.
class PlanSet {
 public:
  // REQUIRES: `config` came from config::ParseConfig (already validated); a time zone that cannot
  // be loaded is still reported as an error rather than assumed.
  [[nodiscard]] static absl::StatusOr<PlanSet> FromConfig(const config::Config& config);

  // The plan named `name`, or nullptr.
  [[nodiscard]] const Plan* Find(std::string_view name) const;
  [[nodiscard]] size_t size() const { return plans_.size(); }
  // Plan names in configuration order.
  [[nodiscard]] const std::vector<std::string>& names() const { return names_; }

 private:
  // Shared so that copies of a PlanSet (cheap) hand out the same Plan pointers.
  absl::flat_hash_map<std::string, std::shared_ptr<const Plan>> plans_;
  std::vector<std::string> names_;
};

}  // namespace sluice

#endif  // SLUICE_LIMITER_PLAN_H_
