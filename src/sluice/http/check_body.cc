#include "sluice/http/check_body.h"

#include <algorithm>
#include <array>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "sluice/common/strings.h"
#include "sluice/config/vocabulary.h"
#include "sluice/frontend/cost.h"
#include "sluice/limiter/limiter.h"

namespace sluice::http {
namespace {

// std::map-backed: inserting n members costs O(n log n). (ordered_json searches linearly on every
// insert, which a 64 KiB body of tiny members would turn into a quadratic cost per request.)
using Json = nlohmann::json;

constexpr const char* kFields[] = {"subject", "plan", "api_key", "cost"};

absl::Status FieldError(std::string_view field, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(ToAbsl(field), ": ", ToAbsl(what)));
}

// Longest field name quoted back in an "unknown field" error.
constexpr size_t kMaxQuotedName = 64;

absl::Status ReadString(std::string_view field, const Json& value, std::string& out) {
  if (!value.is_string() || value.get_ref<const std::string&>().empty()) {
    return FieldError(field, "must be a non-empty string");
  }
  out = value.get<std::string>();
  return absl::OkStatus();
}

absl::Status ReadCost(const Json& value, int64_t& out) {
  // is_number_integer() is false for 1.5 and 1.0 (floats), booleans and strings.
  if (value.is_number_unsigned()) {
    const uint64_t cost = value.get<uint64_t>();
    if (cost <= static_cast<uint64_t>(kMaxCost)) {
      out = static_cast<int64_t>(cost);
      return absl::OkStatus();
    }
  } else if (value.is_number_integer()) {
    const int64_t cost = value.get<int64_t>();
    if (cost >= 0 && cost <= kMaxCost) {
      out = cost;
      return absl::OkStatus();
    }
  }
  return FieldError("cost", absl::StrCat("must be an integer from 0 to ", kMaxCost));
}

// Parses `body` as a JSON object whose members are among `fields`; the errors of ParseCheckBody.
absl::StatusOr<Json> ParseObject(std::string_view body, absl::Span<const char* const> fields) {
  // The parser callback sees top-level member names in document order, so the first unknown name is
  // the one reported. It also catches repeats: nlohmann keeps the last of repeated members without
  // a word, and two readers of one body must not disagree on its subject.
  std::optional<std::string> unknown;
  const char* duplicate = nullptr;
  std::vector<bool> seen(fields.size(), false);
  // The member whose value is being parsed: a number nlohmann cannot hold is refused mid-parse.
  std::string member;
  const Json::parser_callback_t note_names = [&](int depth, Json::parse_event_t event,
                                                 Json& parsed) {
    if (depth != 1 || event != Json::parse_event_t::key) return true;
    const std::string& name = parsed.get_ref<const std::string&>();
    member = name.substr(0, kMaxQuotedName);
    const auto field = std::find(fields.begin(), fields.end(), name);
    if (field == fields.end()) {
      // Quoted back shortened: a body may be up to 64 KiB.
      if (!unknown) unknown = name.substr(0, kMaxQuotedName);
    } else {
      const size_t at = static_cast<size_t>(field - fields.begin());
      if (seen[at] && duplicate == nullptr) duplicate = *field;
      seen[at] = true;
    }
    return true;
  };
  // JSON text never holds a raw NUL, and nlohmann's parser takes one for the end of its input:
  // what followed would be ignored rather than refused.
  if (body.find('\0') != std::string_view::npos) return FieldError("body", "not valid JSON");
  Json json;
  try {
    json = Json::parse(body.begin(), body.end(), note_names);
  } catch (const Json::out_of_range& e) {
    // 406: a number beyond a double's range (1e400, or an integer of hundreds of digits), which
    // nlohmann refuses rather than read as infinity. It is well-formed JSON with a value out of
    // range, so the member that holds it is named, after the faults found before it.
    if (e.id != 406) return FieldError("body", "not valid JSON");
    if (unknown) return FieldError(*unknown, "unknown field");
    if (duplicate != nullptr) return FieldError(duplicate, "duplicate field");
    if (member.empty()) return FieldError("body", "number out of range");
    if (member == "cost") {
      return FieldError("cost", absl::StrCat("number out of range (must be an integer from 0 to ",
                                             kMaxCost, ")"));
    }
    return FieldError(member, "number out of range");
  } catch (const Json::exception&) {
    return FieldError("body", "not valid JSON");
  }
  if (!json.is_object()) return FieldError("body", "must be a JSON object");
  if (unknown) return FieldError(*unknown, "unknown field");
  if (duplicate != nullptr) return FieldError(duplicate, "duplicate field");

  return json;
}

// The bodies clients send are short flat objects of plain values: {"subject":"user-42",
// "plan":"free","cost":1}. ScanFlat reads exactly those without building a JSON tree (nlohmann's
// parse of a tree costs a /v1/check measurably): an object of distinct members among `fields`
// whose values are strings of printable ASCII without escapes, or integers of at most 7 digits
// without sign, fraction or exponent, with JSON's whitespace between tokens. Anything else
// (escapes, other bytes, other values, unknown or repeated members, malformed text) is not
// scanned: the caller parses it with the full parser, which also words every error, so both
// paths accept the same bodies with the same meaning.
struct FlatValue {
  std::string_view text;  // a string's characters, or an integer's digits
  bool present = false;
  bool is_string = false;
};
constexpr size_t kMaxFlatFields = 5;
using FlatValues = std::array<FlatValue, kMaxFlatFields>;

bool ScanFlat(std::string_view body, absl::Span<const char* const> fields, FlatValues& out) {
  size_t i = 0;
  const size_t n = body.size();
  const auto skip_space = [&] {
    while (i < n && (body[i] == ' ' || body[i] == '\t' || body[i] == '\n' || body[i] == '\r')) ++i;
  };
  // A string of printable ASCII without escapes, at body[i] == '"'; its characters.
  const auto plain_string = [&](std::string_view& text) {
    if (i >= n || body[i] != '"') return false;
    const size_t start = ++i;
    while (i < n && body[i] != '"') {
      const unsigned char c = static_cast<unsigned char>(body[i]);
      if (c < 0x20 || c > 0x7e || c == '\\') return false;
      ++i;
    }
    if (i >= n) return false;
    text = body.substr(start, i - start);
    ++i;
    return true;
  };
  skip_space();
  if (i >= n || body[i] != '{') return false;
  ++i;
  skip_space();
  if (i < n && body[i] == '}') {
    ++i;
  } else {
    while (true) {
      std::string_view name;
      if (!plain_string(name)) return false;
      const auto field = std::find(fields.begin(), fields.end(), name);
      if (field == fields.end()) return false;
      FlatValue& value = out[static_cast<size_t>(field - fields.begin())];
      if (value.present) return false;
      value.present = true;
      skip_space();
      if (i >= n || body[i] != ':') return false;
      ++i;
      skip_space();
      if (i < n && body[i] == '"') {
        if (!plain_string(value.text)) return false;
        value.is_string = true;
      } else {
        const size_t start = i;
        while (i < n && body[i] >= '0' && body[i] <= '9') ++i;
        const size_t digits = i - start;
        if (digits == 0 || digits > 7 || (digits > 1 && body[start] == '0')) return false;
        value.text = body.substr(start, digits);
      }
      skip_space();
      if (i >= n) return false;
      if (body[i] == '}') {
        ++i;
        break;
      }
      if (body[i] != ',') return false;
      ++i;
      skip_space();
    }
  }
  skip_space();
  return i == n;
}

// A scanned value as a non-empty string, or false.
bool FlatString(const FlatValue& value, std::string& out) {
  if (!value.is_string || value.text.empty()) return false;
  out.assign(value.text);
  return true;
}

// A scanned value as a cost (an integer from 0 to kMaxCost), or false.
bool FlatCost(const FlatValue& value, int64_t& out) {
  if (value.is_string) return false;
  int64_t cost = 0;
  for (const char c : value.text) cost = cost * 10 + (c - '0');  // at most 7 digits
  if (cost > kMaxCost) return false;
  out = cost;
  return true;
}

// A reservation's ttl: a duration more than 0 and at most kMaxReservationTtl.
std::optional<absl::Duration> TtlOf(std::string_view text) {
  absl::StatusOr<absl::Duration> ttl = config::ParseDuration(text);
  if (!ttl.ok() || *ttl <= absl::ZeroDuration() || *ttl > kMaxReservationTtl) return std::nullopt;
  return *ttl;
}

absl::Status ReadTtl(const Json& value, absl::Duration& out) {
  if (value.is_string()) {
    if (std::optional<absl::Duration> ttl = TtlOf(value.get_ref<const std::string&>())) {
      out = *ttl;
      return absl::OkStatus();
    }
  }
  return FieldError("ttl", "must be a duration such as \"60s\", more than 0 and at most 1h");
}

// What a body must name besides its members' own rules: an api_key, or a subject with or
// without a plan.
absl::Status CheckWho(bool has_subject, bool has_plan, bool has_api_key) {
  if (has_api_key == (has_subject || has_plan)) {
    return FieldError("api_key", "give either api_key or subject and plan");
  }
  if (has_plan && !has_subject) return FieldError("subject", "required with plan");
  // A subject alone takes its plan from the registry (the caller looks it up).
  return absl::OkStatus();
}

// The body read by ScanFlat when every member it holds is valid; nullopt otherwise (the full
// parser then reads it and words the error). `fields` starts with kFields' four.
std::optional<CheckBody> ScanCheckBody(std::string_view body,
                                       absl::Span<const char* const> fields) {
  FlatValues v;
  if (!ScanFlat(body, fields, v)) return std::nullopt;
  CheckBody out;
  if ((v[0].present && !FlatString(v[0], out.subject)) ||
      (v[1].present && !FlatString(v[1], out.plan)) ||
      (v[2].present && !FlatString(v[2], out.api_key)) ||
      (v[3].present && !FlatCost(v[3], out.cost))) {
    return std::nullopt;
  }
  if (v[4].present) {
    std::optional<absl::Duration> ttl;
    if (v[4].is_string) ttl = TtlOf(v[4].text);
    if (!ttl) return std::nullopt;
    out.ttl = *ttl;
  }
  return out;
}

}  // namespace

