// SHA-256 for the request path (API key lookup, admin token comparison).
#ifndef SLUICE_HTTP_SHA256_H_
#define SLUICE_HTTP_SHA256_H_

#include <string>
#include <string_view>

namespace sluice::http {

// The raw 32-byte SHA-256 of `data`, or "" if OpenSSL fails (only when out of memory; an empty
// digest matches nothing). Thread-safe. OpenSSL 3 looks the algorithm up on every one-shot call,
// which costs more than the hash of a short key; this fetches it once and keeps one digest context
// per thread.
[[nodiscard]] std::string Sha256(std::string_view data);

}  // namespace sluice::http

#endif  // SLUICE_HTTP_SHA256_H_
