// Decisions and errors as HTTP responses (docs/http.md): the decision JSON, the rate-limit headers
// and problem+json (RFC 9457) bodies. No I/O: the session writes what these build.
#ifndef SLUICE_HTTP_RENDER_H_
#define SLUICE_HTTP_RENDER_H_

#include <cstdint>
#include <string>
#include <string_view>

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include "absl/functional/function_ref.h"

#include "sluice/limiter/decision.h"

namespace sluice::http {

using Response = boost::beast::http::response<boost::beast::http::string_body>;

// The problem type of a denial (draft-ietf-httpapi-ratelimit-headers).
inline constexpr std::string_view kQuotaExceededType =
    "https://iana.org/assignments/http-problem-types#quota-exceeded";

// The body of a POST /v1/check answer, members in this order:
// {"allowed":true,"subject":"user-42","plan":"free","degraded":false,"retry_after":0,
//  "violated":[],"limits":[{"name":"per_minute","quota":60,"used":1,"remaining":59,
//  "reset_after":42,"window":"1m"}]}
[[nodiscard]] std::string DecisionJson(const Decision& d, std::string_view subject);

// Sets RateLimit-Policy and RateLimit (one list member per limit, in plan order), and
// X-RateLimit-Limit/-Remaining/-Reset for d.Tightest(). A policy's `w` is the window's length in
// seconds: the fixed length, or the current calendar period's actual length (a DST day is 82800 or
// 90000, a DST week 601200 or 608400, a leap year 31622400). Sets none of them when d.limits is
// empty. Also sets `Sluice-Degraded: 1` for a degraded decision, and `Sluice-Shadow-Denied:
// <names>` (comma-separated, plan order) when a shadow limit would have denied the request
// (LimitDecision::would_deny). Existing fields of the same names are replaced.
void SetRateLimitHeaders(const Decision& d, Response& res);

// The fields SetRateLimitHeaders sets, as put(name, value) in this order: Sluice-Degraded,
// Sluice-Shadow-Denied (each only when it applies), RateLimit-Policy, RateLimit,
// X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset. For a front end that carries
// headers in messages of its own (the gRPC service) without building an HTTP response.
void ForEachRateLimitHeader(const Decision& d,
                            absl::FunctionRef<void(std::string_view, std::string_view)> put);

// Sets Retry-After to d.retry_after seconds (at least 1) for a denied decision; does nothing for an
// allowed one.
void SetRetryAfter(const Decision& d, Response& res);

// The Date header's value for `unix_seconds`: RFC 9110 §5.6.7's IMF-fixdate,
// "Sun, 06 Nov 1994 08:49:37 GMT".
std::string HttpDate(int64_t unix_seconds);

// An application/problem+json response {"type","title","status","detail"} ("about:blank" is a valid
// type). `version` is the request's HTTP version (11 for 1.1); `keep_alive` as for the request.
[[nodiscard]] Response Problem(unsigned status, std::string_view type, std::string_view title,
                               std::string_view detail, unsigned version, bool keep_alive);

// The answer to a denied decision: problem+json of type kQuotaExceededType with a detail naming the
// violated limits and the wait, "violated-policies": [names], the rate-limit headers and
// Retry-After. `status` is normally 429 (server.deny_status may make it 403).
[[nodiscard]] Response QuotaExceeded(const Decision& d, unsigned status, unsigned version,
                                     bool keep_alive);

// An application/json response with `body` as is.
[[nodiscard]] Response JsonResponse(unsigned status, std::string body, unsigned version,
                                    bool keep_alive);

}  // namespace sluice::http

#endif  // SLUICE_HTTP_RENDER_H_
