// Keeps an OffsetClock equal to the Redis server's clock (docs/semantics.md: with Redis, the Redis
// server's clock decides windows). Every `interval` it sends TIME over a CommandSender (on a
// cluster: to any master — the nodes of one cluster keep their clocks as their hosts do) and sets
//   offset = redis_time - (local_before + local_after) / 2,
// taking the midpoint of the round trip as the instant Redis read its clock (error <= RTT / 2). A
// sample whose round trip exceeds `max_rtt` is discarded (the estimate would be poor); until the
// first good sample the clock is unsynced and retried every `retry` instead.
//
// Not thread-safe: Start, Stop and the destructor run on the connection's io_context thread.
#ifndef SLUICE_STORE_REDIS_CLOCK_SYNC_H_
#define SLUICE_STORE_REDIS_CLOCK_SYNC_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include <boost/asio/io_context.hpp>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "sluice/common/clock.h"
#include "sluice/store/redis/command_sender.h"
#include "sluice/store/redis/resp.h"

namespace sluice::redis {

struct ClockSyncOptions {
  absl::Duration interval = absl::Seconds(30);
  absl::Duration retry = absl::Milliseconds(10);
  absl::Duration max_rtt = absl::Milliseconds(50);
  // Called once, on the io_context thread, after the first good sample (Redis answered: the server
  // waits for it before announcing that it has started). May be null.
  std::function<void()> on_first_sample;
};

// Redis's TIME reply (seconds, microseconds) as an absl::Time.
[[nodiscard]] absl::StatusOr<absl::Time> ParseTimeReply(const Reply& reply);

class ClockSync {
 public:
  // `local` is the clock `target` shifts (its base); all must outlive this object.
  ClockSync(boost::asio::io_context& io, CommandSender* connection, const Clock* local,
            OffsetClock* target, ClockSyncOptions options);
  ~ClockSync();
  ClockSync(const ClockSync&) = delete;
  ClockSync& operator=(const ClockSync&) = delete;

  void Start();
  void Stop();

  // Good samples taken so far.
  [[nodiscard]] uint64_t samples() const;

 private:
  class Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace sluice::redis

#endif  // SLUICE_STORE_REDIS_CLOCK_SYNC_H_
