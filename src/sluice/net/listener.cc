#include "sluice/net/listener.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include <boost/asio/ip/address.hpp>
#include <boost/asio/socket_base.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "sluice/common/strings.h"

namespace sluice::net {
namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

// SO_REUSEPORT is not among Asio's portable options.
using ReusePort = asio::detail::socket_option::boolean<SOL_SOCKET, SO_REUSEPORT>;

// Binds an abstract Unix socket named after `endpoint`: at most one process per network namespace
// holds it, and the kernel releases it when the process dies. Returns the descriptor, or -1 with
// `*taken` set if another process holds it.
int LockAddress(const tcp::endpoint& endpoint, bool* taken) {
  *taken = false;
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const std::string name =
      absl::StrCat("sluice-listen:", endpoint.address().to_string(), ":", endpoint.port());
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const size_t length = std::min(name.size(), sizeof(addr.sun_path) - 1);
  std::memcpy(addr.sun_path + 1, name.data(), length);  // sun_path[0] == 0: abstract namespace
  const auto size = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + length);
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&addr), size) != 0) {
    *taken = errno == EADDRINUSE;
    ::close(fd);
    return -1;
  }
  return fd;
}

// True if something listens on `endpoint`, whether or not it set SO_REUSEPORT: a socket without
// SO_REUSEPORT cannot bind beside a listener (SO_REUSEADDR only lets it past TIME_WAIT leftovers).
bool AddressInUse(const tcp::endpoint& endpoint) {
  const int fd = ::socket(endpoint.protocol().family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  const bool in_use = ::bind(fd, endpoint.data(), endpoint.size()) != 0 && errno == EADDRINUSE;
  ::close(fd);
  return in_use;
}

}  // namespace

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

bool IsResourceExhaustion(const boost::system::error_code& ec) {
  return ec == asio::error::no_descriptors ||  // EMFILE
         ec.value() == ENFILE || ec == asio::error::no_buffer_space ||
         ec == asio::error::no_memory || ec.value() == EPERM;
}

boost::system::error_code OpenSharedListener(tcp::acceptor& acceptor,
                                             const tcp::endpoint& endpoint) {
  boost::system::error_code ec;
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.set_option(ReusePort(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  return ec;
}

absl::StatusOr<int> LockListenAddress(const tcp::endpoint& endpoint) {
  const std::string where =
      endpoint.address().is_v6()
          ? absl::StrCat("[", endpoint.address().to_string(), "]:", endpoint.port())
          : absl::StrCat(endpoint.address().to_string(), ":", endpoint.port());
  bool taken = false;
  const int lock = LockAddress(endpoint, &taken);
  if (taken || AddressInUse(endpoint)) {
    if (lock >= 0) ::close(lock);
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", where, ": address already in use",
        taken ? " by another sluice process (two instances sharing a port would each count "
                "half of every subject's requests)"
              : ""));
  }
  return lock;
}

}  // namespace sluice::net
