#include "sluice/store/redis/connection.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <deque>
#include <span>
#include <utility>

#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "sluice/common/hex.h"
#include "sluice/common/log.h"
#include "sluice/common/strings.h"

namespace sluice::redis {
namespace asio = boost::asio;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

// Bounds connect, the TLS handshake and AUTH/SELECT/PING; a server that accepts but never answers
// must not wedge us.
constexpr std::chrono::milliseconds kConnectTimeout{1000};

bool ValidHostName(std::string_view host) {
  if (host.empty() || !std::all_of(host.begin(), host.end(), [](char c) {
        return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' ||
               c == '_';
      })) {
    return false;
  }
  // Digits and dots are an IPv4 address (999.999.999.999 is no name to look up).
  if (std::all_of(host.begin(), host.end(), [](char c) {
        return absl::ascii_isdigit(static_cast<unsigned char>(c)) || c == '.';
      })) {
    boost::system::error_code ec;
    asio::ip::make_address_v4(std::string(host), ec);
    return !ec;
  }
  return true;
}

// The user and password of a URL are percent-encoded (RFC 3986), so a password may hold any byte.
// The error never repeats the text: it is a credential.
absl::StatusOr<std::string> PercentDecode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    const int hi = i + 2 < text.size() ? HexDigitValue(text[i + 1]) : -1;
    const int lo = hi >= 0 ? HexDigitValue(text[i + 2]) : -1;
    if (lo < 0) {
      return absl::InvalidArgumentError(
          "redis URL credentials: bad percent-encoding (write a literal % as %25)");
    }
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

}  // namespace

absl::StatusOr<ConnectionOptions> ParseRedisUrl(std::string_view url) {
  constexpr std::string_view kScheme = "redis://";
  constexpr std::string_view kTlsScheme = "rediss://";
  ConnectionOptions options;
  std::string_view rest;
  if (url.starts_with(kScheme)) {
    rest = url.substr(kScheme.size());
  } else if (url.starts_with(kTlsScheme)) {
    rest = url.substr(kTlsScheme.size());
    options.tls.enabled = true;
  } else {
    // The URL itself is not quoted: it may hold a password.
    return absl::InvalidArgumentError("redis URL must start with redis:// or rediss://");
  }

  // The password may hold '/' or ':', so the userinfo ends at the last '@'.
  const size_t at = rest.rfind('@');
  const size_t slash = rest.find('/', at == std::string_view::npos ? 0 : at + 1);
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? "" : rest.substr(slash + 1);

  if (at != std::string_view::npos) {
    std::string_view userinfo = authority.substr(0, at);
    authority = authority.substr(at + 1);
    if (userinfo.find('@') != std::string_view::npos) {
      return absl::InvalidArgumentError("redis URL credentials: write a literal @ as %40");
    }
    // user:password, :password, or a user alone (its password from SLUICE_REDIS_PASSWORD_FILE).
    const size_t colon = std::min(userinfo.find(':'), userinfo.size());
    absl::StatusOr<std::string> username = PercentDecode(userinfo.substr(0, colon));
    if (!username.ok()) return username.status();
    absl::StatusOr<std::string> password =
        PercentDecode(colon == userinfo.size() ? "" : userinfo.substr(colon + 1));
    if (!password.ok()) return password.status();
    options.username = *std::move(username);
    options.password = *std::move(password);
  }

  // No part after the credentials is quoted in an error either: a password may sit where the
  // port belongs (redis://host:password, the @ forgotten) or in a query (?password=...).
  if (authority.find_first_of("?#") != std::string_view::npos ||
      path.find_first_of("?#") != std::string_view::npos) {
    return absl::InvalidArgumentError(
        "redis URL: no query or fragment (?password= is not read: the password goes in "
        "user:password@ or SLUICE_REDIS_PASSWORD_FILE)");
  }
  std::string_view host, port;
  if (authority.starts_with('[')) {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return absl::InvalidArgumentError("unclosed '[' in host");
    host = authority.substr(1, close - 1);
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (!after.starts_with(':')) return absl::InvalidArgumentError("bad text after ']'");
      port = after.substr(1);
      if (port.empty()) return absl::InvalidArgumentError("empty port");
    }
    boost::system::error_code ec;
    asio::ip::make_address_v6(std::string(host), ec);
    if (ec) return absl::InvalidArgumentError("bad redis host (an IPv6 address in brackets)");
  } else {
    const size_t colon = authority.rfind(':');
    host = authority.substr(0, colon);
    if (colon != std::string_view::npos) {
      port = authority.substr(colon + 1);
      if (port.empty()) return absl::InvalidArgumentError("empty port");
    }
    if (!ValidHostName(host)) {
      return absl::InvalidArgumentError(
          "bad redis host (want a DNS name, an IPv4 address or an IPv6 address in brackets)");
    }
  }
  options.host = std::string(host);
  if (!port.empty()) {
    uint32_t n = 0;
    if (!absl::SimpleAtoi(ToAbsl(port), &n) || n == 0 || n > 65535) {
      return absl::InvalidArgumentError("bad redis port (want 1-65535 in digits)");
    }
    options.port = static_cast<uint16_t>(n);
  }
  if (!path.empty()) {
    int db = 0;
    if (!absl::SimpleAtoi(ToAbsl(path), &db) || db < 0) {
      return absl::InvalidArgumentError("bad redis db (want a number from 0, as in /0)");
    }
    options.db = db;
  }
  return options;
}

