// An HTTP/1.1 server on Boost.Beast 1.74 and C++20 coroutines: keep-alive, pipelining (requests are
// read and answered in order on one connection), bounded input, timeouts, RFC 9112 framing rules
// (request_framing.h), an exact cap on open connections and a bounded reaction to running out of
// file descriptors (docs/http.md, "Limits").
//
// One HttpServer listens on one address from every io_context it is given, each with its own
// SO_REUSEPORT acceptor, so the kernel spreads connections over the threads and nothing on the
// request path is shared between them. What a request means is the RequestHandler's business.
//
// A connection is closed after any answer the server gives on its own (a framing error, an
// oversized header block or body, a refused Expect): the rest of such a request is unread, so where
// the next one would start is unknown.
#ifndef SLUICE_HTTP_SERVER_H_
#define SLUICE_HTTP_SERVER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>  // Boost 1.74 awaitable.hpp uses std::exchange without it
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include "absl/status/statusor.h"
#include "sluice/metrics/metrics.h"
#include "sluice/net/listener.h"

namespace sluice::http {

using Request = boost::beast::http::request<boost::beast::http::string_body>;
using Response = boost::beast::http::response<boost::beast::http::string_body>;

// What the handler knows about the connection a request came on.
struct Peer {
  boost::asio::ip::address address;
  // Set by the handler once a request on this connection proved it holds a credential (the admin
  // token). A connection that never does gets the shorter `unauthenticated_idle_timeout` and is the
  // first to be closed when the server is full (ServerOptions::evict_unauthenticated).
  bool authenticated = false;
};

// Turns one parsed request into its response. Called on the connection's io_context thread;
// implementations must be thread-safe across io_contexts.
class RequestHandler {
 public:
  virtual ~RequestHandler() = default;
  virtual boost::asio::awaitable<Response> Handle(Request& req, Peer& peer) = 0;
  // Called for requests that never reach Handle: a parse or framing error, an oversized header
  // block or body, a refused Expect. `status` is 400, 413, 417, 431 or 505; the default builds a
  // problem+json answer.
  virtual Response Reject(unsigned status, std::string_view detail, unsigned version);
  // Called once for each answer the server gave without Handle: a Reject, an unknown method
  // (501), OPTIONS * (200). For metrics: such requests have no route.
  virtual void AnsweredUnrouted(unsigned /*status*/) {}
  // The methods some route of this handler takes: the Allow of an OPTIONS * answer.
  [[nodiscard]] virtual std::string_view Methods() const {
    return "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS";
  }
  // Counts connections opened and closed (for an open-connections gauge).
  virtual void ConnectionOpened() {}
  virtual void ConnectionClosed() {}
};

struct ServerOptions {
  std::size_t header_limit = 8 * 1024;
  std::size_t body_limit = 64 * 1024;
  std::chrono::seconds header_timeout{10};  // from a request's first byte to its last
  std::chrono::seconds idle_timeout{60};    // keep-alive wait for the next request
  // Keep-alive wait on a connection that has not authenticated (Peer::authenticated); 0: as
  // idle_timeout.
  std::chrono::seconds unauthenticated_idle_timeout{0};
  // Open connections, exact over all threads: one more is closed at once, unless
  // evict_unauthenticated finds room.
  std::size_t max_connections = 10'000;
  // When full: close the oldest connection that has not authenticated and is not in the middle of
  // being answered, and serve the new one (the admin plane: idle clients cannot lock out the
  // kubelet's probes or Prometheus). Only connections on the accepting thread are considered.
  bool evict_unauthenticated = false;
  // Counted when set (must outlive the server): accept() failures (EMFILE, ENFILE, ENOBUFS,
  // ENOMEM and the like), connections refused because the server was full, connections closed to
  // make room.
  metrics::Counter* accept_failures = nullptr;
  metrics::Counter* refused = nullptr;
  metrics::Counter* evicted = nullptr;
  // Names the server in log lines ("data", "admin").
  std::string name = "http";
};

// The listener helpers, now in net/ (the gRPC service shares them), under their old names.
using net::IsResourceExhaustion;
using net::LockListenAddress;
using net::OpenSharedListener;
using net::ParseEndpoint;

class HttpServer {
 public:
  // `handler` must outlive the server.
  HttpServer(RequestHandler* handler, ServerOptions options);

  // Binds `endpoint` once per io_context (SO_REUSEPORT) and starts accepting on each.
  // Fails (without starting anything) if the address cannot be bound, or if another process
  // already listens on it — even one that set SO_REUSEPORT too, such as a second sluice with the
  // same configuration, which would otherwise share the port and double every quota.
  [[nodiscard]] absl::Status Listen(const std::vector<boost::asio::io_context*>& contexts,
                                    const boost::asio::ip::tcp::endpoint& endpoint);

  // Stops accepting new connections. Connections finish the request they are in (see
  // Draining()) and are closed instead of waiting for another. Thread-safe.
  void StopAccepting();

  // Destroys the acceptors. REQUIRES: the io_contexts are stopped and not running (call before
  // destroying them).
  void ReleaseAcceptors();

  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Requests read and not yet answered, over all threads.
  [[nodiscard]] int64_t in_flight() const { return in_flight_.load(); }
  [[nodiscard]] int64_t open_connections() const { return connections_.load(); }
  // The port actually bound (useful with port 0).
  [[nodiscard]] uint16_t port() const { return port_; }

  // Implementation details (defined in server.cc).
  struct Listener;
  struct Connection;

 private:
  boost::asio::awaitable<void> Accept(Listener& listener);
  // Serves one connection, request after request, until it closes.
  boost::asio::awaitable<void> Session(std::shared_ptr<Connection> conn);
  // A new connection: counted for the handler, its socket set up, the peer's address read (an
  // IPv4 address mapped into IPv6 as plain IPv4), and its watchdog started on the header timeout
  // (a client connects to send a request).
  void OpenConnection(const std::shared_ptr<Connection>& conn);
  // Answers a request that never reaches the handler (see RequestHandler::Reject), logged at most
  // once a second per thread; true if the answer went out. The session closes the connection
  // after it: where the rest of the request ends is unknown. Only on error paths, so its
  // coroutine frame costs a served request nothing.
  boost::asio::awaitable<bool> Reject(Connection& conn, unsigned status, std::string_view detail);
  // Answers, without the handler's routes, what none of them takes: an unknown method (501) and
  // OPTIONS * (200). False, and `res` untouched, for any other request.
  bool AnswerUnrouted(const Request& req, Response& res);
  // Sheds the connections waiting in the kernel's queue while no descriptor is free, then waits a
  // moment before accepting again (instead of spinning on EMFILE).
  boost::asio::awaitable<void> BackOffAfterAcceptFailure(Listener& listener,
                                                         const boost::system::error_code& ec);
  // Closes the oldest connection of `listener` that may be evicted; false if there is none.
  bool EvictOne(Listener& listener);

  RequestHandler* handler_;
  ServerOptions options_;
  std::vector<std::unique_ptr<Listener>> listeners_;
  // Held while listening: makes a second sluice on the same address fail to start.
  int address_lock_ = -1;
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> in_flight_{0};
  std::atomic<int64_t> connections_{0};
  uint16_t port_ = 0;
};

}  // namespace sluice::http

#endif  // SLUICE_HTTP_SERVER_H_
