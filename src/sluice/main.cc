// The sluice command line: serve, check-config, --version, --help.
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "sluice/common/clock.h"
#include "sluice/common/log.h"
#include "sluice/config/config.h"
#include "sluice/limiter/limiter.h"
#include "sluice/limiter/plan.h"
#include "sluice/store/memory/maintainer.h"
#include "sluice/store/memory/memory_store.h"
#include "sluice/store/memory/snapshot.h"

namespace sluice {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;

int CheckConfig(const std::string& path) {
  absl::StatusOr<config::Config> cfg = config::LoadConfigFile(path);
  if (!cfg.ok()) {
    std::cerr << cfg.status().message() << "\n";
    return config::kExitConfigError;
  }
  size_t limits = 0;
  for (const config::PlanConfig& p : cfg->plans) limits += p.limits.size();
  std::cout << path << ": OK (" << cfg->plans.size() << " plans, " << limits << " limits, "
            << cfg->keys.size() << " keys, " << cfg->alerts.sinks.size() << " alert sinks)\n";
  return kExitOk;
}

// Blocks until SIGTERM or SIGINT and returns which one arrived.
int WaitForStopSignal() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  int sig = 0;
  sigwait(&set, &sig);
  return sig;
}

int Serve(const std::string& path) {
  // Stop signals are taken synchronously by WaitForStopSignal; every thread started later
  // inherits the mask, so no thread is interrupted by them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  absl::StatusOr<config::Config> cfg = config::LoadConfigFile(path);
  if (!cfg.ok()) {
    Log(LogLevel::kError, "invalid configuration").Error(cfg.status());
    return config::kExitConfigError;
  }
  if (cfg->store.type != config::StoreType::kMemory) {
    Log(LogLevel::kError, "store.type redis is not available in this build; use memory");
    return config::kExitConfigError;
  }
  absl::StatusOr<PlanSet> plans = PlanSet::FromConfig(*cfg);
  if (!plans.ok()) {
    Log(LogLevel::kError, "invalid configuration").Error(plans.status());
    return config::kExitConfigError;
  }

  SystemClock clock;
  MemoryStore store;
  const std::string& snapshot = cfg->store.memory.snapshot_path;
  if (!snapshot.empty()) {
    SnapshotStats stats;
    absl::Status s = LoadSnapshot(snapshot, store, &stats);
    if (s.ok()) {
      Log(LogLevel::kInfo, "snapshot loaded")
          .Str("path", snapshot)
          .Int("subjects", static_cast<int64_t>(stats.subjects))
          .Int("pending_alerts", static_cast<int64_t>(stats.events));
    } else if (absl::IsNotFound(s)) {
      Log(LogLevel::kInfo, "no snapshot yet; starting empty").Str("path", snapshot);
    } else {
      // Starting empty would hand every subject a fresh quota and drop undelivered alerts.
      Log(LogLevel::kError, "cannot load snapshot").Error(s);
      return kExitFailure;
    }
  }
  Limiter limiter(std::move(*plans), &store, &clock, {.on_store_error = cfg->on_store_error});
  MemoryStoreMaintainer maintainer(&store, &clock,
                                   {.snapshot_path = snapshot,
                                    .snapshot_interval = cfg->store.memory.snapshot_interval,
                                    .on_error = [](const absl::Status& s) {
                                      Log(LogLevel::kWarn, "snapshot save failed").Error(s);
                                    }});
  Log(LogLevel::kInfo, "sluice started")
      .Str("version", SLUICE_VERSION)
      .Str("config", path)
      .Str("store", "memory")
      .Int("plans", static_cast<int64_t>(limiter.plans().size()));

  const int sig = WaitForStopSignal();
  Log(LogLevel::kInfo, "stopping").Str("signal", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  absl::Status saved = maintainer.Stop();
  if (!saved.ok()) {
    Log(LogLevel::kError, "final snapshot failed").Error(saved);
    return kExitFailure;
  }
  Log(LogLevel::kInfo, "stopped");
  return kExitOk;
}

}  // namespace
}  // namespace sluice

int main(int argc, char** argv) {
  CLI::App app{
      "sluice: rate limits, daily and monthly quotas by plan, and quota alerts for HTTP APIs.\n"
      "Exit codes: 0 ok, 1 runtime failure, 78 configuration error.",
      "sluice"};
  app.set_version_flag("--version", std::string("sluice ") + SLUICE_VERSION);
  app.require_subcommand(1);

  std::string log_level = "info";
  app.add_option("--log-level", log_level, "debug, info, warn or error")->capture_default_str();

  std::string serve_config;
  CLI::App* serve = app.add_subcommand("serve", "Run the sluice service");
  serve->add_option("-c,--config", serve_config, "Configuration file (sluice.yaml)")->required();

  std::string check_config;
  CLI::App* check = app.add_subcommand(
      "check-config", "Validate a configuration file; exit 0 if valid, 78 with the error if not");
  check->add_option("-c,--config", check_config, "Configuration file (sluice.yaml)")->required();

  CLI11_PARSE(app, argc, argv);

  sluice::LogLevel level;
  if (!sluice::ParseLogLevel(log_level, &level)) {
    std::cerr << "--log-level: want debug, info, warn or error\n";
    return 2;
  }
  sluice::SetLogLevel(level);

  if (*check) return sluice::CheckConfig(check_config);
  return sluice::Serve(serve_config);
}
