#include "sluice/store/memory/memory_outbox_source.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace sluice {
inline namespace memory {

absl::StatusOr<std::vector<OutboxItem>> MemoryOutboxSource::Fetch(size_t max) {
  std::vector<OutboxItem> items;
  for (Outbox::Entry& entry : outbox_->Read(last_seq_, max)) {
    last_seq_ = entry.seq;
    items.push_back(
        OutboxItem{.handle = {.id = absl::StrCat(entry.seq)}, .event = std::move(entry.event)});
  }
  return items;
}

absl::StatusOr<std::vector<OutboxItem>> MemoryOutboxSource::Claim(size_t /*max*/) {
  return std::vector<OutboxItem>{};
}

absl::Status MemoryOutboxSource::Ack(const OutboxHandle& handle) {
  uint64_t seq = 0;
  if (!absl::SimpleAtoi(handle.id, &seq)) {
    return absl::InvalidArgumentError(absl::StrCat("not a memory outbox handle: ", handle.id));
  }
  outbox_->Ack(seq);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<OutboxHandle>> MemoryOutboxSource::Renew(
    std::span<const OutboxHandle> /*held*/) {
  return std::vector<OutboxHandle>{};
}

absl::StatusOr<OutboxStats> MemoryOutboxSource::Stats() {
  OutboxStats stats{.depth = static_cast<int64_t>(outbox_->size())};
  std::vector<Outbox::Entry> oldest = outbox_->Read(0, 1);
  if (!oldest.empty()) stats.oldest_event = oldest.front().event.occurred_at;
  return stats;
}

}  // namespace memory
}  // namespace sluice
