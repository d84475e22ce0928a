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
#include "absl/types/span.h"
#include "sluice/config/vocabulary.h"
#include "sluice/limiter/window.h"

namespace sluice::config {
struct Config;  // config/schema.h: only PlanSet::FromConfig takes one
}  // namespace sluice::config

namespace sluice {
inline namespace limiter {

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
  // Identifies the limit's counters in saved state: LimitTag(name, window, the plan's zone). Two
  // plans' limits with the same name and window share counters (usage follows the subject,
  // docs/semantics.md).
  uint32_t tag = 0;
  // A shadow limit is decided, counted and alerted but never denies (docs/semantics.md, Shadow
  // limits): LimitConfig::shadow, or PlanConfig::shadow of its plan.
  bool shadow = false;
  // How it decides (limiter/algorithm.h). sliding and gcra limits have a window of Ns, Nm or Nh.
  config::Algorithm algorithm = config::Algorithm::kFixed;
  // gcra: LimitConfig::burst as configured (0: the quota), and what follows from it and the
  // quota in force (SetRate): the units that may be taken at once, min(burst_config or quota,
  // quota), and the microseconds between two units, ceil(window / quota).
  int64_t burst_config = 0;
  int64_t burst = 0;
  int64_t emission_us = 0;
  // Memo of the current window (shared by copies of this Limit; see WindowCache).
  std::shared_ptr<WindowCache> window_cache = std::make_shared<WindowCache>();
};

// A stable hash of the limit's identity: its name and WindowKey(window, tz), so "daily"/"day" in
// two plans of one zone is one limit, and "daily"/"1h", or "daily"/"day" in another zone, another.
// A sliding or gcra limit's algorithm is part of its identity: changing a limit's algorithm starts
// its state afresh (the old algorithm's state is never read again and expires).
[[nodiscard]] uint32_t LimitTag(std::string_view name, const config::WindowSpec& window,
                                const absl::TimeZone& tz,
                                config::Algorithm algorithm = config::Algorithm::kFixed);

// Sets limit.quota to `quota` and what follows from it for its algorithm (a gcra limit's burst
// and emission interval).
void SetQuota(Limit& limit, int64_t quota);

// Whether `quota` is one the limit's algorithm can enforce (the configuration's rules for a
// sliding or gcra limit; any quota of 0..kMaxUsed for the others): a per-subject override that a
// reload made unfit for its limit is not applied.
[[nodiscard]] bool QuotaFits(const Limit& limit, int64_t quota);
// What state saved before limits were identified by name and window used as their tag: a hash of
// the name alone (the memory store reads old snapshots with it).
[[nodiscard]] uint32_t LegacyLimitTag(std::string_view name);

inline constexpr size_t kMaxThresholds = 16;

// The alert percentages and quotas of every limit of a plan, in the plan's order. A store that
// records fired thresholds as one bit per position in a limit's `thresholds` (the memory store)
// tags what it wrote with the layout's `id`; when a reload adds or removes a percentage, the bits
// are read again by percentage through the old layout instead of being shifted onto other
// thresholds (which would re-send one alert and lose another), and when a limit's quota differs
// (another plan, or a per-subject override) the bits belong to the old quota and the new one
// starts with its own (docs/semantics.md, Alerts).
struct AlertLayout {
  struct LimitAlerts {
    uint16_t tag = 0;           // low 16 bits of Limit::tag (of LegacyLimitTag when `legacy`)
    std::vector<int> percents;  // ascending
    int64_t quota = 0;          // the quota the bits were written under; 0: unknown (old state)
  };
  std::vector<LimitAlerts> limits;
  // Set only for layouts read from a snapshot written before limits were identified by name and
  // window: the tags are LegacyLimitTag's, and the counters written under this layout hold window
  // ids rather than window starts (memory_store.h). With no `limits` (a version-1 snapshot) the
  // fired bits are read position by position.
  bool legacy = false;
  // A hash of everything above, never 0; equal layouts have equal ids (two different layouts
  // share one with probability 2^-32, and would then be read as the same).
  uint32_t id = 0;

  // Computes `id` from the fields above.
  void Seal();
  // The alerts of the limit whose tag is `tag`, or nullptr if there is none.
  [[nodiscard]] const LimitAlerts* Find(uint16_t tag) const;
  // The percentages of the limit whose tag is `tag`, or nullptr if there is none.
  [[nodiscard]] const std::vector<int>* PercentsOf(uint16_t tag) const;
};

struct Plan {
  std::string name;
  absl::TimeZone tz;
  std::vector<Limit> limits;  // at least one
  uint64_t tag = 0;           // stable hash of the name: identifies the plan in saved state
  // An unsettled reservation that expires is charged its estimate (true) or released (false):
  // the plan's on_reservation_expiry.
  bool charge_on_expiry = true;
  // Position in PlanSet::names() (kept by WithQuotas), so per-plan state such as metrics can be
  // kept in a vector; kNoIndex in plans built by hand.
  static constexpr uint32_t kNoIndex = UINT32_MAX;
  uint32_t index = kNoIndex;
  // The plan's alert percentages and quotas (set by PlanSet::FromConfig and WithQuotas; null in
  // plans built by hand, which a store then reads position by position) and their id, copied here
  // for a cheap comparison.
  std::shared_ptr<const AlertLayout> alerts;
  uint32_t alert_layout = 0;

  // Index of the limit named `name` in `limits`, or -1.
  [[nodiscard]] int FindLimit(std::string_view name) const;

  // The effective plan of a subject with per-limit quota overrides: the same plan (name, tag,
  // zone, limits with their names, tags, windows and shared window caches, alert percentages)
  // where limit i has quota `quotas[i]`, its thresholds' counts recomputed as
  // ceil(quotas[i] * percent / 100), and an alert layout of its own (so a store tells the quotas'
  // fired thresholds apart).
  // REQUIRES: quotas.size() == limits.size(); every quota in 0..kMaxUsed (limiter/store.h; 0
  // only for a credit limit).
  [[nodiscard]] Plan WithQuotas(absl::Span<const int64_t> quotas) const;

  // Builds `alerts` and `alert_layout` from `limits` (PlanSet::FromConfig and WithQuotas do).
  void SealAlerts();
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

}  // namespace limiter
}  // namespace sluice

#endif  // SLUICE_LIMITER_PLAN_H_
