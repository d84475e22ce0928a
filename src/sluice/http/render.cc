#include "sluice/http/render.h"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include <boost/beast/core/string_type.hpp>
#include <boost/beast/http/field.hpp>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/civil_time.h"
#include "absl/time/time.h"
#include "sluice/common/strings.h"

namespace sluice::http {
namespace {

namespace beast_http = boost::beast::http;

// Keeps members in insertion order, as docs/http.md writes them.
using Json = nlohmann::ordered_json;

boost::beast::string_view BeastView(std::string_view s) { return {s.data(), s.size()}; }

// Never throws: invalid UTF-8 (which validated names cannot contain) becomes U+FFFD.
std::string Dump(const Json& json) {
  return json.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// A structured-field string (RFC 8941 §3.3.3): quoted, with '"' and '\' escaped. Limit names are
// [A-Za-z0-9_.-], so nothing else needs care.
std::string SfString(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  out += '"';
  return out;
}

int64_t WindowSeconds(const LimitDecision& l) {
  if (l.limit->window.kind == config::WindowSpec::Kind::kFixed) {
    return absl::ToInt64Seconds(l.limit->window.length);
  }
  return absl::ToInt64Seconds(l.window_end - l.window_start);
}

// What a limit reports, whatever the Decision holds (the Limiter already guarantees it; the
// rendering does not rely on it): 0 <= used, 0 <= remaining <= quota - used, so neither the JSON
// nor a header can show a negative or wrapped value. A counter outside [0, kMaxUsed] (store.h)
// shows as exhausted.
struct Shown {
  int64_t used;
  int64_t remaining;
  int64_t reset_after;
};
Shown Show(const LimitDecision& l) {
  const int64_t quota = l.limit->quota;
  const int64_t reset_after = std::max<int64_t>(l.reset_after, 0);
  if (!UsableCounter(l.used)) return {quota, 0, reset_after};
  const int64_t room = l.used >= quota ? 0 : quota - l.used;
  return {l.used, std::clamp<int64_t>(l.remaining, 0, room), reset_after};
}

// Names of the limits that denied, in plan order.
Json ViolatedNames(const Decision& d) {
  Json names = Json::array();
  for (const LimitDecision& l : d.limits) {
    if (l.violated) names.push_back(l.limit->name);
  }
  return names;
}

Response MakeResponse(unsigned status, std::string_view content_type, std::string body,
                      unsigned version, bool keep_alive) {
  Response res;
  res.version(version);
  // Beast throws for a status above 999; no caller means one, so it becomes a plain 500.
  res.result(status <= 999 ? status : 500);
  res.set(beast_http::field::content_type, BeastView(content_type));
  res.keep_alive(keep_alive);
  res.body() = std::move(body);
  res.prepare_payload();
  return res;
}

std::string Seconds(int64_t n) { return absl::StrCat(n, n == 1 ? " second" : " seconds"); }

}  // namespace

std::string DecisionJson(const Decision& d, std::string_view subject) {
  Json limits = Json::array();
  for (const LimitDecision& l : d.limits) {
    const Shown shown = Show(l);
    limits.push_back(Json{{"name", l.limit->name},
                          {"quota", l.limit->quota},
                          {"used", shown.used},
                          {"remaining", shown.remaining},
                          {"reset_after", shown.reset_after},
                          {"window", l.limit->window.text}});
  }
  const Json body{{"allowed", d.allowed},
                  {"subject", std::string(subject)},
                  {"plan", d.plan != nullptr ? d.plan->name : std::string()},
                  {"degraded", d.degraded},
                  {"retry_after", d.retry_after},
                  {"violated", ViolatedNames(d)},
                  {"limits", std::move(limits)}};
  return Dump(body);
}

void ForEachRateLimitHeader(const Decision& d,
                            absl::FunctionRef<void(std::string_view, std::string_view)> put) {
  if (d.degraded) put("Sluice-Degraded", "1");
  if (d.limits.empty()) return;
  std::string shadow_denied;  // limit names are [A-Za-z0-9_.-]: nothing to quote
  for (const LimitDecision& l : d.limits) {
    if (!l.would_deny || l.limit == nullptr) continue;
    if (!shadow_denied.empty()) shadow_denied += ", ";
    shadow_denied += l.limit->name;
  }
  if (!shadow_denied.empty()) put("Sluice-Shadow-Denied", shadow_denied);
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
    absl::StrAppend(&policy, name, ";q=", l.limit->quota, ";w=", WindowSeconds(l));
    const Shown shown = Show(l);
    absl::StrAppend(&state, name, ";r=", shown.remaining, ";t=", shown.reset_after);
  }
  put("RateLimit-Policy", policy);
  put("RateLimit", state);
  const LimitDecision& tightest = d.Tightest();
  const Shown shown = Show(tightest);
  put("X-RateLimit-Limit", ToStd(absl::AlphaNum(tightest.limit->quota).Piece()));
  put("X-RateLimit-Remaining", ToStd(absl::AlphaNum(shown.remaining).Piece()));
  put("X-RateLimit-Reset", ToStd(absl::AlphaNum(shown.reset_after).Piece()));
}

void SetRateLimitHeaders(const Decision& d, Response& res) {
  // Every decision passes here, so this avoids Beast's by-name lookups: on a response that has no
  // rate-limit headers yet (the normal case) those fields are appended with a known name.
  const bool fresh = res.find("RateLimit") == res.end();
  ForEachRateLimitHeader(d, [&](std::string_view name, std::string_view value) {
    const boost::beast::string_view n(name.data(), name.size());
    const boost::beast::string_view v(value.data(), value.size());
    if (fresh && !name.starts_with("Sluice-")) {
      res.insert(beast_http::field::unknown, n, v);
    } else {
      res.set(n, v);
    }
  });
}

void SetRetryAfter(const Decision& d, Response& res) {
  if (d.allowed) return;
  res.set(beast_http::field::retry_after, absl::StrCat(d.retry_after < 1 ? 1 : d.retry_after));
}

Response Problem(unsigned status, std::string_view type, std::string_view title,
                 std::string_view detail, unsigned version, bool keep_alive) {
  const Json body{{"type", std::string(type)},
                  {"title", std::string(title)},
                  {"status", status},
                  {"detail", std::string(detail)}};
  return MakeResponse(status, "application/problem+json", Dump(body), version, keep_alive);
}

Response QuotaExceeded(const Decision& d, unsigned status, unsigned version, bool keep_alive) {
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
  Response res = MakeResponse(status, "application/problem+json", Dump(body), version, keep_alive);
  SetRateLimitHeaders(d, res);
  SetRetryAfter(d, res);
  return res;
}

Response JsonResponse(unsigned status, std::string body, unsigned version, bool keep_alive) {
  return MakeResponse(status, "application/json", std::move(body), version, keep_alive);
}

std::string HttpDate(int64_t unix_seconds) {
  static constexpr const char* kDays[] = {"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"};
  static constexpr const char* kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                            "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  const absl::CivilSecond t =
      absl::ToCivilSecond(absl::FromUnixSeconds(unix_seconds), absl::UTCTimeZone());
  const int weekday = static_cast<int>(absl::GetWeekday(absl::CivilDay(t)));  // Monday is 0
  return absl::StrFormat("%s, %02d %s %04d %02d:%02d:%02d GMT", kDays[weekday], t.day(),
                         kMonths[t.month() - 1], t.year(), t.hour(), t.minute(), t.second());
}

}  // namespace sluice::http
