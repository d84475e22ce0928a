// Which address a request came from, believing X-Forwarded-For and Forwarded (RFC 7239) only from
// configured proxies (`server.trusted_proxies`).
#ifndef SLUICE_FRONTEND_CLIENT_ADDRESS_H_
#define SLUICE_FRONTEND_CLIENT_ADDRESS_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/ip/address.hpp>

#include "absl/status/statusor.h"

namespace sluice::frontend {

// A set of trusted proxy networks. Immutable once built, so safe to share between threads.
//
// IPv4-mapped IPv6 addresses (::ffff:1.2.3.4, as a dual-stack socket reports an IPv4 peer) are
// treated as the IPv4 address everywhere: in the CIDRs, the peer and X-Forwarded-For.
// The `for=` nodes of Forwarded field lines (RFC 7239; several lines joined with '\n'), in order,
// as an X-Forwarded-For style list: quotes removed; an element without `for=` or that breaks the
// grammar as "unknown" (which stops the walk). Parameter names are case-insensitive; quoted strings
// may hold commas and semicolons. Lines are parsed one by one, so a line a client broke (an
// unterminated quote) cannot swallow the line a proxy appended after it.
[[nodiscard]] std::string ForwardedForNodes(std::string_view forwarded);

// How anonymous clients are grouped into one subject each: by the network of this many leading
// bits of their address (server.anonymous_ipv4_prefix, server.anonymous_ipv6_prefix). An IPv6
// subscriber is handed at least a /64 and may send every request from another address in it.
struct ClientPrefixes {
  int ipv4 = 32;  // 1-32
  int ipv6 = 64;  // 1-128
};

// The network `address` belongs to under `prefixes`, as canonical text (a valid subject after
// "ip:"): a whole address (/32, /128) as the address alone ("203.0.113.7", "2001:db8::7"); a
// shorter prefix as the network address with its host bits cleared and the prefix length
// ("203.0.113.0/24", "2001:db8:1:2::/64"). IPv4-mapped IPv6 counts as IPv4 and a zone is dropped,
// so every spelling of one address gives one text. REQUIRES: prefixes within their bounds.
[[nodiscard]] std::string ClientNetwork(const boost::asio::ip::address& address,
                                        ClientPrefixes prefixes);

class ProxyTrust {
 public:
  // Parses CIDRs such as "10.0.0.0/8" or "::1/128"; a bare address is a /32 or /128. Host bits
  // beyond the prefix are ignored. Errors are InvalidArgument naming the entry:
  // "trusted_proxies[1]: bad CIDR \"10.0.0.0/33\"".
  [[nodiscard]] static absl::StatusOr<ProxyTrust> FromCidrs(const std::vector<std::string>& cidrs);

  // True if `address` lies in one of the trusted networks.
  [[nodiscard]] bool Trusts(const boost::asio::ip::address& address) const;

  // The client's address as canonical text (IPv4 dotted quad; IPv6 compressed, lowercase, without
  // brackets or zone). If `peer` is not trusted it is the client and `x_forwarded_for` is ignored.
  // Otherwise X-Forwarded-For (every field of that name joined with ",") is walked from the right,
  // skipping addresses that are themselves trusted; the first untrusted one is the client. An entry
  // that is not an address ("unknown", "", garbage) stops the walk, and the last trusted hop (or
  // the peer) is the client, since nothing left of it can be believed. Entries may be written
  // "1.2.3.4", "1.2.3.4:port", "2001:db8::1", "[2001:db8::1]" or "[2001:db8::1]:port".
  [[nodiscard]] std::string ClientAddress(const boost::asio::ip::address& peer,
                                          std::string_view x_forwarded_for) const;

  // The same walk over both headers a request may carry: `x_forwarded_for` as above and
  // `forwarded` (every Forwarded field line joined with '\n'), whose elements' `for=` nodes are
  // walked the same way (an element without `for=`, "unknown" or an obfuscated "_name" stops the
  // walk). With only one of them present (non-empty), that one decides. With both, they must name
  // the same client; if they do not, one was written by the client itself and nothing can tell
  // which, so the address of the nearest trusted hop (the peer) is the client.
  [[nodiscard]] std::string ClientAddress(const boost::asio::ip::address& peer,
                                          std::string_view x_forwarded_for,
                                          std::string_view forwarded) const;

  // The client of that walk as an address (IPv4-mapped IPv6 as IPv4, no zone).
  [[nodiscard]] boost::asio::ip::address Client(const boost::asio::ip::address& peer,
                                                std::string_view x_forwarded_for,
                                                std::string_view forwarded) const;

 private:
  // IPv4 networks are stored as IPv4-mapped IPv6 (prefix + 96), so one comparison serves both.
  struct Network {
    std::array<uint8_t, 16> bytes{};  // host bits cleared
    int prefix = 0;                   // 0-128
  };

  // The walk over X-Forwarded-For alone.
  [[nodiscard]] boost::asio::ip::address Client(const boost::asio::ip::address& peer,
                                                std::string_view x_forwarded_for) const;

  std::vector<Network> networks_;
};

}  // namespace sluice::frontend

#endif  // SLUICE_FRONTEND_CLIENT_ADDRESS_H_
