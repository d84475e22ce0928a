#include "sluice/config/yaml_fields.h"

#include <algorithm>
#include <iterator>

#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "sluice/config/vocabulary.h"

namespace sluice::config {

using yaml::Value;

absl::Status Error(absl::string_view path, absl::string_view what) {
  return absl::InvalidArgumentError(path.empty() ? std::string(what)
                                                 : absl::StrCat(path, ": ", what));
}

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

std::string ChildPath(absl::string_view path, absl::string_view name) {
  return path.empty() ? std::string(name) : absl::StrCat(path, ".", name);
}

std::optional<bool> Yaml11Bool(absl::string_view text) {
  static constexpr absl::string_view kTrue[] = {"true", "True", "TRUE", "yes", "Yes", "YES",
                                                "on",   "On",   "ON",   "y",   "Y"};
  static constexpr absl::string_view kFalse[] = {"false", "False", "FALSE", "no", "No", "NO",
                                                 "off",   "Off",   "OFF",   "n",  "N"};
  if (std::find(std::begin(kTrue), std::end(kTrue), text) != std::end(kTrue)) return true;
  if (std::find(std::begin(kFalse), std::end(kFalse), text) != std::end(kFalse)) return false;
  return std::nullopt;
}

absl::Status ReadFields(const Field& field, std::initializer_list<absl::string_view> allowed,
                        Fields& fields) {
  fields.path = field.path;
  fields.dialect = field.dialect;
  if (field.absent()) return absl::OkStatus();
  if (!field.node->IsMap()) {
    return Error(field.path, absl::StrCat("expected a map, got ", KindOf(*field.node)));
  }
  // The path of a field is built only for an error: a file with 150,000 keys reads 450,000 fields.
  const auto path_of = [&field](absl::string_view name) {
    return ChildPath(field.path, absl::CHexEscape(name));
  };
  fields.items.reserve(field.node->pairs.size());
  for (const auto& [key, value] : field.node->pairs) {
    if (!key->IsScalar()) return Error(field.path, "field names must be plain strings");
    const std::string& name = key->Scalar();
    if (std::find(allowed.begin(), allowed.end(), name) == allowed.end()) {
      return Error(path_of(name),
                   absl::StrCat("unknown ", field.dialect->entry,
                                " (expected one of: ", absl::StrJoin(allowed, ", "), ")"));
    }
    for (const auto& item : fields.items) {
      if (item.first == name) {
        return Error(path_of(name), absl::StrCat("duplicate ", field.dialect->entry));
      }
    }
    fields.items.emplace_back(name, value);
  }
  return absl::OkStatus();
}

absl::Status Require(const Field& field) {
  return field.absent() ? Error(field.path, absl::StrCat("missing required ", field.dialect->entry))
                        : absl::OkStatus();
}

absl::Status ReadString(const Field& field, std::string& out) {
  if (field.absent()) return absl::OkStatus();
  if (!field.node->IsScalar()) {
    return Error(field.path, absl::StrCat("expected a string, got ", KindOf(*field.node)));
  }
  const std::string& text = field.node->Scalar();
  if (text.size() > field.dialect->max_string) {
    return Error(field.path, absl::StrCat("too long: ", text.size(), " bytes (at most ",
                                          field.dialect->max_string, ")"));
  }
  out = text;
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
    return Error(field.path,
                 absl::StrCat("expected an integer, got ", Quote(text, field.dialect->quote)));
  }
  int64_t value = 0;
  if (!absl::SimpleAtoi(text, &value) || value < min || value > max) {
    return Error(field.path, absl::StrCat("must be between ", min, " and ", max, ", got ", text));
  }
  out = value;
  return absl::OkStatus();
}

absl::Status ReadInt(const Field& field, int min, int max, int& out) {
  int64_t value = out;
  SLUICE_RETURN_IF_ERROR(ReadInt64(field, min, max, value));
  out = static_cast<int>(value);
  return absl::OkStatus();
}

absl::Status ReadBool(const Field& field, bool& out) {
  if (field.absent()) return absl::OkStatus();
  if (field.node->IsScalar()) {
    const std::string& text = field.node->Scalar();
    if (field.dialect->yaml11_bools) {
      if (const std::optional<bool> value = Yaml11Bool(text); value.has_value()) {
        out = *value;
        return absl::OkStatus();
      }
    } else if (text == "true" || text == "false") {
      out = text == "true";
      return absl::OkStatus();
    }
    return Error(field.path,
                 absl::StrCat("expected true or false, got ", Quote(text, field.dialect->quote)));
  }
  return Error(field.path, absl::StrCat("expected true or false, got ", KindOf(*field.node)));
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

}  // namespace sluice::config

#undef SLUICE_RETURN_IF_ERROR
