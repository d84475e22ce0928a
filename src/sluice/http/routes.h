// The data plane (POST /v1/check, GET /v1/authorize) and the admin plane (/metrics, /healthz,
// /readyz, /v1/usage/{subject}) of DESIGN §2, as RequestHandlers for HttpServer.
//
// Everything that a reload may change (plans, keys, proxies, tokens, deny status) lives in one
// immutable Frontend; a reload builds a new one and swaps it in, and each request uses the Frontend
// it started with. Counters live in the store, which outlives every Frontend.
#ifndef SLUICE_HTTP_ROUTES_H_
#define SLUICE_HTTP_ROUTES_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "sluice/config/config.h"
#include "sluice/http/client_address.h"
#include "sluice/http/key_registry.h"
#include "sluice/http/server.h"
#include "sluice/limiter/limiter.h"
#include "sluice/metrics/metrics.h"

namespace sluice::http {

struct Frontend {
  config::ServerConfig server;
  std::string admin_token;  // from config or SLUICE_ADMIN_TOKEN; "" refuses every admin request
  std::unique_ptr<Limiter> limiter;
  KeyRegistry keys;
  ProxyTrust proxies;
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

// The metrics both planes record. Registered once per process in `registry`.
class HttpMetrics {
 public:
  explicit HttpMetrics(metrics::Registry& registry);

  void CountDecision(const std::string& plan, const Decision& d);
  void CountRequest(std::string_view route, unsigned status);
  void ObserveDecisionSeconds(double seconds) { decision_seconds_.Observe(seconds); }
  void ConnectionOpened() { connections_.Add(1); }
  void ConnectionClosed() { connections_.Add(-1); }

 private:
  metrics::CounterFamily& decisions_;
  metrics::CounterFamily& requests_;
  metrics::CounterFamily& store_errors_;
  metrics::Histogram& decision_seconds_;
  metrics::Gauge& connections_;
};

class DataPlane final : public RequestHandler {
 public:
  DataPlane(const FrontendHolder* frontend, HttpMetrics* metrics)
      : frontend_(frontend), metrics_(metrics) {}
  boost::asio::awaitable<Response> Handle(Request& req, const Peer& peer) override;
  void ConnectionOpened() override { metrics_->ConnectionOpened(); }
  void ConnectionClosed() override { metrics_->ConnectionClosed(); }

 private:
  boost::asio::awaitable<Response> Check(const Frontend& fe, Request& req);
  boost::asio::awaitable<Response> Authorize(const Frontend& fe, Request& req, const Peer& peer);

  const FrontendHolder* frontend_;
  HttpMetrics* metrics_;
};

class AdminPlane final : public RequestHandler {
 public:
  // `dead_letters` renders the body of GET /v1/alerts/dead (a JSON object); null: 404.
  AdminPlane(const FrontendHolder* frontend, HttpMetrics* metrics,
             const metrics::Registry* registry, std::function<std::string()> dead_letters = nullptr)
      : frontend_(frontend),
        metrics_(metrics),
        registry_(registry),
        dead_letters_(std::move(dead_letters)) {}
  boost::asio::awaitable<Response> Handle(Request& req, const Peer& peer) override;

 private:
  boost::asio::awaitable<Response> Route(Request& req);
  boost::asio::awaitable<Response> Ready(const Frontend& fe, const Request& req);
  boost::asio::awaitable<Response> Usage(const Frontend& fe, const Request& req,
                                         std::string_view subject);

  const FrontendHolder* frontend_;
  HttpMetrics* metrics_;
  const metrics::Registry* registry_;
  std::function<std::string()> dead_letters_;
};

// True if `authorization` is "Bearer <token>" with the admin token. Constant time in the token's
// content (both sides are hashed before comparing); always false when `token` is empty.
[[nodiscard]] bool AdminAuthorized(std::string_view authorization, std::string_view token);

// Decodes %XX escapes; nullopt-like failure is reported as false.
[[nodiscard]] bool PercentDecode(std::string_view in, std::string* out);

}  // namespace sluice::http

#endif  // SLUICE_HTTP_ROUTES_H_
