// Loopback receivers for the sink tests: a real TCP peer on 127.0.0.1 that plays an HTTP server
// or an SMTP server from a script and records what the sink sent. Test-only; header-only.
//
// Each receiver accepts connections on its own thread and serves them one at a time. Every read
// has a deadline, so a test cannot hang on a sink that never sends; destruction stops the thread
// even while it is holding a connection open on purpose (HttpResponse::never_answer).
#ifndef SLUICE_ALERTS_TEST_RECEIVER_H_
#define SLUICE_ALERTS_TEST_RECEIVER_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"

namespace sluice::alerts::loopback {

using SteadyTime = std::chrono::steady_clock::time_point;

// How long a receiver waits for a sink's bytes before giving up on the connection.
inline constexpr std::chrono::seconds kIoDeadline{10};

// A port on 127.0.0.1 where nothing listens: bound, then closed, so connecting is refused.
inline int UnusedPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (fd >= 0) ::close(fd);
    return 0;
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

// One accepted connection, with deadline-bounded line and block reads.
class Connection {
 public:
  Connection(int fd, const std::atomic<bool>* stopping) : fd_(fd), stopping_(stopping) {}
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection() { ::close(fd_); }

  // Reads until `buffer_` holds `delim`; returns everything up to and including it. nullopt on
  // close, error, deadline or shutdown.
  std::optional<std::string> ReadUntil(std::string_view delim) {
    const SteadyTime deadline = std::chrono::steady_clock::now() + kIoDeadline;
    for (;;) {
      if (const size_t pos = buffer_.find(delim); pos != std::string::npos) {
        std::string out = buffer_.substr(0, pos + delim.size());
        buffer_.erase(0, pos + delim.size());
        return out;
      }
      if (!Fill(deadline)) return std::nullopt;
    }
  }

  // Reads exactly `n` bytes.
  std::optional<std::string> ReadExactly(size_t n) {
    const SteadyTime deadline = std::chrono::steady_clock::now() + kIoDeadline;
    while (buffer_.size() < n) {
      if (!Fill(deadline)) return std::nullopt;
    }
    std::string out = buffer_.substr(0, n);
    buffer_.erase(0, n);
    return out;
  }

  // Waits until the peer closes the connection (or the receiver stops), discarding its bytes.
  void WaitForClose() {
    while (Fill(std::chrono::steady_clock::now() + kIoDeadline)) buffer_.clear();
  }

  void Write(std::string_view data) {
    while (!data.empty()) {
      const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return;
      data.remove_prefix(static_cast<size_t>(n));
    }
  }

 private:
  // Appends whatever arrives before `deadline`; false on close, error, deadline or shutdown.
  bool Fill(SteadyTime deadline) {
    while (!stopping_->load()) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      pollfd p{.fd = fd_, .events = POLLIN, .revents = 0};
      const int ready = ::poll(&p, 1, /*timeout_ms=*/20);  // short, to notice `stopping_`
      if (ready < 0 && errno != EINTR) return false;
      if (ready <= 0) continue;
      char chunk[4096];
      const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
      if (n <= 0) return false;
      buffer_.append(chunk, static_cast<size_t>(n));
      return true;
    }
    return false;
  }

  int fd_;
  const std::atomic<bool>* stopping_;
  std::string buffer_;
};

// Listens on 127.0.0.1:<ephemeral> and calls `serve` for each connection, one at a time.
class Listener {
 public:
  using Serve = std::function<void(Connection&)>;

  explicit Listener(Serve serve) : serve_(std::move(serve)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (fd_ >= 0 && ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
        ::listen(fd_, 16) == 0 &&
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      port_ = ntohs(addr.sin_port);
    }
    thread_ = std::thread([this] { AcceptLoop(); });
  }
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  ~Listener() {
    stopping_ = true;
    ::shutdown(fd_, SHUT_RDWR);  // wakes the blocking accept()
    thread_.join();
    ::close(fd_);
  }

  // 0 if the socket could not be set up (the test then fails on connecting).
  [[nodiscard]] int port() const { return port_; }

