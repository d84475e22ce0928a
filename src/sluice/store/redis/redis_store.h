// The Redis store: docs/semantics.md on a shared Redis, one round trip (one EVALSHA of decide.lua)
// per decision. Keys and the script's contract: docs/redis.md and decide.lua's header.
//
// Each io_context thread has its own CommandSender (a Connection, or a ClusterClient on Redis
// Cluster); the store asks `connection_for_thread` for the calling thread's, so a callback always
// runs on the thread that made the call (after the reply arrives; never inside the call).
#ifndef SLUICE_STORE_REDIS_REDIS_STORE_H_
#define SLUICE_STORE_REDIS_REDIS_STORE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/time/time.h"
#include "absl/types/span.h"
#include "sluice/common/clock.h"
#include "sluice/limiter/store.h"
#include "sluice/store/redis/command_sender.h"
#include "sluice/store/redis/connection.h"
#include "sluice/store/redis/lua_script.h"

namespace sluice::redis {

// The commands RedisStore sends, as its round-trip observer names them.
enum class RedisCommandKind : uint8_t { kDecide, kRefund, kUsage, kReset, kReservation };
inline constexpr int kRedisCommandKinds = 5;
// "decide", "refund", "usage", "reset", "reservation" (reserve, settle, release, expire, extend,
// and the due reservations' reads).
[[nodiscard]] std::string_view RedisCommandKindName(RedisCommandKind kind);

struct RedisStoreOptions {
  std::string key_prefix = "sl";
  // Subjects are spread over this many hash tags (and outbox streams). Fixed at deployment:
  // changing it moves every subject's keys.
  int buckets = 64;
  // The counters of one bucket, limit and window are spread over this many hashes (fields: the
  // subjects), so that each stays a small listpack: a few bytes per subject instead of a key's
  // hundred-odd (docs/redis.md). Fixed at deployment like `buckets`: changing it moves every
  // subject's counters.
  int counter_slots = 256;
  int64_t outbox_max = 100'000;              // per bucket; a full outbox refuses and re-arms
  absl::Duration grace = absl::Seconds(60);  // keys live this long past their window's end
  // Redis's clock (the Redis-synced clock, store/redis/clock_sync.h). Expiry instants are
  // `redis_clock.Now() + (window end + grace - request now)`: with the Redis-synced clock as the
  // limiter's clock (production) that is exactly window end + grace; a test may drive the limiter
  // with a fake clock while Redis keeps real time.
  const Clock* redis_clock = nullptr;
  // The longest the caller waits for a decision (the connection's max_wait,
  // store.redis.max_wait); zero: no deadline. The script's deadline is
  //   redis_clock.Now() + decision_deadline - min(clock_error, decision_deadline / 4)
  // taken before the command is queued, so it falls no later than the instant the connection
  // gives up on it at the latest as long as the synced clock is off by at most `clock_error` (its
  // error is half the round trip of its last sample). A decision that starts executing after it
  // changes nothing and is answered as degraded ("late"). The rest — executed in time, but the
  // connection had given up on it already (Redis stalled: ConnectionOptions::command_timeout), or
  // the clock was off by more — is refunded when its reply arrives: see `refunds()`.
  absl::Duration decision_deadline = absl::ZeroDuration();
  absl::Duration clock_error = absl::Milliseconds(1);
  // When set (production: the Redis-synced clock, which is also `redis_clock`), `clock_error`
  // applies once it has measured Redis's clock; before, the deadline is
  // now + decision_deadline + `unsynced_allowance` instead (the host's clock may be off by much
  // more than a round trip until then, and a deadline already past would fail every decision).
  const OffsetClock* sync_state = nullptr;
  absl::Duration unsynced_allowance = absl::Seconds(1);
  // Called with the round trip of each command the store sends, from the call that queues it to
  // its reply (a decision's NOSCRIPT reload included), on the thread that runs the callback;
  // commands without a reply (timed out, connection lost) are not observed. Null: nothing is
  // measured. It lets the server feed a histogram without this module depending on metrics/.
  std::function<void(RedisCommandKind, absl::Duration)> observe_round_trip;
};

class RedisStore final : public Store {
 public:
  // `connection_for_thread` returns the calling thread's connection (never null).
  RedisStore(std::function<CommandSender*()> connection_for_thread, RedisStoreOptions options);

