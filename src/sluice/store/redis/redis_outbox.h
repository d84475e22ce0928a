// The Redis outbox reader: alert events that decide.lua XADDed to the per-bucket streams
// <prefix>:{0}:outbox … <prefix>:{B-1}:outbox (docs/redis.md), read through a consumer group so
// that several sluice instances share the work and a crashed one's events are taken over.
//
// Protocol (Redis >= 7.0):
//   - Setup: XGROUP CREATE <stream> <group> 0 MKSTREAM on every bucket, BUSYGROUP ignored. Id 0,
//     not $: events recorded before the first dispatcher ever ran are delivered too. Redone when a
//     command answers NOGROUP (Redis restarted empty, or the stream was deleted).
//   - Fetch: one XREADGROUP GROUP <group> <consumer> COUNT c STREAMS <streams…> > > … naming
//     several streams. COUNT applies per stream, so with max < B it names `max` streams (rotating,
//     COUNT 1), else all B streams with COUNT max/B: never more than `max` entries.
//     The first Fetch of a new RedisOutbox first re-reads this consumer's own pending entries
//     (XREADGROUP … 0): with the consumer name kept across a reload, what the previous dispatcher
//     held is resumed at once instead of after a lease.
//   - Ack: XACK then XDEL. decide.lua bounds a stream by refusing new events at outbox_max, so a
//     delivered entry must be deleted, not just acknowledged (XLEN = undelivered events).
//   - Lease, renew and claim: an entry pending for a consumer is "held" by it. The holder renews
//     its held entries (outbox_renew.lua: per entry, if XPENDING still names the caller then
//     XCLAIM <id> to itself with JUSTID, which resets the idle time without counting a delivery).
//     The dispatcher renews every lease/3. Claim runs XAUTOCLAIM <group> <consumer>
//     <claim_min_idle> over the buckets (a cursor per bucket), so only entries idle for a whole
//     lease — their holder crashed or stalled for that long — change hands. Because renewal is
//     conditional, a holder that stalled past the lease learns from Renew() that it lost the entry
//     (and stops) instead of stealing it back. XAUTOCLAIM increments the delivery counter; the
//     counts of claimed entries are read with XPENDING and reported as OutboxItem::deliveries
//     (the dispatcher dead-letters an event handed out too often: a poison event or a crash loop).
//   - Entries that cannot be parsed into an AlertEvent are logged, acked and deleted (they would
//     otherwise occupy the bounded outbox forever) and counted in malformed().
//
// Redis Cluster (`cluster_seeds` set): the bucket streams live in different slots, and one
// XREADGROUP naming them all would be refused (CROSSSLOT), so Fetch sends one XREADGROUP per
// bucket, pipelined; every other command here names one stream. The ClusterClient routes each to
// the master of its stream's slot, following MOVED and ASK, so a bucket is read, acknowledged and
// claimed on whichever node holds it, also while it is being resharded. A bucket whose node is
// down does not hold back the others: Fetch returns what the rest had (and fails only when no
// bucket answered).
//
// Threading: owns a private io_context and Connection, and runs that io_context inside each call
// until the replies arrive (each command bounded by connection.command_timeout). Not thread-safe:
// one caller at a time, the dispatcher's coordinator thread.
#ifndef SLUICE_STORE_REDIS_REDIS_OUTBOX_H_
#define SLUICE_STORE_REDIS_REDIS_OUTBOX_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "sluice/limiter/outbox_source.h"
#include "sluice/store/redis/cluster.h"
#include "sluice/store/redis/command_sender.h"
#include "sluice/store/redis/connection.h"
#include "sluice/store/redis/lua_script.h"
#include "sluice/store/redis/resp.h"

