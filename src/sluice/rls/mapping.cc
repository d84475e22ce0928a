#include "sluice/rls/mapping.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sluice/common/strings.h"
#include "sluice/frontend/cost.h"
#include "sluice/limiter/limiter.h"
#include "sluice/rls/wire.h"

namespace sluice::rls {
namespace {

using RateLimit = rlsv3::RateLimitResponse::RateLimit;

absl::Status Invalid(size_t descriptor, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("descriptors[", descriptor, "]: ", ToAbsl(what)));
}

// Sets `*slot` to `value`, or checks that it already is.
absl::Status Assign(size_t descriptor, std::string_view key, std::string_view value,
                    std::string* slot, bool* seen) {
  if (*seen && *slot != value) {
    return Invalid(descriptor, absl::StrCat("entry \"", ToAbsl(key),
                                            "\": a different value than an earlier descriptor's"));
  }
  *seen = true;
  *slot = std::string(value);
  return absl::OkStatus();
}

// What a status reports as left: nothing when the call is over the limit, or when the limit
// (a shadow one) would have denied it — a denied call counted nothing, so `remaining` may still
// be more than 0 there, but not enough for this call — else the quota less what is used.
uint32_t StatusRemaining(rlsv3::RateLimitResponse::Code code, const LimitDecision& limit) {
  if (code == rlsv3::RateLimitResponse::OVER_LIMIT || limit.would_deny) return 0;
  return static_cast<uint32_t>(
      std::clamp<int64_t>(limit.remaining, 0, std::numeric_limits<uint32_t>::max()));
}

void SetStatuses(rlsv3::RateLimitResponse::Code code, const LimitDecision* limit,
                 size_t descriptors, rlsv3::RateLimitResponse* res) {
  res->set_overall_code(code);
  for (size_t i = 0; i < descriptors; ++i) {
    auto* status = res->add_statuses();
    status->set_code(code);
    if (limit == nullptr) continue;
    *status->mutable_current_limit() = CurrentLimit(*limit);
    status->set_limit_remaining(StatusRemaining(code, *limit));
    status->mutable_duration_until_reset()->set_seconds(limit->reset_after);
  }
}

}  // namespace

absl::StatusOr<DecideMode> ParseReportMarker(std::string_view value) {
  if (value == "true" || value == "1") return DecideMode::kReport;
  if (value == "false" || value == "0") return DecideMode::kAdmit;
  return absl::InvalidArgumentError("must be true, false, 1 or 0");
}

void CopyHeaders(const frontend::Answer& from, rlsv3::RateLimitResponse* to) {
  auto* headers = to->mutable_response_headers_to_add();
  auto add = [headers](std::string_view name, std::string_view value) {
    auto* header = headers->Add();
    header->set_key(name.data(), name.size());
    header->set_value(value.data(), value.size());
  };
  add("Content-Type", from.content_type);
  for (const frontend::Header& h : from.headers) add(h.name, h.value);
}

