#include "sluice/store/memory/outbox.h"

namespace sluice {
inline namespace memory {

bool Outbox::Push(AlertEvent event) {
  std::lock_guard lock(mu_);
  if (events_.size() >= capacity_) {
    ++refused_;
    return false;
  }
  events_.emplace(next_seq_++, std::move(event));
  ++recorded_;
  return true;
}

std::vector<Outbox::Entry> Outbox::Read(uint64_t after, size_t max) const {
  std::lock_guard lock(mu_);
  std::vector<Entry> out;
  for (auto it = events_.upper_bound(after); it != events_.end() && out.size() < max; ++it) {
    out.push_back({it->first, it->second});
  }
  return out;
}

void Outbox::Ack(uint64_t seq) {
  std::lock_guard lock(mu_);
  events_.erase(seq);
}

void Outbox::SetListener(std::function<void()> fn) {
  std::lock_guard lock(listener_mu_);
  listener_ = std::move(fn);
}

void Outbox::NotifyRecorded() {
  std::lock_guard lock(listener_mu_);
  if (listener_) listener_();
}

std::vector<Outbox::Entry> Outbox::All() const { return Read(0, SIZE_MAX); }

void Outbox::Restore(std::vector<Entry> entries) {
  std::lock_guard lock(mu_);
  events_.clear();
  for (Entry& e : entries) {
    if (e.seq >= next_seq_) next_seq_ = e.seq + 1;
    events_.emplace(e.seq, std::move(e.event));
  }
}

size_t Outbox::size() const {
  std::lock_guard lock(mu_);
  return events_.size();
}

uint64_t Outbox::recorded() const {
  std::lock_guard lock(mu_);
  return recorded_;
}

uint64_t Outbox::refused() const {
  std::lock_guard lock(mu_);
  return refused_;
}

}  // namespace memory
}  // namespace sluice
