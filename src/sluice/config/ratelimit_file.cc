// Reads envoyproxy/ratelimit's YAML files (ratelimit_file.h) through the bounded YAML reader.
#include "sluice/config/ratelimit_file.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "sluice/config/validators.h"
#include "sluice/config/yaml_document.h"
#include "sluice/config/yaml_fields.h"

namespace sluice::config {
namespace {

using yaml::Value;

// How messages about these files have always read: keys, values cut after 64 bytes with the "..."
// after the quotes (a key may be 1 KiB), YAML 1.1's booleans, and no string longer than a key.
constexpr QuoteStyle kQuote{.cut = 64, .ellipsis_inside = false};
constexpr Dialect kRatelimitYaml{
    .entry = "key", .quote = kQuote, .yaml11_bools = true, .max_string = kMaxRlKeyLength};

// A map that must be there: unlike a section of sluice.yaml, an item written without a value is
// refused.
absl::Status ReadMap(const Field& field, std::initializer_list<absl::string_view> allowed,
                     Fields& out) {
  if (field.absent()) {
    return Error(field.path, absl::StrCat("expected a map, got ", KindOf(*field.node)));
  }
  return ReadFields(field, allowed, out);
}

absl::Status ReadUint32(const Field& field, uint32_t& out) {
  if (!field.node->IsScalar()) {
    return Error(field.path, absl::StrCat("expected an integer, got ", KindOf(*field.node)));
  }
  const std::string& text = field.node->Scalar();
  uint64_t value = 0;
  if (text.empty() || !std::all_of(text.begin(), text.end(), absl::ascii_isdigit) ||
      !absl::SimpleAtoi(text, &value) || value > UINT32_MAX) {
    return Error(field.path, absl::StrCat("must be an integer from 0 to ", UINT32_MAX, ", got ",
                                          Quote(text, kQuote)));
  }
  out = static_cast<uint32_t>(value);
  return absl::OkStatus();
}

struct UnitName {
  absl::string_view name;
  RlUnit unit;
};
constexpr UnitName kUnits[] = {{"second", RlUnit::kSecond}, {"minute", RlUnit::kMinute},
                               {"hour", RlUnit::kHour},     {"day", RlUnit::kDay},
                               {"week", RlUnit::kWeek},     {"month", RlUnit::kMonth},
                               {"year", RlUnit::kYear}};

absl::Status ReadUnit(const Field& field, std::optional<RlUnit>& out) {
  std::string text;
  SLUICE_RETURN_IF_ERROR(ReadString(field, text));
  // envoyproxy/ratelimit looks the unit up in upper case: "Minute" and "MINUTE" are "minute".
  const std::string lower = absl::AsciiStrToLower(text);
  for (const UnitName& u : kUnits) {
    if (u.name == lower) {
      out = u.unit;
      return absl::OkStatus();
    }
  }
  return Error(field.path, absl::StrCat("unknown unit ", Quote(text, kQuote),
                                        " (want second, minute, hour, day, week, month or year)"));
}

absl::Status ParseRateLimit(const Field& field, RlRateLimit& rl) {
  Fields f;
  SLUICE_RETURN_IF_ERROR(
      ReadMap(field, {"unit", "requests_per_unit", "unlimited", "name", "replaces"}, f));
  SLUICE_RETURN_IF_ERROR(ReadBool(f.Get("unlimited"), rl.unlimited));
  SLUICE_RETURN_IF_ERROR(ReadString(f.Get("name"), rl.name));
  const Field unit = f.Get("unit");
  const Field rpu = f.Get("requests_per_unit");
  if (rl.unlimited) {
    if (!unit.absent()) return Error(unit.path, "must not be set when unlimited is true");
    // envoyproxy/ratelimit ignores a requests_per_unit beside unlimited: so does this.
  } else {
    SLUICE_RETURN_IF_ERROR(Require(unit));
    SLUICE_RETURN_IF_ERROR(ReadUnit(unit, rl.unit));
    if (rpu.absent()) {
      return Error(rpu.path, "missing required key (write 0 to refuse every request)");
    }
    SLUICE_RETURN_IF_ERROR(ReadUint32(rpu, rl.requests_per_unit));
  }
  const Field replaces = f.Get("replaces");
  if (replaces.absent()) return absl::OkStatus();
  if (!replaces.node->IsSequence()) {
    return Error(replaces.path, absl::StrCat("expected a list, got ", KindOf(*replaces.node)));
  }
  if (replaces.node->items.size() > kMaxRlReplaces) {
    return Error(replaces.path, absl::StrCat("too many entries (at most ", kMaxRlReplaces, ")"));
  }
  for (size_t i = 0; i < replaces.node->items.size(); ++i) {
    const Field item{replaces.node->items[i], absl::StrCat(replaces.path, "[", i, "]"),
                     replaces.dialect};
    Fields r;
    SLUICE_RETURN_IF_ERROR(ReadMap(item, {"name"}, r));
    const Field name_field = r.Get("name");
    std::string name;
    SLUICE_RETURN_IF_ERROR(ReadString(name_field, name));
    if (name.empty()) return Error(name_field.path, "must not be empty");
    if (name == rl.name) return Error(name_field.path, "a limit cannot replace itself");
    rl.replaces.push_back(std::move(name));
  }
  return absl::OkStatus();
}

struct YamlInt {
  bool negative = false;
  uint64_t magnitude = 0;
};

// YAML 1.1's integer forms, as envoyproxy/ratelimit's reader takes them (Go's base-0 integers):
// an optional sign, then decimal, 0x hex, 0o or leading-0 octal, or 0b binary digits. `text` has
// no '_' left. Empty when it is none of these or does not fit in 64 bits.
std::optional<YamlInt> YamlInteger(absl::string_view text) {
  bool negative = false;
  if (!text.empty() && (text[0] == '+' || text[0] == '-')) {
    negative = text[0] == '-';
    text.remove_prefix(1);
  }
  int base = 10;
  if (text.size() > 2 && text[0] == '0' &&
      absl::ascii_isalpha(static_cast<unsigned char>(text[1]))) {
    const char prefix = absl::ascii_tolower(static_cast<unsigned char>(text[1]));
    base = prefix == 'x' ? 16 : prefix == 'o' ? 8 : prefix == 'b' ? 2 : 0;
    if (base == 0) return std::nullopt;
    text.remove_prefix(2);
  } else if (text.size() > 1 && text[0] == '0') {
    base = 8;
    text.remove_prefix(1);
  }
  if (text.empty()) return std::nullopt;
  uint64_t value = 0;
  for (const char c : text) {
    int digit = 0;
    if (absl::ascii_isdigit(static_cast<unsigned char>(c))) {
      digit = c - '0';
    } else if (absl::ascii_isalpha(static_cast<unsigned char>(c))) {
      digit = absl::ascii_tolower(static_cast<unsigned char>(c)) - 'a' + 10;
    } else {
      return std::nullopt;
    }
    if (digit >= base) return std::nullopt;
    if (value > (UINT64_MAX - static_cast<uint64_t>(digit)) / static_cast<uint64_t>(base)) {
      return std::nullopt;
    }
    value = value * static_cast<uint64_t>(base) + static_cast<uint64_t>(digit);
  }
  if (negative && value > uint64_t{1} << 63) return std::nullopt;
  return YamlInt{.negative = negative, .magnitude = value};
}

std::string WithoutUnderscores(std::string text) {
  text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
  return text;
}

// YAML 1.1's decimal fractions: [-+]? (.digits | digits(.digits?)?) ([eE][-+]?digits)?
bool IsYamlFloat(absl::string_view text) {
  size_t i = 0;
  const auto digits = [&] {
    const size_t from = i;
    while (i < text.size() && absl::ascii_isdigit(static_cast<unsigned char>(text[i]))) ++i;
    return i > from;
  };
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
  if (i < text.size() && text[i] == '.') {
    ++i;
    if (!digits()) return false;
  } else {
    if (!digits()) return false;
    if (i < text.size() && text[i] == '.') {
      ++i;
      digits();
    }
  }
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
    if (!digits()) return false;
  }
  return i == text.size();
}

// A plain scalar typed as YAML 1.1 types it (RlMetadataValue).
RlMetadataValue TypedScalar(const std::string& text) {
  RlMetadataValue out;
  static constexpr absl::string_view kInfinity[] = {".inf",  ".Inf",  ".INF",  "+.inf", "+.Inf",
                                                    "+.INF", "-.inf", "-.Inf", "-.INF"};
  static constexpr absl::string_view kNan[] = {".nan", ".NaN", ".NAN"};
  const auto in = [&text](const auto& list) {
    return std::find(std::begin(list), std::end(list), text) != std::end(list);
  };
  if (const std::optional<bool> boolean = Yaml11Bool(text); boolean.has_value()) {
    out.kind = RlMetadataValue::Kind::kBool;
    out.boolean = *boolean;
    return out;
  }
  if (in(kInfinity) || in(kNan)) {
    out.kind = RlMetadataValue::Kind::kNumber;
    out.number = in(kNan)                      ? std::numeric_limits<double>::quiet_NaN()
                 : absl::StartsWith(text, "-") ? -std::numeric_limits<double>::infinity()
                                               : std::numeric_limits<double>::infinity();
    return out;
  }
  const char first = text.empty() ? '\0' : text[0];
  if (absl::ascii_isdigit(static_cast<unsigned char>(first)) || first == '+' || first == '-' ||
      first == '.') {
    // Underscores between digits are dropped before reading a number, as there.
    const std::string digits = first == '.' ? text : WithoutUnderscores(text);
    double number = 0;
    if (const std::optional<YamlInt> integer = YamlInteger(digits); integer.has_value()) {
      out.kind = RlMetadataValue::Kind::kNumber;
      out.number = static_cast<double>(integer->magnitude) * (integer->negative ? -1 : 1);
      return out;
    }
    if (IsYamlFloat(digits) && absl::SimpleAtod(digits, &number)) {
      out.kind = RlMetadataValue::Kind::kNumber;
      out.number = number;
      return out;
    }
  }
  out.kind = RlMetadataValue::Kind::kString;
  out.string = text;
  return out;
}

// The name a key of a `metadata` map gets there: its YAML 1.1 value as Go prints it, for a
// boolean ("yes" is "true") or an integer ("0x10" is "16"); else the key as written.
std::string MetadataKey(const Value& key) {
  if (!key.plain) return key.Scalar();
  const RlMetadataValue typed = TypedScalar(key.Scalar());
  if (typed.kind == RlMetadataValue::Kind::kBool) return typed.boolean ? "true" : "false";
  if (typed.kind == RlMetadataValue::Kind::kNumber) {
    const std::optional<YamlInt> integer = YamlInteger(WithoutUnderscores(key.Scalar()));
    if (integer.has_value()) {
      return absl::StrCat(integer->negative && integer->magnitude != 0 ? "-" : "",
                          integer->magnitude);
    }
  }
  return key.Scalar();
}

// Any YAML value of a `metadata` map, typed (RlMetadataValue). Its size and nesting are the
// file's (the YAML reader bounds both).
absl::Status ReadMetadataValue(const Value& v, const std::string& path, RlMetadataValue& out) {
  if (v.IsNull() || !v.IsDefined()) return absl::OkStatus();  // kNull
  if (v.IsScalar()) {
    if (v.plain) {
      out = TypedScalar(v.Scalar());
    } else {
      out.kind = RlMetadataValue::Kind::kString;
      out.string = v.Scalar();
    }
    return absl::OkStatus();
  }
  if (v.IsSequence()) {
    out.kind = RlMetadataValue::Kind::kList;
    out.list.resize(v.items.size());
    for (size_t i = 0; i < v.items.size(); ++i) {
      SLUICE_RETURN_IF_ERROR(
          ReadMetadataValue(*v.items[i], absl::StrCat(path, "[", i, "]"), out.list[i]));
    }
    return absl::OkStatus();
  }
  out.kind = RlMetadataValue::Kind::kMap;
  out.map.reserve(v.pairs.size());
  absl::flat_hash_map<std::string, size_t> seen;
  for (const auto& [key, value] : v.pairs) {
    if (!key->IsScalar()) return Error(path, "metadata keys must be plain strings");
    std::string name = MetadataKey(*key);
    const std::string child = ChildPath(path, absl::CHexEscape(name));
    if (!seen.try_emplace(name, out.map.size()).second) return Error(child, "duplicate key");
    RlMetadataField& field = out.map.emplace_back();
    field.key = std::move(name);
    SLUICE_RETURN_IF_ERROR(ReadMetadataValue(*value, child, field.value));
  }
  return absl::OkStatus();
}

// A descriptor's `metadata`: a map, or nothing (absent, null or empty, as there).
absl::Status ReadMetadata(const Field& field, std::optional<RlMetadataValue>& out) {
  if (field.absent()) return absl::OkStatus();
  if (!field.node->IsMap()) {
    return Error(field.path, absl::StrCat("expected a map, got ", KindOf(*field.node)));
  }
  if (field.node->pairs.empty()) return absl::OkStatus();
  return ReadMetadataValue(*field.node, field.path, out.emplace());
}

class FileParser {
 public:
  absl::Status Descriptors(const Field& field, size_t depth, std::vector<RlDescriptor>& out) {
    if (field.absent()) return absl::OkStatus();
    if (!field.node->IsSequence()) {
      return Error(field.path, absl::StrCat("expected a list, got ", KindOf(*field.node)));
    }
    if (depth > kMaxRlDepth) {
      return Error(field.path, absl::StrCat("nested too deep (more than ", kMaxRlDepth,
                                            " levels of descriptors)"));
    }
    // key/value pair -> index in this list, for the duplicate check.
    absl::flat_hash_map<std::pair<std::string, std::string>, size_t> seen;
    out.reserve(field.node->items.size());
    for (size_t i = 0; i < field.node->items.size(); ++i) {
      const Field item{field.node->items[i], absl::StrCat(field.path, "[", i, "]"), field.dialect};
      if (++count_ > kMaxRlDescriptors) {
        return Error(item.path, absl::StrCat("too many descriptors (at most ", kMaxRlDescriptors,
                                             " in one file)"));
      }
      Fields f;
      SLUICE_RETURN_IF_ERROR(
          ReadMap(item,
                  {"key", "value", "rate_limit", "descriptors", "shadow_mode", "quota_mode",
                   "detailed_metric", "value_to_metric", "share_threshold", "metadata"},
                  f));
      RlDescriptor& d = out.emplace_back();
      const Field key = f.Get("key");
      SLUICE_RETURN_IF_ERROR(ReadString(key, d.key));
      if (d.key.empty()) return Error(key.path, "missing required key");
      if (d.key.size() > kMaxRlEntryKeyLength) {
        return Error(key.path, absl::StrCat("longer than ", kMaxRlEntryKeyLength,
                                            " bytes (no request's entry key may be longer)"));
      }
      SLUICE_RETURN_IF_ERROR(ReadString(f.Get("value"), d.value));
      const auto [it, inserted] = seen.try_emplace(std::make_pair(d.key, d.value), i);
      if (!inserted) {
        return Error(item.path,
                     absl::StrCat("duplicate descriptor: key ", Quote(d.key, kQuote),
                                  d.value.empty() ? std::string(" without a value")
                                                  : absl::StrCat(" value ", Quote(d.value, kQuote)),
                                  " is already ", field.path, "[", it->second, "]"));
      }
      SLUICE_RETURN_IF_ERROR(ReadBool(f.Get("shadow_mode"), d.shadow_mode));
      SLUICE_RETURN_IF_ERROR(ReadBool(f.Get("detailed_metric"), d.detailed_metric));
      SLUICE_RETURN_IF_ERROR(ReadBool(f.Get("value_to_metric"), d.value_to_metric));
      SLUICE_RETURN_IF_ERROR(ReadBool(f.Get("quota_mode"), d.quota_mode));
      const Field share_threshold = f.Get("share_threshold");
      SLUICE_RETURN_IF_ERROR(ReadBool(share_threshold, d.share_threshold));
      if (d.share_threshold && d.value.find('*') == std::string::npos) {
        return Error(share_threshold.path,
                     "only a wildcard value (one containing '*') can share its threshold");
      }
      SLUICE_RETURN_IF_ERROR(ReadMetadata(f.Get("metadata"), d.metadata));
      if (const Field rl = f.Get("rate_limit"); !rl.absent()) {
        SLUICE_RETURN_IF_ERROR(ParseRateLimit(rl, d.rate_limit.emplace()));
      }
      SLUICE_RETURN_IF_ERROR(Descriptors(f.Get("descriptors"), depth + 1, d.descriptors));
    }
    return absl::OkStatus();
  }

