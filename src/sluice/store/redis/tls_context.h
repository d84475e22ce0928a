// The TLS client context of Redis connections over `rediss://` (docs/redis.md, TLS): built once per
// back end from the files of store.redis.tls and shared by all its connections (ConnectionOptions::
// tls.context).
#ifndef SLUICE_STORE_REDIS_TLS_CONTEXT_H_
#define SLUICE_STORE_REDIS_TLS_CONTEXT_H_

#include <memory>
#include <string>

#include <boost/asio/ssl/context.hpp>

#include "absl/status/statusor.h"

namespace sluice::redis {

// PEM files; every path may be relative to the working directory.
struct TlsFiles {
  // The CA certificates the server's certificate must chain to; "": the system's trust store.
  std::string ca_file;
  // A client certificate (its chain may follow it in the file) and its unencrypted private key,
  // for servers that require one (mutual TLS). Both or neither.
  std::string cert_file;
  std::string key_file;
};

// A client context that verifies the server's certificate (against `files.ca_file`, else the
// system's store), speaks TLS 1.2 or later, and presents the client certificate if one is given.
// The name the certificate must carry is set per connection (Connection does it), not here.
//
// Errors (InvalidArgument) name the field and the path ("cert_file: /etc/x.pem: no such file"),
// never what a file holds. An encrypted private key is refused, never prompted for.
//
// Thread safety: the context is read-only once built; connections on any thread may share it.
[[nodiscard]] absl::StatusOr<std::shared_ptr<boost::asio::ssl::context>> MakeTlsContext(
    const TlsFiles& files);

}  // namespace sluice::redis

#endif  // SLUICE_STORE_REDIS_TLS_CONTEXT_H_
