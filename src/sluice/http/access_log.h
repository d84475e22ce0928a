// The access log of decisions (server.access_log, docs/operations.md): one JSON line with msg
// "access" on the log stream per logged decision of /v1/check and /v1/authorize.
//
//   if (fe.server.access_log.mode != config::AccessLogMode::kOff) {  // the only cost when off
//     if (log.Wants(fe.server.access_log, entry.allowed, entry.degraded) &&
//         log.Admit(fe.server.access_log.max_per_second, now_seconds)) {
//       AccessLog::Write(entry);
//     }
//   }
//
// A line names the key by its registry id only: never the key, nor its digest.
//
// Thread-safe: Wants and Admit are a few relaxed atomic operations.
#ifndef SLUICE_HTTP_ACCESS_LOG_H_
#define SLUICE_HTTP_ACCESS_LOG_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/config/config.h"
#include "sluice/limiter/store.h"
#include "sluice/metrics/metrics.h"

namespace sluice::http {

// What one line says about a decision.
struct AccessEntry {
  bool decided = false;    // set once a decision was made (requests refused before are not logged)
  std::string_view route;  // "/v1/check" or "/v1/authorize"
  unsigned status = 0;     // the response's status code
  std::string subject;
  std::string plan;
  uint64_t key_id = 0;  // the registry key that named the subject; 0: none (or a file's key)
  int64_t cost = 0;
  bool allowed = false;
  bool degraded = false;
  StoreFailure failure = StoreFailure::kOther;  // when degraded
  // The first limit the request violated (in plan order), when it was denied by one.
  std::string limit;  // "": none
  std::string window;
  int64_t used = 0;
  int64_t quota = 0;
  int64_t retry_after = 0;
  // The shadow limits that would have denied the request (LimitDecision::would_deny), plan order.
  std::vector<std::string> shadow_denied;
  std::string client;  // the client address (through trusted proxies)
  int64_t latency_us = 0;
};

class AccessLog {
 public:
  // `dropped` counts lines over the per-second cap; may be null. `seed` seeds the sampler.
  explicit AccessLog(metrics::Counter* dropped, uint64_t seed = 0x9e3779b97f4a7c15ULL)
      : dropped_(dropped), rng_(seed) {}
  AccessLog(const AccessLog&) = delete;
  AccessLog& operator=(const AccessLog&) = delete;

  // Whether `cfg` logs a decision with this outcome: under denied, denials and degraded answers;
  // under all, those and a `cfg.sample` share of allowed decisions (drawn at random); under off,
  // nothing.
  [[nodiscard]] bool Wants(const config::AccessLogConfig& cfg, bool allowed, bool degraded);

  // Takes one line's place within `max_per_second` lines in the second `now_seconds` (any
  // monotonic count of seconds); false (and `dropped` counted) when the second's lines are spent.
  // Two threads crossing into a new second together may let a few lines more through.
  [[nodiscard]] bool Admit(int max_per_second, int64_t now_seconds);

  // Writes the line at level info: route, status, subject, plan, key_id (only when set), cost,
  // allowed, degraded, store_error (only when degraded), limit, window, used, quota, retry_after
  // (only when a limit denied), shadow_denied (only when a shadow limit would have denied), client,
  // latency_us.
  static void Write(const AccessEntry& entry);

 private:
  metrics::Counter* dropped_;
  std::atomic<uint64_t> rng_;        // splitmix64 state
  std::atomic<int64_t> second_{-1};  // the second `count_` counts in
  std::atomic<int64_t> count_{0};    // lines admitted in `second_`
};

}  // namespace sluice::http

#endif  // SLUICE_HTTP_ACCESS_LOG_H_
