// The admin API's JSON bodies for subjects and keys: parsing with validation, and rendering.
//
// Every parse error is InvalidArgument with a message that starts with the field's path:
//   `plan: unknown plan "gold"`, `overrides.daily.quota: must be an integer from 1 to
//   1000000000000000`, `body: malformed JSON at byte 17`, `frobnicate: unknown field`.
// A number beyond a double's range (1e400, an integer of hundreds of digits) stops the parse: it is
// OutOfRange instead, naming the member that holds it (`overrides.daily.quota: number out of
// range`, `metadata.tiers.gold: number out of range`; a member of an array is named by the array).
// Messages never quote a secret, an email address or a URL. nlohmann::json's exceptions never
// leave this module.
#ifndef SLUICE_REGISTRY_VALIDATE_H_
#define SLUICE_REGISTRY_VALIDATE_H_

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "sluice/limiter/plan.h"
#include "sluice/registry/model.h"

namespace sluice::registry {

// The body of PUT /v1/subjects/{id}:
//   {"plan": "pro",                          required; a plan of `plans`
//    "email": "a@example.com",               optional (null or "" : none)
//    "webhook": "https://...",               optional, http or https
//    "webhook_secret": "whsec_...",          optional, only with a webhook
//    "metadata": {...},                      optional object, <= kMaxMetadataBytes compact, depth
//    <= 8 "disabled": false,                      optional "overrides": {"daily": {"quota": 5000,
//    "until": "2030-01-01T00:00:00Z"}}}
//                                            optional; limits of the plan; until in the future
// `id` (from the path) must be a valid subject ("id: ..."). created_at and updated_at are left for
// the caller to set.
[[nodiscard]] absl::StatusOr<Subject> ParseSubjectBody(std::string_view id, std::string_view body,
                                                       const PlanSet& plans, absl::Time now);

// The body of POST /v1/subjects/{id}/keys.
struct KeyRequest {
  std::string name;                       // "" if none
  std::optional<absl::Time> expires_at;   // none: never
  std::optional<Digest> imported_digest;  // set: import this digest instead of generating a key
};
// {"name": "ci", "expires_at": "2030-01-01T00:00:00Z", "key_sha256": "<64 hex>"}, every field
// optional; an empty body is {}. expires_at must be in the future at `now`.
[[nodiscard]] absl::StatusOr<KeyRequest> ParseKeyBody(std::string_view body, absl::Time now);

// The body of POST /v1/subjects/{id}/credits.
struct CreditRequest {
  int64_t add = 0;     // 1..kMaxCredits
  std::string reason;  // "" if none; at most kMaxCreditReasonBytes, printable
};
// {"add": 1000, "reason": "invoice 2026-11"}; "add" required, "reason" optional.
[[nodiscard]] absl::StatusOr<CreditRequest> ParseCreditBody(std::string_view body);

// A ledger entry as the admin API shows it: seq, at (RFC 3339 UTC), amount, reason (null if
// none), actor, balance.
[[nodiscard]] nlohmann::json CreditGrantJson(const CreditGrant& grant);

// A subject as the admin API shows it: never the webhook secret, only "webhook_secret_set".
// Absent email and webhook are null; times are RFC 3339 UTC.
[[nodiscard]] nlohmann::json SubjectJson(const Subject& subject);
// A key as the admin API shows it: id, subject, prefix (null when imported), name (null if none),
// expires_at (null: never), created_at, imported. Never the digest.
[[nodiscard]] nlohmann::json KeyJson(const Key& key);

// An RFC 3339 date-time as its grammar (section 5.6) writes it, years 0000-9999:
// "2030-01-01T00:00:00Z", "2030-01-01T01:00:00.5+01:00" ("t" and "z" too). Seconds and the offset
// are required, and the offset has its colon ("+0100" is ISO 8601, not RFC 3339); a day the
// month lacks is refused. Every instant a user sends (an override's until, a key's expires_at) is
// read here. InvalidArgument otherwise.
[[nodiscard]] absl::StatusOr<absl::Time> ParseRfc3339(std::string_view text);
// UTC with milliseconds: "2030-01-01T00:00:00.000Z".
[[nodiscard]] std::string FormatRfc3339(absl::Time t);

}  // namespace sluice::registry

#endif  // SLUICE_REGISTRY_VALIDATE_H_
