#include "sluice/server/service.h"

#include <pthread.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <shared_mutex>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "sluice/common/log.h"
#include "sluice/common/strings.h"
#include "sluice/metrics/process.h"
#include "sluice/server/config_check.h"
#include "sluice/server/config_summary.h"
#include "sluice/server/cpus.h"

namespace sluice::server {
namespace asio = boost::asio;

namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr auto kDrainDeadline = std::chrono::seconds(10);
// How long the start waits for Redis to answer before serving anyway (degraded until it does).
constexpr absl::Duration kRedisStartWait = absl::Seconds(2);

// Holds SIGTERM, SIGINT and SIGHUP pending until the signal handlers exist (a signal that arrives
// during startup is then handled, not fatal). Threads started later inherit the mask, so the
// signals are delivered to this thread only once it unblocks them.
sigset_t BlockHandledSignals() {
  sigset_t handled;
  sigemptyset(&handled);
  sigaddset(&handled, SIGTERM);
  sigaddset(&handled, SIGINT);
  sigaddset(&handled, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &handled, nullptr);
  return handled;
}

}  // namespace

Service::Service(std::string config_path)
    : config_path_(std::move(config_path)), handled_(BlockHandledSignals()) {}

Service::~Service() = default;

std::variant<std::unique_ptr<Service>, int> Service::Start(const std::string& config_path) {
  // A failed step returns here; destroying `service` tears down what the earlier steps built.
  auto service = std::unique_ptr<Service>(new Service(config_path));
  if (const int code = service->ReadConfig(); code != kExitOk) return code;
  if (const int code = service->OpenStore(); code != kExitOk) return code;
  if (const int code = service->BuildDecisions(); code != kExitOk) return code;
  service->BuildPlanes();
  if (const int code = service->Listen(); code != kExitOk) return code;
  service->StartLoops();
  return service;
}

int Service::ReadConfig() {
  absl::StatusOr<config::Config> loaded = config::LoadConfigFile(config_path_);
  if (!loaded.ok()) {
    Log(LogLevel::kError, "invalid configuration").Error(loaded.status());
    return config::kExitConfigError;
  }
  cfg_ = *std::move(loaded);
  // Everything below that could refuse this file, checked the way `sluice check-config` does.
  if (absl::Status s = CheckServable(cfg_); !s.ok()) {
    Log(LogLevel::kError, "invalid configuration").Error(s);
    return config::kExitConfigError;
  }
  absl::StatusOr<asio::ip::tcp::endpoint> data_endpoint = http::ParseEndpoint(cfg_.server.listen);
  absl::StatusOr<asio::ip::tcp::endpoint> admin_endpoint =
      http::ParseEndpoint(cfg_.server.admin_listen);
  if (!data_endpoint.ok() || !admin_endpoint.ok()) {
    Log(LogLevel::kError, "invalid listen address")
        .Error(data_endpoint.ok() ? admin_endpoint.status() : data_endpoint.status());
    return config::kExitConfigError;
  }
  data_endpoint_ = *data_endpoint;
  admin_endpoint_ = *admin_endpoint;
  return kExitOk;
}

int Service::OpenStore() {
  // 0: one per CPU this process may use (affinity mask, cgroup CPU quota), not per CPU of the host.
  threads_ = cfg_.server.threads > 0 ? static_cast<unsigned>(cfg_.server.threads) : AvailableCpus();
  for (unsigned i = 0; i < threads_; ++i) {
    contexts_.push_back(std::make_unique<asio::io_context>(1));
    context_ptrs_.push_back(contexts_.back().get());
  }

  // Before any thread starts (libcurl's global state).
  if (absl::Status s = alerts::GlobalInit(); !s.ok()) {
    Log(LogLevel::kError, "cannot initialise libcurl").Error(s);
    return kExitFailure;
  }

  // The store, its clock and the registry of subjects and keys (every decision reads the index;
  // the registry keeps it durably: an SQLite file with the memory store, Redis with Redis).
  // The start's one wait for Redis counts from here: a Redis registry's first load (inside the
  // open) and the clock's first sample (StartLoops) run at once, so 2 s in all, not 2 s each.
  opening_ = absl::Now();
  absl::StatusOr<std::unique_ptr<engine::StoreBackend>> opened =
      engine::OpenStoreBackend(cfg_, {.loops = context_ptrs_});
  if (!opened.ok()) {
    Log(LogLevel::kError, "cannot open the store").Error(opened.status());
    return kExitFailure;
  }
  backend_ = *std::move(opened);
  registry_index_ = backend_->index();
  if (absl::Status s = CheckPlansInUse(cfg_, *registry_index_); !s.ok()) {
    Log(LogLevel::kError, "invalid configuration").Error(s);
    return config::kExitConfigError;
  }
  return kExitOk;
}

