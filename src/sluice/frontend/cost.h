// The cost of a request as a front end receives it in text (the Sluice-Cost header, the `cost`
// entry of a Rate Limit Service descriptor).
#ifndef SLUICE_FRONTEND_COST_H_
#define SLUICE_FRONTEND_COST_H_

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"

namespace sluice::frontend {

// Parses a cost written as ASCII digits only (no sign, space or exponent; leading zeros are
// fine), from 0 to kMaxCost (limiter/store.h). The error is InvalidArgument
// "must be an integer from 0 to 1000000"; each front end says where the value came from.
[[nodiscard]] absl::StatusOr<int64_t> ParseCost(std::string_view text);

}  // namespace sluice::frontend

#endif  // SLUICE_FRONTEND_COST_H_
