// sluice.yaml's loader and its checks (docs/configuration.md), with the schema they fill
// (schema.h) and the vocabulary the core shares (vocabulary.h): the header for the whole
// configuration.
//
// yaml-cpp is used only inside this module and its exceptions never leave it.
#ifndef SLUICE_CONFIG_CONFIG_H_
#define SLUICE_CONFIG_CONFIG_H_

#include <functional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sluice/config/schema.h"
#include "sluice/config/vocabulary.h"

namespace sluice::config {

// Checks what ParseConfig checks beyond the YAML itself — names, ranges, uniqueness, references,
// time zones, URLs, secrets, durations — on a Config however it was built: ParseConfig calls it on
// what it read, and a program that fills a Config in code calls it before using it. Errors are
// InvalidArgument "<key.path>: <what is wrong>", the field named as the file would name it
// ("plans.free.limits[1].quota: must be between 1 and 1000000000000000, got -1"; a plan without a
// name is "plans[0]"). REQUIRES of a hand-built Config beyond the loader's: every alert_at list is
// strictly increasing (the loader sorts what it reads).
[[nodiscard]] absl::Status Validate(const Config& config);

// Parses and validates YAML text. `source` names it in errors (normally the file path) and becomes
// Config::path. A field written without a value (`threads:` or `threads: ~`) counts as absent.
// Errors are InvalidArgument with the message "<source>: <key.path>: <what is wrong>", e.g.
// "sluice.yaml: plans.free.limits[1].window: bad window \"5x\" (want Ns, Nm, Nh, day, week, month
// or year)".
[[nodiscard]] absl::StatusOr<Config> ParseConfig(std::string_view yaml, std::string_view source);

// Reads `path` and parses it as ParseConfig does, then applies ApplyEnvironment with the process
// environment; Config::path is `path`. A missing or unreadable file is also InvalidArgument, naming
// it: "<path>: cannot open: No such file or directory". Every call reads the variables anew (a
// SIGHUP reload sees the values the process has, which do not change) and re-reads
// SLUICE_REDIS_PASSWORD_FILE's file.
[[nodiscard]] absl::StatusOr<Config> LoadConfigFile(const std::string& path);

// Overrides what differs per deployment or is secret with environment variables, read through
// `getenv` (null: unset):
//   SLUICE_REDIS_URL            replaces store.redis.url, validated by the same rules (a
//                               file with store.redis.tls needs a rediss:// one);
//                               url_source becomes "SLUICE_REDIS_URL".
//   SLUICE_REDIS_PASSWORD_FILE  store.redis.password is that file's content, one trailing newline
//                               stripped; a regular file of at most 4 KiB, not empty.
// A variable set to "" counts as set (an empty URL or path is an error, not a silent fallback to
// the file). Errors are InvalidArgument naming the variable and never the URL or the password:
// "SLUICE_REDIS_URL: must be a redis:// or rediss:// (TLS) URL, ...", "SLUICE_REDIS_PASSWORD_FILE:
// <path>: empty". On error `cfg` may have been changed in part.
[[nodiscard]] absl::Status ApplyEnvironment(Config& cfg,
                                            const std::function<const char*(const char*)>& getenv);

}  // namespace sluice::config

#endif  // SLUICE_CONFIG_CONFIG_H_
