// Plain checks of single values and how messages quote them: shared by the parsers of the
// vocabulary, the readers of the files and the checks of a built Config. Internal to the config
// module.
#ifndef SLUICE_CONFIG_VALIDATORS_H_
#define SLUICE_CONFIG_VALIDATORS_H_

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>

#include "absl/strings/ascii.h"
#include "absl/strings/string_view.h"

namespace sluice::config {

// Debian's abseil is built with its own absl::string_view (not an alias of std::string_view), which
// absl's string functions take; config.h speaks std::string_view.
inline absl::string_view FromStd(std::string_view text) { return {text.data(), text.size()}; }

// How a message shows what a file says: quoted, C-escaped, and cut after `cut` bytes, the "..."
// inside the quotes ("abc...", sluice.yaml) or after them ("abc"..., envoyproxy/ratelimit's files).
struct QuoteStyle {
  size_t cut = 80;
  bool ellipsis_inside = true;
};

// User text for an error message: quoted, escaped, and cut (after 80 bytes unless `style` says
// otherwise).
[[nodiscard]] std::string Quote(absl::string_view text, QuoteStyle style = {});

inline bool AllOf(absl::string_view text, bool (*pred)(char)) {
  return std::all_of(text.begin(), text.end(), pred);
}

inline bool IsDigit(char c) { return absl::ascii_isdigit(c); }

[[nodiscard]] size_t CountLeadingDigits(absl::string_view text);

}  // namespace sluice::config

#endif  // SLUICE_CONFIG_VALIDATORS_H_
