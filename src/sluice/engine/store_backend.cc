#include "sluice/engine/store_backend.h"

#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "sluice/common/log.h"
#include "sluice/registry/sqlite_backend.h"
#include "sluice/store/memory/maintainer.h"
#include "sluice/store/memory/memory_outbox_source.h"
#include "sluice/store/memory/memory_store.h"
#include "sluice/store/memory/snapshot.h"
#include "sluice/store/memory/snapshot_file.h"
#include "sluice/store/redis/clock_sync.h"
#include "sluice/store/redis/cluster.h"
#include "sluice/store/redis/connection.h"
#include "sluice/store/redis/redis_outbox.h"
#include "sluice/store/redis/redis_registry.h"
#include "sluice/store/redis/redis_store.h"
#include "sluice/store/redis/tls_context.h"

namespace sluice::engine {
namespace {

// Over-limit cache entries with a remote store (docs/architecture.md); ~200 bytes each.
constexpr size_t kOverLimitCacheCapacity = 100'000;
// How long a Redis registry start waits for its first full load (it keeps trying after).
constexpr auto kRedisRegistryStartTimeout = std::chrono::milliseconds(2000);
// Admin writes and outbox batches may wait longer than a decision.
constexpr auto kRedisBackgroundTimeout = std::chrono::milliseconds(2000);

// What the store exports to /metrics, the same names whichever store runs (a dashboard need not
// know); a value the store does not have reads 0.
struct StoreGauges {
  std::function<double()> memory_subjects = [] { return 0.0; };
  std::function<double()> outbox_depth = [] { return 0.0; };
  std::function<double()> events_recorded = [] { return 0.0; };
  std::function<double()> events_refused = [] { return 0.0; };
  std::function<double()> snapshot_failures = [] { return 0.0; };
  std::function<double()> late_admissions = [] { return 0.0; };
  std::function<double()> refunds = [] { return 0.0; };
  std::function<double()> registry_write_failures = [] { return 0.0; };
  std::function<double()> registry_full_loads = [] { return 0.0; };
  // Redis Cluster: what the decisions' cluster clients did (0 without a cluster).
  std::function<redis::ClusterStats()> cluster = [] { return redis::ClusterStats{}; };
};

// The Redis round-trip histogram: registered whichever store runs (no samples with memory).
metrics::HistogramFamily& RegisterRoundTrips(metrics::Registry& r) {
  return r.AddHistogramFamily(
      "sluice_redis_request_duration_seconds",
      "Round trip of the Redis commands of the decision path, by command (decide, refund, usage, "
      "reset, reservation), from queueing to reply; commands that got no reply are not observed.",
      {"command"},
      {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1});
}

// The degraded ledger's counts (a store that can fail: Redis).
void RegisterLedger(metrics::Registry& r, const DegradedLedger* ledger,
                    const DegradedLedgerStats* stats) {
  r.AddCallbackCounter(
      "sluice_degraded_ledger_admitted_total",
      "Decisions the store could not answer, admitted against what this instance knows of the "
      "subject's usage (on_store_error: allow).",
      [stats] { return static_cast<double>(stats->admitted.load()); });
  r.AddCallbackCounter(
      "sluice_degraded_ledger_denied_total",
      "Decisions denied because what this instance knows of the subject's usage (the counter the "
      "store last reported, plus what it admitted while the store failed) left no room.",
      [stats] { return static_cast<double>(stats->denied.load()); });
  r.AddCallbackCounter(
      "sluice_degraded_ledger_full_total",
      "Observations not kept, or degraded admissions denied, because the ledger was full.",
      [stats] { return static_cast<double>(stats->full.load()); });
  r.AddCallbackGauge("sluice_degraded_ledger_subjects",
                     "Subjects whose usage the degraded ledger holds.",
                     [ledger] { return static_cast<double>(ledger->size()); });
}

void Register(metrics::Registry& r, StoreGauges g, const registry::Index* index,
              const OverLimitCacheStats* overlimit) {
  r.AddCallbackGauge("sluice_memory_subjects", "Subjects with live counters in the memory store.",
                     std::move(g.memory_subjects));
  r.AddCallbackGauge("sluice_outbox_depth",
                     "Alert events waiting for delivery in the memory store's outbox.",
                     std::move(g.outbox_depth));
  r.AddCallbackCounter("sluice_alert_events_recorded_total",
                       "Alert events recorded in the outbox by this process's decisions.",
                       std::move(g.events_recorded));
  r.AddCallbackCounter(
      "sluice_outbox_refused_total",
      "Thresholds not recorded because the outbox was full (they stay armed and fire later).",
      std::move(g.events_refused));
  r.AddCallbackCounter("sluice_snapshot_failures_total", "Snapshot saves that failed since start.",
                       std::move(g.snapshot_failures));
  r.AddCallbackCounter(
      "sluice_redis_late_admissions_total",
      "Admissions whose reply came after the decision had been answered degraded (Redis ran the "
      "script, then stalled); each is taken back.",
      std::move(g.late_admissions));
  r.AddCallbackCounter("sluice_redis_refunds_total", "Late admissions taken back by refund.lua.",
                       std::move(g.refunds));
  r.AddCallbackCounter("sluice_overlimit_cache_hits_total",
                       "Denials answered from the over-limit cache without asking the store.",
                       [overlimit] { return static_cast<double>(overlimit->hits.load()); });
  r.AddCallbackCounter("sluice_overlimit_cache_full_total",
                       "Denials not remembered because the over-limit cache was full.",
                       [overlimit] { return static_cast<double>(overlimit->full.load()); });
  r.AddCallbackGauge("sluice_registry_subjects", "Subjects in the registry (this instance's copy).",
                     [index] { return static_cast<double>(index->subject_count()); });
  r.AddCallbackGauge("sluice_registry_keys", "API keys in the registry (this instance's copy).",
                     [index] { return static_cast<double>(index->key_count()); });
  r.AddCallbackCounter(
      "sluice_registry_write_failures_total",
      "Registry changes that could not be written (answered 503; nothing was changed).",
      std::move(g.registry_write_failures));
  auto cluster = std::make_shared<std::function<redis::ClusterStats()>>(std::move(g.cluster));
  r.AddCallbackCounter("sluice_redis_cluster_moved_total",
                       "Redis Cluster MOVED redirections followed (a slot changed master).",
                       [cluster] { return static_cast<double>((*cluster)().moved); });
  r.AddCallbackCounter("sluice_redis_cluster_ask_total",
                       "Redis Cluster ASK redirections followed (a slot being migrated).",
                       [cluster] { return static_cast<double>((*cluster)().asked); });
  r.AddCallbackCounter(
      "sluice_redis_cluster_tryagain_total",
      "Redis Cluster commands sent again after TRYAGAIN (their keys split by a migration).",
      [cluster] { return static_cast<double>((*cluster)().tryagain); });
  r.AddCallbackCounter("sluice_redis_cluster_no_master_total",
                       "Redis Cluster commands failed because no master was known for their slot.",
                       [cluster] { return static_cast<double>((*cluster)().no_master); });
  r.AddCallbackCounter("sluice_redis_cluster_slot_maps_total",
                       "Redis Cluster slot maps learnt (CLUSTER SLOTS applied).",
                       [cluster] { return static_cast<double>((*cluster)().refreshes); });
  r.AddCallbackCounter(
      "sluice_registry_full_loads_total",
      "Times the Redis registry was loaded whole (at start, and when its change log could not "
      "bridge a gap: a restart, a flush, a trim).",
      std::move(g.registry_full_loads));
}

// Starts `backend` on `index`, logging how long the load took and, for the embedded store, the
// registry's file (`path`; "" for the Redis registry, "memory" when nothing keeps it).
absl::Status StartRegistry(registry::Backend& backend, registry::Index& index, bool log,
                           std::string_view path = "") {
  const absl::Time start = absl::Now();
  absl::Status s = backend.Start(&index);
  if (log && s.ok()) {
    Log line(LogLevel::kInfo, "registry loaded");
    if (!path.empty()) line.Str("path", path);
    line.Int("subjects", static_cast<int64_t>(index.subject_count()))
        .Int("keys", static_cast<int64_t>(index.key_count()))
        .Int("ms", absl::ToInt64Milliseconds(absl::Now() - start));
  }
  return s;
}

class MemoryBackend final : public StoreBackend {
 public:
  explicit MemoryBackend(const Clock* clock) : clock_(clock != nullptr ? clock : &system_clock_) {}

