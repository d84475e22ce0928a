#include "sluice/store/memory/maintainer.h"

#include <algorithm>
#include <mutex>
#include <utility>

#include "absl/time/clock.h"
#include "sluice/common/log.h"
#include "sluice/store/memory/snapshot.h"

namespace sluice {
inline namespace memory {

MemoryStoreMaintainer::MemoryStoreMaintainer(MemoryStore* store, const Clock* clock,
                                             Options options)
    : store_(store), clock_(clock), options_(std::move(options)) {
  thread_ = std::thread([this] { Run(); });
}

MemoryStoreMaintainer::~MemoryStoreMaintainer() { (void)Stop(); }

absl::Status MemoryStoreMaintainer::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return final_status_;
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  absl::Status s = options_.snapshot_path.empty() ? absl::OkStatus() : SaveNow();
  std::lock_guard<std::mutex> lock(mu_);
  stopped_ = true;
  final_status_ = s;
  return s;
}

absl::Status MemoryStoreMaintainer::SaveSnapshotNow() {
  if (options_.snapshot_path.empty()) {
    return absl::FailedPreconditionError("no snapshot path is set");
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return absl::FailedPreconditionError("the store is stopping");
  }
  return SaveNow();
}

size_t MemoryStoreMaintainer::SweepNow() { return store_->Sweep(clock_->Now()); }

absl::Status MemoryStoreMaintainer::SaveNow() {
  std::lock_guard<std::mutex> one_save(save_mu_);
  SnapshotStats stats;
  const absl::Time start = absl::Now();
  absl::Status s = SaveSnapshot(*store_, options_.snapshot_path, &stats);
  if (s.ok() && LogEnabled(LogLevel::kDebug)) {
    Log(LogLevel::kDebug, "snapshot saved")
        .Str("path", options_.snapshot_path)
        .Int("subjects", static_cast<int64_t>(stats.subjects))
        .Int("pending_alerts", static_cast<int64_t>(stats.events))
        .Int("bytes", static_cast<int64_t>(stats.bytes))
        .Double("ms", absl::ToDoubleMilliseconds(absl::Now() - start));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (s.ok()) {
    ++saves_;
  } else {
    ++failed_saves_;
  }
  return s;
}

void MemoryStoreMaintainer::Run() {
  // Waiting uses real time (this is a timer, not a window decision); what is swept is decided by
  // the injected clock.
  const bool snapshots = !options_.snapshot_path.empty();
  const absl::Duration tick = snapshots
                                  ? std::min(options_.snapshot_interval, options_.sweep_interval)
                                  : options_.sweep_interval;
  absl::Time next_sweep = absl::Now() + options_.sweep_interval;
  absl::Time next_save = absl::Now() + options_.snapshot_interval;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (wake_.wait_for(lock, absl::ToChronoNanoseconds(tick), [this] { return stopping_; })) {
        return;
      }
    }
    const absl::Time now = absl::Now();
    if (now >= next_sweep) {
      store_->Sweep(clock_->Now());
      next_sweep = now + options_.sweep_interval;
    }
    if (snapshots && now >= next_save) {
      absl::Status s = SaveNow();
      if (!s.ok() && options_.on_error) options_.on_error(s);
      next_save = now + options_.snapshot_interval;
    }
  }
}

uint64_t MemoryStoreMaintainer::saves() const {
  std::lock_guard<std::mutex> lock(mu_);
  return saves_;
}

uint64_t MemoryStoreMaintainer::failed_saves() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failed_saves_;
}

}  // namespace memory
}  // namespace sluice
