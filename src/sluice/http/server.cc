#include "sluice/http/server.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <list>
#include <memory>
#include <optional>
#include <utility>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "sluice/common/log.h"
#include "sluice/common/strings.h"
#include "sluice/http/render.h"
#include "sluice/http/request_framing.h"
#include "sluice/net/listener.h"
#include "sluice/registry/keys.h"

namespace sluice::http {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using asio::ip::tcp;

namespace {

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
// The Date of a response sent now (RFC 9110 §6.6.1: an origin server with a clock sends it),
// formatted once a second per thread.
std::string_view DateNow() {
  thread_local int64_t second = -1;
  thread_local std::string text;
  const int64_t now = absl::ToUnixSeconds(absl::Now());
  if (now != second) {
    second = now;
    text = HttpDate(now);
  }
  return text;
}

std::string Serialize(const Response& res) {
  std::string out;
  out.reserve(200 + res.body().size());
  // Our own version whatever the client's (RFC 9110 §2.5: a 1.0 client reads a 1.1 answer; what
  // it may not get is a 1.1 feature, and no answer here is chunked).
  out += "HTTP/1.1 ";
  out += std::to_string(res.result_int());
  out += ' ';
  const auto reason = res.reason();
  out.append(reason.data(), reason.size());
  out += "\r\nDate: ";
  out += DateNow();
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
// which are never logged, and one sent in the path by mistake is cut to its display prefix.
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
      .Str("path", registry::RedactKeys(path))  // a key sent where it does not belong
      .Int("status", status)
      .Str("client", peer.address.to_string())
      .Int("us", std::chrono::duration_cast<std::chrono::microseconds>(took).count());
}

// True if the request line in `buffer` is well formed but names an HTTP version other than 1.0 or
// 1.1 ("GET / HTTP/2.0\r\n"): Beast calls both that and a mangled line bad_version.
bool OtherHttpVersion(const beast::flat_buffer& buffer) {
  const std::string_view data(static_cast<const char*>(buffer.data().data()), buffer.size());
  const size_t eol = data.find('\n');
  if (eol == std::string_view::npos || eol == 0 || data[eol - 1] != '\r') return false;
  const std::string_view line = data.substr(0, eol - 1);
  // method SP target SP version, with exactly two spaces.
  const size_t first = line.find(' ');
  const size_t last = line.rfind(' ');
  if (first == std::string_view::npos || first == last || line.find(' ', first + 1) != last) {
    return false;
  }
  const std::string_view version = line.substr(last + 1);
  return version.size() == 8 && version.substr(0, 5) == "HTTP/" && version[5] >= '0' &&
         version[5] <= '9' && version[6] == '.' && version[7] >= '0' && version[7] <= '9' &&
         version != "HTTP/1.0" && version != "HTTP/1.1";
}

// The status for a request Beast could not parse.
unsigned ParseErrorStatus(const boost::system::error_code& ec, const beast::flat_buffer& buffer,
                          bool header_done) {
  // The buffer holds at most a header block, so it overflows on a longer header block, or on an
  // over-long chunk extension or trailer section once the header is done.
  if (ec == bhttp::error::header_limit) return 431;
  if (ec == bhttp::error::buffer_overflow) return header_done ? 413 : 431;
  if (ec == bhttp::error::body_limit) return 413;
  if (ec == bhttp::error::bad_version && OtherHttpVersion(buffer)) return 505;
  return 400;
}

// Drops the empty lines a client may send before a request line (RFC 9112 §2.2: a server should
// ignore at least one; some clients send CRLF after a body).
size_t SkipLeadingEmptyLines(beast::flat_buffer& buffer) {
  const auto* data = static_cast<const char*>(buffer.data().data());
  size_t n = 0;
  while (n < buffer.size()) {
    if (data[n] == '\n') {
      ++n;
    } else if (data[n] == '\r' && (n + 1 == buffer.size() || data[n + 1] == '\n')) {
      ++n;  // CR LF, or a CR whose LF has not arrived yet
    } else {
      break;
    }
  }
  buffer.consume(n);
  return n;
}

// Whether `buffer` holds a whole header block (up to its empty line), or bytes Beast refuses
// anyway (a bare LF, or a CR not followed by LF): either way Beast may parse now. Beast parses
// the field lines that are complete as they arrive and drops them from the buffer, so a header
// block fed to it in pieces could outgrow the buffer's bound; fed whole, it cannot.
// `from` is where to go on scanning (0 for a new block): the bytes before it were scanned by an
// earlier call on the same block, so a block that trickles in is scanned in linear time.
bool HeaderBlockReady(const beast::flat_buffer& buffer, size_t& from) {
  const std::string_view data(static_cast<const char*>(buffer.data().data()), buffer.size());
  for (size_t i = data.find_first_of("\r\n", from); i != std::string_view::npos;
       i = data.find_first_of("\r\n", i + 1)) {
    if (data[i] == '\n') return true;  // a bare LF (a CR LF is stepped over below)
    if (i + 1 == data.size()) break;
    if (data[i + 1] != '\n') return true;  // a bare CR
    if (data.substr(i, 4) == "\r\n\r\n") return true;
    ++i;
  }
  // The end of the block (CR LF CR LF) may start in the last three bytes; never resume on the LF
  // of a CR LF, which would read as a bare LF.
  from = data.size() < 3 ? 0 : data.size() - 3;
  if (from > 0 && data[from] == '\n' && data[from - 1] == '\r') --from;
  return false;
}

// Whether the unparsed bytes of a chunked body (a chunk line or trailer not whole yet) hold a
// line end other than CR LF: a bare LF, or a CR followed by anything but LF. Searched from `from`
// on (one byte back, for a CR whose next byte has just come); `from` becomes the end, so that
// bytes that trickle in are searched once.
bool HasBareLineEnd(const beast::flat_buffer& buffer, size_t& from) {
  const std::string_view data(static_cast<const char*>(buffer.data().data()), buffer.size());
  for (size_t i = from > 0 ? from - 1 : 0; i < data.size(); ++i) {
    if (data[i] == '\n' && (i == 0 || data[i - 1] != '\r')) return true;
    if (data[i] == '\r' && i + 1 < data.size() && data[i + 1] != '\n') return true;
  }
  from = data.size();
  return false;
}

}  // namespace

Response RequestHandler::Reject(unsigned status, std::string_view detail, unsigned version) {
  std::string_view title = status == 431   ? "Request Header Fields Too Large"
                           : status == 413 ? "Content Too Large"
                           : status == 417 ? "Expectation Failed"
                           : status == 501 ? "Not Implemented"
                           : status == 505 ? "HTTP Version Not Supported"
                                           : "Bad Request";
  Response res = Problem(status, "about:blank", title, detail, version, /*keep_alive=*/false);
  // Beast's own phrase for 413 is RFC 7231's "Payload Too Large".
  res.reason(boost::beast::string_view(title.data(), title.size()));
  return res;
}

// One acceptor with what its thread keeps beside it. Owned by the HttpServer; the acceptor and the
// timer belong to an io_context and are destroyed by ReleaseAcceptors, the list of connections
// (which the coroutine frames of sessions refer to until their io_context is destroyed) only with
// the server.
struct HttpServer::Listener {
  std::unique_ptr<tcp::acceptor> acceptor;
  std::unique_ptr<asio::steady_timer> pause;
  // A descriptor kept open so that, when the process has none left, one can be freed to accept and
  // close the connections waiting in the kernel's queue (they are refused rather than left
  // hanging).
  int reserve_fd = -1;
  // This thread's open connections, oldest first. Touched only on the listener's thread.
  std::list<Connection*> open;
};

// A connection's socket and its deadline. The deadline is a plain time point that the session moves
// forward per phase (no timer operation, no syscall per request); one watchdog coroutine per
// connection sleeps until the deadline and closes the socket if it has passed, which makes the
// pending read or write fail with operation_aborted.
struct HttpServer::Connection {
  Connection(tcp::socket s, Listener* l)
      : socket(std::move(s)), timer(socket.get_executor()), listener(l) {}
  tcp::socket socket;
  asio::steady_timer timer;
  std::chrono::steady_clock::time_point deadline;
  bool done = false;
  Listener* listener;
  std::list<Connection*>::iterator position;
  bool listed = false;       // in listener->open
  bool counted = true;       // counted in HttpServer::connections_
  bool answering = false;    // between a request's last byte and its answer's: never evicted
  bool mid_request = false;  // bytes of a request not yet answered have arrived
  // Where the session is between requests: whether a request line has come yet (until then a wait
  // has the header timeout, not the idle one), and the empty lines skipped before the current one.
  bool first_request = true;
  std::size_t empty_line_bytes = 0;
  Peer peer;

