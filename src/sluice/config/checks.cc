// Validation of a built Config, the loader's and a program's alike (config.h, Validate). Each
// check names the field as the file would: "plans.free.limits[1].quota".
#include "sluice/config/checks.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "sluice/common/subject.h"
#include "sluice/config/config.h"
#include "sluice/config/limits.h"
#include "sluice/config/validators.h"
#include "sluice/config/yaml_fields.h"

namespace sluice::config {
namespace {

// A seed node "host:port" in a canonical form ("Host:07000" and "host:7000" are the same node),
// or "" if it is none: the port 1..65535 in plain digits; the host an IPv4 address, an IPv6
// address in brackets, or a DNS name (labels of letters, digits, '-' and '_', none starting or
// ending with '-', 253 bytes at most).
std::string CanonicalSeed(absl::string_view node) {
  const size_t colon = node.rfind(':');
  if (colon == absl::string_view::npos) return "";
  absl::string_view host = node.substr(0, colon);
  const absl::string_view port_text = node.substr(colon + 1);
  int port = 0;
  if (port_text.empty() || port_text.size() > 5 || port_text[0] == '0' ||
      !AllOf(port_text, [](char c) { return c >= '0' && c <= '9'; }) ||
      !absl::SimpleAtoi(port_text, &port) || port > 65535) {
    return "";
  }
  if (absl::StartsWith(host, "[") && absl::EndsWith(host, "]")) {
    // An IPv6 address only in brackets: "fd00::1" (a port forgotten) is no host "fd00:" port 1.
    const std::string inside(host.substr(1, host.size() - 2));
    in6_addr a6{};
    std::array<char, INET6_ADDRSTRLEN> text{};
    if (inet_pton(AF_INET6, inside.c_str(), &a6) != 1 ||
        inet_ntop(AF_INET6, &a6, text.data(), text.size()) == nullptr) {
      return "";
    }
    return absl::StrCat("[", text.data(), "]:", port);
  }
  if (host.empty() || host.size() > 253) return "";
  if (AllOf(host, [](char c) { return (c >= '0' && c <= '9') || c == '.'; })) {
    const std::string v4(host);
    in_addr a4{};
    return inet_pton(AF_INET, v4.c_str(), &a4) == 1 ? absl::StrCat(v4, ":", port) : "";
  }
  for (absl::string_view label : absl::StrSplit(host, '.')) {
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-' ||
        !AllOf(label, [](char c) {
          return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
        })) {
      return "";
    }
  }
  return absl::StrCat(absl::AsciiStrToLower(host), ":", port);
}

absl::Status CheckRange(absl::string_view path, int64_t value, int64_t min, int64_t max) {
  if (value >= min && value <= max) return absl::OkStatus();
  return Error(path, absl::StrCat("must be between ", min, " and ", max, ", got ", value));
}

absl::Status CheckDuration(absl::string_view path, absl::Duration value, absl::Duration min,
                           absl::Duration max) {
  if (value < min) {
    return Error(path, absl::StrCat("must be at least ", absl::FormatDuration(min), ", got ",
                                    absl::FormatDuration(value)));
  }
  if (value > max) {
    return Error(path, absl::StrCat("must be at most ", absl::FormatDuration(max), ", got ",
                                    absl::FormatDuration(value)));
  }
  return absl::OkStatus();
}

absl::Status CheckListenAddress(absl::string_view path, absl::string_view address) {
  if (IsValidListenAddress(address)) return absl::OkStatus();
  return Error(path, absl::StrCat("bad address ", Quote(address),
                                  " (want ip:port, e.g. 127.0.0.1:8080 or [::1]:8080, "
                                  "port 1-65535)"));
}

absl::Status CheckEmail(absl::string_view path, absl::string_view email) {
  if (IsValidEmail(email)) return absl::OkStatus();
  return Error(path, absl::StrCat("bad email address ", Quote(email),
                                  " (want name@domain: exactly one @ with text on both sides, "
                                  "visible ASCII, none of <>,;\"\\()[])"));
}

absl::Status CheckHttpUrl(absl::string_view path, absl::string_view url) {
  if (IsUrl(url, {"http://", "https://"})) return absl::OkStatus();
  return Error(path, "must be an http:// or https:// URL");
}

absl::Status CheckWebhookSecret(absl::string_view path, absl::string_view secret) {
  if (IsWebhookSecret(secret)) return absl::OkStatus();
  return Error(path, "must be \"whsec_\" followed by base64 (Standard Webhooks)");
}

absl::Status ValidateAdminTokens(const std::vector<AdminTokenConfig>& tokens) {
  std::unordered_set<std::string> names, secrets;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const AdminTokenConfig& token = tokens[i];
    const std::string path = absl::StrCat("server.admin_tokens[", i, "]");
    const std::string name_path = absl::StrCat(path, ".name");
    if (!IsValidName(token.name, kMaxNameLength)) {
      return Error(name_path, absl::StrCat("bad token name ", Quote(token.name),
                                           " (want 1-64 characters of A-Z a-z 0-9 _ . -)"));
    }
    if (token.name == "admin") {
      return Error(name_path, "the name \"admin\" is server.admin_token's (pick another)");
    }
    if (!names.insert(token.name).second) {
      return Error(name_path, absl::StrCat("duplicate token name ", Quote(token.name)));
    }
    // Both empty is a plaintext token that is too short (`token: ""` in a file).
    if (!token.token.empty() && !token.token_sha256.empty()) {
      return Error(path, "set exactly one of token and token_sha256");
    }
    if (token.token_sha256.empty()) {
      const std::string plain_path = absl::StrCat(path, ".token");
      if (token.token.size() < 16 || token.token.size() > 512 ||
          !AllOf(token.token, IsVisibleAscii)) {
        return Error(plain_path, "must be 16-512 printable ASCII characters without spaces");
      }
      if (!secrets.insert("p" + token.token).second) {
        return Error(plain_path, "the same token is given twice");
      }
    } else {
      const std::string hashed_path = absl::StrCat(path, ".token_sha256");
      if (token.token_sha256.size() != 64 || !AllOf(token.token_sha256, IsLowerHex)) {
        return Error(hashed_path, "must be 64 lowercase hex characters (a SHA-256 digest)");
      }
      if (!secrets.insert("h" + token.token_sha256).second) {
        return Error(hashed_path, "the same token is given twice");
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateServer(const ServerConfig& server) {
  SLUICE_RETURN_IF_ERROR(CheckListenAddress("server.listen", server.listen));
  SLUICE_RETURN_IF_ERROR(CheckListenAddress("server.admin_listen", server.admin_listen));
  if (server.admin_listen == server.listen) {
    return Error("server.admin_listen", "must differ from server.listen");
  }
  // Off unless set; when set, an address like the others and not one of theirs.
  if (!server.grpc_listen.empty()) {
    SLUICE_RETURN_IF_ERROR(CheckListenAddress("server.grpc_listen", server.grpc_listen));
    if (server.grpc_listen == server.listen || server.grpc_listen == server.admin_listen) {
      return Error("server.grpc_listen", "must differ from server.listen and server.admin_listen");
    }
  }
  SLUICE_RETURN_IF_ERROR(CheckDuration("server.grpc_handshake_timeout",
                                       server.grpc_handshake_timeout, kMinGrpcTimeout,
                                       kMaxGrpcHandshakeTimeout));
  SLUICE_RETURN_IF_ERROR(CheckDuration("server.grpc_idle_timeout", server.grpc_idle_timeout,
                                       kMinGrpcTimeout, kMaxGrpcIdleTimeout));
  SLUICE_RETURN_IF_ERROR(CheckDuration("server.grpc_request_timeout", server.grpc_request_timeout,
                                       kMinGrpcTimeout, kMaxGrpcRequestTimeout));
  SLUICE_RETURN_IF_ERROR(CheckDuration("server.grpc_write_timeout", server.grpc_write_timeout,
                                       kMinGrpcTimeout, kMaxGrpcWriteTimeout));
  if (!AllOf(server.admin_token, IsVisibleAscii)) {
    return Error("server.admin_token", "must be printable ASCII without spaces");
  }
  SLUICE_RETURN_IF_ERROR(CheckRange("server.threads", server.threads, 0, 1024));
  if (!IsHttpToken(server.api_key_header)) {
    return Error("server.api_key_header",
                 absl::StrCat("bad header name ", Quote(server.api_key_header),
                              " (want an HTTP token: letters, digits and !#$%&'*+-.^_`|~)"));
  }
  SLUICE_RETURN_IF_ERROR(CheckRange("server.deny_status", server.deny_status, 400, 499));
  SLUICE_RETURN_IF_ERROR(
      CheckRange("server.max_connections", server.max_connections, 1, 1'000'000));
  SLUICE_RETURN_IF_ERROR(
      CheckRange("server.admin_max_connections", server.admin_max_connections, 1, 1'000'000));
  // Zero is a valid delay here (stop at once), unlike the other durations.
  SLUICE_RETURN_IF_ERROR(CheckDuration("server.shutdown_delay", server.shutdown_delay,
                                       absl::ZeroDuration(), absl::Minutes(10)));
  SLUICE_RETURN_IF_ERROR(ValidateAdminTokens(server.admin_tokens));
  SLUICE_RETURN_IF_ERROR(
      CheckRange("server.anonymous_ipv4_prefix", server.anonymous_ipv4_prefix, 1, 32));
  SLUICE_RETURN_IF_ERROR(
      CheckRange("server.anonymous_ipv6_prefix", server.anonymous_ipv6_prefix, 1, 128));
  for (size_t i = 0; i < server.trusted_proxies.size(); ++i) {
    const std::string& cidr = server.trusted_proxies[i];
    if (!IsValidCidr(cidr)) {
      return Error(absl::StrCat("server.trusted_proxies[", i, "]"),
                   absl::StrCat("bad CIDR ", Quote(cidr),
                                " (want an IPv4 or IPv6 address or CIDR, e.g. 10.0.0.0/8 or "
                                "fd00::/8)"));
    }
  }
  return absl::OkStatus();
}

// A DNS name (labels of A-Z a-z 0-9 - _, at most 253 characters) or an IP address: what a
// certificate can name.
bool IsValidServerName(absl::string_view name) {
  if (IsIpv4(name) || IsIpv6(name)) return true;
  if (name.empty() || name.size() > 253) return false;
  for (absl::string_view label : absl::StrSplit(name, '.')) {
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-' ||
        !AllOf(label, [](char c) { return absl::ascii_isalnum(c) || c == '-' || c == '_'; })) {
      return false;
    }
  }
  return true;
}

// The fields that can be checked without the files; server::CheckServable loads them.
absl::Status ValidateRedisTls(const RedisStoreConfig& redis) {
  const RedisTlsConfig& tls = redis.tls;
  for (const auto& [name, path] :
       {std::pair{"ca_file", &tls.ca_file}, std::pair{"cert_file", &tls.cert_file},
        std::pair{"key_file", &tls.key_file}}) {
    if (path->size() > kMaxPathLength || path->find('\0') != std::string::npos) {
      return Error(absl::StrCat("store.redis.tls.", name),
                   "must be a path of at most 4096 bytes without NUL");
    }
  }
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return Error(tls.cert_file.empty() ? "store.redis.tls.cert_file" : "store.redis.tls.key_file",
                 "cert_file and key_file go together: set both for a client certificate, or "
                 "neither");
  }
  if (!tls.server_name.empty() && !IsValidServerName(tls.server_name)) {
    return Error("store.redis.tls.server_name",
                 absl::StrCat("bad server name ", Quote(tls.server_name),
                              " (want a DNS name or an IP address)"));
  }
  return CheckTlsNeedsRediss(redis);
}

// store.redis.username: 1 to 128 printable ASCII characters without spaces, and only with
// cluster_nodes. A user without a password is refused by ApplyEnvironment, where the password
// file is read.
absl::Status CheckRedisUsername(const RedisStoreConfig& redis) {
  if (redis.username.empty()) return absl::OkStatus();
  if (redis.cluster_nodes.empty()) {
    return Error("store.redis.username",
                 "only with cluster_nodes (a single Redis takes its user in the URL, "
                 "redis://user:password@host or redis://user@host)");
  }
  if (redis.username.size() > 128 || !std::all_of(redis.username.begin(), redis.username.end(),
                                                  [](char c) { return c > ' ' && c < 0x7f; })) {
    return Error("store.redis.username",
                 "want 1-128 printable ASCII characters without spaces, as Redis's ACL names");
  }
  return absl::OkStatus();
}

absl::Status ValidateStore(const StoreConfig& store) {
  if (!store.memory.registry_path.empty() &&
      store.memory.registry_path == store.memory.snapshot_path) {
    return Error("store.memory.registry_path", "must differ from snapshot_path");
  }
  SLUICE_RETURN_IF_ERROR(CheckDuration("store.memory.snapshot_interval",
                                       store.memory.snapshot_interval, kMinSnapshotInterval,
                                       kMaxSnapshotInterval));
  SLUICE_RETURN_IF_ERROR(CheckRedisUrl(store.redis.url_source, store.redis.url));
  SLUICE_RETURN_IF_ERROR(CheckClusterNodes(store.redis));
  SLUICE_RETURN_IF_ERROR(CheckRedisUsername(store.redis));
  SLUICE_RETURN_IF_ERROR(ValidateRedisTls(store.redis));
  SLUICE_RETURN_IF_ERROR(CheckDuration("store.redis.timeout", store.redis.timeout, kMinRedisTimeout,
                                       kMaxRedisTimeout));
  if (store.redis.max_wait != absl::ZeroDuration()) {
    SLUICE_RETURN_IF_ERROR(CheckDuration("store.redis.max_wait", store.redis.max_wait,
                                         kMinRedisTimeout, kMaxRedisMaxWait));
    if (store.redis.max_wait < store.redis.timeout) {
      return Error("store.redis.max_wait",
                   absl::StrCat("must be at least store.redis.timeout (",
                                absl::FormatDuration(store.redis.timeout), "), got ",
                                absl::FormatDuration(store.redis.max_wait)));
    }
  }
  if (!IsValidName(store.redis.key_prefix, kMaxKeyPrefixLength)) {
    return Error("store.redis.key_prefix",
                 absl::StrCat("bad key prefix ", Quote(store.redis.key_prefix),
                              " (want 1-32 characters of A-Z a-z 0-9 _ . -)"));
  }
  return absl::OkStatus();
}

// A window built in code may skip ParseWindow; the limiter relies on what it guarantees.
absl::Status ValidateWindow(absl::string_view path, const WindowSpec& window) {
  switch (window.kind) {
    case WindowSpec::Kind::kDay:
    case WindowSpec::Kind::kWeek:
    case WindowSpec::Kind::kMonth:
    case WindowSpec::Kind::kYear:
    case WindowSpec::Kind::kConcurrent:
    case WindowSpec::Kind::kCredit:
      return absl::OkStatus();
    case WindowSpec::Kind::kFixed:
      break;
  }
  const absl::Duration length = window.length;
  if (window.kind != WindowSpec::Kind::kFixed || length < absl::Seconds(1) ||
      length > kMaxFixedWindow || length % absl::Seconds(1) != absl::ZeroDuration()) {
    return Error(path,
                 absl::StrCat("bad window ", Quote(window.text),
                              " (want Ns, Nm, Nh, day, week, month, year, concurrent or credit)"));
  }
  return absl::OkStatus();
}

// The rules of `algorithm` and `burst` (docs/configuration.md). The window is valid.
absl::Status ValidateAlgorithm(absl::string_view path, const LimitConfig& limit) {
  const std::string algorithm = absl::StrCat(path, ".algorithm");
  const std::string burst = absl::StrCat(path, ".burst");
  const std::string quota = absl::StrCat(path, ".quota");
  if (limit.algorithm != Algorithm::kFixed) {
    switch (limit.window.kind) {
      case WindowSpec::Kind::kFixed:
        break;
      case WindowSpec::Kind::kDay:
      case WindowSpec::Kind::kWeek:
      case WindowSpec::Kind::kMonth:
      case WindowSpec::Kind::kYear:
        return Error(algorithm,
                     absl::StrCat("a ", limit.window.text,
                                  " window is a calendar quota and stays fixed (sliding and gcra "
                                  "need a window of Ns, Nm or Nh)"));
      case WindowSpec::Kind::kCredit:
        return Error(algorithm,
                     "a credit limit never resets and stays fixed (sliding and gcra need a "
                     "window of Ns, Nm or Nh)");
      case WindowSpec::Kind::kConcurrent:
        return Error(algorithm,
                     "a concurrent limit counts requests in flight and has no algorithm (leave "
                     "algorithm out)");
    }
  }
  if (limit.burst != 0 && limit.algorithm != Algorithm::kGcra) {
    return Error(burst, "only a gcra limit has a burst (set algorithm: gcra, or leave burst out)");
  }
  if (limit.algorithm == Algorithm::kSliding && limit.quota > kMaxSlidingCount) {
    return Error(quota,
                 absl::StrCat("a sliding limit's quota is at most ", kMaxSlidingCount,
                              " (its two windows' counts share one counter), got ", limit.quota));
  }
  if (limit.algorithm != Algorithm::kGcra) return absl::OkStatus();
  if (limit.burst < 0 || limit.burst > limit.quota) {
    return Error(
        burst, absl::StrCat("must be between 1 and the quota ", limit.quota, ", got ", limit.burst,
                            " (for bursts above the quota, write the same rate over a "
                            "longer window: 10 a second with bursts of 100 is quota "
                            "600, window 1m, burst 100)"));
  }
  const int64_t window_us = absl::ToInt64Microseconds(limit.window.length);
  if (limit.quota > window_us) {
    return Error(quota,
                 absl::StrCat("a gcra limit admits at most one unit per microsecond: at most ",
                              window_us, " for window ", limit.window.text, ", got ", limit.quota));
  }
  if (window_us % limit.quota != 0 && window_us / limit.quota < 1000) {
    return Error(quota,
                 absl::StrCat("a gcra limit's interval between units (window / quota) must be a "
                              "whole number of microseconds or at least 1ms: ",
                              limit.window.text, " / ", limit.quota,
                              " is not (pick a quota that "
                              "divides ",
                              window_us, ", or at most ", window_us / 1000, ")"));
  }
  return absl::OkStatus();
}

absl::Status ValidateLimit(absl::string_view path, const LimitConfig& limit) {
  if (!IsValidName(limit.name, kMaxNameLength)) {
    return Error(absl::StrCat(path, ".name"),
                 absl::StrCat("bad limit name ", Quote(limit.name), " (want ", kNameRule, ")"));
  }
  if (limit.quota == 0 && limit.window.kind != WindowSpec::Kind::kCredit) {
    return Error(absl::StrCat(path, ".quota"), kZeroQuotaMessage);
  }
  const int64_t min_quota = limit.window.kind == WindowSpec::Kind::kCredit ? 0 : 1;
  SLUICE_RETURN_IF_ERROR(
      CheckRange(absl::StrCat(path, ".quota"), limit.quota, min_quota, kMaxQuota));
  SLUICE_RETURN_IF_ERROR(ValidateWindow(absl::StrCat(path, ".window"), limit.window));
  SLUICE_RETURN_IF_ERROR(ValidateAlgorithm(path, limit));
  const std::string alert_at = absl::StrCat(path, ".alert_at");
  if (limit.window.kind == WindowSpec::Kind::kConcurrent && !limit.alert_at.empty()) {
    return Error(alert_at,
                 "a concurrent limit has no alerts (it counts requests in flight, not usage)");
  }
  if (limit.algorithm == Algorithm::kGcra && !limit.alert_at.empty()) {
    return Error(alert_at, "a gcra limit has no alerts (a rate has no quota to reach)");
  }
  if (limit.alert_at.size() > kMaxAlertThresholds) {
    return Error(alert_at, absl::StrCat("at most ", kMaxAlertThresholds, " percentages, got ",
                                        limit.alert_at.size()));
  }
  for (size_t i = 0; i < limit.alert_at.size(); ++i) {
    const std::string item = absl::StrCat(alert_at, "[", i, "]");
    SLUICE_RETURN_IF_ERROR(CheckRange(item, limit.alert_at[i], 1, 100));
    if (i > 0 && limit.alert_at[i] == limit.alert_at[i - 1]) {
      return Error(item, absl::StrCat("duplicate percentage ", limit.alert_at[i]));
    }
    if (i > 0 && limit.alert_at[i] < limit.alert_at[i - 1]) {
      return Error(item, "percentages must be in increasing order");
    }
  }
  return absl::OkStatus();
}

absl::Status ValidatePlans(const std::vector<PlanConfig>& plans) {
  if (plans.empty()) return Error("plans", "at least one plan is required");
  std::unordered_set<std::string> names;
  for (size_t p = 0; p < plans.size(); ++p) {
    const PlanConfig& plan = plans[p];
    // Named as in the file ("plans.free"); by position when there is no name to show.
    const std::string path = plan.name.empty()
                                 ? absl::StrCat("plans[", p, "]")
                                 : absl::StrCat("plans.", absl::CHexEscape(plan.name));
    if (!IsValidName(plan.name, kMaxNameLength)) {
      return Error(path,
                   absl::StrCat("bad plan name ", Quote(plan.name), " (want ", kNameRule, ")"));
    }
    if (!names.insert(plan.name).second) {
      return Error(path, absl::StrCat("duplicate plan name ", Quote(plan.name)));
    }
    if (!IsKnownTimeZone(plan.timezone)) {
      return Error(absl::StrCat(path, ".timezone"),
                   absl::StrCat("unknown time zone ", Quote(plan.timezone)));
    }
    const std::string limits = absl::StrCat(path, ".limits");
    if (plan.limits.empty()) return Error(limits, "at least one limit is required");
    std::unordered_set<std::string> limit_names;
    for (size_t l = 0; l < plan.limits.size(); ++l) {
      const std::string item = absl::StrCat(limits, "[", l, "]");
      SLUICE_RETURN_IF_ERROR(ValidateLimit(item, plan.limits[l]));
      if (!limit_names.insert(plan.limits[l].name).second) {
        return Error(absl::StrCat(item, ".name"),
                     absl::StrCat("duplicate limit name ", Quote(plan.limits[l].name)));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateKeys(const Config& config) {
  // Where each key (or hash) was first seen, to name the earlier entry without quoting the key.
  std::unordered_map<std::string_view, size_t> seen_keys;
  std::unordered_map<std::string_view, size_t> seen_hashes;
  seen_hashes.reserve(config.keys.size());
  std::unordered_set<std::string_view> plan_names;
  for (const PlanConfig& plan : config.plans) plan_names.insert(plan.name);
  for (size_t i = 0; i < config.keys.size(); ++i) {
    const KeyConfig& key = config.keys[i];
    // Paths are built only for an error: a file may hold 150,000 keys.
    const auto at = [i](absl::string_view field) { return absl::StrCat("keys[", i, "]", field); };
    // Both empty is a plaintext key that is empty (`key: ""` in a file).
    if (!key.key.empty() && !key.key_sha256.empty()) {
      return Error(at(""), "set exactly one of key and key_sha256");
    }
    if (key.key_sha256.empty()) {
      if (key.key.empty() || key.key.size() > kMaxApiKeyLength || !AllOf(key.key, IsVisibleAscii)) {
        return Error(at(".key"), "must be 1-512 printable ASCII characters without spaces");
      }
      const auto [it, inserted] = seen_keys.emplace(key.key, i);
      if (!inserted) {
        return Error(at(".key"), absl::StrCat("duplicate key (same as keys[", it->second, "])"));
      }
    } else {
      if (key.key_sha256.size() != 64 || !AllOf(key.key_sha256, IsLowerHex)) {
        return Error(at(".key_sha256"), "must be 64 lowercase hex characters (a SHA-256 digest)");
      }
      const auto [it, inserted] = seen_hashes.emplace(key.key_sha256, i);
      if (!inserted) {
        return Error(at(".key_sha256"),
                     absl::StrCat("duplicate key (same as keys[", it->second, "])"));
      }
    }
    if (!IsValidSubject(key.subject)) {
      return Error(at(".subject"),
                   absl::StrCat("bad subject ", Quote(key.subject),
                                " (want 1-200 bytes of A-Z a-z 0-9 . _ : @ / + = -)"));
    }
    if (IsRuleSubject(key.subject)) {
      return Error(at(".subject"), absl::StrCat("subjects beginning \"rl:\" are reserved (they "
                                                "hold envoy.ratelimit_config's counters)"));
    }
    if (!plan_names.contains(key.plan)) {
      return Error(at(".plan"), absl::StrCat("unknown plan ", Quote(key.plan)));
    }
    if (!key.email.empty() && !IsValidEmail(key.email)) {
      return CheckEmail(at(".email"), key.email);
    }
    if (!key.webhook.empty() && !IsUrl(key.webhook, {"http://", "https://"})) {
      return CheckHttpUrl(at(".webhook"), key.webhook);
    }
    if (!key.webhook_secret.empty()) {
      if (!IsWebhookSecret(key.webhook_secret)) {
        return CheckWebhookSecret(at(".webhook_secret"), key.webhook_secret);
      }
      if (key.webhook.empty()) return Error(at(".webhook_secret"), "set without a webhook to sign");
    }
  }
  return absl::OkStatus();
}

// Every sink needs its address; "" is what a file that leaves it out reads as.
absl::Status RequireSet(absl::string_view path, absl::string_view value) {
  return value.empty() ? Error(path, "missing required field") : absl::OkStatus();
}

absl::Status ValidateSink(absl::string_view path, const SinkConfig& sink) {
  const std::string url = absl::StrCat(path, ".url");
  if (sink.type != SinkConfig::Type::kEmail) SLUICE_RETURN_IF_ERROR(RequireSet(url, sink.url));
  switch (sink.type) {
    case SinkConfig::Type::kWebhook:
      SLUICE_RETURN_IF_ERROR(CheckHttpUrl(url, sink.url));
      if (!sink.secret.empty()) {
        SLUICE_RETURN_IF_ERROR(CheckWebhookSecret(absl::StrCat(path, ".secret"), sink.secret));
      }
      return absl::OkStatus();
    case SinkConfig::Type::kSlack:
      return CheckHttpUrl(url, sink.url);
    case SinkConfig::Type::kEmail: {
      const std::string smtp_url = absl::StrCat(path, ".smtp_url");
      SLUICE_RETURN_IF_ERROR(RequireSet(smtp_url, sink.smtp_url));
      if (!IsUrl(sink.smtp_url, {"smtp://", "smtps://"})) {
        return Error(smtp_url, "must be an smtp:// or smtps:// URL");
      }
      SLUICE_RETURN_IF_ERROR(RequireSet(absl::StrCat(path, ".from"), sink.from));
      SLUICE_RETURN_IF_ERROR(CheckEmail(absl::StrCat(path, ".from"), sink.from));
      for (size_t i = 0; i < sink.to.size(); ++i) {
        SLUICE_RETURN_IF_ERROR(CheckEmail(absl::StrCat(path, ".to[", i, "]"), sink.to[i]));
      }
      return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateAlerts(const AlertsConfig& alerts) {
  SLUICE_RETURN_IF_ERROR(
      CheckDuration("alerts.lease", alerts.lease, kMinAlertLease, kMaxAlertLease));
  for (size_t i = 0; i < alerts.sinks.size(); ++i) {
    SLUICE_RETURN_IF_ERROR(ValidateSink(absl::StrCat("alerts.sinks[", i, "]"), alerts.sinks[i]));
  }
  const RetryConfig& retry = alerts.retry;
  SLUICE_RETURN_IF_ERROR(CheckRange("alerts.retry.max_attempts", retry.max_attempts, 1, 100));
  SLUICE_RETURN_IF_ERROR(CheckDuration("alerts.retry.first_delay", retry.first_delay,
                                       kMinRetryDelay, kMaxRetryFirstDelay));
  SLUICE_RETURN_IF_ERROR(
      CheckDuration("alerts.retry.max_delay", retry.max_delay, kMinRetryDelay, kMaxRetryMaxDelay));
  if (retry.max_delay < retry.first_delay) {
    return Error(
        "alerts.retry.max_delay",
        absl::StrCat("must be at least first_delay (", absl::FormatDuration(retry.first_delay),
                     "), got ", absl::FormatDuration(retry.max_delay)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckRedisUrl(absl::string_view source, absl::string_view url) {
  if (!IsUrl(url, {"redis://", "rediss://"})) {
    return Error(source,
                 "must be a redis:// or rediss:// (TLS) URL, e.g. redis://127.0.0.1:6379/0");
  }
  return absl::OkStatus();
}

absl::Status CheckClusterNodes(const RedisStoreConfig& redis) {
  if (redis.cluster_nodes.empty()) return absl::OkStatus();
  if (redis.url_set) {
    return Error("store.redis.cluster_nodes",
                 absl::StrCat("cannot be set together with ", redis.url_source,
                              " (the seeds replace the URL; the password comes from "
                              "SLUICE_REDIS_PASSWORD_FILE)"));
  }
  constexpr size_t kMaxClusterSeeds = 64;
  if (redis.cluster_nodes.size() > kMaxClusterSeeds) {
    return Error("store.redis.cluster_nodes", "at most 64 seed nodes");
  }
  std::vector<std::string> seen;
  for (size_t i = 0; i < redis.cluster_nodes.size(); ++i) {
    const std::string& node = redis.cluster_nodes[i];
    const std::string path = absl::StrCat("store.redis.cluster_nodes[", i, "]");
    if (absl::StrContains(node, "@")) {
      // Not quoted: the text before '@' may be a password.
      return Error(path,
                   "a seed node is host:port only, without user:password@ (the user is "
                   "store.redis.username, the password comes from SLUICE_REDIS_PASSWORD_FILE)");
    }
    std::string canonical = CanonicalSeed(node);
    if (canonical.empty()) {
      return Error(path, absl::StrCat("bad seed node ", Quote(node),
                                      " (want host:port, e.g. 10.0.0.1:6379 or [fd00::1]:6379)"));
    }
    for (size_t j = 0; j < seen.size(); ++j) {
      if (seen[j] == canonical) {
        return Error(path,
                     absl::StrCat(Quote(node), " is the same node as cluster_nodes[", j, "]"));
      }
    }
    seen.push_back(std::move(canonical));
  }
  return absl::OkStatus();
}

absl::Status CheckTlsNeedsRediss(const RedisStoreConfig& redis) {
  if (!redis.tls.any() || !redis.cluster_nodes.empty() ||
      absl::StartsWith(redis.url, "rediss://")) {
    return absl::OkStatus();
  }
  return Error(
      "store.redis.tls",
      absl::StrCat(
          "set, but ", redis.url_source,
          " is not a rediss:// URL (TLS is on only with rediss://, or with cluster_nodes)"));
}

absl::Status Validate(const Config& config) {
  SLUICE_RETURN_IF_ERROR(ValidateServer(config.server));
  SLUICE_RETURN_IF_ERROR(ValidateStore(config.store));
  SLUICE_RETURN_IF_ERROR(ValidatePlans(config.plans));
  SLUICE_RETURN_IF_ERROR(ValidateKeys(config));
  SLUICE_RETURN_IF_ERROR(ValidateAlerts(config.alerts));
  const std::string& anonymous = config.server.anonymous_plan;
  if (!anonymous.empty() && config.FindPlan(anonymous) == nullptr) {
    return Error("server.anonymous_plan", absl::StrCat("unknown plan ", Quote(anonymous)));
  }
  return absl::OkStatus();
}

}  // namespace sluice::config

#undef SLUICE_RETURN_IF_ERROR