 private:
  void AcceptLoop() {
    while (!stopping_.load()) {
      const int client = ::accept(fd_, nullptr, nullptr);
      if (client < 0) {
        if (errno == EINTR) continue;
        return;  // shut down (or broken): nothing more to serve
      }
      Connection connection(client, &stopping_);
      serve_(connection);
    }
  }

  Serve serve_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

// Waits on `cv` until `ready()` or `timeout`; returns ready(). REQUIRES: `lock` holds the mutex.
template <typename Pred>
bool WaitFor(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
             absl::Duration timeout, Pred ready) {
  return cv.wait_for(lock, absl::ToChronoMilliseconds(timeout), ready);
}

// ---------------------------------------------------------------------------------------------
// HTTP

struct HttpRequest {
  std::string method;
  std::string target;
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased, in order
  std::string body;

  // The first header named `name` (lower case), or "" if absent.
  [[nodiscard]] std::string Header(std::string_view name) const {
    for (const auto& [n, v] : headers) {
      if (n == name) return v;
    }
    return "";
  }
  [[nodiscard]] bool HasHeader(std::string_view name) const {
    for (const auto& [n, v] : headers) {
      if (n == name) return true;
    }
    return false;
  }
};

struct HttpResponse {
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  // Read the request, then never answer: hold the connection until the client gives up.
  bool never_answer = false;
};

// Answers every request with the current response (set_response) and records it.
class HttpReceiver {
 public:
  explicit HttpReceiver(HttpResponse response = {})
      : response_(std::move(response)), listener_([this](Connection& c) { Serve(c); }) {}

  void set_response(HttpResponse response) {
    std::lock_guard<std::mutex> lock(mu_);
    response_ = std::move(response);
  }

  [[nodiscard]] std::string Url(std::string_view path = "/hooks") const {
    return absl::StrCat("http://127.0.0.1:", listener_.port(), std::string(path));
  }

  // The first `n` requests, once they have all arrived; fewer if `timeout` passes first.
  std::vector<HttpRequest> WaitForRequests(size_t n, absl::Duration timeout = absl::Seconds(5)) {
    std::unique_lock<std::mutex> lock(mu_);
    WaitFor(cv_, lock, timeout, [&] { return requests_.size() >= n; });
    return {requests_.begin(), requests_.begin() + std::min(n, requests_.size())};
  }

 private:
  void Serve(Connection& c) {
    const std::optional<std::string> head = c.ReadUntil("\r\n\r\n");
    if (!head.has_value()) return;
    HttpRequest request;
    std::vector<std::string> lines = absl::StrSplit(*head, "\r\n", absl::SkipEmpty());
    if (lines.empty()) return;
    std::vector<std::string> start = absl::StrSplit(lines[0], ' ');
    if (start.size() >= 2) {
      request.method = start[0];
      request.target = start[1];
    }
    size_t content_length = 0;
    for (size_t i = 1; i < lines.size(); ++i) {
      const size_t colon = lines[i].find(':');
      if (colon == std::string::npos) continue;
      std::string name = absl::AsciiStrToLower(lines[i].substr(0, colon));
      std::string value(absl::StripAsciiWhitespace(lines[i].substr(colon + 1)));
      if (name == "content-length") (void)absl::SimpleAtoi(value, &content_length);
      request.headers.emplace_back(std::move(name), std::move(value));
    }
    if (std::optional<std::string> body = c.ReadExactly(content_length); body.has_value()) {
      request.body = *std::move(body);
    }
    HttpResponse response;
    {
      std::lock_guard<std::mutex> lock(mu_);
      requests_.push_back(std::move(request));
      response = response_;
    }
    cv_.notify_all();
    if (response.never_answer) {
      c.WaitForClose();
      return;
    }
    std::string out = absl::StrCat("HTTP/1.1 ", response.status, " Canned\r\n");
    for (const auto& [name, value] : response.headers)
      absl::StrAppend(&out, name, ": ", value, "\r\n");
    absl::StrAppend(&out, "Content-Length: ", response.body.size(), "\r\nConnection: close\r\n\r\n",
                    response.body);
    c.Write(out);
  }