  // Takes the snapshot's lock, loads it and the registry; starts the maintainer.
  absl::Status Open(const config::Config& cfg, const StoreBackendOptions& options) {
    log_ = options.log;
    snapshot_path_ = cfg.store.memory.snapshot_path;
    if (!snapshot_path_.empty()) {
      if (absl::Status s = LoadState(options.log); !s.ok()) return s;
    }
    if (options.open_registry) {
      // Beside the snapshot when only the snapshot is configured: a configuration that keeps the
      // counters keeps the customers and keys they belong to.
      const std::string path = config::RegistryFile(cfg.store.memory);
      absl::StatusOr<std::unique_ptr<registry::SqliteBackend>> opened =
          registry::SqliteBackend::Open({.path = path.empty() ? ":memory:" : path});
      if (!opened.ok()) {
        return absl::Status(opened.status().code(),
                            absl::StrCat("cannot open the registry: ", opened.status().message()));
      }
      if (path.empty() && options.log) {
        // Nothing at all is persisted (no snapshot either): a test or a trial, where refusing
        // the registry's writes would only be in the way.
        Log(LogLevel::kWarn,
            "neither store.memory.registry_path nor snapshot_path is set: subjects and keys "
            "created through the admin API are kept in memory and lost at exit, as counters are");
      }
      sqlite_ = opened->get();
      registry_ = *std::move(opened);
      if (absl::Status s =
              StartRegistry(*registry_, index_, options.log, path.empty() ? "memory" : path);
          !s.ok()) {
        return absl::Status(s.code(), absl::StrCat("cannot load the registry: ", s.message()));
      }
    }
    maintainer_.emplace(
        &store_, clock_,
        MemoryStoreMaintainer::Options{.snapshot_path = snapshot_path_,
                                       .snapshot_interval = cfg.store.memory.snapshot_interval,
                                       .on_error = [log = options.log](const absl::Status& s) {
                                         if (log)
                                           Log(LogLevel::kWarn, "snapshot save failed").Error(s);
                                       }});
    return absl::OkStatus();
  }

