// OutboxSource over the memory store's in-process Outbox.
//
// Fetch() reads the events numbered after the last one it handed out; Ack() removes an event from
// the Outbox. Only one process reads an in-process outbox, so nothing is ever claimed and a lease
// never ends. Events stay in the Outbox (and in its snapshot) until acked: a restarted process —
// or a new source after a reload — starts reading from the beginning again, so every event that
// was not acked before the kill or the reload is delivered again.
#ifndef SLUICE_STORE_MEMORY_MEMORY_OUTBOX_SOURCE_H_
#define SLUICE_STORE_MEMORY_MEMORY_OUTBOX_SOURCE_H_

#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "sluice/limiter/outbox_source.h"
#include "sluice/store/memory/outbox.h"

namespace sluice {
inline namespace memory {

class MemoryOutboxSource final : public OutboxSource {
 public:
  // `outbox` must outlive this source.
  explicit MemoryOutboxSource(Outbox* outbox) : outbox_(outbox) {}

  [[nodiscard]] absl::StatusOr<std::vector<OutboxItem>> Fetch(size_t max) override;
  [[nodiscard]] absl::StatusOr<std::vector<OutboxItem>> Claim(size_t max) override;
  [[nodiscard]] absl::Status Ack(const OutboxHandle& handle) override;
  [[nodiscard]] absl::StatusOr<std::vector<OutboxHandle>> Renew(
      std::span<const OutboxHandle> held) override;
  [[nodiscard]] absl::Duration lease() const override { return absl::InfiniteDuration(); }
  [[nodiscard]] absl::StatusOr<OutboxStats> Stats() override;
  // Through Outbox::SetListener: the memory store calls `wake` after recording events.
  void SetWakeup(std::function<void()> wake) override { outbox_->SetListener(std::move(wake)); }

 private:
  Outbox* const outbox_;
  uint64_t last_seq_ = 0;  // the largest sequence number handed out
};

}  // namespace memory
}  // namespace sluice

#endif  // SLUICE_STORE_MEMORY_MEMORY_OUTBOX_SOURCE_H_
