#include "sluice/common/log.h"

#include <unistd.h>

#include <atomic>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "sluice/common/strings.h"

namespace sluice {
inline namespace common {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};

std::string_view LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kError:
      return "error";
  }
  return "info";
}

}  // namespace

void SetLogLevel(LogLevel level) { g_level.store(static_cast<int>(level)); }

bool LogEnabled(LogLevel level) { return static_cast<int>(level) >= g_level.load(); }

bool ParseLogLevel(std::string_view text, LogLevel* level) {
  for (LogLevel l : {LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarn, LogLevel::kError}) {
    if (text == LevelName(l)) {
      *level = l;
      return true;
    }
  }
  return false;
}

namespace {

// The length of the well-formed UTF-8 sequence at the start of `s` (its first byte >= 0x80), or 0
// when it is none (a stray continuation byte, a truncated or overlong sequence, a surrogate, a
// code point above U+10FFFF).
size_t Utf8SequenceLength(std::string_view s) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char b0 = byte(0);
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xbf;  // the range of the second byte
  if (b0 >= 0xc2 && b0 <= 0xdf) {
    n = 2;
  } else if (b0 >= 0xe0 && b0 <= 0xef) {
    n = 3;
    if (b0 == 0xe0) lo = 0xa0;  // overlong
    if (b0 == 0xed) hi = 0x9f;  // surrogates
  } else if (b0 >= 0xf0 && b0 <= 0xf4) {
    n = 4;
    if (b0 == 0xf0) lo = 0x90;  // overlong
    if (b0 == 0xf4) hi = 0x8f;  // above U+10FFFF
  } else {
    return 0;
  }
  if (s.size() < n || byte(1) < lo || byte(1) > hi) return 0;
  for (size_t i = 2; i < n; ++i) {
    if (byte(i) < 0x80 || byte(i) > 0xbf) return 0;
  }
  return n;
}

}  // namespace

void AppendJsonEscaped(std::string& out, std::string_view s) {
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          absl::StrAppendFormat(&out, "\\u%04x", c);
        } else if (c < 0x80) {
          out.push_back(static_cast<char>(c));
        } else if (const size_t n = Utf8SequenceLength(s.substr(i)); n > 0) {
          out.append(s.substr(i, n));
          i += n - 1;
        } else {
          // Not UTF-8 (a raw byte a client sent): JSON text must be, so it reads as U+FFFD.
          out += "\\ufffd";
        }
    }
  }
}

Log::Log(LogLevel level, std::string_view msg) : enabled_(LogEnabled(level)) {
  if (!enabled_) return;
  // Log timestamps describe when the line was written; they never decide a window, so the host
  // clock is the right one here.
  absl::StrAppend(&line_, "{\"ts\":\"",
                  absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone()),
                  "\",\"level\":\"", ToAbsl(LevelName(level)), "\",\"msg\":\"");
  AppendJsonEscaped(line_, msg);
  line_ += '"';
}

Log::~Log() {
  if (!enabled_) return;
  line_ += "}\n";
  // One write(2) per line: lines from different threads never interleave.
  const char* p = line_.data();
  size_t left = line_.size();
  while (left > 0) {
    ssize_t n = ::write(STDERR_FILENO, p, left);
    if (n <= 0) break;
    p += n;
    left -= static_cast<size_t>(n);
  }
}

Log& Log::Str(std::string_view key, std::string_view value) {
  if (!enabled_) return *this;
  line_ += ",\"";
  AppendJsonEscaped(line_, key);
  line_ += "\":\"";
  AppendJsonEscaped(line_, value);
  line_ += '"';
  return *this;
}

Log& Log::StrList(std::string_view key, const std::vector<std::string>& values) {
  if (!enabled_) return *this;
  line_ += ",\"";
  AppendJsonEscaped(line_, key);
  line_ += "\":[";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) line_ += ',';
    line_ += '"';
    AppendJsonEscaped(line_, values[i]);
    line_ += '"';
  }
  line_ += ']';
  return *this;
}

Log& Log::Int(std::string_view key, int64_t value) {
  if (!enabled_) return *this;
  line_ += ",\"";
  AppendJsonEscaped(line_, key);
  absl::StrAppend(&line_, "\":", value);
  return *this;
}

Log& Log::Double(std::string_view key, double value) {
  if (!enabled_) return *this;
  line_ += ",\"";
  AppendJsonEscaped(line_, key);
  absl::StrAppendFormat(&line_, "\":%.6g", value);
  return *this;
}

Log& Log::Error(const absl::Status& status) { return Str("error", ToStd(status.message())); }

Log& Log::Bool(std::string_view key, bool value) {
  if (!enabled_) return *this;
  line_ += ",\"";
  AppendJsonEscaped(line_, key);
  line_ += value ? "\":true" : "\":false";
  return *this;
}

bool LogEvery::AllowAt(Clock::time_point now, uint64_t* held_back) {
  if (last_.has_value() && now - *last_ < every_) {
    ++held_back_;
    return false;
  }
  last_ = now;
  *held_back = held_back_;
  held_back_ = 0;
  return true;
}

}  // namespace common
}  // namespace sluice
