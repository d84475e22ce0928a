#include "sluice/http/render.h"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include <boost/beast/core/string_type.hpp>
#include <boost/beast/http/field.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/civil_time.h"
#include "absl/time/time.h"
#include "sluice/common/strings.h"
#include "sluice/limiter/algorithm.h"

namespace sluice::http {
namespace {

namespace beast_http = boost::beast::http;

boost::beast::string_view BeastView(std::string_view s) { return {s.data(), s.size()}; }

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

// A JSON string: quoted, with '"', '\\' and control characters escaped (subjects, plan and limit
// names are validated to need none, but the writer does not rely on it).
void AppendString(std::string& out, std::string_view s) {
  out += '"';
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppend(&out, absl::StrFormat("\\u%04x", static_cast<unsigned char>(c)));
    } else {
      out += c;
    }
  }
  out += '"';
}

// The decision as docs/http.md writes it, without the closing brace (a reservation's answer
// adds members); `overshoot` adds each limit's (a settled reservation). Written by hand: a
// decision is answered on every /v1/check, and a JSON tree costs several allocations per member.
void AppendDecision(std::string& out, const Decision& d, std::string_view subject,
                    bool overshoot = false) {
  out.reserve(out.size() + 160 + 120 * d.limits.size());
  absl::StrAppend(&out, "{\"allowed\":", d.allowed ? "true" : "false", ",\"subject\":");
  AppendString(out, subject);
  out += ",\"plan\":";
  AppendString(out, d.plan != nullptr ? std::string_view(d.plan->name) : std::string_view());
  absl::StrAppend(&out, ",\"degraded\":", d.degraded ? "true" : "false",
                  ",\"retry_after\":", d.retry_after, ",\"violated\":[");
  bool first = true;
  for (const LimitDecision& l : d.limits) {
    if (!l.violated) continue;
    if (!first) out += ',';
    first = false;
    AppendString(out, l.limit->name);
  }
  out += "],\"limits\":[";
  for (size_t i = 0; i < d.limits.size(); ++i) {
    const LimitDecision& l = d.limits[i];
    const frontend::Shown shown = frontend::Show(l);
    if (i > 0) out += ',';
    out += "{\"name\":";
    AppendString(out, l.limit->name);
    absl::StrAppend(&out, ",\"quota\":", l.limit->quota, ",\"used\":", shown.used,
                    ",\"held\":", l.held, ",\"remaining\":", shown.remaining,
                    ",\"reset_after\":", shown.reset_after, ",\"window\":");
    AppendString(out, l.limit->window.text);
    if (l.limit->algorithm != config::Algorithm::kFixed) {
      absl::StrAppend(&out, ",\"algorithm\":\"", ToAbsl(config::AlgorithmName(l.limit->algorithm)),
                      "\"");
      if (IsGcra(*l.limit)) absl::StrAppend(&out, ",\"burst\":", l.limit->burst);
    }
    if (overshoot) absl::StrAppend(&out, ",\"overshoot\":", l.overshoot);
    out += '}';
  }
  out += ']';
}

}  // namespace

std::string DecisionJson(const Decision& d, std::string_view subject) {
  std::string out;
  AppendDecision(out, d, subject);
  out += '}';
  return out;
}

std::string ReserveJson(const ReserveDecision& r, std::string_view subject) {
  std::string out;
  AppendDecision(out, r.decision, subject);
  if (!r.id.empty()) {
    out += ",\"reservation\":";
    AppendString(out, r.id);
    absl::StrAppend(&out, ",\"expires_at\":\"", FormatTimestamp(r.expires_at), "\"");
  }
  out += '}';
  return out;
}

std::string SettleJson(const SettleDecision& s, std::string_view id, std::string_view subject) {
  std::string out;
  AppendDecision(out, s.decision, subject, /*overshoot=*/true);
  out += ",\"reservation\":";
  AppendString(out, id);
  absl::StrAppend(&out, ",\"settled\":{\"how\":\"", ToAbsl(ReservationEndName(s.ended_by)),
                  "\",\"charged\":", s.charged, "}}");
  return out;
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