class Connection::Impl : public std::enable_shared_from_this<Impl> {
 public:
  Impl(asio::io_context& io, ConnectionOptions options)
      : io_(io),
        options_(std::move(options)),
        max_wait_(std::max(options_.max_wait, options_.command_timeout)),
        tls_name_(options_.tls.server_name.empty() ? options_.host : options_.tls.server_name),
        socket_(io),
        deadline_timer_(io),
        backoff_timer_(io),
        connect_timer_(io),
        probe_timer_(io) {}

  void Start() {
    if (started_ || stopped_) return;
    started_ = true;
    asio::co_spawn(io_, Run(shared_from_this()), asio::detached);
  }

  void Stop() {
    if (stopped_) return;
    stopped_ = true;
    Drop();
    boost::system::error_code ignored;
    deadline_timer_.cancel(ignored);
    backoff_timer_.cancel(ignored);
    connect_timer_.cancel(ignored);
    probe_timer_.cancel(ignored);
  }

  void Send(const std::vector<std::string>& argv, Callback done, LateCallback late,
            bool despite_breaker = false) {
    if (!connected_) {
      Complete(std::move(done), absl::UnavailableError("redis: not connected"));
      return;
    }
    if (circuit_open_ && !despite_breaker) {
      Complete(std::move(done), absl::UnavailableError(ToAbsl(kCircuitOpenMessage)));
      return;
    }
    Enqueue(argv, std::move(done), std::move(late));
  }

  bool connected() const { return connected_; }
  bool circuit_open() const { return circuit_open_; }
  uint64_t circuit_opened() const { return circuit_opened_; }
  uint64_t writes() const { return writes_; }
  uint64_t commands_sent() const { return commands_sent_; }

 private:
  struct Pending {
    Callback done;
    Clock::time_point queued;  // when Send took it
    // When its bytes went to the socket (or to the write in flight); kUnwritten until then.
    Clock::time_point written = kUnwritten;
    LateCallback late;       // may be null
    bool cancelled = false;  // timed out: the reply will still come, for `late` or dropped
  };
  static constexpr Clock::time_point kUnwritten = Clock::time_point::max();

  void Enqueue(const std::vector<std::string>& argv, Callback done, LateCallback late = nullptr) {
    if (pending_.size() >= options_.max_pending) {
      Complete(std::move(done), absl::ResourceExhaustedError(absl::StrCat(
                                    "redis: ", pending_.size(), " commands outstanding")));
      return;
    }
    AppendCommand(argv, &out_);
    ++commands_sent_;
    pending_.push_back(
        Pending{.done = std::move(done), .queued = Clock::now(), .late = std::move(late)});
    ++unflushed_;
    ++unwritten_;
    if (writing_) return;  // OnWritten flushes what waits
    if (unflushed_ >= options_.flush_every) {
      Flush();
    } else if (!flush_posted_) {
      PostFlush();
    }
  }

  // When commands leave. Every `flush_every` commands at once, so that Redis works on the first
  // requests of a wake-up while this thread still reads the others: waiting for the whole
  // wake-up (64 HTTP connections' worth) left Redis idle meanwhile and then sluice idle while
  // Redis ran the batch, and cost a third of the throughput (BENCHMARKS.md, "When commands
  // leave"). The rest leaves once the handlers already queued on `io_` have run. A command
  // followed by Stop() in the same handler may therefore not reach the socket: it completes with
  // Unavailable, as any command outstanding at Stop() does.
  void PostFlush() {
    flush_posted_ = true;
    asio::post(io_, [self = shared_from_this(), generation = generation_] {
      if (generation != self->generation_) return;  // dropped meanwhile (Drop cleared the flag)
      self->flush_posted_ = false;
      if (!self->stopped_) self->Flush();
    });
  }

