#include "sluice/registry/validate.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "sluice/common/strings.h"
#include "sluice/common/subject.h"
#include "sluice/config/config.h"
#include "sluice/limiter/store.h"
#include "sluice/registry/keys.h"

namespace sluice::registry {
namespace {

using nlohmann::json;

constexpr int kMaxMetadataDepth = 8;
// The body as a whole: metadata (8) inside overrides-level objects leaves room; deeper is refused
// before parsing, so no nesting reaches nlohmann's recursive functions (dump, comparisons).
constexpr int kMaxBodyDepth = 12;

absl::Status Error(std::string_view path, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(ToAbsl(path), ": ", ToAbsl(what)));
}

// A name from the request as it may appear in a message: as is when it is plainly a name, else
// JSON-quoted and cut short.
std::string Shown(std::string_view name) {
  const bool plain =
      !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
        return absl::ascii_isalnum(c) || c == '_' || c == '-' || c == '.';
      });
  if (plain) return std::string(name);
  std::string cut(name.substr(0, 64));
  return json(cut).dump(-1, ' ', true, json::error_handler_t::replace);
}

std::string Quoted(std::string_view text) {
  return json(std::string(text.substr(0, 64))).dump(-1, ' ', true, json::error_handler_t::replace);
}

// The deepest nesting of arrays and objects in `body`, counted without parsing (strings skipped).
int NestingDepth(std::string_view body) {
  int depth = 0;
  int deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      deepest = std::max(deepest, ++depth);
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return deepest;
}

int JsonDepth(const json& value) {
  int deepest = 0;
  if (value.is_object() || value.is_array()) {
    for (const json& child : value) deepest = std::max(deepest, JsonDepth(child));
    return deepest + 1;
  }
  return 0;
}

// True if `value` holds a non-integer number (a double) of 2^53 or more in magnitude: nlohmann
// reads an integer beyond 64 bits as one, and 9007199254740993.0 reads as 2^53, so its text may
// have held digits the value has lost.
bool HasInexactInteger(const json& value) {
  if (value.is_object() || value.is_array()) {
    return std::any_of(value.begin(), value.end(),
                       [](const json& v) { return HasInexactInteger(v); });
  }
  if (!value.is_number_float()) return false;
  return std::abs(value.get<double>()) >= 9007199254740992.0;
}

absl::StatusOr<json> ParseObject(std::string_view body, bool empty_is_object) {
  if (empty_is_object && absl::StripAsciiWhitespace(ToAbsl(body)).empty()) return json::object();
  if (NestingDepth(body) > kMaxBodyDepth) {
    return Error("body", absl::StrCat("nested deeper than ", kMaxBodyDepth, " levels"));
  }
  // nlohmann keeps the last of repeated members without a word; a body that says two things
  // about one field is refused instead (the member names of each object, as parsed).
  std::vector<std::vector<std::string>> names;
  // The member being parsed in each open object, outermost first: where a number nlohmann
  // refuses mid-parse lies ("overrides.daily.quota").
  std::vector<std::string> path;
  std::optional<std::string> repeated;
  const json::parser_callback_t note = [&](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) {
      names.emplace_back();
      path.emplace_back();
    } else if (event == json::parse_event_t::object_end && !names.empty()) {
      names.pop_back();
      path.pop_back();
    } else if (event == json::parse_event_t::key && !names.empty()) {
      const std::string& name = parsed.get_ref<const std::string&>();
      path.back() = Shown(name);
      std::vector<std::string>& seen = names.back();
      if (std::find(seen.begin(), seen.end(), name) != seen.end()) {
        if (!repeated) repeated = name;
      } else {
        seen.push_back(name);
      }
    }
    return true;
  };
  // JSON text never holds a raw NUL, and nlohmann's parser takes one for the end of its input:
  // what followed would be ignored rather than refused.
  if (body.find('\0') != std::string_view::npos)
    return Error("body", "malformed JSON (a NUL byte)");
  json value;
  try {
    value = json::parse(body.begin(), body.end(), note);
  } catch (const json::parse_error& e) {
    return Error("body", absl::StrCat("malformed JSON at byte ", e.byte));
  } catch (const json::out_of_range& e) {
    // 406: a number beyond a double's range (1e400, or an integer of hundreds of digits), which
    // nlohmann refuses rather than read as infinity. The body is JSON with a value out of range:
    // the member holding it is named (a repeat found before it first, as below).
    if (e.id != 406) return Error("body", "malformed JSON");
    if (repeated) return Error("body", absl::StrCat("member ", Shown(*repeated), " given twice"));
    return absl::OutOfRangeError(
        absl::StrCat(path.empty() ? "body" : absl::StrJoin(path, "."), ": number out of range"));
  } catch (const json::exception& e) {
    return Error("body", "malformed JSON");
  }
  if (!value.is_object()) return Error("body", "must be a JSON object");
  if (repeated) return Error("body", absl::StrCat("member ", Shown(*repeated), " given twice"));
  return value;
}

