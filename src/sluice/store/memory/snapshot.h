// Snapshot files of the memory store: counters, alert flags and undelivered alert events.
//
// A snapshot is written to a temporary file in the same directory, fsync'ed, renamed over the old
// one and the directory fsync'ed, so a crash leaves either the old or the new snapshot, never a
// mix. The file carries a magic, a format version, its payload length and a CRC-32 of the payload;
// a torn, truncated or corrupted file is reported as DataLoss and nothing from it is loaded.
#ifndef SLUICE_STORE_MEMORY_SNAPSHOT_H_
#define SLUICE_STORE_MEMORY_SNAPSHOT_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "sluice/store/memory/memory_store.h"

namespace sluice {

struct SnapshotStats {
  size_t subjects = 0;
  size_t events = 0;
  size_t bytes = 0;
};

// Writes `store` to `path` atomically. Safe to call while the store serves decisions.
[[nodiscard]] absl::Status SaveSnapshot(const MemoryStore& store, const std::string& path,
                                        SnapshotStats* stats = nullptr);

// Loads `path` into `store` (replacing its entries and outbox). A missing file is NotFound; a
// damaged one is DataLoss naming the file and what is wrong, with `store` left untouched.
[[nodiscard]] absl::Status LoadSnapshot(const std::string& path, MemoryStore& store,
                                        SnapshotStats* stats = nullptr);

// CRC-32 (IEEE 802.3, as zlib) of `data`.
[[nodiscard]] uint32_t Crc32(std::string_view data);

}  // namespace sluice

#endif  // SLUICE_STORE_MEMORY_SNAPSHOT_H_
