#include "sluice/frontend/cost.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "sluice/limiter/store.h"

namespace sluice::frontend {

absl::StatusOr<int64_t> ParseCost(std::string_view text) {
  int64_t cost = 0;
  bool ok = !text.empty();
  for (const char c : text) {
    if (c < '0' || c > '9') {
      ok = false;
      break;
    }
    cost = cost * 10 + (c - '0');
    if (cost > kMaxCost) {
      ok = false;
      break;
    }
  }
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat("must be an integer from 0 to ", kMaxCost));
  }
  return cost;
}

}  // namespace sluice::frontend
