#include "sluice/rls/ratelimit_request.h"

#include <algorithm>
#include <limits>
#include <string_view>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "sluice/common/strings.h"
#include "sluice/frontend/answer.h"
#include "sluice/rls/mapping.h"

namespace sluice::rls {
namespace {

using Entries = std::vector<RlEntry>;

absl::Status Invalid(size_t descriptor, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("descriptors[", descriptor, "]: ", ToAbsl(what)));
}

// Two plans that count one counter the same way (so two descriptors naming it add up).
bool SameLimit(const Plan& a, const Plan& b) {
  if (a.limits.size() != b.limits.size()) return false;
  for (size_t i = 0; i < a.limits.size(); ++i) {
    if (a.limits[i].tag != b.limits[i].tag || a.limits[i].quota != b.limits[i].quota ||
        a.limits[i].shadow != b.limits[i].shadow) {
      return false;
    }
  }
  return true;
}

// A descriptor's status: OVER_LIMIT when `over`; its limit, what is left (0 when over, or when a
// shadow limit would have denied: no room for this call either way) and the time until reset.
void SetStatus(const LimitDecision& limit, bool over,
               rlsv3::RateLimitResponse::DescriptorStatus* status) {
  status->set_code(over ? rlsv3::RateLimitResponse::OVER_LIMIT : rlsv3::RateLimitResponse::OK);
  *status->mutable_current_limit() = CurrentLimit(limit);
  const int64_t remaining = over || limit.would_deny ? 0 : limit.remaining;
  status->set_limit_remaining(static_cast<uint32_t>(
      std::clamp<int64_t>(remaining, 0, std::numeric_limits<uint32_t>::max())));
  status->mutable_duration_until_reset()->set_seconds(limit.reset_after);
}

// Go's protobuf text of an override (RateLimitOverride), as envoyproxy/ratelimit writes it into
// the dynamic metadata: fields at their default are left out.
std::string OverrideText(
    const ::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor::RateLimitOverride&
        limit) {
  std::string out;
  if (limit.requests_per_unit() != 0) {
    absl::StrAppend(&out, "requests_per_unit:", limit.requests_per_unit());
  }
  if (limit.unit() != 0) {
    if (!out.empty()) out.push_back(' ');
    const std::string& name = ::envoy::type::v3::RateLimitUnit_Name(limit.unit());
    absl::StrAppend(&out,
                    "unit:", name.empty() ? absl::StrCat(static_cast<int>(limit.unit())) : name);
  }
  return out;
}

// What the dynamic metadata says of `req` (RlRequestOptions::dynamic_metadata).
google::protobuf::Struct RequestMetadata(const rlsv3::RateLimitRequest& req) {
  google::protobuf::Struct out;
  auto& fields = *out.mutable_fields();
  fields["domain"].set_string_value(req.domain());
  google::protobuf::ListValue* descriptors = fields["descriptors"].mutable_list_value();
  for (const auto& descriptor : req.descriptors()) {
    auto& d = *descriptors->add_values()->mutable_struct_value()->mutable_fields();
    google::protobuf::ListValue* entries = d["entries"].mutable_list_value();
    for (const auto& entry : descriptor.entries()) {
      entries->add_values()->set_string_value(absl::StrCat(entry.key(), "=", entry.value()));
    }
    if (descriptor.has_limit()) d["limit"].set_string_value(OverrideText(descriptor.limit()));
    if (descriptor.has_hits_addend()) {
      d["hitsAddend"].set_number_value(static_cast<double>(descriptor.hits_addend().value()));
    }
  }
  if (req.hits_addend() != 0) fields["hitsAddend"].set_number_value(req.hits_addend());
  return out;
}

// Adds `from`'s fields to `to`: a key `to` has stays (two maps under one key are merged the same
// way), the others are copied.
void MergeMetadata(const google::protobuf::Struct& from, google::protobuf::Struct* to) {
  auto& fields = *to->mutable_fields();
  for (const auto& [key, value] : from.fields()) {
    const auto it = fields.find(key);
    if (it == fields.end()) {
      fields[key] = value;
    } else if (it->second.has_struct_value() && value.has_struct_value()) {
      MergeMetadata(value.struct_value(), it->second.mutable_struct_value());
    }
  }
}

}  // namespace