  std::string_view kind() const override { return "memory"; }
  std::string address() const override { return snapshot_path_; }
  Store* store() override { return &store_; }
  const Clock* clock() const override { return clock_; }
  const Clock* system_clock() const override { return clock_; }
  LimiterOptions limiter_options(config::OnStoreError on_store_error) override {
    // An in-process store answers a denial as fast as the cache would.
    return LimiterOptions{.on_store_error = on_store_error,
                          .overlimit_cache_capacity = 0,
                          .overlimit_stats = &overlimit_stats_};
  }
  registry::Index* index() override { return &index_; }
  registry::Backend* registry_backend() override { return registry_.get(); }
  std::unique_ptr<OutboxSource> NewOutboxSource(absl::Duration /*claim_after*/) override {
    return std::make_unique<MemoryOutboxSource>(&store_.outbox());
  }
  void RegisterMetrics(metrics::Registry& registry) override {
    StoreGauges g;
    g.memory_subjects = [this] { return static_cast<double>(store_.subject_count()); };
    g.outbox_depth = [this] { return static_cast<double>(store_.outbox().size()); };
    g.events_recorded = [this] { return static_cast<double>(store_.outbox().recorded()); };
    g.events_refused = [this] { return static_cast<double>(store_.outbox().refused()); };
    g.snapshot_failures = [this] { return static_cast<double>(maintainer_->failed_saves()); };
    g.registry_write_failures = [this] {
      if (sqlite_ == nullptr) return 0.0;
      const registry::SqliteBackend::Stats st = sqlite_->stats();
      return static_cast<double>(st.failed + st.queue_full);
    };
    Register(registry, std::move(g), &index_, &overlimit_stats_);
    // The memory store cannot fail, so it has no degraded ledger; its metrics exist (at zero) so
    // that a dashboard sees the same names whichever store runs.
    RegisterLedger(registry, &no_ledger_, &no_ledger_stats_);
    (void)RegisterRoundTrips(registry);
  }
  absl::Status SaveSnapshot() override {
    if (stopped_) return absl::FailedPreconditionError("the store is stopped");
    return maintainer_->SaveSnapshotNow();
  }
  size_t Sweep() override { return stopped_ ? 0 : maintainer_->SweepNow(); }
  void Attach(size_t /*i*/) override {}
  bool WaitForStore(absl::Duration /*timeout*/) override { return true; }

