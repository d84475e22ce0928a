// The process_* metrics Prometheus clients conventionally export, read from /proc (Linux): CPU
// time, resident memory, open and maximum file descriptors, start time.
#ifndef SLUICE_METRICS_PROCESS_H_
#define SLUICE_METRICS_PROCESS_H_

#include <cstdint>
#include <optional>
#include <string_view>

#include "sluice/metrics/metrics.h"

namespace sluice::metrics {

// What RegisterProcessMetrics reports, read at once.
struct ProcessSample {
  double cpu_seconds = 0;     // user + system
  double resident_bytes = 0;  // VmRSS
  double open_fds = 0;        // entries of /proc/self/fd
  double max_fds = 0;         // RLIMIT_NOFILE soft limit
};

// Reads this process's figures; nullopt when /proc cannot be read.
[[nodiscard]] std::optional<ProcessSample> SampleProcess();

// The CPU seconds in a /proc/<pid>/stat line (utime + stime, fields 14 and 15, in clock ticks of
// `ticks_per_second`); nullopt if the line does not parse. The command name (field 2) may hold
// spaces and parentheses: fields are counted after its last ')'.
[[nodiscard]] std::optional<double> CpuSecondsFromStat(std::string_view stat,
                                                       long ticks_per_second);

// Registers process_cpu_seconds_total, process_resident_memory_bytes, process_open_fds,
// process_max_fds and process_start_time_seconds (`start_unix_seconds`) in `registry`.
void RegisterProcessMetrics(Registry& registry, double start_unix_seconds);

}  // namespace sluice::metrics

#endif  // SLUICE_METRICS_PROCESS_H_
