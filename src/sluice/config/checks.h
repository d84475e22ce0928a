// The checks of a built Config (checks.cc; config::Validate runs them all) that also apply to what
// the environment sets (ApplyEnvironment). Internal to the config module.
#ifndef SLUICE_CONFIG_CHECKS_H_
#define SLUICE_CONFIG_CHECKS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "sluice/config/schema.h"

namespace sluice::config {

// The rules for store.redis.url and SLUICE_REDIS_URL (`source` names the one checked). The URL is
// never quoted: it may carry a password.
[[nodiscard]] absl::Status CheckRedisUrl(absl::string_view source, absl::string_view url);

// store.redis.cluster_nodes: 1 to 64 distinct seed nodes, and no url beside them.
[[nodiscard]] absl::Status CheckClusterNodes(const RedisStoreConfig& redis);

// store.redis.tls applies to a rediss:// URL only: with redis:// the files would be ignored, and
// an operator who wrote them believes the connection is encrypted.
[[nodiscard]] absl::Status CheckTlsNeedsRediss(const RedisStoreConfig& redis);

}  // namespace sluice::config

#endif  // SLUICE_CONFIG_CHECKS_H_
