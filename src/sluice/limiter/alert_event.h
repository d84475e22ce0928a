// A quota alert: "subject reached `threshold`% of `limit` in this window". Recorded by a store in
// the same atomic step as the decision that crossed the threshold; delivered later by alerts/.
#ifndef SLUICE_LIMITER_ALERT_EVENT_H_
#define SLUICE_LIMITER_ALERT_EVENT_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"

namespace sluice {
inline namespace limiter {

struct AlertEvent {
  std::string subject;
  std::string plan;
  std::string limit;
  int threshold = 0;  // percent
  int64_t used = 0;   // counter value when it fired
  int64_t quota = 0;
  absl::Time window_start;
  absl::Time window_end;
  absl::Time occurred_at;

  // Stable for (subject, plan, limit, window_start, threshold, quota): the same alert always gets
  // the same id, in any process and on any store, so receivers can de-duplicate; the same threshold
  // fired again under another quota in force is another alert. "qa_" + 32 hex digits.
  [[nodiscard]] std::string Id() const;

  friend bool operator==(const AlertEvent&, const AlertEvent&) = default;
};

}  // namespace limiter
}  // namespace sluice

#endif  // SLUICE_LIMITER_ALERT_EVENT_H_
