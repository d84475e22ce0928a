// Everything about a configuration that `sluice serve` would refuse at start, checked without
// binding, connecting or writing anything: `sluice check-config` and `sluice serve` call the same
// function, so a file that passes the check is not refused by the server for its contents.
#ifndef SLUICE_SERVER_CONFIG_CHECK_H_
#define SLUICE_SERVER_CONFIG_CHECK_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sluice/config/config.h"
#include "sluice/registry/index.h"

namespace sluice::server {

// OK if `cfg` (from config::ParseConfig or LoadConfigFile, so already valid on its own) can be
// served: the plans and keys build (a plaintext key and its hash in two entries are one key), the
// trusted proxies and both listen addresses parse and the two planes do not overlap, the Redis URL
// parses (store.type redis), and the snapshot's directory exists (memory store with
// snapshot_path) and neither the snapshot nor the registry file is a directory or other
// non-regular file, and envoy.ratelimit_config's files load and compile (grpc/ratelimit_rules.h).
// Otherwise InvalidArgument "<cfg.path>: <key.path>: <what is wrong>", in the
// format of config errors; secrets (keys, the URL's password) are never quoted.
//
// What only the running server can find out (a port already in use, another process holding the
// snapshot, a damaged snapshot, Redis unreachable) is not checked here.
[[nodiscard]] absl::Status CheckServable(const config::Config& cfg);

// The read-write admin token and where it came from: server.admin_token, else the environment
// variable SLUICE_ADMIN_TOKEN, else the file SLUICE_ADMIN_TOKEN_FILE names (systemd's
// LoadCredential=; one trailing newline stripped, at most 4 KiB); an empty token when there is
// none. Each follows server.admin_token's rule (printable ASCII without spaces): otherwise an
// error naming the variable (and the file's path), never the value.
struct AdminTokenSource {
  std::string token;
  std::string_view from;  // "server.admin_token", "SLUICE_ADMIN_TOKEN", ...; empty without one
};
[[nodiscard]] absl::StatusOr<AdminTokenSource> ResolveAdminToken(const config::Config& cfg);

// Refuses a configuration that lacks a plan some registry subject is on (the subject would be
// refused at every request), naming the first ten, and one whose keys: name a registry subject:
// FailedPrecondition "<cfg.path>: ...". `serve` checks it against the registry it loaded, at
// start (exit 78) and at every reload.
[[nodiscard]] absl::Status CheckPlansInUse(const config::Config& cfg, const registry::Index& index);

// For `check-config`: CheckPlansInUse against the embedded store's registry file as it stands
// (config::RegistryFile, the file serve opens; read without the lock, so also while a server
// runs on it). OK when there is no file, and when it cannot be read or is no registry (serve
// refuses that, exit 1), with `*note` (if given) then saying why, as serve would, and that the
// plans were not checked. A Redis registry is not read: check-config connects to nothing.
[[nodiscard]] absl::Status CheckRegistryFile(const config::Config& cfg,
                                             std::string* note = nullptr);

// For `check-config`, which connects to nothing: what only the Redis server can tell, as a note
// ("note: ..."), or "" when there is nothing to say. Today: a URL that selects a database other
// than 0 needs a server with more databases than its index (redis.conf `databases`, 16 by
// default); serve says at start, plainly, when the server refuses it.
[[nodiscard]] std::string RedisNote(const config::Config& cfg);

}  // namespace sluice::server

#endif  // SLUICE_SERVER_CONFIG_CHECK_H_