 private:
  size_t count_ = 0;
};

absl::Status ParseRoot(const Value& root, RateLimitFile& file) {
  const Field document{&root, "", &kRatelimitYaml};
  if (document.absent()) return Error("domain", "missing required key (the file is empty)");
  Fields f;
  SLUICE_RETURN_IF_ERROR(ReadMap(document, {"domain", "descriptors"}, f));
  SLUICE_RETURN_IF_ERROR(ReadString(f.Get("domain"), file.domain));
  if (file.domain.empty()) return Error("domain", "missing required key");
  FileParser parser;
  return parser.Descriptors(f.Get("descriptors"), 1, file.descriptors);
}

absl::StatusOr<RateLimitFile> LoadFile(const std::string& path) {
  absl::StatusOr<std::string> text = yaml::ReadRegularFile(path, kMaxRlFileBytes, "4 MiB");
  if (!text.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", text.status().message()));
  }
  return ParseRateLimitFile(*text, path);
}

bool IsYamlName(absl::string_view name) {
  return !absl::StartsWith(name, ".") &&
         (absl::EndsWith(name, ".yaml") || absl::EndsWith(name, ".yml"));
}

}  // namespace

std::string_view RlUnitName(RlUnit unit) {
  for (const UnitName& u : kUnits) {
    if (u.unit == unit) return {u.name.data(), u.name.size()};
  }
  return "unknown";
}

