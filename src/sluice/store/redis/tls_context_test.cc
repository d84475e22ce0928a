#include "sluice/store/redis/tls_context.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::redis {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// A fresh EC key and a self-signed certificate for it, as PEM.
struct Pem {
  std::string key;
  std::string cert;
};

std::string ToPem(int (*write)(BIO*, void*), void* object) {
  BIO* bio = BIO_new(BIO_s_mem());
  write(bio, object);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  std::string out(data, static_cast<size_t>(n));
  BIO_free(bio);
  return out;
}

Pem SelfSigned() {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  X509* cert = X509_new();
  X509_set_version(cert, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert), 1);
  X509_gmtime_adj(X509_getm_notBefore(cert), 0);
  X509_gmtime_adj(X509_getm_notAfter(cert), 3600);
  X509_set_pubkey(cert, key);
  X509_NAME* name = X509_get_subject_name(cert);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("test"), -1, -1, 0);
  X509_set_issuer_name(cert, name);
  X509_sign(cert, key, EVP_sha256());
  Pem pem;
  pem.key = ToPem(
      [](BIO* bio, void* k) {
        return PEM_write_bio_PrivateKey(bio, static_cast<EVP_PKEY*>(k), nullptr, nullptr, 0,
                                        nullptr, nullptr);
      },
      key);
  pem.cert =
      ToPem([](BIO* bio, void* c) { return PEM_write_bio_X509(bio, static_cast<X509*>(c)); }, cert);
  X509_free(cert);
  EVP_PKEY_free(key);
  return pem;
}

// `key` encrypted with a pass phrase.
std::string Encrypted(const std::string& key_pem) {
  BIO* in = BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size()));
  EVP_PKEY* key = PEM_read_bio_PrivateKey(in, nullptr, nullptr, nullptr);
  BIO_free(in);
  static const char kPhrase[] = "pass phrase";
  struct Args {
    EVP_PKEY* key;
  } args{key};
  std::string out = ToPem(
      [](BIO* bio, void* a) {
        return PEM_write_bio_PrivateKey(bio, static_cast<Args*>(a)->key, EVP_aes_128_cbc(),
                                        reinterpret_cast<const unsigned char*>(kPhrase),
                                        sizeof kPhrase - 1, nullptr, nullptr);
      },
      &args);
  EVP_PKEY_free(key);
  return out;
}

class TlsContextTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/sluice-tls-test-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& content) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << content;
    return path;
  }

  // MakeTlsContext's error message, or "OK".
  static std::string ErrorOf(const TlsFiles& files) {
    absl::StatusOr<std::shared_ptr<boost::asio::ssl::context>> ctx = MakeTlsContext(files);
    if (ctx.ok()) return *ctx != nullptr ? "OK" : "null context";
    EXPECT_EQ(ctx.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(ctx.status().message());
  }

  std::string dir_;
};

TEST_F(TlsContextTest, SystemStoreWithoutFiles) { EXPECT_EQ(ErrorOf({}), "OK"); }

TEST_F(TlsContextTest, CaFileAndClientCertificateLoad) {
  const Pem pem = SelfSigned();
  EXPECT_EQ(ErrorOf({.ca_file = Write("ca.pem", pem.cert),
                     .cert_file = Write("c.pem", pem.cert),
                     .key_file = Write("k.pem", pem.key)}),
            "OK");
}

TEST_F(TlsContextTest, MissingFileNamesTheFieldAndThePath) {
  const std::string path = dir_ + "/nope.pem";
  EXPECT_EQ(ErrorOf({.ca_file = path}), "ca_file: " + path + ": No such file or directory");
  const Pem pem = SelfSigned();
  EXPECT_EQ(ErrorOf({.cert_file = path, .key_file = Write("k.pem", pem.key)}),
            "cert_file: " + path + ": No such file or directory");
  EXPECT_EQ(ErrorOf({.cert_file = Write("c.pem", pem.cert), .key_file = path}),
            "key_file: " + path + ": No such file or directory");
}

TEST_F(TlsContextTest, ADirectoryIsNotACertificateFile) {
  EXPECT_EQ(ErrorOf({.ca_file = dir_}), "ca_file: " + dir_ + ": not a regular file");
}

TEST_F(TlsContextTest, CaFileWithoutACertificateIsRefused) {
  const std::string path = Write("ca.pem", "just text\n");
  EXPECT_EQ(ErrorOf({.ca_file = path}), "ca_file: " + path + ": no PEM certificate in it");
}

TEST_F(TlsContextTest, KeyThatIsNotAKeyIsRefusedWithoutQuotingIt) {
  const Pem pem = SelfSigned();
  const std::string path = Write("k.pem", "SECRET-MATERIAL\n");
  const std::string message = ErrorOf({.cert_file = Write("c.pem", pem.cert), .key_file = path});
  EXPECT_THAT(message, StartsWith("key_file: " + path + ": not an unencrypted PEM private key"));
  EXPECT_THAT(message, Not(HasSubstr("SECRET-MATERIAL")));
}

TEST_F(TlsContextTest, EncryptedKeyIsRefusedNotPromptedFor) {
  const Pem pem = SelfSigned();
  const std::string path = Write("k.pem", Encrypted(pem.key));
  EXPECT_THAT(ErrorOf({.cert_file = Write("c.pem", pem.cert), .key_file = path}),
              StartsWith("key_file: " + path + ": not an unencrypted PEM private key"));
}

TEST_F(TlsContextTest, KeyOfAnotherCertificateIsRefused) {
  const Pem one = SelfSigned();
  const Pem other = SelfSigned();
  const std::string cert = Write("c.pem", one.cert);
  const std::string key = Write("k.pem", other.key);
  EXPECT_EQ(ErrorOf({.cert_file = cert, .key_file = key}),
            "key_file: " + key + ": does not match the certificate of cert_file " + cert);
}

TEST_F(TlsContextTest, CertificateFileThatHoldsNoCertificateIsRefused) {
  const Pem pem = SelfSigned();
  const std::string cert = Write("c.pem", pem.key);  // a key where the certificate should be
  EXPECT_THAT(ErrorOf({.cert_file = cert, .key_file = Write("k.pem", pem.key)}),
              StartsWith("cert_file: " + cert + ": not a PEM certificate"));
}

TEST_F(TlsContextTest, CertificateWithoutKeyIsRefused) {
  EXPECT_THAT(ErrorOf({.cert_file = "/c.pem"}), HasSubstr("cert_file and key_file go together"));
  EXPECT_THAT(ErrorOf({.key_file = "/k.pem"}), HasSubstr("cert_file and key_file go together"));
}

}  // namespace
}  // namespace sluice::redis
