// Typed readers of the fields of a YAML document (yaml_document.h), each naming what it reads by
// its key path in errors: "<key.path>: <what is wrong>". The loader of sluice.yaml and the reader
// of envoyproxy/ratelimit's files share them; a Dialect keeps the words and bounds each file's
// messages have always had. Internal to the config module.
//
// A field that is left out, or written without a value (`name:` or `name: ~`), is absent: every
// reader then leaves its output as it is (the default), and Require refuses it.
#ifndef SLUICE_CONFIG_YAML_FIELDS_H_
#define SLUICE_CONFIG_YAML_FIELDS_H_

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "sluice/config/validators.h"
#include "sluice/config/yaml_document.h"

namespace sluice::config {

// How the messages about one kind of file read.
struct Dialect {
  // What a map's entries are called: "unknown field", "duplicate field", "missing required field".
  absl::string_view entry;
  QuoteStyle quote;  // how a value of the file is shown
  // ReadBool takes `true` and `false` only (YAML 1.1's yes/no/on/off surprise), or, with this set,
  // YAML 1.1's spellings (Yaml11Bool).
  bool yaml11_bools = false;
  // ReadString refuses a longer string: "too long: <n> bytes (at most <max_string>)".
  size_t max_string = std::numeric_limits<size_t>::max();
};

// sluice.yaml's: fields, values cut after 80 bytes, `true`/`false`, strings bounded by the checks.
inline constexpr Dialect kSluiceYaml{.entry = "field"};

// "<path>: <what>", or `what` alone for the document itself (path "").
[[nodiscard]] absl::Status Error(absl::string_view path, absl::string_view what);

// "a map", "a list", "a scalar" or "nothing": never the scalar's text, which may be a secret
// written in the wrong place.
[[nodiscard]] absl::string_view KindOf(const yaml::Value& node);

// The key path of the entry `name` of the map at `path` ("name" at the top level).
[[nodiscard]] std::string ChildPath(absl::string_view path, absl::string_view name);

// A YAML 1.1 boolean, as envoyproxy/ratelimit's YAML library reads one: true, True, TRUE, yes,
// Yes, YES, on, On, ON, y, Y and their false counterparts (false, no, off, n, ...); else nothing.
[[nodiscard]] std::optional<bool> Yaml11Bool(absl::string_view text);

// One value of the document, the key path that names it in errors, and the dialect it is read in.
struct Field {
  const yaml::Value* node = &yaml::kUndefinedValue;  // never null
  std::string path;
  const Dialect* dialect = &kSluiceYaml;  // never null

  // Left out, or written without a value (`name:` or `name: ~`): both mean "use the default".
  [[nodiscard]] bool absent() const { return !node->IsDefined() || node->IsNull(); }
};

// The fields of one YAML map, in file order.
struct Fields {
  std::string path;
  const Dialect* dialect = &kSluiceYaml;
  std::vector<std::pair<absl::string_view, const yaml::Value*>> items;  // names point into the
                                                                        // document

  // The field `name` (absent() if the map does not have it).
  [[nodiscard]] Field Get(absl::string_view name) const {
    Field field{&yaml::kUndefinedValue, ChildPath(path, name), dialect};
    for (const auto& [item_name, node] : items) {
      if (item_name == name) field.node = node;
    }
    return field;
  }
};

// Reads the map `field` into `fields`, refusing names outside `allowed` and repeated names. An
// absent field reads as an empty map.
[[nodiscard]] absl::Status ReadFields(const Field& field,
                                      std::initializer_list<absl::string_view> allowed,
                                      Fields& fields);

// "missing required field" if `field` is absent.
[[nodiscard]] absl::Status Require(const Field& field);

[[nodiscard]] absl::Status ReadString(const Field& field, std::string& out);
// A decimal integer in min..max.
[[nodiscard]] absl::Status ReadInt64(const Field& field, int64_t min, int64_t max, int64_t& out);
[[nodiscard]] absl::Status ReadInt(const Field& field, int min, int max, int& out);
[[nodiscard]] absl::Status ReadBool(const Field& field, bool& out);
// A duration as ParseDuration reads it.
[[nodiscard]] absl::Status ReadDuration(const Field& field, absl::Duration& out);

// Reads a string that must be one of `choices`; `what` names it in the error ("store type").
template <typename E>
[[nodiscard]] absl::Status ReadEnum(const Field& field, absl::string_view what,
                                    std::initializer_list<std::pair<absl::string_view, E>> choices,
                                    E& out) {
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
  return Error(field.path, absl::StrCat("unknown ", what, " ", Quote(text, field.dialect->quote),
                                        " (want ", wanted, ")"));
}

// Calls each(item, index) for every element of the list `field`; items are named "path[index]".
template <typename Fn>
[[nodiscard]] absl::Status ForEachItem(const Field& field, Fn&& each) {
  if (field.absent()) return absl::OkStatus();
  if (!field.node->IsSequence()) {
    return Error(field.path, absl::StrCat("expected a list, got ", KindOf(*field.node)));
  }
  size_t index = 0;
  for (const yaml::Value* node : field.node->items) {
    SLUICE_RETURN_IF_ERROR(
        each(Field{node, absl::StrCat(field.path, "[", index, "]"), field.dialect}, index));
    ++index;
  }
  return absl::OkStatus();
}

}  // namespace sluice::config

#endif  // SLUICE_CONFIG_YAML_FIELDS_H_
