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

}  // namespace

namespace {

// The decision as docs/http.md writes it; `overshoot` adds each limit's (a settled reservation).
Json DecisionObject(const Decision& d, std::string_view subject, bool overshoot = false) {
  Json limits = Json::array();
  for (const LimitDecision& l : d.limits) {
    const frontend::Shown shown = frontend::Show(l);
    Json limit{{"name", l.limit->name},
               {"quota", l.limit->quota},
               {"used", shown.used},
               {"held", l.held},
               {"remaining", shown.remaining},
               {"reset_after", shown.reset_after},
               {"window", l.limit->window.text}};
    if (overshoot) limit["overshoot"] = l.overshoot;
    limits.push_back(std::move(limit));
  }
  return Json{{"allowed", d.allowed},
              {"subject", std::string(subject)},
              {"plan", d.plan != nullptr ? d.plan->name : std::string()},
              {"degraded", d.degraded},
              {"retry_after", d.retry_after},
              {"violated", ViolatedNames(d)},
              {"limits", std::move(limits)}};
}

}  // namespace

std::string DecisionJson(const Decision& d, std::string_view subject) {
  return Dump(DecisionObject(d, subject));
}

std::string ReserveJson(const ReserveDecision& r, std::string_view subject) {
  Json body = DecisionObject(r.decision, subject);
  if (!r.id.empty()) {
    body["reservation"] = r.id;
    body["expires_at"] = FormatTimestamp(r.expires_at);
  }
  return Dump(body);
}

std::string SettleJson(const SettleDecision& s, std::string_view id, std::string_view subject) {
  Json body = DecisionObject(s.decision, subject, /*overshoot=*/true);
  body["reservation"] = std::string(id);
  body["settled"] = Json{{"how", ReservationEndName(s.ended_by)}, {"charged", s.charged}};
  return Dump(body);
}

std::string_view ReservationEndName(ReservationEnd end) {
  switch (end) {
    case ReservationEnd::kSettle:
      return "settled";
    case ReservationEnd::kRelease:
      return "released";
    case ReservationEnd::kExpire:
      return "expired";
  }
  return "settled";
}

std::string FormatTimestamp(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t, absl::UTCTimeZone());
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

Response Render(frontend::Answer answer, unsigned version, bool keep_alive) {
  Response res =
      MakeResponse(answer.status, answer.content_type, std::move(answer.body), version, keep_alive);
  // A fresh response: each field is appended, in the answer's order.
  for (const frontend::Header& h : answer.headers)
    res.insert(BeastView(h.name), BeastView(h.value));
  return res;
}

Response Problem(unsigned status, std::string_view type, std::string_view title,
                 std::string_view detail, unsigned version, bool keep_alive) {
  return Render(frontend::ProblemAnswer(status, type, title, detail), version, keep_alive);
}

Response QuotaExceeded(const Decision& d, unsigned status, unsigned version, bool keep_alive) {
  return Render(frontend::QuotaExceededAnswer(d, status), version, keep_alive);
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
