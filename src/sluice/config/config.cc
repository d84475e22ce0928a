// Reads sluice.yaml into the structs of config.h and validates every field (docs/configuration.md).
//
// A section is read in two steps: first its map is checked for unknown and repeated field names
// (yaml-cpp 0.7 keeps a repeated key without a word, so every pair is looked at here), then each
// field is read by a typed reader that leaves the default in place when the field is absent or
// written without a value. Whether the values make sense (names, ranges, uniqueness, references,
// time zones, URLs, secrets) is then checked on the whole Config by Validate(), which a Config
// built in code goes through too. Errors are built as "<key.path>: <what is wrong>"; ParseConfig
// prefixes the source. Messages never quote API keys, tokens, secrets or URLs (a URL may carry a
// password or a Slack token): only names, numbers and other values that are safe to log.
#include "sluice/config/config.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <functional>
#include <initializer_list>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "sluice/common/subject.h"
#include "sluice/config/yaml_document.h"

namespace sluice::config {
namespace {

constexpr int64_t kMaxQuota = 1'000'000'000'000'000;  // the limiter's arithmetic relies on it
constexpr size_t kMaxAlertThresholds = 16;
constexpr size_t kMaxNameLength = 64;
constexpr size_t kMaxKeyPrefixLength = 32;
constexpr size_t kMaxApiKeyLength = 512;
constexpr size_t kMaxEmailLength = 254;
constexpr size_t kMaxPathLength = 4096;           // PATH_MAX
constexpr int64_t kMaxWindowCount = 100'000'000;  // N of Ns/Nm/Nh read before the cap below
// The longest fixed window: as long as the longest month. No window outlives a leap year (a
// `year`), so every counter expires within 366 days and a grace period, which the memory store's
// snapshot relies on (it drops records that claim to live longer) and which keeps every expiry
// far inside its 32-bit seconds.
const absl::Duration kMaxFixedWindow = absl::Hours(24 * 31);
constexpr absl::string_view kNameRule = "1-64 characters of A-Z a-z 0-9 _ . -";

// The variables ApplyEnvironment reads.
constexpr char kRedisUrlVariable[] = "SLUICE_REDIS_URL";
constexpr char kRedisPasswordFileVariable[] = "SLUICE_REDIS_PASSWORD_FILE";

// What a configuration file may hold before yaml-cpp builds a tree of it: a hostile or mistaken
// file (a device, a log, a deeply nested or alias-bomb document) is refused with a message instead
// of exhausting memory, time or the stack.
constexpr size_t kMaxFileBytes = size_t{16} << 20;  // 16 MiB
constexpr size_t kMaxDepth = 64;                    // the schema itself needs 6 levels
// Values in the document with every alias expanded: an alias costs as much as what it names, so a
// "billion laughs" document is refused before the config structs copy it out.
constexpr uint64_t kMaxExpandedValues = 4'000'000;  // ~570,000 keys in the file
// yaml-cpp reads a whole flow collection ("[a, b, ...]") ahead before it reports any of it, at a
// few hundred bytes per entry, so BoundsCheck alone would stop an 8-million-entry list only after
// gigabytes. Every entry but the last follows a ',', so counting commas (wherever they are) bounds
// that before parsing; a real configuration has a few per key at most.
constexpr size_t kMaxCommas = 2'000'000;

// Duration bounds (docs/configuration.md lists them). A value outside them is a typo or a unit
// mix-up: a 3,000,000h Redis timeout would hold every decision as long as Redis is slow.
constexpr absl::Duration kMinSnapshotInterval = absl::Milliseconds(100);
constexpr absl::Duration kMaxSnapshotInterval = absl::Hours(1);
constexpr absl::Duration kMinRedisTimeout = absl::Milliseconds(1);
constexpr absl::Duration kMaxRedisTimeout = absl::Seconds(10);
constexpr absl::Duration kMaxRedisMaxWait = absl::Seconds(60);
constexpr absl::Duration kMinAlertLease = absl::Seconds(1);
constexpr absl::Duration kMaxAlertLease = absl::Hours(1);
constexpr absl::Duration kMinRetryDelay = absl::Milliseconds(100);
constexpr absl::Duration kMaxRetryFirstDelay = absl::Hours(1);
constexpr absl::Duration kMaxRetryMaxDelay = absl::Hours(24);

// ---------------------------------------------------------------------------------------------
// Plain validators.

// Debian's abseil is built with its own absl::string_view (not an alias of std::string_view), which
// absl's string functions take; config.h speaks std::string_view.
absl::string_view FromStd(std::string_view text) { return {text.data(), text.size()}; }

// User text for an error message: quoted, escaped, and cut after 80 bytes.
std::string Quote(absl::string_view text) {
  constexpr size_t kMaxShown = 80;
  if (text.size() > kMaxShown) {
    return absl::StrCat("\"", absl::CHexEscape(text.substr(0, kMaxShown)), "...\"");
  }
  return absl::StrCat("\"", absl::CHexEscape(text), "\"");
}

bool AllOf(absl::string_view text, bool (*pred)(char)) {
  return std::all_of(text.begin(), text.end(), pred);
}

bool IsNameChar(char c) { return absl::ascii_isalnum(c) || c == '_' || c == '.' || c == '-'; }
bool IsVisibleAscii(char c) { return c > ' ' && c < 0x7f; }
bool IsDigit(char c) { return absl::ascii_isdigit(c); }
bool IsLowerHex(char c) { return absl::ascii_isdigit(c) || (c >= 'a' && c <= 'f'); }

// [A-Za-z0-9_.-]{1,max_length}: plan, limit and key prefix names.
bool IsValidName(absl::string_view name, size_t max_length) {
  return !name.empty() && name.size() <= max_length && AllOf(name, IsNameChar);
}

size_t CountLeadingDigits(absl::string_view text) {
  return static_cast<size_t>(std::find_if_not(text.begin(), text.end(), IsDigit) - text.begin());
}

bool IsIpv4(absl::string_view text) {
  in_addr address;
  return inet_pton(AF_INET, std::string(text).c_str(), &address) == 1;
}

bool IsIpv6(absl::string_view text) {
  in6_addr address;
  return inet_pton(AF_INET6, std::string(text).c_str(), &address) == 1;
}

// "ip:port" with an IPv4 address or a bracketed IPv6 one ("[::1]:8080"), port 1-65535. Host names
// are refused: which of a name's addresses to bind would be a guess.
bool IsValidListenAddress(absl::string_view text) {
  absl::string_view port;
  if (absl::ConsumePrefix(&text, "[")) {
    const size_t close = text.find("]:");
    if (close == absl::string_view::npos || !IsIpv6(text.substr(0, close))) return false;
    port = text.substr(close + 2);
  } else {
    const size_t colon = text.find(':');
    if (colon == absl::string_view::npos || !IsIpv4(text.substr(0, colon))) return false;
    port = text.substr(colon + 1);
  }
  int value = 0;
  return !port.empty() && port.size() <= 5 && AllOf(port, IsDigit) &&
         absl::SimpleAtoi(port, &value) && value >= 1 && value <= 65535;
}

// An IPv4 or IPv6 address, optionally followed by "/prefix" (0-32 or 0-128).
bool IsValidCidr(absl::string_view text) {
  const size_t slash = text.find('/');
  const absl::string_view address = text.substr(0, slash);
  const bool v4 = IsIpv4(address);
  if (!v4 && !IsIpv6(address)) return false;
  if (slash == absl::string_view::npos) return true;
  const absl::string_view prefix = text.substr(slash + 1);
  int bits = 0;
  return !prefix.empty() && prefix.size() <= 3 && AllOf(prefix, IsDigit) &&
         absl::SimpleAtoi(prefix, &bits) && bits <= (v4 ? 32 : 128);
}

// An HTTP field name (RFC 9110 token).
bool IsHttpToken(absl::string_view text) {
  return !text.empty() && AllOf(text, [](char c) {
    return absl::ascii_isalnum(c) ||
           absl::string_view("!#$%&'*+-.^_`|~").find(c) != absl::string_view::npos;
  });
}

// Exactly one '@' with text on both sides; no spaces or control characters.
bool IsValidEmail(absl::string_view text) {
  const size_t at = text.find('@');
  return text.size() <= kMaxEmailLength && at != absl::string_view::npos && at > 0 &&
         at + 1 < text.size() && text.find('@', at + 1) == absl::string_view::npos &&
         AllOf(text, IsVisibleAscii) &&
         // What the email sink does not send to: a display name, a list, a quoted part.
         text.find_first_of("<>,;\"\\()[]") == absl::string_view::npos;
}

// A URL with one of `schemes` ("http://") and something after it, in visible ASCII.
bool IsUrl(absl::string_view text, std::initializer_list<absl::string_view> schemes) {
  return std::any_of(schemes.begin(), schemes.end(),
                     [text](absl::string_view scheme) {
                       return absl::StartsWith(text, scheme) && text.size() > scheme.size();
                     }) &&
         AllOf(text, IsVisibleAscii);
}

// "whsec_" followed by standard base64 (Standard Webhooks).
bool IsWebhookSecret(absl::string_view text) {
  std::string decoded;
  return absl::ConsumePrefix(&text, "whsec_") && !text.empty() &&
         AllOf(text,
               [](char c) { return absl::ascii_isalnum(c) || c == '+' || c == '/' || c == '='; }) &&
         absl::Base64Unescape(text, &decoded) && !decoded.empty();
}

// An IANA zone name that abseil can load. Names abseil would read as paths or as its own
// extensions ("/etc/...", "../", "localtime", "Fixed/UTC+01:00") are not IANA names.
bool IsKnownTimeZone(absl::string_view name) {
  const bool plausible =
      !name.empty() && name.front() != '/' && name != "localtime" &&
      !absl::StrContains(name, "..") && AllOf(name, [](char c) {
        return absl::ascii_isalnum(c) || c == '/' || c == '_' || c == '+' || c == '-';
      });
  absl::TimeZone zone;
  return plausible && absl::LoadTimeZone(std::string(name), &zone);
}

// ---------------------------------------------------------------------------------------------
// Reading YAML nodes.

using yaml::kUndefinedValue;
using yaml::Value;

absl::Status Error(absl::string_view path, absl::string_view what) {
  return absl::InvalidArgumentError(path.empty() ? std::string(what)
                                                 : absl::StrCat(path, ": ", what));
}

// Never the scalar's text: it may be a secret written in the wrong place.
absl::string_view KindOf(const Value& node) {
  switch (node.kind) {
    case Value::Kind::kMap:
      return "a map";
    case Value::Kind::kSequence:
      return "a list";
    case Value::Kind::kScalar:
      return "a scalar";
    default:
      return "nothing";
  }
}

// One value of the document and the key path that names it in errors.
struct Field {
  const Value* node = &kUndefinedValue;  // never null
  std::string path;

