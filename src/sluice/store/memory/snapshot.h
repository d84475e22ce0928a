// Snapshot files of the memory store: counters, alert flags and undelivered alert events.
//
// A snapshot is written to a temporary file in the same directory, fsync'ed, renamed over the old
// one and the directory fsync'ed, so a crash leaves either the old or the new snapshot, never a
// mix. The file carries a magic, a format version, its payload length and a CRC-32 of the payload;
// a torn, truncated or corrupted file is reported as DataLoss and nothing from it is loaded.
//
// Version 4 adds the reservations the store remembers (docs/semantics.md, Reservations): open
// ones, with what they hold, and ended ones (for answering a repeated settle); what open ones hold
// is recomputed from them when loaded.
//
// Version 3 holds one record per subject (usage follows the subject from plan to plan), with the
// quotas its fired bits belong to and the bits it fired under other quotas. Older files (one record
// per plan and subject) are still read: a subject's records are merged by keeping the one with the
// larger counters (the sum of its counters: an upgrade never under-counts a subject), or on a tie
// the later expiry; the other counts in SnapshotStats::dropped_subjects. Their counters, tagged by
// limit name alone, are matched with the limit of that name by the first plan that meets them.
//
// A checksum only proves the file is what was written, not that a correct sluice wrote it (it may
// have been crafted, or written by a buggy version). So every record is also checked for values
// no decision could have produced — a counter outside [0, kMaxUsed], an invalid subject, an
// expiry beyond any window, an alert layout that is not a sorted list of percentages in 1..100,
// an event with an impossible field or an out-of-order number. Such a record is dropped (it
// cannot be repaired: its numbers mean nothing) and counted in SnapshotStats, and the rest of the
// file is loaded, so one bad record does not cost every other subject its usage. A file whose
// structure is wrong (counts that do not match the data, lengths past its end) is refused as
// DataLoss. The loader allocates at most a small multiple of the file's size and runs in time
// linear in it, whatever the counts and lengths in the file say.
#ifndef SLUICE_STORE_MEMORY_SNAPSHOT_H_
#define SLUICE_STORE_MEMORY_SNAPSHOT_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "sluice/store/memory/memory_store.h"

namespace sluice {
inline namespace memory {

struct SnapshotStats {
  size_t subjects = 0;      // loaded (saved, for SaveSnapshot)
  size_t events = 0;        // loaded (saved, for SaveSnapshot)
  size_t reservations = 0;  // loaded (saved, for SaveSnapshot)
  size_t bytes = 0;
  // LoadSnapshot: records of the file that were dropped because they held impossible values
  // (see above); a subject appearing twice counts once here too (version 3: the last one is
  // kept; older versions: see the merge above).
  size_t dropped_subjects = 0;
  size_t dropped_events = 0;
  size_t dropped_reservations = 0;
};

struct SnapshotLoadOptions {
  // When set, an entry due to expire later than `now` plus the longest possible window (a
  // 366-day `year`) plus two days is dropped: no decision sets an expiry that far away, and it
  // would keep the entry from being swept for longer than any window lasts. InfinitePast:
  // expiries are not checked against a clock.
  absl::Time now = absl::InfinitePast();
};

// Writes `store` to `path` atomically. Safe to call while the store serves decisions.
[[nodiscard]] absl::Status SaveSnapshot(const MemoryStore& store, const std::string& path,
                                        SnapshotStats* stats = nullptr);

// Loads `path` into `store` (replacing its entries and outbox). A missing file is NotFound; a
// damaged one is DataLoss naming the file and what is wrong, with `store` left untouched.
[[nodiscard]] absl::Status LoadSnapshot(const std::string& path, MemoryStore& store,
                                        SnapshotStats* stats = nullptr,
                                        SnapshotLoadOptions options = {});

// CRC-32 (IEEE 802.3, as zlib) of `data`.
[[nodiscard]] uint32_t Crc32(std::string_view data);

}  // namespace memory
}  // namespace sluice

#endif  // SLUICE_STORE_MEMORY_SNAPSHOT_H_