int Service::BuildDecisions() {
  // Before the first Frontend: each resolves its decision counters in it.
  http_metrics_.emplace(registry_);
  limiter_context_ = LimiterContext{
      .backend = backend_.get(), .registry = registry_index_, .metrics = &*http_metrics_};
  absl::StatusOr<std::shared_ptr<const http::Frontend>> initial =
      BuildFrontend(cfg_, limiter_context_);
  if (!initial.ok()) {
    Log(LogLevel::kError, "invalid configuration").Error(initial.status());
    return config::kExitConfigError;
  }
  absl::StatusOr<std::shared_ptr<const rls::RlRuleSet>> rules = LoadRules(cfg_);
  if (!rules.ok()) {
    Log(LogLevel::kError, "invalid configuration").Error(rules.status());
    return config::kExitConfigError;
  }
  initial_rules_ = *std::move(rules);
  if (initial_rules_ != nullptr && cfg_.server.grpc_listen.empty()) {
    Log(LogLevel::kWarn,
        "envoy.ratelimit_config is set but server.grpc_listen is not: its rules "
        "decide nothing until the gRPC service listens");
  }

  backend_->RegisterMetrics(registry_);
  metrics::RegisterProcessMetrics(registry_,
                                  absl::ToUnixMillis(backend_->system_clock()->Now()) / 1000.0);
  reloads_ = &registry_.AddCounterFamily("sluice_config_reloads_total",
                                         "SIGHUP reloads, by result (ok or refused).", {"result"});
  last_reload_ok_ = &registry_.AddGauge(
      "sluice_config_last_reload_successful",
      "1 if the latest reload was applied (or none was tried), 0 if it was refused.");
  last_reload_ok_->Set(1);
  registry_.AddGaugeFamily("sluice_build_info", "Build information.", {"version"})
      .WithLabels({SLUICE_VERSION})
      .Set(1);

  frontend_.emplace(*std::move(initial));
  return kExitOk;
}

void Service::BuildPlanes() {
  registry_api_.emplace(registry_index_, backend_->registry_backend(), &*frontend_);
  data_plane_.emplace(&*frontend_, &*http_metrics_, registry_index_);
  store_probe_.emplace(backend_->store(), backend_->clock());
  admin_plane_.emplace(
      &*frontend_, &*http_metrics_, &registry_,
      http::AdminOptions{
          .dead_letters = [this] { return engine::DeadLettersJson(dead_letters_); },
          .live =
              [this] {
                const LoopHeartbeats* h = heartbeats_.load();
                return h == nullptr || h->AllTurning();
              },
          .probe_store = [this](StatusCallback done) { store_probe_->Run(std::move(done)); },
          .stopping = &stopping_,
          .registry = &*registry_api_,
          .index = registry_index_});
  metrics::CounterFamily& accept_failures = registry_.AddCounterFamily(
      "sluice_accept_failures_total",
      "accept() failures for want of resources (EMFILE, ENFILE, ...), by plane; while they last, "
      "waiting clients are refused and accepting pauses for 100 ms at a time.",
      {"plane"});
  refused_ = &registry_.AddCounterFamily(
      "sluice_connections_refused_total",
      "Connections closed at once because the plane's connection cap was reached.", {"plane"});
  metrics::CounterFamily& evicted = registry_.AddCounterFamily(
      "sluice_connections_evicted_total",
      "Admin connections that had not authenticated, closed to make room for a new one.",
      {"plane"});
  data_server_.emplace(
      &*data_plane_,
      http::ServerOptions{.max_connections = static_cast<size_t>(cfg_.server.max_connections),
                          .accept_failures = &accept_failures.WithLabels({"data"}),
                          .refused = &refused_->WithLabels({"data"}),
                          .evicted = &evicted.WithLabels({"data"}),
                          .name = "data"});
  // The admin plane keeps room for the kubelet and Prometheus: a connection that has not shown the
  // token idles out sooner and is the first to go when the plane is full.
  admin_server_.emplace(
      &*admin_plane_,
      http::ServerOptions{.header_timeout = std::chrono::seconds(5),
                          .unauthenticated_idle_timeout = std::chrono::seconds(5),
                          .max_connections = static_cast<size_t>(cfg_.server.admin_max_connections),
                          .evict_unauthenticated = true,
                          .accept_failures = &accept_failures.WithLabels({"admin"}),
                          .refused = &refused_->WithLabels({"admin"}),
                          .evicted = &evicted.WithLabels({"admin"}),
                          .name = "admin"});
}

