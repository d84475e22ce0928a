#include "sluice/http/access_log.h"

#include "sluice/common/log.h"
#include "sluice/registry/model.h"

namespace sluice::http {
namespace {

// splitmix64's output function.
uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

bool AccessLog::Wants(const config::AccessLogConfig& cfg, bool allowed, bool degraded) {
  if (cfg.mode == config::AccessLogMode::kOff) return false;
  if (!allowed || degraded) return true;
  if (cfg.mode != config::AccessLogMode::kAll || cfg.sample <= 0) return false;
  if (cfg.sample >= 1) return true;
  const uint64_t draw = Mix(rng_.fetch_add(0x9e3779b97f4a7c15ULL, std::memory_order_relaxed));
  // The top 53 bits as a uniform double in [0, 1).
  return static_cast<double>(draw >> 11) * 0x1.0p-53 < cfg.sample;
}

bool AccessLog::Admit(int max_per_second, int64_t now_seconds) {
  // The second only moves forward: a thread that read the clock before being preempted (an older
  // second) counts against the current one instead of restarting the count.
  int64_t second = second_.load(std::memory_order_relaxed);
  if (now_seconds > second &&
      second_.compare_exchange_strong(second, now_seconds, std::memory_order_relaxed)) {
    count_.store(0, std::memory_order_relaxed);
  }
  if (count_.fetch_add(1, std::memory_order_relaxed) < max_per_second) return true;
  if (dropped_ != nullptr) dropped_->Inc();
  return false;
}

void AccessLog::Write(const AccessEntry& e) {
  Log line(LogLevel::kInfo, "access");
  line.Str("route", e.route).Int("status", e.status).Str("subject", e.subject).Str("plan", e.plan);
  if (e.key_id != 0) line.Str("key_id", registry::KeyIdText(e.key_id));
  line.Int("cost", e.cost).Bool("allowed", e.allowed).Bool("degraded", e.degraded);
  if (e.degraded) line.Str("store_error", StoreFailureName(e.failure));
  if (!e.limit.empty()) {
    line.Str("limit", e.limit)
        .Str("window", e.window)
        .Int("used", e.used)
        .Int("quota", e.quota)
        .Int("retry_after", e.retry_after);
  }
  if (!e.shadow_denied.empty()) line.StrList("shadow_denied", e.shadow_denied);
  line.Str("client", e.client).Int("latency_us", e.latency_us);
}

}  // namespace sluice::http
