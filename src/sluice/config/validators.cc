#include "sluice/config/validators.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "sluice/config/limits.h"

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

bool IsValidName(absl::string_view name, size_t max_length) {
  return !name.empty() && name.size() <= max_length && AllOf(name, IsNameChar);
}

bool IsIpv4(absl::string_view text) {
  in_addr address;
  return inet_pton(AF_INET, std::string(text).c_str(), &address) == 1;
}

bool IsIpv6(absl::string_view text) {
  in6_addr address;
  return inet_pton(AF_INET6, std::string(text).c_str(), &address) == 1;
}

bool IsValidListenAddress(absl::string_view text) {
  absl::string_view port;
  if (absl::ConsumePrefix(&text, "[")) {
    const size_t close = text.find("]:");
    if (close == absl::string_view::npos || !IsIpv6(text.substr(0, close))) return false;
    port = text.substr(close + 2);
  } else {
    const size_t colon = text.find(':');
    if (colon == absl::string_view::npos || !IsIpv4(text.substr(0, colon))) return false;
    port = text.substr(colon + 1);
  }
  int value = 0;
  return !port.empty() && port.size() <= 5 && AllOf(port, IsDigit) &&
         absl::SimpleAtoi(port, &value) && value >= 1 && value <= 65535;
}

bool IsValidCidr(absl::string_view text) {
  const size_t slash = text.find('/');
  const absl::string_view address = text.substr(0, slash);
  const bool v4 = IsIpv4(address);
  if (!v4 && !IsIpv6(address)) return false;
  if (slash == absl::string_view::npos) return true;
  const absl::string_view prefix = text.substr(slash + 1);
  int bits = 0;
  return !prefix.empty() && prefix.size() <= 3 && AllOf(prefix, IsDigit) &&
         absl::SimpleAtoi(prefix, &bits) && bits <= (v4 ? 32 : 128);
}

bool IsHttpToken(absl::string_view text) {
  return !text.empty() && AllOf(text, [](char c) {
    return absl::ascii_isalnum(c) ||
           absl::string_view("!#$%&'*+-.^_`|~").find(c) != absl::string_view::npos;
  });
}

bool IsValidEmail(absl::string_view text) {
  const size_t at = text.find('@');
  return text.size() <= kMaxEmailLength && at != absl::string_view::npos && at > 0 &&
         at + 1 < text.size() && text.find('@', at + 1) == absl::string_view::npos &&
         AllOf(text, IsVisibleAscii) &&
         // What the email sink does not send to: a display name, a list, a quoted part.
         text.find_first_of("<>,;\"\\()[]") == absl::string_view::npos;
}

bool IsUrl(absl::string_view text, std::initializer_list<absl::string_view> schemes) {
  return std::any_of(schemes.begin(), schemes.end(),
                     [text](absl::string_view scheme) {
                       return absl::StartsWith(text, scheme) && text.size() > scheme.size();
                     }) &&
         AllOf(text, IsVisibleAscii);
}

bool IsWebhookSecret(absl::string_view text) {
  std::string decoded;
  return absl::ConsumePrefix(&text, "whsec_") && !text.empty() &&
         AllOf(text,
               [](char c) { return absl::ascii_isalnum(c) || c == '+' || c == '/' || c == '='; }) &&
         absl::Base64Unescape(text, &decoded) && !decoded.empty();
}

bool IsKnownTimeZone(absl::string_view name) {
  const bool plausible =
      !name.empty() && name.front() != '/' && name != "localtime" &&
      !absl::StrContains(name, "..") && AllOf(name, [](char c) {
        return absl::ascii_isalnum(c) || c == '/' || c == '_' || c == '+' || c == '-';
      });
  absl::TimeZone zone;
  return plausible && absl::LoadTimeZone(std::string(name), &zone);
}

}  // namespace sluice::config