  // Left out, or written without a value (`name:` or `name: ~`): both mean "use the default".
  [[nodiscard]] bool absent() const { return !node->IsDefined() || node->IsNull(); }
};

// The fields of one YAML map, in file order.
struct Fields {
  std::string path;
  std::vector<std::pair<absl::string_view, const Value*>> items;  // names point into the document

  // The field `name` (absent() if the map does not have it).
  [[nodiscard]] Field Get(absl::string_view name) const {
    Field field{&kUndefinedValue, path.empty() ? std::string(name) : absl::StrCat(path, ".", name)};
    for (const auto& [item_name, node] : items) {
      if (item_name == name) field.node = node;
    }
    return field;
  }
};

// Reads the map `field` into `fields`, refusing names outside `allowed` and repeated names. An
// absent field reads as an empty map.
absl::Status ReadFields(const Field& field, std::initializer_list<absl::string_view> allowed,
                        Fields& fields) {
  fields.path = field.path;
  if (field.absent()) return absl::OkStatus();
  if (!field.node->IsMap()) {
    return Error(field.path, absl::StrCat("expected a map, got ", KindOf(*field.node)));
  }
  // The path of a field is built only for an error: a file with 150,000 keys reads 450,000 fields.
  const auto path_of = [&field](absl::string_view name) {
    const std::string escaped = absl::CHexEscape(name);
    return field.path.empty() ? escaped : absl::StrCat(field.path, ".", escaped);
  };
  fields.items.reserve(field.node->pairs.size());
  for (const auto& [key, value] : field.node->pairs) {
    if (!key->IsScalar()) return Error(field.path, "field names must be plain strings");
    const std::string& name = key->Scalar();
    if (std::find(allowed.begin(), allowed.end(), name) == allowed.end()) {
      return Error(
          path_of(name),
          absl::StrCat("unknown field (expected one of: ", absl::StrJoin(allowed, ", "), ")"));
    }
    for (const auto& item : fields.items) {
      if (item.first == name) return Error(path_of(name), "duplicate field");
    }
    fields.items.emplace_back(name, value);
  }
  return absl::OkStatus();
}

absl::Status Require(const Field& field) {
  return field.absent() ? Error(field.path, "missing required field") : absl::OkStatus();
}

absl::Status ReadString(const Field& field, std::string& out) {
  if (field.absent()) return absl::OkStatus();
  if (!field.node->IsScalar()) {
    return Error(field.path, absl::StrCat("expected a string, got ", KindOf(*field.node)));
  }
  out = field.node->Scalar();
  return absl::OkStatus();
}

absl::Status ReadInt64(const Field& field, int64_t min, int64_t max, int64_t& out) {
  if (field.absent()) return absl::OkStatus();
  if (!field.node->IsScalar()) {
    return Error(field.path, absl::StrCat("expected an integer, got ", KindOf(*field.node)));
  }
  const std::string& text = field.node->Scalar();
  absl::string_view digits = text;
  absl::ConsumePrefix(&digits, "-");
  if (digits.empty() || !AllOf(digits, IsDigit)) {
    return Error(field.path, absl::StrCat("expected an integer, got ", Quote(text)));
  }
  int64_t value = 0;
  if (!absl::SimpleAtoi(text, &value) || value < min || value > max) {
    return Error(field.path, absl::StrCat("must be between ", min, " and ", max, ", got ", text));
  }
  out = value;
  return absl::OkStatus();
}

// `true` or `false`, nothing else (YAML 1.1's yes/no/on/off are refused: they surprise).
absl::Status ReadBool(const Field& field, bool& out) {
  if (field.absent()) return absl::OkStatus();
  if (field.node->IsScalar()) {
    const std::string& text = field.node->Scalar();
    if (text == "true" || text == "false") {
      out = text == "true";
      return absl::OkStatus();
    }
    return Error(field.path, absl::StrCat("expected true or false, got ", Quote(text)));
  }
  return Error(field.path, absl::StrCat("expected true or false, got ", KindOf(*field.node)));
}

absl::Status ReadInt(const Field& field, int min, int max, int& out) {
  int64_t value = out;
  SLUICE_RETURN_IF_ERROR(ReadInt64(field, min, max, value));
  out = static_cast<int>(value);
  return absl::OkStatus();
}

absl::Status ReadDuration(const Field& field, absl::Duration& out) {
  if (field.absent()) return absl::OkStatus();
  if (!field.node->IsScalar()) {
    return Error(field.path, absl::StrCat("expected a duration, got ", KindOf(*field.node)));
  }
  absl::StatusOr<absl::Duration> duration = ParseDuration(field.node->Scalar());
  if (!duration.ok()) return Error(field.path, duration.status().message());
  out = *duration;
  return absl::OkStatus();
}

// Reads a string that must be one of `choices`; `what` names it in the error ("store type").
template <typename E>
absl::Status ReadEnum(const Field& field, absl::string_view what,
                      std::initializer_list<std::pair<absl::string_view, E>> choices, E& out) {
  std::string text;
  if (field.absent()) return absl::OkStatus();
  SLUICE_RETURN_IF_ERROR(ReadString(field, text));
  std::string wanted;
  size_t index = 0;
  for (const auto& [name, value] : choices) {
    if (name == text) {
      out = value;
      return absl::OkStatus();
    }
    absl::StrAppend(&wanted, index == 0 ? "" : (index + 1 == choices.size() ? " or " : ", "), name);
    ++index;
  }
  return Error(field.path,
               absl::StrCat("unknown ", what, " ", Quote(text), " (want ", wanted, ")"));
}

// Calls each(item, index) for every element of the list `field`; items are named "path[index]".
template <typename Fn>
absl::Status ForEachItem(const Field& field, Fn&& each) {
  if (field.absent()) return absl::OkStatus();
  if (!field.node->IsSequence()) {
    return Error(field.path, absl::StrCat("expected a list, got ", KindOf(*field.node)));
  }
  size_t index = 0;
  for (const Value* node : field.node->items) {
    SLUICE_RETURN_IF_ERROR(each(Field{node, absl::StrCat(field.path, "[", index, "]")}, index));
    ++index;
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Sections.

absl::Status ParseAdminTokens(const Field& field, std::vector<AdminTokenConfig>& tokens) {
  return ForEachItem(field, [&](const Field& item, size_t) {
    Fields f;
    SLUICE_RETURN_IF_ERROR(ReadFields(item, {"name", "token", "token_sha256", "access"}, f));
    AdminTokenConfig token;
    const Field name = f.Get("name");
    SLUICE_RETURN_IF_ERROR(Require(name));
    SLUICE_RETURN_IF_ERROR(ReadString(name, token.name));
    const Field plain = f.Get("token");
    const Field hashed = f.Get("token_sha256");
    if (plain.absent() == hashed.absent()) {
      return Error(item.path, "set exactly one of token and token_sha256");
    }
    SLUICE_RETURN_IF_ERROR(ReadString(plain, token.token));
    SLUICE_RETURN_IF_ERROR(ReadString(hashed, token.token_sha256));
    bool write = false;
    SLUICE_RETURN_IF_ERROR(
        ReadEnum(f.Get("access"), "access", {{"read", false}, {"write", true}}, write));
    token.write = write;
    tokens.push_back(std::move(token));
    return absl::OkStatus();
  });
}

// True if `path` is `ancestor` or lies below it, segment-wise ("/v1" is above "/v1/check", not
// above "/v1x").
bool SameOrBelow(absl::string_view path, absl::string_view ancestor) {
  return path == ancestor || (absl::StartsWith(path, ancestor) && path.size() > ancestor.size() &&
                              path[ancestor.size()] == '/');
}

// server.authorize_prefix: the gateway route is this path and everything below it, so it must be
// a plain path that cannot be read two ways (no query, no escapes, no dot segments, no empty
// segment and so no trailing slash) and must not swallow or sit under another data-plane route.
absl::Status ReadAuthorizePrefix(const Field& field, std::string& prefix) {
  SLUICE_RETURN_IF_ERROR(ReadString(field, prefix));
  if (prefix.empty() || prefix.front() != '/') {
    return Error(field.path, absl::StrCat("must start with /, got ", Quote(prefix)));
  }
  if (prefix.size() > kMaxAuthorizePrefixLength) {
    return Error(field.path, absl::StrCat("must be at most ", kMaxAuthorizePrefixLength,
                                          " characters, got ", prefix.size()));
  }
  if (prefix.find('?') != std::string::npos || prefix.find('#') != std::string::npos) {
    return Error(field.path,
                 absl::StrCat("must be a path without a query or fragment, got ", Quote(prefix)));
  }
  for (absl::string_view segment : absl::StrSplit(absl::string_view(prefix).substr(1), '/')) {
    if (segment.empty()) {
      return Error(field.path, absl::StrCat("must not end in / or hold an empty segment (//), got ",
                                            Quote(prefix)));
    }
    if (segment == "." || segment == "..") {
      return Error(field.path,
                   absl::StrCat("must not hold a . or .. segment, got ", Quote(prefix)));
    }
    for (const char c : segment) {
      if (!IsNameChar(c) && c != '~') {
        return Error(field.path, absl::StrCat("bad path ", Quote(prefix),
                                              " (want segments of A-Z a-z 0-9 _ . - ~)"));
      }
    }
  }
  for (const std::string_view route : kDataPlaneRoutes) {
    const absl::string_view other(route.data(), route.size());
    if (SameOrBelow(prefix, other) || SameOrBelow(other, prefix)) {
      return Error(field.path, absl::StrCat(Quote(prefix), " overlaps the data plane route ", other,
                                            " (pick a path beside it)"));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseAccessLog(const Field& field, AccessLogConfig& log) {
  Fields f;
  SLUICE_RETURN_IF_ERROR(ReadFields(field, {"mode", "sample", "max_per_second"}, f));
  SLUICE_RETURN_IF_ERROR(ReadEnum(f.Get("mode"), "access log mode",
                                  {{"off", AccessLogMode::kOff},
                                   {"denied", AccessLogMode::kDenied},
                                   {"all", AccessLogMode::kAll}},
                                  log.mode));
  const Field sample = f.Get("sample");
  if (!sample.absent()) {
    if (!sample.node->IsScalar()) {
      return Error(sample.path, absl::StrCat("expected a number, got ", KindOf(*sample.node)));
    }
    const std::string& text = sample.node->Scalar();
    double value = 0;
    // SimpleAtod accepts "nan" and "inf", which the range check below refuses.
    if (!absl::SimpleAtod(text, &value) || !(value >= 0 && value <= 1)) {
      return Error(sample.path, absl::StrCat("must be a number from 0 to 1, got ", Quote(text)));
    }
    log.sample = value;
  }
  return ReadInt(f.Get("max_per_second"), 1, 1'000'000, log.max_per_second);
}

absl::Status ParseServer(const Field& field, ServerConfig& server) {
  Fields f;
  SLUICE_RETURN_IF_ERROR(ReadFields(
      field,
      {"listen", "admin_listen", "admin_token", "threads", "api_key_header", "deny_status",
       "anonymous_plan", "anonymous_ipv4_prefix", "anonymous_ipv6_prefix", "trusted_proxies",
       "max_connections", "admin_max_connections", "shutdown_delay", "admin_tokens",
       "authorize_prefix", "access_log", "grpc_listen", "grpc_handshake_timeout",
       "grpc_idle_timeout", "grpc_request_timeout", "grpc_write_timeout"},
      f));
  SLUICE_RETURN_IF_ERROR(ParseAccessLog(f.Get("access_log"), server.access_log));
  SLUICE_RETURN_IF_ERROR(ReadString(f.Get("listen"), server.listen));
  SLUICE_RETURN_IF_ERROR(ReadString(f.Get("admin_listen"), server.admin_listen));
  SLUICE_RETURN_IF_ERROR(ReadString(f.Get("grpc_listen"), server.grpc_listen));
  SLUICE_RETURN_IF_ERROR(
      ReadDuration(f.Get("grpc_handshake_timeout"), server.grpc_handshake_timeout));
  SLUICE_RETURN_IF_ERROR(ReadDuration(f.Get("grpc_idle_timeout"), server.grpc_idle_timeout));
  SLUICE_RETURN_IF_ERROR(ReadDuration(f.Get("grpc_request_timeout"), server.grpc_request_timeout));
  SLUICE_RETURN_IF_ERROR(ReadDuration(f.Get("grpc_write_timeout"), server.grpc_write_timeout));
  SLUICE_RETURN_IF_ERROR(ReadString(f.Get("admin_token"), server.admin_token));
  SLUICE_RETURN_IF_ERROR(ReadInt(f.Get("threads"), 0, 1024, server.threads));
  SLUICE_RETURN_IF_ERROR(ReadString(f.Get("api_key_header"), server.api_key_header));
  SLUICE_RETURN_IF_ERROR(ReadInt(f.Get("deny_status"), 400, 499, server.deny_status));
  SLUICE_RETURN_IF_ERROR(ReadAuthorizePrefix(f.Get("authorize_prefix"), server.authorize_prefix));
  SLUICE_RETURN_IF_ERROR(ReadInt(f.Get("max_connections"), 1, 1'000'000, server.max_connections));
  SLUICE_RETURN_IF_ERROR(
      ReadInt(f.Get("admin_max_connections"), 1, 1'000'000, server.admin_max_connections));
  const Field delay = f.Get("shutdown_delay");
  // Zero is a valid delay here (stop at once), unlike the other durations.
  if (!delay.absent() && delay.node->IsScalar() &&
      (delay.node->Scalar() == "0" || delay.node->Scalar() == "0ms" ||
       delay.node->Scalar() == "0s" || delay.node->Scalar() == "0m" ||
       delay.node->Scalar() == "0h")) {
    server.shutdown_delay = absl::ZeroDuration();
  } else {
    SLUICE_RETURN_IF_ERROR(ReadDuration(delay, server.shutdown_delay));
  }
  SLUICE_RETURN_IF_ERROR(ParseAdminTokens(f.Get("admin_tokens"), server.admin_tokens));
  SLUICE_RETURN_IF_ERROR(ReadString(f.Get("anonymous_plan"), server.anonymous_plan));
  SLUICE_RETURN_IF_ERROR(
      ReadInt(f.Get("anonymous_ipv4_prefix"), 1, 32, server.anonymous_ipv4_prefix));
  SLUICE_RETURN_IF_ERROR(
      ReadInt(f.Get("anonymous_ipv6_prefix"), 1, 128, server.anonymous_ipv6_prefix));
  return ForEachItem(f.Get("trusted_proxies"), [&](const Field& item, size_t) {
    return ReadString(item, server.trusted_proxies.emplace_back());
  });
}

// The rules for store.redis.url and SLUICE_REDIS_URL (`source` names the one checked). The URL
// is never quoted: it may carry a password.
absl::Status CheckRedisUrl(absl::string_view source, absl::string_view url) {
  if (!IsUrl(url, {"redis://", "rediss://"})) {
    return Error(source,
                 "must be a redis:// or rediss:// (TLS) URL, e.g. redis://127.0.0.1:6379/0");
  }
  return absl::OkStatus();
}

// A seed node "host:port" in a canonical form ("Host:07000" and "host:7000" are the same node),
// or "" if it is none: the port 1..65535 in plain digits; the host an IPv4 address, an IPv6
// address in brackets, or a DNS name (labels of letters, digits, '-' and '_', none starting or
// ending with '-', 253 bytes at most).
std::string CanonicalSeed(absl::string_view node) {
  const size_t colon = node.rfind(':');
  if (colon == absl::string_view::npos) return "";
  absl::string_view host = node.substr(0, colon);
  const absl::string_view port_text = node.substr(colon + 1);
  int port = 0;
  if (port_text.empty() || port_text.size() > 5 || port_text[0] == '0' ||
      !AllOf(port_text, [](char c) { return c >= '0' && c <= '9'; }) ||
      !absl::SimpleAtoi(port_text, &port) || port > 65535) {
    return "";
  }
  if (absl::StartsWith(host, "[") && absl::EndsWith(host, "]")) {
    // An IPv6 address only in brackets: "fd00::1" (a port forgotten) is no host "fd00:" port 1.
    const std::string inside(host.substr(1, host.size() - 2));
    in6_addr a6{};
    std::array<char, INET6_ADDRSTRLEN> text{};
    if (inet_pton(AF_INET6, inside.c_str(), &a6) != 1 ||
        inet_ntop(AF_INET6, &a6, text.data(), text.size()) == nullptr) {
      return "";
    }
    return absl::StrCat("[", text.data(), "]:", port);
  }
  if (host.empty() || host.size() > 253) return "";
  if (AllOf(host, [](char c) { return (c >= '0' && c <= '9') || c == '.'; })) {
    const std::string v4(host);
    in_addr a4{};
    return inet_pton(AF_INET, v4.c_str(), &a4) == 1 ? absl::StrCat(v4, ":", port) : "";
  }
  for (absl::string_view label : absl::StrSplit(host, '.')) {
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-' ||
        !AllOf(label, [](char c) {
          return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
        })) {
      return "";
    }
  }
  return absl::StrCat(absl::AsciiStrToLower(host), ":", port);
}

// store.redis.cluster_nodes: 1 to kMaxClusterSeeds distinct seed nodes, and no url beside them.
absl::Status CheckClusterNodes(const RedisStoreConfig& redis) {
  if (redis.cluster_nodes.empty()) return absl::OkStatus();
  if (redis.url_set) {
    return Error("store.redis.cluster_nodes",
                 absl::StrCat("cannot be set together with ", redis.url_source,
                              " (the seeds replace the URL; the password comes from "
                              "SLUICE_REDIS_PASSWORD_FILE)"));
  }
  constexpr size_t kMaxClusterSeeds = 64;
  if (redis.cluster_nodes.size() > kMaxClusterSeeds) {
    return Error("store.redis.cluster_nodes", "at most 64 seed nodes");
  }
  std::vector<std::string> seen;
  for (size_t i = 0; i < redis.cluster_nodes.size(); ++i) {
    const std::string& node = redis.cluster_nodes[i];
    const std::string path = absl::StrCat("store.redis.cluster_nodes[", i, "]");
    if (absl::StrContains(node, "@")) {
      // Not quoted: the text before '@' may be a password.
      return Error(path,
                   "a seed node is host:port only, without user:password@ (the user is "
                   "store.redis.username, the password comes from SLUICE_REDIS_PASSWORD_FILE)");
    }
    std::string canonical = CanonicalSeed(node);
    if (canonical.empty()) {
      return Error(path, absl::StrCat("bad seed node ", Quote(node),
                                      " (want host:port, e.g. 10.0.0.1:6379 or [fd00::1]:6379)"));
    }
    for (size_t j = 0; j < seen.size(); ++j) {
      if (seen[j] == canonical) {
        return Error(path,
                     absl::StrCat(Quote(node), " is the same node as cluster_nodes[", j, "]"));
      }
    }
    seen.push_back(std::move(canonical));
  }
  return absl::OkStatus();
}

// store.redis.tls applies to a rediss:// URL only: with redis:// the files would be ignored, and
// an operator who wrote them believes the connection is encrypted.
absl::Status CheckTlsNeedsRediss(const RedisStoreConfig& redis) {
  if (!redis.tls.any() || !redis.cluster_nodes.empty() ||
      absl::StartsWith(redis.url, "rediss://")) {
    return absl::OkStatus();
  }
  return Error(
      "store.redis.tls",
      absl::StrCat(
          "set, but ", redis.url_source,
          " is not a rediss:// URL (TLS is on only with rediss://, or with cluster_nodes)"));
}

absl::Status ParseRedisTls(const Field& field, RedisTlsConfig& tls) {
  // Present even when empty: `tls:` whose fields are all commented out (a null) is `tls: {}`,
  // never plaintext.
  if (field.node->IsDefined()) tls.present = true;
  Fields f;
  SLUICE_RETURN_IF_ERROR(ReadFields(field, {"ca_file", "cert_file", "key_file", "server_name"}, f));
  SLUICE_RETURN_IF_ERROR(ReadString(f.Get("ca_file"), tls.ca_file));
  SLUICE_RETURN_IF_ERROR(ReadString(f.Get("cert_file"), tls.cert_file));
  SLUICE_RETURN_IF_ERROR(ReadString(f.Get("key_file"), tls.key_file));
  return ReadString(f.Get("server_name"), tls.server_name);
}

absl::Status ParseStore(const Field& field, StoreConfig& store) {
  Fields f;
  SLUICE_RETURN_IF_ERROR(ReadFields(field, {"type", "memory", "redis"}, f));
  SLUICE_RETURN_IF_ERROR(ReadEnum(f.Get("type"), "store type",
                                  {{"memory", StoreType::kMemory}, {"redis", StoreType::kRedis}},
                                  store.type));

  Fields memory;
  SLUICE_RETURN_IF_ERROR(
      ReadFields(f.Get("memory"), {"snapshot_path", "snapshot_interval", "registry_path"}, memory));
  SLUICE_RETURN_IF_ERROR(ReadString(memory.Get("snapshot_path"), store.memory.snapshot_path));
  SLUICE_RETURN_IF_ERROR(ReadString(memory.Get("registry_path"), store.memory.registry_path));
  SLUICE_RETURN_IF_ERROR(
      ReadDuration(memory.Get("snapshot_interval"), store.memory.snapshot_interval));

  Fields redis;
  SLUICE_RETURN_IF_ERROR(ReadFields(
      f.Get("redis"),
      {"url", "timeout", "max_wait", "key_prefix", "cluster_nodes", "username", "tls"}, redis));
  store.redis.url_set = store.redis.url_set || !redis.Get("url").absent();
  SLUICE_RETURN_IF_ERROR(ReadString(redis.Get("url"), store.redis.url));
  SLUICE_RETURN_IF_ERROR(ReadDuration(redis.Get("timeout"), store.redis.timeout));
  SLUICE_RETURN_IF_ERROR(ReadDuration(redis.Get("max_wait"), store.redis.max_wait));
  const Field cluster_nodes = redis.Get("cluster_nodes");
  SLUICE_RETURN_IF_ERROR(ForEachItem(cluster_nodes, [&](const Field& item, size_t) {
    return ReadString(item, store.redis.cluster_nodes.emplace_back());
  }));
  if (cluster_nodes.node->IsDefined() && store.redis.cluster_nodes.empty()) {
    // An empty list, or the key with nothing after it (every seed commented out), would quietly
    // mean the one Redis of the default URL.
    return Error(cluster_nodes.path, "expected at least one seed node (or no cluster_nodes)");
  }
  SLUICE_RETURN_IF_ERROR(ReadString(redis.Get("key_prefix"), store.redis.key_prefix));
  SLUICE_RETURN_IF_ERROR(ReadString(redis.Get("username"), store.redis.username));
  return ParseRedisTls(redis.Get("tls"), store.redis.tls);
}

absl::Status ParseAlertAt(const Field& field, std::vector<int>& alert_at) {
  const auto read_percentage = [&](const Field& item, size_t) {
    int percent = 0;
    if (item.absent()) return Error(item.path, "expected an integer, got nothing");
    SLUICE_RETURN_IF_ERROR(ReadInt(item, 1, 100, percent));
    if (std::find(alert_at.begin(), alert_at.end(), percent) != alert_at.end()) {
      return Error(item.path, absl::StrCat("duplicate percentage ", percent));
    }
    alert_at.push_back(percent);
    return absl::OkStatus();
  };
  SLUICE_RETURN_IF_ERROR(ForEachItem(field, read_percentage));
  std::sort(alert_at.begin(), alert_at.end());
  return absl::OkStatus();
}

absl::Status ParseLimit(const Field& field, LimitConfig& limit) {
  Fields f;
  SLUICE_RETURN_IF_ERROR(ReadFields(field, {"name", "quota", "window", "alert_at", "shadow"}, f));
  SLUICE_RETURN_IF_ERROR(ReadBool(f.Get("shadow"), limit.shadow));
  const Field name = f.Get("name");
  SLUICE_RETURN_IF_ERROR(Require(name));
  SLUICE_RETURN_IF_ERROR(ReadString(name, limit.name));
  const Field quota = f.Get("quota");
  SLUICE_RETURN_IF_ERROR(Require(quota));
  SLUICE_RETURN_IF_ERROR(ReadInt64(quota, 1, kMaxQuota, limit.quota));
  const Field window = f.Get("window");
  std::string window_text;
  SLUICE_RETURN_IF_ERROR(Require(window));
  SLUICE_RETURN_IF_ERROR(ReadString(window, window_text));
  absl::StatusOr<WindowSpec> spec = ParseWindow(window_text);
  if (!spec.ok()) return Error(window.path, spec.status().message());
  limit.window = *std::move(spec);
  return ParseAlertAt(f.Get("alert_at"), limit.alert_at);
}

absl::Status ParsePlan(const Field& field, PlanConfig& plan) {
  Fields f;
  SLUICE_RETURN_IF_ERROR(ReadFields(field, {"timezone", "limits", "shadow"}, f));
  SLUICE_RETURN_IF_ERROR(ReadString(f.Get("timezone"), plan.timezone));
  SLUICE_RETURN_IF_ERROR(ReadBool(f.Get("shadow"), plan.shadow));
  return ForEachItem(f.Get("limits"), [&](const Field& item, size_t) {
    return ParseLimit(item, plan.limits.emplace_back());
  });
}

absl::Status ParsePlans(const Field& field, std::vector<PlanConfig>& plans) {
  if (!field.absent() && !field.node->IsMap()) {
    return Error(field.path,
                 absl::StrCat("expected a map of plan names, got ", KindOf(*field.node)));
  }
  if (!field.absent()) {
    for (const auto& [key, value] : field.node->pairs) {
      if (!key->IsScalar()) return Error(field.path, "plan names must be plain strings");
      PlanConfig plan;
      plan.name = key->Scalar();
      const std::string path = absl::StrCat(field.path, ".", absl::CHexEscape(plan.name));
      SLUICE_RETURN_IF_ERROR(ParsePlan(Field{value, path}, plan));
      plans.push_back(std::move(plan));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseKeys(const Field& field, std::vector<KeyConfig>& keys) {
  if (!field.absent() && field.node->IsSequence()) keys.reserve(field.node->items.size());
  return ForEachItem(field, [&](const Field& item, size_t) {
    Fields f;
    SLUICE_RETURN_IF_ERROR(ReadFields(
        item, {"key", "key_sha256", "subject", "plan", "email", "webhook", "webhook_secret"}, f));
    KeyConfig key;
    const Field plain = f.Get("key");
    const Field hashed = f.Get("key_sha256");
    if (plain.absent() == hashed.absent()) {
      return Error(item.path, "set exactly one of key and key_sha256");
    }
    SLUICE_RETURN_IF_ERROR(ReadString(plain, key.key));
    SLUICE_RETURN_IF_ERROR(ReadString(hashed, key.key_sha256));
    const Field subject = f.Get("subject");
    SLUICE_RETURN_IF_ERROR(Require(subject));
    SLUICE_RETURN_IF_ERROR(ReadString(subject, key.subject));
    const Field plan = f.Get("plan");
    SLUICE_RETURN_IF_ERROR(Require(plan));
    SLUICE_RETURN_IF_ERROR(ReadString(plan, key.plan));
    SLUICE_RETURN_IF_ERROR(ReadString(f.Get("email"), key.email));
    SLUICE_RETURN_IF_ERROR(ReadString(f.Get("webhook"), key.webhook));
    SLUICE_RETURN_IF_ERROR(ReadString(f.Get("webhook_secret"), key.webhook_secret));
    keys.push_back(std::move(key));
    return absl::OkStatus();
  });
}

std::vector<absl::string_view> FieldsOfSink(SinkConfig::Type type) {
  switch (type) {
    case SinkConfig::Type::kWebhook:
      return {"type", "url", "secret"};
    case SinkConfig::Type::kSlack:
      return {"type", "url"};
    case SinkConfig::Type::kEmail:
      return {"type", "smtp_url", "from", "to"};
  }
  return {};
}

absl::Status ParseSink(const Field& field, SinkConfig& sink) {
  Fields f;
  SLUICE_RETURN_IF_ERROR(ReadFields(field, {"type", "url", "secret", "smtp_url", "from", "to"}, f));
  const Field type = f.Get("type");
  SLUICE_RETURN_IF_ERROR(Require(type));
  SLUICE_RETURN_IF_ERROR(ReadEnum(type, "sink type",
                                  {{"webhook", SinkConfig::Type::kWebhook},
                                   {"slack", SinkConfig::Type::kSlack},
                                   {"email", SinkConfig::Type::kEmail}},
                                  sink.type));
  // A field of another sink type is most likely a mistake (a secret on a Slack sink is ignored).
  const std::vector<absl::string_view> used = FieldsOfSink(sink.type);
  for (const auto& item : f.items) {
    if (std::find(used.begin(), used.end(), item.first) == used.end()) {
      return Error(f.Get(item.first).path,
                   absl::StrCat("not used by sinks of type ", type.node->Scalar(),
                                " (expected one of: ", absl::StrJoin(used, ", "), ")"));
    }
  }
  switch (sink.type) {
    case SinkConfig::Type::kWebhook:
      SLUICE_RETURN_IF_ERROR(ReadString(f.Get("url"), sink.url));
      return ReadString(f.Get("secret"), sink.secret);
    case SinkConfig::Type::kSlack:
      return ReadString(f.Get("url"), sink.url);
    case SinkConfig::Type::kEmail:
      SLUICE_RETURN_IF_ERROR(ReadString(f.Get("smtp_url"), sink.smtp_url));
      SLUICE_RETURN_IF_ERROR(ReadString(f.Get("from"), sink.from));
      return ForEachItem(f.Get("to"), [&](const Field& item, size_t) {
        return ReadString(item, sink.to.emplace_back());
      });
  }
  return absl::OkStatus();
}

absl::Status ParseEnvoy(const Field& field, EnvoyConfig& envoy) {
  Fields f;
  SLUICE_RETURN_IF_ERROR(
      ReadFields(field, {"descriptor_keys", "ratelimit_config", "response_dynamic_metadata"}, f));
  SLUICE_RETURN_IF_ERROR(
      ReadBool(f.Get("response_dynamic_metadata"), envoy.response_dynamic_metadata));
  const Field ratelimit_config = f.Get("ratelimit_config");
  SLUICE_RETURN_IF_ERROR(ReadString(ratelimit_config, envoy.ratelimit_config));
  if (envoy.ratelimit_config.size() > kMaxPathLength ||
      envoy.ratelimit_config.find('\0') != std::string::npos) {
    return Error(ratelimit_config.path,
                 absl::StrCat("must be a path of at most ", kMaxPathLength, " bytes"));
  }
  Fields k;
  SLUICE_RETURN_IF_ERROR(
      ReadFields(f.Get("descriptor_keys"), {"api_key", "subject", "plan", "cost"}, k));
  DescriptorKeys& keys = envoy.descriptor_keys;
  const std::pair<const char*, std::string*> all[] = {{"api_key", &keys.api_key},
                                                      {"subject", &keys.subject},
                                                      {"plan", &keys.plan},
                                                      {"cost", &keys.cost}};
  std::unordered_set<std::string> seen;
  for (const auto& [name, out] : all) {
    const Field key = k.Get(name);
    SLUICE_RETURN_IF_ERROR(ReadString(key, *out));
    if (out->empty() || out->size() > 128 || !AllOf(*out, IsVisibleAscii)) {
      return Error(key.path, "must be 1-128 printable ASCII characters without spaces");
    }
    // One entry key naming two inputs would make a descriptor mean two things.
    if (!seen.insert(*out).second) {
      return Error(key.path, absl::StrCat(Quote(*out), " is already another descriptor key"));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseAlerts(const Field& field, AlertsConfig& alerts) {
  Fields f;
  SLUICE_RETURN_IF_ERROR(ReadFields(field, {"sinks", "retry", "lease"}, f));
  SLUICE_RETURN_IF_ERROR(ReadDuration(f.Get("lease"), alerts.lease));
  SLUICE_RETURN_IF_ERROR(ForEachItem(f.Get("sinks"), [&](const Field& item, size_t) {
    return ParseSink(item, alerts.sinks.emplace_back());
  }));
  Fields retry;
  SLUICE_RETURN_IF_ERROR(
      ReadFields(f.Get("retry"), {"max_attempts", "first_delay", "max_delay"}, retry));
  SLUICE_RETURN_IF_ERROR(ReadInt(retry.Get("max_attempts"), 1, 100, alerts.retry.max_attempts));
  SLUICE_RETURN_IF_ERROR(ReadDuration(retry.Get("first_delay"), alerts.retry.first_delay));
  return ReadDuration(retry.Get("max_delay"), alerts.retry.max_delay);
}

absl::Status ParseRoot(const Value& root, Config& config) {
  const Field document{&root, ""};
  if (!document.absent() && !root.IsMap()) {
    return Error("", absl::StrCat("expected a map at the top level, got ", KindOf(root)));
  }
  Fields f;
  SLUICE_RETURN_IF_ERROR(ReadFields(
      document, {"server", "store", "on_store_error", "plans", "keys", "alerts", "envoy"}, f));
  SLUICE_RETURN_IF_ERROR(ParseServer(f.Get("server"), config.server));
  SLUICE_RETURN_IF_ERROR(ParseStore(f.Get("store"), config.store));
  SLUICE_RETURN_IF_ERROR(ReadEnum(f.Get("on_store_error"), "store error policy",
                                  {{"allow", OnStoreError::kAllow}, {"deny", OnStoreError::kDeny}},
                                  config.on_store_error));
  SLUICE_RETURN_IF_ERROR(ParsePlans(f.Get("plans"), config.plans));
  SLUICE_RETURN_IF_ERROR(ParseKeys(f.Get("keys"), config.keys));
  SLUICE_RETURN_IF_ERROR(ParseAlerts(f.Get("alerts"), config.alerts));
  SLUICE_RETURN_IF_ERROR(ParseEnvoy(f.Get("envoy"), config.envoy));
  // What the file says is read; whether it makes sense is the same question for a Config built in
  // code, so one function answers both.
  return Validate(config);
}

// ---------------------------------------------------------------------------------------------
// Validation of a built Config (the loader's and a program's alike). Each check names the field
// as the file would: "plans.free.limits[1].quota".

absl::Status CheckRange(absl::string_view path, int64_t value, int64_t min, int64_t max) {
  if (value >= min && value <= max) return absl::OkStatus();
  return Error(path, absl::StrCat("must be between ", min, " and ", max, ", got ", value));
}

absl::Status CheckDuration(absl::string_view path, absl::Duration value, absl::Duration min,
                           absl::Duration max) {
  if (value < min) {
    return Error(path, absl::StrCat("must be at least ", absl::FormatDuration(min), ", got ",
                                    absl::FormatDuration(value)));
  }
  if (value > max) {
    return Error(path, absl::StrCat("must be at most ", absl::FormatDuration(max), ", got ",
                                    absl::FormatDuration(value)));
  }
  return absl::OkStatus();
}

absl::Status CheckListenAddress(absl::string_view path, absl::string_view address) {
  if (IsValidListenAddress(address)) return absl::OkStatus();
  return Error(path, absl::StrCat("bad address ", Quote(address),
                                  " (want ip:port, e.g. 127.0.0.1:8080 or [::1]:8080, "
                                  "port 1-65535)"));
}

absl::Status CheckEmail(absl::string_view path, absl::string_view email) {
  if (IsValidEmail(email)) return absl::OkStatus();
  return Error(path, absl::StrCat("bad email address ", Quote(email),
                                  " (want name@domain: exactly one @ with text on both sides, "
                                  "visible ASCII, none of <>,;\"\\()[])"));
}

absl::Status CheckHttpUrl(absl::string_view path, absl::string_view url) {
  if (IsUrl(url, {"http://", "https://"})) return absl::OkStatus();
  return Error(path, "must be an http:// or https:// URL");
}

absl::Status CheckWebhookSecret(absl::string_view path, absl::string_view secret) {
  if (IsWebhookSecret(secret)) return absl::OkStatus();
  return Error(path, "must be \"whsec_\" followed by base64 (Standard Webhooks)");
}

absl::Status ValidateAdminTokens(const std::vector<AdminTokenConfig>& tokens) {
  std::unordered_set<std::string> names, secrets;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const AdminTokenConfig& token = tokens[i];
    const std::string path = absl::StrCat("server.admin_tokens[", i, "]");
    const std::string name_path = absl::StrCat(path, ".name");
    if (!IsValidName(token.name, kMaxNameLength)) {
      return Error(name_path, absl::StrCat("bad token name ", Quote(token.name),
                                           " (want 1-64 characters of A-Z a-z 0-9 _ . -)"));
    }
    if (token.name == "admin") {
      return Error(name_path, "the name \"admin\" is server.admin_token's (pick another)");
    }
    if (!names.insert(token.name).second) {
      return Error(name_path, absl::StrCat("duplicate token name ", Quote(token.name)));
    }
    // Both empty is a plaintext token that is too short (`token: ""` in a file).
    if (!token.token.empty() && !token.token_sha256.empty()) {
      return Error(path, "set exactly one of token and token_sha256");
    }
    if (token.token_sha256.empty()) {
      const std::string plain_path = absl::StrCat(path, ".token");
      if (token.token.size() < 16 || token.token.size() > 512 ||
          !AllOf(token.token, IsVisibleAscii)) {
        return Error(plain_path, "must be 16-512 printable ASCII characters without spaces");
      }
      if (!secrets.insert("p" + token.token).second) {
        return Error(plain_path, "the same token is given twice");
      }
    } else {
      const std::string hashed_path = absl::StrCat(path, ".token_sha256");
      if (token.token_sha256.size() != 64 || !AllOf(token.token_sha256, IsLowerHex)) {
        return Error(hashed_path, "must be 64 lowercase hex characters (a SHA-256 digest)");
      }
      if (!secrets.insert("h" + token.token_sha256).second) {
        return Error(hashed_path, "the same token is given twice");
      }
    }
  }
  return absl::OkStatus();
}

// The gRPC listener's timeouts (docs/configuration.md). A connection checks them about once a
// second, so less than a second would not be kept; the upper bounds keep a unit mix-up (5h for
// 5s) from holding a stalled connection for hours.
constexpr absl::Duration kMinGrpcTimeout = absl::Seconds(1);
constexpr absl::Duration kMaxGrpcHandshakeTimeout = absl::Minutes(5);
constexpr absl::Duration kMaxGrpcIdleTimeout = absl::Hours(24);
constexpr absl::Duration kMaxGrpcRequestTimeout = absl::Minutes(10);
constexpr absl::Duration kMaxGrpcWriteTimeout = absl::Minutes(10);

absl::Status ValidateServer(const ServerConfig& server) {
  SLUICE_RETURN_IF_ERROR(CheckListenAddress("server.listen", server.listen));
  SLUICE_RETURN_IF_ERROR(CheckListenAddress("server.admin_listen", server.admin_listen));
  if (server.admin_listen == server.listen) {
    return Error("server.admin_listen", "must differ from server.listen");
  }
  // Off unless set; when set, an address like the others and not one of theirs.
  if (!server.grpc_listen.empty()) {
    SLUICE_RETURN_IF_ERROR(CheckListenAddress("server.grpc_listen", server.grpc_listen));
    if (server.grpc_listen == server.listen || server.grpc_listen == server.admin_listen) {
      return Error("server.grpc_listen", "must differ from server.listen and server.admin_listen");
    }
  }
  SLUICE_RETURN_IF_ERROR(CheckDuration("server.grpc_handshake_timeout",
                                       server.grpc_handshake_timeout, kMinGrpcTimeout,
                                       kMaxGrpcHandshakeTimeout));
  SLUICE_RETURN_IF_ERROR(CheckDuration("server.grpc_idle_timeout", server.grpc_idle_timeout,
                                       kMinGrpcTimeout, kMaxGrpcIdleTimeout));
  SLUICE_RETURN_IF_ERROR(CheckDuration("server.grpc_request_timeout", server.grpc_request_timeout,
                                       kMinGrpcTimeout, kMaxGrpcRequestTimeout));
  SLUICE_RETURN_IF_ERROR(CheckDuration("server.grpc_write_timeout", server.grpc_write_timeout,
                                       kMinGrpcTimeout, kMaxGrpcWriteTimeout));
  if (!AllOf(server.admin_token, IsVisibleAscii)) {
    return Error("server.admin_token", "must be printable ASCII without spaces");
  }
  SLUICE_RETURN_IF_ERROR(CheckRange("server.threads", server.threads, 0, 1024));
  if (!IsHttpToken(server.api_key_header)) {
    return Error("server.api_key_header",
                 absl::StrCat("bad header name ", Quote(server.api_key_header),
                              " (want an HTTP token: letters, digits and !#$%&'*+-.^_`|~)"));
  }
  SLUICE_RETURN_IF_ERROR(CheckRange("server.deny_status", server.deny_status, 400, 499));
  SLUICE_RETURN_IF_ERROR(
      CheckRange("server.max_connections", server.max_connections, 1, 1'000'000));
  SLUICE_RETURN_IF_ERROR(
      CheckRange("server.admin_max_connections", server.admin_max_connections, 1, 1'000'000));
  // Zero is a valid delay here (stop at once), unlike the other durations.
  SLUICE_RETURN_IF_ERROR(CheckDuration("server.shutdown_delay", server.shutdown_delay,
                                       absl::ZeroDuration(), absl::Minutes(10)));
  SLUICE_RETURN_IF_ERROR(ValidateAdminTokens(server.admin_tokens));
  SLUICE_RETURN_IF_ERROR(
      CheckRange("server.anonymous_ipv4_prefix", server.anonymous_ipv4_prefix, 1, 32));
  SLUICE_RETURN_IF_ERROR(
      CheckRange("server.anonymous_ipv6_prefix", server.anonymous_ipv6_prefix, 1, 128));
  for (size_t i = 0; i < server.trusted_proxies.size(); ++i) {
    const std::string& cidr = server.trusted_proxies[i];
    if (!IsValidCidr(cidr)) {
      return Error(absl::StrCat("server.trusted_proxies[", i, "]"),
                   absl::StrCat("bad CIDR ", Quote(cidr),
                                " (want an IPv4 or IPv6 address or CIDR, e.g. 10.0.0.0/8 or "
                                "fd00::/8)"));
    }
  }
  return absl::OkStatus();
}

// A DNS name (labels of A-Z a-z 0-9 - _, at most 253 characters) or an IP address: what a
// certificate can name.
bool IsValidServerName(absl::string_view name) {
  if (IsIpv4(name) || IsIpv6(name)) return true;
  if (name.empty() || name.size() > 253) return false;
  for (absl::string_view label : absl::StrSplit(name, '.')) {
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-' ||
        !AllOf(label, [](char c) { return absl::ascii_isalnum(c) || c == '-' || c == '_'; })) {
      return false;
    }
  }
  return true;
}

// The fields that can be checked without the files; server::CheckServable loads them.
absl::Status ValidateRedisTls(const RedisStoreConfig& redis) {
  const RedisTlsConfig& tls = redis.tls;
  for (const auto& [name, path] :
       {std::pair{"ca_file", &tls.ca_file}, std::pair{"cert_file", &tls.cert_file},
        std::pair{"key_file", &tls.key_file}}) {
    if (path->size() > kMaxPathLength || path->find('\0') != std::string::npos) {
      return Error(absl::StrCat("store.redis.tls.", name),
                   "must be a path of at most 4096 bytes without NUL");
    }
  }
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return Error(tls.cert_file.empty() ? "store.redis.tls.cert_file" : "store.redis.tls.key_file",
                 "cert_file and key_file go together: set both for a client certificate, or "
                 "neither");
  }
  if (!tls.server_name.empty() && !IsValidServerName(tls.server_name)) {
    return Error("store.redis.tls.server_name",
                 absl::StrCat("bad server name ", Quote(tls.server_name),
                              " (want a DNS name or an IP address)"));
  }
  return CheckTlsNeedsRediss(redis);
}

// store.redis.username: 1 to 128 printable ASCII characters without spaces, and only with
// cluster_nodes. A user without a password is refused by ApplyEnvironment, where the password
// file is read.
absl::Status CheckRedisUsername(const RedisStoreConfig& redis) {
  if (redis.username.empty()) return absl::OkStatus();
  if (redis.cluster_nodes.empty()) {
    return Error("store.redis.username",
                 "only with cluster_nodes (a single Redis takes its user in the URL, "
                 "redis://user:password@host or redis://user@host)");
  }
  if (redis.username.size() > 128 || !std::all_of(redis.username.begin(), redis.username.end(),
                                                  [](char c) { return c > ' ' && c < 0x7f; })) {
    return Error("store.redis.username",
                 "want 1-128 printable ASCII characters without spaces, as Redis's ACL names");
  }
  return absl::OkStatus();
}

absl::Status ValidateStore(const StoreConfig& store) {
  if (!store.memory.registry_path.empty() &&
      store.memory.registry_path == store.memory.snapshot_path) {
    return Error("store.memory.registry_path", "must differ from snapshot_path");
  }
  SLUICE_RETURN_IF_ERROR(CheckDuration("store.memory.snapshot_interval",
                                       store.memory.snapshot_interval, kMinSnapshotInterval,
                                       kMaxSnapshotInterval));
  SLUICE_RETURN_IF_ERROR(CheckRedisUrl(store.redis.url_source, store.redis.url));
  SLUICE_RETURN_IF_ERROR(CheckClusterNodes(store.redis));
  SLUICE_RETURN_IF_ERROR(CheckRedisUsername(store.redis));
  SLUICE_RETURN_IF_ERROR(ValidateRedisTls(store.redis));
  SLUICE_RETURN_IF_ERROR(CheckDuration("store.redis.timeout", store.redis.timeout, kMinRedisTimeout,
                                       kMaxRedisTimeout));
  if (store.redis.max_wait != absl::ZeroDuration()) {
    SLUICE_RETURN_IF_ERROR(CheckDuration("store.redis.max_wait", store.redis.max_wait,
                                         kMinRedisTimeout, kMaxRedisMaxWait));
    if (store.redis.max_wait < store.redis.timeout) {
      return Error("store.redis.max_wait",
                   absl::StrCat("must be at least store.redis.timeout (",
                                absl::FormatDuration(store.redis.timeout), "), got ",
                                absl::FormatDuration(store.redis.max_wait)));
    }
  }
  if (!IsValidName(store.redis.key_prefix, kMaxKeyPrefixLength)) {
    return Error("store.redis.key_prefix",
                 absl::StrCat("bad key prefix ", Quote(store.redis.key_prefix),
                              " (want 1-32 characters of A-Z a-z 0-9 _ . -)"));
  }
  return absl::OkStatus();
}

// A window built in code may skip ParseWindow; the limiter relies on what it guarantees.
absl::Status ValidateWindow(absl::string_view path, const WindowSpec& window) {
  switch (window.kind) {
    case WindowSpec::Kind::kDay:
    case WindowSpec::Kind::kWeek:
    case WindowSpec::Kind::kMonth:
    case WindowSpec::Kind::kYear:
      return absl::OkStatus();
    case WindowSpec::Kind::kFixed:
      break;
  }
  const absl::Duration length = window.length;
  if (window.kind != WindowSpec::Kind::kFixed || length < absl::Seconds(1) ||
      length > kMaxFixedWindow || length % absl::Seconds(1) != absl::ZeroDuration()) {
    return Error(path, absl::StrCat("bad window ", Quote(window.text),
                                    " (want Ns, Nm, Nh, day, week, month or year)"));
  }
  return absl::OkStatus();
}

absl::Status ValidateLimit(absl::string_view path, const LimitConfig& limit) {
  if (!IsValidName(limit.name, kMaxNameLength)) {
    return Error(absl::StrCat(path, ".name"),
                 absl::StrCat("bad limit name ", Quote(limit.name), " (want ", kNameRule, ")"));
  }
  SLUICE_RETURN_IF_ERROR(CheckRange(absl::StrCat(path, ".quota"), limit.quota, 1, kMaxQuota));
  SLUICE_RETURN_IF_ERROR(ValidateWindow(absl::StrCat(path, ".window"), limit.window));
  const std::string alert_at = absl::StrCat(path, ".alert_at");
  if (limit.alert_at.size() > kMaxAlertThresholds) {
    return Error(alert_at, absl::StrCat("at most ", kMaxAlertThresholds, " percentages, got ",
                                        limit.alert_at.size()));
  }
  for (size_t i = 0; i < limit.alert_at.size(); ++i) {
    const std::string item = absl::StrCat(alert_at, "[", i, "]");
    SLUICE_RETURN_IF_ERROR(CheckRange(item, limit.alert_at[i], 1, 100));
    if (i > 0 && limit.alert_at[i] == limit.alert_at[i - 1]) {
      return Error(item, absl::StrCat("duplicate percentage ", limit.alert_at[i]));
    }
    if (i > 0 && limit.alert_at[i] < limit.alert_at[i - 1]) {
      return Error(item, "percentages must be in increasing order");
    }
  }
  return absl::OkStatus();
}

absl::Status ValidatePlans(const std::vector<PlanConfig>& plans) {
  if (plans.empty()) return Error("plans", "at least one plan is required");
  std::unordered_set<std::string> names;
  for (size_t p = 0; p < plans.size(); ++p) {
    const PlanConfig& plan = plans[p];
    // Named as in the file ("plans.free"); by position when there is no name to show.
    const std::string path = plan.name.empty()
                                 ? absl::StrCat("plans[", p, "]")
                                 : absl::StrCat("plans.", absl::CHexEscape(plan.name));
    if (!IsValidName(plan.name, kMaxNameLength)) {
      return Error(path,
                   absl::StrCat("bad plan name ", Quote(plan.name), " (want ", kNameRule, ")"));
    }
    if (!names.insert(plan.name).second) {
      return Error(path, absl::StrCat("duplicate plan name ", Quote(plan.name)));
    }
    if (!IsKnownTimeZone(plan.timezone)) {
      return Error(absl::StrCat(path, ".timezone"),
                   absl::StrCat("unknown time zone ", Quote(plan.timezone)));
    }
    const std::string limits = absl::StrCat(path, ".limits");
    if (plan.limits.empty()) return Error(limits, "at least one limit is required");
    std::unordered_set<std::string> limit_names;
    for (size_t l = 0; l < plan.limits.size(); ++l) {
      const std::string item = absl::StrCat(limits, "[", l, "]");
      SLUICE_RETURN_IF_ERROR(ValidateLimit(item, plan.limits[l]));
      if (!limit_names.insert(plan.limits[l].name).second) {
        return Error(absl::StrCat(item, ".name"),
                     absl::StrCat("duplicate limit name ", Quote(plan.limits[l].name)));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateKeys(const Config& config) {
  // Where each key (or hash) was first seen, to name the earlier entry without quoting the key.
  std::unordered_map<std::string_view, size_t> seen_keys;
  std::unordered_map<std::string_view, size_t> seen_hashes;
  seen_hashes.reserve(config.keys.size());
  std::unordered_set<std::string_view> plan_names;
  for (const PlanConfig& plan : config.plans) plan_names.insert(plan.name);
  for (size_t i = 0; i < config.keys.size(); ++i) {
    const KeyConfig& key = config.keys[i];
    // Paths are built only for an error: a file may hold 150,000 keys.
    const auto at = [i](absl::string_view field) { return absl::StrCat("keys[", i, "]", field); };
    // Both empty is a plaintext key that is empty (`key: ""` in a file).
    if (!key.key.empty() && !key.key_sha256.empty()) {
      return Error(at(""), "set exactly one of key and key_sha256");
    }
    if (key.key_sha256.empty()) {
      if (key.key.empty() || key.key.size() > kMaxApiKeyLength || !AllOf(key.key, IsVisibleAscii)) {
        return Error(at(".key"), "must be 1-512 printable ASCII characters without spaces");
      }
      const auto [it, inserted] = seen_keys.emplace(key.key, i);
      if (!inserted) {
        return Error(at(".key"), absl::StrCat("duplicate key (same as keys[", it->second, "])"));
      }
    } else {
      if (key.key_sha256.size() != 64 || !AllOf(key.key_sha256, IsLowerHex)) {
        return Error(at(".key_sha256"), "must be 64 lowercase hex characters (a SHA-256 digest)");
      }
      const auto [it, inserted] = seen_hashes.emplace(key.key_sha256, i);
      if (!inserted) {
        return Error(at(".key_sha256"),
                     absl::StrCat("duplicate key (same as keys[", it->second, "])"));
      }
    }
    if (!IsValidSubject(key.subject)) {
      return Error(at(".subject"),
                   absl::StrCat("bad subject ", Quote(key.subject),
                                " (want 1-200 bytes of A-Z a-z 0-9 . _ : @ / + = -)"));
    }
    if (IsRuleSubject(key.subject)) {
      return Error(at(".subject"), absl::StrCat("subjects beginning \"rl:\" are reserved (they "
                                                "hold envoy.ratelimit_config's counters)"));
    }
    if (!plan_names.contains(key.plan)) {
      return Error(at(".plan"), absl::StrCat("unknown plan ", Quote(key.plan)));
    }
    if (!key.email.empty() && !IsValidEmail(key.email)) {
      return CheckEmail(at(".email"), key.email);
    }
    if (!key.webhook.empty() && !IsUrl(key.webhook, {"http://", "https://"})) {
      return CheckHttpUrl(at(".webhook"), key.webhook);
    }
    if (!key.webhook_secret.empty()) {
      if (!IsWebhookSecret(key.webhook_secret)) {
        return CheckWebhookSecret(at(".webhook_secret"), key.webhook_secret);
      }
      if (key.webhook.empty()) return Error(at(".webhook_secret"), "set without a webhook to sign");
    }
  }
  return absl::OkStatus();
}

// Every sink needs its address; "" is what a file that leaves it out reads as.
absl::Status RequireSet(absl::string_view path, absl::string_view value) {
  return value.empty() ? Error(path, "missing required field") : absl::OkStatus();
}

absl::Status ValidateSink(absl::string_view path, const SinkConfig& sink) {
  const std::string url = absl::StrCat(path, ".url");
  if (sink.type != SinkConfig::Type::kEmail) SLUICE_RETURN_IF_ERROR(RequireSet(url, sink.url));
  switch (sink.type) {
    case SinkConfig::Type::kWebhook:
      SLUICE_RETURN_IF_ERROR(CheckHttpUrl(url, sink.url));
      if (!sink.secret.empty()) {
        SLUICE_RETURN_IF_ERROR(CheckWebhookSecret(absl::StrCat(path, ".secret"), sink.secret));
      }
      return absl::OkStatus();
    case SinkConfig::Type::kSlack:
      return CheckHttpUrl(url, sink.url);
    case SinkConfig::Type::kEmail: {
      const std::string smtp_url = absl::StrCat(path, ".smtp_url");
      SLUICE_RETURN_IF_ERROR(RequireSet(smtp_url, sink.smtp_url));
      if (!IsUrl(sink.smtp_url, {"smtp://", "smtps://"})) {
        return Error(smtp_url, "must be an smtp:// or smtps:// URL");
      }
      SLUICE_RETURN_IF_ERROR(RequireSet(absl::StrCat(path, ".from"), sink.from));
      SLUICE_RETURN_IF_ERROR(CheckEmail(absl::StrCat(path, ".from"), sink.from));
      for (size_t i = 0; i < sink.to.size(); ++i) {
        SLUICE_RETURN_IF_ERROR(CheckEmail(absl::StrCat(path, ".to[", i, "]"), sink.to[i]));
      }
      return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateAlerts(const AlertsConfig& alerts) {
  SLUICE_RETURN_IF_ERROR(
      CheckDuration("alerts.lease", alerts.lease, kMinAlertLease, kMaxAlertLease));
  for (size_t i = 0; i < alerts.sinks.size(); ++i) {
    SLUICE_RETURN_IF_ERROR(ValidateSink(absl::StrCat("alerts.sinks[", i, "]"), alerts.sinks[i]));
  }
  const RetryConfig& retry = alerts.retry;
  SLUICE_RETURN_IF_ERROR(CheckRange("alerts.retry.max_attempts", retry.max_attempts, 1, 100));
  SLUICE_RETURN_IF_ERROR(CheckDuration("alerts.retry.first_delay", retry.first_delay,
                                       kMinRetryDelay, kMaxRetryFirstDelay));
  SLUICE_RETURN_IF_ERROR(
      CheckDuration("alerts.retry.max_delay", retry.max_delay, kMinRetryDelay, kMaxRetryMaxDelay));
  if (retry.max_delay < retry.first_delay) {
    return Error(
        "alerts.retry.max_delay",
        absl::StrCat("must be at least first_delay (", absl::FormatDuration(retry.first_delay),
                     "), got ", absl::FormatDuration(retry.max_delay)));
  }
  return absl::OkStatus();
}

}  // namespace

std::string RegistryFile(const MemoryStoreConfig& memory) {
  if (!memory.registry_path.empty()) return memory.registry_path;
  if (memory.snapshot_path.empty()) return "";
  return memory.snapshot_path + std::string(kRegistryBesideSnapshotSuffix);
}

const PlanConfig* Config::FindPlan(std::string_view name) const {
  for (const PlanConfig& plan : plans) {
    if (plan.name == name) return &plan;
  }
  return nullptr;
}

absl::Status Validate(const Config& config) {
  SLUICE_RETURN_IF_ERROR(ValidateServer(config.server));
  SLUICE_RETURN_IF_ERROR(ValidateStore(config.store));
  SLUICE_RETURN_IF_ERROR(ValidatePlans(config.plans));
  SLUICE_RETURN_IF_ERROR(ValidateKeys(config));
  SLUICE_RETURN_IF_ERROR(ValidateAlerts(config.alerts));
  const std::string& anonymous = config.server.anonymous_plan;
  if (!anonymous.empty() && config.FindPlan(anonymous) == nullptr) {
    return Error("server.anonymous_plan", absl::StrCat("unknown plan ", Quote(anonymous)));
  }
  return absl::OkStatus();
}

absl::StatusOr<Config> ParseConfig(std::string_view std_yaml, std::string_view source) {
  Config config;
  config.path = std::string(source);
  const yaml::Limits limits{.max_bytes = kMaxFileBytes,
                            .max_bytes_text = "16 MiB",
                            .max_depth = kMaxDepth,
                            .max_values = kMaxExpandedValues,
                            .max_commas = kMaxCommas};
  absl::StatusOr<yaml::Document> document = yaml::Parse(std_yaml, limits);
  absl::Status status =
      document.ok() ? ParseRoot(document->root(), config) : Error("", document.status().message());
  if (!status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(FromStd(source), ": ", status.message()));
  }
  return config;
}

absl::StatusOr<Config> LoadConfigFile(const std::string& path) {
  absl::StatusOr<std::string> text = yaml::ReadRegularFile(path, kMaxFileBytes, "16 MiB");
  if (!text.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", text.status().message()));
  }
  absl::StatusOr<Config> cfg = ParseConfig(*text, path);
  if (!cfg.ok()) return cfg.status();
  SLUICE_RETURN_IF_ERROR(
      ApplyEnvironment(*cfg, [](const char* name) { return std::getenv(name); }));
  return cfg;
}

absl::Status ApplyEnvironment(Config& cfg, const std::function<const char*(const char*)>& getenv) {
  if (const char* url = getenv(kRedisUrlVariable); url != nullptr) {
    SLUICE_RETURN_IF_ERROR(CheckRedisUrl(kRedisUrlVariable, url));
    cfg.store.redis.url = url;
    cfg.store.redis.url_source = kRedisUrlVariable;
    cfg.store.redis.url_set = true;
    SLUICE_RETURN_IF_ERROR(CheckClusterNodes(cfg.store.redis));  // the URL beside seeds
    SLUICE_RETURN_IF_ERROR(CheckTlsNeedsRediss(cfg.store.redis));
  }
  if (const char* path = getenv(kRedisPasswordFileVariable); path != nullptr) {
    // The path is safe to name; what the file holds is never quoted.
    const auto refused = [path](absl::string_view what) {
      return absl::InvalidArgumentError(
          absl::StrCat(kRedisPasswordFileVariable, ": ", path, ": ", what));
    };
    absl::StatusOr<std::string> password = yaml::ReadRegularFile(path, 4096, "4 KiB");
    if (!password.ok()) return refused(password.status().message());
    // `echo secret > file` and systemd-creds both end the file with a newline.
    if (absl::EndsWith(*password, "\n")) password->pop_back();
    if (password->empty()) return refused("empty");
    cfg.store.redis.password = std::move(*password);
  }
  if (!cfg.store.redis.username.empty() && cfg.store.redis.password.empty()) {
    return Error("store.redis.username",
                 absl::StrCat("needs a password: set ", kRedisPasswordFileVariable));
  }
  return absl::OkStatus();
}

absl::StatusOr<absl::Duration> ParseDuration(std::string_view std_text) {
  const absl::string_view text = FromStd(std_text);
  const auto bad = [text](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("bad duration ", Quote(text), " (", why, ")"));
  };
  const size_t digits = CountLeadingDigits(text);
  const absl::string_view unit = text.substr(digits);
  absl::Duration per_unit = absl::ZeroDuration();
  if (unit == "ms") per_unit = absl::Milliseconds(1);
  if (unit == "s") per_unit = absl::Seconds(1);
  if (unit == "m") per_unit = absl::Minutes(1);
  if (unit == "h") per_unit = absl::Hours(1);
  if (digits == 0 || per_unit == absl::ZeroDuration()) {
    return bad("want a whole number and a unit: ms, s, m or h, e.g. 20ms, 5m");
  }
  int64_t count = 0;
  if (!absl::SimpleAtoi(text.substr(0, digits), &count)) return bad("too large");
  if (count == 0) return bad("must be greater than zero");
  const absl::Duration duration = count * per_unit;  // saturates to infinity on overflow
  if (duration == absl::InfiniteDuration()) return bad("too large");
  return duration;
}

absl::StatusOr<WindowSpec> ParseWindow(std::string_view std_text) {
  const absl::string_view text = FromStd(std_text);
  if (text == "day") return WindowSpec{.kind = WindowSpec::Kind::kDay, .text = "day"};
  if (text == "week") return WindowSpec{.kind = WindowSpec::Kind::kWeek, .text = "week"};
  if (text == "month") return WindowSpec{.kind = WindowSpec::Kind::kMonth, .text = "month"};
  if (text == "year") return WindowSpec{.kind = WindowSpec::Kind::kYear, .text = "year"};
  const size_t digits = CountLeadingDigits(text);
  int64_t count = 0;
  if (digits > 0 && digits + 1 == text.size() && absl::SimpleAtoi(text.substr(0, digits), &count) &&
      count >= 1 && count <= kMaxWindowCount) {
    absl::Duration unit = absl::ZeroDuration();
    if (text.back() == 's') unit = absl::Seconds(1);
    if (text.back() == 'm') unit = absl::Minutes(1);
    if (text.back() == 'h') unit = absl::Hours(1);
    if (unit != absl::ZeroDuration() && count * unit > kMaxFixedWindow) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bad window ", Quote(text),
          ": a fixed window is at most 31 days (744h); use month for a monthly quota"));
    }
    if (unit != absl::ZeroDuration()) {
      return WindowSpec{
          .kind = WindowSpec::Kind::kFixed, .length = count * unit, .text = std::string(text)};
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("bad window ", Quote(text), " (want Ns, Nm, Nh, day, week, month or year)"));
}

}  // namespace sluice::config

#undef SLUICE_RETURN_IF_ERROR
