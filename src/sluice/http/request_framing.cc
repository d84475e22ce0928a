#include "sluice/http/request_framing.h"

#include <algorithm>

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/beast/http/verb.hpp>

namespace sluice::http {
namespace {

namespace bhttp = boost::beast::http;

std::string_view Sv(boost::beast::string_view s) { return {s.data(), s.size()}; }

std::string_view TrimOws(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool IEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

bool IStartsWith(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && IEquals(s.substr(0, prefix.size()), prefix);
}

bool IsHex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// RFC 3986's unreserved and sub-delims characters.
bool IsUnreservedOrSubDelim(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::string_view("-._~!$&'()*+,;=").find(c) != std::string_view::npos;
}

// Whether every character of `s` is unreserved, a sub-delim, one of `extra`, or a '%' with two
// hex digits after it.
bool AllUriChars(std::string_view s, std::string_view extra) {
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '%') {
      if (i + 2 >= s.size() || !IsHex(s[i + 1]) || !IsHex(s[i + 2])) return false;
      i += 2;
    } else if (!IsUnreservedOrSubDelim(c) && extra.find(c) == std::string_view::npos) {
      return false;
    }
  }
  return true;
}

// RFC 9112 §3.2's Host value: uri-host [ ":" port ] (RFC 3986): an IP-literal in brackets (an
// IPv6 address, or "v<hex>.<chars>"), or a reg-name / IPv4 address (unreserved, sub-delims,
// %HH); the port digits. Empty is allowed.
bool IsValidHost(std::string_view host) {
  std::string_view port;
  if (!host.empty() && host.front() == '[') {
    const size_t close = host.find(']');
    if (close == std::string_view::npos) return false;
    const std::string_view literal = host.substr(1, close - 1);
    const std::string_view after = host.substr(close + 1);
    if (!after.empty() && after.front() != ':') return false;
    port = after.empty() ? after : after.substr(1);
    if (literal.empty()) return false;
    if (literal.front() == 'v' || literal.front() == 'V') {
      const size_t dot = literal.find('.');
      if (dot == std::string_view::npos || dot < 2 || dot + 1 == literal.size()) return false;
      for (const char c : literal.substr(1, dot - 1)) {
        if (!IsHex(c)) return false;
      }
      for (const char c : literal.substr(dot + 1)) {
        if (!IsUnreservedOrSubDelim(c) && c != ':') return false;
      }
    } else {
      for (const char c : literal) {
        if (!IsHex(c) && c != ':' && c != '.') return false;
      }
      if (literal.find(':') == std::string_view::npos) return false;
    }
  } else {
    const size_t colon = host.find(':');
    if (colon != std::string_view::npos) {
      port = host.substr(colon + 1);
      host = host.substr(0, colon);
    }
    if (!AllUriChars(host, "")) return false;
  }
  for (const char c : port) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// The characters of a request target's path and query: RFC 9112 §3.2's (pchar, '/', '?': the
// unreserved, sub-delims, ':', '@' and %HH), and the six that browsers leave unencoded in a query
// or path (WHATWG URL: `?filter[name]=x`, `?a={b}|c^d`; RFC 3986 §2 calls them unsafe, not
// dangerous), which a gateway forwards as it got them. Never '"', '<', '>', '\\', a space, a
// control or a byte above 127.
constexpr std::string_view kPathQueryExtra = ":@/?[]{}|^`";

// RFC 9112 §3.2's request-target characters, with kPathQueryExtra's leniency in the path and
// query; in an absolute target's authority, brackets only (an IPv6 host).
bool IsValidTargetText(std::string_view target, bool absolute_form) {
  if (!absolute_form) return AllUriChars(target, kPathQueryExtra);
  const size_t start = target.find("//") + 2;
  const size_t path = std::min(target.find_first_of("/?", start), target.size());
  return AllUriChars(target.substr(0, start), ":/") &&
         AllUriChars(target.substr(start, path - start), ":@[]") &&
         AllUriChars(target.substr(path), kPathQueryExtra);
}

FramingError Bad(std::string detail) { return FramingError{.status = 400, .detail = detail}; }

}  // namespace

std::optional<std::string> OriginFormTarget(std::string_view target) {
  size_t authority;
  if (IStartsWith(target, "http://")) {
    authority = 7;
  } else if (IStartsWith(target, "https://")) {
    authority = 8;
  } else {
    return std::nullopt;
  }
  const size_t path = target.find_first_of("/?#", authority);
  if (path == std::string_view::npos || target[path] == '#') return "/";
  std::string origin;
  if (target[path] == '?') origin.push_back('/');
  origin.append(target.data() + path, target.size() - path);
  return origin;
}

namespace {

// Calls f(member) for each non-empty member of every `name` field line of `header`, a list over
// one or more lines (RFC 9110 §5.3), its whitespace trimmed.
template <typename F>
void ForEachListMember(const bhttp::request_header<>& header, bhttp::field name, F f) {
  for (const auto& field : header) {
    if (field.name() != name) continue;
    std::string_view rest = Sv(field.value());
    while (true) {
      const size_t comma = rest.find(',');
      const std::string_view member = TrimOws(rest.substr(0, comma));
      if (!member.empty()) f(member);
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }
}

// Expect's members: 100-continue (any case), and whether any other member is there.
struct Expectations {
  bool continue_ = false;
  bool other = false;
};

Expectations ExpectationsOf(const bhttp::request_header<>& header) {
  Expectations e;
  ForEachListMember(header, bhttp::field::expect, [&](std::string_view member) {
    (IEquals(member, "100-continue") ? e.continue_ : e.other) = true;
  });
  return e;
}

}  // namespace

bool ExpectsContinue(const bhttp::request_header<>& header) {
  return ExpectationsOf(header).continue_;
}

std::optional<FramingError> CheckFraming(const bhttp::request_header<>& header) {
  const unsigned version = header.version();
  if (version != 10 && version != 11) {
    return FramingError{.status = 505, .detail = "only HTTP/1.0 and HTTP/1.1 are served"};
  }

  int content_lengths = 0;
  int transfer_encodings = 0;
  int hosts = 0;
  std::string_view host;
  for (const auto& field : header) {
    switch (field.name()) {
      case bhttp::field::content_length:
        ++content_lengths;
        break;
      case bhttp::field::transfer_encoding:
        ++transfer_encodings;
        break;
      case bhttp::field::host:
        ++hosts;
        host = Sv(field.value());
        break;
      default:
        break;
    }
  }

  if (transfer_encodings > 0) {
    if (content_lengths > 0) {
      return Bad("a request may not carry both Transfer-Encoding and Content-Length");
    }
    if (version == 10) return Bad("Transfer-Encoding is not allowed in an HTTP/1.0 request");
    // A list over one or more field lines (RFC 9110 §5.3); empty members do not count.
    int chunked = 0;
    bool other_coding = false;
    bool chunked_last = false;
    ForEachListMember(header, bhttp::field::transfer_encoding, [&](std::string_view coding) {
      chunked_last = IEquals(coding, "chunked");
      if (chunked_last) {
        ++chunked;
      } else {
        other_coding = true;
      }
    });
    // Without chunked once and last the body's end is unknown (RFC 9112 §6.3): 400. With it, a
    // coding before it is one sluice does not implement (§6.1): 501.
    if (chunked != 1 || !chunked_last) {
      return Bad("Transfer-Encoding must end in \"chunked\", once");
    }
    if (other_coding) {
      return FramingError{.status = 501, .detail = "no transfer coding but chunked is implemented"};
    }
  }
  if (hosts > 1) return Bad("more than one Host header");
  if (hosts == 0 && version == 11) return Bad("an HTTP/1.1 request must carry a Host header");
  if (!IsValidHost(host)) return Bad("bad Host header");

  // CONNECT (a tunnel) is a method sluice knows and does not implement (RFC 9110 §9.3.6).
  if (header.method() == bhttp::verb::connect) {
    return FramingError{.status = 501, .detail = "CONNECT is not implemented"};
  }
  const std::string_view target = Sv(header.target());
  const bool origin_form = !target.empty() && target.front() == '/';
  const bool absolute_form = IStartsWith(target, "http://") || IStartsWith(target, "https://");
  if (!origin_form && !absolute_form && target != "*") {
    return Bad("bad request target (want /path, http://host/path or *)");
  }
  if (target == "*" && header.method() != bhttp::verb::options) {
    return Bad("the request target * is for OPTIONS only");
  }
  if (absolute_form) {
    const size_t start = target.find("//") + 2;
    const std::string_view authority =
        target.substr(start, target.find_first_of("/?#", start) - start);
    if (authority.empty()) return Bad("an absolute request target needs a host");
    if (authority.find('@') != std::string_view::npos) {
      return Bad("user information in the request target is not accepted");
    }
  }
  // A fragment is the client's own business and never sent (RFC 9110 §4.2.5).
  if (target.find('#') != std::string_view::npos) return Bad("request target with a fragment");
  if (target != "*" && !IsValidTargetText(target, absolute_form)) {
    return Bad("bad request target (a character outside RFC 3986, or % without two hex digits)");
  }

  // Expect is a list too: "100-continue" on two lines is still that one expectation, an empty
  // value none (RFC 9110 §10.1.1).
  if (ExpectationsOf(header).other) {
    return FramingError{.status = 417, .detail = "only Expect: 100-continue is supported"};
  }
  return std::nullopt;
}

}  // namespace sluice::http
