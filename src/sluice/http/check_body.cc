#include "sluice/http/check_body.h"

#include <algorithm>
#include <iterator>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "sluice/common/strings.h"
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

}  // namespace

absl::StatusOr<CheckBody> ParseCheckBody(std::string_view body) {
  // The parser callback sees top-level member names in document order, so the first unknown name is
  // the one reported. It also catches repeats: nlohmann keeps the last of repeated members without
  // a word, and two readers of one body must not disagree on its subject.
  std::optional<std::string> unknown;
  const char* duplicate = nullptr;
  bool seen[std::size(kFields)] = {};
  // The member whose value is being parsed: a number nlohmann cannot hold is refused mid-parse.
  std::string member;
  const Json::parser_callback_t note_names = [&](int depth, Json::parse_event_t event,
                                                 Json& parsed) {
    if (depth != 1 || event != Json::parse_event_t::key) return true;
    const std::string& name = parsed.get_ref<const std::string&>();
    member = name.substr(0, kMaxQuotedName);
    const auto field = std::find(std::begin(kFields), std::end(kFields), name);
    if (field == std::end(kFields)) {
      // Quoted back shortened: a body may be up to 64 KiB.
      if (!unknown) unknown = name.substr(0, kMaxQuotedName);
    } else {
      bool& was_seen = seen[field - std::begin(kFields)];
      if (was_seen && duplicate == nullptr) duplicate = *field;
      was_seen = true;
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

  const bool has_subject = subject != json.end();
  const bool has_plan = plan != json.end();
  if ((api_key != json.end()) == (has_subject || has_plan)) {
    return FieldError("api_key", "give either api_key or subject and plan");
  }
  if (has_plan && !has_subject) return FieldError("subject", "required with plan");
  // A subject alone takes its plan from the registry (the caller looks it up).
  return out;
}

absl::StatusOr<int64_t> ParseCostHeader(std::string_view value) {
  absl::StatusOr<int64_t> cost = frontend::ParseCost(value);
  if (!cost.ok()) return FieldError("Sluice-Cost", ToStd(cost.status().message()));
  return cost;
}

}  // namespace sluice::http
