#include "sluice/http/server.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <utility>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/socket_base.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "sluice/common/log.h"
#include "sluice/common/strings.h"
#include "sluice/http/render.h"

namespace sluice::http {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using asio::ip::tcp;

namespace {

// SO_REUSEPORT is not among Asio's portable options.
using ReusePort = asio::detail::socket_option::boolean<SOL_SOCKET, SO_REUSEPORT>;

// Counts a value up for the lifetime of a scope.
class ScopedCount {
 public:
  explicit ScopedCount(std::atomic<int64_t>& n) : n_(n) { n_.fetch_add(1); }
  ~ScopedCount() { n_.fetch_sub(1); }
  ScopedCount(const ScopedCount&) = delete;
  ScopedCount& operator=(const ScopedCount&) = delete;

 private:
  std::atomic<int64_t>& n_;
};

// The response as bytes on the wire. Writing one contiguous buffer is markedly cheaper than
// Beast's serializer (a chain of buffer views) for the small responses sluice sends.
std::string Serialize(const Response& res) {
  std::string out;
  out.reserve(160 + res.body().size());
  out += res.version() == 10 ? "HTTP/1.0 " : "HTTP/1.1 ";
  out += std::to_string(res.result_int());
  out += ' ';
  const auto reason = res.reason();
  out.append(reason.data(), reason.size());
  out += "\r\n";
  for (const auto& field : res) {
    const auto name = field.name_string();
    const auto value = field.value();
    out.append(name.data(), name.size());
    out += ": ";
    out.append(value.data(), value.size());
    out += "\r\n";
  }
  out += "\r\n";
  out += res.body();
  return out;
}

// One line per request: debug when it went as expected, warn when it is an error worth a look.
// The target's query string is left out (it is the caller's data); API keys travel in headers,
// which are never logged.
void LogRequest(const Request& req, const Response& res, const Peer& peer,
                std::chrono::steady_clock::duration took) {
  const unsigned status = res.result_int();
  const bool error = status >= 500 || status == 400 || status == 413 || status == 431;
  const LogLevel level = error ? LogLevel::kWarn : LogLevel::kDebug;
  if (!LogEnabled(level)) return;
  const auto target = req.target();
  const auto method = req.method_string();
  const std::string_view path(target.data(), std::min(target.size(), target.find('?')));
  Log(level, "request")
      .Str("method", std::string_view(method.data(), method.size()))
      .Str("path", path)
      .Int("status", status)
      .Str("client", peer.address.to_string())
      .Int("us", std::chrono::duration_cast<std::chrono::microseconds>(took).count());
}

}  // namespace

Response RequestHandler::Reject(unsigned status, std::string_view detail, unsigned version) {
  std::string_view title = status == 431   ? "Request Header Fields Too Large"
                           : status == 413 ? "Content Too Large"
                                           : "Bad Request";
  return Problem(status, "about:blank", title, detail, version, /*keep_alive=*/false);
}

absl::StatusOr<tcp::endpoint> ParseEndpoint(std::string_view text) {
  std::string_view host, port;
  if (!text.empty() && text.front() == '[') {
    size_t close = text.find("]:");
    if (close == std::string_view::npos) return absl::InvalidArgumentError("want [v6addr]:port");
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return absl::InvalidArgumentError("want host:port");
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  uint32_t port_number = 0;
  if (!absl::SimpleAtoi(ToAbsl(port), &port_number) || port_number > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("bad port \"", ToAbsl(port), "\""));
  }
  boost::system::error_code ec;
  asio::ip::address address = asio::ip::make_address(std::string(host), ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("bad address \"", ToAbsl(host), "\""));
  return tcp::endpoint(address, static_cast<uint16_t>(port_number));
}

HttpServer::HttpServer(RequestHandler* handler, ServerOptions options)
    : handler_(handler), options_(options) {}

absl::Status HttpServer::Listen(const std::vector<asio::io_context*>& contexts,
                                const tcp::endpoint& endpoint) {
  std::vector<std::unique_ptr<tcp::acceptor>> acceptors;
  tcp::endpoint bound = endpoint;
  for (asio::io_context* io : contexts) {
    auto acceptor = std::make_unique<tcp::acceptor>(*io);
    boost::system::error_code ec;
    acceptor->open(bound.protocol(), ec);
    if (!ec) acceptor->set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor->set_option(ReusePort(true), ec);
    if (!ec) acceptor->bind(bound, ec);
    if (!ec) acceptor->listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      return absl::UnavailableError(absl::StrCat("cannot listen on ",
                                                 endpoint.address().to_string(), ":",
                                                 endpoint.port(), ": ", ec.message()));
    }
    // With port 0 the first bind picks the port; the others must share it.
    bound = acceptor->local_endpoint();
    acceptors.push_back(std::move(acceptor));
  }
  port_ = bound.port();
  for (auto& acceptor : acceptors) {
    asio::co_spawn(acceptor->get_executor(), Accept(*acceptor), asio::detached);
    acceptors_.push_back(std::move(acceptor));
  }
  return absl::OkStatus();
}