  void ExpiresAfter(std::chrono::steady_clock::duration d) {
    deadline = std::chrono::steady_clock::now() + d;
  }
};

namespace {

asio::awaitable<void> Watchdog(std::shared_ptr<HttpServer::Connection> c,
                               std::chrono::steady_clock::duration max_sleep);

bool IsClosedByPeerOrUs(const boost::system::error_code& ec) {
  return ec == bhttp::error::end_of_stream || ec == asio::error::operation_aborted ||
         ec == asio::error::connection_reset || ec == asio::error::eof ||
         ec == asio::error::bad_descriptor || ec == asio::error::broken_pipe;
}

// Logs `message` at most once per interval per server, with how many times it happened since.
class ThrottledLog {
 public:
  void Warn(std::string_view message, std::string_view server, const std::string& error) {
    const int64_t now = absl::GetCurrentTimeNanos();
    const int64_t seen = suppressed_.fetch_add(1) + 1;
    int64_t last = last_ns_.load();
    if (last != 0 && now - last < kIntervalNs) return;
    if (!last_ns_.compare_exchange_strong(last, now)) return;
    suppressed_.fetch_sub(seen);
    Log(LogLevel::kWarn, message).Str("server", server).Str("error", error).Int("times", seen);
  }

 private:
  static constexpr int64_t kIntervalNs = 10'000'000'000;  // 10 s
  std::atomic<int64_t> last_ns_{0};
  std::atomic<int64_t> suppressed_{0};
};

ThrottledLog g_accept_failure_log;
ThrottledLog g_full_log;

}  // namespace

HttpServer::HttpServer(RequestHandler* handler, ServerOptions options)
    : handler_(handler), options_(std::move(options)) {}

HttpServer::~HttpServer() {
  for (auto& l : listeners_) {
    if (l->reserve_fd >= 0) ::close(l->reserve_fd);
  }
  if (address_lock_ >= 0) ::close(address_lock_);
}

void HttpServer::ReleaseAcceptors() {
  for (auto& l : listeners_) {
    l->pause.reset();
    l->acceptor.reset();
  }
}

absl::Status HttpServer::Listen(const std::vector<asio::io_context*>& contexts,
                                const tcp::endpoint& endpoint) {
  const std::string where =
      endpoint.address().is_v6()
          ? absl::StrCat("[", endpoint.address().to_string(), "]:", endpoint.port())
          : absl::StrCat(endpoint.address().to_string(), ":", endpoint.port());
  if (endpoint.port() != 0) {
    absl::StatusOr<int> lock = net::LockListenAddress(endpoint);
    if (!lock.ok()) return lock.status();
    address_lock_ = *lock;
  }
  std::vector<std::unique_ptr<Listener>> listeners;
  tcp::endpoint bound = endpoint;
  for (asio::io_context* io : contexts) {
    auto l = std::make_unique<Listener>();
    l->acceptor = std::make_unique<tcp::acceptor>(*io);
    l->pause = std::make_unique<asio::steady_timer>(*io);
    tcp::acceptor& acceptor = *l->acceptor;
    boost::system::error_code ec = net::OpenSharedListener(acceptor, bound);
    // Synchronous accept() calls (shedding under EMFILE) must never block.
    if (!ec) acceptor.non_blocking(true, ec);
    if (ec) {
      return absl::UnavailableError(absl::StrCat("cannot listen on ", where, ": ", ec.message()));
    }
    // With port 0 the first bind picks the port; the others must share it.
    bound = acceptor.local_endpoint();
    l->reserve_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    listeners.push_back(std::move(l));
  }
  port_ = bound.port();
  for (auto& l : listeners) {
    asio::co_spawn(l->acceptor->get_executor(), Accept(*l), asio::detached);
    listeners_.push_back(std::move(l));
  }
  return absl::OkStatus();
}

void HttpServer::StopAccepting() {
  stopping_.store(true);
  for (auto& l : listeners_) {
    if (!l->acceptor) continue;
    // Closing must happen on the acceptor's own thread.
    asio::post(l->acceptor->get_executor(), [a = l->acceptor.get(), t = l->pause.get()] {
      boost::system::error_code ignored;
      a->close(ignored);
      t->cancel();
    });
  }
}

bool HttpServer::EvictOne(Listener& listener) {
  // First the oldest connection that sent nothing since its last answer (an idle hoarder), then
  // the oldest one in the middle of sending a request: a probe that has sent its request is the
  // last to go.
  Connection* victim = nullptr;
  for (Connection* c : listener.open) {
    if (c->answering || c->peer.authenticated) continue;
    if (!c->mid_request) {
      victim = c;
      break;
    }
    if (victim == nullptr) victim = c;
  }
  if (victim == nullptr) return false;
  listener.open.erase(victim->position);
  victim->listed = false;
  victim->counted = false;
  connections_.fetch_sub(1);
  boost::system::error_code ignored;
  if (LogEnabled(LogLevel::kDebug)) {
    Log(LogLevel::kDebug, "connection evicted to make room")
        .Str("server", options_.name)
        .Str("client", victim->peer.address.to_string())
        .Bool("mid_request", victim->mid_request)
        .Int("max_connections", static_cast<int64_t>(options_.max_connections));
  }
  victim->socket.close(ignored);  // its session ends with operation_aborted
  if (options_.evicted != nullptr) options_.evicted->Inc();
  return true;
}

asio::awaitable<void> HttpServer::BackOffAfterAcceptFailure(Listener& listener,
                                                            const boost::system::error_code& ec) {
  if (options_.accept_failures != nullptr) options_.accept_failures->Inc();
  g_accept_failure_log.Warn("cannot accept connections; refusing new ones until resources free up",
                            options_.name, ec.message());
  tcp::acceptor& acceptor = *listener.acceptor;
  if (listener.reserve_fd >= 0) {
    ::close(listener.reserve_fd);
    listener.reserve_fd = -1;
  }
  // With one descriptor free, the waiting clients get a closed connection instead of a hang.
  for (int shed = 0; shed < 1024; ++shed) {
    const int fd = ::accept4(acceptor.native_handle(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) break;
    ::close(fd);
  }
  listener.reserve_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  boost::system::error_code ignored;
  listener.pause->expires_after(std::chrono::milliseconds(100));
  co_await listener.pause->async_wait(asio::redirect_error(asio::use_awaitable, ignored));
}

asio::awaitable<void> HttpServer::Accept(Listener& listener) {
  tcp::acceptor& acceptor = *listener.acceptor;
  while (!stopping_.load()) {
    boost::system::error_code ec;
    tcp::socket socket =
        co_await acceptor.async_accept(asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor.is_open() || stopping_.load()) {
        co_return;
      }
      if (net::IsResourceExhaustion(ec)) co_await BackOffAfterAcceptFailure(listener, ec);
      continue;  // e.g. ECONNABORTED: the client gave up while queued
    }
    // Counted before the session starts, so that connections accepted together on several threads
    // cannot overshoot the cap.
    const int64_t open = connections_.fetch_add(1) + 1;
    if (open > static_cast<int64_t>(options_.max_connections) &&
        !(options_.evict_unauthenticated && EvictOne(listener))) {
      connections_.fetch_sub(1);
      if (options_.refused != nullptr) options_.refused->Inc();
      g_full_log.Warn("connection refused: the connection cap is reached", options_.name,
                      absl::StrCat("max_connections ", options_.max_connections));
      boost::system::error_code ignored;
      if (LogEnabled(LogLevel::kDebug)) {
        const tcp::endpoint remote = socket.remote_endpoint(ignored);
        Log(LogLevel::kDebug, "connection refused at the cap")
            .Str("server", options_.name)
            .Str("client", remote.address().to_string())
            .Int("max_connections", static_cast<int64_t>(options_.max_connections));
      }
      socket.close(ignored);
      continue;
    }
    auto conn = std::make_shared<Connection>(std::move(socket), &listener);
    asio::co_spawn(acceptor.get_executor(), Session(std::move(conn)), asio::detached);
  }
}

namespace {

// Sleeps at most `max_sleep` at a time, so that a deadline moved earlier than the one it went to
// sleep on (idle 60 s, then a request's first byte: 10 s) is still kept to the letter, without
// re-arming the timer on the request path.
asio::awaitable<void> Watchdog(std::shared_ptr<HttpServer::Connection> c,
                               std::chrono::steady_clock::duration max_sleep) {
  boost::system::error_code ec;
  while (!c->done) {
    c->timer.expires_at(std::min(c->deadline, std::chrono::steady_clock::now() + max_sleep));
    co_await c->timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (c->done) break;
    if (c->deadline <= std::chrono::steady_clock::now()) {
      boost::system::error_code ignored;
      c->socket.close(ignored);
      break;
    }
  }
}

// Closing a socket with unread input makes the kernel send a reset, which can destroy the answer
// before the client reads it. So: stop sending, read and drop what still comes for a short while,
// then close.
asio::awaitable<void> LingeringClose(HttpServer::Connection& c) {
  boost::system::error_code ec;
  c.socket.shutdown(tcp::socket::shutdown_send, ec);
  if (ec) co_return;
  c.ExpiresAfter(std::chrono::seconds(2));
  std::array<char, 4096> scratch;
  size_t total = 0;
  while (total < 256 * 1024) {
    const size_t n = co_await c.socket.async_read_some(
        asio::buffer(scratch), asio::redirect_error(asio::use_awaitable, ec));
    if (ec) break;
    total += n;
  }
}

using RequestParser = bhttp::request_parser<bhttp::string_body>;

// A session's place in its listener's list of open connections (what eviction picks from) and its
// share of the count of open connections (the cap; Accept counted it). Undone by the destructor,
// which runs also when the io_context is destroyed with the session suspended (the frame is then
// destroyed, never resumed); the handler is told of the close there too.
class Registration {
 public:
  Registration(HttpServer::Connection& conn, std::atomic<int64_t>& open_connections,
               RequestHandler& handler)
      : conn_(conn), open_connections_(open_connections), handler_(handler) {
    conn_.position = conn_.listener->open.insert(conn_.listener->open.end(), &conn_);
    conn_.listed = true;
  }
  ~Registration() {
    if (conn_.listed) conn_.listener->open.erase(conn_.position);
    conn_.listed = false;
    // An evicted connection was taken out of the count already.
    if (conn_.counted) open_connections_.fetch_sub(1);
    conn_.counted = false;
    handler_.ConnectionClosed();
  }
  Registration(const Registration&) = delete;
  Registration& operator=(const Registration&) = delete;

