#include "sluice/frontend/client_address.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <utility>
#include <vector>

#include <boost/system/error_code.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "sluice/common/strings.h"

namespace sluice::frontend {
namespace {

namespace ip = boost::asio::ip;

// `address` with IPv4-mapped IPv6 turned into IPv4 and any IPv6 zone dropped (a zone is local to
// this host and would not be a valid subject).
ip::address Normalize(const ip::address& address) {
  if (address.is_v4()) return address;
  ip::address_v6 v6 = address.to_v6();
  if (v6.is_v4_mapped()) return ip::make_address_v4(ip::v4_mapped, v6);
  v6.scope_id(0);
  return v6;
}

// 16 bytes with IPv4 as IPv4-mapped IPv6.
std::array<uint8_t, 16> Bytes16(const ip::address& address) {
  if (address.is_v4()) return ip::make_address_v6(ip::v4_mapped, address.to_v4()).to_bytes();
  return address.to_v6().to_bytes();
}

// A literal address without zone ("fe80::1%eth0" is refused), or nothing.
std::optional<ip::address> ParseAddress(std::string_view text) {
  if (text.empty() || text.find('%') != std::string_view::npos) return std::nullopt;
  boost::system::error_code error;
  const ip::address address = ip::make_address(std::string(text), error);
  if (error) return std::nullopt;
  return address;
}

bool AllDigits(std::string_view text) {
  if (text.empty() || text.size() > 5) return false;
  for (const char c : text) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// One X-Forwarded-For entry: an address, optionally bracketed (IPv6) and with a port.
std::optional<ip::address> ParseForwardedEntry(std::string_view entry) {
  if (!entry.empty() && entry.front() == '[') {
    const size_t close = entry.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    const std::string_view rest = entry.substr(close + 1);
    if (!rest.empty() && !(rest.front() == ':' && AllDigits(rest.substr(1)))) return std::nullopt;
    std::optional<ip::address> address = ParseAddress(entry.substr(1, close - 1));
    if (!address || !address->is_v6()) return std::nullopt;
    return address;
  }
  const size_t colon = entry.find(':');
  if (colon != std::string_view::npos && entry.find(':', colon + 1) == std::string_view::npos) {
    // Exactly one colon: IPv4 with a port.
    if (!AllDigits(entry.substr(colon + 1))) return std::nullopt;
    std::optional<ip::address> address = ParseAddress(entry.substr(0, colon));
    if (!address || !address->is_v4()) return std::nullopt;
    return address;
  }
  return ParseAddress(entry);
}

std::string_view TrimOws(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

}  // namespace

absl::StatusOr<ProxyTrust> ProxyTrust::FromCidrs(const std::vector<std::string>& cidrs) {
  ProxyTrust trust;
  for (size_t i = 0; i < cidrs.size(); ++i) {
    const std::string_view cidr = cidrs[i];
    const auto bad = [&] {
      return absl::InvalidArgumentError(
          absl::StrCat("trusted_proxies[", i, "]: bad CIDR \"", ToAbsl(cidr.substr(0, 64)), "\""));
    };
    const size_t slash = cidr.find('/');
    const std::optional<ip::address> address = ParseAddress(cidr.substr(0, slash));
    if (!address) return bad();
    const bool v4 = Normalize(*address).is_v4();
    int prefix = v4 ? 32 : 128;
    if (slash != std::string_view::npos) {
      const std::string_view digits = cidr.substr(slash + 1);
      if (digits.empty() || digits.size() > 3) return bad();
      prefix = 0;
      for (const char c : digits) {
        if (c < '0' || c > '9') return bad();
        prefix = prefix * 10 + (c - '0');
      }
      // An IPv4-mapped network written in IPv6 ("::ffff:10.0.0.0/104") counts its prefix over the
      // whole 128 bits; one written in IPv4 over 32.
      const bool mapped_v6 = v4 && !address->is_v4();
      if (prefix > (v4 && !mapped_v6 ? 32 : 128)) return bad();
      if (mapped_v6 && prefix < 96) return bad();
      if (mapped_v6) prefix -= 96;
    }
    Network network{.bytes = Bytes16(Normalize(*address)), .prefix = v4 ? prefix + 96 : prefix};
    for (int bit = network.prefix; bit < 128; ++bit) {
      network.bytes[bit / 8] &= static_cast<uint8_t>(~(0x80u >> (bit % 8)));
    }
    trust.networks_.push_back(network);
  }
  return trust;
}

bool ProxyTrust::Trusts(const ip::address& address) const {
  const std::array<uint8_t, 16> bytes = Bytes16(Normalize(address));
  for (const Network& network : networks_) {
    int bit = 0;
    for (; bit + 8 <= network.prefix; bit += 8) {
      if (bytes[bit / 8] != network.bytes[bit / 8]) break;
    }
    if (bit + 8 <= network.prefix) continue;  // a whole byte differed
    const int rest = network.prefix - bit;
    if (rest == 0) return true;
    const uint8_t mask = static_cast<uint8_t>(0xffu << (8 - rest));
    if ((bytes[bit / 8] & mask) == network.bytes[bit / 8]) return true;
  }
  return false;
}

namespace {

bool IsTchar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

// One element of a Forwarded field line, from `i` to the ',' that ends it (or the end of the line):
// its `for=` node, or "unknown" when it has none or breaks the grammar (a pair without "=", space
// around "=", a parameter given twice, an empty or malformed value, an unterminated quoted-string,
// text after a closing quote). Returns where the next element starts, or npos when the rest of the
// line cannot be split into elements any more (an unterminated quote swallows it).
// An element that swallows the rest of its line says nothing that can be believed.
size_t Broken(std::string* node) {
  *node = "unknown";
  return std::string_view::npos;
}

size_t ParseForwardedElement(std::string_view line, size_t i, std::string* node) {
  bool valid = true;
  bool has_for = false;
  std::vector<std::string> names;
  *node = "unknown";
  while (true) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    if (i == line.size() || line[i] == ',') break;
    if (line[i] == ';') {
      ++i;
      continue;
    }
    size_t name_end = i;
    while (name_end < line.size() && IsTchar(line[name_end])) ++name_end;
    if (name_end == i || name_end == line.size() || line[name_end] != '=') {
      valid = false;  // not `token=`: skip to the end of the element, quotes still respected
      name_end = line.find_first_of(",;\"", i);
      if (name_end == std::string_view::npos) return Broken(node);
      if (line[name_end] != '"') {
        i = name_end;
        continue;
      }
      const size_t close = line.find('"', name_end + 1);
      if (close == std::string_view::npos) return Broken(node);
      i = close + 1;
      continue;
    }
    std::string name(line.substr(i, name_end - i));
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    i = name_end + 1;
    std::string value;
    if (i < line.size() && line[i] == '"') {
      ++i;
      bool closed = false;
      while (i < line.size()) {
        if (line[i] == '"') {
          closed = true;
          ++i;
          break;
        }
        if (line[i] == '\\' && i + 1 < line.size()) ++i;
        value += line[i++];
      }
      if (!closed) return Broken(node);
      if (i < line.size() && line[i] != ';' && line[i] != ',' && line[i] != ' ' &&
          line[i] != '\t') {
        valid = false;
      }
    } else {
      while (i < line.size() &&
             (IsTchar(line[i]) || line[i] == ':' || line[i] == '[' || line[i] == ']')) {
        value += line[i++];
      }
      if (i < line.size() && line[i] != ';' && line[i] != ',' && line[i] != ' ' &&
          line[i] != '\t') {
        valid = false;
        const size_t stop = line.find_first_of(",;", i);
        i = stop == std::string_view::npos ? line.size() : stop;
      }
    }
    if (value.empty()) valid = false;
    for (const std::string& seen : names) {
      if (seen == name) valid = false;
    }
    names.push_back(name);
    if (name == "for") {
      has_for = true;
      if (value.find(',') != std::string::npos) valid = false;
      *node = value;
    }
  }
  if (!valid || !has_for) *node = "unknown";
  return i;
}

}  // namespace

std::string ForwardedForNodes(std::string_view forwarded) {
  std::string nodes;
  const auto add = [&nodes](std::string_view node) {
    if (!nodes.empty()) nodes += ',';
    nodes += node;
  };
  while (true) {
    const size_t newline = forwarded.find('\n');
    const std::string_view line = forwarded.substr(0, newline);
    size_t i = 0;
    while (true) {
      while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == ',')) ++i;
      if (i >= line.size()) break;
      std::string node;
      i = ParseForwardedElement(line, i, &node);
      add(node);
      if (i == std::string_view::npos) break;  // the rest of this line is one broken element
    }
    if (newline == std::string_view::npos) break;
    forwarded.remove_prefix(newline + 1);
  }
  return nodes;
}