  // Puts out_ on the wire. In plaintext, straight into the socket's send buffer (non-blocking):
  // no operation and no handler per batch; what the buffer does not take, and everything with
  // TLS, leaves with an asynchronous write, which later commands wait for.
  void Flush() {
    if (writing_ || out_.empty()) return;
    unflushed_ = 0;
    MarkWritten();
    if (tls_ == nullptr) {
      boost::system::error_code ec;
      const size_t n = socket_.write_some(asio::buffer(out_), ec);
      if (!ec && n == out_.size()) {
        ++writes_;
        out_.clear();
        return;
      }
      if (ec && ec != asio::error::would_block && ec != asio::error::try_again) {
        // The read loop notices the closed socket and drops the connection.
        boost::system::error_code ignored;
        socket_.close(ignored);
        return;
      }
      out_.erase(0, n);
    }
    StartWrite();
  }

  // The breaker counts consecutive timeouts; any command answered in time resets the count.
  void OnTimeout() {
    ++consecutive_timeouts_;
    if (!circuit_open_ && options_.breaker_failures > 0 &&
        consecutive_timeouts_ >= options_.breaker_failures) {
      circuit_open_ = true;
      ++circuit_opened_;
      Log(LogLevel::kDebug, "redis circuit breaker open")
          .Str("host", options_.host)
          .Int("port", options_.port)
          .Int("consecutive_timeouts", consecutive_timeouts_);
      ScheduleProbe();
    }
  }

  void OnAnswered() {
    consecutive_timeouts_ = 0;
    if (circuit_open_) {
      circuit_open_ = false;
      boost::system::error_code ignored;
      probe_timer_.cancel(ignored);
      Log(LogLevel::kDebug, "redis circuit breaker closed")
          .Str("host", options_.host)
          .Int("port", options_.port);
    }
  }

  // While open, one PING per interval: answered in time, it closes the breaker (OnAnswered via
  // Deliver); timed out, the next one follows. A lost connection closes the breaker too (Drop):
  // the reconnect starts from a clean state.
  void ScheduleProbe() {
    probe_timer_.expires_after(options_.breaker_probe_interval);
    probe_timer_.async_wait(
        [self = shared_from_this(), generation = generation_](const boost::system::error_code& ec) {
          if (ec || self->stopped_ || generation != self->generation_ || !self->circuit_open_) {
            return;
          }
          if (self->pending_.size() < self->options_.max_pending) {
            Log(LogLevel::kDebug, "redis circuit breaker half-open: probing")
                .Str("host", self->options_.host)
                .Int("port", self->options_.port);
            self->Enqueue({"PING"}, [](absl::StatusOr<Reply>) {});
          }
          self->ScheduleProbe();
        });
  }

  void Complete(Callback done, absl::StatusOr<Reply> result) {
    asio::post(io_, [done = std::move(done), result = std::move(result)]() mutable {
      std::move(done)(std::move(result));
    });
  }

  void StartWrite() {
    writing_ = true;
    ++writes_;
    // The buffer is owned by the operation, so a write aborted by Drop() never sees it reused. A
    // completed write hands it back (OnWritten): out_ takes its storage, so the next batch is
    // encoded without growing a new string (a batch is kilobytes: a dozen reallocations).
    std::shared_ptr<std::string> bytes = std::move(spare_);
    if (bytes == nullptr) bytes = std::make_shared<std::string>();
    bytes->swap(out_);
    out_.clear();
    auto on_written = [self = shared_from_this(), bytes, generation = generation_](
                          const boost::system::error_code& ec, size_t) {
      self->OnWritten(generation, ec, bytes);
    };
    if (tls_ == nullptr) {
      asio::async_write(socket_, asio::buffer(*bytes), std::move(on_written));
      return;
    }
    // The operation keeps the stream alive: Drop() may forget it while the write is in flight.
    asio::async_write(*tls_, asio::buffer(*bytes),
                      [tls = tls_, on_written = std::move(on_written)](
                          const boost::system::error_code& ec, size_t n) { on_written(ec, n); });
  }

