#include "sluice/limiter/alert_event.h"

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "sluice/common/stable_hash.h"

namespace sluice {
inline namespace limiter {
namespace {

// Two independent FNV-1a runs give the 128 bits of the id. The first starts from the standard
// offset basis, the second from that basis xor the 64-bit golden ratio. Changing either seed or
// the encoding below changes every id ever issued: receivers would see old alerts as new ones.
constexpr uint64_t kSeedHigh = 0xcbf29ce484222325ULL;
constexpr uint64_t kSeedLow = 0xcbf29ce484222325ULL ^ 0x9e3779b97f4a7c15ULL;

// Hashes `v` as 8 little-endian bytes, independent of the host's byte order.
uint64_t HashInt64(int64_t v, uint64_t h) {
  const auto u = static_cast<uint64_t>(v);
  char bytes[8];
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((u >> (8 * i)) & 0xff);
  return StableHash64(std::string_view(bytes, sizeof bytes), h);
}

// Hashes the length of `s` before its bytes, so that ("ab", "c") and ("a", "bc") differ.
uint64_t HashString(std::string_view s, uint64_t h) {
  return StableHash64(s, HashInt64(static_cast<int64_t>(s.size()), h));
}

uint64_t HashEvent(const AlertEvent& e, uint64_t seed) {
  uint64_t h = HashString(e.subject, seed);
  h = HashString(e.plan, h);
  h = HashString(e.limit, h);
  h = HashInt64(absl::ToUnixSeconds(e.window_start), h);
  h = HashInt64(e.threshold, h);
  // A threshold fires once per quota in force (an override or upgrade re-arms it), so the quota is
  // part of the alert's identity: a receiver that de-duplicates by id must not drop the second.
  return HashInt64(e.quota, h);
}

}  // namespace

std::string AlertEvent::Id() const {
  return absl::StrCat("qa_", absl::Hex(HashEvent(*this, kSeedHigh), absl::kZeroPad16),
                      absl::Hex(HashEvent(*this, kSeedLow), absl::kZeroPad16));
}

}  // namespace limiter
}  // namespace sluice
