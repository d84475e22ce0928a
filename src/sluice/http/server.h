// An HTTP/1.1 server on Boost.Beast 1.74 and C++20 coroutines: keep-alive, pipelining (requests are
// read and answered in order on one connection), bounded input and timeouts (DESIGN §2).
//
// One HttpServer listens on one address from every io_context it is given, each with its own
// SO_REUSEPORT acceptor, so the kernel spreads connections over the threads and nothing on the
// request path is shared between them. What a request means is the RequestHandler's business.
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

namespace sluice::http {

using Request = boost::beast::http::request<boost::beast::http::string_body>;
using Response = boost::beast::http::response<boost::beast::http::string_body>;

// What the handler knows about the connection a request came on.
struct Peer {
  boost::asio::ip::address address;
};

// Turns one parsed request into its response. Called on the connection's io_context thread;
// implementations must be thread-safe across io_contexts.
class RequestHandler {
 public:
  virtual ~RequestHandler() = default;
  virtual boost::asio::awaitable<Response> Handle(Request& req, const Peer& peer) = 0;
  // Called for requests that never reach Handle: a parse error, an oversized header block or body.
  // `status` is 400, 413 or 431; the default builds a problem+json answer.
  virtual Response Reject(unsigned status, std::string_view detail, unsigned version);
  // Counts connections opened and closed (for an open-connections gauge).
  virtual void ConnectionOpened() {}
  virtual void ConnectionClosed() {}
};

struct ServerOptions {
  std::size_t header_limit = 8 * 1024;
  std::size_t body_limit = 64 * 1024;
  std::chrono::seconds header_timeout{10};  // from a request's first byte to its last
  std::chrono::seconds idle_timeout{60};    // keep-alive wait for the next request
  std::size_t max_connections = 10'000;     // over it, new connections are closed at once
};

// Parses "127.0.0.1:8080" or "[::1]:8080".
[[nodiscard]] absl::StatusOr<boost::asio::ip::tcp::endpoint> ParseEndpoint(std::string_view text);

class HttpServer {
 public:
  // `handler` must outlive the server.
  HttpServer(RequestHandler* handler, ServerOptions options);

  // Binds `endpoint` once per io_context (SO_REUSEPORT) and starts accepting on each.
  // Fails (without starting anything) if the address cannot be bound.
  [[nodiscard]] absl::Status Listen(const std::vector<boost::asio::io_context*>& contexts,
                                    const boost::asio::ip::tcp::endpoint& endpoint);

  // Stops accepting new connections. Connections finish the request they are in (see
  // Draining()) and are closed instead of waiting for another. Thread-safe.
  void StopAccepting();

  // Destroys the acceptors. REQUIRES: the io_contexts are stopped and not running (call before
  // destroying them).
  void ReleaseAcceptors() { acceptors_.clear(); }

  // Requests read and not yet answered, over all threads.
  [[nodiscard]] int64_t in_flight() const { return in_flight_.load(); }
  [[nodiscard]] int64_t open_connections() const { return connections_.load(); }
  // The port actually bound (useful with port 0).
  [[nodiscard]] uint16_t port() const { return port_; }

 private:
  boost::asio::awaitable<void> Accept(boost::asio::ip::tcp::acceptor& acceptor);
  boost::asio::awaitable<void> Session(boost::asio::ip::tcp::socket socket);

  RequestHandler* handler_;
  ServerOptions options_;
  std::vector<std::unique_ptr<boost::asio::ip::tcp::acceptor>> acceptors_;
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> in_flight_{0};
  std::atomic<int64_t> connections_{0};
  uint16_t port_ = 0;
};

}  // namespace sluice::http

#endif  // SLUICE_HTTP_SERVER_H_
