// Structured logs: one JSON object per line on stderr (docs/http.md).
//
//   Log(LogLevel::kInfo, "snapshot loaded").Str("path", path).Int("subjects", n);
//
// The line is written when the temporary is destroyed. Values are JSON-escaped; callers must never
// pass API keys or secrets (there is no field type for them on purpose).
#ifndef SLUICE_COMMON_LOG_H_
#define SLUICE_COMMON_LOG_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace sluice {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

// Lines below `level` are dropped. Thread-safe.
void SetLogLevel(LogLevel level);
[[nodiscard]] bool LogEnabled(LogLevel level);
// Parses "debug", "info", "warn" or "error".
[[nodiscard]] bool ParseLogLevel(std::string_view text, LogLevel* level);

class Log {
 public:
  Log(LogLevel level, std::string_view msg);
  ~Log();
  Log(const Log&) = delete;
  Log& operator=(const Log&) = delete;

  Log& Str(std::string_view key, std::string_view value);
  Log& Int(std::string_view key, int64_t value);
  Log& Double(std::string_view key, double value);
  Log& Bool(std::string_view key, bool value);
  // Adds a JSON array of strings.
  Log& StrList(std::string_view key, const std::vector<std::string>& values);
  // Adds "error": the status message.
  Log& Error(const absl::Status& status);

 private:
  bool enabled_;
  std::string line_;
};

// Appends `s` to `out` as the inside of a JSON string (quotes not included).
void AppendJsonEscaped(std::string& out, std::string_view s);

}  // namespace sluice

#endif  // SLUICE_COMMON_LOG_H_
