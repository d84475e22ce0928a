#include "sluice/server/cpus.h"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "sluice/common/strings.h"

namespace sluice::server {
namespace {

// The file's text; nullopt if it cannot be read. Cgroup files are small.
std::optional<std::string> ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::string text(4096, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  return text;
}

std::optional<double> Ratio(int64_t quota, int64_t period) {
  if (quota <= 0 || period <= 0) return std::nullopt;
  return static_cast<double>(quota) / static_cast<double>(period);
}

std::optional<double> Min(std::optional<double> a, std::optional<double> b) {
  if (!a) return b;
  if (!b) return a;
  return std::min(*a, *b);
}

// `dir` and its ancestors up to and including `root`: "/r/a/b" -> "/r/a/b", "/r/a", "/r".
std::vector<std::string> SelfAndAncestors(const std::string& root, std::string_view relative) {
  std::vector<std::string> dirs;
  std::string path = root;
  dirs.push_back(path);
  for (absl::string_view part : absl::StrSplit(ToAbsl(relative), '/', absl::SkipEmpty())) {
    if (part == "." || part == "..") return {root};  // not a cgroup path; the root only
    path += "/";
    path.append(part.data(), part.size());
    dirs.push_back(path);
  }
  std::reverse(dirs.begin(), dirs.end());
  return dirs;
}

std::optional<double> V2Quota(const std::string& root, std::string_view relative) {
  std::optional<double> quota;
  for (const std::string& dir : SelfAndAncestors(root, relative)) {
    if (std::optional<std::string> text = ReadSmallFile(dir + "/cpu.max")) {
      quota = Min(quota, ParseCpuMax(*text));
    }
  }
  return quota;
}

std::optional<double> V1Quota(const std::string& mount, std::string_view relative) {
  std::optional<double> quota;
  for (const std::string& dir : SelfAndAncestors(mount, relative)) {
    std::optional<std::string> q = ReadSmallFile(dir + "/cpu.cfs_quota_us");
    std::optional<std::string> p = ReadSmallFile(dir + "/cpu.cfs_period_us");
    if (q && p) quota = Min(quota, ParseCfsQuota(*q, *p));
  }
  return quota;
}

}  // namespace

CgroupMembership ParseProcSelfCgroup(std::string_view contents) {
  CgroupMembership m;
  for (absl::string_view line : absl::StrSplit(ToAbsl(contents), '\n', absl::SkipEmpty())) {
    // "<id>:<controllers>:<path>"; the path may itself hold ':'.
    const size_t first = line.find(':');
    const size_t second = first == absl::string_view::npos ? first : line.find(':', first + 1);
    if (second == absl::string_view::npos) continue;
    const absl::string_view id = line.substr(0, first);
    const absl::string_view controllers = line.substr(first + 1, second - first - 1);
    const std::string path(line.substr(second + 1));
    if (id == "0" && controllers.empty()) {
      m.v2 = path;
      continue;
    }
    for (absl::string_view c : absl::StrSplit(controllers, ',')) {
      if (c == "cpu") m.v1_cpu = path;
    }
  }
  return m;
}

std::optional<double> ParseCpuMax(std::string_view contents) {
  const std::vector<absl::string_view> fields =
      absl::StrSplit(absl::StripAsciiWhitespace(ToAbsl(contents)), ' ', absl::SkipEmpty());
  if (fields.size() != 2) return std::nullopt;
  int64_t quota = 0, period = 0;
  if (fields[0] == "max" || !absl::SimpleAtoi(fields[0], &quota) ||
      !absl::SimpleAtoi(fields[1], &period)) {
    return std::nullopt;
  }
  return Ratio(quota, period);
}

std::optional<double> ParseCfsQuota(std::string_view quota_us, std::string_view period_us) {
  int64_t quota = 0, period = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(ToAbsl(quota_us)), &quota) ||
      !absl::SimpleAtoi(absl::StripAsciiWhitespace(ToAbsl(period_us)), &period)) {
    return std::nullopt;
  }
  return Ratio(quota, period);  // -1: no limit
}

std::optional<double> CgroupCpuQuota(const std::string& cgroup_root,
                                     std::string_view proc_self_cgroup) {
  const CgroupMembership m = ParseProcSelfCgroup(proc_self_cgroup);
  std::optional<double> quota;
  if (m.v2) quota = Min(quota, V2Quota(cgroup_root, *m.v2));
  if (m.v1_cpu) {
    // The cpu controller is mounted as "cpu", or together with cpuacct as "cpu,cpuacct".
    for (const char* mount : {"/cpu", "/cpu,cpuacct", "/cpuacct,cpu"}) {
      quota = Min(quota, V1Quota(cgroup_root + mount, *m.v1_cpu));
    }
  }
  return quota;
}

unsigned CpusAllowed(unsigned affinity_cpus, std::optional<double> quota) {
  unsigned cpus = std::max(1u, affinity_cpus);
  if (quota && *quota > 0) {
    const double rounded = std::ceil(*quota - 1e-9);  // 150000/100000 -> 2, 200000/100000 -> 2
    if (rounded < static_cast<double>(cpus)) cpus = static_cast<unsigned>(rounded);
  }
  return std::max(1u, cpus);
}

unsigned AvailableCpus() {
  unsigned affinity = 0;
  // The mask may be larger than cpu_set_t on machines with more than 1024 CPUs.
  for (int size = 1024; size <= (1 << 16) && affinity == 0; size *= 2) {
    cpu_set_t* set = CPU_ALLOC(size);
    if (set == nullptr) break;
    const size_t bytes = CPU_ALLOC_SIZE(size);
    if (::sched_getaffinity(0, bytes, set) == 0) affinity = CPU_COUNT_S(bytes, set);
    CPU_FREE(set);
  }
  if (affinity == 0) affinity = std::thread::hardware_concurrency();
  std::optional<double> quota;
  if (std::optional<std::string> membership = ReadSmallFile("/proc/self/cgroup")) {
    quota = CgroupCpuQuota("/sys/fs/cgroup", *membership);
  }
  return CpusAllowed(affinity, quota);
}

}  // namespace sluice::server
