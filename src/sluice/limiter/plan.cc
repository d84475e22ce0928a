#include "sluice/limiter/plan.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "sluice/common/stable_hash.h"
#include "sluice/common/strings.h"
#include "sluice/config/schema.h"

namespace sluice {
inline namespace limiter {

namespace {

// ceil(quota * percent / 100) without overflow: quota <= 1e15, percent <= 100.
int64_t ThresholdCount(int64_t quota, int percent) { return (quota * percent + 99) / 100; }

}  // namespace

uint32_t LimitTag(std::string_view name, const config::WindowSpec& window,
                  const absl::TimeZone& tz) {
  std::string identity(name);
  identity.push_back('\0');  // names have no NUL: (name, window) is unambiguous
  identity.append(WindowKey(window, tz));
  return static_cast<uint32_t>(StableHash64(identity));
}

uint32_t LegacyLimitTag(std::string_view name) { return static_cast<uint32_t>(StableHash64(name)); }

void AlertLayout::Seal() {
  std::string bytes = legacy ? "legacy;" : "";
  for (const LimitAlerts& l : limits) {
    absl::StrAppend(&bytes, l.tag, ":");
    for (int p : l.percents) absl::StrAppend(&bytes, p, ",");
    // A quota only when known, so that layouts without quotas keep the ids they always had.
    if (l.quota != 0) absl::StrAppend(&bytes, "q", l.quota);
    bytes.push_back(';');
  }
  id = static_cast<uint32_t>(StableHash64(bytes));
  if (id == 0) id = 1;  // 0 stands for "no layout"
}

const AlertLayout::LimitAlerts* AlertLayout::Find(uint16_t tag) const {
  for (const LimitAlerts& l : limits) {
    if (l.tag == tag) return &l;
  }
  return nullptr;
}

const std::vector<int>* AlertLayout::PercentsOf(uint16_t tag) const {
  const LimitAlerts* l = Find(tag);
  return l == nullptr ? nullptr : &l->percents;
}

int Plan::FindLimit(std::string_view limit_name) const {
  for (size_t i = 0; i < limits.size(); ++i) {
    if (limits[i].name == limit_name) return static_cast<int>(i);
  }
  return -1;
}

Plan Plan::WithQuotas(absl::Span<const int64_t> quotas) const {
  Plan plan = *this;  // Limit copies share their window caches
  for (size_t i = 0; i < plan.limits.size() && i < quotas.size(); ++i) {
    Limit& limit = plan.limits[i];
    limit.quota = quotas[i];
    for (Threshold& th : limit.thresholds) th.count = ThresholdCount(limit.quota, th.percent);
  }
  plan.SealAlerts();
  return plan;
}

void Plan::SealAlerts() {
  auto layout = std::make_shared<AlertLayout>();
  for (const Limit& limit : limits) {
    AlertLayout::LimitAlerts& l = layout->limits.emplace_back();
    l.tag = static_cast<uint16_t>(limit.tag);
    l.quota = limit.quota;
    for (const Threshold& th : limit.thresholds) l.percents.push_back(th.percent);
  }
  layout->Seal();
  alert_layout = layout->id;
  alerts = std::move(layout);
}

absl::StatusOr<PlanSet> PlanSet::FromConfig(const config::Config& config) {
  PlanSet set;
  for (const config::PlanConfig& pc : config.plans) {
    auto plan = std::make_unique<Plan>();
    plan->name = pc.name;
    plan->tag = StableHash64(pc.name);
    plan->charge_on_expiry =
        pc.on_reservation_expiry == config::PlanConfig::OnReservationExpiry::kCharge;
    plan->index = static_cast<uint32_t>(set.names_.size());
    if (!absl::LoadTimeZone(pc.timezone, &plan->tz)) {
      return absl::InvalidArgumentError(
          absl::StrCat("plans.", pc.name, ".timezone: unknown time zone \"", pc.timezone, "\""));
    }
    for (const config::LimitConfig& lc : pc.limits) {
      Limit limit{.name = lc.name,
                  .quota = lc.quota,
                  .window = lc.window,
                  .thresholds = {},
                  .tag = LimitTag(lc.name, lc.window, plan->tz),
                  .shadow = lc.shadow || pc.shadow,
                  .window_cache = std::make_shared<WindowCache>()};
      for (int percent : lc.alert_at) {
        limit.thresholds.push_back(
            {.percent = percent, .count = ThresholdCount(lc.quota, percent)});
      }
      plan->limits.push_back(std::move(limit));
    }
    plan->SealAlerts();
    set.names_.push_back(pc.name);
    set.plans_.emplace(pc.name, std::move(plan));
  }
  return set;
}

const Plan* PlanSet::Find(std::string_view name) const {
  auto it = plans_.find(ToAbsl(name));
  return it == plans_.end() ? nullptr : it->second.get();
}

}  // namespace limiter
}  // namespace sluice
