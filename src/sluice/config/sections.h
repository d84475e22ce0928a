// Reads the sections of sluice.yaml into a Config (sections.cc). Internal to the config module.
#ifndef SLUICE_CONFIG_SECTIONS_H_
#define SLUICE_CONFIG_SECTIONS_H_

#include "absl/status/status.h"
#include "sluice/config/schema.h"
#include "sluice/config/yaml_document.h"

namespace sluice::config {

// Reads the document `root` into `config`, section by section, then validates the whole
// (Validate). Errors are InvalidArgument "<key.path>: <what is wrong>", without the source.
[[nodiscard]] absl::Status ParseRoot(const yaml::Value& root, Config& config);

}  // namespace sluice::config

#endif  // SLUICE_CONFIG_SECTIONS_H_
