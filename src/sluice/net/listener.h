// Listening sockets for the front ends (the HTTP planes and the Rate Limit Service): the address
// text of the configuration, a lock that keeps a second process off an address, and acceptors
// that share an address, one per event loop (SO_REUSEPORT: the kernel spreads connections over
// them). No protocol, no I/O beyond the socket calls named.
#ifndef SLUICE_NET_LISTENER_H_
#define SLUICE_NET_LISTENER_H_

#include <string_view>

#include <boost/asio/ip/tcp.hpp>
#include <boost/system/error_code.hpp>

#include "absl/status/statusor.h"

namespace sluice::net {

// Parses "127.0.0.1:8080" or "[::1]:8080". InvalidArgument: "want host:port", "want
// [v6addr]:port", "bad port \"x\"", "bad address \"x\"".
[[nodiscard]] absl::StatusOr<boost::asio::ip::tcp::endpoint> ParseEndpoint(std::string_view text);

// Makes sure no other process listens on `endpoint` (port not 0), even one that set SO_REUSEPORT
// too, such as a second sluice with the same configuration: returns a descriptor to keep open
// while listening (an abstract Unix socket named after the address, which the kernel releases when
// the process dies; -1 if it could not be made), or Unavailable naming the address. HttpServer and
// the gRPC service both use it.
[[nodiscard]] absl::StatusOr<int> LockListenAddress(const boost::asio::ip::tcp::endpoint& endpoint);

// accept() failures that mean "no resources right now" (EMFILE, ENFILE, ENOBUFS, ENOMEM, EPERM):
// retrying at once cannot succeed, so a listener pauses instead of spinning.
[[nodiscard]] bool IsResourceExhaustion(const boost::system::error_code& ec);

// Opens `acceptor` listening on `endpoint` with SO_REUSEADDR and SO_REUSEPORT, so that one
// acceptor per event loop can share the address (the kernel spreads connections over them).
[[nodiscard]] boost::system::error_code OpenSharedListener(
    boost::asio::ip::tcp::acceptor& acceptor, const boost::asio::ip::tcp::endpoint& endpoint);

}  // namespace sluice::net

#endif  // SLUICE_NET_LISTENER_H_
