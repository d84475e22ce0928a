#include "sluice/server/config_check.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <boost/asio/ip/tcp.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "sluice/common/digest.h"
#include "sluice/common/strings.h"
#include "sluice/frontend/client_address.h"
#include "sluice/frontend/frontend.h"
#include "sluice/frontend/key_registry.h"
#include "sluice/limiter/plan.h"
#include "sluice/net/listener.h"
#include "sluice/registry/index.h"
#include "sluice/registry/sqlite_backend.h"
#include "sluice/rls/ratelimit_rules.h"
#include "sluice/store/memory/snapshot_file.h"
#include "sluice/store/redis/connection.h"
#include "sluice/store/redis/tls_context.h"

namespace sluice::server {
namespace {

namespace ip = boost::asio::ip;

// "<file>: <key_path>: <what>"; `key_path` may be empty when `what` already starts with one.
absl::Status Refuse(const config::Config& cfg, std::string_view key_path, std::string_view what) {
  if (key_path.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(ToAbsl(cfg.path), ": ", ToAbsl(what)));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(ToAbsl(cfg.path), ": ", ToAbsl(key_path), ": ", ToAbsl(what)));
}

// The URL's userinfo ("user:password"), "" without one. ParseRedisUrl's messages do not quote it;
// this is what the check makes sure of.
std::string_view UserInfo(std::string_view url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string_view::npos) return {};
  url.remove_prefix(scheme + 3);
  const size_t at = url.rfind('@');
  return at == std::string_view::npos ? std::string_view() : url.substr(0, at);
}

absl::Status CheckRedisUrl(const config::Config& cfg) {
  const std::string& url = cfg.store.redis.url;
  absl::StatusOr<redis::ConnectionOptions> parsed = redis::ParseRedisUrl(url);
  if (parsed.ok()) {
    // Without a password no AUTH is sent, and the user would be dropped without a word.
    if (!parsed->username.empty() && parsed->password.empty() && cfg.store.redis.password.empty()) {
      return Refuse(cfg, cfg.store.redis.url_source,
                    "the URL's user needs a password: user:password@, or "
                    "SLUICE_REDIS_PASSWORD_FILE");
    }
    return absl::OkStatus();
  }
  const std::string_view message = ToStd(parsed.status().message());
  const std::string_view userinfo = UserInfo(url);
  const size_t colon = userinfo.find(':');
  const std::string_view password =
      colon == std::string_view::npos ? std::string_view() : userinfo.substr(colon + 1);
  if ((!userinfo.empty() && message.find(userinfo) != std::string_view::npos) ||
      (password.size() >= 3 && message.find(password) != std::string_view::npos)) {
    return Refuse(cfg, cfg.store.redis.url_source, "bad redis URL");
  }
  return Refuse(cfg, cfg.store.redis.url_source, message);
}

// With a rediss:// URL (or store.redis.tls beside cluster_nodes), the files of store.redis.tls
// are loaded as a start would load them:
// "s.yaml: store.redis.tls.ca_file: /etc/ca.pem: No such file or directory".
absl::Status CheckRedisTls(const config::Config& cfg) {
  const bool cluster_tls = !cfg.store.redis.cluster_nodes.empty() && cfg.store.redis.tls.any();
  if (!cfg.store.redis.url.starts_with("rediss://") && !cluster_tls) return absl::OkStatus();
  const config::RedisTlsConfig& tls = cfg.store.redis.tls;
  absl::StatusOr<std::shared_ptr<boost::asio::ssl::context>> context = redis::MakeTlsContext(
      {.ca_file = tls.ca_file, .cert_file = tls.cert_file, .key_file = tls.key_file});
  if (context.ok()) return absl::OkStatus();
  return Refuse(cfg, "", absl::StrCat("store.redis.tls.", context.status().message()));
}

// A v4-mapped IPv6 address as the IPv4 one: [::ffff:127.0.0.1] and 127.0.0.1 are one address.
ip::address Normalize(const ip::address& a) {
  if (a.is_v6() && a.to_v6().is_v4_mapped()) {
    return ip::make_address_v4(ip::v4_mapped, a.to_v6());
  }
  return a;
}

