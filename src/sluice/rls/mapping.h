// sluice's own mapping between Envoy's Rate Limit Service v3 messages and a decision
// (docs/gateways.md): descriptor entries name the API key, or the subject and plan, and the cost;
// one request is one decision, reported once per descriptor. Pure functions, no I/O.
#ifndef SLUICE_RLS_MAPPING_H_
#define SLUICE_RLS_MAPPING_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "envoy/service/ratelimit/v3/rls.pb.h"
#include "sluice/config/config.h"
#include "sluice/config/ratelimit_file.h"
#include "sluice/frontend/answer.h"
#include "sluice/frontend/resolve.h"
#include "sluice/limiter/decision.h"

namespace sluice::rls {

namespace rlsv3 = ::envoy::service::ratelimit::v3;

// Bounds on a request, beyond the server's maximum message size.
inline constexpr size_t kMaxDescriptors = 64;
inline constexpr size_t kMaxEntriesPerDescriptor = 16;
inline constexpr size_t kMaxEntryKeyLength = config::kMaxRlEntryKeyLength;  // 128
inline constexpr size_t kMaxEntryValueLength = 1024;

// The bounds above, on every descriptor of `req` (at least one descriptor; a descriptor may have
// no entry): InvalidArgument naming the descriptor and entry.
[[nodiscard]] absl::Status CheckBounds(const rlsv3::RateLimitRequest& req);

// What a RateLimitRequest asks: an API key, or a subject and (optionally) a plan; a cost; and
// whether the call is a report (a cost already spent: charged, never denied).
struct Query {
  std::string api_key;
  std::string subject;
  std::string plan;
  int64_t cost = 1;
  DecideMode mode = DecideMode::kAdmit;
  size_t descriptors = 0;  // how many statuses the answer carries
};

// The mode a report marker's value asks for: "true" or "1" a report, "false" or "0" an ordinary
// call; InvalidArgument "must be true, false, 1 or 0" for anything else.
[[nodiscard]] absl::StatusOr<DecideMode> ParseReportMarker(std::string_view value);

// Reads `req` by `keys`. Entries with other keys are ignored; a key may appear in several
// descriptors only with one value. The cost is the `cost` entry if there is one (0 to kMaxCost;
// 0 peeks), else a descriptor's hits_addend (every descriptor that sets one must agree), else the
// request's hits_addend. The request's hits_addend of 0 is "not set" and counts as 1, as it does
// for Envoy; a descriptor's hits_addend set to 0 peeks. The `report` entry "true" or "1" makes
// the call a report (DecideMode::kReport), "false" or "0" an ordinary one. InvalidArgument,
// naming the descriptor and entry, for a request that breaks a bound, names neither an API key
// nor a subject, names an API key together with a subject or plan, or carries a bad cost or
// report value.
[[nodiscard]] absl::StatusOr<Query> ParseRequest(const rlsv3::RateLimitRequest& req,
                                                 const config::DescriptorKeys& keys);

// The limit Envoy is told about: the quota per unit, the unit being the window's when the window
// is one second, minute, hour, day, week, month or year, else the largest of those that fits in
// the window (a 10-minute window reports MINUTE, a 240-hour one WEEK; the quota is still the
// window's).
[[nodiscard]] rlsv3::RateLimitResponse::RateLimit CurrentLimit(const LimitDecision& limit);

// Who was decided, for the Sluice-Subject and Sluice-Plan headers.
using frontend::Decided;

// The answer to a decision: OK or OVER_LIMIT overall and in each of `descriptors` statuses (the
// violated limit, else the tightest: its limit, remaining and time until reset; the remaining is
// 0 in an OVER_LIMIT status, as there is no room for the call, whatever the counter has left
// below its cost — a denial counts nothing), the IETF
// RateLimit headers, Retry-After when denied, Sluice-Subject/-Plan (and Sluice-Degraded when the
// store failed) as response_headers_to_add, Sluice-Subject/-Plan as request_headers_to_add when
// allowed (for the upstream), and on OVER_LIMIT a problem+json raw_body like the
// HTTP answer's (429 quota exceeded, or 503 when the store failed under on_store_error deny).
// Fills `res` (empty; the caller may place it in an arena: the service builds one per call).
void DecisionResponse(const Decision& d, size_t descriptors, Decided who,
                      rlsv3::RateLimitResponse* res);

// Appends to `out` the serialized RateLimitResponse that DecisionResponse builds for an admission
// (d.allowed), byte for byte, without building the message: every admission passes here.
void AppendAdmissionWire(const Decision& d, size_t descriptors, Decided who, std::string* out);

// Adds the fields of `from` a gateway should pass on to `to`'s response_headers_to_add: its
// Content-Type, then its header fields in order (framing fields stay Envoy's).
void CopyHeaders(const frontend::Answer& from, rlsv3::RateLimitResponse* to);

// The answer to a request that may not be decided (unknown or expired key, disabled subject,
// registry loading): OVER_LIMIT — the Rate Limit Service has no code for "unauthorized", and an
// error status would let Envoy's default (failure_mode_deny: false) admit the request — with the
// refusal as a problem+json raw_body carrying its HTTP status, and Retry-After: 1 when it is
// worth retrying soon.
[[nodiscard]] rlsv3::RateLimitResponse RefusalResponse(const frontend::Refusal& refusal,
                                                       size_t descriptors);

}  // namespace sluice::rls

#endif  // SLUICE_RLS_MAPPING_H_
