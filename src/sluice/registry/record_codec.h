// The subjects' overrides as both registry back ends store them: the SQLite file's overrides
// column and the member "overrides" of the Redis subject record.
//
//   [{"limit": "daily", "quota": 5, "until": 1700000000000000}, {"limit": "monthly", "quota": 9}]
//
// "until" is microseconds since the Unix epoch, left out when the override has none: the one form
// every sluice reads, older ones included. Files written by older builds hold "until": null for
// none, which reads as none too.
#ifndef SLUICE_REGISTRY_RECORD_CODEC_H_
#define SLUICE_REGISTRY_RECORD_CODEC_H_

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "absl/status/statusor.h"
#include "sluice/registry/model.h"

namespace sluice::registry {

// `overrides` as a JSON array, in their order, each object's members limit, quota, until.
[[nodiscard]] nlohmann::json OverridesJson(const std::vector<Override>& overrides);

// OverridesJson as compact text. Never throws: invalid UTF-8 in a limit name becomes U+FFFD.
[[nodiscard]] std::string OverridesText(const std::vector<Override>& overrides);

// What the reader makes of an "until" that is present and neither null nor an integer, which no
// sluice writes: the two back ends have always differed here, and a stored registry must not
// change meaning.
enum class BadUntil {
  kReject,  // the text is refused (the Redis back end: the subject record is not read)
  kIgnore,  // the override has no end (the SQLite back end)
};

struct OverridesReadOptions {
  BadUntil bad_until = BadUntil::kReject;
};

// The overrides in `text`. DataLoss "overrides is not a JSON array" for anything but an array
// (malformed text included), "an override is not {limit, quota, until}" for an element that is
// not an object with a string "limit" and an integer "quota", and, with BadUntil::kReject, "an
// override's until is not an integer" for a bad "until". Members other than these are ignored.
[[nodiscard]] absl::StatusOr<std::vector<Override>> ParseOverridesText(
    std::string_view text, OverridesReadOptions options = {});

}  // namespace sluice::registry

#endif  // SLUICE_REGISTRY_RECORD_CODEC_H_