 private:
  HttpServer::Connection& conn_;
  std::atomic<int64_t>& open_connections_;
  RequestHandler& handler_;
};

// How long a kept-alive connection may wait for its next request: shorter for a peer that has not
// authenticated, when so configured (idle clients must not hold the admin plane's slots).
std::chrono::seconds IdleTimeout(const Peer& peer, const ServerOptions& options) {
  return peer.authenticated || options.unauthenticated_idle_timeout.count() == 0
             ? options.idle_timeout
             : options.unauthenticated_idle_timeout;
}

// Before the wait for a request's first byte: that wait's deadline. A new connection gets the
// header timeout (a client connects to send a request), a kept-alive one its idle timeout. After
// empty lines the request has begun: its deadline is set already and stays.
void ExpectNextRequest(HttpServer::Connection& conn, const ServerOptions& options) {
  if (conn.empty_line_bytes == 0) {
    conn.ExpiresAfter(conn.first_request ? options.header_timeout
                                         : IdleTimeout(conn.peer, options));
  }
  conn.mid_request = false;
}

enum class RequestStart {
  kBegun,              // a request line starts the buffer
  kOnlyEmptyLines,     // nothing else yet: read on
  kTooManyEmptyLines,  // more than a client sends by mistake: to be refused (400)
};

// Once bytes are buffered the request has begun, and eviction takes it last. Skips the empty
// lines a client may send before its request line (RFC 9112 §2.2: some send CR LF after a body),
// within a bound. The header timeout runs from the request's first byte, so that empty lines
// cannot extend it: it is set at the first empty line, or at the request line if none came first.
RequestStart StartRequest(HttpServer::Connection& conn, beast::flat_buffer& buffer,
                          const ServerOptions& options) {
  conn.mid_request = true;
  const size_t skipped = SkipLeadingEmptyLines(buffer);
  if (skipped > 0 && conn.empty_line_bytes == 0) conn.ExpiresAfter(options.header_timeout);
  conn.empty_line_bytes += skipped;
  if (conn.empty_line_bytes > 64) return RequestStart::kTooManyEmptyLines;
  if (buffer.size() == 0) return RequestStart::kOnlyEmptyLines;
  if (conn.empty_line_bytes == 0) conn.ExpiresAfter(options.header_timeout);
  conn.empty_line_bytes = 0;
  conn.first_request = false;
  return RequestStart::kBegun;
}

// Bounds the chunk extensions of a body, all its chunks together, by the header block's bound (one
// chunk line alone is bounded by the buffer). The parser keeps a reference: it must outlive the
// parser's reading.
struct ChunkExtensionBound {
  size_t limit;
  size_t bytes = 0;
  void operator()(std::uint64_t /*size*/, boost::beast::string_view extensions,
                  boost::system::error_code& ec) {
    bytes += extensions.size();
    if (bytes > limit) ec = bhttp::error::body_limit;
  }
};

// After Beast read the header block (`ec` says how that went): why the request cannot be served,
// or nullopt if it can. A header block Beast could not parse, or framing that breaks a rule
// (request_framing.h), leaves where the request ends unknown: the answer is a refusal, and the
// connection is closed after it.
std::optional<FramingError> CheckHead(const boost::system::error_code& ec,
                                      const beast::flat_buffer& buffer,
                                      const RequestParser& parser) {
  if (ec) return FramingError{ParseErrorStatus(ec, buffer, false), ec.message()};
  return CheckFraming(parser.get().base());
}

// Feeds the buffered bytes of a body to `parser`. True when the body is settled: parsed whole
// (`ec` clear) or refused (`ec` says why); false when more bytes must be read first. `searched`
// carries over between calls on one body: of the unparsed bytes, those already searched for a
// bare line end.
//
// Beast's async_read would do, but for a chunk line ended by a bare LF or CR: Beast ends a line
// only at CR LF, so it would wait for one until the request's deadline and close without an
// answer. Fed by hand, that line is refused at once (400) like one in the header.
// REQUIRES: the parser is eager, so that put() stops short only at an element not whole yet (a
// chunk line, the CR LF after a chunk's data, the trailer section): never inside chunk data.
bool ConsumeBufferedBody(RequestParser& parser, beast::flat_buffer& buffer, size_t& searched,
                         boost::system::error_code& ec) {
  if (buffer.size() > 0) {
    const size_t used = parser.put(buffer.data(), ec);
    buffer.consume(used);
    if (parser.is_done() || (ec && ec != bhttp::error::need_more)) return true;
    // Every byte taken, or an element (a chunk line, the trailer) not whole yet.
    ec = {};
    searched = used >= searched ? 0 : searched - used;
    if (parser.chunked() && HasBareLineEnd(buffer, searched)) {
      ec = bhttp::error::bad_chunk;
      return true;
    }
  }
  if (buffer.size() >= buffer.max_size()) {
    ec = bhttp::error::buffer_overflow;
    return true;
  }
  return false;
}

// Reads the rest of a body that is not buffered whole, feeding it to `parser` as it arrives, and
// returns what settled it: clear when the body is whole. A coroutine of its own, called only when
// bytes are missing, so that a request whose body came with its header costs no extra frame.
asio::awaitable<boost::system::error_code> ReadRestOfBody(tcp::socket& socket,
                                                          beast::flat_buffer& buffer,
                                                          RequestParser& parser, size_t& searched) {
  boost::system::error_code ec;
  do {
    const std::size_t n = co_await socket.async_read_some(
        buffer.prepare(std::min<size_t>(65536, buffer.max_size() - buffer.size())),
        asio::redirect_error(asio::use_awaitable, ec));
    if (ec == asio::error::eof) {
      // The client closed in the middle of the body: partial_message.
      parser.put_eof(ec);
      if (!ec) ec = bhttp::error::partial_message;  // not done (the caller checked): defensive
      co_return ec;
    }
    if (ec) co_return ec;
    buffer.commit(n);
  } while (!ConsumeBufferedBody(parser, buffer, searched, ec));
  co_return ec;
}

// The parsed request as the handler gets it. Trailer fields of a chunked body are not header
// fields (RFC 9110 §6.5.1), but Beast adds them to the message: `header_block`, the header block
// as it came (kept for a chunked body only), is put back. An absolute-form target is put in origin
// form.
Request TakeRequest(RequestParser& parser, std::optional<bhttp::request_header<>>& header_block) {
  Request req = parser.release();
  if (header_block) req.base() = std::move(*header_block);
  if (std::optional<std::string> origin =
          OriginFormTarget(std::string_view(req.target().data(), req.target().size()))) {
    req.target(*origin);
  }
  return req;
}

// The answer to `req` as bytes on the wire, on a connection that is kept open or not.
std::string PrepareAnswer(const Request& req, Response& res, bool keep_alive) {
  res.version(req.version());
  res.keep_alive(keep_alive);  // for 1.0: "Connection: keep-alive" when kept, none otherwise
  // The answer says HTTP/1.1 (Serialize), where persistence is the default: a 1.0 connection
  // that ends must say so.
  if (req.version() == 10 && !keep_alive) res.set(bhttp::field::connection, "close");
  res.prepare_payload();
  // A HEAD answer has the headers a GET would get, Content-Length included, and no body
  // (RFC 9110 §9.3.2): the client reads none, so any would be taken for the next answer.
  if (req.method() == bhttp::verb::head) res.body().clear();
  return Serialize(res);
}

// The end of a session: stops its watchdog and closes the socket.
void CloseConnection(HttpServer::Connection& conn) {
  conn.done = true;
  conn.timer.cancel();
  boost::system::error_code ignored;
  conn.socket.shutdown(tcp::socket::shutdown_send, ignored);
  conn.socket.close(ignored);
}

}  // namespace

void HttpServer::OpenConnection(const std::shared_ptr<Connection>& conn) {
  handler_->ConnectionOpened();
  boost::system::error_code ignored;
  conn->socket.set_option(tcp::no_delay(true), ignored);
  Peer& peer = conn->peer;
  peer.address = conn->socket.remote_endpoint(ignored).address();
  if (peer.address.is_v6() && peer.address.to_v6().is_v4_mapped()) {
    peer.address = asio::ip::make_address_v4(asio::ip::v4_mapped, peer.address.to_v6());
  }
  conn->ExpiresAfter(options_.header_timeout);
  asio::co_spawn(conn->socket.get_executor(),
                 Watchdog(conn, std::min<std::chrono::steady_clock::duration>(
                                    options_.header_timeout, std::chrono::seconds(5))),
                 asio::detached);
}

asio::awaitable<bool> HttpServer::Reject(Connection& conn, unsigned status,
                                         std::string_view detail) {
  // Anyone who reaches the port can send bad requests: at most one line a second per loop.
  thread_local LogEvery rejections(std::chrono::seconds(1));
  if (uint64_t held_back = 0; rejections.Allow(&held_back)) {
    Log(LogLevel::kWarn, "request rejected")
        .Int("status", status)
        .Str("client", conn.peer.address.to_string())
        .Str("error", detail)
        .Int("rejections_not_logged", static_cast<int64_t>(held_back));
  }
  Response res = handler_->Reject(status, detail, 11);
  handler_->AnsweredUnrouted(status);
  res.keep_alive(false);
  res.prepare_payload();
  const std::string wire = Serialize(res);
  boost::system::error_code ec;
  co_await asio::async_write(conn.socket, asio::buffer(wire),
                             asio::redirect_error(asio::use_awaitable, ec));
  co_return !ec;
}

bool HttpServer::AnswerUnrouted(const Request& req, Response& res) {
  if (req.method() == bhttp::verb::unknown) {
    res = handler_->Reject(501, "unknown method", req.version());
    handler_->AnsweredUnrouted(501);
    return true;
  }
  if (req.method() == bhttp::verb::options && req.target() == "*") {
    // About the server as a whole (RFC 9110 §9.3.7): the methods some route takes.
    res = Response(bhttp::status::ok, req.version());
    const std::string_view allow = handler_->Methods();
    res.set(bhttp::field::allow, boost::beast::string_view(allow.data(), allow.size()));
    handler_->AnsweredUnrouted(200);
    return true;
  }
  return false;
}

// The reads of a request stay in this loop, in the connection's one coroutine frame; the steps
// around them are synchronous. Only a refusal and the reading of a body that has not fully arrived
// are coroutines of their own, so a request that came whole costs no extra frame.
asio::awaitable<void> HttpServer::Session(std::shared_ptr<Connection> conn) {
  const Registration registration(*conn, connections_, *handler_);
  OpenConnection(conn);
  // Holds the unparsed input: at most one header block, which bounds the header block exactly and
  // chunk extensions and trailers too (the body itself goes to the parser as it arrives).
  beast::flat_buffer buffer(options_.header_limit);
  bool linger = false;  // close gracefully: an answer was sent and input may still be coming
  boost::system::error_code ec;
  auto with_ec = asio::redirect_error(asio::use_awaitable, ec);
  while (!stopping_.load()) {
    // Wait for the next request's first byte (idle keep-alive), then give the whole header block
    // and body the header timeout, so a client trickling bytes is cut off.
    if (buffer.size() == 0) {
      ExpectNextRequest(*conn, options_);
      const std::size_t n = co_await conn->socket.async_read_some(
          buffer.prepare(std::min<size_t>(4096, buffer.max_size())), with_ec);
      if (ec) break;
      buffer.commit(n);
    }
    const RequestStart start = StartRequest(*conn, buffer, options_);
    if (start == RequestStart::kTooManyEmptyLines) {
      linger = co_await Reject(*conn, 400, "too many empty lines before the request line");
      break;
    }
    if (start == RequestStart::kOnlyEmptyLines) continue;  // wait for the request line

    // The whole header block first, within the buffer's bound (exact: the request line and every
    // field line, however the bytes arrive).
    size_t scanned = 0;
    while (!HeaderBlockReady(buffer, scanned) && buffer.size() < buffer.max_size()) {
      const std::size_t n = co_await conn->socket.async_read_some(
          buffer.prepare(std::min<size_t>(4096, buffer.max_size() - buffer.size())), with_ec);
      if (ec) break;
      buffer.commit(n);
    }
    if (!ec && !HeaderBlockReady(buffer, scanned)) {
      linger = co_await Reject(*conn, 431, "header block over the limit");
      break;
    }
    // A read that failed (the peer closed mid-request, the deadline) fails again in Beast's read
    // below, which answers it as any incomplete request.
    ec = {};

    ChunkExtensionBound extensions{.limit = options_.header_limit};
    RequestParser parser;
    parser.header_limit(static_cast<std::uint32_t>(options_.header_limit));
    parser.body_limit(options_.body_limit);
    parser.on_chunk_header(extensions);
    co_await bhttp::async_read_header(conn->socket, buffer, parser, with_ec);
    if (IsClosedByPeerOrUs(ec)) break;
    if (std::optional<FramingError> bad = CheckHead(ec, buffer, parser)) {
      linger = co_await Reject(*conn, bad->status, bad->detail);
      break;
    }
    std::optional<bhttp::request_header<>> header_block;  // see TakeRequest
    if (!parser.is_done()) {
      if (parser.chunked()) header_block = parser.get().base();
      // A client that sent "Expect: 100-continue" waits for this before sending the body
      // (HTTP/1.0 has no 1xx answers: there the expectation is ignored).
      if (parser.get().version() == 11 && ExpectsContinue(parser.get().base())) {
        static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
        co_await asio::async_write(conn->socket, asio::buffer(kContinue), with_ec);
        if (ec) break;
      }
      parser.eager(true);  // as ConsumeBufferedBody requires
      size_t searched = 0;
      if (!ConsumeBufferedBody(parser, buffer, searched, ec)) {
        ec = co_await ReadRestOfBody(conn->socket, buffer, parser, searched);
      }
      // The deadline or a reset: nothing to answer. A client that closed its side in the
      // middle of the body (partial_message) still gets its 400.
      if (IsClosedByPeerOrUs(ec)) break;
      if (ec) {
        linger = co_await Reject(*conn, ParseErrorStatus(ec, buffer, true), ec.message());
        break;
      }
    }

    // Every Connection field line counts ("Connection: foo" then "Connection: close").
    const bool client_keeps_alive = parser.keep_alive();
    Request req = TakeRequest(parser, header_block);
    Response res;
    conn->answering = true;
    const auto started = std::chrono::steady_clock::now();
    {
      ScopedCount busy(in_flight_);
      if (!AnswerUnrouted(req, res)) res = co_await handler_->Handle(req, conn->peer);
    }
    LogRequest(req, res, conn->peer, std::chrono::steady_clock::now() - started);
    const bool keep_alive = client_keeps_alive && !stopping_.load();
    const std::string wire = PrepareAnswer(req, res, keep_alive);
    co_await asio::async_write(conn->socket, asio::buffer(wire), with_ec);
    conn->answering = false;
    if (ec) break;
    if (!keep_alive) {
      linger = true;
      break;
    }
  }
  if (linger && !stopping_.load()) co_await LingeringClose(*conn);
  CloseConnection(*conn);
}

}  // namespace sluice::http
