// The Envoy Rate Limit Service v3 front end (envoy.service.ratelimit.v3.RateLimitService/
// ShouldRateLimit): gRPC over HTTP/2 served by sluice itself (h2_session.h, on libnghttp2) on the
// data plane's event loops. Each loop has its own SO_REUSEPORT acceptor; a connection lives on the
// loop that accepted it, and its calls are parsed, decided and answered there: with the memory
// store before the read that brought the call is done, with Redis when the decision's callback
// comes (on the same thread, where that loop's Redis connection lives). No thread of its own, no
// hand-off. Decisions go through the current Frontend's Limiter, exactly as /v1/authorize and
// /v1/check decide. A request that is no valid RateLimitRequest is INVALID_ARGUMENT naming the
// problem; every other method is UNIMPLEMENTED.
//
// Thread safety: Start, BeginShutdown and FinishShutdown from one thread (not a loop's);
// in_flight() and SetRules from any.
#ifndef SLUICE_RLS_RLS_SERVER_H_
#define SLUICE_RLS_RLS_SERVER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "sluice/config/config.h"
#include "sluice/frontend/frontend.h"
#include "sluice/frontend/metrics.h"
#include "sluice/metrics/metrics.h"

namespace sluice::registry {
class Index;
}  // namespace sluice::registry

namespace sluice::rls {

class RateLimitServiceImpl;
class RlRuleSet;

struct RlsServerOptions {
  // Largest request message accepted; a longer one is RESOURCE_EXHAUSTED.
  int max_message_bytes = 64 * 1024;
  // Calls being decided at once, over all connections; one more is RESOURCE_EXHAUSTED at once.
  int64_t max_in_flight = 10'000;
  // Open connections, over all loops; one more is closed at once (counted in `refused`).
  int64_t max_connections = 10'000;
  // Streams at once per connection (SETTINGS_MAX_CONCURRENT_STREAMS).
  uint32_t max_concurrent_streams = 100;
  // A connection whose client preface and SETTINGS have not come this long after it was accepted
  // is closed.
  absl::Duration handshake_timeout = absl::Seconds(10);
  // A connection without a stream for this long gets GOAWAY and is closed.
  absl::Duration idle_timeout = absl::Minutes(5);
  // A request (headers to END_STREAM) not complete this long after it began is reset, and so is
  // a stream still open this long after its answer (flow control the client does not open).
  absl::Duration request_timeout = absl::Seconds(10);
  // A write not complete after this (a client that stopped reading) closes the connection.
  absl::Duration write_timeout = absl::Seconds(10);
  // Counted when set (must outlive the server): connections refused at max_connections.
  metrics::Counter* refused = nullptr;
  // At shutdown, how long decisions still in flight once the connections are closed are waited
  // for: the store's longest wait (store.redis.max_wait) and a margin. What is left then is
  // abandoned (logged), as the HTTP planes abandon theirs.
  absl::Duration shutdown_decisions_wait = absl::Seconds(61);
};

class RlsServer {
 public:
  // The pointers must outlive the server, and `loops` must run until FinishShutdown returns.
  // `index` (may be null) is where keys the config file does not know are looked up; decisions are
  // counted in `http_metrics` like the data plane's, calls in sluice_grpc_requests_total{code}
  // (registered in `metrics`).
  RlsServer(const frontend::FrontendHolder* frontend, frontend::FrontendMetrics* http_metrics,
            const registry::Index* index, metrics::Registry* metrics,
            std::vector<boost::asio::io_context*> loops, RlsServerOptions options = {});
  ~RlsServer();

  // Listens on `address` (ip:port, validated by config) and serves.
  [[nodiscard]] absl::Status Start(const std::string& address);
  // The port listened on (after Start).
  [[nodiscard]] int port() const { return port_; }

  // Stops accepting, sends GOAWAY on every connection (an idle one closes at once, the others once
  // their streams are answered) and lets the calls in flight finish until `deadline`; returns at
  // once. Idempotent.
  void BeginShutdown(absl::Time deadline);
  // Ends the shutdown (beginning it with an immediate deadline if it was not) and waits for it:
  // connections still open at the deadline are closed, and decisions in flight are waited for, at
  // most RlsServerOptions::shutdown_decisions_wait (each is bounded by the store's wait, so they
  // normally end well before). REQUIRES: the loops still run.
  void FinishShutdown();

  [[nodiscard]] int64_t in_flight() const;

  // The envoyproxy/ratelimit rules (envoy.ratelimit_config) requests of their domains are decided
  // by from now on; null: none (every request is read by sluice's own mapping). Thread-safe.
  void SetRules(std::shared_ptr<const RlRuleSet> rules);

 private:
  std::unique_ptr<RateLimitServiceImpl> service_;
  bool started_ = false;
  int port_ = 0;
};

}  // namespace sluice::rls

#endif  // SLUICE_RLS_RLS_SERVER_H_
