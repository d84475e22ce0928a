#include "sluice/frontend/answer.h"

#include <algorithm>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "sluice/common/strings.h"
#include "sluice/limiter/algorithm.h"
#include "sluice/limiter/store.h"

namespace sluice::frontend {
namespace {

// Keeps members in insertion order, as docs/http.md writes them.
using Json = nlohmann::ordered_json;

constexpr std::string_view kProblemJson = "application/problem+json";

// Never throws: invalid UTF-8 (which validated names cannot contain) becomes U+FFFD.
std::string Dump(const Json& json) {
  return json.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string Seconds(int64_t n) { return absl::StrCat(n, n == 1 ? " second" : " seconds"); }

void AddRateLimitHeaders(const Decision& d, Answer& answer) {
  ForEachRateLimitHeader(
      d, [&](std::string_view name, std::string_view value) { answer.AddHeader(name, value); });
}

}  // namespace

std::string SfString(std::string_view s) {
  // Limit names are [A-Za-z0-9_.-], so nothing else needs care.
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  out += '"';
  return out;
}

int64_t WindowSeconds(const LimitDecision& l) {
  if (l.limit->window.kind == config::WindowSpec::Kind::kCredit ||
      l.limit->window.kind == config::WindowSpec::Kind::kConcurrent) {
    return 0;
  }
  if (l.limit->window.kind == config::WindowSpec::Kind::kFixed) {
    return absl::ToInt64Seconds(l.limit->window.length);
  }
  return absl::ToInt64Seconds(l.window_end - l.window_start);
}

Shown Show(const LimitDecision& l) {
  const int64_t quota = LimitCapacity(*l.limit);
  const int64_t reset_after = std::max<int64_t>(l.reset_after, 0);
  if (!UsableCounter(l.used)) return {quota, 0, reset_after};
  const int64_t room = l.used >= quota ? 0 : quota - l.used;
  return {l.used, std::clamp<int64_t>(l.remaining, 0, room), reset_after};
}

void ForEachRateLimitHeader(const Decision& d,
                            absl::FunctionRef<void(std::string_view, std::string_view)> put) {
  if (d.degraded) put(kDegradedHeader, "1");
  if (d.limits.empty()) return;
  std::string shadow_denied;  // limit names are [A-Za-z0-9_.-]: nothing to quote
  for (const LimitDecision& l : d.limits) {
    if (!l.would_deny || l.limit == nullptr) continue;
    if (!shadow_denied.empty()) shadow_denied += ", ";
    shadow_denied += l.limit->name;
  }
  if (!shadow_denied.empty()) put(kShadowDeniedHeader, shadow_denied);
  std::string policy;
  std::string state;
  policy.reserve(48 * d.limits.size());
  state.reserve(40 * d.limits.size());
  for (const LimitDecision& l : d.limits) {
    if (!policy.empty()) {
      policy += ", ";
      state += ", ";
    }
    const std::string name = SfString(l.limit->name);
    const Shown shown = Show(l);
    if (l.limit->window.kind == config::WindowSpec::Kind::kCredit ||
        l.limit->window.kind == config::WindowSpec::Kind::kConcurrent) {
      // A credit never resets, and a concurrent limit has no window: neither has a window
      // length or a time to a reset.
      absl::StrAppend(&policy, name, ";q=", l.limit->quota);
      absl::StrAppend(&state, name, ";r=", shown.remaining);
      continue;
    }
    absl::StrAppend(&policy, name, ";q=", l.limit->quota, ";w=", WindowSeconds(l));
    // A gcra limit's rate is q per w; how much of it may be taken at once is its own parameter.
    if (IsGcra(*l.limit)) absl::StrAppend(&policy, ";sluice-burst=", l.limit->burst);
    absl::StrAppend(&state, name, ";r=", shown.remaining, ";t=", shown.reset_after);
  }
  put("RateLimit-Policy", policy);
  put("RateLimit", state);
  const LimitDecision& tightest = d.Tightest();
  const Shown shown = Show(tightest);
  put("X-RateLimit-Limit", ToStd(absl::AlphaNum(LimitCapacity(*tightest.limit)).Piece()));
  put("X-RateLimit-Remaining", ToStd(absl::AlphaNum(shown.remaining).Piece()));
  put("X-RateLimit-Reset", ToStd(absl::AlphaNum(shown.reset_after).Piece()));
}

Answer ProblemAnswer(unsigned status, std::string_view type, std::string_view title,
                     std::string_view detail) {
  const Json body{{"type", std::string(type)},
                  {"title", std::string(title)},
                  {"status", status},
                  {"detail", std::string(detail)}};
  return Answer{.status = status, .content_type = kProblemJson, .body = Dump(body)};
}

Answer QuotaExceededAnswer(const Decision& d, unsigned status) {
  const int64_t retry_after = d.retry_after < 1 ? 1 : d.retry_after;
  std::vector<std::string> violated;
  for (const LimitDecision& l : d.limits) {
    if (l.violated) violated.push_back(l.limit->name);
  }
  const std::string detail =
      violated.empty() ? absl::StrCat("Request denied; retry after ", Seconds(retry_after), ".")
                       : absl::StrCat("Quota exceeded: ", absl::StrJoin(violated, ", "),
                                      "; retry after ", Seconds(retry_after), ".");
  const Json body{{"type", std::string(kQuotaExceededType)},
                  {"title", "Request cannot be satisfied as assigned quota has been exceeded"},
                  {"status", status},
                  {"detail", detail},
                  {"violated-policies", violated}};
  Answer answer{.status = status, .content_type = kProblemJson, .body = Dump(body)};
  AddRateLimitHeaders(d, answer);
  answer.AddHeader("Retry-After", absl::StrCat(retry_after));
  return answer;
}

Answer DenialAnswer(const Decision& d, Decided who, DenialStyle style) {
  if (d.degraded) {
    Answer answer = ProblemAnswer(503, "about:blank", "Service Unavailable",
                                  "the rate limit store is unavailable and on_store_error is deny");
    AddRateLimitHeaders(d, answer);
    return answer;
  }
  Answer answer = QuotaExceededAnswer(d, style.status);
  if (style.denied_header) answer.AddHeader(kDeniedHeader, "quota");
  if (style.name_who) {
    // Lets a gateway log who was turned away.
    answer.AddHeader(kSubjectHeader, who.subject);
    answer.AddHeader(kPlanHeader, who.plan);
  }
  return answer;
}

Answer RefusalAnswer(const Refusal& refusal, RefusalStyle style) {
  Answer answer = ProblemAnswer(refusal.status, "about:blank", refusal.title, refusal.detail);
  if (refusal.status == 401) answer.AddHeader("WWW-Authenticate", "Bearer");
  if (refusal.retry_soon) answer.AddHeader("Retry-After", "1");
  if (refusal.disabled && style.denied_header) answer.AddHeader(kDeniedHeader, "disabled");
  return answer;
}

}  // namespace sluice::frontend
