// envoyproxy/ratelimit's descriptor trees (config/ratelimit_file.h) compiled into an immutable rule
// set that matches Envoy request descriptors as envoyproxy/ratelimit does (docs/gateways.md,
// "Migrating from envoyproxy/ratelimit"), and the names of the counters a match decides.
//
// Matching one request descriptor (its entries in order) walks the domain's tree one entry per
// level. At each level the entry (key, value) picks, in this order: the descriptor with that key
// and exactly that value (a wildcard's pattern included, written out); else the first descriptor,
// in file order, with that key and a wildcard value that matches the value (RlWildcard: "/api/*",
// "/api/*/action", "a*b*c"); else the descriptor with that key and no value. The walk stops where
// nothing is picked or the picked descriptor has no children. The rule of the descriptor picked
// for the LAST entry applies, if it has a rate_limit; a rate_limit met earlier on the way does not
// (a request with more entries than the tree is deep matches nothing, and so does one with none).
//
// Thread-safety: an RlRuleSet is immutable once built; share it through shared_ptr<const>.
#ifndef SLUICE_RLS_RATELIMIT_RULES_H_
#define SLUICE_RLS_RATELIMIT_RULES_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "google/protobuf/struct.pb.h"
#include "sluice/config/config.h"
#include "sluice/config/ratelimit_file.h"
#include "sluice/limiter/plan.h"

namespace sluice::rls {

// A wildcard value of the files: each '*' stands for any run of bytes, none included, and every
// other byte for itself, the whole value matched ("/api/*/action" matches "/api/v1/action" and
// "/api//action", not "/api/v1/other"). Matching takes time linear in the value and the pattern
// whatever either holds: the value must start with the text before the first '*' and end with the
// text after the last, and the texts between are then found left to right, each at its first
// place after the one before (Knuth-Morris-Pratt): taking the first place never loses a match,
// since a later '*' can absorb whatever an earlier choice leaves. No backtracking, so a hostile
// value cannot make a pattern of many '*' cost more than one pass.
class RlWildcard {
 public:
  // REQUIRES: `pattern` contains a '*'.
  explicit RlWildcard(std::string_view pattern);

  [[nodiscard]] bool Matches(std::string_view value) const;

 private:
  struct Text {
    std::string bytes;
    std::vector<uint32_t> border;  // KMP: longest proper border of each prefix of `bytes`
  };
  // The first place at or after `from` in `value` where `text` starts, or npos.
  static size_t Find(const Text& text, std::string_view value, size_t from);

  std::string head_;          // before the first '*'
  std::string tail_;          // after the last '*'
  std::vector<Text> middle_;  // between two '*', non-empty, in order
  size_t fixed_ = 0;          // bytes of head, tail and middle: the shortest value that matches
};

// One rate_limit of a tree.
struct RlRule {
  std::string domain;
  // The descriptor's place as envoyproxy/ratelimit names it in its stats:
  // "<domain>.<key>[_<value>].<key>[_<value>]..." with the file's values ("messaging.to_number",
  // "mongo_cps.database_users"). For messages and metrics; never a counter's identity.
  std::string path;
  std::string name;  // rate_limit.name, or ""
  bool unlimited = false;
  bool shadow = false;  // shadow_mode: decided and counted, reported, never denied
  // quota_mode, as envoyproxy/ratelimit means it: the rules of one call in quota mode are
  // alternatives. A call is denied for them only when every one is over its limit; while any has
  // room, the call is admitted (if its other rules allow it), the ones over their limit are still
  // counted (as shadow limits: `spent_plan`) and answered OVER_LIMIT in their own status. Never
  // with `unlimited`. A rule in shadow mode as well never denies: quota mode changes nothing.
  bool quota = false;
  bool detailed_metric = false;  // kept from the file (sluice counts per value regardless)
  std::vector<std::string> replaces;
  config::RlUnit unit = config::RlUnit::kSecond;  // meaningless when unlimited
  uint32_t requests_per_unit = 0;
  // The plan a match is decided by: UTC, no alerts, one limit named RlLimitName(unit) with quota
  // requests_per_unit and the unit's window (WindowForUnit). The quota may be 0, which
  // envoyproxy/ratelimit uses to refuse every request: a store decides it like any quota (used +
  // cost > 0), so only a peek (cost 0) is allowed. No limits at all when `unlimited`: nothing is
  // counted. The plan's name is `path`.
  Plan plan;
  // With `quota`: `plan` with its limit in shadow (same counter), what the rule is decided by once
  // it is known to be over its limit in a call (ratelimit_request.h, RetryWithoutSpentQuotas).
  Plan spent_plan;
  // The descriptor's `metadata` (an empty Struct when it has none), merged into the response's
  // dynamic_metadata when this rule lets a call pass (ratelimit_request.h).
  google::protobuf::Struct metadata;
};

// The window of a unit: second 1s, minute 1m, hour 1h; day, week (from Monday), month and year
// are calendar periods in UTC.
[[nodiscard]] absl::StatusOr<config::WindowSpec> WindowForUnit(config::RlUnit unit);

// The name of the limit that counts a rule or an override of `unit`: "per_second", "per_minute",
// ... Rules and overrides of one unit share the name, so a descriptor whose limit Envoy overrides
// (same unit) counts on the counter of the rule it would match, and renaming a rule keeps usage.
[[nodiscard]] std::string RlLimitName(config::RlUnit unit);

// The plan of a descriptor that carries Envoy's limit override (RateLimitDescriptor.limit): as a
// rule's, with the override's quota and unit. As in envoyproxy/ratelimit the override replaces
// the file's rule entirely (whether or not one matches): not shadowed, replaces nothing, and the
// descriptor is counted under RlCounterKey(domain, entries). Errors as WindowForUnit.
[[nodiscard]] absl::StatusOr<Plan> OverridePlan(uint32_t requests_per_unit, config::RlUnit unit);

// The unit of envoy.type.v3.RateLimitUnit / RateLimitResponse.RateLimit.Unit (SECOND = 1, MINUTE
// = 2, HOUR = 3, DAY = 4, MONTH = 5, YEAR = 6, WEEK = 7); InvalidArgument for UNKNOWN (0) and any
// other value.
[[nodiscard]] absl::StatusOr<config::RlUnit> UnitFromProto(int value);
// The reverse, for RateLimitResponse.RateLimit.unit.
[[nodiscard]] int UnitToProto(config::RlUnit unit);

using RlEntry = std::pair<std::string_view, std::string_view>;  // key, value

class RlRuleSet {
 public:
  // Compiles `files` (from config::LoadRateLimitConfig: valid, bounded). InvalidArgument naming
  // the file and the key path: a domain defined twice, a unit WindowForUnit refuses.
  [[nodiscard]] static absl::StatusOr<std::shared_ptr<const RlRuleSet>> Build(
      const std::vector<config::RateLimitFile>& files);

