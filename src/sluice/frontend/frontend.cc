#include "sluice/frontend/frontend.h"

#include <span>
#include <utility>

#include "sluice/common/hex.h"

namespace sluice::frontend {

const AdminToken* MatchToken(std::string_view credentials, const std::vector<AdminToken>& tokens) {
  if (tokens.empty() || credentials.empty()) return nullptr;
  // Comparing digests makes the comparison independent of where the tokens differ and of the
  // presented token's length; every token is compared, so the time says nothing about which
  // (or whether one) matched.
  const std::optional<Sha256Digest> presented = Sha256(credentials);
  if (!presented) return nullptr;
  const AdminToken* match = nullptr;
  for (const AdminToken& t : tokens) {
    const bool equal = t.digest.has_value() && ConstantTimeEquals(*presented, *t.digest);
    if (equal && match == nullptr) match = &t;
  }
  return match;
}

AdminToken MakeAdminToken(std::string name, std::string_view token, bool write) {
  return AdminToken{.name = std::move(name), .digest = Sha256(token), .write = write};
}

AdminToken MakeAdminTokenFromSha256(std::string name, std::string_view sha256_hex, bool write) {
  AdminToken token{.name = std::move(name), .digest = Sha256Digest{}, .write = write};
  if (!DecodeHex(sha256_hex, std::span<uint8_t>(*token.digest)).ok()) token.digest.reset();
  return token;
}

}  // namespace sluice::frontend
