#include "sluice/registry/record_codec.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace sluice::registry {

nlohmann::json OverridesJson(const std::vector<Override>& overrides) {
  nlohmann::json out = nlohmann::json::array();
  for (const Override& o : overrides) {
    nlohmann::json j = {{"limit", o.limit}, {"quota", o.quota}};
    if (o.until) j["until"] = absl::ToUnixMicros(*o.until);
    out.push_back(std::move(j));
  }
  return out;
}

std::string OverridesText(const std::vector<Override>& overrides) {
  return OverridesJson(overrides).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

absl::StatusOr<std::vector<Override>> ParseOverridesText(std::string_view text,
                                                         OverridesReadOptions options) {
  std::vector<Override> overrides;
  if (text == "[]") return overrides;  // most subjects: no parse
  const nlohmann::json value = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!value.is_array()) return absl::DataLossError("overrides is not a JSON array");
  for (const nlohmann::json& o : value) {
    if (!o.is_object()) return absl::DataLossError("an override is not {limit, quota, until}");
    const auto limit = o.find("limit"), quota = o.find("quota"), until = o.find("until");
    if (limit == o.end() || !limit->is_string() || quota == o.end() ||
        !quota->is_number_integer()) {
      return absl::DataLossError("an override is not {limit, quota, until}");
    }
    Override out{.limit = limit->get<std::string>(), .quota = quota->get<int64_t>()};
    if (until != o.end() && !until->is_null()) {
      if (until->is_number_integer()) {
        out.until = absl::FromUnixMicros(until->get<int64_t>());
      } else if (options.bad_until == BadUntil::kReject) {
        return absl::DataLossError("an override's until is not an integer");
      }
    }
    overrides.push_back(std::move(out));
  }
  return overrides;
}

}  // namespace sluice::registry
