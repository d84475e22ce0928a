// YAML documents as plain values, read under bounds: the reader that sluice.yaml and the
// envoyproxy/ratelimit files share. Internal to the config module (yaml-cpp stays inside it).
#ifndef SLUICE_CONFIG_YAML_DOCUMENT_H_
#define SLUICE_CONFIG_YAML_DOCUMENT_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

// Returns from the enclosing function if `expr` (an absl::Status) is not OK. For the config
// module's readers.
#define SLUICE_RETURN_IF_ERROR(expr)                    \
  do {                                                  \
    if (absl::Status status_ = (expr); !status_.ok()) { \
      return status_;                                   \
    }                                                   \
  } while (false)

namespace sluice::config::yaml {

// One value of the document. The loader builds these itself from yaml-cpp's parse events (see
// DocumentBuilder) rather than asking yaml-cpp for its YAML::Node tree: yaml-cpp then scans the
// file once, not once for the bounds and again for the tree, and a value is one plain struct
// instead of a node behind shared pointers. Values live in their document's arena; an alias is
// the value it names, shared, not a copy.
struct Value {
  enum class Kind { kUndefined, kNull, kScalar, kSequence, kMap };

  Kind kind = Kind::kUndefined;
  std::string scalar;  // kScalar
  // kScalar: written in YAML's plain style (no quotes, no tag), so a reader may type it (YAML 1.1
  // reads `yes` as a boolean, `0x10` as a number); a quoted or tagged one is a string.
  bool plain = false;
  std::vector<const Value*> items;                           // kSequence
  std::vector<std::pair<const Value*, const Value*>> pairs;  // kMap: in file order, repeats kept

  [[nodiscard]] bool IsDefined() const { return kind != Kind::kUndefined; }
  [[nodiscard]] bool IsNull() const { return kind == Kind::kNull; }
  [[nodiscard]] bool IsScalar() const { return kind == Kind::kScalar; }
  [[nodiscard]] bool IsSequence() const { return kind == Kind::kSequence; }
  [[nodiscard]] bool IsMap() const { return kind == Kind::kMap; }
  [[nodiscard]] const std::string& Scalar() const { return scalar; }
};

// What a field the document leaves out reads as.
extern const Value kUndefinedValue;

// What one file may hold before it is refused with a message instead of exhausting memory, time or
// the stack (a device, a log, a deeply nested or alias-bomb document).
struct Limits {
  size_t max_bytes = size_t{16} << 20;
  std::string_view max_bytes_text = "16 MiB";  // how a message writes max_bytes
  size_t max_depth = 64;                       // nested collections
  // Values with every alias expanded: an alias costs as much as what it names, so a "billion
  // laughs" document is refused before anyone copies it out.
  uint64_t max_values = 4'000'000;
  // yaml-cpp reads a whole flow collection ("[a, b, ...]") ahead before it reports any of it, so
  // commas (wherever they are) are counted before parsing.
  size_t max_commas = 2'000'000;
};

// One parsed document; it owns its values.
class Document {
 public:
  [[nodiscard]] const Value& root() const { return *root_; }

 private:
  friend absl::StatusOr<Document> Parse(std::string_view text, const Limits& limits);
  std::shared_ptr<const std::deque<Value>> arena_;
  const Value* root_ = &kUndefinedValue;
};

// Parses `text`, which must hold at most one YAML document (a stray "---" at the end adds an empty
// one, which is ignored). Errors are InvalidArgument without a source prefix: "line 3, column 7:
// ...", "too large: ...", "nested too deep (more than 64 levels)". No exception leaves it.
[[nodiscard]] absl::StatusOr<Document> Parse(std::string_view text, const Limits& limits);

// The whole of the regular file `path`, at most `max_bytes` (`max_text` writes that bound in a
// message). Errors name neither the path nor anything read: "cannot open: No such file or
// directory", "not a regular file (a FIFO)", "too large: 5000000 bytes (at most 4 MiB)".
[[nodiscard]] absl::StatusOr<std::string> ReadRegularFile(const std::string& path, size_t max_bytes,
                                                          std::string_view max_text);

}  // namespace sluice::config::yaml

#endif  // SLUICE_CONFIG_YAML_DOCUMENT_H_