int Service::Listen() {
  if (absl::Status s = data_server_->Listen(context_ptrs_, data_endpoint_); !s.ok()) {
    Log(LogLevel::kError, "cannot start the data plane").Error(s);
    data_server_->ReleaseAcceptors();  // before the io_contexts they belong to are destroyed
    return kExitFailure;
  }
  if (absl::Status s = admin_server_->Listen({context_ptrs_.front()}, admin_endpoint_); !s.ok()) {
    Log(LogLevel::kError, "cannot start the admin plane").Error(s);
    data_server_->ReleaseAcceptors();  // before the io_contexts they belong to are destroyed
    admin_server_->ReleaseAcceptors();
    return kExitFailure;
  }

  // The Envoy Rate Limit Service (server.grpc_listen): decides on the same loops, through the
  // same Frontend, as the data plane.
  if (!cfg_.server.grpc_listen.empty()) {
    rls_server_.emplace(&*frontend_, &*http_metrics_, registry_index_, &registry_, context_ptrs_,
                        rls::RlsServerOptions{
                            .max_connections = cfg_.server.max_connections,
                            .handshake_timeout = cfg_.server.grpc_handshake_timeout,
                            .idle_timeout = cfg_.server.grpc_idle_timeout,
                            .request_timeout = cfg_.server.grpc_request_timeout,
                            .write_timeout = cfg_.server.grpc_write_timeout,
                            .refused = &refused_->WithLabels({"grpc"}),
                            // A decision waits for Redis at most max_wait (restart to change it).
                            .shutdown_decisions_wait = (cfg_.store.type == config::StoreType::kRedis
                                                            ? cfg_.store.redis.EffectiveMaxWait()
                                                            : absl::ZeroDuration()) +
                                                       absl::Seconds(1)});
    rls_server_->SetRules(std::move(initial_rules_));
    if (absl::Status s = rls_server_->Start(cfg_.server.grpc_listen); !s.ok()) {
      Log(LogLevel::kError, "cannot start the gRPC rate limit service").Error(s);
      data_server_->ReleaseAcceptors();
      admin_server_->ReleaseAcceptors();
      return kExitFailure;
    }
  }
  return kExitOk;
}

void Service::StartLoops() {
  loop_heartbeats_.emplace(contexts_);
  heartbeats_.store(&*loop_heartbeats_);
  reservation_expirer_.emplace(*contexts_.front(), &*frontend_, &*http_metrics_);

  for (size_t i = 0; i < contexts_.size(); ++i) {
    workers_.emplace_back([ctx = contexts_[i].get(), backend = backend_.get(), i] {
      backend->Attach(i);
      ctx->run();
    });
  }
  // Redis answering is worth waiting for briefly before announcing the start: until then every
  // decision is answered per on_store_error.
  store_late_ = !backend_->WaitForStore(
      std::max(absl::ZeroDuration(), kRedisStartWait - (absl::Now() - opening_)));
  if (store_late_) {
    Log(LogLevel::kWarn, "redis has not answered yet; deciding per on_store_error until it does")
        .Str("redis", backend_->address());
  }

  // Alert delivery runs on its own threads (docs/alerts.md); a reload rebuilds it.
  alert_context_ = engine::AlertDeliveryContext{.backend = backend_.get(),
                                                .clock = backend_->system_clock(),
                                                .registry = &registry_,
                                                .dead_letters = &dead_letters_,
                                                .registry_index = registry_index_};
  alert_delivery_ = std::make_unique<engine::AlertDelivery>(cfg_, alert_context_);
}

