// Test helpers for the store/redis tests: a throwaway redis-server child process on a free loopback
// port, and a way to drive a Connection from the test thread. Header-only.
#ifndef SLUICE_STORE_REDIS_TEST_REDIS_SERVER_H_
#define SLUICE_STORE_REDIS_TEST_REDIS_SERVER_H_

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sluice/store/redis/connection.h"
#include "sluice/store/redis/resp.h"

extern char** environ;

namespace sluice::redis::testing_util {

namespace asio = boost::asio;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

inline constexpr const char* kRedisServer = "/usr/bin/redis-server";

inline uint16_t FreePort() {
  asio::io_context io;
  tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  return acceptor.local_endpoint().port();
}

inline bool CanConnect(uint16_t port) {
  asio::io_context io;
  tcp::socket socket(io);
  boost::system::error_code ec;
  socket.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port), ec);
  return !ec;
}

// A redis-server child process on 127.0.0.1:port, without persistence.
class RedisServer {
 public:
  ~RedisServer() { Kill(); }

  // Starts the server and waits (with a deadline) until it accepts connections.
  // `extra`: more redis-server arguments.
  bool Start(uint16_t port, const std::vector<std::string>& extra = {}) {
    const std::string port_text = std::to_string(port);
    std::vector<std::string> args = {
        kRedisServer,   "--port", port_text, "--save",    "",
        "--appendonly", "no",     "--bind",  "127.0.0.1", "--enable-debug-command",
        "local"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    const int rc = posix_spawn(&pid_, kRedisServer, &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) {
      pid_ = -1;
      return false;
    }
    const auto deadline = Clock::now() + 5s;
    while (Clock::now() < deadline) {
      if (CanConnect(port)) return true;
      std::this_thread::sleep_for(5ms);  // polling a child process: nothing to wait on
    }
    return false;
  }

  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }

  // SIGSTOP / SIGCONT: a server that keeps its connections but stops answering.
  void Pause() {
    if (pid_ > 0) kill(pid_, SIGSTOP);
  }
  void Resume() {
    if (pid_ > 0) kill(pid_, SIGCONT);
  }

 private:
  pid_t pid_ = -1;
};

// Runs `io` on this thread until `ready()` holds. False if `timeout` passes first.
inline bool PumpUntil(asio::io_context& io, const std::function<bool()>& ready,
                      std::chrono::milliseconds timeout = 5s) {
  const auto deadline = Clock::now() + timeout;
  while (!ready()) {
    if (Clock::now() >= deadline) return false;
    io.restart();
    io.run_one_for(10ms);
  }
  return true;
}

// Sends one command on `conn` and runs `io` until it is answered (or 5 s pass).
inline absl::StatusOr<Reply> SendAndWait(asio::io_context& io, Connection& conn,
                                         std::vector<std::string> argv) {
  std::optional<absl::StatusOr<Reply>> result;
  conn.Send(std::move(argv), [&](absl::StatusOr<Reply> r) { result = std::move(r); });
  if (!PumpUntil(io, [&] { return result.has_value(); })) {
    return absl::DeadlineExceededError("test: no answer within 5 s");
  }
  return *std::move(result);
}

}  // namespace sluice::redis::testing_util

#endif  // SLUICE_STORE_REDIS_TEST_REDIS_SERVER_H_
