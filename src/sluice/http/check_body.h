// The input of POST /v1/check and the Sluice-Cost header of GET /v1/authorize (docs/http.md).
#ifndef SLUICE_HTTP_CHECK_BODY_H_
#define SLUICE_HTTP_CHECK_BODY_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "sluice/limiter/limiter.h"

namespace sluice::http {

// A parsed /v1/check body. Exactly one of: `api_key` non-empty (subject and plan empty), or
// `subject` non-empty with or without `plan` (api_key empty; an empty plan means the subject's
// plan in the registry). The subject's characters are not checked
// here: the Limiter does that.
struct CheckBody {
  std::string subject;
  std::string plan;
  std::string api_key;
  int64_t cost = 1;
  absl::Duration ttl = kDefaultReservationTtl;  // POST /v1/reserve only
};

enum class BodyOf { kCheck, kReserve };

// Parses {"subject":"user-42","plan":"free","cost":1} or {"api_key":"...","cost":1}. Errors are
// InvalidArgument whose message starts with the field at fault, e.g. "body: not valid JSON",
// "body: must be a JSON object", "foo: unknown field", "subject: duplicate field",
// "subject: must be a non-empty string", "cost: must be an integer from 0 to 1000000",
// "cost: number out of range (must be an integer from 0 to 1000000)" (a number no double holds,
// 1e400 or hundreds of digits, in any member: "plan: number out of range"),
// "subject: required with plan",
// "api_key: give either api_key or subject and plan".
// POST /v1/reserve's body (`of` kReserve) is the same plus "ttl": a duration ("60s"), more than 0
// and at most 1h ("ttl: must be a duration ...").
[[nodiscard]] absl::StatusOr<CheckBody> ParseCheckBody(std::string_view body,
                                                       BodyOf of = BodyOf::kCheck);

// The body of POST /v1/reservations/{id}/settle: {"cost": N}, N required, 0..1000000 (errors as
// ParseCheckBody's: "cost: required: the real cost", "cost: must be an integer ...").
[[nodiscard]] absl::StatusOr<int64_t> ParseSettleBody(std::string_view body);

// The body of POST /v1/reservations/{id}/extend: {"ttl": "60s"}, or nothing (60 s).
[[nodiscard]] absl::StatusOr<absl::Duration> ParseExtendBody(std::string_view body);

// Parses a Sluice-Cost header value: ASCII digits only, 0 to 1000000. The error is InvalidArgument
// "Sluice-Cost: must be an integer from 0 to 1000000".
[[nodiscard]] absl::StatusOr<int64_t> ParseCostHeader(std::string_view value);

}  // namespace sluice::http

#endif  // SLUICE_HTTP_CHECK_BODY_H_
