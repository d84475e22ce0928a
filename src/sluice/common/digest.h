// Digests: SHA-256 (API keys, admin tokens, counter names, request fingerprints), the SHA-1 that
// names a Lua script in Redis, and the constant-time comparison of secrets' digests. The only
// module that calls OpenSSL's digests (target sluice_common_digest).
#ifndef SLUICE_COMMON_DIGEST_H_
#define SLUICE_COMMON_DIGEST_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace sluice {
inline namespace common {

inline constexpr size_t kSha256Length = 32;

// A raw SHA-256.
using Sha256Digest = std::array<uint8_t, kSha256Length>;

// The SHA-256 of `data`, or nullopt if OpenSSL fails (only when out of memory). Thread-safe.
// OpenSSL 3 looks the algorithm up on every one-shot call, which costs more than the hash of a
// short key; this fetches it once and keeps one digest context per thread, and allocates nothing.
[[nodiscard]] std::optional<Sha256Digest> Sha256(std::string_view data);

// The SHA-1 of `data` in lower-case hex: what EVALSHA names a Lua script by. Not for secrets.
[[nodiscard]] std::string Sha1Hex(std::string_view data);

// True if `a` and `b` hold the same bytes. When their sizes are equal the time taken does not
// depend on where they differ, so comparing a presented secret's digest with a stored one says
// nothing about how close it came; sizes are compared first (a digest's size is no secret).
[[nodiscard]] bool ConstantTimeEquals(std::span<const uint8_t> a, std::span<const uint8_t> b);
[[nodiscard]] bool ConstantTimeEquals(std::string_view a, std::string_view b);

}  // namespace common
}  // namespace sluice

#endif  // SLUICE_COMMON_DIGEST_H_
