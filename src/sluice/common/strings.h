// Debian's abseil is built with its own absl::string_view (ABSL_OPTION_USE_STD_STRING_VIEW 0),
// which does not convert to or from std::string_view. sluice's own interfaces use std::string_view;
// these two helpers cross the boundary explicitly and cost nothing.
#ifndef SLUICE_COMMON_STRINGS_H_
#define SLUICE_COMMON_STRINGS_H_

#include <string_view>

#include "absl/strings/string_view.h"

namespace sluice {
inline namespace common {

[[nodiscard]] inline absl::string_view ToAbsl(std::string_view s) { return {s.data(), s.size()}; }
[[nodiscard]] inline std::string_view ToStd(absl::string_view s) { return {s.data(), s.size()}; }

}  // namespace common
}  // namespace sluice

#endif  // SLUICE_COMMON_STRINGS_H_
