#include "sluice/server/service.h"

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <array>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include "absl/strings/escaping.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/types/span.h"
#include "sluice/alerts/dead_letters.h"
#include "sluice/common/clock.h"
#include "sluice/common/log.h"
#include "sluice/common/strings.h"
#include "sluice/config/config.h"
#include "sluice/engine/alert_delivery.h"
#include "sluice/engine/store_backend.h"
#include "sluice/frontend/frontend.h"
#include "sluice/grpc/ratelimit_rules.h"
#include "sluice/grpc/rls_server.h"
#include "sluice/http/registry_api.h"
#include "sluice/http/routes.h"
#include "sluice/http/server.h"
#include "sluice/limiter/limiter.h"
#include "sluice/metrics/metrics.h"
#include "sluice/metrics/process.h"
#include "sluice/registry/index.h"
#include "sluice/server/config_check.h"
#include "sluice/server/config_summary.h"
#include "sluice/server/cpus.h"
#include "sluice/server/notify.h"

namespace sluice::server {
namespace asio = boost::asio;

namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr auto kDrainDeadline = std::chrono::seconds(10);
// How long the start waits for Redis to answer before serving anyway (degraded until it does).
constexpr absl::Duration kRedisStartWait = absl::Seconds(2);

// What every Limiter a service builds (one per reload) shares.
struct LimiterContext {
  engine::StoreBackend* backend = nullptr;
  const registry::Index* registry = nullptr;  // the subjects a reload must keep plans for
  http::HttpMetrics* metrics = nullptr;       // observability: resolves each Frontend's counters
};

// Everything a reload may change, built from a validated config.
absl::StatusOr<std::shared_ptr<const http::Frontend>> BuildFrontend(const config::Config& cfg,
                                                                    const LimiterContext& lc) {
  absl::StatusOr<PlanSet> plans = PlanSet::FromConfig(cfg);
  if (!plans.ok()) return plans.status();
  absl::StatusOr<http::KeyRegistry> keys = http::KeyRegistry::FromConfig(cfg);
  if (!keys.ok()) return keys.status();
  absl::StatusOr<http::ProxyTrust> proxies =
      http::ProxyTrust::FromCidrs(cfg.server.trusted_proxies);
  if (!proxies.ok()) return proxies.status();

  auto fe = std::make_shared<http::Frontend>();
  fe->server = cfg.server;
  fe->envoy = cfg.envoy;
  fe->on_store_error = cfg.on_store_error;
  // Read again at each reload, so a rotated credential takes effect with SIGHUP. CheckServable
  // has refused a token that is also an admin_tokens entry.
  absl::StatusOr<AdminTokenSource> resolved = ResolveAdminToken(cfg);
  if (!resolved.ok()) return resolved.status();
  const std::string& admin_token = resolved->token;
  // The single token of earlier versions is the read-write token "admin".
  if (!admin_token.empty()) {
    fe->admin_tokens.push_back(http::MakeAdminToken("admin", admin_token, /*write=*/true));
  }
  for (const config::AdminTokenConfig& t : cfg.server.admin_tokens) {
    if (!t.token.empty()) {
      fe->admin_tokens.push_back(http::MakeAdminToken(t.name, t.token, t.write));
    } else {
      // Validated as 64 lowercase hex digits.
      fe->admin_tokens.push_back(
          frontend::MakeAdminTokenFromSha256(t.name, t.token_sha256, t.write));
    }
  }
  fe->limiter =
      std::make_unique<Limiter>(std::move(*plans), lc.backend->store(), lc.backend->clock(),
                                lc.backend->limiter_options(cfg.on_store_error));
  fe->keys = std::move(*keys);
  fe->proxies = std::move(*proxies);
  // Observability: the decision counters of this reload's plans, looked up once.
  if (lc.metrics != nullptr) fe->counters = lc.metrics->CountersFor(fe->limiter->plans());
  return std::shared_ptr<const http::Frontend>(std::move(fe));
}

absl::StatusOr<std::shared_ptr<const http::Frontend>> LoadFrontend(const std::string& path,
                                                                   const LimiterContext& lc,
                                                                   config::Config* out) {
  absl::StatusOr<config::Config> cfg = config::LoadConfigFile(path);
  if (!cfg.ok()) return cfg.status();
  // What a restart would refuse is refused now, so a reload never stores up a failing start.
  if (absl::Status s = CheckServable(*cfg); !s.ok()) return s;
  if (lc.registry != nullptr) {
    if (absl::Status s = CheckPlansInUse(*cfg, *lc.registry); !s.ok()) return s;
  }
  absl::StatusOr<std::shared_ptr<const http::Frontend>> fe = BuildFrontend(*cfg, lc);
  if (fe.ok()) *out = std::move(*cfg);
  return fe;
}

// The envoyproxy/ratelimit rules envoy.ratelimit_config names; null when it names none.
absl::StatusOr<std::shared_ptr<const rls::RlRuleSet>> LoadRules(const config::Config& cfg) {
  if (cfg.envoy.ratelimit_config.empty()) return nullptr;
  return rls::RlRuleSet::Load(cfg.envoy.ratelimit_config);
}

// What a reload cannot change without a restart.
void WarnAboutRestartOnlyChanges(const config::Config& before, const config::Config& after) {
  auto warn = [](std::string_view field) {
    Log(LogLevel::kWarn, "reload ignores a changed setting; restart to apply").Str("field", field);
  };
  if (before.server.listen != after.server.listen) warn("server.listen");
  if (before.server.admin_listen != after.server.admin_listen) warn("server.admin_listen");
  if (before.server.grpc_listen != after.server.grpc_listen) warn("server.grpc_listen");
  // The gRPC listener's connections were given their timeouts when it started.
  if (before.server.grpc_handshake_timeout != after.server.grpc_handshake_timeout) {
    warn("server.grpc_handshake_timeout");
  }
  if (before.server.grpc_idle_timeout != after.server.grpc_idle_timeout) {
    warn("server.grpc_idle_timeout");
  }
  if (before.server.grpc_request_timeout != after.server.grpc_request_timeout) {
    warn("server.grpc_request_timeout");
  }
  if (before.server.grpc_write_timeout != after.server.grpc_write_timeout) {
    warn("server.grpc_write_timeout");
  }
  if (before.server.threads != after.server.threads) warn("server.threads");
  if (before.server.max_connections != after.server.max_connections) {
    warn("server.max_connections");
  }
  if (before.server.admin_max_connections != after.server.admin_max_connections) {
    warn("server.admin_max_connections");
  }
  // The store is built once, at start: its type, where it is, how it is reached, its keys' prefix
  // and its command timeout and longest wait.
  if (before.store.type != after.store.type || before.store.redis.url != after.store.redis.url ||
      before.store.redis.cluster_nodes != after.store.redis.cluster_nodes ||
      before.store.redis.password != after.store.redis.password ||
      before.store.redis.username != after.store.redis.username ||
      before.store.redis.timeout != after.store.redis.timeout ||
      before.store.redis.max_wait != after.store.redis.max_wait ||
      before.store.redis.key_prefix != after.store.redis.key_prefix ||
      before.store.redis.tls.present != after.store.redis.tls.present ||
      before.store.redis.tls.ca_file != after.store.redis.tls.ca_file ||
      before.store.redis.tls.cert_file != after.store.redis.tls.cert_file ||
      before.store.redis.tls.key_file != after.store.redis.tls.key_file ||
      before.store.redis.tls.server_name != after.store.redis.tls.server_name ||
      before.store.memory.snapshot_path != after.store.memory.snapshot_path ||
      before.store.memory.registry_path != after.store.memory.registry_path ||
      before.store.memory.snapshot_interval != after.store.memory.snapshot_interval) {
    warn("store");
  }
}

// The readiness probe's request: one request of an internal plan (one 1-minute limit with the
// largest quota, no alerts) for the subject "sluice.readyz" — the same write path as a decision,
// touching no configured plan's counters.
class StoreProbe {
 public:
  static constexpr int64_t kProbeQuota = 1'000'000'000;  // more probes than a minute can hold