namespace sluice::redis {

struct RedisOutboxOptions {
  // Its command_timeout bounds every command here (the store's 20 ms is too tight for a batch).
  ConnectionOptions connection{.command_timeout = std::chrono::milliseconds(2000)};
  // Redis Cluster's seed nodes (each node's connection a copy of `connection`); empty: the one
  // Redis `connection` names.
  std::vector<NodeAddress> cluster_seeds;
  std::string key_prefix = "sl";  // store.redis.key_prefix
  int buckets = 64;               // RedisStoreOptions::buckets: the same B
  std::string group = "sluice";
  // Unique per process; keep the same name across reloads so that a new RedisOutbox resumes what
  // the previous one held. Empty: DefaultConsumerName().
  std::string consumer;
  // The lease: a held entry not renewed for this long may be claimed by another consumer.
  absl::Duration claim_min_idle = absl::Seconds(60);
};

// <prefix>:{<bucket>}:outbox, as RedisStore::OutboxKey.
[[nodiscard]] std::string OutboxStreamKey(std::string_view prefix, int bucket);

// "<hostname>-<pid>-<8 random hex digits>".
[[nodiscard]] std::string DefaultConsumerName();

class RedisOutbox final : public OutboxSource {
 public:
  explicit RedisOutbox(RedisOutboxOptions options);
  ~RedisOutbox() override;
  RedisOutbox(const RedisOutbox&) = delete;
  RedisOutbox& operator=(const RedisOutbox&) = delete;

  [[nodiscard]] absl::StatusOr<std::vector<OutboxItem>> Fetch(size_t max) override;
  [[nodiscard]] absl::StatusOr<std::vector<OutboxItem>> Claim(size_t max) override;
  [[nodiscard]] absl::Status Ack(const OutboxHandle& handle) override;
  [[nodiscard]] absl::StatusOr<std::vector<OutboxHandle>> Renew(
      std::span<const OutboxHandle> held) override;
  [[nodiscard]] absl::Duration lease() const override { return options_.claim_min_idle; }
  [[nodiscard]] absl::StatusOr<OutboxStats> Stats() override;

  [[nodiscard]] const std::string& consumer() const { return options_.consumer; }
  // Unparsable entries removed since construction.
  [[nodiscard]] uint64_t malformed() const { return malformed_; }

 private:
  using Argv = std::vector<std::string>;

  // Sends `commands` pipelined and runs the io_context until every reply (or error) is in. Until
  // the connection has first been made, waits for it up to the command timeout; once it has been
  // made, a lost connection fails the commands at once (Unavailable) rather than holding the
  // dispatcher — and a reload or stop waiting for it — a timeout per command while Redis is down.
  // With `script`, every command is a run of it (LuaScript::Run).
  std::vector<absl::StatusOr<Reply>> Run(std::vector<Argv> commands,
                                         const LuaScript* script = nullptr);
  absl::StatusOr<Reply> RunOne(Argv command);
  absl::Status EnsureGroups();
  // Turns XREADGROUP/XAUTOCLAIM entries of `bucket` into items; removes malformed and deleted ones.
  absl::Status TakeEntries(int bucket, const Reply& entries, bool read_counts,
                           std::vector<OutboxItem>& out);
  absl::StatusOr<std::vector<OutboxItem>> ReadGroup(std::span<const int> buckets,
                                                    std::span<const std::string> ids, size_t count,
                                                    bool history);
  // NOGROUP: the groups must be created again. Other error replies become Internal.
  absl::Status CheckReply(const absl::StatusOr<Reply>& reply);

  RedisOutboxOptions options_;
  LuaScript renew_;                                  // outbox_renew.lua
  std::vector<std::string> streams_;                 // by bucket
  absl::flat_hash_map<std::string, int> bucket_of_;  // stream key -> bucket
  boost::asio::io_context io_;
  std::unique_ptr<CommandSender> connection_;
  std::vector<bool> group_ready_;  // per bucket: XGROUP CREATE done (or BUSYGROUP)
  // Own pending entries still to re-read, per bucket: the last id seen ("0" at first); nullopt
  // once that bucket's history is exhausted.
  std::vector<std::optional<std::string>> history_;
  size_t next_fetch_bucket_ = 0;
  size_t next_claim_bucket_ = 0;
  std::vector<std::string> claim_cursor_;  // per bucket: XAUTOCLAIM start id
  uint64_t malformed_ = 0;
  bool ever_connected_ = false;  // Run: the connection has been made once
};

}  // namespace sluice::redis

#endif  // SLUICE_STORE_REDIS_REDIS_OUTBOX_H_
