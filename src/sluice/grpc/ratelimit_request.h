// A Rate Limit Service request of a domain that envoyproxy/ratelimit's configuration files define
// (envoy.ratelimit_config, docs/gateways.md): each descriptor is matched against the domain's tree
// of rules, each matched rule is a counter of its own (a subject of its own, in the domain's
// group), and every counter of the request is decided all-or-nothing in one store step. Pure
// functions, no I/O: rls_server.cc runs the decision.
#ifndef SLUICE_GRPC_RATELIMIT_REQUEST_H_
#define SLUICE_GRPC_RATELIMIT_REQUEST_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "envoy/service/ratelimit/v3/rls.pb.h"
#include "sluice/grpc/ratelimit_rules.h"
#include "sluice/limiter/decision.h"
#include "sluice/limiter/limiter.h"
#include "sluice/limiter/plan.h"

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
};

// Reads `req` (whose domain `rules` defines) into counters. The cost of a descriptor is its
// hits_addend when set (0 peeks), else the request's (0 means unset: 1). A descriptor that
// repeats another's counter adds its cost to that part. InvalidArgument naming the descriptor for
// a request that breaks a bound (the same as sluice's own mapping's), a bad override, a cost
// above kMaxCost, or two descriptors that name one counter under different limits.
[[nodiscard]] absl::StatusOr<RlQuery> ParseRlRequest(const rlsv3::RateLimitRequest& req,
                                                     const RlRuleSet& rules);

// The parts of `q` as the Limiter's DecideGroup takes them (pointing into `q`).
[[nodiscard]] std::vector<GroupPart> GroupParts(const RlQuery& q);

// The answer to `q` decided as `decisions` (one per part, in order; empty when `q` has no part):
// overall OK or OVER_LIMIT; per descriptor OVER_LIMIT when its limit denied, or when the store
// failed under on_store_error deny; else OK (a shadow limit that would have denied is OK, and
// named in Sluice-Shadow-Denied); its limit, remaining and time until reset (none for a
// descriptor nothing limits; an `unlimited` one reports the largest remaining, as
// envoyproxy/ratelimit does). `limit_remaining` is what the
// counter has left for the call: 0 in an OVER_LIMIT status and for a shadow limit that would have
// denied (even when less than the call's cost is left), else the quota less what is used — in a
// denied call, which counted nothing, what the descriptor still has. Then the RateLimit headers
// of every counted limit; on OVER_LIMIT Retry-After and a problem+json raw_body like the HTTP
// answer's.
[[nodiscard]] rlsv3::RateLimitResponse RlResponse(const RlQuery& q,
                                                  const std::vector<Decision>& decisions);

// The decisions of `q`'s parts as one Decision (every part's limits in part order; allowed,
// degraded, failure and retry_after the group's), for headers and metrics. Points into
// `decisions`. REQUIRES: !decisions.empty().
[[nodiscard]] Decision Combined(const std::vector<Decision>& decisions);

}  // namespace sluice::rls

#endif  // SLUICE_GRPC_RATELIMIT_REQUEST_H_
