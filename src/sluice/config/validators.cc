#include "sluice/config/validators.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace sluice::config {

std::string Quote(absl::string_view text) {
  constexpr size_t kMaxShown = 80;
  if (text.size() > kMaxShown) {
    return absl::StrCat("\"", absl::CHexEscape(text.substr(0, kMaxShown)), "...\"");
  }
  return absl::StrCat("\"", absl::CHexEscape(text), "\"");
}

size_t CountLeadingDigits(absl::string_view text) {
  return static_cast<size_t>(std::find_if_not(text.begin(), text.end(), IsDigit) - text.begin());
}

}  // namespace sluice::config