bool PartOverLimit(const RlQuery& q, size_t part, const Decision& d) {
  if (d.limits.empty()) return false;
  const LimitDecision& limit = d.limits.front();
  return limit.violated || (q.parts[part].spent && limit.would_deny);
}

absl::StatusOr<RlQuery> ParseRlRequest(const rlsv3::RateLimitRequest& req, const RlRuleSet& rules,
                                       RlRequestOptions options) {
  if (absl::Status s = CheckBounds(req); !s.ok()) return s;
  if (req.hits_addend() > static_cast<uint64_t>(kMaxCost)) {
    return absl::InvalidArgumentError(
        absl::StrCat("hits_addend: at most ", kMaxCost, ", got ", req.hits_addend()));
  }
  RlQuery q;
  q.domain = req.domain();
  q.group = RlGroup(q.domain);
  const size_t n = static_cast<size_t>(req.descriptors_size());
  q.descriptor_part.assign(n, RlQuery::kNoPart);
  q.unlimited.assign(n, false);
  const int64_t request_cost = req.hits_addend() == 0 ? 1 : static_cast<int64_t>(req.hits_addend());

  // First every descriptor's rule, so that `replaces` sees all of the request's matches.
  struct Matched {
    const RlRule* rule = nullptr;
    std::string counter_key;
  };
  std::vector<Matched> matched(n);
  Entries entries;
  bool marked = false;  // some descriptor carried the report marker
  for (size_t i = 0; i < n; ++i) {
    const auto& descriptor = req.descriptors(static_cast<int>(i));
    entries.clear();
    for (int e = 0; e < descriptor.entries_size(); ++e) {
      const std::string& key = descriptor.entries(e).key();
      const std::string& value = descriptor.entries(e).value();
      if (!options.report_key.empty() && key == options.report_key) {
        // The marker says how the call is decided, not what is limited: not matched.
        absl::StatusOr<DecideMode> mode = ParseReportMarker(value);
        if (!mode.ok()) {
          return Invalid(i, absl::StrCat("entry \"", key, "\": ", mode.status().message()));
        }
        if (marked && *mode != q.mode) {
          return Invalid(i, absl::StrCat("entry \"", key,
                                         "\": a different value than an earlier descriptor's"));
        }
        marked = true;
        q.mode = *mode;
        continue;
      }
      entries.emplace_back(key, value);
    }
    if (descriptor.has_hits_addend() &&
        descriptor.hits_addend().value() > static_cast<uint64_t>(kMaxCost)) {
      return Invalid(i, absl::StrCat("hits_addend: at most ", kMaxCost, ", got ",
                                     descriptor.hits_addend().value()));
    }
    matched[i].rule = rules.Match(q.domain, entries, &matched[i].counter_key);
    if (matched[i].rule == nullptr && descriptor.has_limit()) {
      // An override limits the descriptor even where no rule does.
      matched[i].counter_key = RlCounterKey(q.domain, entries);
    }
  }
  // A rule that another matched rule replaces limits nothing in this request. A descriptor that
  // carries Envoy's override is limited by the override alone: its rule neither replaces nor is
  // replaced.
  std::vector<const RlRule*> rule_of(n);
  for (size_t i = 0; i < n; ++i) {
    rule_of[i] = req.descriptors(static_cast<int>(i)).has_limit() ? nullptr : matched[i].rule;
  }
  ApplyReplaces(absl::MakeSpan(rule_of));

  absl::flat_hash_map<std::string, size_t> by_subject;
  for (size_t i = 0; i < n; ++i) {
    const auto& descriptor = req.descriptors(static_cast<int>(i));
    const RlRule* rule = nullptr;
    std::unique_ptr<Plan> override_plan;
    if (descriptor.has_limit()) {
      absl::StatusOr<config::RlUnit> unit = UnitFromProto(descriptor.limit().unit());
      if (!unit.ok()) return Invalid(i, absl::StrCat("limit.unit: ", unit.status().message()));
      absl::StatusOr<Plan> plan = OverridePlan(descriptor.limit().requests_per_unit(), *unit);
      if (!plan.ok()) return Invalid(i, absl::StrCat("limit: ", plan.status().message()));
      override_plan = std::make_unique<Plan>(*std::move(plan));
    } else if (matched[i].rule == nullptr) {
      continue;  // nothing limits it
    } else if (matched[i].rule->unlimited) {
      q.unlimited[i] = true;  // replaced or not, as envoyproxy/ratelimit answers it
      continue;
    } else if (rule_of[i] == nullptr) {
      continue;  // replaced
    } else {
      rule = rule_of[i];
    }
    const int64_t cost = descriptor.has_hits_addend()
                             ? static_cast<int64_t>(descriptor.hits_addend().value())
                             : request_cost;
    std::string subject = RlSubject(matched[i].counter_key);
    const Plan* plan = override_plan != nullptr ? override_plan.get() : &rule->plan;
    if (auto it = by_subject.find(subject); it != by_subject.end()) {
      RlPart& part = q.parts[it->second];
      if (!SameLimit(*part.plan, *plan)) {
        return Invalid(i, "names the counter of an earlier descriptor under another limit");
      }
      if (part.cost + cost > kMaxCost) {
        return Invalid(i, absl::StrCat("hits_addend: the descriptors of one counter add up to "
                                       "more than ",
                                       kMaxCost));
      }
      part.cost += cost;
      q.descriptor_part[i] = it->second;
      continue;
    }
    RlPart part;
    part.rule = rule;
    part.plan = plan;
    part.override_plan = std::move(override_plan);
    part.cost = cost;
    part.subject = subject;
    by_subject.emplace(std::move(subject), q.parts.size());
    q.descriptor_part[i] = q.parts.size();
    q.parts.push_back(std::move(part));
  }
  if (options.dynamic_metadata) q.dynamic_metadata = RequestMetadata(req);
  return q;
}