absl::StatusOr<RateLimitFile> ParseRateLimitFile(std::string_view text, std::string_view source) {
  RateLimitFile file;
  file.source = std::string(source);
  // YAML levels: the root map, a list and a map per descriptor level, and rate_limit's map,
  // replaces' list and its items' maps below the deepest. Beyond that a descriptor would nest too
  // deep anyway; the reader stops such a document before building it.
  const yaml::Limits limits{.max_bytes = kMaxRlFileBytes,
                            .max_bytes_text = "4 MiB",
                            .max_depth = 1 + 2 * (kMaxRlDepth + 1) + 3,
                            .max_values = 400'000,
                            .max_commas = 200'000};
  absl::StatusOr<yaml::Document> document = yaml::Parse(text, limits);
  absl::Status status = document.ok() ? ParseRoot(document->root(), file) : document.status();
  if (!status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(FromStd(source), ": ", status.message()));
  }
  return file;
}

absl::Status CheckDistinctDomains(const std::vector<RateLimitFile>& files) {
  absl::flat_hash_map<std::string, const RateLimitFile*> seen;
  for (const RateLimitFile& file : files) {
    const auto [it, inserted] = seen.try_emplace(file.domain, &file);
    if (!inserted) {
      return absl::InvalidArgumentError(
          absl::StrCat(file.source, ": domain ", Quote(file.domain, kQuote),
                       " is already defined in ", it->second->source));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<RateLimitFile>> LoadRateLimitConfig(std::string_view std_path) {
  const std::string path(std_path);
  const auto failed = [&path](absl::string_view what, int error) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", what, ": ", std::generic_category().message(error)));
  };
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return failed("cannot open", errno);
  std::vector<RateLimitFile> files;
  if (!S_ISDIR(st.st_mode)) {
    absl::StatusOr<RateLimitFile> file = LoadFile(path);
    if (!file.ok()) return file.status();
    files.push_back(*std::move(file));
    return files;
  }
  std::vector<std::string> names;
  {
    DIR* dir = ::opendir(path.c_str());
    if (dir == nullptr) return failed("cannot open", errno);
    struct Closer {
      DIR* dir;
      ~Closer() { ::closedir(dir); }
    } closer{dir};
    errno = 0;
    while (const struct dirent* entry = ::readdir(dir)) {
      const absl::string_view name = entry->d_name;
      if (!IsYamlName(name)) continue;
      if (names.size() == kMaxRlFiles) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": too many rate limit files (more than ", kMaxRlFiles, ")"));
      }
      names.emplace_back(name);
    }
    if (errno != 0) return failed("cannot read", errno);
  }
  std::sort(names.begin(), names.end());
  const std::string prefix = absl::EndsWith(path, "/") ? path : path + "/";
  for (const std::string& name : names) {
    const std::string file_path = prefix + name;
    // Not recursive: a directory named like a file is passed over; a symbolic link to a file (as a
    // Kubernetes ConfigMap mounts them) is followed.
    struct stat entry {};
    if (::stat(file_path.c_str(), &entry) == 0 && S_ISDIR(entry.st_mode)) continue;
    absl::StatusOr<RateLimitFile> file = LoadFile(file_path);
    if (!file.ok()) return file.status();
    files.push_back(*std::move(file));
  }
  SLUICE_RETURN_IF_ERROR(CheckDistinctDomains(files));
  return files;
}

}  // namespace sluice::config

#undef SLUICE_RETURN_IF_ERROR