// True if binding both would fail: the same port, and the same address or a wildcard that covers
// the other (0.0.0.0 covers IPv4, :: covers both on a dual-stack host).
bool Overlap(const ip::tcp::endpoint& a, const ip::tcp::endpoint& b) {
  if (a.port() != b.port()) return false;
  const ip::address x = Normalize(a.address());
  const ip::address y = Normalize(b.address());
  if (x == y) return true;
  const auto covers = [](const ip::address& wild, const ip::address& other) {
    return wild.is_unspecified() && (wild.is_v6() || other.is_v4());
  };
  return covers(x, y) || covers(y, x);
}

absl::Status CheckListeners(const config::Config& cfg) {
  absl::StatusOr<ip::tcp::endpoint> data = net::ParseEndpoint(cfg.server.listen);
  if (!data.ok()) return Refuse(cfg, "server.listen", ToStd(data.status().message()));
  absl::StatusOr<ip::tcp::endpoint> admin = net::ParseEndpoint(cfg.server.admin_listen);
  if (!admin.ok()) return Refuse(cfg, "server.admin_listen", ToStd(admin.status().message()));
  if (Overlap(*data, *admin)) {
    return Refuse(cfg, "server.admin_listen",
                  absl::StrCat("overlaps server.listen (port ", admin->port(),
                               " on the same or a wildcard address)"));
  }
  if (cfg.server.grpc_listen.empty()) return absl::OkStatus();
  absl::StatusOr<ip::tcp::endpoint> grpc = net::ParseEndpoint(cfg.server.grpc_listen);
  if (!grpc.ok()) return Refuse(cfg, "server.grpc_listen", ToStd(grpc.status().message()));
  for (const auto& [other, name] :
       {std::pair{*data, "server.listen"}, std::pair{*admin, "server.admin_listen"}}) {
    if (Overlap(*grpc, other)) {
      return Refuse(cfg, "server.grpc_listen",
                    absl::StrCat("overlaps ", name, " (port ", grpc->port(),
                                 " on the same or a wildcard address)"));
    }
  }
  return absl::OkStatus();
}

// An admin token longer than this in SLUICE_ADMIN_TOKEN_FILE is a wrong file, not a token.
constexpr size_t kMaxAdminTokenFileBytes = 4096;

// The token in the file SLUICE_ADMIN_TOKEN_FILE names (systemd's LoadCredential= puts it at
// $CREDENTIALS_DIRECTORY/<name>), one trailing newline stripped, checked like server.admin_token.
// Errors name the variable and the path, never the contents.
absl::StatusOr<std::string> ReadAdminTokenFile(const std::string& path) {
  const auto failed = [&path](absl::string_view what) {
    return absl::FailedPreconditionError(
        absl::StrCat("SLUICE_ADMIN_TOKEN_FILE: ", path, ": ", what));
  };
  // O_NONBLOCK: a FIFO is refused below instead of waiting for a writer.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) return failed(absl::StrCat("cannot open: ", std::strerror(errno)));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return failed("not a regular file");
  }
  std::string token(kMaxAdminTokenFileBytes + 1, '\0');
  size_t got = 0;
  while (got < token.size()) {
    const ssize_t n = read(fd, token.data() + got, token.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      close(fd);
      return failed(absl::StrCat("cannot read: ", std::strerror(err)));
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  close(fd);
  if (got > kMaxAdminTokenFileBytes) {
    return failed(absl::StrCat("larger than ", kMaxAdminTokenFileBytes, " bytes"));
  }
  token.resize(got);
  if (!token.empty() && token.back() == '\n') token.pop_back();
  if (!token.empty() && token.back() == '\r') token.pop_back();
  if (token.empty()) return failed("empty");
  for (const char c : token) {
    if (c <= ' ' || c > '~') return failed("must be printable ASCII without spaces");
  }
  return token;
}

}  // namespace

