// Standard Webhooks 1.0 symmetric signatures (https://www.standardwebhooks.com, "Signature
// scheme"): webhook-signature: "v1," + base64(HMAC-SHA256(key, id + "." + timestamp + "." + body)).
#ifndef SLUICE_ALERTS_WEBHOOK_SIGNATURE_H_
#define SLUICE_ALERTS_WEBHOOK_SIGNATURE_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace sluice::alerts {

// The HMAC key bytes of a webhook secret. The spec serialises a secret as "whsec_" + base64 of the
// key; the reference libraries also accept the base64 part alone (what a user pastes after
// dropping the prefix), and so does this: an optional "whsec_" prefix, then standard base64
// (RFC 4648 §4, padding optional) of at least one byte. Anything else is InvalidArgument, whose
// message never quotes the secret. (sluice.yaml's validation requires the prefix.)
[[nodiscard]] absl::StatusOr<std::string> DecodeWebhookSecret(std::string_view secret);

// The webhook-signature header value for one attempt: "v1," + 44 base64 characters. `key` is the
// decoded key; `id` and `timestamp` (Unix seconds) are the webhook-id and webhook-timestamp
// headers sent with `body`. Thread-safe.
[[nodiscard]] std::string SignWebhook(std::string_view key, std::string_view id, int64_t timestamp,
                                      std::string_view body);

// True if `signature_header` (space-separated "version,base64" entries, as a receiver gets it)
// holds a "v1" entry equal to SignWebhook(key, id, timestamp, body). Compares in constant time
// (CRYPTO_memcmp). Checks no timestamp tolerance: that is the receiver's policy. Thread-safe.
[[nodiscard]] bool VerifyWebhook(std::string_view key, std::string_view id,
                                 std::string_view timestamp, std::string_view body,
                                 std::string_view signature_header);

}  // namespace sluice::alerts

#endif  // SLUICE_ALERTS_WEBHOOK_SIGNATURE_H_
