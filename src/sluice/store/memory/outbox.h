// The memory store's outbox: alert events recorded by decisions, waiting for delivery.
//
// Events are numbered in the order they were recorded. A reader takes them with Read() and removes
// each with Ack() once it has been delivered, so an event stays in the outbox (and in the snapshot)
// until then: delivery is at-least-once. Bounded: when full, Push() refuses and counts the refusal,
// and the store then leaves the threshold armed so it fires again on a later request.
#ifndef SLUICE_STORE_MEMORY_OUTBOX_H_
#define SLUICE_STORE_MEMORY_OUTBOX_H_

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "sluice/limiter/alert_event.h"

namespace sluice {
inline namespace memory {

class Outbox {
 public:
  struct Entry {
    uint64_t seq = 0;
    AlertEvent event;
  };

  explicit Outbox(size_t capacity) : capacity_(capacity) {}

  // Appends `event`; false (and counted in refused()) when the outbox holds `capacity` events.
  [[nodiscard]] bool Push(AlertEvent event);

  // Up to `max` events with seq > `after`, oldest first. Does not remove them.
  [[nodiscard]] std::vector<Entry> Read(uint64_t after, size_t max) const;

  // Removes the event numbered `seq` (delivered). Unknown numbers are ignored.
  void Ack(uint64_t seq);

  // Every pending event, oldest first (for snapshots).
  [[nodiscard]] std::vector<Entry> All() const;
  // Replaces the contents (from a snapshot); later pushes are numbered after the largest seq.
  void Restore(std::vector<Entry> entries);

  [[nodiscard]] size_t size() const;
  [[nodiscard]] uint64_t refused() const;
  // Events pushed since construction (a snapshot's restored events not included).
  [[nodiscard]] uint64_t recorded() const;
  [[nodiscard]] size_t capacity() const { return capacity_; }

  // `fn` is called after a decision recorded events — on that decision's thread, with none of the
  // store's locks held (MemoryStore calls NotifyRecorded()) — so that a reader can look at once
  // instead of at its next poll. `fn` must be quick (e.g. notify a condition variable). An empty
  // `fn` removes the listener. Does not return while a call to the previous listener is running,
  // so that listener may be destroyed afterwards.
  void SetListener(std::function<void()> fn);
  // Calls the listener, if there is one.
  void NotifyRecorded();

 private:
  const size_t capacity_;
  // std::mutex, as the store's shards: Debian's abseil is not built for ThreadSanitizer, which
  // then cannot see absl::Mutex order a push against the dispatcher's reads.
  mutable std::mutex mu_;
  std::map<uint64_t, AlertEvent> events_;  // guarded by mu_
  uint64_t next_seq_ = 1;                  // guarded by mu_
  uint64_t refused_ = 0;                   // guarded by mu_
  uint64_t recorded_ = 0;                  // guarded by mu_
  // Held while the listener runs (see SetListener); only taken when events were recorded.
  std::mutex listener_mu_;
  std::function<void()> listener_;  // guarded by listener_mu_
};

}  // namespace memory
}  // namespace sluice

#endif  // SLUICE_STORE_MEMORY_OUTBOX_H_
