// sluice.yaml as plain structs (docs/configuration.md): the schema, without the loader that fills
// it (config.h).
//
// Every value here has passed validation when it comes from the loader or has gone through
// config::Validate: a Config that ParseConfig or LoadConfigFile returned is complete and
// consistent (names unique, references resolved, time zones known, numbers in range).
#ifndef SLUICE_CONFIG_SCHEMA_H_
#define SLUICE_CONFIG_SCHEMA_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/time/time.h"
#include "sluice/config/vocabulary.h"

namespace sluice::config {

// Process exit code for a configuration error (sysexits.h EX_CONFIG).
inline constexpr int kExitConfigError = 78;

// A named token of the admin plane. Only its SHA-256 is kept once the config is loaded.
struct AdminTokenConfig {
  std::string name;          // [A-Za-z0-9_.-]{1,64}, unique; it names the token in the audit log
  std::string token;         // plaintext token, or
  std::string token_sha256;  // lowercase hex SHA-256 of the token (exactly one of the two)
  bool write = false;        // access: write may change the registry; read may only read
};

// server.access_log: one "access" log line per decision of the data plane (docs/operations.md).
enum class AccessLogMode { kOff, kDenied, kAll };
struct AccessLogConfig {
  // off: nothing; denied: every denial and degraded answer; all: those and allowed decisions,
  // sampled by `sample`.
  AccessLogMode mode = AccessLogMode::kOff;
  double sample = 1.0;        // 0..1: the share of allowed decisions logged under mode all
  int max_per_second = 1000;  // lines beyond this in one second are dropped (and counted)
};

struct ServerConfig {
  std::string listen = "127.0.0.1:8080";  // ip:port (no host names); IPv6 as [::1]:8080
  std::string admin_listen = "127.0.0.1:9090";
  // The Envoy Rate Limit Service (gRPC) listener, ip:port like `listen`; "": off.
  std::string grpc_listen;
  // Its HTTP/2 connections' timeouts, each from 1s to its bound (docs/configuration.md); a
  // connection checks them about once a second. A connection whose client preface and SETTINGS
  // have not come this long after it was accepted is closed.
  absl::Duration grpc_handshake_timeout = absl::Seconds(10);
  // A connection without a stream this long (from its start or its last stream's end): GOAWAY.
  absl::Duration grpc_idle_timeout = absl::Minutes(5);
  // A request not complete this long after its headers, or a stream still open this long after
  // its answer (a client that does not open flow control), is reset.
  absl::Duration grpc_request_timeout = absl::Seconds(10);
  // A write not complete after this (a client that stopped reading) closes the connection.
  absl::Duration grpc_write_timeout = absl::Seconds(10);
  std::string admin_token;  // a read-write token named "admin"; "" here and in SLUICE_ADMIN_TOKEN
                            // and no admin_tokens: the admin plane refuses all
  std::vector<AdminTokenConfig> admin_tokens;
  int threads = 0;  // 0: one per core
  std::string api_key_header = "X-API-Key";
  int deny_status = 429;  // any 4xx; 403 for nginx auth_request
  // The gateway route: this path and every path below it ("<prefix>/..."), any of the methods
  // in docs/http.md. Validated: "/" and segments of [A-Za-z0-9._~-], none empty, "." or "..",
  // at most kMaxAuthorizePrefixLength, and clear of the data plane's other routes.
  std::string authorize_prefix = "/v1/authorize";
  std::string anonymous_plan;  // "" : requests without a key get 401
  // Anonymous clients are one subject per network of this many leading bits (IPv4 1-32, IPv6
  // 1-128): an IPv6 subscriber owns a /64 at least.
  int anonymous_ipv4_prefix = 32;
  int anonymous_ipv6_prefix = 64;
  std::vector<std::string> trusted_proxies;  // CIDRs, validated (IPv4 or IPv6)
  // Open connections each plane accepts; one more is closed at once (1-1,000,000).
  int max_connections = 10'000;
  int admin_max_connections = 64;
  // After SIGTERM: how long /readyz answers 503 while the data plane still serves, so a load
  // balancer stops sending before the listener closes (0s-10m).
  absl::Duration shutdown_delay = absl::Seconds(5);
  AccessLogConfig access_log;
};

inline constexpr size_t kMaxAuthorizePrefixLength = 128;

// The data plane's routes other than server.authorize_prefix's (http/routes.cc serves them); the
// prefix may be none of them, nor lie above or below one.
inline constexpr std::string_view kDataPlaneRoutes[] = {"/v1/check"};

enum class StoreType { kMemory, kRedis };

struct MemoryStoreConfig {
  std::string snapshot_path;  // "": no counter is persisted
  // The registry of subjects and API keys (an SQLite database); "": beside the snapshot, or with
  // no snapshot either in memory only (RegistryFile).
  std::string registry_path;
  absl::Duration snapshot_interval = absl::Seconds(1);
};

// What RegistryFile appends to snapshot_path when registry_path is not set.
inline constexpr std::string_view kRegistryBesideSnapshotSuffix = ".registry.db";

// The file the embedded store keeps the registry in: registry_path; without it
// "<snapshot_path>.registry.db" beside the snapshot (a configuration that keeps counters keeps
// the customers and keys they belong to); "" when neither is set: the registry is kept in memory
// and lost at exit, as the counters are. `sluice serve` and `check-config` both read this one.
[[nodiscard]] std::string RegistryFile(const MemoryStoreConfig& memory);

// store.redis.tls: how a rediss:// connection is verified (docs/redis.md, TLS). Set only with a
// rediss:// URL. The files are PEM; server::CheckServable loads them, so check-config refuses a
// file that cannot be read or used.
struct RedisTlsConfig {
  std::string ca_file;      // the CAs the server's certificate must chain to; "": the system's
  std::string cert_file;    // a client certificate (mutual TLS), with key_file; "": none
  std::string key_file;     // its unencrypted private key
  std::string server_name;  // the name the certificate must carry, and SNI; "": the URL's host

