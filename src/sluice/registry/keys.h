// API keys: generation from the OS CSPRNG, their SHA-256 digests, and key ids.
//
// A key is "sk_" followed by 32 lowercase base32 characters (160 random bits, no padding). Only
// its digest is ever stored; the plaintext is shown once, when the key is made.
#ifndef SLUICE_REGISTRY_KEYS_H_
#define SLUICE_REGISTRY_KEYS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "sluice/registry/model.h"

namespace sluice::registry {

inline constexpr std::string_view kKeyPrefix = "sk_";
inline constexpr size_t kKeyRandomBytes = 20;        // 160 bits
inline constexpr size_t kKeyDisplayPrefixBytes = 8;  // "sk_" and 5 characters

struct GeneratedKey {
  std::string plaintext;  // "sk_" + 32 lowercase base32 characters
  Digest digest{};        // DigestOf(plaintext)
  std::string prefix;     // the first kKeyDisplayPrefixBytes characters of the plaintext
};

// A new random key. Fails (Internal) only if the OS random source fails.
[[nodiscard]] absl::StatusOr<GeneratedKey> GenerateKey();

// SHA-256 of `key`.
[[nodiscard]] Digest DigestOf(std::string_view key);

// 64 hex digits (either case) as a digest; InvalidArgument otherwise.
[[nodiscard]] absl::StatusOr<Digest> ParseDigestHex(std::string_view hex);
// 64 lowercase hex digits.
[[nodiscard]] std::string DigestHex(const Digest& digest);

// `text` with every generated key in it ("sk_" and 32 base32 characters, wherever it stands)
// cut to its display prefix and "...": for log lines that quote what a client sent (a path), in
// case a key was sent where it does not belong.
[[nodiscard]] std::string RedactKeys(std::string_view text);

// A new random key id, never 0. Fails (Internal) only if the OS random source fails.
[[nodiscard]] absl::StatusOr<uint64_t> NewKeyId();

}  // namespace sluice::registry

#endif  // SLUICE_REGISTRY_KEYS_H_
