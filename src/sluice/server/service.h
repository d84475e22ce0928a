// `sluice serve`: wires config, store, limiter, HTTP planes, threads and signals together. The only
// place that names concrete stores.
#ifndef SLUICE_SERVER_SERVICE_H_
#define SLUICE_SERVER_SERVICE_H_

#include <signal.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/system/error_code.hpp>

#include "absl/time/time.h"
#include "sluice/alerts/dead_letters.h"
#include "sluice/config/config.h"
#include "sluice/engine/alert_delivery.h"
#include "sluice/engine/store_backend.h"
#include "sluice/http/registry_api.h"
#include "sluice/http/routes.h"
#include "sluice/http/server.h"
#include "sluice/metrics/metrics.h"
#include "sluice/registry/index.h"
#include "sluice/rls/ratelimit_rules.h"
#include "sluice/rls/rls_server.h"
#include "sluice/server/frontend_loader.h"
#include "sluice/server/loop_heartbeats.h"
#include "sluice/server/notify.h"
#include "sluice/server/reservation_expirer.h"
#include "sluice/server/store_probe.h"

namespace sluice::server {

// One `sluice serve`: at most one per process, because it takes SIGTERM, SIGINT and SIGHUP.
// Start() builds everything and starts the event loops; Run() handles signals until the stop and
// tears everything down. Not copyable.
//
// The members are declared in the order they are built, so that destruction (reverse order) takes
// down each part before what it uses, after a failed start as after Run().
class Service {
 public:
  // Holds SIGTERM, SIGINT and SIGHUP pending on the calling thread (Run() unblocks them), reads
  // and checks `config_path`, opens the store, builds the planes, listens, and starts the event
  // loops and alert delivery. On failure: the exit code (78 for a configuration error, 1 for a
  // runtime one), after logging why; what was built is torn down.
  [[nodiscard]] static std::variant<std::unique_ptr<Service>, int> Start(
      const std::string& config_path);

  // Announces the start ("sluice started", systemd READY=1, the watchdog), then handles signals
  // until SIGTERM or SIGINT and the drain that follows: SIGHUP reloads `config_path`. Then stops
  // everything; returns the process exit code (0 after a clean drain, 1 when the final snapshot
  // fails). Call once, on the thread that called Start().
  [[nodiscard]] int Run();

  ~Service();
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

 private:
  // The main thread's own loop, where signals are handled; built by Run().
  struct Control {
    boost::asio::io_context io{1};
    boost::asio::signal_set signals{io, SIGTERM, SIGINT, SIGHUP};
    boost::asio::steady_timer drain_timer{io};
    boost::asio::steady_timer delay_timer{io};
    std::chrono::steady_clock::time_point drain_deadline;
    bool draining = false;
    // A reload may change it (it is read when SIGTERM comes).
    absl::Duration shutdown_delay;
    boost::asio::steady_timer watchdog_timer{io};
    bool loops_were_turning = true;
  };

  explicit Service(std::string config_path);

  // Start()'s steps, in this order. Those that can fail return 0 or the exit code, having logged
  // why.
  int ReadConfig();      // the file, CheckServable, the listen addresses
  int OpenStore();       // the event loops (not running yet), libcurl, the store, plans in use
  int BuildDecisions();  // the first Frontend and rules, the service's metrics
  void BuildPlanes();    // the registry API, the data and admin planes and their servers
  int Listen();          // the data plane, the admin plane, the gRPC service
  void StartLoops();     // the loops' threads, the wait for Redis, alert delivery

  // Run()'s parts; each runs on the control loop.
  void WaitForSignal();
  void OnSignal(const boost::system::error_code& ec, int signal);
  // SIGHUP: builds a Frontend and rules from the file and swaps them in, or keeps the running
  // ones. Restart-only settings are compared with the start's configuration.
  void Reload();
  // SIGTERM or SIGINT: readiness fails from now on; the drain begins at once (SIGINT, a second
  // signal, no shutdown_delay) or once shutdown_delay has passed.
  void Drain(int signal);
  // No new connections; the control loop stops once the requests in flight are answered, at most
  // kDrainDeadline from now. Idempotent.
  void BeginDrain();
  void PollDrain();
  // WATCHDOG=1 every `period` while every event loop turns.
  void PetWatchdog(std::chrono::microseconds period);
  // After the control loop: finishes the gRPC calls, stops and joins the loops, then tears down
  // in dependency order and saves the final snapshot. Returns the exit code.
  int Stop();

  const std::string config_path_;
  // The signals Run() handles, blocked from construction until Run() unblocks them.
  const sigset_t handled_;
  // Under systemd (Type=notify): READY=1 once serving, RELOADING=1 and READY=1 around a reload,
  // STOPPING=1, WATCHDOG=1 while the event loops turn. Outside systemd it does nothing.
  const Notifier notifier_;
  // Read and checked once: everything is built from this file (reading it again could see
  // another one). A reload compares restart-only settings with it.
  config::Config cfg_;
  boost::asio::ip::tcp::endpoint data_endpoint_;
  boost::asio::ip::tcp::endpoint admin_endpoint_;
  unsigned threads_ = 0;
  std::vector<std::unique_ptr<boost::asio::io_context>> contexts_;
  std::vector<boost::asio::io_context*> context_ptrs_;
  // When the store began to open: the start waits for Redis at most kRedisStartWait from here.
  absl::Time opening_;
  std::unique_ptr<engine::StoreBackend> backend_;
  registry::Index* registry_index_ = nullptr;  // backend_'s
  metrics::Registry registry_;
  std::optional<http::HttpMetrics> http_metrics_;
  LimiterContext limiter_context_;
  // The start's rules; handed to the gRPC service when it listens.
  std::shared_ptr<const rls::RlRuleSet> initial_rules_;
  metrics::CounterFamily* reloads_ = nullptr;
  metrics::Gauge* last_reload_ok_ = nullptr;
  std::optional<http::FrontendHolder> frontend_;
  std::optional<http::RegistryApi> registry_api_;
  std::optional<http::DataPlane> data_plane_;
  alerts::DeadLetterList dead_letters_;
  // Set by SIGTERM/SIGINT: readiness fails from then on while the data plane drains.
  std::atomic<bool> stopping_{false};
  std::optional<StoreProbe> store_probe_;
  // Set once the event loops exist (StartLoops); /healthz reads it through this pointer.
  std::atomic<const LoopHeartbeats*> heartbeats_{nullptr};
  std::optional<http::AdminPlane> admin_plane_;
  metrics::CounterFamily* refused_ = nullptr;  // sluice_connections_refused_total{plane}
  std::optional<http::HttpServer> data_server_;
  std::optional<http::HttpServer> admin_server_;
  // The Envoy Rate Limit Service (server.grpc_listen); empty without one.
  std::optional<rls::RlsServer> rls_server_;
  std::optional<LoopHeartbeats> loop_heartbeats_;
  std::optional<ReservationExpirer> reservation_expirer_;
  std::vector<std::thread> workers_;
  bool store_late_ = false;  // Redis had not answered when the start was announced
  engine::AlertDeliveryContext alert_context_;
  std::unique_ptr<engine::AlertDelivery> alert_delivery_;
  std::optional<Control> control_;
};

// Start() then Run(): returns the process exit code (0 after a clean drain, 1 on a runtime
// failure, 78 on a configuration error). SIGHUP reloads `config_path`.
int Serve(const std::string& config_path);

}  // namespace sluice::server

#endif  // SLUICE_SERVER_SERVICE_H_
