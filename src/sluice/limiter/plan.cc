#include "sluice/limiter/plan.h"

#include <algorithm>
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

uint32_t LimitTag(std::string_view name, const config::WindowSpec& window, const absl::TimeZone& tz,
                  config::Algorithm algorithm) {
  std::string identity(name);
  identity.push_back('\0');  // names have no NUL: (name, window) is unambiguous
  identity.append(WindowKey(window, tz));
  // Fixed limits keep the tag they always had.
  if (algorithm != config::Algorithm::kFixed) {
    identity.push_back('\0');
    identity.append(config::AlgorithmName(algorithm));
  }
  return static_cast<uint32_t>(StableHash64(identity));
}

void SetQuota(Limit& limit, int64_t quota) {
  limit.quota = quota;
  for (Threshold& th : limit.thresholds) th.count = ThresholdCount(quota, th.percent);
  if (limit.algorithm != config::Algorithm::kGcra || quota <= 0) return;
  limit.burst = limit.burst_config > 0 ? std::min(limit.burst_config, quota) : quota;
  const int64_t window_us = absl::ToInt64Microseconds(limit.window.length);
  limit.emission_us = (window_us + quota - 1) / quota;
}

bool QuotaFits(const Limit& limit, int64_t quota) {
  switch (limit.algorithm) {
    case config::Algorithm::kFixed:
      return true;
    case config::Algorithm::kSliding:
      return quota >= 1 && quota <= config::kMaxSlidingCount;
    case config::Algorithm::kGcra: {
      const int64_t window_us = absl::ToInt64Microseconds(limit.window.length);
      return quota >= 1 && quota <= window_us &&
             (window_us % quota == 0 || window_us / quota >= 1000);
    }
  }
  return false;
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
    SetQuota(plan.limits[i], quotas[i]);
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
                  .tag = LimitTag(lc.name, lc.window, plan->tz, lc.algorithm),
                  .shadow = lc.shadow || pc.shadow,
                  .algorithm = lc.algorithm,
                  .burst_config = lc.burst,
                  .window_cache = std::make_shared<WindowCache>()};
      for (int percent : lc.alert_at) limit.thresholds.push_back({.percent = percent});
      SetQuota(limit, lc.quota);
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