absl::StatusOr<CheckBody> ParseCheckBody(std::string_view body, BodyOf of) {
  constexpr const char* kReserveFields[] = {"subject", "plan", "api_key", "cost", "ttl"};
  const absl::Span<const char* const> fields =
      of == BodyOf::kReserve ? absl::MakeConstSpan(kReserveFields) : absl::MakeConstSpan(kFields);
  if (std::optional<CheckBody> scanned = ScanCheckBody(body, fields)) {
    if (absl::Status s =
            CheckWho(!scanned->subject.empty(), !scanned->plan.empty(), !scanned->api_key.empty());
        !s.ok()) {
      return s;
    }
    return *std::move(scanned);
  }
  absl::StatusOr<Json> parsed = ParseObject(body, fields);
  if (!parsed.ok()) return parsed.status();
  const Json& json = *parsed;
  CheckBody out;
  const auto subject = json.find("subject");
  const auto plan = json.find("plan");
  const auto api_key = json.find("api_key");
  const auto cost = json.find("cost");
  if (subject != json.end()) {
    if (absl::Status s = ReadString("subject", *subject, out.subject); !s.ok()) return s;
  }
  if (plan != json.end()) {
    if (absl::Status s = ReadString("plan", *plan, out.plan); !s.ok()) return s;
  }
  if (api_key != json.end()) {
    if (absl::Status s = ReadString("api_key", *api_key, out.api_key); !s.ok()) return s;
  }
  if (cost != json.end()) {
    if (absl::Status s = ReadCost(*cost, out.cost); !s.ok()) return s;
  }
  if (const auto ttl = json.find("ttl"); ttl != json.end()) {
    if (absl::Status s = ReadTtl(*ttl, out.ttl); !s.ok()) return s;
  }
  if (absl::Status s = CheckWho(subject != json.end(), plan != json.end(), api_key != json.end());
      !s.ok()) {
    return s;
  }
  return out;
}