void HttpServer::StopAccepting() {
  stopping_.store(true);
  for (auto& acceptor : acceptors_) {
    // Closing must happen on the acceptor's own thread.
    asio::post(acceptor->get_executor(), [a = acceptor.get()] {
      boost::system::error_code ignored;
      a->close(ignored);
    });
  }
}

asio::awaitable<void> HttpServer::Accept(tcp::acceptor& acceptor) {
  while (!stopping_.load()) {
    boost::system::error_code ec;
    tcp::socket socket =
        co_await acceptor.async_accept(asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
      continue;  // e.g. EMFILE: try the next one
    }
    if (connections_.load() >= static_cast<int64_t>(options_.max_connections)) {
      boost::system::error_code ignored;
      socket.close(ignored);
      continue;
    }
    asio::co_spawn(acceptor.get_executor(), Session(std::move(socket)), asio::detached);
  }
}

namespace {

// A connection's socket and its deadline. The deadline is a plain time point that the session moves
// forward per phase (no timer operation, no syscall per request); one watchdog coroutine per
// connection sleeps until the deadline and closes the socket if it has passed, which makes the
// pending read or write fail with operation_aborted.
struct Connection {
  explicit Connection(tcp::socket s) : socket(std::move(s)), timer(socket.get_executor()) {}
  tcp::socket socket;
  asio::steady_timer timer;
  std::chrono::steady_clock::time_point deadline;
  bool done = false;

  void ExpiresAfter(std::chrono::steady_clock::duration d) {
    deadline = std::chrono::steady_clock::now() + d;
  }
};

asio::awaitable<void> Watchdog(std::shared_ptr<Connection> c) {
  boost::system::error_code ec;
  while (!c->done) {
    c->timer.expires_at(c->deadline);
    co_await c->timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (c->done) break;
    if (c->deadline <= std::chrono::steady_clock::now()) {
      boost::system::error_code ignored;
      c->socket.close(ignored);
      break;
    }
  }
}

}  // namespace

asio::awaitable<void> HttpServer::Session(tcp::socket socket) {
  ScopedCount open(connections_);
  handler_->ConnectionOpened();
  boost::system::error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  Peer peer;
  peer.address = socket.remote_endpoint(ignored).address();
  if (peer.address.is_v6() && peer.address.to_v6().is_v4_mapped()) {
    peer.address = asio::ip::make_address_v4(asio::ip::v4_mapped, peer.address.to_v6());
  }

  auto conn = std::make_shared<Connection>(std::move(socket));
  conn->ExpiresAfter(options_.header_timeout);
  asio::co_spawn(conn->socket.get_executor(), Watchdog(conn), asio::detached);

  beast::flat_buffer buffer;
  bool first = true;
  boost::system::error_code ec;
  auto with_ec = asio::redirect_error(asio::use_awaitable, ec);
  while (!stopping_.load()) {
    // Wait for the next request's first byte (idle keep-alive), then give the whole header block
    // and body the header timeout, so a client trickling bytes is cut off.
    if (buffer.size() == 0) {
      conn->ExpiresAfter(first ? options_.header_timeout : options_.idle_timeout);
      const std::size_t n = co_await conn->socket.async_read_some(buffer.prepare(4096), with_ec);
      if (ec) break;
      buffer.commit(n);
    }
    first = false;
    conn->ExpiresAfter(options_.header_timeout);

    bhttp::request_parser<bhttp::string_body> parser;
    parser.header_limit(static_cast<std::uint32_t>(options_.header_limit));
    parser.body_limit(options_.body_limit);
    co_await bhttp::async_read(conn->socket, buffer, parser, with_ec);
    if (ec == bhttp::error::end_of_stream || ec == asio::error::operation_aborted ||
        ec == asio::error::connection_reset || ec == asio::error::eof ||
        ec == asio::error::bad_descriptor) {
      break;
    }
    if (ec) {
      unsigned status = ec == bhttp::error::header_limit ? 431
                        : ec == bhttp::error::body_limit ? 413
                                                         : 400;
      Log(LogLevel::kWarn, "request rejected")
          .Int("status", status)
          .Str("client", peer.address.to_string())
          .Str("error", ec.message());
      Response res = handler_->Reject(status, ec.message(), 11);
      res.keep_alive(false);
      res.prepare_payload();
      const std::string wire = Serialize(res);
      co_await asio::async_write(conn->socket, asio::buffer(wire), with_ec);
      break;
    }

    Request req = parser.release();
    Response res;
    const auto started = std::chrono::steady_clock::now();
    {
      ScopedCount busy(in_flight_);
      res = co_await handler_->Handle(req, peer);
    }
    LogRequest(req, res, peer, std::chrono::steady_clock::now() - started);
    const bool keep_alive = req.keep_alive() && !stopping_.load();
    res.version(req.version());
    res.keep_alive(keep_alive);
    res.prepare_payload();
    const std::string wire = Serialize(res);
    co_await asio::async_write(conn->socket, asio::buffer(wire), with_ec);
    if (ec || !keep_alive) break;
  }
  conn->done = true;
  conn->timer.cancel();
  conn->socket.shutdown(tcp::socket::shutdown_send, ignored);
  conn->socket.close(ignored);
  handler_->ConnectionClosed();
}

}  // namespace sluice::http
