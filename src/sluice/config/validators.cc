#include "sluice/config/validators.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace sluice::config {

std::string Quote(absl::string_view text, QuoteStyle style) {
  if (text.size() > style.cut) {
    return absl::StrCat("\"", absl::CHexEscape(text.substr(0, style.cut)),
                        style.ellipsis_inside ? "...\"" : "\"...");
  }
  return absl::StrCat("\"", absl::CHexEscape(text), "\"");
}

size_t CountLeadingDigits(absl::string_view text) {
  return static_cast<size_t>(std::find_if_not(text.begin(), text.end(), IsDigit) - text.begin());
}

}  // namespace sluice::config
