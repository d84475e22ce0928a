// Structured logs: one JSON object per line on stderr (docs/http.md).
//
//   Log(LogLevel::kInfo, "snapshot loaded").Str("path", path).Int("subjects", n);
//
// The line is written when the temporary is destroyed. Values are JSON-escaped; callers must never
// pass API keys or secrets (there is no field type for them on purpose).
#ifndef SLUICE_COMMON_LOG_H_
#define SLUICE_COMMON_LOG_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace sluice {
inline namespace common {

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

// For a warning that repeats while a condition lasts (a store that stays down): lets one line
// through at once, then at most one per `every`, whatever its text says (a reason that alternates
// is the same condition), and tells the next line how many were held back. Not thread-safe.
//
//   uint64_t held_back = 0;
//   if (limit_.Allow(&held_back)) Log(LogLevel::kWarn, "...").Int("held_back", held_back);
class LogEvery {
 public:
  using Clock = std::chrono::steady_clock;
  explicit LogEvery(Clock::duration every = std::chrono::minutes(1)) : every_(every) {}

  // True if a line may be written now; `*held_back` is then how many were not since the last one.
  bool Allow(uint64_t* held_back) { return AllowAt(Clock::now(), held_back); }
  bool AllowAt(Clock::time_point now, uint64_t* held_back);
  // The condition is over: the next line goes through at once.
  void Reset() {
    last_.reset();
    held_back_ = 0;
  }
  // Whether a line went through since the last Reset().
  [[nodiscard]] bool active() const { return last_.has_value(); }

 private:
  Clock::duration every_;
  std::optional<Clock::time_point> last_;
  uint64_t held_back_ = 0;
};

// Appends `s` to `out` as the inside of a JSON string (quotes not included).
void AppendJsonEscaped(std::string& out, std::string_view s);

}  // namespace common
}  // namespace sluice

#endif  // SLUICE_COMMON_LOG_H_