  std::mutex mu_;
  std::condition_variable cv_;
  HttpResponse response_;
  std::vector<HttpRequest> requests_;
  Listener listener_;  // last: its thread starts after, and stops before, the members above
};

// ---------------------------------------------------------------------------------------------
// SMTP

// Replies the SMTP server gives; each is a full reply line without CRLF.
struct SmtpScript {
  std::string greeting = "220 receiver.test ESMTP";
  std::string ehlo = "250 receiver.test";
  std::string mail = "250 2.1.0 Ok";
  std::string rcpt = "250 2.1.5 Ok";
  std::string data = "354 End data with <CR><LF>.<CR><LF>";
  std::string end_of_data = "250 2.0.0 Ok: queued";
};

struct SmtpSession {
  std::vector<std::string> commands;  // every command line as received, without CRLF
  std::string mail_from;              // the argument of MAIL FROM:, e.g. "<a@example.com>"
  std::vector<std::string> rcpt_to;   // the arguments of RCPT TO:
  std::string data;  // the DATA section as sent (still dot-stuffed), without the final ".\r\n"
};

// Plays `script` to every connection and records one session per connection.
class SmtpReceiver {
 public:
  explicit SmtpReceiver(SmtpScript script = {})
      : script_(std::move(script)), listener_([this](Connection& c) { Serve(c); }) {}

  [[nodiscard]] std::string Url() const {
    return absl::StrCat("smtp://127.0.0.1:", listener_.port());
  }

  // The first `n` sessions, once they have all ended; fewer if `timeout` passes first.
  std::vector<SmtpSession> WaitForSessions(size_t n, absl::Duration timeout = absl::Seconds(5)) {
    std::unique_lock<std::mutex> lock(mu_);
    WaitFor(cv_, lock, timeout, [&] { return sessions_.size() >= n; });
    return {sessions_.begin(), sessions_.begin() + std::min(n, sessions_.size())};
  }

 private:
  static bool StartsWithCommand(const std::string& line, const std::string& command) {
    return absl::StartsWithIgnoreCase(line, command);
  }

  void Serve(Connection& c) {
    SmtpSession session;
    c.Write(script_.greeting + "\r\n");
    for (;;) {
      std::optional<std::string> line = c.ReadUntil("\r\n");
      if (!line.has_value()) break;
      line->resize(line->size() - 2);
      session.commands.push_back(*line);
      if (StartsWithCommand(*line, "EHLO") || StartsWithCommand(*line, "HELO")) {
        c.Write(script_.ehlo + "\r\n");
      } else if (StartsWithCommand(*line, "MAIL FROM:")) {
        session.mail_from = line->substr(10);
        c.Write(script_.mail + "\r\n");
      } else if (StartsWithCommand(*line, "RCPT TO:")) {
        session.rcpt_to.push_back(line->substr(8));
        c.Write(script_.rcpt + "\r\n");
      } else if (StartsWithCommand(*line, "DATA")) {
        c.Write(script_.data + "\r\n");
        if (script_.data.rfind("354", 0) != 0) continue;
        // The section ends at CRLF "." CRLF; the first line may itself be the terminator.
        std::optional<std::string> data = c.ReadUntil("\r\n.\r\n");
        if (!data.has_value()) break;
        session.data = data->substr(0, data->size() - 3);
        c.Write(script_.end_of_data + "\r\n");
      } else if (StartsWithCommand(*line, "QUIT")) {
        Record(std::move(session));
        c.Write("221 2.0.0 Bye\r\n");
        return;
      } else {
        c.Write("250 Ok\r\n");  // RSET, NOOP
      }
    }
    Record(std::move(session));
  }

  void Record(SmtpSession session) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      sessions_.push_back(std::move(session));
    }
    cv_.notify_all();
  }

  const SmtpScript script_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<SmtpSession> sessions_;
  Listener listener_;  // last: its thread starts after, and stops before, the members above
};

}  // namespace sluice::alerts::loopback

#endif  // SLUICE_ALERTS_TEST_RECEIVER_H_
