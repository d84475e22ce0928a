// What a front end answers about a decision, before any protocol: the rate-limit headers of a
// decision (docs/http.md), and the problem+json answers (RFC 9457) to a denial and to a request
// that may not be decided. The HTTP planes render an Answer as an HTTP response, the Rate Limit
// Service as response_headers_to_add and a raw_body; both therefore say the same, header for
// header and in the same order. An admission is answered through ForEachRateLimitHeader alone,
// which allocates nothing beyond the header values: every admission passes there.
#ifndef SLUICE_FRONTEND_ANSWER_H_
#define SLUICE_FRONTEND_ANSWER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"
#include "sluice/frontend/resolve.h"
#include "sluice/limiter/decision.h"

namespace sluice::frontend {

// Header names sluice adds to an answer (docs/http.md).
inline constexpr std::string_view kSubjectHeader = "Sluice-Subject";
inline constexpr std::string_view kPlanHeader = "Sluice-Plan";
// Why /v1/authorize turned a client away, when the status alone may not say: "quota" on a denial
// (whose status is server.deny_status, 403 behind nginx) and "disabled" on the 403 of a subject
// disabled in the registry. nginx's auth_request passes only the status and headers on.
inline constexpr std::string_view kDeniedHeader = "Sluice-Denied";
inline constexpr std::string_view kDegradedHeader = "Sluice-Degraded";
inline constexpr std::string_view kShadowDeniedHeader = "Sluice-Shadow-Denied";

// The problem type of a denial (draft-ietf-httpapi-ratelimit-headers).
inline constexpr std::string_view kQuotaExceededType =
    "https://iana.org/assignments/http-problem-types#quota-exceeded";

// Who was decided, for the Sluice-Subject and Sluice-Plan headers.
struct Decided {
  std::string_view subject;
  std::string_view plan;
};

// A structured-field string (RFC 8941 §3.3.3): quoted, with '"' and '\' escaped.
[[nodiscard]] std::string SfString(std::string_view s);

// A limit's window in seconds: the fixed length, or the current calendar period's actual length
// (a DST day is 82800 or 90000 seconds, a leap year 31622400); 0 for a credit limit (it has no
// window that ends).
[[nodiscard]] int64_t WindowSeconds(const LimitDecision& l);

// What a limit reports, whatever the Decision holds (the Limiter already guarantees it; the
// rendering does not rely on it): 0 <= used, 0 <= remaining <= capacity - used (the quota, or a
// gcra limit's burst), so no answer can show a negative or wrapped value. A counter outside
// [0, kMaxUsed] (store.h) shows as exhausted.
struct Shown {
  int64_t used;
  int64_t remaining;
  int64_t reset_after;
};
[[nodiscard]] Shown Show(const LimitDecision& l);

// The rate-limit headers of `d`, as put(name, value) in this order: Sluice-Degraded (for a
// degraded decision), Sluice-Shadow-Denied (comma-separated names in plan order, when a shadow
// limit would have denied), then, unless d.limits is empty, RateLimit-Policy and RateLimit (one
// list member per limit, in plan order; a policy's `w` is WindowSeconds; a credit limit's member
// has neither `w` nor `t`, as it never resets), X-RateLimit-Limit,
// X-RateLimit-Remaining and X-RateLimit-Reset for d.Tightest().
void ForEachRateLimitHeader(const Decision& d,
                            absl::FunctionRef<void(std::string_view, std::string_view)> put);

// One header field of an Answer.
struct Header {
  std::string name;
  std::string value;
};

// An answer with a body: its status, Content-Type and body, and the header fields that follow
// Content-Type (and the framing fields, which each protocol adds its own way), in order.
struct Answer {
  unsigned status = 200;
  std::string_view content_type;  // a constant
  std::string body;
  std::vector<Header> headers;

  void AddHeader(std::string_view name, std::string_view value) {
    headers.push_back({std::string(name), std::string(value)});
  }
};

// An application/problem+json answer {"type","title","status","detail"} ("about:blank" is a valid
// type), without header fields.
[[nodiscard]] Answer ProblemAnswer(unsigned status, std::string_view type, std::string_view title,
                                   std::string_view detail);

// The answer to a denied decision with `status` (normally 429): problem+json of type
// kQuotaExceededType with a detail naming the violated limits and the wait, "violated-policies":
// [names]; then the rate-limit headers and Retry-After (d.retry_after seconds, at least 1).
[[nodiscard]] Answer QuotaExceededAnswer(const Decision& d, unsigned status);

// How a front end words a denial.
struct DenialStyle {
  unsigned status = 429;       // of a denial by quota (server.deny_status for HTTP)
  bool name_who = false;       // Sluice-Subject and Sluice-Plan after the other fields
  bool denied_header = false;  // `Sluice-Denied: quota` after Retry-After
};

// The answer to a decision that denied: a 503 problem+json with the rate-limit headers when the
// store failed and on_store_error is deny (d.degraded), else QuotaExceededAnswer(d, style.status)
// followed by the fields `style` asks for.
[[nodiscard]] Answer DenialAnswer(const Decision& d, Decided who, DenialStyle style);

// How a front end words a refusal.
struct RefusalStyle {
  bool denied_header = false;  // `Sluice-Denied: disabled` for a disabled subject
};

// The answer to a request that may not be decided (resolve.h): problem+json with the refusal's
// status, title and detail; then `WWW-Authenticate: Bearer` for a 401, `Retry-After: 1` when it is
// worth retrying soon, and the Sluice-Denied field if `style` asks for it.
[[nodiscard]] Answer RefusalAnswer(const Refusal& refusal, RefusalStyle style);

}  // namespace sluice::frontend

#endif  // SLUICE_FRONTEND_ANSWER_H_
