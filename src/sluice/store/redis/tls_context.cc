#include "sluice/store/redis/tls_context.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>
#include <utility>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "sluice/common/strings.h"

namespace sluice::redis {
namespace {

namespace ssl = boost::asio::ssl;

// A CA bundle of every public root is ~200 KiB; a file 20 times that is not a certificate file.
constexpr size_t kMaxPemBytes = size_t{4} << 20;

absl::Status FileError(std::string_view field, const std::string& path, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(ToAbsl(field), ": ", path, ": ", ToAbsl(what)));
}

// OpenSSL's reason for the last failure (its queue is per thread), then clears the queue so that
// it never explains a later, unrelated failure.
std::string TakeOpenSslError() {
  const unsigned long code = ERR_peek_last_error();
  std::string reason = "unknown OpenSSL error";
  if (code != 0) {
    if (const char* text = ERR_reason_error_string(code); text != nullptr) reason = text;
  }
  ERR_clear_error();
  return reason;
}

// The whole of a regular file, at most kMaxPemBytes.
absl::StatusOr<std::string> ReadPem(std::string_view field, const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) return FileError(field, path, strerror(errno));
  std::string text;
  struct stat st {};
  absl::Status status = absl::OkStatus();
  if (fstat(fd, &st) != 0) {
    status = FileError(field, path, strerror(errno));
  } else if (!S_ISREG(st.st_mode)) {
    status = FileError(field, path, "not a regular file");
  } else if (static_cast<size_t>(st.st_size) > kMaxPemBytes) {
    status = FileError(field, path, "larger than 4 MiB");
  } else {
    char buf[16384];
    for (;;) {
      const ssize_t n = read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        status = FileError(field, path, strerror(errno));
        break;
      }
      if (n == 0) break;
      text.append(buf, static_cast<size_t>(n));
      if (text.size() > kMaxPemBytes) {
        status = FileError(field, path, "larger than 4 MiB");
        break;
      }
    }
  }
  close(fd);
  if (!status.ok()) return status;
  return text;
}

struct BioDeleter {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
using BioPtr = std::unique_ptr<BIO, BioDeleter>;

BioPtr MemoryBio(const std::string& text) {
  return BioPtr(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

// Never asks for a pass phrase (OpenSSL's default would prompt on the terminal).
int NoPassphrase(char*, int, int, void*) { return -1; }

absl::Status AddCertificateAuthorities(SSL_CTX* ctx, const std::string& path) {
  absl::StatusOr<std::string> pem = ReadPem("ca_file", path);
  if (!pem.ok()) return pem.status();
  BioPtr bio = MemoryBio(*pem);
  X509_STORE* store = SSL_CTX_get_cert_store(ctx);
  int added = 0;
  while (X509* cert = PEM_read_bio_X509(bio.get(), nullptr, NoPassphrase, nullptr)) {
    const int ok = X509_STORE_add_cert(store, cert);
    X509_free(cert);
    if (ok != 1) return FileError("ca_file", path, TakeOpenSslError());
    ++added;
  }
  // Reading stops at the end of the text ("no start line") or at a certificate it cannot read.
  const unsigned long last = ERR_peek_last_error();
  if (last != 0 && ERR_GET_REASON(last) != PEM_R_NO_START_LINE) {
    return FileError("ca_file", path, TakeOpenSslError());
  }
  ERR_clear_error();
  if (added == 0) return FileError("ca_file", path, "no PEM certificate in it");
  return absl::OkStatus();
}

absl::Status UseClientCertificate(ssl::context& ctx, const TlsFiles& files) {
  absl::StatusOr<std::string> cert = ReadPem("cert_file", files.cert_file);
  if (!cert.ok()) return cert.status();
  boost::system::error_code ec;
  ctx.use_certificate_chain(boost::asio::buffer(*cert), ec);
  if (ec) {
    ERR_clear_error();
    return FileError("cert_file", files.cert_file,
                     absl::StrCat("not a PEM certificate (", ec.message(), ")"));
  }

  absl::StatusOr<std::string> key = ReadPem("key_file", files.key_file);
  if (!key.ok()) return key.status();
  BioPtr bio = MemoryBio(*key);
  EVP_PKEY* pkey = PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassphrase, nullptr);
  // The key's text is wiped from memory as soon as OpenSSL holds it.
  OPENSSL_cleanse(key->data(), key->size());
  if (pkey == nullptr) {
    ERR_clear_error();
    return FileError("key_file", files.key_file,
                     "not an unencrypted PEM private key (an encrypted key cannot be used)");
  }
  const absl::Status mismatch =
      FileError("key_file", files.key_file,
                absl::StrCat("does not match the certificate of cert_file ", files.cert_file));
  const int used = SSL_CTX_use_PrivateKey(ctx.native_handle(), pkey);
  EVP_PKEY_free(pkey);
  if (used != 1) {
    if (ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH) {
      ERR_clear_error();
      return mismatch;
    }
    return FileError("key_file", files.key_file, TakeOpenSslError());
  }
  if (SSL_CTX_check_private_key(ctx.native_handle()) != 1) {
    ERR_clear_error();
    return mismatch;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<ssl::context>> MakeTlsContext(const TlsFiles& files) {
  if (files.cert_file.empty() != files.key_file.empty()) {
    return absl::InvalidArgumentError(
        "cert_file and key_file go together: set both for a client certificate, or neither");
  }
  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_client);
  SSL_CTX* native = ctx->native_handle();
  if (SSL_CTX_set_min_proto_version(native, TLS1_2_VERSION) != 1) {
    return absl::InternalError(absl::StrCat("TLS 1.2 minimum: ", TakeOpenSslError()));
  }
  SSL_CTX_set_default_passwd_cb(native, NoPassphrase);
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_compression);
  ctx->set_verify_mode(ssl::verify_peer);
  if (files.ca_file.empty()) {
    boost::system::error_code ec;
    ctx->set_default_verify_paths(ec);
    if (ec) {
      ERR_clear_error();
      return absl::InternalError(
          absl::StrCat("cannot load the system's trusted certificates: ", ec.message()));
    }
  } else if (absl::Status s = AddCertificateAuthorities(native, files.ca_file); !s.ok()) {
    return s;
  }
  if (!files.cert_file.empty()) {
    if (absl::Status s = UseClientCertificate(*ctx, files); !s.ok()) return s;
  }
  return ctx;
}

}  // namespace sluice::redis