  // The file has a `tls:` key, even one with no field set (`tls: {}`: the system's trust store and
  // the host's name). With cluster_nodes that alone turns TLS on.
  bool present = false;

  // True if the `tls:` key is present or any field is set.
  [[nodiscard]] bool any() const {
    return present || !ca_file.empty() || !cert_file.empty() || !key_file.empty() ||
           !server_name.empty();
  }
};

struct RedisStoreConfig {
  std::string url = "redis://127.0.0.1:6379/0";  // SLUICE_REDIS_URL replaces it
  // What names `url` in errors: "store.redis.url", or "SLUICE_REDIS_URL" when that set it.
  std::string url_source = "store.redis.url";
  // The password AUTH sends instead of the URL's; "": the URL's. Set only from
  // SLUICE_REDIS_PASSWORD_FILE, never from the file, and never in a message.
  std::string password;
  // How long Redis may stay silent while a decision waits its turn (a stall); after it, the
  // decisions waiting on that connection are answered per on_store_error.
  absl::Duration timeout = absl::Milliseconds(20);
  // The longest a decision waits for Redis in all (a Redis that answers, but too slowly for the
  // queue it has); zero: kMaxWaitTimeouts × timeout (EffectiveMaxWait).
  absl::Duration max_wait = absl::ZeroDuration();
  static constexpr int kMaxWaitTimeouts = 10;
  [[nodiscard]] absl::Duration EffectiveMaxWait() const {
    return max_wait == absl::ZeroDuration() ? kMaxWaitTimeouts * timeout : max_wait;
  }
  std::string key_prefix = "sl";
  // Redis Cluster: seed nodes "host:port" (IPv6 in brackets), instead of `url` (setting both, or
  // SLUICE_REDIS_URL with these, is an error). The password still comes from
  // SLUICE_REDIS_PASSWORD_FILE; AUTH is sent to `username`, or the default user. Empty: one Redis
  // at `url`.
  std::vector<std::string> cluster_nodes;
  // With cluster_nodes: the ACL user AUTH names, with the password of SLUICE_REDIS_PASSWORD_FILE
  // (required then). Empty: the default user. (A single Redis takes its user in `url`.)
  std::string username;
  // True when `url` was set (by the file or SLUICE_REDIS_URL), not left at its default.
  bool url_set = false;
  RedisTlsConfig tls;
};

struct StoreConfig {
  StoreType type = StoreType::kMemory;
  MemoryStoreConfig memory;
  RedisStoreConfig redis;
};

struct LimitConfig {
  std::string name;   // unique within its plan; [A-Za-z0-9_.-]{1,64}
  int64_t quota = 0;  // >= 1
  WindowSpec window;
  std::vector<int> alert_at;  // percentages 1..100, strictly increasing after validation
  // Decided, counted and alerted, but never denies (docs/semantics.md, Shadow limits).
  bool shadow = false;
  // How it decides (docs/semantics.md, Limit algorithms); sliding and gcra need a window of
  // Ns, Nm or Nh.
  Algorithm algorithm = Algorithm::kFixed;
  // gcra only: how many units may be taken at once (1..quota); 0: the quota.
  int64_t burst = 0;
};

struct PlanConfig {
  std::string name;                 // [A-Za-z0-9_.-]{1,64}
  std::string timezone = "UTC";     // IANA name known to abseil's time zone database
  std::vector<LimitConfig> limits;  // at least one
  bool shadow = false;              // every limit is shadow (LimitConfig::shadow)
  // What an unsettled reservation charges when it expires: its estimate (the work was probably
  // done) or nothing (docs/semantics.md, Reservations).
  enum class OnReservationExpiry { kCharge, kRelease };
  OnReservationExpiry on_reservation_expiry = OnReservationExpiry::kCharge;
};

// The longest plaintext API key (keys[].key), in bytes.
inline constexpr size_t kMaxApiKeyLength = 512;

struct KeyConfig {
  std::string key;             // plaintext key, or
  std::string key_sha256;      // lowercase hex SHA-256 of the key (exactly one of the two)
  std::string subject;         // a valid subject (docs/semantics.md)
  std::string plan;            // names a plan
  std::string email;           // optional: where this subject's alerts go
  std::string webhook;         // optional: this subject's own webhook URL
  std::string webhook_secret;  // optional: signs `webhook` ("whsec_" + base64)
};

struct SinkConfig {
  enum class Type { kWebhook, kSlack, kEmail };
  Type type = Type::kWebhook;
  std::string url;              // webhook, slack
  std::string secret;           // webhook: Standard Webhooks secret ("whsec_" + base64)
  std::string smtp_url;         // email
  std::string from;             // email
  std::vector<std::string> to;  // email: fixed recipients in addition to the subject's email
};

struct RetryConfig {
  int max_attempts = 10;
  absl::Duration first_delay = absl::Seconds(5);
  absl::Duration max_delay = absl::Hours(1);
};

struct AlertsConfig {
  std::vector<SinkConfig> sinks;
  RetryConfig retry;
  // Redis store: how long an instance may hold an undelivered alert without renewing its claim
  // (it renews every lease/3 while it retries) before another instance takes the alert over.
  absl::Duration lease = absl::Seconds(60);
};

// How the descriptor entries of an Envoy rate limit request name sluice's inputs
// (docs/gateways.md). Each key is 1-128 visible ASCII characters; the five are distinct.
struct DescriptorKeys {
  std::string api_key = "api_key";
  std::string subject = "subject";
  std::string plan = "plan";
  std::string cost = "cost";
  // The entry whose value "true" (or "1") makes the call a report: a cost already spent, charged
  // and never denied (docs/semantics.md, Reports); "false" or "0": an ordinary call.
  std::string report = "report";
};

struct EnvoyConfig {
  DescriptorKeys descriptor_keys;
  // envoyproxy/ratelimit's configuration: a YAML file, or a directory of them (ratelimit_file.h);
  // "": none. Used as written: a relative path is relative to the working directory, like every
  // other path of the file. Read by the server at start and on SIGHUP (and by check-config).
  std::string ratelimit_config;
  // Answer the calls of ratelimit_config's domains with dynamic_metadata, as envoyproxy/ratelimit
  // does with RESPONSE_DYNAMIC_METADATA=true (the request, and the `metadata` of the rules that
  // let it pass: grpc/ratelimit_request.h). Off: none, as there by default.
  bool response_dynamic_metadata = false;
  // The descriptor entry that marks a call of ratelimit_config's domains as a report (as
  // DescriptorKeys::report does for sluice's own mapping): taken out of its descriptor before the
  // descriptor is matched, so unchanged files match the rest. "": none (the default: every entry
  // is matched as envoyproxy/ratelimit matches it). 0-128 visible ASCII characters.
  std::string ratelimit_report_key;
};

struct Config {
  std::string path;  // `source` given to ParseConfig: the file path for LoadConfigFile
  ServerConfig server;
  StoreConfig store;
  OnStoreError on_store_error = OnStoreError::kAllow;
  std::vector<PlanConfig> plans;  // in file order
  std::vector<KeyConfig> keys;
  AlertsConfig alerts;
  EnvoyConfig envoy;

  // The plan named `name`, or nullptr.
  [[nodiscard]] const PlanConfig* FindPlan(std::string_view name) const;
};

}  // namespace sluice::config

#endif  // SLUICE_CONFIG_SCHEMA_H_
