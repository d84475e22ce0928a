#include "sluice/alerts/event_json.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "absl/time/time.h"
#include "sluice/limiter/alert_event.h"
#include "sluice/limiter/sample_alert_event.h"

namespace sluice::alerts {
namespace {

// user-42 reached 80% of the free plan's daily limit on 2026-11-30 (UTC), as in docs/alerts.md.
AlertEvent Event() { return testing_util::SampleAlertEvent(); }

TEST(EventJsonTest, IsTheDesignDocumentsJsonByteForByte) {
  EXPECT_EQ(EventJson(Event()),
            R"({"type":"quota.threshold_reached","id":"qa_d4e39afdf669701a8133aafb7ce44067",)"
            R"("subject":"user-42","plan":"free","limit":"daily","threshold":80,"used":4000,)"
            R"("quota":5000,"window_start":"2026-11-30T00:00:00Z",)"
            R"("window_end":"2026-12-01T00:00:00Z","occurred_at":"2026-11-30T13:45:12.123Z"})");
}

TEST(EventJsonTest, IdIsTheEventsStableId) {
  EXPECT_EQ(nlohmann::json::parse(EventJson(Event()))["id"], Event().Id());
}

TEST(EventJsonTest, SameEventGivesSameBytes) { EXPECT_EQ(EventJson(Event()), EventJson(Event())); }

TEST(EventJsonTest, EscapesWhatJsonRequires) {
  AlertEvent odd = Event();
  odd.subject = "a\"b\\c";
  EXPECT_EQ(nlohmann::json::parse(EventJson(odd))["subject"], "a\"b\\c");
}

TEST(Rfc3339Test, WholeSecondsInUtc) {
  EXPECT_EQ(Rfc3339Seconds(absl::FromUnixSeconds(0)), "1970-01-01T00:00:00Z");
  EXPECT_EQ(Rfc3339Seconds(absl::FromUnixMillis(1'796'046'312'999)), "2026-11-30T13:45:12Z");
}

TEST(Rfc3339Test, MillisecondsAreAlwaysThreeDigitsAndTruncated) {
  EXPECT_EQ(Rfc3339Millis(absl::FromUnixSeconds(1'796'046'312)), "2026-11-30T13:45:12.000Z");
  EXPECT_EQ(Rfc3339Millis(absl::FromUnixMillis(1'796'046'312'007)), "2026-11-30T13:45:12.007Z");
  EXPECT_EQ(Rfc3339Millis(absl::FromUnixMicros(1'796'046'312'999'999)), "2026-11-30T13:45:12.999Z");
}

}  // namespace
}  // namespace sluice::alerts
