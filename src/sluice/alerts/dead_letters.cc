#include "sluice/alerts/dead_letters.h"

#include <utility>

namespace sluice::alerts {

void DeadLetterList::Add(DeadLetter letter) {
  std::lock_guard lock(mu_);
  if (capacity_ == 0) {
    ++dropped_;
    return;
  }
  if (letters_.size() >= capacity_) {
    letters_.pop_front();
    ++dropped_;
  }
  letters_.push_back(std::move(letter));
}

std::vector<DeadLetter> DeadLetterList::Snapshot() const {
  std::lock_guard lock(mu_);
  return {letters_.begin(), letters_.end()};
}

size_t DeadLetterList::size() const {
  std::lock_guard lock(mu_);
  return letters_.size();
}

uint64_t DeadLetterList::dropped() const {
  std::lock_guard lock(mu_);
  return dropped_;
}

}  // namespace sluice::alerts
