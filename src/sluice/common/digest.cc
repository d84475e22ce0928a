#include "sluice/common/digest.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/sha.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "sluice/common/hex.h"

namespace sluice {
inline namespace common {
namespace {

const EVP_MD* FetchedSha256() {
  // Fetched once for the process and never freed: the provider outlives every caller.
  static EVP_MD* md = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  return md;
}

struct CtxFree {
  void operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }
};

}  // namespace

std::optional<Sha256Digest> Sha256(std::string_view data) {
  thread_local std::unique_ptr<EVP_MD_CTX, CtxFree> ctx(EVP_MD_CTX_new());
  const EVP_MD* md = FetchedSha256();
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (md == nullptr || ctx == nullptr || EVP_DigestInit_ex2(ctx.get(), md, nullptr) != 1 ||
      EVP_DigestUpdate(ctx.get(), data.data(), data.size()) != 1 ||
      EVP_DigestFinal_ex(ctx.get(), digest, &length) != 1 || length != kSha256Length) {
    return std::nullopt;
  }
  Sha256Digest out;
  std::copy(digest, digest + kSha256Length, out.begin());
  return out;
}

std::string Sha1Hex(std::string_view data) {
  unsigned char digest[SHA_DIGEST_LENGTH];
  SHA1(reinterpret_cast<const unsigned char*>(data.data()), data.size(), digest);
  return EncodeHex(std::span<const uint8_t>(digest, SHA_DIGEST_LENGTH));
}

bool ConstantTimeEquals(std::span<const uint8_t> a, std::span<const uint8_t> b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace common
}  // namespace sluice
