// The sluice command line: serve, check-config, --version, --help.
//
// Exit codes (docs/operations.md): 0 ok, 1 runtime failure, 64 usage error (sysexits.h EX_USAGE),
// 78 configuration error (EX_CONFIG). CLI11's own codes (105 for a missing option, ...) are mapped
// to 64: an operator's script tests for sysexits.h codes, not for a parser library's.
#include <pthread.h>
#include <signal.h>

#include <cstdlib>
#include <iostream>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "sluice/common/log.h"
#include "sluice/config/config.h"
#include "sluice/server/config_check.h"
#include "sluice/server/config_summary.h"
#include "sluice/server/service.h"

namespace sluice {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitUsage = 64;

constexpr char kExitCodes[] =
    "Exit codes:\n"
    "  0   ok (serve: stopped cleanly after SIGTERM or SIGINT)\n"
    "  1   runtime failure: an address already in use, the snapshot held by another process,\n"
    "      a damaged snapshot, a failed final snapshot, a registry database held by another\n"
    "      process, empty, not SQLite, another program's or not writable\n"
    "  64  usage error: no or unknown command or option, no -c and no SLUICE_CONFIG\n"
    "  78  configuration error: the file cannot be read or is invalid (the message names the\n"
    "      file and the key path), or an environment variable is (the message names it)\n"
    "\n"
    "Environment: SLUICE_CONFIG (the file when -c is not given), SLUICE_REDIS_URL,\n"
    "SLUICE_REDIS_PASSWORD_FILE, SLUICE_ADMIN_TOKEN, SLUICE_ADMIN_TOKEN_FILE "
    "(docs/configuration.md)\n";

// The first argument that is neither an option nor --log-level's value: the command; null if none.
// CLI11 would call an unknown command "A subcommand is required", naming neither.
const char* FirstCommand(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--log-level") {
      ++i;
      continue;
    }
    if (!arg.starts_with("-")) return argv[i];
  }
  return nullptr;
}

int CheckConfig(const std::string& path) {
  absl::StatusOr<config::Config> cfg = config::LoadConfigFile(path);
  if (!cfg.ok()) {
    std::cerr << cfg.status().message() << "\n";
    return config::kExitConfigError;
  }
  // The same checks `serve` makes before it starts, so that the two never disagree.
  if (absl::Status s = server::CheckServable(*cfg); !s.ok()) {
    std::cerr << s.message() << "\n";
    return config::kExitConfigError;
  }
  std::string note;
  if (absl::Status s = server::CheckRegistryFile(*cfg, &note); !s.ok()) {
    std::cerr << s.message() << "\n";
    return config::kExitConfigError;
  }
  if (!note.empty()) std::cerr << note << "\n";
  if (const std::string redis = server::RedisNote(*cfg); !redis.empty()) {
    std::cerr << redis << "\n";
  }
  size_t limits = 0;
  for (const config::PlanConfig& p : cfg->plans) limits += p.limits.size();
  auto count = [](size_t n, const char* noun) {
    return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
  };
  std::cout << path << ": OK (" << count(cfg->plans.size(), "plan") << ", "
            << count(limits, "limit") << ", " << count(cfg->keys.size(), "key") << ", "
            << count(cfg->alerts.sinks.size(), "alert sink") << ")\n"
            << "registry: " << server::DescribeRegistry(*cfg) << "\n";
  return kExitOk;
}

}  // namespace
}  // namespace sluice

int main(int argc, char** argv) {
#ifdef NDEBUG
  // Debian's abseil is built without NDEBUG, so absl::Mutex would check lock order (a graph of
  // every Mutex and lock held) on every lock; gRPC's locks pay it on every call, about 8 % of a
  // ShouldRateLimit call's CPU (BENCHMARKS.md). Release builds turn it off, as abseil's own
  // release default does; debug and sanitizer builds keep it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
  // `serve` handles SIGTERM, SIGINT and SIGHUP; held pending from the very start, a signal that a
  // service manager sends while the process is still starting (a reload right after start) is
  // handled once the handlers exist instead of killing the process.
  sigset_t service_signals;
  sigemptyset(&service_signals);
  sigaddset(&service_signals, SIGTERM);
  sigaddset(&service_signals, SIGINT);
  sigaddset(&service_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &service_signals, nullptr);
  CLI::App app{
      "sluice: rate limits, daily and monthly quotas by plan, and quota alerts for HTTP APIs.",
      "sluice"};
  app.footer(sluice::kExitCodes);
  app.set_version_flag("--version", std::string("sluice ") + SLUICE_VERSION);
  app.require_subcommand(1);
  app.fallthrough();  // global options may follow the subcommand: `sluice serve -c f --log-level
                      // debug`

  std::string log_level = "info";
  app.add_option("--log-level", log_level, "debug, info, warn or error")->capture_default_str();

  // -c wins over SLUICE_CONFIG; CLI11 reads the variable only when -c is absent and treats "" as
  // unset, so with neither the error stays "--config is required".
  constexpr char kConfigHelp[] =
      "Configuration file (sluice.yaml); required unless SLUICE_CONFIG is set";
  std::string serve_config;
  CLI::App* serve = app.add_subcommand("serve", "Run the sluice service");
  serve->add_option("-c,--config", serve_config, kConfigHelp)->required()->envname("SLUICE_CONFIG");

  std::string check_config;
  CLI::App* check = app.add_subcommand(
      "check-config", "Validate a configuration file; exit 0 if valid, 78 with the error if not");
  check->add_option("-c,--config", check_config, kConfigHelp)->required()->envname("SLUICE_CONFIG");

  serve->footer(sluice::kExitCodes);
  check->footer(sluice::kExitCodes);

  if (argc <= 1) {
    std::cerr << app.help();
    return sluice::kExitUsage;
  }
  if (const char* command = sluice::FirstCommand(argc, argv);
      command != nullptr && std::string_view(command) != "serve" &&
      std::string_view(command) != "check-config") {
    std::cerr << "sluice: unknown command \"" << command
              << "\" (want serve or check-config)\nRun with --help for more information.\n";
    return sluice::kExitUsage;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version end the parse with code 0 (printed to stdout); every other parse error
    // is printed to stderr with a pointer to --help.
    const int code = app.exit(e);
    return code == 0 ? sluice::kExitOk : sluice::kExitUsage;
  }

  sluice::LogLevel level;
  if (!sluice::ParseLogLevel(log_level, &level)) {
    std::cerr << "--log-level: want debug, info, warn or error\n";
    return sluice::kExitUsage;
  }
  sluice::SetLogLevel(level);

  if (*check) {
    pthread_sigmask(SIG_UNBLOCK, &service_signals, nullptr);  // Ctrl-C stops a long check
    return sluice::CheckConfig(check_config);
  }
  return sluice::server::Serve(serve_config);
}
