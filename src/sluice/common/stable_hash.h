// A hash whose value never changes between builds, machines or runs (unlike absl::Hash, which is
// seeded per process). Used where a hash is written down: snapshot tags and alert event ids.
#ifndef SLUICE_COMMON_STABLE_HASH_H_
#define SLUICE_COMMON_STABLE_HASH_H_

#include <cstdint>
#include <string_view>

namespace sluice {
inline namespace common {

// 64-bit FNV-1a of `data`, continuing from `seed` (pass a previous result to hash several parts).
// Not collision resistant against an adversary; never use it to authenticate anything.
[[nodiscard]] uint64_t StableHash64(std::string_view data, uint64_t seed = 0xcbf29ce484222325ULL);

}  // namespace common
}  // namespace sluice

#endif  // SLUICE_COMMON_STABLE_HASH_H_
