// A Rate Limit Service request of a domain that envoyproxy/ratelimit's configuration files define
// (envoy.ratelimit_config, docs/gateways.md): each descriptor is matched against the domain's tree
// of rules, each matched rule is a counter of its own (a subject of its own, in the domain's
// group), and every counter of the request is decided all-or-nothing in one store step. Pure
// functions, no I/O: rls_server.cc runs the decision.
#ifndef SLUICE_RLS_RATELIMIT_REQUEST_H_
#define SLUICE_RLS_RATELIMIT_REQUEST_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "envoy/service/ratelimit/v3/rls.pb.h"
#include "google/protobuf/struct.pb.h"
#include "sluice/limiter/decision.h"
#include "sluice/limiter/limiter.h"
#include "sluice/limiter/plan.h"
#include "sluice/rls/ratelimit_rules.h"

namespace sluice::rls {

namespace rlsv3 = ::envoy::service::ratelimit::v3;

// One counter a request decides: a matched rule (or a descriptor's own `limit` override) for one
// set of entry values.
struct RlPart {
  std::string subject;           // RlSubject of the counter key
  const RlRule* rule = nullptr;  // the rule decided; null for Envoy's limit override
  // The plan decided: the rule's, or `override_plan` (kept at a stable address: Decisions point
  // into it).
  const Plan* plan = nullptr;
  std::unique_ptr<Plan> override_plan;
  int64_t cost = 1;
  // A rule in quota mode (RlRule::quota) found over its limit by an earlier decision of this call:
  // `plan` is then the rule's spent_plan (counted, never denying), and its status OVER_LIMIT.
  bool spent = false;
};

// What a request asks, as counters.
struct RlQuery {
  std::string domain;
  std::string group;          // RlGroup(domain): every part's counters share it
  std::vector<RlPart> parts;  // distinct subjects
  // Per descriptor, in request order: the index of its part, or kNoPart when nothing limits it
  // (no rule matched, the rule is `unlimited`, or another matched rule `replaces` it).
  static constexpr size_t kNoPart = SIZE_MAX;
  std::vector<size_t> descriptor_part;
  std::vector<bool> unlimited;  // per descriptor: matched an `unlimited` rule
  // kReport when a descriptor carries the report marker (RlRequestOptions::report_key) set to
  // "true" or "1": every part is charged, past its limit if need be, and the call is never denied
  // (docs/semantics.md, Reports).
  DecideMode mode = DecideMode::kAdmit;
  // With RlRequestOptions::dynamic_metadata: what the response's dynamic_metadata says of the
  // request (RlResponse adds what the rules say).
  std::optional<google::protobuf::Struct> dynamic_metadata;
};

struct RlRequestOptions {
  // Answer with dynamic_metadata as envoyproxy/ratelimit does with RESPONSE_DYNAMIC_METADATA
  // (envoy.response_dynamic_metadata): "domain"; "descriptors", one per request descriptor, each
  // with "entries" (a list of "<key>=<value>"), "limit" (an override, as Go's protobuf text:
  // "requests_per_unit:10 unit:MINUTE") and "hitsAddend" (a number) when set; the request's
  // "hitsAddend" when not 0; and "metadata", the `metadata` of the rules of every descriptor
  // answered OK, merged in request order (a key an earlier one set stays, two maps under one
  // key are merged the same way), when there is any.
  bool dynamic_metadata = false;
  // The descriptor entry that marks the call as a report (envoy.ratelimit_report_key): each entry
  // with this key is taken out of its descriptor before the descriptor is matched, and its value
  // ("true" or "1": a report; "false" or "0": not) must be the same wherever it appears. Empty:
  // no marker, every entry is matched.
  std::string_view report_key;
};

// Reads `req` (whose domain `rules` defines) into counters. The cost of a descriptor is its
// hits_addend when set (0 peeks), else the request's (0 means unset: 1). A descriptor that
// repeats another's counter adds its cost to that part. InvalidArgument naming the descriptor for
// a request that breaks a bound (the same as sluice's own mapping's), a bad override, a cost
// above kMaxCost, two descriptors that name one counter under different limits, or a bad or
// inconsistent report marker.
[[nodiscard]] absl::StatusOr<RlQuery> ParseRlRequest(const rlsv3::RateLimitRequest& req,
                                                     const RlRuleSet& rules,
                                                     RlRequestOptions options = {});

// The parts of `q` as the Limiter's DecideGroup takes them (pointing into `q`).
[[nodiscard]] std::vector<GroupPart> GroupParts(const RlQuery& q);

// Quota mode (RlRule::quota), after `q`'s parts were decided as `decisions` (one per part): true
// when the call was denied by rules in quota mode alone while another quota rule of the call still
// had room. The rules that denied are then marked spent (RlPart::spent: decided from now on by
// their spent_plan, counted and never denying), and the caller decides the call again with
// GroupParts(q): admitted if the rules left have room then, in one atomic step like any call.
// Each retry spends at least one more rule, so a call is decided at most once more than it has
// rules in quota mode. False when `decisions` answer the call: admitted, denied by a rule not in
// quota mode (as envoyproxy/ratelimit, whatever the quotas say), denied with every quota rule over
// its limit, or degraded (the store failed). A denied decision changed no counter, so deciding
// again counts the call once.
[[nodiscard]] bool RetryWithoutSpentQuotas(RlQuery& q, const std::vector<Decision>& decisions);

// The answer to `q` decided as `decisions` (one per part, in order; empty when `q` has no part):
// overall OK or OVER_LIMIT; per descriptor OVER_LIMIT when its limit denied, when it is a spent
// quota rule over its limit, or when the store failed under on_store_error deny; else OK (a
// shadow limit that would have denied is OK, and named in Sluice-Shadow-Denied); its limit,
// remaining and time until reset (none for a descriptor nothing limits; an `unlimited` one
// reports the largest remaining, as envoyproxy/ratelimit does). `limit_remaining` is what the
// counter has left for the call: 0 in an OVER_LIMIT status and for a shadow limit that would have
// denied (even when less than the call's cost is left), else the quota less what is used — in a
// denied call, which counted nothing, what the descriptor still has. Then the RateLimit headers
// of every counted limit; on OVER_LIMIT Retry-After and a problem+json raw_body like the HTTP
// answer's; and with q.dynamic_metadata, the response's dynamic_metadata (RlRequestOptions).
[[nodiscard]] rlsv3::RateLimitResponse RlResponse(const RlQuery& q,
                                                  const std::vector<Decision>& decisions);

// The decisions of `q`'s parts as one Decision (every part's limits in part order; allowed,
// degraded, failure and retry_after the group's), for headers and metrics. A spent quota rule's
// limit is no shadow denial there (its status says OVER_LIMIT). Points into `decisions`.
// REQUIRES: decisions.size() == q.parts.size() > 0.
[[nodiscard]] Decision Combined(const RlQuery& q, const std::vector<Decision>& decisions);

// Whether part `part` of `q`, decided as `d`, is over its limit for this call: its limit denied,
// or it is a spent quota rule that had no room. (A shadow rule's would-be denial is not.)
[[nodiscard]] bool PartOverLimit(const RlQuery& q, size_t part, const Decision& d);

}  // namespace sluice::rls

#endif  // SLUICE_RLS_RATELIMIT_REQUEST_H_