absl::Status CheckBounds(const rlsv3::RateLimitRequest& req) {
  if (req.descriptors_size() == 0) {
    return absl::InvalidArgumentError("descriptors: at least one is required");
  }
  if (static_cast<size_t>(req.descriptors_size()) > kMaxDescriptors) {
    return absl::InvalidArgumentError(
        absl::StrCat("descriptors: at most ", kMaxDescriptors, ", got ", req.descriptors_size()));
  }
  for (size_t i = 0; i < static_cast<size_t>(req.descriptors_size()); ++i) {
    const auto& descriptor = req.descriptors(static_cast<int>(i));
    // A descriptor without entries is read as envoyproxy/ratelimit reads it: it names nothing,
    // so nothing limits it (its status is OK).
    if (static_cast<size_t>(descriptor.entries_size()) > kMaxEntriesPerDescriptor) {
      return Invalid(i, absl::StrCat("entries: at most ", kMaxEntriesPerDescriptor, ", got ",
                                     descriptor.entries_size()));
    }
    for (int e = 0; e < descriptor.entries_size(); ++e) {
      const std::string& key = descriptor.entries(e).key();
      if (key.empty() || key.size() > kMaxEntryKeyLength) {
        return Invalid(
            i, absl::StrCat("entries[", e, "].key: must be 1 to ", kMaxEntryKeyLength, " bytes"));
      }
      if (descriptor.entries(e).value().size() > kMaxEntryValueLength) {
        return Invalid(i, absl::StrCat("entries[", e, "].value: longer than ", kMaxEntryValueLength,
                                       " bytes"));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Query> ParseRequest(const rlsv3::RateLimitRequest& req,
                                   const config::DescriptorKeys& keys) {
  if (absl::Status s = CheckBounds(req); !s.ok()) return s;
  Query q;
  q.descriptors = static_cast<size_t>(req.descriptors_size());
  bool has_key = false, has_subject = false, has_plan = false, has_cost = false;
  bool has_addend = false, has_report = false;
  std::string cost_text, report_text;
  uint64_t addend = 0;
  for (size_t i = 0; i < q.descriptors; ++i) {
    const auto& descriptor = req.descriptors(static_cast<int>(i));
    for (int e = 0; e < descriptor.entries_size(); ++e) {
      const std::string& key = descriptor.entries(e).key();
      const std::string& value = descriptor.entries(e).value();
      absl::Status s = absl::OkStatus();
      if (key == keys.api_key) {
        s = Assign(i, key, value, &q.api_key, &has_key);
      } else if (key == keys.subject) {
        s = Assign(i, key, value, &q.subject, &has_subject);
      } else if (key == keys.plan) {
        s = Assign(i, key, value, &q.plan, &has_plan);
      } else if (key == keys.cost) {
        s = Assign(i, key, value, &cost_text, &has_cost);
      } else if (key == keys.report) {
        s = Assign(i, key, value, &report_text, &has_report);
      }
      if (!s.ok()) return s;
    }
    if (descriptor.has_hits_addend()) {
      const uint64_t value = descriptor.hits_addend().value();
      if (has_addend && value != addend) {
        return Invalid(i,
                       "hits_addend: differs from an earlier descriptor's (one request is "
                       "one decision)");
      }
      has_addend = true;
      addend = value;
    }
  }
  if (has_key && q.api_key.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("entry \"", keys.api_key, "\": empty"));
  }
  if (has_key && (has_subject || has_plan)) {
    return absl::InvalidArgumentError(absl::StrCat("entry \"", keys.api_key,
                                                   "\": give either an API key or a subject (and "
                                                   "plan), not both"));
  }
  if (!has_key && !has_subject) {
    return absl::InvalidArgumentError(
        absl::StrCat("descriptors: no entry \"", keys.api_key, "\" or \"", keys.subject, "\""));
  }
  if (has_report) {
    absl::StatusOr<DecideMode> mode = ParseReportMarker(report_text);
    if (!mode.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("entry \"", keys.report, "\": ", mode.status().message()));
    }
    q.mode = *mode;
  }
  if (has_cost) {
    absl::StatusOr<int64_t> cost = frontend::ParseCost(cost_text);
    if (!cost.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("entry \"", keys.cost, "\": ", cost.status().message()));
    }
    q.cost = *cost;
    return q;
  }
  // The request's hits_addend is a plain integer: 0 is "not set", which Envoy means as 1. A
  // descriptor's is a wrapper, set or not: an explicit 0 peeks.
  const uint64_t hits = has_addend ? addend : req.hits_addend();
  if (hits > static_cast<uint64_t>(kMaxCost)) {
    return absl::InvalidArgumentError(
        absl::StrCat("hits_addend: at most ", kMaxCost, ", got ", hits));
  }
  q.cost = hits == 0 && !has_addend ? 1 : static_cast<int64_t>(hits);
  return q;
}

namespace {

RateLimit::Unit CurrentUnit(const LimitDecision& limit) {
  const config::WindowSpec& w = limit.limit->window;
  switch (w.kind) {
    case config::WindowSpec::Kind::kDay:
      return RateLimit::DAY;
    case config::WindowSpec::Kind::kWeek:
      return RateLimit::WEEK;
    case config::WindowSpec::Kind::kMonth:
      return RateLimit::MONTH;
    case config::WindowSpec::Kind::kYear:
      return RateLimit::YEAR;
    case config::WindowSpec::Kind::kCredit:
    case config::WindowSpec::Kind::kConcurrent:
      return RateLimit::UNKNOWN;  // a credit never resets, requests in flight have no window
    default:
      break;
  }
  if (w.length >= absl::Hours(24 * 7)) return RateLimit::WEEK;
  if (w.length >= absl::Hours(24)) return RateLimit::DAY;
  if (w.length >= absl::Hours(1)) return RateLimit::HOUR;
  if (w.length >= absl::Minutes(1)) return RateLimit::MINUTE;
  return RateLimit::SECOND;
}

uint32_t Clamp32(int64_t v) {
  return static_cast<uint32_t>(std::clamp<int64_t>(v, 0, std::numeric_limits<uint32_t>::max()));
}

// The limit each status of a decision reports: the first violated one, else the tightest.
const LimitDecision* Reported(const Decision& d) {
  for (const LimitDecision& l : d.limits) {
    if (l.violated) return &l;
  }
  return d.limits.empty() ? nullptr : &d.Tightest();
}

}  // namespace

RateLimit CurrentLimit(const LimitDecision& limit) {
  RateLimit out;
  out.set_name(limit.limit->name);
  out.set_requests_per_unit(Clamp32(limit.limit->quota));
  out.set_unit(CurrentUnit(limit));
  return out;
}

void DecisionResponse(const Decision& d, size_t descriptors, Decided who,
                      rlsv3::RateLimitResponse* res) {
  SetStatuses(d.allowed ? rlsv3::RateLimitResponse::OK : rlsv3::RateLimitResponse::OVER_LIMIT,
              Reported(d), descriptors, res);

  if (d.allowed) {
    // The headers the HTTP data plane sets on an admission (routes.cc), straight into the
    // message (every decision passes here); then who was admitted, for the client and, as
    // ext_authz's allowed_upstream_headers pass them, for the upstream.
    auto add = [](auto* headers, std::string_view name, std::string_view value) {
      auto* header = headers->Add();
      header->set_key(name.data(), name.size());
      header->set_value(value.data(), value.size());
    };
    auto* response_headers = res->mutable_response_headers_to_add();
    frontend::ForEachRateLimitHeader(d, [&](std::string_view name, std::string_view value) {
      add(response_headers, name, value);
    });
    auto* request_headers = res->mutable_request_headers_to_add();
    for (auto* headers : {response_headers, request_headers}) {
      add(headers, frontend::kSubjectHeader, who.subject);
      add(headers, frontend::kPlanHeader, who.plan);
    }
    return;
  }
  // The headers and body the HTTP data plane answers the same denial with (routes.cc).
  frontend::Answer answer = frontend::DenialAnswer(d, who, {.status = 429, .name_who = true});
  CopyHeaders(answer, res);
  res->set_raw_body(std::move(answer.body));
}

void AppendAdmissionWire(const Decision& d, size_t descriptors, Decided who, std::string* out) {
  // RateLimitResponse: overall_code 1, statuses 2, response_headers_to_add 3,
  // request_headers_to_add 4; DescriptorStatus: code 1, current_limit 2, limit_remaining 3,
  // duration_until_reset 4; RateLimit: requests_per_unit 1, unit 2, name 3; Duration: seconds 1;
  // HeaderValue: key 1, value 2. Fields in number order, as protobuf writes them.
  WireWriter w(out);
  w.Varint(1, rlsv3::RateLimitResponse::OK);
  const LimitDecision* reported = Reported(d);
  for (size_t i = 0; i < descriptors; ++i) {
    w.Message(2, [&] {
      w.Varint(1, rlsv3::RateLimitResponse::OK);
      if (reported == nullptr) return;
      w.Message(2, [&] {
        w.Varint(1, Clamp32(reported->limit->quota));
        w.Varint(2, CurrentUnit(*reported));
        w.Bytes(3, reported->limit->name);
      });
      w.Varint(3, StatusRemaining(rlsv3::RateLimitResponse::OK, *reported));
      w.Message(4, [&] { w.Varint(1, static_cast<uint64_t>(reported->reset_after)); });
    });
  }
  auto header = [&w](int field, std::string_view name, std::string_view value) {
    w.Message(field, [&] {
      w.Bytes(1, name);
      w.Bytes(2, value);
    });
  };
  frontend::ForEachRateLimitHeader(
      d, [&](std::string_view name, std::string_view value) { header(3, name, value); });
  for (const int field : {3, 4}) {
    header(field, frontend::kSubjectHeader, who.subject);
    header(field, frontend::kPlanHeader, who.plan);
  }
}

rlsv3::RateLimitResponse RefusalResponse(const frontend::Refusal& refusal, size_t descriptors) {
  rlsv3::RateLimitResponse res;
  SetStatuses(rlsv3::RateLimitResponse::OVER_LIMIT, nullptr, descriptors, &res);
  frontend::Answer answer = frontend::RefusalAnswer(refusal, {});
  CopyHeaders(answer, &res);
  res.set_raw_body(std::move(answer.body));
  return res;
}

}  // namespace sluice::rls