  // LoadRateLimitConfig(path) and Build: what the server runs at start and on SIGHUP, and
  // check-config. "" (no ratelimit_config) is an empty set. Errors as theirs, naming the file.
  [[nodiscard]] static absl::StatusOr<std::shared_ptr<const RlRuleSet>> Load(std::string_view path);

  [[nodiscard]] bool HasDomain(std::string_view domain) const;
  [[nodiscard]] size_t domains() const { return roots_.size(); }
  [[nodiscard]] size_t rules() const { return rules_.size(); }

  // The rule that applies to one request descriptor of `domain` (see the top of this file), or
  // nullptr. On a match, `*counter_key` (if not null) is RlCounterKey(domain, entries): with the
  // request's values, so a key-only or wildcard rule counts each distinct value on its own.
  // The pointer stays valid for the rule set's lifetime.
  [[nodiscard]] const RlRule* Match(std::string_view domain, absl::Span<const RlEntry> entries,
                                    std::string* counter_key) const;

 private:
  struct Node {
    // Children by key, then value (every value written, wildcards too); wildcards in file
    // order; key-only.
    absl::flat_hash_map<std::string, absl::flat_hash_map<std::string, size_t>> exact;
    absl::flat_hash_map<std::string, std::vector<std::pair<RlWildcard, size_t>>> wildcard;
    absl::flat_hash_map<std::string, size_t> any_value;
    const RlRule* rule = nullptr;
    bool has_children = false;
    // share_threshold on a wildcard: the value counters are keyed by (the file's pattern).
    std::string shared_value;
  };
  class Builder;

  [[nodiscard]] const Node* Pick(const Node& node, std::string_view key,
                                 std::string_view value) const;

  std::vector<Node> nodes_;
  std::vector<std::unique_ptr<RlRule>> rules_;
  absl::flat_hash_map<std::string, size_t> roots_;  // domain -> its node
};

// Applies `replaces` across the rules matched by the descriptors of ONE request (nullptr where a
// descriptor matched nothing): a rule whose name another matched rule lists in its `replaces` is
// set to nullptr (it is not decided, and its counter does not change). Every rule's replaces are
// collected before any is dropped, so two rules that replace each other both drop, as in
// envoyproxy/ratelimit.
void ApplyReplaces(absl::Span<const RlRule*> matched);

// The counter identity of a matched descriptor: the domain and every entry, each part
// percent-encoded ("%2F") except bytes of [A-Za-z0-9._:@+-], joined as
// "<domain>/<key>=<value>/<key>=<value>". Distinct inputs give distinct keys.
[[nodiscard]] std::string RlCounterKey(std::string_view domain, absl::Span<const RlEntry> entries);

// The sluice subject that holds the counters of `counter_key` (a valid subject,
// common/subject.h): "rl:" + counter_key when that is made only of subject characters, contains a
// '=' and fits in 200 bytes; otherwise "rl:" + a readable prefix + ":" + 32 hex digits of its
// SHA-256, a form with no '=' (so no hashed subject equals a readable one). Deterministic across
// processes and restarts.
[[nodiscard]] std::string RlSubject(std::string_view counter_key);

// The group of every counter of `domain` (the source of its Redis hash tag, so one request's
// descriptors are decided in one atomic step): "rl:" + domain when the domain is made of
// [A-Za-z0-9._@/+-] and fits; otherwise "rl:" + a readable prefix + ":" + 32 hex digits of the
// domain's SHA-256 (a form with a ':', which a readable group never has). A valid subject.
[[nodiscard]] std::string RlGroup(std::string_view domain);

}  // namespace sluice::rls

#endif  // SLUICE_RLS_RATELIMIT_RULES_H_
