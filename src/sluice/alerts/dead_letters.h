// Alert deliveries the dispatcher gave up on: a sink refused the event for good (Outcome
// kPermanent), or every attempt allowed by alerts.retry failed. Listed by the admin endpoint
// GET /v1/alerts/dead.
//
// Bounded: keeps the newest `capacity` letters and counts the ones it had to drop. Lives in memory
// only (one list per process). The server owns it so that it survives a reload, which rebuilds the
// dispatcher. Thread-safe.
#ifndef SLUICE_ALERTS_DEAD_LETTERS_H_
#define SLUICE_ALERTS_DEAD_LETTERS_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "sluice/limiter/alert_event.h"

namespace sluice::alerts {

struct DeadLetter {
  AlertEvent event;
  std::string sink;    // Sink::name()
  std::string reason;  // "permanent: <detail>", "gave up after 10 attempts: <detail>", ...
  int attempts = 0;    // calls to this sink for this event in the process that gave up
  absl::Time failed_at;
};

class DeadLetterList {
 public:
  explicit DeadLetterList(size_t capacity = 1000) : capacity_(capacity) {}

  void Add(DeadLetter letter);
  // Oldest first.
  [[nodiscard]] std::vector<DeadLetter> Snapshot() const;
  [[nodiscard]] size_t size() const;
  // Letters pushed out by newer ones since start.
  [[nodiscard]] uint64_t dropped() const;
  [[nodiscard]] size_t capacity() const { return capacity_; }

 private:
  const size_t capacity_;
  // std::mutex rather than absl::Mutex: Debian's abseil is not built for ThreadSanitizer.
  mutable std::mutex mu_;
  std::deque<DeadLetter> letters_;  // guarded by mu_
  uint64_t dropped_ = 0;            // guarded by mu_
};

}  // namespace sluice::alerts

#endif  // SLUICE_ALERTS_DEAD_LETTERS_H_