absl::StatusOr<AdminTokenSource> ResolveAdminToken(const config::Config& cfg) {
  if (!cfg.server.admin_token.empty()) {
    return AdminTokenSource{.token = cfg.server.admin_token, .from = "server.admin_token"};
  }
  if (const char* env = std::getenv("SLUICE_ADMIN_TOKEN"); env != nullptr && *env) {
    const std::string_view token(env);
    // The file's rule for the value it stands for; the value itself is never repeated.
    if (std::any_of(token.begin(), token.end(), [](char c) { return c <= ' ' || c > '~'; })) {
      return absl::InvalidArgumentError(
          "SLUICE_ADMIN_TOKEN: must be printable ASCII without spaces");
    }
    return AdminTokenSource{.token = std::string(token), .from = "SLUICE_ADMIN_TOKEN"};
  }
  if (const char* file = std::getenv("SLUICE_ADMIN_TOKEN_FILE"); file != nullptr && *file) {
    absl::StatusOr<std::string> token = ReadAdminTokenFile(file);
    if (!token.ok()) return token.status();
    return AdminTokenSource{.token = *std::move(token), .from = "SLUICE_ADMIN_TOKEN_FILE"};
  }
  return AdminTokenSource{};
}

absl::Status CheckServable(const config::Config& cfg) {
  // PlanSet and KeyRegistry name the entry ("plans.x.timezone: ...", "keys[2]: ...").
  if (absl::StatusOr<PlanSet> plans = PlanSet::FromConfig(cfg); !plans.ok()) {
    return Refuse(cfg, "", ToStd(plans.status().message()));
  }
  if (absl::StatusOr<frontend::KeyRegistry> keys = frontend::KeyRegistry::FromConfig(cfg);
      !keys.ok()) {
    return Refuse(cfg, "", ToStd(keys.status().message()));
  }
  if (absl::StatusOr<frontend::ProxyTrust> proxies =
          frontend::ProxyTrust::FromCidrs(cfg.server.trusted_proxies);
      !proxies.ok()) {
    // "trusted_proxies[1]: bad CIDR ..." lives under server.
    return Refuse(cfg, "server", ToStd(proxies.status().message()));
  }
  if (absl::Status s = CheckListeners(cfg); !s.ok()) return s;
  // An admin_tokens entry that is also the read-write token (the file's, or the environment's)
  // would be read-write, whatever its access says (the entries are told apart among themselves
  // when the file is read).
  absl::StatusOr<AdminTokenSource> admin = ResolveAdminToken(cfg);
  if (!admin.ok()) return admin.status();
  if (!admin->token.empty()) {
    const std::optional<Sha256Digest> digest =
        frontend::MakeAdminToken("admin", admin->token, true).digest;
    for (size_t i = 0; i < cfg.server.admin_tokens.size(); ++i) {
      const config::AdminTokenConfig& t = cfg.server.admin_tokens[i];
      const std::optional<Sha256Digest> other =
          t.token.empty()
              ? frontend::MakeAdminTokenFromSha256(t.name, t.token_sha256, t.write).digest
              : frontend::MakeAdminToken(t.name, t.token, t.write).digest;
      if (other == digest) {
        return Refuse(
            cfg, absl::StrCat("server.admin_tokens[", i, "]"),
            absl::StrCat("the same token as ", ToAbsl(admin->from), " (give each token once)"));
      }
    }
  }
  // "s.yaml: envoy.ratelimit_config: rl/a.yaml: descriptors[0].key: missing required key".
  if (absl::StatusOr<std::shared_ptr<const rls::RlRuleSet>> rules =
          rls::RlRuleSet::Load(cfg.envoy.ratelimit_config);
      !rules.ok()) {
    return Refuse(cfg, "envoy.ratelimit_config", ToStd(rules.status().message()));
  }
  switch (cfg.store.type) {
    case config::StoreType::kRedis:
      if (absl::Status s = CheckRedisUrl(cfg); !s.ok()) return s;
      return CheckRedisTls(cfg);
    case config::StoreType::kMemory:
      // The registry database follows the snapshot's rules: an existing directory, a regular
      // file if it exists.
      if (!cfg.store.memory.registry_path.empty()) {
        if (absl::Status s = CheckSnapshotPath(cfg.store.memory.registry_path); !s.ok()) {
          return Refuse(cfg, "store.memory.registry_path", ToStd(s.message()));
        }
      }
      if (cfg.store.memory.snapshot_path.empty()) return absl::OkStatus();
      if (absl::Status s = CheckSnapshotPath(cfg.store.memory.snapshot_path); !s.ok()) {
        return Refuse(cfg, "store.memory.snapshot_path", ToStd(s.message()));
      }
      // Without registry_path the registry is kept beside the snapshot, by the same rules.
      if (cfg.store.memory.registry_path.empty()) {
        const std::string beside = config::RegistryFile(cfg.store.memory);
        if (absl::Status s = CheckSnapshotPath(beside); !s.ok()) {
          return Refuse(cfg, "store.memory.snapshot_path",
                        absl::StrCat("the registry kept beside it (registry_path is not set), ",
                                     beside, ", ", s.message()));
        }
      }
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

// Refuses a configuration that lacks a plan some registry subject is on (the subject would be
// refused at every request), naming the first subjects.
absl::Status CheckPlansInUse(const config::Config& cfg, const registry::Index& index) {
  // A subject is either the file's or the registry's: one defined by both would be on two plans.
  for (size_t i = 0; i < cfg.keys.size(); ++i) {
    if (index.FindSubject(cfg.keys[i].subject) != nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          cfg.path, ": keys[", i, "].subject: \"", cfg.keys[i].subject,
          "\" is a registry subject (delete it there, or give the key to the registry)"));
    }
  }
  size_t known = 0;
  for (const config::PlanConfig& plan : cfg.plans)
    known += index.CountOnPlan(plan.name, 0, nullptr);
  if (known == index.subject_count()) return absl::OkStatus();
  // Some subject is on a plan this configuration does not define: find the first ten.
  std::vector<std::string> names;
  std::string after;
  while (names.size() < 10) {
    registry::Index::Page page = index.List("", after, 1000);
    for (const auto& s : page.subjects) {
      if (cfg.FindPlan(s->plan) == nullptr && names.size() < 10) {
        names.push_back(absl::StrCat(s->id, " (plan \"", s->plan, "\")"));
      }
    }
    if (page.next_cursor.empty() || page.subjects.empty()) break;
    after = page.subjects.back()->id;
  }
  return absl::FailedPreconditionError(
      absl::StrCat(cfg.path, ": plans: ", index.subject_count() - known,
                   " registry subject(s) are on plans this configuration does not define: ",
                   absl::StrJoin(names, ", "), " (move them to another plan first)"));
}

