// envoyproxy/ratelimit's configuration files, read unchanged (docs/gateways.md, "Migrating from
// envoyproxy/ratelimit"), as plain structs.
//
// A file holds one domain and its tree of descriptors:
//
//   domain: messaging
//   descriptors:
//     - key: message_type
//       value: marketing
//       descriptors:
//         - key: to_number
//           rate_limit: { unit: day, requests_per_unit: 5 }
//
// The rules are envoyproxy/ratelimit's: unknown keys are errors, every descriptor has a key, a
// key/value pair appears once per level, a domain once across all files, a unit is one of its
// units (any case), `unlimited` goes without a unit, a `replaces` entry names another limit,
// `share_threshold` goes with a wildcard value, `metadata` is a map (of anything). Where
// envoyproxy/ratelimit accepts a mistake silently, this loader refuses it with a message: a key
// valid somewhere in the format but misplaced (`shadow_mode` inside `rate_limit`), a `rate_limit`
// without `requests_per_unit` (envoyproxy/ratelimit reads it as 0, which refuses every request;
// write 0 to mean that), a value that is not a string, bool or integer where one is expected.
//
// Everything is bounded: the file size, the nesting, the number of descriptors, the lengths of
// keys, values and names, YAML aliases with what they expand to.
#ifndef SLUICE_CONFIG_RATELIMIT_FILE_H_
#define SLUICE_CONFIG_RATELIMIT_FILE_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace sluice::config {

// The units of envoyproxy/ratelimit (its RateLimitResponse.RateLimit.Unit without UNKNOWN).
enum class RlUnit { kSecond, kMinute, kHour, kDay, kWeek, kMonth, kYear };

// "second", "minute", ... as a file writes them (lower case).
[[nodiscard]] std::string_view RlUnitName(RlUnit unit);

struct RlRateLimit {
  std::optional<RlUnit> unit;         // empty only when `unlimited`
  uint32_t requests_per_unit = 0;     // 0: every request is over the limit
  std::string name;                   // "" or what other limits' `replaces` name
  bool unlimited = false;             // matched, never limited, never counted
  std::vector<std::string> replaces;  // names of limits this one replaces (never empty strings)
};

struct RlMetadataField;

// A value of a descriptor's `metadata`, typed as envoyproxy/ratelimit's YAML reader (YAML 1.1)
// types it before passing it on as a google.protobuf.Value: a plain (unquoted) scalar is null
// (`~`, `null`, nothing), a boolean (`true`, `yes`, `on`, `y`, ... in the cases YAML 1.1 lists),
// a number (a decimal, hexadecimal `0x`, octal `0o` or leading `0`, or binary `0b` integer, `_`
// allowed between digits; a decimal fraction or exponent; `.inf`, `.nan`), else a string; a quoted
// or tagged scalar is a string.
struct RlMetadataValue {
  enum class Kind { kNull, kBool, kNumber, kString, kList, kMap };
  Kind kind = Kind::kNull;
  bool boolean = false;
  double number = 0;
  std::string string;
  std::vector<RlMetadataValue> list;
  std::vector<RlMetadataField> map;  // in file order; keys distinct
};

struct RlMetadataField {
  // As the file writes it; a plain key YAML 1.1 reads as a boolean or an integer is named as Go
  // prints that value there ("yes" is "true", "0x10" is "16").
  std::string key;
  RlMetadataValue value;
};

struct RlDescriptor {
  std::string key;  // 1..kMaxRlKeyLength bytes
  // "" : any value (one counter per distinct value); containing '*': a wildcard, each '*' standing
  // for any run of bytes, none included ("/api/*", "/api/*/action", "a*b*c"); otherwise this value
  // exactly. At most kMaxRlKeyLength bytes.
  std::string value;
  std::optional<RlRateLimit> rate_limit;
  bool shadow_mode = false;  // decided and counted, never denied
  // envoyproxy/ratelimit's quota mode: a call is denied for its quota_mode rules only when every
  // one of them is over its limit (any one with room admits it); see ratelimit_rules.h.
  bool quota_mode = false;
  bool detailed_metric = false;  // envoyproxy/ratelimit: metrics name the request's value
  bool value_to_metric = false;  // likewise (metrics only; sluice's never name values)
  // With a wildcard value (the loader refuses it on any other): every value it matches counts on
  // one counter (the pattern's) instead of one counter per value.
  bool share_threshold = false;
  // `metadata`: a map (kind kMap) sent back to Envoy in the response's dynamic_metadata when this
  // descriptor's rule lets a call pass (ratelimit_request.h); none when absent, null or empty.
  std::optional<RlMetadataValue> metadata;
  std::vector<RlDescriptor> descriptors;  // the next level
};

struct RateLimitFile {
  std::string source;  // the file it came from, for messages
  std::string domain;  // 1..kMaxRlKeyLength bytes, unique across the files of one load
  std::vector<RlDescriptor> descriptors;
};

inline constexpr size_t kMaxRlFileBytes = size_t{4} << 20;  // 4 MiB
inline constexpr size_t kMaxRlDepth = 16;                   // levels of descriptors
inline constexpr size_t kMaxRlDescriptors = 10'000;         // per file, all levels
inline constexpr size_t kMaxRlKeyLength = 1024;             // a value, a domain, a name
// A descriptor's key: at most what the Rate Limit Service accepts as a request's entry key.
inline constexpr size_t kMaxRlEntryKeyLength = 128;
inline constexpr size_t kMaxRlFiles = 1'000;  // in a directory
inline constexpr size_t kMaxRlReplaces = 64;  // per rate_limit

// Parses the YAML text of one file. `source` names it in errors, which are InvalidArgument
// "<source>: <key path>: <what is wrong>", the path as the file nests it:
// "rl.yaml: descriptors[0].descriptors[1].rate_limit.unit: unknown unit \"fortnight\" (want
// second, minute, hour, day, week, month or year)".
[[nodiscard]] absl::StatusOr<RateLimitFile> ParseRateLimitFile(std::string_view yaml,
                                                               std::string_view source);

// Loads `path`: a file, or a directory whose *.yaml and *.yml files (not hidden, not in
// subdirectories) are loaded in name order. A domain defined twice is an error naming both files.
// An empty directory loads no file (not an error). Errors are InvalidArgument naming the file:
// "<file>: cannot open: No such file or directory".
[[nodiscard]] absl::StatusOr<std::vector<RateLimitFile>> LoadRateLimitConfig(std::string_view path);

// Checks the domains of `files` are distinct ("b.yaml: domain \"x\" is already defined in
// a.yaml"); LoadRateLimitConfig calls it.
[[nodiscard]] absl::Status CheckDistinctDomains(const std::vector<RateLimitFile>& files);

}  // namespace sluice::config

#endif  // SLUICE_CONFIG_RATELIMIT_FILE_H_
