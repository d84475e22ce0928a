// The Envoy Rate Limit Service v3 front end (envoy.service.ratelimit.v3.RateLimitService/
// ShouldRateLimit) on gRPC's asynchronous (completion queue) API: a generic service, so the
// request is parsed here and a malformed one is INVALID_ARGUMENT; every other method is
// UNIMPLEMENTED. There is one completion queue per data-plane event loop, each polled by a thread
// of its own, which reads a call's request, parses it and — with an in-process store
// (RlsServerOptions::decide_inline) — decides and writes the answer itself, with no hand-off to
// another thread. Otherwise (Redis) the decision is posted to one of the event loops (round robin:
// a Redis decision must start on a loop's own thread, where its connection lives) and the answer is
// written from there when it comes; a decision waiting on Redis holds no thread. Decisions go
// through the current Frontend's Limiter, exactly as /v1/authorize and /v1/check decide.
//
// Thread safety: Start, BeginShutdown and FinishShutdown from one thread; in_flight() from any.
#ifndef SLUICE_GRPC_RLS_SERVER_H_
#define SLUICE_GRPC_RLS_SERVER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "sluice/config/config.h"
#include "sluice/http/routes.h"
#include "sluice/metrics/metrics.h"

namespace grpc {
class Server;
class ServerCompletionQueue;
}  // namespace grpc

namespace sluice::rls {

class RateLimitServiceImpl;
class RlRuleSet;

struct RlsServerOptions {
  // Largest request accepted; a larger one is refused by gRPC (RESOURCE_EXHAUSTED).
  int max_message_bytes = 64 * 1024;
  // Calls being decided at once; one more is answered RESOURCE_EXHAUSTED at once.
  int64_t max_in_flight = 10'000;
  // The store answers in-process (the memory store): decide on the completion queue's thread
  // instead of posting to an event loop. Leave false for a store whose decisions must start on an
  // event loop's thread (Redis).
  bool decide_inline = false;
};

class RlsServer {
 public:
  // The pointers must outlive the server, and `loops` must run until FinishShutdown returns.
  // `index` (may be null) is where keys the config file does not know are looked up; decisions are
  // counted in `http_metrics` like the data plane's, calls in sluice_grpc_requests_total{code}
  // (registered in `metrics`).
  RlsServer(const http::FrontendHolder* frontend, http::HttpMetrics* http_metrics,
            const registry::Index* index, metrics::Registry* metrics,
            std::vector<boost::asio::io_context*> loops, RlsServerOptions options = {});
  ~RlsServer();

  // Listens on `address` (ip:port, validated by config) and serves.
  [[nodiscard]] absl::Status Start(const std::string& address);
  // The port listened on (after Start).
  [[nodiscard]] int port() const { return port_; }

  // Stops taking calls and lets those in flight finish until `deadline` (then cancels them), on a
  // thread of its own; returns at once. Idempotent.
  void BeginShutdown(absl::Time deadline);
  // Ends the shutdown (beginning it with an immediate deadline if it was not) and waits for it.
  // REQUIRES: the loops still run (the calls in flight finish on them).
  void FinishShutdown();

  [[nodiscard]] int64_t in_flight() const;

  // The envoyproxy/ratelimit rules (envoy.ratelimit_config) requests of their domains are decided
  // by from now on; null: none (every request is read by sluice's own mapping). Thread-safe.
  void SetRules(std::shared_ptr<const RlRuleSet> rules);

 private:
  std::unique_ptr<RateLimitServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  // One per event loop, each with its polling thread.
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> cqs_;
  std::vector<std::thread> pollers_;
  int max_message_bytes_;
  std::thread shutdown_;
  int port_ = 0;
};

}  // namespace sluice::rls

#endif  // SLUICE_GRPC_RLS_SERVER_H_