  absl::Status Stop() override {
    stopped_ = true;
    if (registry_ != nullptr) registry_->Stop();
    return maintainer_.has_value() ? maintainer_->Stop() : absl::OkStatus();
  }

  // A caller that never called Stop() (an early return) still gets the final snapshot; one that
  // did has its status already.
  ~MemoryBackend() override {
    if (stopped_) return;
    if (absl::Status s = Stop(); !s.ok() && log_) {
      Log(LogLevel::kError, "final snapshot failed").Error(s);
    }
  }

 private:
  absl::Status LoadState(bool log) {
    // Held until the back end is gone, after the final snapshot: a second process on the same
    // file would overwrite this one's counters every interval.
    absl::StatusOr<SnapshotLock> lock = SnapshotLock::Acquire(snapshot_path_);
    if (!lock.ok()) {
      return absl::Status(lock.status().code(),
                          absl::StrCat("cannot lock snapshot: ", lock.status().message()));
    }
    snapshot_lock_.emplace(*std::move(lock));
    // Only now is it certain that no other writer is using them.
    if (absl::StatusOr<size_t> removed = RemoveStaleSnapshotTemps(snapshot_path_); !removed.ok()) {
      if (log) {
        Log(LogLevel::kWarn, "cannot remove stale snapshot temporary files")
            .Error(removed.status());
      }
    } else if (*removed > 0 && log) {
      Log(LogLevel::kInfo, "removed stale snapshot temporary files")
          .Str("path", snapshot_path_)
          .Int("files", static_cast<int64_t>(*removed));
    }
    SnapshotStats stats;
    absl::Status s = LoadSnapshot(snapshot_path_, store_, &stats, {.now = clock_->Now()});
    if (s.ok()) {
      if (log) {
        Log(LogLevel::kInfo, "snapshot loaded")
            .Str("path", snapshot_path_)
            .Int("subjects", static_cast<int64_t>(stats.subjects))
            .Int("pending_alerts", static_cast<int64_t>(stats.events))
            .Int("dropped_subjects", static_cast<int64_t>(stats.dropped_subjects))
            .Int("dropped_alerts", static_cast<int64_t>(stats.dropped_events));
      }
      return absl::OkStatus();
    }
    if (absl::IsNotFound(s)) {
      if (log) Log(LogLevel::kInfo, "no snapshot yet; starting empty").Str("path", snapshot_path_);
      return absl::OkStatus();
    }
    // Starting empty would hand every subject a fresh quota and drop undelivered alerts.
    return absl::Status(s.code(), absl::StrCat("cannot load snapshot: ", s.message()));
  }

