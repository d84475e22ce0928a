// Reads sluice.yaml into the structs of schema.h and validates every field (docs/configuration.md):
// the entry points. The work is in four parts: the bounds (limits.h), the checks of single values
// (validators.h), the readers of the sections (sections.cc, on the field readers of
// yaml_fields.h) and the checks of a built Config (checks.cc, Validate).
//
// A section is read in two steps: first its map is checked for unknown and repeated field names
// (yaml-cpp 0.7 keeps a repeated key without a word, so every pair is looked at here), then each
// field is read by a typed reader that leaves the default in place when the field is absent or
// written without a value. Whether the values make sense (names, ranges, uniqueness, references,
// time zones, URLs, secrets) is then checked on the whole Config by Validate(), which a Config
// built in code goes through too. Errors are built as "<key.path>: <what is wrong>"; ParseConfig
// prefixes the source. Messages never quote API keys, tokens, secrets or URLs (a URL may carry a
// password or a Slack token): only names, numbers and other values that are safe to log.
#include "sluice/config/config.h"

#include <cstdlib>
#include <functional>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "sluice/config/checks.h"
#include "sluice/config/limits.h"
#include "sluice/config/sections.h"
#include "sluice/config/validators.h"
#include "sluice/config/yaml_document.h"
#include "sluice/config/yaml_fields.h"

namespace sluice::config {
namespace {

// The variables ApplyEnvironment reads.
constexpr char kRedisUrlVariable[] = "SLUICE_REDIS_URL";
constexpr char kRedisPasswordFileVariable[] = "SLUICE_REDIS_PASSWORD_FILE";

}  // namespace

absl::StatusOr<Config> ParseConfig(std::string_view std_yaml, std::string_view source) {
  Config config;
  config.path = std::string(source);
  const yaml::Limits limits{.max_bytes = kMaxFileBytes,
                            .max_bytes_text = "16 MiB",
                            .max_depth = kMaxDepth,
                            .max_values = kMaxExpandedValues,
                            .max_commas = kMaxCommas};
  absl::StatusOr<yaml::Document> document = yaml::Parse(std_yaml, limits);
  absl::Status status =
      document.ok() ? ParseRoot(document->root(), config) : Error("", document.status().message());
  if (!status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(FromStd(source), ": ", status.message()));
  }
  return config;
}

absl::StatusOr<Config> LoadConfigFile(const std::string& path) {
  absl::StatusOr<std::string> text = yaml::ReadRegularFile(path, kMaxFileBytes, "16 MiB");
  if (!text.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", text.status().message()));
  }
  absl::StatusOr<Config> cfg = ParseConfig(*text, path);
  if (!cfg.ok()) return cfg.status();
  SLUICE_RETURN_IF_ERROR(
      ApplyEnvironment(*cfg, [](const char* name) { return std::getenv(name); }));
  return cfg;
}

absl::Status ApplyEnvironment(Config& cfg, const std::function<const char*(const char*)>& getenv) {
  if (const char* url = getenv(kRedisUrlVariable); url != nullptr) {
    SLUICE_RETURN_IF_ERROR(CheckRedisUrl(kRedisUrlVariable, url));
    cfg.store.redis.url = url;
    cfg.store.redis.url_source = kRedisUrlVariable;
    cfg.store.redis.url_set = true;
    SLUICE_RETURN_IF_ERROR(CheckClusterNodes(cfg.store.redis));  // the URL beside seeds
    SLUICE_RETURN_IF_ERROR(CheckTlsNeedsRediss(cfg.store.redis));
  }
  if (const char* path = getenv(kRedisPasswordFileVariable); path != nullptr) {
    // The path is safe to name; what the file holds is never quoted.
    const auto refused = [path](absl::string_view what) {
      return absl::InvalidArgumentError(
          absl::StrCat(kRedisPasswordFileVariable, ": ", path, ": ", what));
    };
    absl::StatusOr<std::string> password = yaml::ReadRegularFile(path, 4096, "4 KiB");
    if (!password.ok()) return refused(password.status().message());
    // `echo secret > file` and systemd-creds both end the file with a newline.
    if (absl::EndsWith(*password, "\n")) password->pop_back();
    if (password->empty()) return refused("empty");
    cfg.store.redis.password = std::move(*password);
  }
  if (!cfg.store.redis.username.empty() && cfg.store.redis.password.empty()) {
    return Error("store.redis.username",
                 absl::StrCat("needs a password: set ", kRedisPasswordFileVariable));
  }
  return absl::OkStatus();
}

}  // namespace sluice::config

#undef SLUICE_RETURN_IF_ERROR