std::string ProxyTrust::ClientAddress(const ip::address& peer, std::string_view x_forwarded_for,
                                      std::string_view forwarded) const {
  return Client(peer, x_forwarded_for, forwarded).to_string();
}

std::string ProxyTrust::ClientAddress(const ip::address& peer,
                                      std::string_view x_forwarded_for) const {
  return Client(peer, x_forwarded_for).to_string();
}

ip::address ProxyTrust::Client(const ip::address& peer, std::string_view x_forwarded_for,
                               std::string_view forwarded) const {
  const bool has_xff = !TrimOws(x_forwarded_for).empty();
  const bool has_forwarded = !TrimOws(forwarded).empty();
  if (!has_forwarded) return Client(peer, x_forwarded_for);
  const ip::address from_forwarded = Client(peer, ForwardedForNodes(forwarded));
  if (!has_xff) return from_forwarded;
  const ip::address from_xff = Client(peer, x_forwarded_for);
  if (from_xff == from_forwarded) return from_xff;
  return Normalize(peer);
}

ip::address ProxyTrust::Client(const ip::address& peer, std::string_view x_forwarded_for) const {
  ip::address client = Normalize(peer);
  if (!Trusts(client)) return client;
  std::string_view rest = x_forwarded_for;
  while (!TrimOws(rest).empty()) {
    const size_t comma = rest.rfind(',');
    const std::string_view entry =
        TrimOws(comma == std::string_view::npos ? rest : rest.substr(comma + 1));
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(0, comma);
    const std::optional<ip::address> hop = ParseForwardedEntry(entry);
    if (!hop) break;
    client = Normalize(*hop);
    if (!Trusts(client)) break;
  }
  return client;
}

std::string ClientNetwork(const ip::address& address, ClientPrefixes prefixes) {
  const ip::address client = Normalize(address);
  const bool v4 = client.is_v4();
  const int bits = v4 ? 32 : 128;
  const int prefix = std::clamp(v4 ? prefixes.ipv4 : prefixes.ipv6, 0, bits);
  if (prefix == bits) return client.to_string();
  // The host bits cleared, counted over the address's own family.
  std::array<uint8_t, 16> bytes = Bytes16(client);
  for (int bit = 128 - bits + prefix; bit < 128; ++bit) {
    bytes[bit / 8] &= static_cast<uint8_t>(~(0x80u >> (bit % 8)));
  }
  const ip::address network =
      v4 ? ip::address(ip::make_address_v4(ip::v4_mapped, ip::address_v6(bytes)))
         : ip::address(ip::address_v6(bytes));
  return absl::StrCat(network.to_string(), "/", prefix);
}

}  // namespace sluice::frontend
