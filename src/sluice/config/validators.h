// Plain checks of single values and how messages quote them: shared by the parsers of the
// vocabulary, the readers of the files and the checks of a built Config. Internal to the config
// module.
#ifndef SLUICE_CONFIG_VALIDATORS_H_
#define SLUICE_CONFIG_VALIDATORS_H_

#include <algorithm>
#include <cstddef>
#include <initializer_list>
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

inline bool IsNameChar(char c) {
  return absl::ascii_isalnum(c) || c == '_' || c == '.' || c == '-';
}
inline bool IsVisibleAscii(char c) { return c > ' ' && c < 0x7f; }
inline bool IsDigit(char c) { return absl::ascii_isdigit(c); }
inline bool IsLowerHex(char c) { return absl::ascii_isdigit(c) || (c >= 'a' && c <= 'f'); }

[[nodiscard]] size_t CountLeadingDigits(absl::string_view text);

// [A-Za-z0-9_.-]{1,max_length}: plan, limit and key prefix names.
[[nodiscard]] bool IsValidName(absl::string_view name, size_t max_length);

[[nodiscard]] bool IsIpv4(absl::string_view text);
[[nodiscard]] bool IsIpv6(absl::string_view text);

// "ip:port" with an IPv4 address or a bracketed IPv6 one ("[::1]:8080"), port 1-65535. Host names
// are refused: which of a name's addresses to bind would be a guess.
[[nodiscard]] bool IsValidListenAddress(absl::string_view text);

// An IPv4 or IPv6 address, optionally followed by "/prefix" (0-32 or 0-128).
[[nodiscard]] bool IsValidCidr(absl::string_view text);

// An HTTP field name (RFC 9110 token).
[[nodiscard]] bool IsHttpToken(absl::string_view text);

// Exactly one '@' with text on both sides, at most kMaxEmailLength bytes; no spaces or control
// characters.
[[nodiscard]] bool IsValidEmail(absl::string_view text);

// A URL with one of `schemes` ("http://") and something after it, in visible ASCII.
[[nodiscard]] bool IsUrl(absl::string_view text, std::initializer_list<absl::string_view> schemes);

// "whsec_" followed by standard base64 (Standard Webhooks).
[[nodiscard]] bool IsWebhookSecret(absl::string_view text);

// An IANA zone name that abseil can load. Names abseil would read as paths or as its own
// extensions ("/etc/...", "../", "localtime", "Fixed/UTC+01:00") are not IANA names.
[[nodiscard]] bool IsKnownTimeZone(absl::string_view name);

}  // namespace sluice::config

#endif  // SLUICE_CONFIG_VALIDATORS_H_
