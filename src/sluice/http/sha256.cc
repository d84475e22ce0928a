#include "sluice/http/sha256.h"

#include <openssl/evp.h>

#include <memory>

namespace sluice::http {
namespace {

constexpr unsigned int kDigestLength = 32;

const EVP_MD* FetchedSha256() {
  // Fetched once for the process and never freed: the provider outlives every caller.
  static EVP_MD* md = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  return md;
}

struct CtxFree {
  void operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }
};

}  // namespace

std::string Sha256(std::string_view data) {
  thread_local std::unique_ptr<EVP_MD_CTX, CtxFree> ctx(EVP_MD_CTX_new());
  const EVP_MD* md = FetchedSha256();
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (md == nullptr || ctx == nullptr || EVP_DigestInit_ex2(ctx.get(), md, nullptr) != 1 ||
      EVP_DigestUpdate(ctx.get(), data.data(), data.size()) != 1 ||
      EVP_DigestFinal_ex(ctx.get(), digest, &length) != 1 || length != kDigestLength) {
    return "";
  }
  return std::string(reinterpret_cast<const char*>(digest), length);
}

}  // namespace sluice::http