absl::Status RefuseUnknown(const json& object, std::string_view prefix,
                           std::initializer_list<std::string_view> known) {
  for (const auto& [name, value] : object.items()) {
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      return Error(absl::StrCat(ToAbsl(prefix), Shown(name)), "unknown field");
    }
  }
  return absl::OkStatus();
}

const json* Get(const json& object, const char* name) {
  auto it = object.find(name);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

// A string field; "" when absent, null or "".
absl::StatusOr<std::string> OptionalString(const json& object, const char* name) {
  const json* value = Get(object, name);
  if (value == nullptr) return std::string();
  if (!value->is_string()) return Error(name, "must be a string");
  return value->get<std::string>();
}

bool VisibleAscii(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) { return c > ' ' && c < 0x7f; });
}

// The rules config.cc applies to a key's email, webhook and webhook_secret (not exported by
// config, so repeated here; keep them alike).
// What the email sink does not send to: a display name, a list, a quoted or commented part.
constexpr std::string_view kAddressSpecials = "<>,;\"\\()[]";

bool IsEmail(std::string_view text) {
  const size_t at = text.find('@');
  return text.size() <= kMaxEmailBytes && at != std::string_view::npos && at > 0 &&
         at + 1 < text.size() && text.find('@', at + 1) == std::string_view::npos &&
         VisibleAscii(text) && text.find_first_of(kAddressSpecials) == std::string_view::npos;
}

bool IsHttpUrl(std::string_view text) {
  const auto after = [text](std::string_view scheme) {
    return text.starts_with(scheme) && text.size() > scheme.size();
  };
  return text.size() <= kMaxUrlBytes && (after("http://") || after("https://")) &&
         VisibleAscii(text);
}

bool IsWebhookSecret(std::string_view text) {
  if (text.size() > kMaxSecretBytes || !text.starts_with("whsec_")) return false;
  const std::string_view b64 = text.substr(6);
  std::string decoded;
  return !b64.empty() &&
         std::all_of(
             b64.begin(), b64.end(),
             [](char c) { return absl::ascii_isalnum(c) || c == '+' || c == '/' || c == '='; }) &&
         absl::Base64Unescape(ToAbsl(b64), &decoded) && !decoded.empty();
}

absl::StatusOr<absl::Time> FutureTime(const json& value, std::string_view path, absl::Time now) {
  constexpr std::string_view kWant = "must be an RFC 3339 time in the future, before year 10000";
  if (!value.is_string()) return Error(path, kWant);
  absl::StatusOr<absl::Time> t = ParseRfc3339(value.get_ref<const std::string&>());
  // 9999-12-31T23:00:00-01:00 is in year 10000 in UTC, the form it is shown in: a five-digit
  // year is no RFC 3339 time.
  static const absl::Time kYear10000 =
      absl::FromCivil(absl::CivilSecond(10000, 1, 1), absl::UTCTimeZone());
  if (!t.ok() || *t <= now || *t >= kYear10000) return Error(path, kWant);
  return *t;
}

