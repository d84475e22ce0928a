// The store back end a configuration asks for, built in one place for `sluice serve` and for the
// library: the Store decisions go to, the Clock that decides their windows, the registry of
// subjects and keys, and everything that keeps them running — with the memory store its snapshot
// lock, snapshot load and maintainer (sweep + snapshots); with Redis one connection per event loop,
// the clock sync and the Redis registry. It also hands out the outbox the alert dispatcher reads.
//
// Life cycle: OpenStoreBackend() opens and loads everything that needs no event loop (the snapshot,
// the registry); Attach() is then called once on each event loop's own thread, before that loop
// runs; WaitForStore() waits briefly for Redis to answer; Stop() ends it all after the loops have
// stopped. With the memory store Attach() and WaitForStore() do nothing, so a caller that never
// runs an event loop (an in-process library user) may skip them.
//
// Thread safety: store(), clock(), index() and the other accessors may be called from any thread
// once OpenStoreBackend() returned; Attach() only from the loop's own thread; Stop() from one
// thread after every loop stopped.
#ifndef SLUICE_ENGINE_STORE_BACKEND_H_
#define SLUICE_ENGINE_STORE_BACKEND_H_

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "sluice/common/clock.h"
#include "sluice/config/config.h"
#include "sluice/limiter/limiter.h"
#include "sluice/limiter/outbox_source.h"
#include "sluice/limiter/store.h"
#include "sluice/metrics/metrics.h"
#include "sluice/registry/backend.h"
#include "sluice/registry/index.h"

namespace sluice::engine {

struct StoreBackendOptions {
  // The event loops decisions will run on. With Redis there is one connection per loop (a
  // decision uses the connection of the loop its caller runs on) and the first loop also measures
  // Redis's clock. Must not be empty with Redis. The loops must outlive the back end.
  std::vector<boost::asio::io_context*> loops;
  // Open the registry of subjects and keys (docs/registry.md): with the memory store SQLite at
  // config::RegistryFile (registry_path, else beside the snapshot, else in memory), Redis with
  // Redis. Off: index() is an empty index and registry_backend() is null.
  bool open_registry = true;
  // Where the process's own log lines say what happened (snapshot loaded, registry loaded, ...).
  bool log = true;
  // The host's clock: with the memory store it decides windows and expiries (snapshot checks and
  // sweeps included); with Redis it is the clock Redis's measured offset is added to (so windows
  // still follow Redis's TIME). Alert timestamps and retries read it too (system_clock()). Null:
  // the system clock. Must be thread-safe and outlive the back end.
  const Clock* clock = nullptr;
};

// What a caller needs from the store for one kind of answer: a Limiter's store, clock and cache.
class StoreBackend {
 public:
  virtual ~StoreBackend() = default;

  // "memory" or "redis".
  [[nodiscard]] virtual std::string_view kind() const = 0;
  // For log lines: Redis's host:port (never the URL, which may hold a password), or the memory
  // store's snapshot path ("" without one).
  [[nodiscard]] virtual std::string address() const = 0;
  [[nodiscard]] virtual Store* store() = 0;
  // The clock windows are decided by: the host's (StoreBackendOptions::clock), or with Redis the
  // host's shifted by the offset measured against Redis's TIME.
  [[nodiscard]] virtual const Clock* clock() const = 0;
  // The host's clock (alert timestamps, retries).
  [[nodiscard]] virtual const Clock* system_clock() const = 0;
  // Options a Limiter on this store should have (the over-limit cache with a remote store).
  [[nodiscard]] virtual LimiterOptions limiter_options(config::OnStoreError on_store_error) = 0;

  [[nodiscard]] virtual registry::Index* index() = 0;
  // Null when the registry was not opened.
  [[nodiscard]] virtual registry::Backend* registry_backend() = 0;

  // A new reader of the alert outbox for a dispatcher. With Redis it reads as this process's
  // consumer (the same name for every source of the process, so one built after a reload resumes
  // what the previous one held) and claims events another consumer has held for `claim_after`
  // (alerts.lease).
  [[nodiscard]] virtual std::unique_ptr<OutboxSource> NewOutboxSource(
      absl::Duration claim_after) = 0;

  // Registers the store's gauges and counters (subjects, outbox depth, events recorded and
  // refused, snapshot failures, Redis late admissions and refunds, over-limit cache, registry).
  virtual void RegisterMetrics(metrics::Registry& registry) = 0;

  // The memory store's upkeep on demand (its maintainer also does both on its own schedule):
  // SaveSnapshot writes the snapshot now (FailedPrecondition without store.memory.snapshot_path,
  // after Stop(), or with Redis, which keeps the counters itself); Sweep drops the entries whose
  // windows all ended and returns how many (0 with Redis, whose keys expire by themselves).
  // Thread-safe.
  virtual absl::Status SaveSnapshot() = 0;
  virtual size_t Sweep() = 0;

  // Call on loops[i]'s thread before it runs: with Redis, makes that thread's decisions use its
  // connection and starts it (and, on the first loop, the clock sync).
  virtual void Attach(size_t i) = 0;

  // With Redis: waits up to `timeout` for Redis to answer the first clock sample; false if it has
  // not (decisions are answered per on_store_error until it does). True at once for memory.
  virtual bool WaitForStore(absl::Duration timeout) = 0;

  // REQUIRES: every loop has stopped. Closes the connections, stops the registry and the
  // maintainer, and saves the final snapshot; returns that save's status. Idempotent.
  virtual absl::Status Stop() = 0;
};

// Builds the back end `cfg.store` names. `cfg` must have passed validation (LoadConfigFile or
// config::Validate). Errors: the Redis URL does not parse (InvalidArgument), the snapshot is locked
// by another process or cannot be loaded, the registry cannot be opened or loaded (each with the
// path in the message). With Redis an unreachable server is not an error (the start is degraded).
[[nodiscard]] absl::StatusOr<std::unique_ptr<StoreBackend>> OpenStoreBackend(
    const config::Config& cfg, StoreBackendOptions options);

}  // namespace sluice::engine

#endif  // SLUICE_ENGINE_STORE_BACKEND_H_
