// What every front end (the HTTP data and admin planes, the Envoy Rate Limit Service) decides
// with, and what a reload may change: plans, keys, proxies, tokens, the deny status. It lives in
// one immutable Frontend; a reload builds a new one and swaps it in, and each request uses the
// Frontend it started with. Counters live in the store, which outlives every Frontend.
#ifndef SLUICE_FRONTEND_FRONTEND_H_
#define SLUICE_FRONTEND_FRONTEND_H_

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sluice/common/digest.h"
#include "sluice/config/config.h"
#include "sluice/frontend/client_address.h"
#include "sluice/frontend/key_registry.h"
#include "sluice/frontend/metrics.h"
#include "sluice/limiter/limiter.h"

namespace sluice::frontend {

// A token of the admin plane: read-only tokens may read (metrics, usage, the registry), read-write
// tokens may also change the registry and reset usage.
struct AdminToken {
  std::string name;  // names the token in the audit log
  // SHA-256 of the token; the token itself is not kept. None only if it could not be computed
  // (OpenSSL out of memory): such a token matches nothing.
  std::optional<Sha256Digest> digest;
  bool write = false;
};

struct Frontend {
  config::ServerConfig server;
  config::EnvoyConfig envoy;  // the Envoy Rate Limit Service's descriptor keys
  config::OnStoreError on_store_error = config::OnStoreError::kAllow;
  // server.admin_tokens plus server.admin_token (or SLUICE_ADMIN_TOKEN) as the read-write token
  // "admin"; empty: every admin request is refused.
  std::vector<AdminToken> admin_tokens;
  std::unique_ptr<Limiter> limiter;
  KeyRegistry keys;
  ProxyTrust proxies;
  // The limiter's plans' counters; null: decisions are counted through label lookups.
  std::shared_ptr<const DecisionCounters> counters;
};

// Holds the current Frontend. Thread-safe.
class FrontendHolder {
 public:
  explicit FrontendHolder(std::shared_ptr<const Frontend> initial) : current_(std::move(initial)) {}
  [[nodiscard]] std::shared_ptr<const Frontend> Get() const { return current_.load(); }
  void Set(std::shared_ptr<const Frontend> next) { current_.store(std::move(next)); }

 private:
  std::atomic<std::shared_ptr<const Frontend>> current_;
};

// The token whose secret `credentials` is, or nullptr (also for empty credentials). The presented
// secret is hashed and compared with every token's digest in constant time (all of them are
// compared, whichever matches).
[[nodiscard]] const AdminToken* MatchToken(std::string_view credentials,
                                           const std::vector<AdminToken>& tokens);

// The AdminToken for a plaintext token (its digest computed).
[[nodiscard]] AdminToken MakeAdminToken(std::string name, std::string_view token, bool write);

// The AdminToken for a token given by its SHA-256 in hex (server.admin_tokens[].token_sha256,
// validated as 64 hex digits; anything else gives a token that matches nothing).
[[nodiscard]] AdminToken MakeAdminTokenFromSha256(std::string name, std::string_view sha256_hex,
                                                  bool write);

}  // namespace sluice::frontend

#endif  // SLUICE_FRONTEND_FRONTEND_H_
