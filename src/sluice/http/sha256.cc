#include "sluice/http/sha256.h"

#include <optional>
#include <string>
#include <string_view>

#include "sluice/common/digest.h"

namespace sluice::http {

std::string Sha256(std::string_view data) {
  const std::optional<Sha256Digest> digest = common::Sha256(data);
  if (!digest) return "";
  return std::string(reinterpret_cast<const char*>(digest->data()), digest->size());
}

}  // namespace sluice::http
