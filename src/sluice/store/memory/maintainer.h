// Background upkeep of a MemoryStore: sweeps ended windows and, with a snapshot path, saves a
// snapshot every interval and once more on Stop(). Runs on its own thread, never on a request path.
#ifndef SLUICE_STORE_MEMORY_MAINTAINER_H_
#define SLUICE_STORE_MEMORY_MAINTAINER_H_

#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "sluice/common/clock.h"
#include "sluice/store/memory/memory_store.h"

namespace sluice {
inline namespace memory {

class MemoryStoreMaintainer {
 public:
  struct Options {
    std::string snapshot_path;  // "": no snapshots
    absl::Duration snapshot_interval = absl::Seconds(1);
    absl::Duration sweep_interval = absl::Seconds(10);
    // Told about every failed save (the store keeps serving; the next interval tries again).
    std::function<void(const absl::Status&)> on_error;
  };

  // `store` and `clock` must outlive this object. Starts the thread.
  MemoryStoreMaintainer(MemoryStore* store, const Clock* clock, Options options);
  // Stops the thread (saving a last snapshot if configured).
  ~MemoryStoreMaintainer();

  // Stops the thread and saves a final snapshot; returns that save's status. Idempotent.
  absl::Status Stop();

  // Saves a snapshot now, between the periodic ones (never at the same time as one).
  // FailedPrecondition without a snapshot path or after Stop(). Thread-safe.
  absl::Status SaveSnapshotNow();
  // Sweeps ended windows now; returns the entries dropped. Thread-safe.
  size_t SweepNow();

  [[nodiscard]] uint64_t saves() const;
  [[nodiscard]] uint64_t failed_saves() const;

 private:
  void Run();
  absl::Status SaveNow();

  MemoryStore* store_;
  const Clock* clock_;
  Options options_;
  // A std::mutex, not absl::Mutex: ThreadSanitizer sees it (Debian's abseil is not instrumented),
  // so every user of a memory store can run its tests under TSan.
  mutable std::mutex mu_;
  std::condition_variable wake_;  // signalled when stopping_ is set
  std::mutex save_mu_;            // one save at a time: they share the temporary file
  bool stopping_ = false;         // guarded by mu_, like the members below
  bool stopped_ = false;
  absl::Status final_status_;
  uint64_t saves_ = 0;
  uint64_t failed_saves_ = 0;
  std::thread thread_;
};

}  // namespace memory
}  // namespace sluice

#endif  // SLUICE_STORE_MEMORY_MAINTAINER_H_