  SystemClock system_clock_;  // unless the options named another
  const Clock* const clock_;
  MemoryStore store_;
  DegradedLedgerStats no_ledger_stats_;
  DegradedLedger no_ledger_{1, &no_ledger_stats_};
  bool log_ = true;
  std::atomic<bool> stopped_{false};
  std::string snapshot_path_;
  std::optional<SnapshotLock> snapshot_lock_;
  std::optional<MemoryStoreMaintainer> maintainer_;
  OverLimitCacheStats overlimit_stats_;
  registry::Index index_;
  std::unique_ptr<registry::Backend> registry_;
  const registry::SqliteBackend* sqlite_ = nullptr;  // registry_, when opened
};

// The calling thread's back end and connection: set by Attach() on a loop's thread.
thread_local const void* t_redis_owner = nullptr;
thread_local redis::CommandSender* t_redis_connection = nullptr;

class RedisBackend final : public StoreBackend {
 public:
  // `seeds` non-empty: Redis Cluster (every connection a copy of `connection` to one node).
  RedisBackend(const config::Config& cfg, redis::ConnectionOptions connection,
               std::vector<redis::NodeAddress> seeds, const Clock* clock)
      : connection_(std::move(connection)),
        seeds_(std::move(seeds)),
        key_prefix_(cfg.store.redis.key_prefix),
        consumer_(redis::DefaultConsumerName()),
        clock_(clock != nullptr ? clock : &system_clock_),
        redis_clock_(clock_),
        store_(
            [this]() -> redis::CommandSender* {
              return t_redis_owner == this ? t_redis_connection : nullptr;
            },
            {.key_prefix = cfg.store.redis.key_prefix,
             .redis_clock = &redis_clock_,
             .decision_deadline = cfg.store.redis.EffectiveMaxWait(),
             .clock_error = absl::Milliseconds(1),
             .sync_state = &redis_clock_,
             .observe_round_trip = [this](redis::RedisCommandKind kind, absl::Duration d) {
               metrics::Histogram* h =
                   round_trips_[static_cast<int>(kind)].load(std::memory_order_acquire);
               if (h != nullptr) h->Observe(d);
             }}) {}

  absl::Status Open(const StoreBackendOptions& options) {
    if (options.loops.empty()) {
      return absl::InvalidArgumentError("the Redis store needs at least one event loop");
    }
    // Each loop's thread talks to Redis over its own connection; the first also measures Redis's
    // clock. Redis answering is worth waiting for briefly before a start is announced: until then
    // every decision is answered per on_store_error.
    for (boost::asio::io_context* io : options.loops) {
      if (seeds_.empty()) {
        connections_.push_back(std::make_unique<redis::Connection>(*io, connection_));
      } else {
        // Clock sync's TIME goes to any master: the nodes of a cluster are expected to keep
        // their hosts' clocks in step (NTP), as instances of one Redis would.
        connections_.push_back(std::make_unique<redis::ClusterClient>(
            *io, redis::ClusterOptions{.connection = connection_, .seeds = seeds_}));
      }
    }
    clock_sync_ = std::make_unique<redis::ClockSync>(
        *options.loops.front(), connections_.front().get(), clock_, &redis_clock_,
        redis::ClockSyncOptions{.on_first_sample = [this] { answered_.Notify(); }});
    if (options.open_registry) {
      // Its own connection and thread; admin writes may wait longer than decisions, and never
      // trip the decisions' circuit breaker.
      redis::RedisRegistryOptions ro{.key_prefix = key_prefix_,
                                     .start_timeout = kRedisRegistryStartTimeout};
      ro.connection = connection_;
      ro.connection.command_timeout = kRedisBackgroundTimeout;
      ro.connection.breaker_failures = 0;
      ro.cluster_seeds = seeds_;
      auto backend = std::make_unique<redis::RedisRegistry>(std::move(ro));
      redis_registry_ = backend.get();
      registry_ = std::move(backend);
      if (absl::Status s = StartRegistry(*registry_, index_, options.log); !s.ok()) {
        // Like decisions, the Redis registry does not hold the start hostage: its keys are
        // refused until it has loaded, which it keeps trying to do.
        if (options.log) {
          Log(LogLevel::kWarn, "the registry is not loaded yet; its keys are refused until it is")
              .Error(s);
        }
      }
    }
    return absl::OkStatus();
  }

