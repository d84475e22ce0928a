// Hexadecimal text: the one digit rule, decoder and encoder of sluice (digests in configuration
// and stored records, key ids, percent-encoding, JSON \u escapes).
#ifndef SLUICE_COMMON_HEX_H_
#define SLUICE_COMMON_HEX_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace sluice {
inline namespace common {

// Which letters a decoder takes as digits. Canonical text forms (a key id) are lower case only.
enum class HexLetters { kEitherCase, kLowerCase };

// The value of the hex digit `c` (0-9, a-f, and A-F unless `letters` is kLowerCase), or -1.
[[nodiscard]] constexpr int HexDigitValue(char c, HexLetters letters = HexLetters::kEitherCase) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (letters == HexLetters::kEitherCase && c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Decodes `hex`, exactly 2 * out.size() hex digits of either case, into `out`. InvalidArgument
// (naming the length or the offset of the first non-digit, never the text, which may be a secret)
// otherwise; `out` is then unspecified. Callers with their own wording replace the message.
[[nodiscard]] absl::Status DecodeHex(std::string_view hex, std::span<uint8_t> out);

// Decodes `hex`, an even number of hex digits of either case, into as many bytes as it holds;
// errors as above.
[[nodiscard]] absl::StatusOr<std::string> DecodeHex(std::string_view hex);

// `bytes` as lower-case hex, two digits a byte.
[[nodiscard]] std::string EncodeHex(std::span<const uint8_t> bytes);
[[nodiscard]] std::string EncodeHex(std::string_view bytes);

// The 16 lower-case hex digits of `value`, most significant first, zero-padded.
[[nodiscard]] std::string EncodeHex64(uint64_t value);

// Exactly 16 hex digits (of the case `letters` allows) as a value, most significant first;
// nullopt otherwise (no sign, prefix or spaces).
[[nodiscard]] std::optional<uint64_t> DecodeHex64(std::string_view hex,
                                                  HexLetters letters = HexLetters::kEitherCase);

}  // namespace common
}  // namespace sluice

#endif  // SLUICE_COMMON_HEX_H_
