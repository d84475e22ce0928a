// The data plane (POST /v1/check, /v1/authorize: server.authorize_prefix, any gateway method) and
// the admin plane (/metrics, /healthz, /readyz, /v1/usage/{subject}) of docs/http.md, as
// RequestHandlers for HttpServer.
//
// Everything that a reload may change (plans, keys, proxies, tokens, deny status) lives in one
// immutable Frontend (frontend/frontend.h); each request uses the Frontend it started with.
#ifndef SLUICE_HTTP_ROUTES_H_
#define SLUICE_HTTP_ROUTES_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sluice/config/config.h"
#include "sluice/frontend/frontend.h"
#include "sluice/frontend/metrics.h"
#include "sluice/frontend/resolve.h"
#include "sluice/http/access_log.h"
#include "sluice/http/check_body.h"
#include "sluice/http/server.h"
#include "sluice/limiter/limiter.h"
#include "sluice/metrics/metrics.h"

namespace sluice::registry {
class Index;
}  // namespace sluice::registry

namespace sluice::http {

class RegistryApi;

// What moved to frontend/ (the Rate Limit Service shares it), under the names the HTTP planes
// and their callers still use.
using frontend::AdminToken;
using frontend::DecisionCounters;
using frontend::Frontend;
using frontend::FrontendHolder;
using frontend::MakeAdminToken;
using frontend::StoreHealth;
using HttpMetrics = frontend::FrontendMetrics;

class DataPlane final : public RequestHandler {
 public:
  // `registry` (may be null: no registry) is where keys that the config file does not know are
  // looked up.
  DataPlane(const FrontendHolder* frontend, HttpMetrics* metrics,
            const registry::Index* registry = nullptr)
      : frontend_(frontend),
        metrics_(metrics),
        registry_(registry),
        access_log_(&metrics->access_log_dropped()) {}
  boost::asio::awaitable<Response> Handle(Request& req, Peer& peer) override;
  void ConnectionOpened() override { metrics_->ConnectionOpened(); }
  void ConnectionClosed() override { metrics_->ConnectionClosed(); }
  void AnsweredUnrouted(unsigned status) override { metrics_->CountRequest("-", status); }

 private:
  // `access` (null unless the access log is on) receives what the access log says of the
  // decision; `decided` stays false when the request was answered before a decision.
  boost::asio::awaitable<Response> Check(const Frontend& fe, Request& req, AccessEntry* access);
  // POST /v1/reserve, and /v1/reservations/{id}[/settle|/extend] (`rest` is what follows
  // /v1/reservations/).
  boost::asio::awaitable<Response> Reserve(const Frontend& fe, Request& req, AccessEntry* access);
  boost::asio::awaitable<Response> Reservation(const Frontend& fe, Request& req,
                                               std::string_view rest);
  // Who a /v1/check or /v1/reserve body names (frontend/resolve.h); false with `refusal` set.
  bool ResolveBody(const Frontend& fe, CheckBody& body, frontend::Target* target,
                   frontend::Refusal* refusal) const;
  boost::asio::awaitable<Response> Authorize(const Frontend& fe, Request& req, const Peer& peer,
                                             AccessEntry* access);
  void LogAccess(const Frontend& fe, const Request& req, const Peer& peer, unsigned status,
                 std::chrono::steady_clock::time_point received, AccessEntry& entry);

  const FrontendHolder* frontend_;
  HttpMetrics* metrics_;
  const registry::Index* registry_;
  AccessLog access_log_;
};

struct AdminOptions {
  // Renders the body of GET /v1/alerts/dead (a JSON object); null: 404.
  std::function<std::string()> dead_letters;
  // True while every event loop of the process turns; null: always. /healthz is 503 otherwise.
  std::function<bool()> live;
  // Asks the store to do what a decision does, writes included (a store that refuses writes, such
  // as Redis answering OOM or READONLY, fails it); null: the store is always fine.
  std::function<void(StatusCallback)> probe_store;
  // Set when the process is shutting down: /readyz answers 503 from then on. May be null.
  const std::atomic<bool>* stopping = nullptr;
  // The registry routes (registry_api.h); null: they answer 404.
  RegistryApi* registry = nullptr;
  // The registry the usage routes take a subject's plan from; may be null.
  const registry::Index* index = nullptr;
};

// /healthz: the process is alive and its event loops turn (no store involved).
// /readyz: this instance can serve decisions as configured — 503 while stopping; with a failing
// store 503 under on_store_error deny, but 200 under allow (the store's state is in the body and
// in sluice_store_up), because a fail-open deployment must not lose every replica at once.
class AdminPlane final : public RequestHandler {
 public:
  AdminPlane(const FrontendHolder* frontend, HttpMetrics* metrics,
             const metrics::Registry* registry, AdminOptions options = {})
      : frontend_(frontend), metrics_(metrics), registry_(registry), options_(std::move(options)) {}
  boost::asio::awaitable<Response> Handle(Request& req, Peer& peer) override;
  void AnsweredUnrouted(unsigned status) override { metrics_->CountRequest("-", status); }
  // The registry's writes (POST, PUT, DELETE) and usage resets (DELETE) besides the reads.
  [[nodiscard]] std::string_view Methods() const override { return "GET, HEAD, POST, PUT, DELETE"; }

 private:
  boost::asio::awaitable<Response> Route(Request& req, Peer& peer);
  boost::asio::awaitable<Response> Ready(const Frontend& fe, const Request& req);
  boost::asio::awaitable<Response> Usage(const Frontend& fe, const Request& req,
                                         std::string_view subject);

  const FrontendHolder* frontend_;
  HttpMetrics* metrics_;
  const metrics::Registry* registry_;
  AdminOptions options_;
};

// The credentials of an Authorization value in the Bearer scheme: the scheme name in any case
// (RFC 9110 §11.1), one or more spaces, the token. Empty when the value is not that.
[[nodiscard]] std::string_view BearerToken(std::string_view authorization);

// The token `authorization` ("Bearer <token>", scheme in any case) presents, or nullptr. The
// presented token is hashed and compared with every token's digest in constant time (all of them
// are compared, whichever matches).
[[nodiscard]] const AdminToken* MatchAdminToken(std::string_view authorization,
                                                const std::vector<AdminToken>& tokens);

// Splits a request target into its path and query.
[[nodiscard]] std::pair<std::string_view, std::string_view> SplitTarget(std::string_view target);

// The decoded value of `name` in a query string; nullopt when it is absent or badly encoded.
[[nodiscard]] std::optional<std::string> QueryParam(std::string_view query, std::string_view name);

// The name of the first parameter a query string names more than once ("plan" in
// "plan=a&limit=x&plan=b"), nullopt if none: a request that says two things about one parameter
// is refused rather than read by its first (or last) word.
[[nodiscard]] std::optional<std::string_view> RepeatedParam(std::string_view query);

// Decodes %XX escapes; nullopt-like failure is reported as false.
[[nodiscard]] bool PercentDecode(std::string_view in, std::string* out);

}  // namespace sluice::http

#endif  // SLUICE_HTTP_ROUTES_H_