  void OnWritten(uint64_t generation, const boost::system::error_code& ec,
                 const std::shared_ptr<std::string>& bytes) {
    if (generation != generation_) return;  // a connection already dropped
    writing_ = false;
    if (bytes->capacity() <= kMaxSpareBytes) {
      bytes->clear();
      spare_ = bytes;
    }
    if (ec) {
      // The read loop notices the closed socket and drops the connection.
      boost::system::error_code ignored;
      Socket().close(ignored);
      return;
    }
    Flush();
  }

  // The commands of out_ (the tail of pending_ not yet written) leave now. The timer is armed
  // from here: a command's time out is counted from its write (every queued command is written
  // soon — a flush is posted or follows the write in flight — or the connection is dropped).
  void MarkWritten() {
    const Clock::time_point now = Clock::now();
    for (size_t i = pending_.size() - unwritten_; i < pending_.size(); ++i) {
      pending_[i].written = now;
    }
    unwritten_ = 0;
    ArmDeadline();
  }

  // When commands time out (ConnectionOptions: command_timeout, max_wait). Redis answers one
  // connection's commands in order, so a command waits its turn behind those sent before it: a
  // burst of 500 decisions is 500 turns. What the timeout detects is a Redis that has stopped
  // answering — the live command at the head of the FIFO, written, with nothing heard from Redis
  // for command_timeout while this thread was listening — not a long queue, and not this thread's
  // own backlog: a command is timed from its write, replies waiting in the socket are read before
  // anything times out, and time this thread spent elsewhere (delivering a batch of replies, or
  // so busy that the timer fired late) does not count as Redis's silence. Once Redis has stalled,
  // every command queued at least command_timeout ago times out with the head. Independently, no
  // command is waited for longer than max_wait after its write (a Redis that answers, but too
  // slowly for the queue it has).
  //
  // The timed-out commands form the FIFO's prefix [0, expired_). One timer serves the head; it is
  // armed for the head's earliest possible time out and, when it fires, finds the current head
  // and re-arms for it (replies that arrived meanwhile moved the head on). A head not written yet
  // has no timer: it is written soon (a flush is posted, or follows the write in flight), and
  // MarkWritten arms it.
  Clock::time_point HeadDue() const {
    const Pending& head = pending_[expired_];
    if (head.written == kUnwritten) return Clock::time_point::max();
    return std::min(
        head.written + max_wait_,
        std::max({head.written, last_read_, listening_since_}) + options_.command_timeout);
  }

