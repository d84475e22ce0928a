#include "sluice/registry/model.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace sluice::registry {

namespace {
constexpr std::string_view kKeyIdPrefix = "key_";
constexpr char kHexDigits[] = "0123456789abcdef";
}  // namespace

std::string KeyIdText(uint64_t id) {
  std::string out(kKeyIdPrefix.size() + 16, '0');
  kKeyIdPrefix.copy(out.data(), kKeyIdPrefix.size());
  for (int i = 15; i >= 0; --i, id >>= 4) out[kKeyIdPrefix.size() + i] = kHexDigits[id & 0xf];
  return out;
}

std::optional<uint64_t> ParseKeyId(std::string_view text) {
  if (text.size() != kKeyIdPrefix.size() + 16 || !text.starts_with(kKeyIdPrefix)) {
    return std::nullopt;
  }
  uint64_t id = 0;
  for (const char c : text.substr(kKeyIdPrefix.size())) {
    int digit = 0;
    if (c >= '0' && c <= '9') {
      digit = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      digit = c - 'a' + 10;
    } else {
      return std::nullopt;  // uppercase too: the text form is canonical
    }
    id = (id << 4) | static_cast<uint64_t>(digit);
  }
  return id;
}

}  // namespace sluice::registry