  void Decide(const StoreRequest& req, DecideCallback done) override;
  // One EVALSHA of decide.lua for the whole group; every key carries the hash tag of `req.group`
  // (of the first part's subject when empty), so the call is valid on Redis Cluster.
  void DecideGroup(const StoreGroupRequest& req, GroupDecideCallback done) override;
  void Usage(const StoreRequest& req, UsageCallback done) override;
  void Reset(const StoreRequest& req, std::optional<size_t> limit_index,
             StatusCallback done) override;

  // Reservations: one call of reservation.lua each (decide.lua run inside it), in the subject's
  // bucket. A reservation's record, its bucket's due set and the subject's hold hash
  // (docs/redis.md) all expire: the record kReservationMemory after its expires_at, the hold hash
  // `grace` after the latest expires_at of its reservations.
  void Reserve(const StoreReserveRequest& req, DecideCallback done) override;
  void Settle(const StoreSettleRequest& req, SettleCallback done) override;
  void Extend(std::string_view subject, std::string_view id, absl::Time expires_at, absl::Time now,
              ExtendCallback done) override;
  // One ZRANGEBYSCORE per bucket's due set, pipelined (on a Cluster each goes to its node); up to
  // `max` in all.
  void DueReservations(absl::Time now, size_t max, DueCallback done) override;

  // Key layout (docs/redis.md). BucketOf and Tag take where the keys live: the subject, or the
  // group of a group-placed subject (StoreRequest::group), which CounterKey and FlagsKey follow.
  [[nodiscard]] int BucketOf(std::string_view subject) const;
  [[nodiscard]] std::string Tag(std::string_view subject) const;
  // The hash holding limit i's counter of req.subject (field: the subject).
  [[nodiscard]] std::string CounterKey(const StoreRequest& req, size_t i) const;
  // Which of its bucket's counter hashes holds the subject's counters (0..counter_slots-1).
  [[nodiscard]] int SlotOf(std::string_view subject) const;
  [[nodiscard]] std::string FlagsKey(const StoreRequest& req, size_t i) const;
  // The key of limit i's state (CounterKey's) `delta` windows later (a gcra limit: periods of
  // two windows), which decide.lua also reads for a sliding or gcra limit.
  [[nodiscard]] std::string BesideKey(const StoreRequest& req, size_t i, int delta) const;
  [[nodiscard]] std::string OutboxKey(int bucket) const;
  // What the open reservations of `req.subject` hold (decide.lua's hold hash).
  [[nodiscard]] std::string HoldKey(const StoreRequest& req) const;
  // Reservation `id`'s record (its random part names it), in the bucket of `placement`.
  [[nodiscard]] std::string ReservationKey(std::string_view placement, std::string_view id) const;
  // The open reservations of a bucket, by expiry.
  [[nodiscard]] std::string DueKey(int bucket) const;
  // Alert events the script recorded in the outbox streams, and thresholds it could not record
  // because a stream was full (they stay armed), as reported by this process's decisions.
  [[nodiscard]] uint64_t events_recorded() const {
    return recorded_.load(std::memory_order_relaxed);
  }
  [[nodiscard]] uint64_t events_refused() const { return refused_.load(std::memory_order_relaxed); }
  // Admissions whose reply arrived after their command had timed out (the caller had answered
  // degraded), and of those the ones taken back by refund.lua; the difference (a refund that
  // failed or timed out) may remain charged. An admission whose connection is lost before its
  // reply arrives cannot be seen, so it is in neither count (docs/redis.md).
  [[nodiscard]] uint64_t late_admissions() const {
    return late_admissions_.load(std::memory_order_relaxed);
  }
  [[nodiscard]] uint64_t refunds() const { return refunds_.load(std::memory_order_relaxed); }
  // Grows when a refund's outcome is known (answered, failed, or its late reply): from then on a
  // decision sent afterwards executes after the refund, if it executed at all.
  [[nodiscard]] uint64_t shrinks() const override {
    return shrinks_.load(std::memory_order_acquire);
  }
  // SHA-1 (hex) of decide.lua, for EVALSHA.
  [[nodiscard]] const std::string& script_sha() const { return decide_.sha(); }