  // Arms the timer for the head, unless it is armed already for that time or earlier (it then
  // re-arms when it fires: a head's due time only moves later, as replies arrive).
  void ArmDeadline() {
    if (expired_ >= pending_.size()) return;
    const Clock::time_point due = HeadDue();
    if (due == Clock::time_point::max() || (deadline_armed_ && armed_for_ <= due)) return;
    deadline_armed_ = true;
    armed_for_ = due;
    // Setting the expiry cancels a wait already armed for later; its handler sees
    // operation_aborted and leaves the new one be.
    deadline_timer_.expires_at(due);
    deadline_timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (ec == asio::error::operation_aborted) return;
      // Not decided here: a reply this thread has already read but not delivered (its read's
      // completion queued behind this handler) must go first, so the check is posted behind it.
      asio::post(self->io_, [self] { self->OnDeadline(); });
    });
  }

  // True when bytes from Redis wait to be read: the read loop takes them first, and re-arms.
  bool RepliesWaiting() {
    boost::system::error_code ec;
    if (Socket().is_open() && Socket().available(ec) > 0 && !ec) return true;
    return tls_ != nullptr && SSL_pending(tls_->native_handle()) > 0;
  }

  void OnDeadline() {
    deadline_armed_ = false;
    if (stopped_ || expired_ >= pending_.size()) return;
    if (RepliesWaiting()) return;  // ReadLoop re-arms once it has read them
    const Clock::time_point now = Clock::now();
    // A timer that fires late found this thread busy: it was not listening meanwhile, so Redis
    // gets a whole command_timeout of attention from now before its silence is a stall.
    if (now - armed_for_ > options_.command_timeout / 2) listening_since_ = now;
    const Pending& head = pending_[expired_];
    const bool stalled =
        head.written != kUnwritten &&
        now >= std::max({head.written, last_read_, listening_since_}) + options_.command_timeout;
    while (expired_ < pending_.size()) {
      Pending& p = pending_[expired_];
      const bool waited_enough = p.written != kUnwritten && now >= p.written + max_wait_;
      if (!waited_enough && !(stalled && now >= p.queued + options_.command_timeout)) break;
      ++expired_;
      p.cancelled = true;
      Complete(std::move(p.done), absl::DeadlineExceededError("redis: command timed out"));
      OnTimeout();
    }
    ArmDeadline();
  }

  // Matches one reply to the oldest command. False if no command was waiting for it. Runs the
  // callback right here, from the read loop (never inside Send): posting it would cost every
  // reply a trip through the scheduler for nothing. The command is off the FIFO before its
  // callback runs, so the callback may Send (or Stop) freely. noexcept: a callback that throws
  // ends the process (std::terminate), as it did when callbacks ran from the io_context's run(),
  // rather than leaving the read loop dead behind a socket that still looks connected.
  bool Deliver(Reply reply) noexcept {
    if (pending_.empty()) return false;
    Pending p = std::move(pending_.front());
    pending_.pop_front();
    if (p.cancelled) {
      --expired_;
      if (p.late) std::move(p.late)(std::move(reply));
    } else {
      OnAnswered();
      std::move(p.done)(std::move(reply));
    }
    return true;
  }

  // Forgets the current connection: closes it, fails every outstanding command, and makes the
  // handlers of its operations still in flight stale.
  LogEvery connect_failures_;

  void Drop() {
    connected_ = false;
    circuit_open_ = false;
    consecutive_timeouts_ = 0;
    writing_ = false;
    flush_posted_ = false;
    unflushed_ = 0;
    ++generation_;
    std::string().swap(out_);  // a lost connection keeps no buffer
    spare_.reset();
    boost::system::error_code ignored;
    Socket().close(ignored);
    // Operations still in flight on the TLS stream hold it until their handlers have run.
    tls_.reset();
    for (size_t i = expired_; i < pending_.size(); ++i) {
      Complete(std::move(pending_[i].done), absl::UnavailableError("redis: connection lost"));
    }
    pending_.clear();
    expired_ = 0;
    unwritten_ = 0;
    reader_ = ReplyReader();
  }

  static asio::awaitable<void> Run(std::shared_ptr<Impl> self) {
    auto delay = self->options_.reconnect_min;
    while (!self->stopped_) {
      const auto started = std::chrono::steady_clock::now();
      absl::Status status = co_await self->Connect();
      self->ReportConnect(status);
      std::string_view lost = "connect failed";
      if (status.ok()) {
        delay = self->options_.reconnect_min;
        self->connected_ = true;
        if (LogEnabled(LogLevel::kDebug)) {
          Log(LogLevel::kDebug, "redis connection ready")
              .Str("host", self->options_.host)
              .Int("port", self->options_.port)
              .Int("db", self->options_.db)
              .Bool("auth", !self->options_.password.empty())
              .Bool("tls", self->options_.tls.enabled)
              .Double("ms", std::chrono::duration<double, std::milli>(
                                std::chrono::steady_clock::now() - started)
                                .count());
        }
        if (std::shared_ptr<TlsStream> tls = self->tls_) {
          lost = co_await self->ReadLoop(*tls);
        } else {
          lost = co_await self->ReadLoop(self->socket_);
        }
      }
      const size_t failed = self->pending_.size() - self->expired_;
      self->Drop();
      if (self->stopped_) break;
      if (LogEnabled(LogLevel::kDebug)) {
        Log line(LogLevel::kDebug, "redis reconnecting");
        line.Str("host", self->options_.host)
            .Int("port", self->options_.port)
            .Str("reason", lost)
            .Int("commands_failed", static_cast<int64_t>(failed))
            .Int("delay_ms", std::chrono::duration_cast<std::chrono::milliseconds>(delay).count());
        if (!status.ok()) line.Error(status);
      }
      boost::system::error_code ec;
      self->backoff_timer_.expires_after(delay);
      co_await self->backoff_timer_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      delay = std::min(delay * 2, self->options_.reconnect_max);
    }
  }

  // Logs why connecting failed (a refused AUTH reads "WRONGPASS ...", never the password): the
  // first failure at once, then at most once a minute however the reason reads (a TLS refusal
  // alternates between an alert and a reset), with the count of failures not logged; and the
  // recovery.
  void ReportConnect(const absl::Status& status) {
    if (status.ok()) {
      if (connect_failures_.active()) {
        Log(LogLevel::kInfo, "redis connected")
            .Str("host", options_.host)
            .Int("port", options_.port);
      }
      connect_failures_.Reset();
      return;
    }
    uint64_t held_back = 0;
    if (!connect_failures_.Allow(&held_back)) return;
    // FailedPrecondition: the configuration and the server disagree (a database the server does
    // not have); retrying will not heal it.
    Log(absl::IsFailedPrecondition(status) ? LogLevel::kError : LogLevel::kWarn,
        "redis connection failed")
        .Str("host", options_.host)
        .Int("port", options_.port)
        .Error(status)
        .Int("failures_not_logged", static_cast<int64_t>(held_back));
  }

  // The stream of the current connection, when TLS is on; its socket is the lowest layer.
  using TlsStream = asio::ssl::stream<tcp::socket>;

  tcp::socket& Socket() { return tls_ == nullptr ? socket_ : tls_->next_layer(); }

  // Connects and runs the TLS handshake (with TLS), then AUTH / SELECT. Commands sent meanwhile
  // fail fast (not connected yet).
  asio::awaitable<absl::Status> Connect() {
    boost::system::error_code ec;
    tcp::resolver resolver(io_);
    auto endpoints = co_await resolver.async_resolve(options_.host, std::to_string(options_.port),
                                                     asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return absl::UnavailableError(absl::StrCat("redis: resolve: ", ec.message()));

    // A TLS stream cannot be used again once closed: each connection gets a new one. This frame
    // holds it too, since Stop() may forget it meanwhile.
    std::shared_ptr<TlsStream> tls;
    if (options_.tls.enabled) {
      if (options_.tls.context == nullptr) {
        co_return absl::FailedPreconditionError("redis: rediss:// without a TLS context");
      }
      tls = std::make_shared<TlsStream>(io_, *options_.tls.context);
      tls_ = tls;
    }
    tcp::socket& socket = Socket();

    connect_timer_.expires_after(kConnectTimeout);
    connect_timer_.async_wait([self = shared_from_this(), generation = generation_](
                                  const boost::system::error_code& timer_ec) {
      if (timer_ec || generation != self->generation_ || self->connected_) return;
      boost::system::error_code ignored;
      self->Socket().close(ignored);
    });
    co_await asio::async_connect(socket, endpoints, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return absl::UnavailableError(absl::StrCat("redis: connect: ", ec.message()));
    socket.set_option(tcp::no_delay(true), ec);
    // Flush() writes straight into the send buffer and must never wait for it to drain.
    socket.non_blocking(true, ec);
    if (ec) co_return absl::UnavailableError(absl::StrCat("redis: non-blocking: ", ec.message()));

    absl::Status status;
    if (tls == nullptr) {
      status = co_await Handshake(socket_);
    } else {
      status = co_await TlsHandshake(*tls);
      if (status.ok()) status = co_await Handshake(*tls);
    }
    if (!status.ok()) co_return status;
    boost::system::error_code ignored;
    connect_timer_.cancel(ignored);
    co_return absl::OkStatus();
  }

  // Sets the name the certificate must carry (and SNI for a DNS name), then runs the handshake.
  // OpenSSL checks the name while it verifies the chain, so a mismatch reads like any other
  // verification failure: "certificate verify failed: hostname mismatch".
  asio::awaitable<absl::Status> TlsHandshake(TlsStream& tls) {
    SSL* ssl = tls.native_handle();
    boost::system::error_code ec;
    asio::ip::make_address(tls_name_, ec);
    const bool ip_literal = !ec;
    bool named = false;
    if (ip_literal) {
      named = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), tls_name_.c_str()) == 1;
    } else {
      SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
      named = SSL_set_tlsext_host_name(ssl, tls_name_.c_str()) == 1 &&
              SSL_set1_host(ssl, tls_name_.c_str()) == 1;
    }
    if (!named) co_return absl::InvalidArgumentError("redis: TLS: cannot set the server name");

    co_await tls.async_handshake(asio::ssl::stream_base::client,
                                 asio::redirect_error(asio::use_awaitable, ec));
    if (!ec) co_return absl::OkStatus();
    const long verify = SSL_get_verify_result(ssl);
    if (verify != X509_V_OK) {
      co_return absl::UnavailableError(absl::StrCat("redis: TLS: certificate verify failed: ",
                                                    X509_verify_cert_error_string(verify)));
    }
    if (ec == asio::error::operation_aborted) {
      // The connect timeout closed the socket: a plaintext server waits for the rest of what it
      // takes for a command.
      co_return absl::UnavailableError(absl::StrCat("redis: TLS handshake: no answer within ",
                                                    kConnectTimeout.count(),
                                                    " ms (is it a TLS port?)"));
    }
    co_return absl::UnavailableError(absl::StrCat("redis: TLS handshake: ", ec.message()));
  }

  // AUTH and SELECT as configured, then a PING: a connection counts as made once Redis has
  // answered on it. Without the PING a server that takes the connection and then closes it (a TLS
  // port spoken to in plaintext; with TLS 1.3 a server that refuses the client certificate after
  // the handshake) would look connected until the first command.
  template <typename Stream>
  asio::awaitable<absl::Status> Handshake(Stream& stream) {
    boost::system::error_code ec;
    std::string handshake;
    int expected = 0;
    bool auth_pending = false;  // the next reply is AUTH's
    if (!options_.password.empty()) {
      auth_pending = true;
      if (options_.username.empty()) {
        handshake += EncodeCommand({"AUTH", options_.password});
      } else {
        handshake += EncodeCommand({"AUTH", options_.username, options_.password});
      }
      ++expected;
    }
    int select_reply = -1;  // which reply is SELECT's
    if (options_.db != 0) {
      handshake += EncodeCommand({"SELECT", std::to_string(options_.db)});
      select_reply = expected++;
    }
    handshake += EncodeCommand({"PING"});
    ++expected;
    co_await asio::async_write(stream, asio::buffer(handshake),
                               asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      co_return absl::UnavailableError(
          absl::StrCat("redis: write: ", ec.message(), DroppedHint(ec)));
    }
    for (int index = 0; index < expected;) {
      auto next = reader_.Next();
      if (!next.ok()) co_return next.status();
      if (!next->has_value()) {
        size_t n = co_await stream.async_read_some(asio::buffer(buffer_),
                                                   asio::redirect_error(asio::use_awaitable, ec));
        if (ec) {
          co_return absl::UnavailableError(
              absl::StrCat("redis: read: ", ec.message(), DroppedHint(ec)));
        }
        reader_.Feed(std::string_view(buffer_.data(), n));
        continue;
      }
      if ((*next)->is_error()) {
        if (auth_pending) {
          // Never the reply itself: with AUTH renamed Redis answers "unknown command 'AUTH',
          // with args beginning with: '<password>'". Its first word (WRONGPASS, NOAUTH, ERR…)
          // says enough.
          const std::string_view reply = (*next)->str;
          std::string_view code = reply.substr(0, std::min<size_t>(reply.find(' '), 32));
          if (!std::all_of(code.begin(), code.end(),
                           [](char c) { return (c >= 'A' && c <= 'Z') || c == '_'; })) {
            code = "error";
          }
          co_return absl::UnavailableError(
              absl::StrCat("redis: handshake: AUTH refused (", ToAbsl(code), ")"));
        }
        if (index == select_reply) {
          // Typically "ERR DB index is out of range": the URL's /db is not below the server's
          // `databases` (16 unless redis.conf says otherwise), which no configuration check can
          // know. Said plainly, since it never heals by itself.
          co_return absl::FailedPreconditionError(
              absl::StrCat("redis: SELECT ", options_.db, " refused (", (*next)->str,
                           "): the server has no database ", options_.db,
                           " (its `databases` setting, 16 by default, must be above it); use a "
                           "smaller /db in the URL"));
        }
        co_return absl::UnavailableError(absl::StrCat("redis: handshake: ", (*next)->str));
      }
      auth_pending = false;
      ++index;
    }
    co_return absl::OkStatus();
  }

  // Why a server may drop a connection before it answers the handshake, for the log line. A TLS
  // port drops a plaintext client at its first bytes. With TLS 1.3 a server checks the client's
  // certificate after the client has finished its handshake, so a refusal shows as a TLS alert on
  // the first read ("tlsv13 alert certificate required") or, when the reset came first, only as
  // a dropped connection.
  const char* DroppedHint(const boost::system::error_code& ec) const {
    if (ec != asio::error::eof && ec != asio::error::connection_reset &&
        ec != asio::error::broken_pipe && ec != asio::ssl::error::stream_truncated) {
      return "";
    }
    if (!options_.tls.enabled)
      return " (is it a TLS port? then use rediss://, or store.redis.tls with cluster_nodes)";
    return " (closed after the TLS handshake: does the server require a client certificate "
           "(cert_file, key_file), or refuse this one?)";
  }

  // Reads replies until the connection fails; returns why, so that Run() drops it.
  template <typename Stream>
  asio::awaitable<std::string_view> ReadLoop(Stream& stream) {
    for (;;) {
      boost::system::error_code ec;
      size_t n = co_await stream.async_read_some(asio::buffer(buffer_),
                                                 asio::redirect_error(asio::use_awaitable, ec));
      if (stopped_) co_return "stopped";
      if (ec) {
        // A TLS peer that closes without close_notify reads as a truncated stream.
        const bool closed = ec == asio::error::eof || ec == asio::ssl::error::stream_truncated;
        co_return closed ? "closed by peer" : "read error";
      }
      last_read_ = Clock::now();  // Redis is answering (HeadDue)
      reader_.Feed(std::string_view(buffer_.data(), n));
      for (;;) {
        auto next = reader_.Next();
        // A protocol error: the stream cannot be trusted.
        if (!next.ok()) co_return "protocol error";
        if (!next->has_value()) break;  // need more bytes
        if (!Deliver(std::move(**next))) co_return "unexpected reply";
      }
      // Delivering ran every reply's callback (answers written, new commands sent): time this
      // thread was not listening to Redis, so it counts as heard from until now.
      last_read_ = Clock::now();
      // What the callbacks sent (a retry after NOSCRIPT, a refund) leaves now rather than behind
      // the requests already queued on the loop.
      Flush();
      ArmDeadline();  // the timer may have deferred to this read (OnDeadline)
    }
  }

  asio::io_context& io_;
  const ConnectionOptions options_;
  const std::chrono::milliseconds max_wait_;  // options_.max_wait, at least command_timeout
  const std::string tls_name_;                // what the server's certificate must name, with TLS
  tcp::socket socket_;                        // the connection without TLS
  std::shared_ptr<TlsStream> tls_;  // the connection's stream with TLS (over its own socket)
  asio::steady_timer deadline_timer_;
  asio::steady_timer backoff_timer_;
  asio::steady_timer connect_timer_;
  asio::steady_timer probe_timer_;
  ReplyReader reader_;
  std::array<char, 16 * 1024> buffer_{};

  std::deque<Pending> pending_;
  size_t expired_ = 0;    // pending_[0, expired_) timed out
  size_t unwritten_ = 0;  // pending_'s last unwritten_ commands are in out_, not yet written
  // When bytes from Redis were last read on this connection, and when this thread was last found
  // too busy to have listened (HeadDue).
  Clock::time_point last_read_{};
  Clock::time_point listening_since_{};
  std::string out_;  // encoded commands waiting for the next write
  // The last completed write's buffer, for the next one; one larger than kMaxSpareBytes (a bulk
  // load's) is let go.
  std::shared_ptr<std::string> spare_;
  static constexpr size_t kMaxSpareBytes = size_t{64} << 10;
  uint64_t generation_ = 0;
  bool started_ = false;
  bool stopped_ = false;
  bool connected_ = false;
  bool writing_ = false;       // an asynchronous write is in flight: commands wait for it
  bool flush_posted_ = false;  // a Flush() is posted to io_
  size_t unflushed_ = 0;       // commands queued in out_ since the last flush
  bool deadline_armed_ = false;
  Clock::time_point armed_for_{};  // when the armed timer fires
  bool circuit_open_ = false;
  int consecutive_timeouts_ = 0;
  uint64_t circuit_opened_ = 0;
  uint64_t writes_ = 0;
  uint64_t commands_sent_ = 0;
};

Connection::Connection(asio::io_context& io, ConnectionOptions options)
    : impl_(std::make_shared<Impl>(io, std::move(options))) {}

Connection::~Connection() { impl_->Stop(); }

void Connection::Start() { impl_->Start(); }
void Connection::Stop() { impl_->Stop(); }

void Connection::Send(std::vector<std::string> argv, Callback done, LateCallback late) {
  impl_->Send(argv, std::move(done), std::move(late));
}

void Connection::SendShared(std::shared_ptr<const std::vector<std::string>> argv, Callback done,
                            LateCallback late) {
  impl_->Send(*argv, std::move(done), std::move(late));
}

void Connection::SendDespiteBreaker(std::vector<std::string> argv, Callback done,
                                    LateCallback late) {
  impl_->Send(argv, std::move(done), std::move(late), /*despite_breaker=*/true);
}

bool Connection::connected() const { return impl_->connected(); }
bool Connection::circuit_open() const { return impl_->circuit_open(); }
uint64_t Connection::circuit_opened() const { return impl_->circuit_opened(); }
uint64_t Connection::writes() const { return impl_->writes(); }
uint64_t Connection::commands_sent() const { return impl_->commands_sent(); }

}  // namespace sluice::redis