absl::StatusOr<std::vector<Override>> ParseOverrides(const json& value, const Plan& plan,
                                                     absl::Time now) {
  if (!value.is_object()) return Error("overrides", "must be a JSON object of limit names");
  if (value.size() > kMaxOverrides) {
    return Error("overrides", absl::StrCat("at most ", kMaxOverrides, " limits"));
  }
  std::vector<Override> overrides;
  for (const auto& [limit, spec] : value.items()) {  // a json object iterates sorted by name
    const std::string path = absl::StrCat("overrides.", Shown(limit));
    if (plan.FindLimit(limit) < 0) {
      return Error(path, absl::StrCat("no limit ", Quoted(limit), " in plan ", Quoted(plan.name)));
    }
    if (!spec.is_object()) return Error(path, "must be an object with a quota");
    if (absl::Status s = RefuseUnknown(spec, absl::StrCat(path, "."), {"quota", "until"});
        !s.ok()) {
      return s;
    }
    Override o{.limit = limit};
    const json* quota = Get(spec, "quota");
    const std::string quota_path = absl::StrCat(path, ".quota");
    const std::string want = absl::StrCat("must be an integer from 1 to ", kMaxUsed);
    if (quota == nullptr) return Error(quota_path, absl::StrCat("required; ", want));
    if (quota->is_number_unsigned()) {
      const uint64_t q = quota->get<uint64_t>();
      if (q < 1 || q > static_cast<uint64_t>(kMaxUsed)) return Error(quota_path, want);
      o.quota = static_cast<int64_t>(q);
    } else if (quota->is_number_integer()) {
      const int64_t q = quota->get<int64_t>();
      if (q < 1 || q > kMaxUsed) return Error(quota_path, want);
      o.quota = q;
    } else {
      return Error(quota_path, want);
    }
    // A sliding or gcra limit enforces only some quotas (docs/configuration.md, Algorithms).
    const Limit& target = plan.limits[static_cast<size_t>(plan.FindLimit(limit))];
    if (!QuotaFits(target, o.quota)) {
      return Error(quota_path,
                   target.algorithm == config::Algorithm::kSliding
                       ? absl::StrCat("at most ", config::kMaxSlidingCount, " for a sliding limit")
                       : absl::StrCat("a gcra limit admits at most one unit per microsecond and "
                                      "an interval (window / quota) of whole microseconds below "
                                      "1ms: at most ",
                                      absl::ToInt64Microseconds(target.window.length),
                                      " for window ", target.window.text));
    }
    if (const json* until = Get(spec, "until")) {
      absl::StatusOr<absl::Time> t = FutureTime(*until, absl::StrCat(path, ".until"), now);
      if (!t.ok()) return t.status();
      o.until = *t;
    }
    overrides.push_back(std::move(o));
  }
  return overrides;
}

// RFC 3339's date-time, section 5.6, to the letter: "YYYY-MM-DDTHH:MM:SS", an optional
// fraction of one or more digits, then "Z" or "+HH:MM" / "-HH:MM" ("T" and "Z" in either case);
// each field within its range (second 60 for a leap second).
bool IsRfc3339DateTime(std::string_view text) {
  size_t at = 0;
  // The next `width` characters as a number within [low, high].
  const auto number = [&text, &at](size_t width, int low, int high) {
    if (text.size() - at < width) return false;
    int value = 0;
    for (size_t i = 0; i < width; ++i) {
      const char c = text[at + i];
      if (!absl::ascii_isdigit(c)) return false;
      value = value * 10 + (c - '0');
    }
    at += width;
    return value >= low && value <= high;
  };
  const auto literal = [&text, &at](std::string_view any_of) {
    if (at >= text.size() || any_of.find(text[at]) == std::string_view::npos) return false;
    ++at;
    return true;
  };
  if (!(number(4, 0, 9999) && literal("-") && number(2, 1, 12) && literal("-") &&
        number(2, 1, 31) && literal("Tt") && number(2, 0, 23) && literal(":") && number(2, 0, 59) &&
        literal(":") && number(2, 0, 60))) {
    return false;
  }
  if (literal(".")) {
    const size_t digits = at;
    while (at < text.size() && absl::ascii_isdigit(text[at])) ++at;
    if (at == digits) return false;
  }
  if (literal("Zz")) return at == text.size();
  return literal("+-") && number(2, 0, 23) && literal(":") && number(2, 0, 59) && at == text.size();
}

json TimeOrNull(const std::optional<absl::Time>& t) {
  return t ? json(FormatRfc3339(*t)) : json(nullptr);
}

json StringOrNull(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

}  // namespace

absl::StatusOr<absl::Time> ParseRfc3339(std::string_view text) {
  // absl's parser is lenient where RFC 3339 is not: it takes an offset without its colon
  // (+0530), one-digit fields, surrounding spaces, "infinite-future" and years past 9999. The
  // grammar is checked here first; absl then reads the fields and refuses a day the month lacks.
  if (!IsRfc3339DateTime(text)) {
    return absl::InvalidArgumentError("not an RFC 3339 time (2030-01-01T00:00:00Z)");
  }
  absl::Time t;
  std::string error;
  if (!absl::ParseTime(absl::RFC3339_full, ToAbsl(text), &t, &error)) {
    return absl::InvalidArgumentError("not an RFC 3339 time (2030-01-01T00:00:00Z)");
  }
  return t;
}

std::string FormatRfc3339(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t, absl::UTCTimeZone());
}

