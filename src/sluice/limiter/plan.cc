#include "sluice/limiter/plan.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "sluice/common/stable_hash.h"
#include "sluice/common/strings.h"

namespace sluice {

void AlertLayout::Seal() {
  std::string bytes;
  for (const LimitAlerts& l : limits) {
    absl::StrAppend(&bytes, l.tag, ":");
    for (int p : l.percents) absl::StrAppend(&bytes, p, ",");
    bytes.push_back(';');
  }
  id = static_cast<uint32_t>(StableHash64(bytes));
  if (id == 0) id = 1;  // 0 stands for "no layout"
}

const std::vector<int>* AlertLayout::PercentsOf(uint16_t tag) const {
  for (const LimitAlerts& l : limits) {
    if (l.tag == tag) return &l.percents;
  }
  return nullptr;
}

int Plan::FindLimit(std::string_view limit_name) const {
  for (size_t i = 0; i < limits.size(); ++i) {
    if (limits[i].name == limit_name) return static_cast<int>(i);
  }
  return -1;
}

absl::StatusOr<PlanSet> PlanSet::FromConfig(const config::Config& config) {
  PlanSet set;
  for (const config::PlanConfig& pc : config.plans) {
    auto plan = std::make_unique<Plan>();
    plan->name = pc.name;
    plan->tag = StableHash64(pc.name);
    if (!absl::LoadTimeZone(pc.timezone, &plan->tz)) {
      return absl::InvalidArgumentError(
          absl::StrCat("plans.", pc.name, ".timezone: unknown time zone \"", pc.timezone, "\""));
    }
    for (const config::LimitConfig& lc : pc.limits) {
      Limit limit{.name = lc.name,
                  .quota = lc.quota,
                  .window = lc.window,
                  .thresholds = {},
                  .tag = static_cast<uint32_t>(StableHash64(lc.name)),
                  .window_cache = std::make_shared<WindowCache>()};
      for (int percent : lc.alert_at) {
        // ceil(quota * percent / 100) without overflow: quota <= 1e15, percent <= 100.
        int64_t count = (lc.quota * percent + 99) / 100;
        limit.thresholds.push_back({.percent = percent, .count = count});
      }
      plan->limits.push_back(std::move(limit));
    }
    auto alerts = std::make_shared<AlertLayout>();
    for (const Limit& limit : plan->limits) {
      AlertLayout::LimitAlerts& l = alerts->limits.emplace_back();
      l.tag = static_cast<uint16_t>(limit.tag);
      for (const Threshold& th : limit.thresholds) l.percents.push_back(th.percent);
    }
    alerts->Seal();
    plan->alert_layout = alerts->id;
    plan->alerts = std::move(alerts);
    set.names_.push_back(pc.name);
    set.plans_.emplace(pc.name, std::move(plan));
  }
  return set;
}

const Plan* PlanSet::Find(std::string_view name) const {
  auto it = plans_.find(ToAbsl(name));
  return it == plans_.end() ? nullptr : it->second.get();
}

}  // namespace sluice
