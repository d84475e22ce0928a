// The sluice command line: serve, check-config, --version, --help.
#include <cstdlib>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include "sluice/common/log.h"
#include "sluice/config/config.h"
#include "sluice/http/key_registry.h"
#include "sluice/server/service.h"

namespace sluice {
namespace {

constexpr int kExitOk = 0;

int CheckConfig(const std::string& path) {
  absl::StatusOr<config::Config> cfg = config::LoadConfigFile(path);
  if (!cfg.ok()) {
    std::cerr << cfg.status().message() << "\n";
    return config::kExitConfigError;
  }
  // What only the key registry can see: a plaintext key and its hash in two entries.
  if (absl::StatusOr<http::KeyRegistry> keys = http::KeyRegistry::FromConfig(*cfg); !keys.ok()) {
    std::cerr << path << ": " << keys.status().message() << "\n";
    return config::kExitConfigError;
  }
  size_t limits = 0;
  for (const config::PlanConfig& p : cfg->plans) limits += p.limits.size();
  auto count = [](size_t n, const char* noun) {
    return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
  };
  std::cout << path << ": OK (" << count(cfg->plans.size(), "plan") << ", "
            << count(limits, "limit") << ", " << count(cfg->keys.size(), "key") << ", "
            << count(cfg->alerts.sinks.size(), "alert sink") << ")\n";
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
  app.fallthrough();  // global options may follow the subcommand: `sluice serve -c f --log-level
                      // debug`

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
  return sluice::server::Serve(serve_config);
}