 private:
  struct AlgorithmFields;
  static void ReadAlgorithm(const AlgorithmFields& fields, LimitUsage& out);
  // How decide.lua's arguments are written.
  struct DecideArgs {
    // "" for a decision; a reservation's estimate (reserve).
    std::string hold;
    // A settle's charge: every limit shadow (never denied), no deadline.
    bool charge = false;
  };
  // The EVALSHA of decide.lua deciding `parts` together, with the keys of `placement`'s bucket.
  std::vector<std::string> DecideCommand(absl::Span<const StoreRequest> parts,
                                         std::string_view placement) const;
  // decide.lua's keys and arguments for `parts`, appended to `argv` (DecideCommand's, and
  // reservation.lua's after its own).
  void AppendDecideKeys(absl::Span<const StoreRequest> parts, std::string_view placement,
                        std::vector<std::string>& argv) const;
  void AppendDecideArgs(absl::Span<const StoreRequest> parts, const DecideArgs& how,
                        std::vector<std::string>& argv) const;
  // Unix seconds on Redis's clock of instant `at` of the limiter's clock, whose now is `now`
  // (rounded up), for EXPIREAT.
  [[nodiscard]] int64_t RedisSeconds(absl::Time at, absl::Time now) const;
  // Adds the events decide.lua recorded and refused (its reply's elements from `at` on, for `n`
  // limits) to events_recorded() and events_refused().
  void CountEvents(const Reply& reply, size_t at, size_t n);
  // Runs reservation.lua's `argv` and passes its reply (or the failure) to `done`.
  // `late` (may be null) sees a reply that came after the command timed out.
  void RunReservation(std::vector<std::string> argv,
                      absl::AnyInvocable<void(absl::StatusOr<Reply>) &&> done,
                      CommandSender::LateCallback late = nullptr);
  // reservation.lua's call ending reservation `id` of d.subject as `end` says (a settle charges
  // d.cost to d.plan's counting limits).
  [[nodiscard]] std::vector<std::string> EndCommand(const StoreRequest& d, std::string_view id,
                                                    ReservationEnd end) const;
  // Decide and DecideGroup: one script call for `parts` (a single decision is one part).
  void DecideParts(absl::Span<const StoreRequest> parts, std::string_view placement,
                   GroupDecideCallback done);
  // A start time for Observed (none without an observer: no clock is read).
  [[nodiscard]] absl::Time StartTimer() const;
  // Reports the round trip of a command of `kind` started at `start` (from StartTimer).
  void Observed(RedisCommandKind kind, absl::Time start) const;
  // The late reply `reply` of the decision `decide` (its EVALSHA; `n` limits in all): if it
  // admitted, sends its refunds (one refund.lua per part of cost > 0) on `conn`.
  void OnLateDecision(CommandSender* conn, const Reply& reply, size_t n,
                      const std::vector<std::string>& decide);

  std::function<CommandSender*()> connection_for_thread_;
  RedisStoreOptions options_;
  LuaScript decide_;       // decide.lua
  LuaScript refund_;       // refund.lua
  LuaScript reset_;        // reset.lua
  LuaScript reservation_;  // reservation.lua (with decide.lua)
  std::atomic<uint64_t> recorded_{0};
  std::atomic<uint64_t> refused_{0};
  std::atomic<uint64_t> late_admissions_{0};
  std::atomic<uint64_t> refunds_{0};
  std::atomic<uint64_t> shrinks_{0};
};

}  // namespace sluice::redis

#endif  // SLUICE_STORE_REDIS_REDIS_STORE_H_