  StoreProbe(Store* store, const Clock* clock) : store_(store), clock_(clock) {
    config::Config probe;
    probe.plans.push_back(config::PlanConfig{
        .name = "sluice.readyz",
        .limits = {config::LimitConfig{
            .name = "probe", .quota = kProbeQuota, .window = *config::ParseWindow("1m")}}});
    absl::StatusOr<PlanSet> plans = PlanSet::FromConfig(probe);
    plans_ = std::move(*plans);
  }

  void Run(StatusCallback done) const {
    const Plan* plan = plans_.Find("sluice.readyz");
    const absl::Time now = clock_->Now();
    const WindowBounds window = WindowAt(plan->limits.front().window, plan->tz, now);
    store_->Decide(StoreRequest{.subject = "sluice.readyz",
                                .plan = plan,
                                .cost = 1,
                                .now = now,
                                .windows = absl::MakeConstSpan(&window, 1)},
                   [done = std::move(done)](absl::StatusOr<StoreResult> r) mutable {
                     std::move(done)(r.status());
                   });
  }

 private:
  Store* store_;
  const Clock* clock_;
  PlanSet plans_;
};

// One timer per event loop that records when it last ran; a loop that has not run for a few seconds
// is stuck (a handler blocking its thread), which /healthz reports.
class LoopHeartbeats {
 public:
  static constexpr auto kInterval = std::chrono::seconds(1);
  static constexpr int64_t kStaleAfterNs = 5'000'000'000;

