#include "sluice/config/schema.h"

namespace sluice::config {

std::string RegistryFile(const MemoryStoreConfig& memory) {
  if (!memory.registry_path.empty()) return memory.registry_path;
  if (memory.snapshot_path.empty()) return "";
  return memory.snapshot_path + std::string(kRegistryBesideSnapshotSuffix);
}

const PlanConfig* Config::FindPlan(std::string_view name) const {
  for (const PlanConfig& plan : plans) {
    if (plan.name == name) return &plan;
  }
  return nullptr;
}

}  // namespace sluice::config