bool RetryWithoutSpentQuotas(RlQuery& q, const std::vector<Decision>& decisions) {
  if (decisions.empty() || decisions.front().allowed || decisions.front().degraded) return false;
  std::vector<size_t> denied;
  bool room_left = false;  // some quota rule of the call did not deny
  for (size_t i = 0; i < q.parts.size(); ++i) {
    const RlPart& part = q.parts[i];
    const bool quota = part.rule != nullptr && part.rule->quota;
    const bool violated = !decisions[i].limits.empty() && decisions[i].limits.front().violated;
    if (violated && !quota) return false;  // a rule that is not in quota mode denied the call
    if (violated) {
      denied.push_back(i);
    } else if (quota && !part.spent) {
      room_left = true;
    }
  }
  if (denied.empty() || !room_left) return false;
  for (const size_t i : denied) {
    q.parts[i].spent = true;
    q.parts[i].plan = &q.parts[i].rule->spent_plan;
  }
  return true;
}

std::vector<GroupPart> GroupParts(const RlQuery& q) {
  std::vector<GroupPart> parts;
  parts.reserve(q.parts.size());
  for (const RlPart& p : q.parts) {
    parts.push_back(
        GroupPart{.subject = p.subject, .plan = p.plan, .cost = p.cost, .mode = q.mode});
  }
  return parts;
}

// How the answer's headers and body name a part's limit: the rule's `name`, else its descriptor
// path (sluice's own limit names, per_<unit>, would not tell two rules apart), with bytes a header
// may not carry replaced by '?'; an override keeps per_<unit>.
static std::string ShownName(const RlPart& part, const Limit& limit) {
  if (part.rule == nullptr) return limit.name;
  std::string name = part.rule->name.empty() ? part.rule->path : part.rule->name;
  for (char& c : name) {
    if (c < 0x20 || c > 0x7e) c = '?';
  }
  return name;
}

