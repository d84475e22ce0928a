// What a libsluice Limiter is built from (sluice/limiter.h): plans and their limits, the store,
// the store-error policy, where alerts go and the clock. Every field has a default except the
// plans. The options are checked by the same validation as sluice.yaml (docs/configuration.md),
// and an error names the field the way the file would: "plans.free.limits[1].window: bad window
// \"5x\" (want Ns, Nm, Nh, day, week, month or year)".
//
// Only the standard library is used, so this header compiles with nothing but the install prefix
// on the include path.
#ifndef SLUICE_OPTIONS_H_
#define SLUICE_OPTIONS_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <variant>
#include <vector>

namespace sluice::lib {

// One limit of a plan: at most `quota` units per window (docs/semantics.md).
struct LimitOptions {
  std::string name;   // 1-64 of [A-Za-z0-9_.-], unique within the plan
  int64_t quota = 0;  // 1..10^15
  // "Ns", "Nm", "Nh" (aligned to the Unix epoch, at most 31 days: "744h"), or a calendar period
  // from local midnight in the plan's time zone: "day", "week" (an ISO week, from Monday),
  // "month" or "year" (from January 1); or "concurrent": at most `quota` reservations in flight.
  std::string window;
  // Alert thresholds, percentages 1..100 of the quota (at most 16, any order, no repeats).
  std::vector<int> alert_at;
  // A shadow limit: decided, counted and alerted, but never denies (docs/semantics.md).
  bool shadow = false;
};

struct PlanOptions {
  std::string name;                  // 1-64 of [A-Za-z0-9_.-], unique
  std::string timezone = "UTC";      // an IANA name; decides where calendar windows begin
  std::vector<LimitOptions> limits;  // at least one
  bool shadow = false;               // every limit is a shadow limit
  // A reservation not ended by its expiry is released without charge (else charged its
  // estimate, the default: the work was probably done).
  bool release_on_expiry = false;
};

// Counters in this process. With a snapshot path they survive a restart: loaded when the limiter
// opens, saved every `snapshot_interval` and when it closes.
struct MemoryStoreOptions {
  std::string snapshot_path;                          // "": nothing is saved
  std::chrono::milliseconds snapshot_interval{1000};  // 100ms..1h
};

// How a TLS connection verifies the server (docs/redis.md, TLS): with a rediss:// URL, or with
// cluster_nodes (to every node of the cluster).
struct RedisTlsOptions {
  std::string ca_file;      // PEM CAs the server's certificate must chain to; "": the system's
  std::string cert_file;    // PEM client certificate for mutual TLS, with key_file; "": none
  std::string key_file;     // its unencrypted PEM private key
  std::string server_name;  // the name the certificate must carry (and SNI); "": the URL's host
  // With cluster_nodes: TLS to every node, as is any field above set (all empty: the system's
  // trust store and each node's announced address). With `url` the rediss:// scheme turns TLS on
  // instead, and this stays false.
  bool enabled = false;
};

// Counters in Redis, shared by every process that uses the same server and key prefix.
struct RedisStoreOptions {
  // redis://[user:password@]host:port/db, or rediss://… for TLS
  std::string url = "redis://127.0.0.1:6379/0";
  std::string password;           // "": the URL's (with cluster_nodes: the default user's)
  std::string key_prefix = "sl";  // 1-32 of [A-Za-z0-9_.-]
  // How long a decision waits for Redis before it is answered per `on_store_error` (1ms..10s).
  std::chrono::milliseconds timeout{20};
  RedisTlsOptions tls;
  // Redis Cluster instead of `url` (leave `url` as it is): seed nodes "host:port" (IPv6 in
  // brackets). The library discovers the slot map, follows MOVED and ASK, and sends each decision
  // to the master of its slot (docs/redis.md, Redis Cluster). Empty: one Redis at `url`.
  std::vector<std::string> cluster_nodes;
  // With cluster_nodes: the ACL user every node's connection authenticates as, with `password`
  // (required then). "": the default user. (A single Redis takes its user in `url`.)
  std::string username;
};

// What a decision answers when the store cannot answer in time (the Decision says `degraded`).
enum class OnStoreError { kAllow, kDeny };

// A quota alert: `subject` reached `threshold`% of `limit` in the window [window_start,
// window_end). Each threshold fires at most once per subject, limit, window and quota.
struct AlertEvent {
  std::string id;  // "qa_" + 32 hex digits, stable for the same alert in any process
  std::string subject;
  std::string plan;
  std::string limit;
  int threshold = 0;  // percent
  int64_t used = 0;   // the counter when it fired
  int64_t quota = 0;
  std::chrono::system_clock::time_point window_start;
  std::chrono::system_clock::time_point window_end;
  std::chrono::system_clock::time_point occurred_at;
};

// Receives alert events on one of the library's alert threads (never a thread that called
// Decide); may be called from several of them at once, so it must be thread-safe. It should return
// quickly. An event is delivered at least once: after a crash it may come again, with the same id.
// An exception it throws is caught and counts as a failed delivery that is not retried.
using AlertCallback = std::function<void(const AlertEvent&)>;

// A Standard Webhooks receiver (docs/alerts.md): POSTs the event as JSON, retried with backoff.
struct WebhookOptions {
  std::string url;     // http:// or https://
  std::string secret;  // "whsec_" + base64; "": unsigned
};

struct AlertOptions {
  std::vector<WebhookOptions> webhooks;
  AlertCallback callback;  // empty: none
};

// Where a Limiter reads the time (Options::clock), for a program that keeps its own (a test that
// moves time forward instead of waiting for it, say). Now() is called from any thread, several at
// once (every thread that decides, the library's I/O, maintainer and alert threads): it must be
// thread-safe, and should be cheap, since every decision calls it.
class Clock {
 public:
  virtual ~Clock() = default;
  [[nodiscard]] virtual std::chrono::system_clock::time_point Now() const = 0;
};

struct Options {
  std::vector<PlanOptions> plans;  // at least one
  std::variant<MemoryStoreOptions, RedisStoreOptions> store = MemoryStoreOptions{};
  OnStoreError on_store_error = OnStoreError::kAllow;
  // With neither webhooks nor a callback no alert thread runs (events stay in the store's bounded
  // outbox, then are refused and counted).
  AlertOptions alerts;
  // Write the store's start-up log lines (snapshot loaded, ...) to stderr as JSON, as `sluice
  // serve` does. The Redis connection's own lines (a failed connection, the measured clock offset)
  // are written either way.
  bool log = false;
  // The time windows, expiries, snapshot checks, sweeps, alert timestamps and alert retries are
  // reckoned by; null: the system clock. With Redis, windows follow Redis's TIME: the library
  // measures Redis's offset from this clock and adds it. Kept until the Limiter is destroyed.
  std::shared_ptr<const Clock> clock;
};

}  // namespace sluice::lib

#endif  // SLUICE_OPTIONS_H_