  std::string_view kind() const override { return "redis"; }
  std::string address() const override {
    if (!seeds_.empty()) return redis::ClusterName(seeds_);
    return absl::StrCat(connection_.host, ":", connection_.port);
  }
  Store* store() override { return &store_; }
  const Clock* clock() const override { return &redis_clock_; }
  const Clock* system_clock() const override { return clock_; }
  LimiterOptions limiter_options(config::OnStoreError on_store_error) override {
    return LimiterOptions{.on_store_error = on_store_error,
                          .overlimit_cache_capacity = kOverLimitCacheCapacity,
                          .overlimit_stats = &overlimit_stats_,
                          .degraded_ledger = &ledger_};
  }
  registry::Index* index() override { return &index_; }
  registry::Backend* registry_backend() override { return registry_.get(); }
  std::unique_ptr<OutboxSource> NewOutboxSource(absl::Duration claim_after) override {
    // Its own connection, with a looser timeout than decisions: it moves batches, off the
    // request path.
    redis::ConnectionOptions connection = connection_;
    connection.command_timeout = kRedisBackgroundTimeout;
    return std::make_unique<redis::RedisOutbox>(
        redis::RedisOutboxOptions{.connection = connection,
                                  .cluster_seeds = seeds_,
                                  .key_prefix = key_prefix_,
                                  .consumer = consumer_,
                                  .claim_min_idle = claim_after});
  }
  void RegisterMetrics(metrics::Registry& registry) override {
    StoreGauges g;
    g.events_recorded = [this] { return static_cast<double>(store_.events_recorded()); };
    g.events_refused = [this] { return static_cast<double>(store_.events_refused()); };
    g.late_admissions = [this] { return static_cast<double>(store_.late_admissions()); };
    g.refunds = [this] { return static_cast<double>(store_.refunds()); };
    g.registry_full_loads = [this] {
      return redis_registry_ == nullptr ? 0.0 : static_cast<double>(redis_registry_->full_loads());
    };
    g.cluster = [this] {
      redis::ClusterStats sum;
      for (const auto& c : connections_) {
        if (const auto* cluster = dynamic_cast<const redis::ClusterClient*>(c.get())) {
          const redis::ClusterStats st = cluster->stats();
          sum.moved += st.moved;
          sum.asked += st.asked;
          sum.tryagain += st.tryagain;
          sum.refreshes += st.refreshes;
          sum.no_master += st.no_master;
        }
      }
      return sum;
    };
    Register(registry, std::move(g), &index_, &overlimit_stats_);
    RegisterLedger(registry, &ledger_, &ledger_stats_);
    metrics::HistogramFamily& round_trips = RegisterRoundTrips(registry);
    for (int i = 0; i < redis::kRedisCommandKinds; ++i) {
      round_trips_[i].store(&round_trips.WithLabels({redis::RedisCommandKindName(
                                static_cast<redis::RedisCommandKind>(i))}),
                            std::memory_order_release);
    }
  }
  absl::Status SaveSnapshot() override {
    return absl::FailedPreconditionError(
        "the Redis store keeps its counters in Redis: no snapshot");
  }
  size_t Sweep() override { return 0; }
  void Attach(size_t i) override {
    t_redis_owner = this;
    t_redis_connection = connections_.at(i).get();
    t_redis_connection->Start();
    if (i == 0) clock_sync_->Start();
  }
  bool WaitForStore(absl::Duration timeout) override {
    return answered_.WaitForNotificationWithTimeout(timeout);
  }
  absl::Status Stop() override {
    clock_sync_.reset();
    connections_.clear();
    if (registry_ != nullptr) registry_->Stop();
    return absl::OkStatus();
  }
  ~RedisBackend() override { (void)Stop(); }