int Service::Run() {
  // Signals are handled on the main thread's own io_context.
  control_.emplace();
  control_->shutdown_delay = cfg_.server.shutdown_delay;
  WaitForSignal();

  Log(LogLevel::kInfo, "sluice started")
      .Str("version", SLUICE_VERSION)
      .Str("config", config_path_)
      .Str("store", backend_->kind())
      .Str("listen", cfg_.server.listen)
      .Int("port", data_server_->port())
      .Str("admin_listen", cfg_.server.admin_listen)
      .Int("admin_port", admin_server_->port())
      .Str("grpc_listen", cfg_.server.grpc_listen)
      .Int("grpc_port", rls_server_ ? rls_server_->port() : 0)
      .Int("threads", threads_);
  LogConfigSummary(cfg_, "start");  // observability: debug lines only
  // Both planes listen and the wait for Redis has ended (answered, or serving degraded).
  notifier_.Ready(store_late_ ? "serving; Redis has not answered yet (deciding per on_store_error)"
                              : "serving");
  // WATCHDOG=1 at half of WatchdogSec=, but only while every event loop turns: a loop blocked by a
  // handler then gets the process restarted (so does this control loop blocked, e.g. by a reload
  // that hangs).
  if (const std::optional<std::chrono::microseconds> interval = notifier_.watchdog_interval()) {
    PetWatchdog(std::max<std::chrono::microseconds>(*interval / 2, std::chrono::milliseconds(1)));
  }
  pthread_sigmask(SIG_UNBLOCK, &handled_, nullptr);
  control_->io.run();
  return Stop();
}

void Service::WaitForSignal() {
  control_->signals.async_wait(
      [this](const boost::system::error_code& ec, int signal) { OnSignal(ec, signal); });
}

void Service::OnSignal(const boost::system::error_code& ec, int signal) {
  if (ec) return;
  if (signal == SIGHUP) {
    Reload();
  } else {
    Drain(signal);
  }
  WaitForSignal();
}

void Service::Reload() {
  // systemd shows the unit as reloading until READY=1 below, whatever the outcome.
  notifier_.Reloading();
  config::Config next;
  // No subject is written while the new plans are checked against the registry and swapped in (a
  // write in flight finishes first).
  std::unique_lock<std::shared_mutex> no_subject_writes = registry_api_->BlockSubjectWrites();
  absl::StatusOr<std::shared_ptr<const http::Frontend>> fe =
      LoadFrontend(config_path_, limiter_context_, &next);
  absl::StatusOr<std::shared_ptr<const rls::RlRuleSet>> rules =
      fe.ok() ? LoadRules(next) : fe.status();
  if (!rules.ok()) {
    // Counted before it is logged, as an accepted reload is: whoever reads the log line and then
    // /metrics sees the refusal counted.
    reloads_->WithLabels({"refused"}).Inc();
    last_reload_ok_->Set(0);
    Log(LogLevel::kError, "reload refused; keeping the running configuration")
        .Error(rules.status());
    notifier_.Ready(absl::StrCat("reload refused; keeping the running configuration: ",
                                 rules.status().message()));
    return;
  }
  WarnAboutRestartOnlyChanges(cfg_, next);
  control_->shutdown_delay = next.server.shutdown_delay;
  frontend_->Set(std::move(*fe));
  if (rls_server_) rls_server_->SetRules(*std::move(rules));
  no_subject_writes.unlock();
  // Waits for the sink calls in flight (each bounded by its timeout); what they did not finish
  // stays in the outbox for the new dispatcher.
  alert_delivery_.reset();
  alert_delivery_ = std::make_unique<engine::AlertDelivery>(next, alert_context_);
  reloads_->WithLabels({"ok"}).Inc();
  last_reload_ok_->Set(1);
  Log(LogLevel::kInfo, "configuration reloaded")
      .Str("config", config_path_)
      .Int("plans", static_cast<int64_t>(next.plans.size()))
      .Int("keys", static_cast<int64_t>(next.keys.size()));
  LogConfigSummary(next, "reload");  // observability: debug lines only
  notifier_.Ready("serving; configuration reloaded");
}