  explicit LoopHeartbeats(const std::vector<std::unique_ptr<asio::io_context>>& contexts)
      : beats_(contexts.size()) {
    for (size_t i = 0; i < contexts.size(); ++i) {
      timers_.push_back(std::make_unique<asio::steady_timer>(*contexts[i]));
      beats_[i].store(absl::GetCurrentTimeNanos());
      Tick(i);
    }
  }

  // True if every loop ran within the last few seconds. Thread-safe.
  [[nodiscard]] bool AllTurning() const {
    const int64_t now = absl::GetCurrentTimeNanos();
    for (const auto& beat : beats_) {
      if (now - beat.load(std::memory_order_relaxed) > kStaleAfterNs) return false;
    }
    return true;
  }

  // REQUIRES: the loops are stopped.
  void Release() { timers_.clear(); }

 private:
  void Tick(size_t i) {
    timers_[i]->expires_after(kInterval);
    timers_[i]->async_wait([this, i](const boost::system::error_code& ec) {
      if (ec) return;
      beats_[i].store(absl::GetCurrentTimeNanos(), std::memory_order_relaxed);
      Tick(i);
    });
  }

  std::vector<std::atomic<int64_t>> beats_;
  std::vector<std::unique_ptr<asio::steady_timer>> timers_;
};

}  // namespace

