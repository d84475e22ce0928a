// SHA-256 for the request path (API key lookup, admin token comparison), as a string of raw
// bytes: a shim over common/digest.h, which holds the one implementation.
#ifndef SLUICE_HTTP_SHA256_H_
#define SLUICE_HTTP_SHA256_H_

#include <string>
#include <string_view>

namespace sluice::http {

// The raw 32-byte SHA-256 of `data` (common::Sha256), or "" if OpenSSL fails (only when out of
// memory; an empty digest matches nothing). Thread-safe.
[[nodiscard]] std::string Sha256(std::string_view data);

}  // namespace sluice::http

#endif  // SLUICE_HTTP_SHA256_H_
