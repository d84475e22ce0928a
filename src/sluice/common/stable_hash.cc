#include "sluice/common/stable_hash.h"

namespace sluice {
inline namespace common {

uint64_t StableHash64(std::string_view data, uint64_t seed) {
  constexpr uint64_t kPrime = 0x100000001b3ULL;
  uint64_t h = seed;
  for (unsigned char c : data) {
    h ^= c;
    h *= kPrime;
  }
  return h;
}

}  // namespace common
}  // namespace sluice
