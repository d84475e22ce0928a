// One multiplexed connection to a Redis server, owned by one io_context thread. Commands are
// pipelined automatically: the commands of one wake-up leave in writes of `flush_every`, and
// commands sent while a write is in flight leave together with the next write. Replies are matched
// to callbacks in FIFO order (Redis answers in order on one connection).
#ifndef SLUICE_STORE_REDIS_CONNECTION_H_
#define SLUICE_STORE_REDIS_CONNECTION_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "sluice/store/redis/command_sender.h"
#include "sluice/store/redis/resp.h"

namespace boost::asio::ssl {
class context;
}  // namespace boost::asio::ssl

namespace sluice::redis {

// TLS for one connection (`rediss://`; docs/redis.md, TLS). The server's certificate must chain to
// the context's CAs and carry `server_name` (else the host): a DNS name is checked against the
// certificate's DNS names and sent as SNI; an IP address against its IP addresses, with no SNI.
// A handshake or verification failure is a failed connect (logged with the reason, retried with
// the backoff), never a fallback to plaintext.
struct TlsOptions {
  bool enabled = false;  // ParseRedisUrl sets it for rediss://
  std::string server_name;
  // REQUIRED when enabled: the context from MakeTlsContext (tls_context.h), shared by every
  // connection of a back end. Without one, every connect fails ("no TLS context").
  std::shared_ptr<boost::asio::ssl::context> context;
};

struct ConnectionOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 6379;
  std::string username;  // empty: "AUTH password" (the default user)
  std::string password;  // empty: no AUTH
  int db = 0;            // non-zero: SELECT db after connecting
  // How long Redis may stay silent while a command waits its turn: the command at the head of the
  // FIFO, written, with nothing heard from Redis for this long while this thread was listening
  // (since the later of its write, the last bytes read, and the end of a spell when the thread
  // was too busy to listen), times out — and with it every command queued at least this long
  // ago. A long queue that Redis keeps answering (a burst) is no stall, and neither is this
  // thread being busy: a command not yet written, or replies waiting to be read, do not count.
  std::chrono::milliseconds command_timeout{20};
  // The longest any command is waited for, from its write, however Redis is answering. At least
  // command_timeout.
  std::chrono::milliseconds max_wait{200};
  std::chrono::milliseconds reconnect_min{50};
  std::chrono::milliseconds reconnect_max{2000};
  size_t max_pending = 10000;  // commands sent but not answered (timed-out ones included)
  // Commands are written as soon as this many are queued; fewer leave once the handlers already
  // queued on the io_context have run (the rest of the current wake-up). At least 1.
  size_t flush_every = 4;
  // Circuit breaker: after `breaker_failures` consecutive timeouts the connection stops waiting on
  // Redis: commands fail at once (Unavailable, kCircuitOpenMessage) while a PING probes every
  // `breaker_probe_interval`; the first probe answered within `command_timeout` closes it again.
  // 0 turns the breaker off.
  int breaker_failures = 3;
  std::chrono::milliseconds breaker_probe_interval{50};
  TlsOptions tls;
};

// The message of the Unavailable status a command gets while the circuit breaker is open.
inline constexpr std::string_view kCircuitOpenMessage = "redis: circuit open";

// Parses `redis://[user:password@]host[:port][/db]` (a password alone: `redis://:password@host`;
// a user alone, `redis://user@host`, for a password from elsewhere). No query or fragment. Errors
// never quote the URL or any part of it (a password may be anywhere in a mistyped one).
// The host may be an IPv6 literal in brackets. `rediss://` is the same with tls.enabled set (the
// caller adds tls.context). Fields the URL does not set keep their ConnectionOptions defaults.
[[nodiscard]] absl::StatusOr<ConnectionOptions> ParseRedisUrl(std::string_view url);

// Not thread-safe: every call, including the destructor, must be made on the thread that runs
// `io`, and callbacks run there too, never inside Send(): a reply's callback runs from the
// connection's read loop as the reply is parsed, any other outcome's is posted to `io`.
//
// Outcomes of a command, delivered to its callback exactly once:
//   - OK with the reply; a Redis error reply (-ERR …) is an OK result of Reply type kError.
//   - DeadlineExceeded: Redis stalled (nothing read for `command_timeout` while the command
//     waited), or `max_wait` passed (see ConnectionOptions). The command keeps its place in the
//     FIFO: its reply will still arrive, and then goes to the command's `late` callback if it has
//     one (the command may well have been executed: the caller can compensate), else is discarded.
//   - Unavailable: not connected when sent, or the connection was lost or stopped before the reply.
//   - ResourceExhausted: `max_pending` commands are already outstanding.
//   - Unavailable with kCircuitOpenMessage: the circuit breaker is open (see ConnectionOptions).
class Connection final : public CommandSender {
 public:
  using Callback = CommandSender::Callback;
  // The reply of a command that had already timed out. Never called if the connection is lost or
  // stopped before that reply arrives (the command may or may not have been executed then).
  using LateCallback = CommandSender::LateCallback;

  Connection(boost::asio::io_context& io, ConnectionOptions options);
  // Stops (see Stop()). The io_context may still hold posted callbacks; they own their state.
  ~Connection() override;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Connects in the background: the TLS handshake (with TLS), then AUTH and SELECT (as
  // configured) and a PING before any command, so that connected() means Redis has answered on
  // this connection. On failure or loss reconnects with exponential backoff from reconnect_min up
  // to reconnect_max.
  void Start() override;

  // Closes the connection for good; outstanding commands complete with Unavailable.
  void Stop() override;

  // `late` (may be null) runs, from the read loop, if `done` got DeadlineExceeded and the reply
  // arrives afterwards on the same connection. `done`'s DeadlineExceeded is posted, so `late` may
  // run before it.
  void Send(std::vector<std::string> argv, Callback done, LateCallback late = nullptr) override;
  void SendShared(std::shared_ptr<const std::vector<std::string>> argv, Callback done,
                  LateCallback late = nullptr) override;
  // As Send, but not refused while the circuit breaker is open: for a command that must reach
  // Redis whenever it can, such as taking back an admission nobody was told about (the breaker
  // is often still open when the late replies of a stall arrive). Still refused when not
  // connected or at `max_pending`.
  void SendDespiteBreaker(std::vector<std::string> argv, Callback done,
                          LateCallback late = nullptr) override;

  // True once connected and the TLS handshake, AUTH, SELECT and PING succeeded.
  [[nodiscard]] bool connected() const override;
  // True while the circuit breaker is open.
  [[nodiscard]] bool circuit_open() const;
  // Times the breaker opened since Start().
  [[nodiscard]] uint64_t circuit_opened() const;
  // Writes started (each carries every command queued since the previous one).
  [[nodiscard]] uint64_t writes() const;
  // Commands put on the wire (queued for a write), handshake excluded.
  [[nodiscard]] uint64_t commands_sent() const;

 private:
  class Impl;
  std::shared_ptr<Impl> impl_;  // shared with the coroutines and handlers in flight
};

}  // namespace sluice::redis

#endif  // SLUICE_STORE_REDIS_CONNECTION_H_