absl::StatusOr<Subject> ParseSubjectBody(std::string_view id, std::string_view body,
                                         const PlanSet& plans, absl::Time now) {
  if (!IsValidSubject(id)) {
    return Error("id", "must be 1-200 bytes of A-Z a-z 0-9 . _ : @ / + = -");
  }
  if (IsRuleSubject(id)) {
    return Error("id",
                 "subjects beginning \"rl:\" are reserved (envoy.ratelimit_config's counters)");
  }
  absl::StatusOr<json> parsed = ParseObject(body, /*empty_is_object=*/true);
  if (!parsed.ok()) return parsed.status();
  const json& object = *parsed;
  if (absl::Status s = RefuseUnknown(
          object, "",
          {"plan", "email", "webhook", "webhook_secret", "metadata", "disabled", "overrides"});
      !s.ok()) {
    return s;
  }
  Subject subject;
  subject.id = std::string(id);

  const json* plan_value = Get(object, "plan");
  if (plan_value == nullptr) return Error("plan", "required");
  if (!plan_value->is_string()) return Error("plan", "must be a string");
  subject.plan = plan_value->get<std::string>();
  const Plan* plan = plans.Find(subject.plan);
  if (plan == nullptr) return Error("plan", absl::StrCat("unknown plan ", Quoted(subject.plan)));

  absl::StatusOr<std::string> email = OptionalString(object, "email");
  if (!email.ok()) return email.status();
  if (!email->empty() && !IsEmail(*email)) {
    return Error("email", absl::StrCat("must be an email address (name@domain, at most ",
                                       kMaxEmailBytes, " bytes, no spaces, none of <>,;\"\\()[])"));
  }
  subject.email = *std::move(email);

  absl::StatusOr<std::string> webhook = OptionalString(object, "webhook");
  if (!webhook.ok()) return webhook.status();
  if (!webhook->empty() && !IsHttpUrl(*webhook)) {
    return Error("webhook", absl::StrCat("must be an http or https URL of at most ", kMaxUrlBytes,
                                         " visible ASCII bytes"));
  }
  subject.webhook = *std::move(webhook);

  absl::StatusOr<std::string> secret = OptionalString(object, "webhook_secret");
  if (!secret.ok()) return secret.status();
  if (!secret->empty()) {
    if (!IsWebhookSecret(*secret)) {
      return Error("webhook_secret",
                   absl::StrCat("must start with whsec_ followed by base64 (Standard Webhooks), "
                                "at most ",
                                kMaxSecretBytes, " bytes"));
    }
    if (subject.webhook.empty()) return Error("webhook_secret", "set without a webhook to sign");
  }
  subject.webhook_secret = *std::move(secret);

  if (const json* metadata = Get(object, "metadata")) {
    const std::string want =
        absl::StrCat("must be a JSON object of at most ", kMaxMetadataBytes, " bytes");
    if (!metadata->is_object()) return Error("metadata", want);
    if (JsonDepth(*metadata) > kMaxMetadataDepth) {
      return Error("metadata", absl::StrCat("nested deeper than ", kMaxMetadataDepth, " levels"));
    }
    if (HasInexactInteger(*metadata)) {
      return Error("metadata",
                   "holds a number of 2^53 or more that would not be kept exactly (send it "
                   "as a string)");
    }
    std::string compact = metadata->dump(-1, ' ', false, json::error_handler_t::replace);
    if (compact.size() > kMaxMetadataBytes) return Error("metadata", want);
    subject.metadata = std::move(compact);
  }

  if (const json* disabled = Get(object, "disabled")) {
    if (!disabled->is_boolean()) return Error("disabled", "must be true or false");
    subject.disabled = disabled->get<bool>();
  }

  if (const json* overrides = Get(object, "overrides")) {
    absl::StatusOr<std::vector<Override>> parsed_overrides = ParseOverrides(*overrides, *plan, now);
    if (!parsed_overrides.ok()) return parsed_overrides.status();
    subject.overrides = *std::move(parsed_overrides);
  }
  return subject;
}

