// How many CPUs this process may use: what `server.threads: 0` turns into.
//
// The answer is the number of CPUs in the process's affinity mask (taskset, cpusets), capped by the
// CPU bandwidth its cgroup allows (a container's --cpus, systemd's CPUQuota=), rounded up, and at
// least 1. std::thread::hardware_concurrency() counts the machine's CPUs and would start 64 event
// loops in a container allowed two.
#ifndef SLUICE_SERVER_CPUS_H_
#define SLUICE_SERVER_CPUS_H_

#include <optional>
#include <string>
#include <string_view>

namespace sluice::server {

// Where the process sits in each cgroup hierarchy, from the text of /proc/self/cgroup.
struct CgroupMembership {
  std::optional<std::string> v2;      // "0::<path>" (the unified hierarchy)
  std::optional<std::string> v1_cpu;  // "<n>:<controllers including cpu>:<path>"
};
[[nodiscard]] CgroupMembership ParseProcSelfCgroup(std::string_view contents);

// CPUs allowed by a cgroup v2 `cpu.max` ("<quota> <period>" or "max <period>", in microseconds).
// nullopt for "max" (no limit) and for text that is not one of the two forms.
[[nodiscard]] std::optional<double> ParseCpuMax(std::string_view contents);

// CPUs allowed by cgroup v1 `cpu.cfs_quota_us` and `cpu.cfs_period_us`; a quota of -1 (no limit)
// or unreadable text is nullopt.
[[nodiscard]] std::optional<double> ParseCfsQuota(std::string_view quota_us,
                                                  std::string_view period_us);

// The smallest CPU quota on the way from the process's cgroup up to the hierarchy's root (a
// parent's limit binds its children), read below `cgroup_root` (normally "/sys/fs/cgroup") for the
// membership given as /proc/self/cgroup's text. nullopt: no quota anywhere, or nothing readable.
[[nodiscard]] std::optional<double> CgroupCpuQuota(const std::string& cgroup_root,
                                                   std::string_view proc_self_cgroup);

// max(1, min(affinity_cpus, ceil(quota))); affinity_cpus 0 counts as 1.
[[nodiscard]] unsigned CpusAllowed(unsigned affinity_cpus, std::optional<double> quota);

// CPUs available to this process now: the affinity mask (sched_getaffinity) capped by the cgroup
// quota of /sys/fs/cgroup and /proc/self/cgroup. Never 0.
[[nodiscard]] unsigned AvailableCpus();

}  // namespace sluice::server

#endif  // SLUICE_SERVER_CPUS_H_