void Service::Drain(int signal) {
  const std::string_view name = signal == SIGTERM ? "SIGTERM" : "SIGINT";
  const bool again = stopping_.exchange(true);
  if (!again) notifier_.Stopping(absl::StrCat("stopping on ", ToAbsl(name)));
  if (again || signal == SIGINT || control_->shutdown_delay <= absl::ZeroDuration()) {
    // SIGINT, a second signal or no delay: stop now.
    Log(LogLevel::kInfo, "stopping").Str("signal", name);
    BeginDrain();
    return;
  }
  // Readiness is 503 from now on; decisions go on until load balancers have noticed.
  Log(LogLevel::kInfo, "stopping: readiness now fails; serving until shutdown_delay ends")
      .Str("signal", name)
      .Str("shutdown_delay", absl::FormatDuration(control_->shutdown_delay));
  control_->delay_timer.expires_after(absl::ToChronoMilliseconds(control_->shutdown_delay));
  control_->delay_timer.async_wait([this](const boost::system::error_code& e) {
    if (!e) BeginDrain();
  });
}

void Service::BeginDrain() {
  if (control_->draining) return;
  control_->draining = true;
  control_->delay_timer.cancel();
  Log(LogLevel::kInfo, "stopping: no new connections; draining in-flight requests");
  data_server_->StopAccepting();
  admin_server_->StopAccepting();
  control_->drain_deadline = std::chrono::steady_clock::now() + kDrainDeadline;
  // gRPC: GOAWAY on every connection; what is left at the deadline is closed.
  if (rls_server_) rls_server_->BeginShutdown(absl::Now() + absl::FromChrono(kDrainDeadline));
  PollDrain();
}

void Service::PollDrain() {
  if ((data_server_->in_flight() == 0 && admin_server_->in_flight() == 0 &&
       (!rls_server_ || rls_server_->in_flight() == 0)) ||
      std::chrono::steady_clock::now() >= control_->drain_deadline) {
    control_->io.stop();
    return;
  }
  control_->drain_timer.expires_after(std::chrono::milliseconds(10));
  control_->drain_timer.async_wait([this](const boost::system::error_code&) { PollDrain(); });
}

void Service::PetWatchdog(std::chrono::microseconds period) {
  const bool turning = loop_heartbeats_->AllTurning();
  if (turning) {
    notifier_.Watchdog();
  } else if (control_->loops_were_turning) {
    Log(LogLevel::kError, "an event loop is stuck; no more watchdog pings to systemd");
  }
  control_->loops_were_turning = turning;
  control_->watchdog_timer.expires_after(period);
  control_->watchdog_timer.async_wait([this, period](const boost::system::error_code& ec) {
    if (!ec) PetWatchdog(period);
  });
}

int Service::Stop() {
  // While the loops still run: the calls in flight finish on them.
  if (rls_server_) rls_server_->FinishShutdown();
  for (auto& io : contexts_) io->stop();
  for (std::thread& t : workers_) t.join();
  heartbeats_.store(nullptr);
  loop_heartbeats_->Release();
  reservation_expirer_->Release();
  // Tear down in dependency order: acceptors, then the contexts (and the coroutine frames they
  // still hold, which refer to the servers), then the servers.
  data_server_->ReleaseAcceptors();
  admin_server_->ReleaseAcceptors();
  // Before the final snapshot, so that what was delivered is acked and not saved.
  alert_delivery_.reset();
  // Closes the connections; pending registry writes were answered before the servers stopped, so
  // this finishes the writer; then the final snapshot.
  absl::Status saved = backend_->Stop();
  contexts_.clear();
  if (!saved.ok()) {
    Log(LogLevel::kError, "final snapshot failed").Error(saved);
    return kExitFailure;
  }
  Log(LogLevel::kInfo, "stopped").Int("in_flight_abandoned", data_server_->in_flight());
  return kExitOk;
}

int Serve(const std::string& config_path) {
  std::variant<std::unique_ptr<Service>, int> started = Service::Start(config_path);
  if (const int* code = std::get_if<int>(&started)) return *code;
  return std::get<std::unique_ptr<Service>>(started)->Run();
}

}  // namespace sluice::server