absl::Status CheckRegistryFile(const config::Config& cfg, std::string* note) {
  // The file serve would open: registry_path, or the one beside the snapshot.
  const std::string path = config::RegistryFile(cfg.store.memory);
  if (cfg.store.type != config::StoreType::kMemory || path.empty()) return absl::OkStatus();
  registry::Index index;
  // A file that cannot be read here, or is no registry, is `serve`'s to refuse (exit 1; e.g.
  // check-config run by a user who may not read it, or a damaged file, as a damaged snapshot):
  // this checks the plans, and says when it could not, and why, in serve's words.
  if (absl::Status read = registry::SqliteBackend::ReadInto(path, &index); !read.ok()) {
    if (!absl::IsNotFound(read) && note != nullptr) {
      *note = absl::StrCat("note: ", read.message(),
                           ": the plans its subjects are on were not checked");
    }
    return absl::OkStatus();
  }
  return CheckPlansInUse(cfg, index);
}

std::string RedisNote(const config::Config& cfg) {
  if (cfg.store.type != config::StoreType::kRedis || !cfg.store.redis.cluster_nodes.empty()) {
    return "";
  }
  absl::StatusOr<redis::ConnectionOptions> url = redis::ParseRedisUrl(cfg.store.redis.url);
  if (!url.ok() || url->db == 0) return "";
  return absl::StrCat("note: ", cfg.store.redis.url_source, " selects database ", url->db,
                      ": the Redis server must have more than ", url->db,
                      " databases (redis.conf `databases`, 16 by default); check-config does not "
                      "connect to it");
}

}  // namespace sluice::server