 private:
  const redis::ConnectionOptions connection_;
  const std::vector<redis::NodeAddress> seeds_;  // Redis Cluster's seed nodes; empty: one Redis
  const std::string key_prefix_;
  const std::string consumer_;  // one per process: a reload's new outbox reader resumes
  SystemClock system_clock_;    // unless the options named another
  const Clock* const clock_;
  // With Redis, Redis's clock decides windows (docs/semantics.md): the host clock shifted by the
  // offset measured with TIME (redis::ClockSync).
  OffsetClock redis_clock_;
  // Each command kind's round-trip histogram, set by RegisterMetrics (null until then: not
  // observed).
  std::array<std::atomic<metrics::Histogram*>, redis::kRedisCommandKinds> round_trips_{};
  redis::RedisStore store_;
  std::vector<std::unique_ptr<redis::CommandSender>> connections_;
  std::unique_ptr<redis::ClockSync> clock_sync_;
  absl::Notification answered_;
  OverLimitCacheStats overlimit_stats_;
  // What this instance knows of its subjects' usage when Redis fails (on_store_error: allow);
  // outlives reloads.
  DegradedLedgerStats ledger_stats_;
  DegradedLedger ledger_{DegradedLedger::kDefaultCapacity, &ledger_stats_};
  registry::Index index_;
  std::unique_ptr<registry::Backend> registry_;
  const redis::RedisRegistry* redis_registry_ = nullptr;  // registry_, when opened
};

}  // namespace

absl::StatusOr<std::unique_ptr<StoreBackend>> OpenStoreBackend(const config::Config& cfg,
                                                               StoreBackendOptions options) {
  if (cfg.store.type == config::StoreType::kRedis) {
    std::vector<redis::NodeAddress> seeds;
    for (const std::string& node : cfg.store.redis.cluster_nodes) {
      std::optional<redis::NodeAddress> seed = redis::ParseNodeAddress(node);
      if (!seed) return absl::InvalidArgumentError("store.redis.cluster_nodes: bad host:port");
      seeds.push_back(*std::move(seed));
    }
    absl::StatusOr<redis::ConnectionOptions> parsed =
        seeds.empty() ? redis::ParseRedisUrl(cfg.store.redis.url)
                      : absl::StatusOr<redis::ConnectionOptions>(redis::ConnectionOptions{});
    if (!parsed.ok()) return parsed.status();
    // SLUICE_REDIS_PASSWORD_FILE (config::ApplyEnvironment) replaces the URL's password.
    if (!cfg.store.redis.password.empty()) parsed->password = cfg.store.redis.password;
    // On a cluster, store.redis.username names the ACL user (the config checked it has a password).
    if (!seeds.empty()) parsed->username = cfg.store.redis.username;
    parsed->command_timeout = absl::ToChronoMilliseconds(cfg.store.redis.timeout);
    parsed->max_wait = absl::ToChronoMilliseconds(cfg.store.redis.EffectiveMaxWait());
    // On a cluster (no URL), store.redis.tls turns TLS on for every node.
    if (!seeds.empty() && cfg.store.redis.tls.any()) parsed->tls.enabled = true;
    if (parsed->tls.enabled) {
      // One context for every connection of the back end (decisions, clock, outbox, registry).
      const config::RedisTlsConfig& tls = cfg.store.redis.tls;
      absl::StatusOr<std::shared_ptr<boost::asio::ssl::context>> context = redis::MakeTlsContext(
          {.ca_file = tls.ca_file, .cert_file = tls.cert_file, .key_file = tls.key_file});
      if (!context.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("store.redis.tls.", context.status().message()));
      }
      parsed->tls.context = *std::move(context);
      parsed->tls.server_name = tls.server_name;
    }
    auto backend =
        std::make_unique<RedisBackend>(cfg, *std::move(parsed), std::move(seeds), options.clock);
    if (absl::Status s = backend->Open(options); !s.ok()) return s;
    return std::unique_ptr<StoreBackend>(std::move(backend));
  }
  auto backend = std::make_unique<MemoryBackend>(options.clock);
  if (absl::Status s = backend->Open(cfg, options); !s.ok()) return s;
  return std::unique_ptr<StoreBackend>(std::move(backend));
}

}  // namespace sluice::engine