Decision Combined(const RlQuery& q, const std::vector<Decision>& decisions) {
  Decision out;
  out.plan = decisions.front().plan;
  out.allowed = decisions.front().allowed;
  out.degraded = decisions.front().degraded;
  out.failure = decisions.front().failure;
  out.retry_after = decisions.front().retry_after;
  for (size_t part = 0; part < decisions.size(); ++part) {
    const size_t from = out.limits.size();
    out.limits.insert(out.limits.end(), decisions[part].limits.begin(),
                      decisions[part].limits.end());
    if (!q.parts[part].spent) continue;
    for (size_t k = from; k < out.limits.size(); ++k) out.limits[k].would_deny = false;
  }
  return out;
}

rlsv3::RateLimitResponse RlResponse(const RlQuery& q, const std::vector<Decision>& decisions) {
  rlsv3::RateLimitResponse res;
  const bool allowed = decisions.empty() || decisions.front().allowed;
  res.set_overall_code(allowed ? rlsv3::RateLimitResponse::OK
                               : rlsv3::RateLimitResponse::OVER_LIMIT);
  for (size_t i = 0; i < q.descriptor_part.size(); ++i) {
    auto* status = res.add_statuses();
    status->set_code(rlsv3::RateLimitResponse::OK);
    const size_t part = q.descriptor_part[i];
    if (part == RlQuery::kNoPart) {
      if (q.unlimited[i]) status->set_limit_remaining(std::numeric_limits<uint32_t>::max());
      continue;
    }
    const Decision& d = decisions[part];
    if (d.limits.empty()) continue;
    // Denied because the store failed (on_store_error: deny): no limit was violated, but the
    // descriptors counted are what was refused; an OK beside OVER_LIMIT would contradict it.
    SetStatus(d.limits.front(), PartOverLimit(q, part, d) || (!allowed && d.degraded), status);
    // Envoy's RateLimit.name is the rule's `name` (none for an override), not sluice's limit.
    const RlRule* rule = q.parts[part].rule;
    status->mutable_current_limit()->set_name(rule != nullptr ? rule->name : "");
  }
  if (q.dynamic_metadata.has_value()) {
    google::protobuf::Struct* metadata = res.mutable_dynamic_metadata();
    *metadata = *q.dynamic_metadata;
    google::protobuf::Struct passed;
    for (size_t i = 0; i < q.descriptor_part.size(); ++i) {
      const size_t part = q.descriptor_part[i];
      if (part == RlQuery::kNoPart || q.parts[part].rule == nullptr ||
          res.statuses(static_cast<int>(i)).code() != rlsv3::RateLimitResponse::OK) {
        continue;
      }
      MergeMetadata(q.parts[part].rule->metadata, &passed);
    }
    if (!passed.fields().empty()) {
      *(*metadata->mutable_fields())["metadata"].mutable_struct_value() = std::move(passed);
    }
  }
  if (decisions.empty()) return res;

  Decision all = Combined(q, decisions);
  // The same limits under the names the client can tell apart (copies that live for this call).
  std::vector<Limit> shown;
  shown.reserve(all.limits.size());
  for (size_t part = 0, k = 0; part < decisions.size(); ++part) {
    for (size_t j = 0; j < decisions[part].limits.size(); ++j, ++k) {
      shown.push_back(*all.limits[k].limit);
      shown.back().name = ShownName(q.parts[part], *all.limits[k].limit);
      all.limits[k].limit = &shown.back();
    }
  }
  if (all.allowed) {
    auto* headers = res.mutable_response_headers_to_add();
    frontend::ForEachRateLimitHeader(all, [headers](std::string_view name, std::string_view value) {
      auto* header = headers->Add();
      header->set_key(name.data(), name.size());
      header->set_value(value.data(), value.size());
    });
    return res;
  }
  // The denial of sluice's own mapping (mapping.h), without Sluice-Subject and Sluice-Plan.
  frontend::Answer answer = frontend::DenialAnswer(all, {}, {.status = 429});
  CopyHeaders(answer, &res);
  res.set_raw_body(std::move(answer.body));
  return res;
}

}  // namespace sluice::rls
