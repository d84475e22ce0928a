// The framing rules of HTTP/1.1 (RFC 9112) that Beast's parser leaves to its caller, checked on a
// request's header block before its body is read.
//
// Why this exists: Beast 1.74 reads a request whose Transfer-Encoding does not end in "chunked"
// (`identity`, `gzip`, `chunked, identity`) as having no body, so the body that follows would be
// parsed as a second request on the same connection — request smuggling when a proxy in front
// frames the message differently. Every rule here ends in an error that closes the connection,
// because after a framing error nobody knows where the next request starts.
#ifndef SLUICE_HTTP_REQUEST_FRAMING_H_
#define SLUICE_HTTP_REQUEST_FRAMING_H_

#include <optional>
#include <string>
#include <string_view>

#include <boost/beast/http/message.hpp>

namespace sluice::http {

struct FramingError {
  unsigned status = 400;  // 400, 417 or 505
  std::string detail;     // for the problem+json answer; never quotes header values
};

// Checks a parsed request header block:
//  - HTTP/1.0 or HTTP/1.1 only (505 otherwise);
//  - Transfer-Encoding, over all its field lines, must be exactly "chunked" (case-insensitive),
//    never in HTTP/1.0 and never together with Content-Length, in either order;
//  - at most one Host field line, exactly one in HTTP/1.1, and a plausible value;
//  - the request target is in origin form ("/path?query"), absolute form ("http://host/path"), or
//    "*"; anything else (authority form, a bare word) is refused;
//  - Expect, if present, is "100-continue" (417 otherwise).
// Returns nullopt when the request may be read on.
[[nodiscard]] std::optional<FramingError> CheckFraming(
    const boost::beast::http::request_header<>& header);

// For an absolute-form target ("http://host:8080/v1/check?x=1", RFC 9112 §3.2.2), the same target
// in origin form ("/v1/check?x=1"; "http://host" becomes "/"); nullopt for any other target. The
// authority is not used: sluice serves one host.
[[nodiscard]] std::optional<std::string> OriginFormTarget(std::string_view target);

// True if the request asks for "100 Continue" before sending its body.
[[nodiscard]] bool ExpectsContinue(const boost::beast::http::request_header<>& header);

}  // namespace sluice::http

#endif  // SLUICE_HTTP_REQUEST_FRAMING_H_