int Serve(const std::string& config_path) {
  // Hold SIGTERM, SIGINT and SIGHUP pending until the signal handlers exist (a signal that arrives
  // during startup is then handled, not fatal). Threads started below inherit the mask, so the
  // signals are delivered to this thread only once it unblocks them.
  sigset_t handled;
  sigemptyset(&handled);
  sigaddset(&handled, SIGTERM);
  sigaddset(&handled, SIGINT);
  sigaddset(&handled, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &handled, nullptr);
  // Under systemd (Type=notify): READY=1 once serving, RELOADING=1 and READY=1 around a reload,
  // STOPPING=1, WATCHDOG=1 while the event loops turn. Outside systemd it does nothing.
  const Notifier notifier;

  // Read and checked once: everything below is built from this file (reading it again could see
  // another one).
  absl::StatusOr<config::Config> loaded = config::LoadConfigFile(config_path);
  if (!loaded.ok()) {
    Log(LogLevel::kError, "invalid configuration").Error(loaded.status());
    return config::kExitConfigError;
  }
  config::Config cfg = *std::move(loaded);
  // Everything below that could refuse this file, checked the way `sluice check-config` does.
  if (absl::Status s = CheckServable(cfg); !s.ok()) {
    Log(LogLevel::kError, "invalid configuration").Error(s);
    return config::kExitConfigError;
  }
  absl::StatusOr<asio::ip::tcp::endpoint> data_endpoint = http::ParseEndpoint(cfg.server.listen);
  absl::StatusOr<asio::ip::tcp::endpoint> admin_endpoint =
      http::ParseEndpoint(cfg.server.admin_listen);
  if (!data_endpoint.ok() || !admin_endpoint.ok()) {
    Log(LogLevel::kError, "invalid listen address")
        .Error(data_endpoint.ok() ? admin_endpoint.status() : data_endpoint.status());
    return config::kExitConfigError;
  }

  // 0: one per CPU this process may use (affinity mask, cgroup CPU quota), not per CPU of the host.
  const unsigned threads =
      cfg.server.threads > 0 ? static_cast<unsigned>(cfg.server.threads) : AvailableCpus();
  std::vector<std::unique_ptr<asio::io_context>> contexts;
  std::vector<asio::io_context*> context_ptrs;
  for (unsigned i = 0; i < threads; ++i) {
    contexts.push_back(std::make_unique<asio::io_context>(1));
    context_ptrs.push_back(contexts.back().get());
  }

  // Before any thread starts (libcurl's global state).
  if (absl::Status s = alerts::GlobalInit(); !s.ok()) {
    Log(LogLevel::kError, "cannot initialise libcurl").Error(s);
    return kExitFailure;
  }

  // The store, its clock and the registry of subjects and keys (every decision reads the index;
  // the registry keeps it durably: an SQLite file with the memory store, Redis with Redis).
  // The start's one wait for Redis counts from here: a Redis registry's first load (inside the
  // open) and the clock's first sample (below) run at once, so 2 s in all, not 2 s each.
  const absl::Time opening = absl::Now();
  absl::StatusOr<std::unique_ptr<engine::StoreBackend>> opened =
      engine::OpenStoreBackend(cfg, {.loops = context_ptrs});
  if (!opened.ok()) {
    Log(LogLevel::kError, "cannot open the store").Error(opened.status());
    return kExitFailure;
  }
  engine::StoreBackend& backend = **opened;
  registry::Index& registry_index = *backend.index();
  if (absl::Status s = CheckPlansInUse(cfg, registry_index); !s.ok()) {
    Log(LogLevel::kError, "invalid configuration").Error(s);
    return config::kExitConfigError;
  }
  // Before the first Frontend: each resolves its decision counters in it.
  metrics::Registry registry;
  http::HttpMetrics http_metrics(registry);
  const LimiterContext limiter_context{
      .backend = &backend, .registry = &registry_index, .metrics = &http_metrics};
  absl::StatusOr<std::shared_ptr<const http::Frontend>> initial =
      BuildFrontend(cfg, limiter_context);
  if (!initial.ok()) {
    Log(LogLevel::kError, "invalid configuration").Error(initial.status());
    return config::kExitConfigError;
  }
  absl::StatusOr<std::shared_ptr<const rls::RlRuleSet>> initial_rules = LoadRules(cfg);
  if (!initial_rules.ok()) {
    Log(LogLevel::kError, "invalid configuration").Error(initial_rules.status());
    return config::kExitConfigError;
  }
  if (*initial_rules != nullptr && cfg.server.grpc_listen.empty()) {
    Log(LogLevel::kWarn,
        "envoy.ratelimit_config is set but server.grpc_listen is not: its rules "
        "decide nothing until the gRPC service listens");
  }

  backend.RegisterMetrics(registry);
  metrics::RegisterProcessMetrics(registry,
                                  absl::ToUnixMillis(backend.system_clock()->Now()) / 1000.0);
  metrics::CounterFamily& reloads = registry.AddCounterFamily(
      "sluice_config_reloads_total", "SIGHUP reloads, by result (ok or refused).", {"result"});
  metrics::Gauge& last_reload_ok = registry.AddGauge(
      "sluice_config_last_reload_successful",
      "1 if the latest reload was applied (or none was tried), 0 if it was refused.");
  last_reload_ok.Set(1);
  registry.AddGaugeFamily("sluice_build_info", "Build information.", {"version"})
      .WithLabels({SLUICE_VERSION})
      .Set(1);

  http::FrontendHolder frontend(std::move(*initial));
  http::RegistryApi registry_api(&registry_index, backend.registry_backend(), &frontend);
  http::DataPlane data_plane(&frontend, &http_metrics, &registry_index);
  alerts::DeadLetterList dead_letters;
  // Set by SIGTERM/SIGINT: readiness fails from then on while the data plane drains.
  std::atomic<bool> stopping{false};
  const StoreProbe store_probe(backend.store(), backend.clock());
  // Built once the event loops exist (below); /healthz reads it through this pointer.
  std::atomic<const LoopHeartbeats*> heartbeats{nullptr};
  http::AdminPlane admin_plane(
      &frontend, &http_metrics, &registry,
      {.dead_letters = [&dead_letters] { return engine::DeadLettersJson(dead_letters); },
       .live =
           [&heartbeats] {
             const LoopHeartbeats* h = heartbeats.load();
             return h == nullptr || h->AllTurning();
           },
       .probe_store = [&store_probe](StatusCallback done) { store_probe.Run(std::move(done)); },
       .stopping = &stopping,
       .registry = &registry_api,
       .index = &registry_index});
  metrics::CounterFamily& accept_failures = registry.AddCounterFamily(
      "sluice_accept_failures_total",
      "accept() failures for want of resources (EMFILE, ENFILE, ...), by plane; while they last, "
      "waiting clients are refused and accepting pauses for 100 ms at a time.",
      {"plane"});
  metrics::CounterFamily& refused = registry.AddCounterFamily(
      "sluice_connections_refused_total",
      "Connections closed at once because the plane's connection cap was reached.", {"plane"});
  metrics::CounterFamily& evicted = registry.AddCounterFamily(
      "sluice_connections_evicted_total",
      "Admin connections that had not authenticated, closed to make room for a new one.",
      {"plane"});
  http::HttpServer data_server(&data_plane,
                               {.max_connections = static_cast<size_t>(cfg.server.max_connections),
                                .accept_failures = &accept_failures.WithLabels({"data"}),
                                .refused = &refused.WithLabels({"data"}),
                                .evicted = &evicted.WithLabels({"data"}),
                                .name = "data"});
  // The admin plane keeps room for the kubelet and Prometheus: a connection that has not shown the
  // token idles out sooner and is the first to go when the plane is full.
  http::HttpServer admin_server(
      &admin_plane, {.header_timeout = std::chrono::seconds(5),
                     .unauthenticated_idle_timeout = std::chrono::seconds(5),
                     .max_connections = static_cast<size_t>(cfg.server.admin_max_connections),
                     .evict_unauthenticated = true,
                     .accept_failures = &accept_failures.WithLabels({"admin"}),
                     .refused = &refused.WithLabels({"admin"}),
                     .evicted = &evicted.WithLabels({"admin"}),
                     .name = "admin"});

  if (absl::Status s = data_server.Listen(context_ptrs, *data_endpoint); !s.ok()) {
    Log(LogLevel::kError, "cannot start the data plane").Error(s);
    data_server.ReleaseAcceptors();  // before the io_contexts they belong to are destroyed
    return kExitFailure;
  }
  if (absl::Status s = admin_server.Listen({context_ptrs.front()}, *admin_endpoint); !s.ok()) {
    Log(LogLevel::kError, "cannot start the admin plane").Error(s);
    data_server.ReleaseAcceptors();  // before the io_contexts they belong to are destroyed
    admin_server.ReleaseAcceptors();
    return kExitFailure;
  }

  // The Envoy Rate Limit Service (server.grpc_listen): decides on the same loops, through the
  // same Frontend, as the data plane.
  std::optional<rls::RlsServer> rls_server;
  if (!cfg.server.grpc_listen.empty()) {
    rls_server.emplace(&frontend, &http_metrics, &registry_index, &registry, context_ptrs,
                       rls::RlsServerOptions{
                           .max_connections = cfg.server.max_connections,
                           .handshake_timeout = cfg.server.grpc_handshake_timeout,
                           .idle_timeout = cfg.server.grpc_idle_timeout,
                           .request_timeout = cfg.server.grpc_request_timeout,
                           .write_timeout = cfg.server.grpc_write_timeout,
                           .refused = &refused.WithLabels({"grpc"}),
                           // A decision waits for Redis at most max_wait (restart to change it).
                           .shutdown_decisions_wait = (cfg.store.type == config::StoreType::kRedis
                                                           ? cfg.store.redis.EffectiveMaxWait()
                                                           : absl::ZeroDuration()) +
                                                      absl::Seconds(1)});
    rls_server->SetRules(*std::move(initial_rules));
    if (absl::Status s = rls_server->Start(cfg.server.grpc_listen); !s.ok()) {
      Log(LogLevel::kError, "cannot start the gRPC rate limit service").Error(s);
      data_server.ReleaseAcceptors();
      admin_server.ReleaseAcceptors();
      return kExitFailure;
    }
  }

  LoopHeartbeats loop_heartbeats(contexts);
  heartbeats.store(&loop_heartbeats);

  std::vector<std::thread> workers;
  for (size_t i = 0; i < contexts.size(); ++i) {
    workers.emplace_back([ctx = contexts[i].get(), &backend, i] {
      backend.Attach(i);
      ctx->run();
    });
  }
  // Redis answering is worth waiting for briefly before announcing the start: until then every
  // decision is answered per on_store_error.
  const bool store_late = !backend.WaitForStore(
      std::max(absl::ZeroDuration(), kRedisStartWait - (absl::Now() - opening)));
  if (store_late) {
    Log(LogLevel::kWarn, "redis has not answered yet; deciding per on_store_error until it does")
        .Str("redis", backend.address());
  }

  // Alert delivery runs on its own threads (docs/alerts.md); a reload rebuilds it.
  const engine::AlertDeliveryContext alert_context{.backend = &backend,
                                                   .clock = backend.system_clock(),
                                                   .registry = &registry,
                                                   .dead_letters = &dead_letters,
                                                   .registry_index = &registry_index};
  auto alert_delivery = std::make_unique<engine::AlertDelivery>(cfg, alert_context);

  // Signals are handled on the main thread's own io_context.
  asio::io_context control(1);
  asio::signal_set signals(control, SIGTERM, SIGINT, SIGHUP);
  asio::steady_timer drain_timer(control);
  asio::steady_timer delay_timer(control);
  std::chrono::steady_clock::time_point drain_deadline;
  bool draining = false;
  // A reload may change it (it is read when SIGTERM comes).
  absl::Duration shutdown_delay = cfg.server.shutdown_delay;
  std::function<void()> poll_drain = [&] {
    if ((data_server.in_flight() == 0 && admin_server.in_flight() == 0 &&
         (!rls_server || rls_server->in_flight() == 0)) ||
        std::chrono::steady_clock::now() >= drain_deadline) {
      control.stop();
      return;
    }
    drain_timer.expires_after(std::chrono::milliseconds(10));
    drain_timer.async_wait([&](const boost::system::error_code&) { poll_drain(); });
  };
  std::function<void(const boost::system::error_code&, int)> on_signal =
      [&](const boost::system::error_code& ec, int sig) {
        if (ec) return;
        if (sig == SIGHUP) {
          // systemd shows the unit as reloading until READY=1 below, whatever the outcome.
          notifier.Reloading();
          config::Config next;
          // No subject is written while the new plans are checked against the registry and
          // swapped in (a write in flight finishes first).
          std::unique_lock<std::shared_mutex> no_subject_writes = registry_api.BlockSubjectWrites();
          absl::StatusOr<std::shared_ptr<const http::Frontend>> fe =
              LoadFrontend(config_path, limiter_context, &next);
          absl::StatusOr<std::shared_ptr<const rls::RlRuleSet>> rules =
              fe.ok() ? LoadRules(next) : fe.status();
          if (!rules.ok()) {
            Log(LogLevel::kError, "reload refused; keeping the running configuration")
                .Error(rules.status());
            reloads.WithLabels({"refused"}).Inc();
            last_reload_ok.Set(0);
            notifier.Ready(absl::StrCat("reload refused; keeping the running configuration: ",
                                        rules.status().message()));
          } else {
            WarnAboutRestartOnlyChanges(cfg, next);
            shutdown_delay = next.server.shutdown_delay;
            frontend.Set(std::move(*fe));
            if (rls_server) rls_server->SetRules(*std::move(rules));
            no_subject_writes.unlock();
            // Waits for the sink calls in flight (each bounded by its timeout); what they did
            // not finish stays in the outbox for the new dispatcher.
            alert_delivery.reset();
            alert_delivery = std::make_unique<engine::AlertDelivery>(next, alert_context);
            reloads.WithLabels({"ok"}).Inc();
            last_reload_ok.Set(1);
            Log(LogLevel::kInfo, "configuration reloaded")
                .Str("config", config_path)
                .Int("plans", static_cast<int64_t>(next.plans.size()))
                .Int("keys", static_cast<int64_t>(next.keys.size()));
            LogConfigSummary(next, "reload");  // observability: debug lines only
            notifier.Ready("serving; configuration reloaded");
          }
          signals.async_wait(on_signal);
          return;
        }
        const auto drain = [&] {
          if (draining) return;
          draining = true;
          delay_timer.cancel();
          Log(LogLevel::kInfo, "stopping: no new connections; draining in-flight requests");
          data_server.StopAccepting();
          admin_server.StopAccepting();
          drain_deadline = std::chrono::steady_clock::now() + kDrainDeadline;
          // gRPC: GOAWAY on every connection; what is left at the deadline is closed.
          if (rls_server) rls_server->BeginShutdown(absl::Now() + absl::FromChrono(kDrainDeadline));
          poll_drain();
        };
        const std::string_view name = sig == SIGTERM ? "SIGTERM" : "SIGINT";
        const bool again = stopping.exchange(true);
        if (!again) notifier.Stopping(absl::StrCat("stopping on ", ToAbsl(name)));
        if (again || sig == SIGINT || shutdown_delay <= absl::ZeroDuration()) {
          // SIGINT, a second signal or no delay: stop now.
          Log(LogLevel::kInfo, "stopping").Str("signal", name);
          drain();
        } else {
          // Readiness is 503 from now on; decisions go on until load balancers have noticed.
          Log(LogLevel::kInfo, "stopping: readiness now fails; serving until shutdown_delay ends")
              .Str("signal", name)
              .Str("shutdown_delay", absl::FormatDuration(shutdown_delay));
          delay_timer.expires_after(absl::ToChronoMilliseconds(shutdown_delay));
          delay_timer.async_wait([drain](const boost::system::error_code& e) {
            if (!e) drain();
          });
        }
        signals.async_wait(on_signal);
      };
  signals.async_wait(on_signal);

  // WATCHDOG=1 at half of WatchdogSec=, but only while every event loop turns: a loop blocked by a
  // handler then gets the process restarted (so does this control loop blocked, e.g. by a reload
  // that hangs).
  asio::steady_timer watchdog_timer(control);
  bool loops_were_turning = true;
  std::function<void()> pet_watchdog;
  if (const std::optional<std::chrono::microseconds> interval = notifier.watchdog_interval()) {
    const auto period =
        std::max<std::chrono::microseconds>(*interval / 2, std::chrono::milliseconds(1));
    pet_watchdog = [&, period] {
      const bool turning = loop_heartbeats.AllTurning();
      if (turning) {
        notifier.Watchdog();
      } else if (loops_were_turning) {
        Log(LogLevel::kError, "an event loop is stuck; no more watchdog pings to systemd");
      }
      loops_were_turning = turning;
      watchdog_timer.expires_after(period);
      watchdog_timer.async_wait([&](const boost::system::error_code& ec) {
        if (!ec) pet_watchdog();
      });
    };
  }

  Log(LogLevel::kInfo, "sluice started")
      .Str("version", SLUICE_VERSION)
      .Str("config", config_path)
      .Str("store", backend.kind())
      .Str("listen", cfg.server.listen)
      .Int("port", data_server.port())
      .Str("admin_listen", cfg.server.admin_listen)
      .Int("admin_port", admin_server.port())
      .Str("grpc_listen", cfg.server.grpc_listen)
      .Int("grpc_port", rls_server ? rls_server->port() : 0)
      .Int("threads", threads);
  LogConfigSummary(cfg, "start");  // observability: debug lines only
  // Both planes listen and the wait for Redis has ended (answered, or serving degraded).
  notifier.Ready(store_late ? "serving; Redis has not answered yet (deciding per on_store_error)"
                            : "serving");
  if (pet_watchdog) pet_watchdog();
  pthread_sigmask(SIG_UNBLOCK, &handled, nullptr);
  control.run();

  // While the loops still run: the calls in flight finish on them.
  if (rls_server) rls_server->FinishShutdown();
  for (auto& io : contexts) io->stop();
  for (std::thread& t : workers) t.join();
  heartbeats.store(nullptr);
  loop_heartbeats.Release();
  // Tear down in dependency order: acceptors, then the contexts (and the coroutine frames they
  // still hold, which refer to the servers), then the servers.
  data_server.ReleaseAcceptors();
  admin_server.ReleaseAcceptors();
  // Before the final snapshot, so that what was delivered is acked and not saved.
  alert_delivery.reset();
  // Closes the connections; pending registry writes were answered before the servers stopped, so
  // this finishes the writer; then the final snapshot.
  absl::Status saved = backend.Stop();
  contexts.clear();
  if (!saved.ok()) {
    Log(LogLevel::kError, "final snapshot failed").Error(saved);
    return kExitFailure;
  }
  Log(LogLevel::kInfo, "stopped").Int("in_flight_abandoned", data_server.in_flight());
  return kExitOk;
}

}  // namespace sluice::server
