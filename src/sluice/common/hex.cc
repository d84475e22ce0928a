#include "sluice/common/hex.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace sluice {
inline namespace common {
namespace {

constexpr char kLowerDigits[] = "0123456789abcdef";

absl::Status DecodeInto(std::string_view hex, uint8_t* out) {
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int hi = HexDigitValue(hex[i]);
    const int lo = HexDigitValue(hex[i + 1]);
    if (hi < 0 || lo < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("not a hex digit at offset ", hi < 0 ? i : i + 1));
    }
    out[i / 2] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return absl::OkStatus();
}

void AppendHex(const uint8_t* bytes, size_t n, std::string& out) {
  for (size_t i = 0; i < n; ++i) {
    out.push_back(kLowerDigits[bytes[i] >> 4]);
    out.push_back(kLowerDigits[bytes[i] & 0xf]);
  }
}

}  // namespace

absl::Status DecodeHex(std::string_view hex, std::span<uint8_t> out) {
  if (hex.size() != 2 * out.size()) {
    return absl::InvalidArgumentError(absl::StrCat("not ", 2 * out.size(), " hex digits"));
  }
  return DecodeInto(hex, out.data());
}

absl::StatusOr<std::string> DecodeHex(std::string_view hex) {
  if (hex.size() % 2 != 0) return absl::InvalidArgumentError("an odd number of hex digits");
  std::string out(hex.size() / 2, '\0');
  if (absl::Status s = DecodeInto(hex, reinterpret_cast<uint8_t*>(out.data())); !s.ok()) return s;
  return out;
}

std::string EncodeHex(std::span<const uint8_t> bytes) {
  std::string out;
  out.reserve(2 * bytes.size());
  AppendHex(bytes.data(), bytes.size(), out);
  return out;
}

std::string EncodeHex(std::string_view bytes) {
  return EncodeHex(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
}

std::string EncodeHex64(uint64_t value) {
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, value >>= 4) out[i] = kLowerDigits[value & 0xf];
  return out;
}

std::optional<uint64_t> DecodeHex64(std::string_view hex, HexLetters letters) {
  if (hex.size() != 16) return std::nullopt;
  uint64_t value = 0;
  for (const char c : hex) {
    const int digit = HexDigitValue(c, letters);
    if (digit < 0) return std::nullopt;
    value = (value << 4) | static_cast<uint64_t>(digit);
  }
  return value;
}

}  // namespace common
}  // namespace sluice
