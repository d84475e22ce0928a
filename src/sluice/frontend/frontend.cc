#include "sluice/frontend/frontend.h"

#include <utility>

#include "sluice/common/digest.h"

namespace sluice::frontend {

const AdminToken* MatchToken(std::string_view credentials, const std::vector<AdminToken>& tokens) {
  if (tokens.empty() || credentials.empty()) return nullptr;
  // Comparing digests makes the comparison independent of where the tokens differ and of the
  // presented token's length; every token is compared, so the time says nothing about which
  // (or whether one) matched.
  const std::string presented = KeyDigest(credentials);
  if (presented.size() != 32) return nullptr;
  const AdminToken* match = nullptr;
  for (const AdminToken& t : tokens) {
    if (ConstantTimeEquals(presented, t.digest) && match == nullptr) match = &t;
  }
  return match;
}

AdminToken MakeAdminToken(std::string name, std::string_view token, bool write) {
  return AdminToken{.name = std::move(name), .digest = KeyDigest(token), .write = write};
}

}  // namespace sluice::frontend
