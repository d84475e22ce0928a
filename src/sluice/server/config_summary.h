// The debug lines that say what configuration a start or a reload put in force (--log-level
// debug): one "configuration summary" line, then one "plan" line per plan. They name no secret:
// no token, key, password or digest, and of a URL only its host.
#ifndef SLUICE_SERVER_CONFIG_SUMMARY_H_
#define SLUICE_SERVER_CONFIG_SUMMARY_H_

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/config/config.h"

namespace sluice::server {

// The host of `url` ("scheme://[userinfo@]host[:port][/...]"): no scheme, credentials, port,
// path or query. "" if it has no "://".
[[nodiscard]] std::string UrlHost(std::string_view url);

// The environment variables that changed what `cfg` means: SLUICE_REDIS_URL,
// SLUICE_REDIS_PASSWORD_FILE, SLUICE_ADMIN_TOKEN, SLUICE_ADMIN_TOKEN_FILE (names only), read
// through `getenv`.
[[nodiscard]] std::vector<std::string> AppliedEnvironment(
    const config::Config& cfg, const std::function<const char*(const char*)>& getenv);

// Where the registry of subjects and keys lives, for a person: its file and why that one
// ("/var/lib/sluice/state.snap.registry.db (beside the snapshot; store.memory.registry_path is
// not set)"), that it is in memory only and lost at exit, or Redis's prefix. What check-config
// prints and the summary's "registry".
[[nodiscard]] std::string DescribeRegistry(const config::Config& cfg);

// Writes the summary lines at level debug; `event` is "start" or "reload". Nothing is built
// unless debug lines are enabled.
void LogConfigSummary(const config::Config& cfg, std::string_view event);

}  // namespace sluice::server

#endif  // SLUICE_SERVER_CONFIG_SUMMARY_H_
