// Decisions and errors as HTTP responses (docs/http.md): the decision JSON, the rate-limit headers
// and problem+json (RFC 9457) bodies. No I/O: the session writes what these build.
#ifndef SLUICE_HTTP_RENDER_H_
#define SLUICE_HTTP_RENDER_H_

#include <cstdint>
#include <string>
#include <string_view>

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include "absl/time/time.h"
#include "sluice/frontend/answer.h"
#include "sluice/limiter/decision.h"
#include "sluice/limiter/limiter.h"

namespace sluice::http {

using Response = boost::beast::http::response<boost::beast::http::string_body>;

// The headers model and the problem type, under the names http used before they moved.
using frontend::ForEachRateLimitHeader;
using frontend::kQuotaExceededType;

// The body of a POST /v1/check answer, members in this order:
// {"allowed":true,"subject":"user-42","plan":"free","degraded":false,"retry_after":0,
//  "violated":[],"limits":[{"name":"per_minute","quota":60,"used":1,"held":0,"remaining":59,
//  "reset_after":42,"window":"1m"}]}
[[nodiscard]] std::string DecisionJson(const Decision& d, std::string_view subject);

// POST /v1/reserve's answer: the decision, plus "reservation" and "expires_at" when one was made.
[[nodiscard]] std::string ReserveJson(const ReserveDecision& r, std::string_view subject);
// A settled (or repeated) reservation's answer: the decision after it, each limit with its
// "overshoot", the "reservation" id, and "settled": {"how", "charged"}.
[[nodiscard]] std::string SettleJson(const SettleDecision& s, std::string_view id,
                                     std::string_view subject);
// "settled", "released" or "expired".
[[nodiscard]] std::string_view ReservationEndName(ReservationEnd end);
// RFC 3339 in UTC with milliseconds: "2026-12-06T18:00:00.000Z".
[[nodiscard]] std::string FormatTimestamp(absl::Time t);

// Sets the fields frontend::ForEachRateLimitHeader gives, in its order: Sluice-Degraded and
// Sluice-Shadow-Denied when they apply, RateLimit-Policy, RateLimit and X-RateLimit-Limit,
// -Remaining and -Reset (none of these when d.limits is empty). Existing fields of the same names
// are replaced.
void SetRateLimitHeaders(const Decision& d, Response& res);

// Sets Retry-After to d.retry_after seconds (at least 1) for a denied decision; does nothing for an
// allowed one.
void SetRetryAfter(const Decision& d, Response& res);

// The Date header's value for `unix_seconds`: RFC 9110 §5.6.7's IMF-fixdate,
// "Sun, 06 Nov 1994 08:49:37 GMT".
std::string HttpDate(int64_t unix_seconds);

// `answer` as a response: its status, Content-Type, body (Content-Length) and then its header
// fields in order. `version` is the request's HTTP version (11 for 1.1); `keep_alive` as for the
// request.
[[nodiscard]] Response Render(frontend::Answer answer, unsigned version, bool keep_alive);

// An application/problem+json response {"type","title","status","detail"} ("about:blank" is a valid
// type). `version` is the request's HTTP version (11 for 1.1); `keep_alive` as for the request.
[[nodiscard]] Response Problem(unsigned status, std::string_view type, std::string_view title,
                               std::string_view detail, unsigned version, bool keep_alive);

// frontend::QuotaExceededAnswer rendered: problem+json of type kQuotaExceededType with a detail
// naming the violated limits and the wait, "violated-policies": [names], the rate-limit headers
// and Retry-After. `status` is normally 429 (server.deny_status may make it 403).
[[nodiscard]] Response QuotaExceeded(const Decision& d, unsigned status, unsigned version,
                                     bool keep_alive);

// An application/json response with `body` as is.
[[nodiscard]] Response JsonResponse(unsigned status, std::string body, unsigned version,
                                    bool keep_alive);

}  // namespace sluice::http

#endif  // SLUICE_HTTP_RENDER_H_
