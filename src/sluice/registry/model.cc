#include "sluice/registry/model.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "sluice/common/hex.h"

namespace sluice::registry {

namespace {
constexpr std::string_view kKeyIdPrefix = "key_";
}  // namespace

std::string KeyIdText(uint64_t id) {
  std::string out;
  out.reserve(kKeyIdPrefix.size() + 16);
  out.append(kKeyIdPrefix);
  AppendHex64(out, id);
  return out;
}

std::optional<uint64_t> ParseKeyId(std::string_view text) {
  if (!text.starts_with(kKeyIdPrefix)) return std::nullopt;
  // Lower case only: the text form is canonical.
  return DecodeHex64(text.substr(kKeyIdPrefix.size()), HexLetters::kLowerCase);
}

}  // namespace sluice::registry
