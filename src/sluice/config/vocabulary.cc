#include "sluice/config/vocabulary.h"

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "sluice/config/validators.h"

namespace sluice::config {
namespace {

constexpr int64_t kMaxWindowCount = 100'000'000;  // N of Ns/Nm/Nh read before kMaxFixedWindow

}  // namespace

absl::StatusOr<absl::Duration> ParseDuration(std::string_view std_text) {
  const absl::string_view text = FromStd(std_text);
  const auto bad = [text](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("bad duration ", Quote(text), " (", why, ")"));
  };
  const size_t digits = CountLeadingDigits(text);
  const absl::string_view unit = text.substr(digits);
  absl::Duration per_unit = absl::ZeroDuration();
  if (unit == "ms") per_unit = absl::Milliseconds(1);
  if (unit == "s") per_unit = absl::Seconds(1);
  if (unit == "m") per_unit = absl::Minutes(1);
  if (unit == "h") per_unit = absl::Hours(1);
  if (digits == 0 || per_unit == absl::ZeroDuration()) {
    return bad("want a whole number and a unit: ms, s, m or h, e.g. 20ms, 5m");
  }
  int64_t count = 0;
  if (!absl::SimpleAtoi(text.substr(0, digits), &count)) return bad("too large");
  if (count == 0) return bad("must be greater than zero");
  const absl::Duration duration = count * per_unit;  // saturates to infinity on overflow
  if (duration == absl::InfiniteDuration()) return bad("too large");
  return duration;
}

std::string_view AlgorithmName(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::kFixed:
      return "fixed";
    case Algorithm::kSliding:
      return "sliding";
    case Algorithm::kGcra:
      return "gcra";
  }
  return "fixed";
}

absl::StatusOr<WindowSpec> ParseWindow(std::string_view std_text) {
  const absl::string_view text = FromStd(std_text);
  if (text == "day") return WindowSpec{.kind = WindowSpec::Kind::kDay, .text = "day"};
  if (text == "week") return WindowSpec{.kind = WindowSpec::Kind::kWeek, .text = "week"};
  if (text == "month") return WindowSpec{.kind = WindowSpec::Kind::kMonth, .text = "month"};
  if (text == "year") return WindowSpec{.kind = WindowSpec::Kind::kYear, .text = "year"};
  if (text == "concurrent") {
    return WindowSpec{.kind = WindowSpec::Kind::kConcurrent, .text = "concurrent"};
  }
  if (text == "credit") return WindowSpec{.kind = WindowSpec::Kind::kCredit, .text = "credit"};
  const size_t digits = CountLeadingDigits(text);
  int64_t count = 0;
  if (digits > 0 && digits + 1 == text.size() && absl::SimpleAtoi(text.substr(0, digits), &count) &&
      count >= 1 && count <= kMaxWindowCount) {
    absl::Duration unit = absl::ZeroDuration();
    if (text.back() == 's') unit = absl::Seconds(1);
    if (text.back() == 'm') unit = absl::Minutes(1);
    if (text.back() == 'h') unit = absl::Hours(1);
    if (unit != absl::ZeroDuration() && count * unit > kMaxFixedWindow) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bad window ", Quote(text),
          ": a fixed window is at most 31 days (744h); use month for a monthly quota"));
    }
    if (unit != absl::ZeroDuration()) {
      return WindowSpec{
          .kind = WindowSpec::Kind::kFixed, .length = count * unit, .text = std::string(text)};
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("bad window ", Quote(text),
                   " (want Ns, Nm, Nh, day, week, month, year, concurrent or credit)"));
}

}  // namespace sluice::config