absl::StatusOr<int64_t> ParseSettleBody(std::string_view body) {
  constexpr const char* kSettleFields[] = {"cost"};
  if (FlatValues v; ScanFlat(body, kSettleFields, v) && v[0].present) {
    if (int64_t cost = 0; FlatCost(v[0], cost)) return cost;
  }
  absl::StatusOr<Json> json = ParseObject(body, kSettleFields);
  if (!json.ok()) return json.status();
  const auto cost = json->find("cost");
  if (cost == json->end()) return FieldError("cost", "required: the real cost");
  int64_t out = 0;
  if (absl::Status s = ReadCost(*cost, out); !s.ok()) return s;
  return out;
}

absl::StatusOr<absl::Duration> ParseExtendBody(std::string_view body) {
  constexpr const char* kExtendFields[] = {"ttl"};
  absl::Duration out = kDefaultReservationTtl;
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) return out;  // no body
  absl::StatusOr<Json> json = ParseObject(body, kExtendFields);
  if (!json.ok()) return json.status();
  if (const auto ttl = json->find("ttl"); ttl != json->end()) {
    if (absl::Status s = ReadTtl(*ttl, out); !s.ok()) return s;
  }
  return out;
}

absl::StatusOr<int64_t> ParseCostHeader(std::string_view value) {
  absl::StatusOr<int64_t> cost = frontend::ParseCost(value);
  if (!cost.ok()) return FieldError("Sluice-Cost", ToStd(cost.status().message()));
  return cost;
}

}  // namespace sluice::http
