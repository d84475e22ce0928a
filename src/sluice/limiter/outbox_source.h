// Where the alert dispatcher gets events from: the store's outbox (docs/alerts.md). It sits beside
// Store because each store writes its own outbox; the dispatcher (alerts/) only reads through it.
// One implementation per store: MemoryOutboxSource (store/memory/memory_outbox_source.h) over the
// memory store's Outbox, and RedisOutbox (store/redis/redis_outbox.h) over the per-bucket Redis
// streams.
//
// The protocol is a lease: Fetch() hands out events the caller now holds; the caller Ack()s each
// one once every sink is done with it (which removes it from the outbox for good), and Renew()s the
// ones it still holds at least every lease()/3 so that no other instance takes them. An event that
// is neither acked nor renewed for lease() (its holder crashed) is handed out again by Claim() —
// in another instance, or in this one after a restart. Delivery is therefore at-least-once; the
// event's stable id lets receivers de-duplicate.
//
// Thread safety: none. A source is used by one thread at a time (the dispatcher's coordinator
// thread); the Redis source does its network I/O inside these calls.
#ifndef SLUICE_LIMITER_OUTBOX_SOURCE_H_
#define SLUICE_LIMITER_OUTBOX_SOURCE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "sluice/limiter/alert_event.h"

namespace sluice {
inline namespace limiter {

// Names one held event. Meaningful only to the source that issued it (Redis: bucket and stream
// entry id; memory: the outbox sequence number in `id`).
struct OutboxHandle {
  uint32_t stream = 0;
  std::string id;

  friend bool operator==(const OutboxHandle&, const OutboxHandle&) = default;
};

struct OutboxItem {
  OutboxHandle handle;
  AlertEvent event;
  // How many times the outbox has handed this event to a consumer, this time included (1 on first
  // delivery; more after a crashed holder's events were claimed). Sources that cannot know say 1.
  int64_t deliveries = 1;
};

struct OutboxStats {
  int64_t depth = 0;                       // events not yet acked, held ones included
  std::optional<absl::Time> oldest_event;  // occurred_at of the oldest of them; none if empty
};

class OutboxSource {
 public:
  virtual ~OutboxSource() = default;

  // Up to `max` events never handed out before, oldest first per stream. Empty when there are
  // none; does not wait for new ones.
  [[nodiscard]] virtual absl::StatusOr<std::vector<OutboxItem>> Fetch(size_t max) = 0;

  // Up to `max` events whose holder has neither acked nor renewed them for lease() (a crashed
  // instance, or this process before a restart). The caller now holds them.
  [[nodiscard]] virtual absl::StatusOr<std::vector<OutboxItem>> Claim(size_t max) = 0;

  // Removes a held event from the outbox: it will never be handed out again. Acking an event that
  // is already gone is OK.
  [[nodiscard]] virtual absl::Status Ack(const OutboxHandle& handle) = 0;

  // Keeps held events from being claimed by others for another lease(). Returns the handles among
  // `held` that this caller no longer holds (another consumer claimed them after a stall longer
  // than the lease, or they were removed); the caller must stop working on those and not ack them.
  [[nodiscard]] virtual absl::StatusOr<std::vector<OutboxHandle>> Renew(
      std::span<const OutboxHandle> held) = 0;

  // How long a held event may go without Renew() before Claim() may hand it to someone else.
  // InfiniteDuration() when nothing else can take it (the memory outbox).
  [[nodiscard]] virtual absl::Duration lease() const = 0;

  // For /metrics.
  [[nodiscard]] virtual absl::StatusOr<OutboxStats> Stats() = 0;

  // Asks the source to call `wake` whenever new events may be there, so that the reader looks at
  // once instead of at its next poll; an empty `wake` withdraws it (and waits for a call in
  // progress). `wake` is quick and thread-safe. A source that cannot tell (Redis streams are
  // polled) ignores it: that is the default.
  virtual void SetWakeup(std::function<void()> wake) { (void)wake; }
};

}  // namespace limiter
}  // namespace sluice

#endif  // SLUICE_LIMITER_OUTBOX_SOURCE_H_
