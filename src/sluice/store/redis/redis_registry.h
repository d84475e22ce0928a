// The registry kept in Redis (registry::Backend), shared by every sluice instance on that Redis:
// each instance holds the whole registry in its Index, writes through one atomic script, and
// follows the others' writes through a versioned log. Layout and protocol: docs/redis.md, "The
// registry".
//
//   - Start() loads everything (ZRANGE BYLEX pages of ids, then pipelined MGET batches), then a
//     follower polls `<base>:version` every poll_interval; when it moved, registry_read.lua
//     returns the log entries after the follower's version with the current state of every
//     record they touched (one atomic read), which the follower applies in order. When the log
//     cannot bridge the gap (trimmed, the registry wiped, Redis restarted or failed over to
//     another server) it loads everything again and swaps it in with Index::Replace. A change
//     made on any instance is in every Index within poll_interval plus a round trip.
//   - Apply() runs registry_write.lua (preconditions, write, version, log: all or nothing), then
//     has the follower catch up before reporting it, so this instance's Index holds it
//     (read-your-writes) and only ever moves along the log.
//
// Threading: one private thread runs an io_context with one Connection; the follower, every
// script and every Index write run there, so the Index has exactly one writer and a change applied
// here is never overwritten by an older read (replies arrive in command order on one connection).
// Apply() may be called from any thread; `done` runs on the private thread.
//
// Timeouts: a write whose reply does not come within connection.command_timeout is reported
// Unavailable, but Redis may still run it (the command was sent). Its effect, if any, reaches this
// Index through the follower like any other instance's change; a retry of AddKey with the same
// idempotency key is answered from the first attempt.
#ifndef SLUICE_STORE_REDIS_REDIS_REGISTRY_H_
#define SLUICE_STORE_REDIS_REDIS_REGISTRY_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "sluice/registry/backend.h"
#include "sluice/registry/index.h"
#include "sluice/registry/model.h"
#include "sluice/store/redis/cluster.h"
#include "sluice/store/redis/connection.h"

namespace sluice::redis {

struct RedisRegistryOptions {
  // command_timeout bounds every command, a batch of the full load included; no circuit breaker
  // (an admin write should wait for Redis, not fail fast while decisions do).
  ConnectionOptions connection{.command_timeout = std::chrono::milliseconds(2000),
                               .breaker_failures = 0};
  // Redis Cluster's seed nodes; empty: the one Redis `connection` names. Every registry key
  // shares one hash tag, so the whole registry is on one node; so do the follower's CLIENT
  // GETNAME/SETNAME and INFO (sent to that slot's master), so a failover or a move of that slot is
  // seen as a new server and the registry is reloaded from it.
  std::vector<NodeAddress> cluster_seeds;
  std::string key_prefix = "sl";  // store.redis.key_prefix
  std::chrono::milliseconds poll_interval{200};
  size_t batch_size = 1000;       // records per pipelined batch of the full load
  size_t catch_up_entries = 500;  // log entries per registry_read.lua call
  size_t log_max = 10000;         // XADD MAXLEN ~: how far back a follower can catch up
  // Start() returns Unavailable if the first full load has not completed by then (and the load
  // goes on in the background).
  std::chrono::milliseconds start_timeout{30000};
};

// "<prefix>:{registry}": the part every registry key starts with.
[[nodiscard]] std::string RegistryBase(std::string_view prefix);

// The records as stored: one JSON object per record (docs/redis.md). Times are Unix microseconds.
// Exposed for tests and the load benchmark, which write records directly.
[[nodiscard]] std::string SubjectRecord(const registry::Subject& subject);
[[nodiscard]] std::string KeyRecord(const registry::Key& key);
// A grant as registry_write.lua is given it (at, amount, reason, actor), and as it is stored in
// the ledger (with seq and balance, which the script appends): nullopt when malformed.
[[nodiscard]] std::string CreditGrantRecord(const registry::CreditGrant& grant);
[[nodiscard]] std::optional<registry::CreditGrant> ParseCreditGrant(std::string_view record);
// The inverses; nullopt for a record that does not parse (it is then skipped and counted).
[[nodiscard]] std::optional<registry::Subject> ParseSubject(std::string_view id,
                                                            std::string_view record);
[[nodiscard]] std::optional<registry::Key> ParseKey(uint64_t id, std::string_view record);
// 16 lowercase hex digits (the key part of <base>:key:<id>).
[[nodiscard]] std::string KeyIdHex(uint64_t id);

class RedisRegistry final : public registry::Backend {
 public:
  explicit RedisRegistry(RedisRegistryOptions options);
  // Stops, then joins the private thread.
  ~RedisRegistry() override;
  RedisRegistry(const RedisRegistry&) = delete;
  RedisRegistry& operator=(const RedisRegistry&) = delete;

  // Blocks until the first full load is in `index`, or returns Unavailable after start_timeout
  // while the follower goes on trying (the Index fills once Redis answers). `index` must outlive
  // this object.
  absl::Status Start(registry::Index* index) override;
  void Apply(registry::Change change, registry::ChangeCallback done) override;
  void ReadCredits(std::string subject, int64_t before, size_t limit,
                   registry::CreditPageCallback done) override;
  // Stops following and waits for the writes already sent to be answered (each is bounded by
  // command_timeout). Applies after Stop() are answered Unavailable.
  void Stop() override;

  // Full loads completed (the one at start included).
  [[nodiscard]] uint64_t full_loads() const { return full_loads_.load(std::memory_order_relaxed); }
  // Catch-ups from the log that applied at least one entry.
  [[nodiscard]] uint64_t catch_ups() const { return catch_ups_.load(std::memory_order_relaxed); }
  // Records in Redis that did not parse and were left out of the Index.
  [[nodiscard]] uint64_t malformed() const { return malformed_.load(std::memory_order_relaxed); }
  // The version the Index reflects (every change up to it is applied).
  [[nodiscard]] uint64_t version() const { return version_.load(std::memory_order_relaxed); }

 private:
  class Follower;

  RedisRegistryOptions options_;
  std::shared_ptr<Follower> follower_;
  std::thread thread_;
  std::atomic<uint64_t> full_loads_{0};
  std::atomic<uint64_t> catch_ups_{0};
  std::atomic<uint64_t> malformed_{0};
  std::atomic<uint64_t> version_{0};
};

}  // namespace sluice::redis

#endif  // SLUICE_STORE_REDIS_REDIS_REGISTRY_H_