absl::StatusOr<KeyRequest> ParseKeyBody(std::string_view body, absl::Time now) {
  absl::StatusOr<json> parsed = ParseObject(body, /*empty_is_object=*/true);
  if (!parsed.ok()) return parsed.status();
  const json& object = *parsed;
  if (absl::Status s = RefuseUnknown(object, "", {"name", "expires_at", "key_sha256"}); !s.ok()) {
    return s;
  }
  KeyRequest request;
  absl::StatusOr<std::string> name = OptionalString(object, "name");
  if (!name.ok()) return name.status();
  // Printable: no control characters (nlohmann has already checked that it is UTF-8).
  if (name->size() > kMaxKeyNameBytes || std::any_of(name->begin(), name->end(), [](char c) {
        return static_cast<unsigned char>(c) < ' ' || c == 0x7f;
      })) {
    return Error("name", absl::StrCat("must be at most ", kMaxKeyNameBytes,
                                      " bytes of printable characters"));
  }
  request.name = *std::move(name);
  if (const json* expires = Get(object, "expires_at")) {
    absl::StatusOr<absl::Time> t = FutureTime(*expires, "expires_at", now);
    if (!t.ok()) return t.status();
    request.expires_at = *t;
  }
  if (const json* digest = Get(object, "key_sha256")) {
    constexpr std::string_view kWant = "must be 64 hex digits (the SHA-256 of the key)";
    if (!digest->is_string()) return Error("key_sha256", kWant);
    absl::StatusOr<Digest> d = ParseDigestHex(digest->get_ref<const std::string&>());
    if (!d.ok()) return Error("key_sha256", kWant);
    request.imported_digest = *d;
  }
  return request;
}

absl::StatusOr<CreditRequest> ParseCreditBody(std::string_view body) {
  absl::StatusOr<json> parsed = ParseObject(body, /*empty_is_object=*/true);
  if (!parsed.ok()) return parsed.status();
  const json& object = *parsed;
  if (absl::Status s = RefuseUnknown(object, "", {"add", "reason"}); !s.ok()) return s;
  CreditRequest request;
  const std::string want = absl::StrCat("must be an integer from 1 to ", kMaxCredits);
  const json* add = Get(object, "add");
  if (add == nullptr) return Error("add", absl::StrCat("required; ", want));
  if (add->is_number_unsigned()) {
    const uint64_t n = add->get<uint64_t>();
    if (n < 1 || n > static_cast<uint64_t>(kMaxCredits)) return Error("add", want);
    request.add = static_cast<int64_t>(n);
  } else if (add->is_number_integer()) {
    const int64_t n = add->get<int64_t>();
    if (n < 1 || n > kMaxCredits) return Error("add", want);
    request.add = n;
  } else {
    return Error("add", want);
  }
  absl::StatusOr<std::string> reason = OptionalString(object, "reason");
  if (!reason.ok()) return reason.status();
  // Printable: no control characters (nlohmann has already checked that it is UTF-8).
  if (reason->size() > kMaxCreditReasonBytes ||
      std::any_of(reason->begin(), reason->end(),
                  [](char c) { return static_cast<unsigned char>(c) < ' ' || c == 0x7f; })) {
    return Error("reason", absl::StrCat("must be at most ", kMaxCreditReasonBytes,
                                        " bytes of printable characters"));
  }
  request.reason = *std::move(reason);
  return request;
}

json CreditGrantJson(const CreditGrant& grant) {
  return {
      {"seq", grant.seq},       {"at", FormatRfc3339(grant.at)},
      {"amount", grant.amount}, {"reason", StringOrNull(grant.reason)},
      {"actor", grant.actor},   {"balance", grant.balance},
  };
}

json SubjectJson(const Subject& subject) {
  json overrides = json::object();
  for (const Override& o : subject.overrides) {
    overrides[o.limit] = {{"quota", o.quota}, {"until", TimeOrNull(o.until)}};
  }
  json metadata = json::parse(subject.metadata, nullptr, /*allow_exceptions=*/false);
  if (!metadata.is_object()) metadata = json::object();
  return {
      {"id", subject.id},
      {"plan", subject.plan},
      {"email", StringOrNull(subject.email)},
      {"webhook", StringOrNull(subject.webhook)},
      {"webhook_secret_set", !subject.webhook_secret.empty()},
      {"metadata", std::move(metadata)},
      {"disabled", subject.disabled},
      {"overrides", std::move(overrides)},
      {"created_at", FormatRfc3339(subject.created_at)},
      {"updated_at", FormatRfc3339(subject.updated_at)},
  };
}

json KeyJson(const Key& key) {
  return {
      {"id", KeyIdText(key.id)},
      {"subject", key.subject},
      {"prefix", StringOrNull(key.prefix)},
      {"name", StringOrNull(key.name)},
      {"expires_at", TimeOrNull(key.expires_at)},
      {"created_at", FormatRfc3339(key.created_at)},
      {"imported", key.prefix.empty()},
  };
}

}  // namespace sluice::registry
