#include "sluice/metrics/process.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace sluice::metrics {
namespace {

std::optional<std::string> ReadSmallFile(const char* path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// The value in kB of the `VmRSS:` line of /proc/self/status, in bytes.
std::optional<double> ResidentBytes(std::string_view status) {
  constexpr std::string_view kKey = "VmRSS:";
  const size_t at = status.find(kKey);
  if (at == std::string_view::npos) return std::nullopt;
  const std::string rest(status.substr(at + kKey.size(), 32));
  char* end = nullptr;
  const double kb = std::strtod(rest.c_str(), &end);
  if (end == rest.c_str()) return std::nullopt;
  return kb * 1024;
}

double OpenFds() {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return 0;
  double n = 0;
  while (const dirent* e = ::readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  ::closedir(dir);
  return n - 1;  // the directory stream's own descriptor
}

}  // namespace

std::optional<double> CpuSecondsFromStat(std::string_view stat, long ticks_per_second) {
  const size_t close = stat.rfind(')');
  if (close == std::string_view::npos || ticks_per_second <= 0) return std::nullopt;
  // After the command: field 3 (state) onwards; utime and stime are fields 14 and 15.
  std::istringstream fields{std::string(stat.substr(close + 1))};
  std::string field;
  double utime = 0, stime = 0;
  for (int i = 3; i <= 15; ++i) {
    if (!(fields >> field)) return std::nullopt;
    if (i == 14 || i == 15) {
      char* end = nullptr;
      const double v = std::strtod(field.c_str(), &end);
      if (end == field.c_str() || *end != '\0') return std::nullopt;
      (i == 14 ? utime : stime) = v;
    }
  }
  return (utime + stime) / static_cast<double>(ticks_per_second);
}

std::optional<ProcessSample> SampleProcess() {
  std::optional<std::string> stat = ReadSmallFile("/proc/self/stat");
  std::optional<std::string> status = ReadSmallFile("/proc/self/status");
  if (!stat || !status) return std::nullopt;
  ProcessSample s;
  s.cpu_seconds = CpuSecondsFromStat(*stat, ::sysconf(_SC_CLK_TCK)).value_or(0);
  s.resident_bytes = ResidentBytes(*status).value_or(0);
  s.open_fds = OpenFds();
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    s.max_fds = static_cast<double>(limit.rlim_cur);
  }
  return s;
}

void RegisterProcessMetrics(Registry& registry, double start_unix_seconds) {
  registry.AddCallbackCounter("process_cpu_seconds_total", "User and system CPU time, in seconds.",
                              [] { return SampleProcess().value_or(ProcessSample{}).cpu_seconds; });
  registry.AddCallbackGauge(
      "process_resident_memory_bytes", "Resident memory (VmRSS), in bytes.",
      [] { return SampleProcess().value_or(ProcessSample{}).resident_bytes; });
  registry.AddCallbackGauge("process_open_fds", "Open file descriptors.",
                            [] { return SampleProcess().value_or(ProcessSample{}).open_fds; });
  registry.AddCallbackGauge("process_max_fds", "The file descriptor limit (RLIMIT_NOFILE).",
                            [] { return SampleProcess().value_or(ProcessSample{}).max_fds; });
  registry.AddCallbackGauge("process_start_time_seconds",
                            "When the process started, in seconds since the Unix epoch.",
                            [start_unix_seconds] { return start_unix_seconds; });
}

}  // namespace sluice::metrics
