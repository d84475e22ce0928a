// Delivers alert events from an OutboxSource to every sink (docs/alerts.md), on its own threads.
//
// Threads: one coordinator thread owns the source (Fetch, Claim, Renew, Ack, Stats) and all
// bookkeeping; `workers` threads call Sink::Deliver. Request threads never call into here; the
// only methods meant for other threads are Wake(), Pending(), DeadLetters(), DisabledSinks(),
// acked(), RequestStop() and Stop() (all thread-safe).
//
// Per event the dispatcher tracks every sink separately: a sink that is done with the event (it
// delivered it, skipped it, refused it for good, gave up, or is disabled) is never called for it
// again, while another sink keeps retrying. The event is acked — removed from the outbox — only
// when every sink is done with it. Delivery is at-least-once: after a crash, a reload or a lost
// lease the whole event is delivered again to every sink, under the same stable id.
//
// Retries: after a kRetry the next attempt of that sink waits NextRetryDelay() (alerts/retry.h:
// exponential backoff from alerts.retry.first_delay up to max_delay with full jitter, at least the
// receiver's Retry-After). kPermanent, or kRetry on attempt alerts.retry.max_attempts, moves the
// (event, sink) pair to the dead-letter list. kGone disables the sink for every event until the
// dispatcher is rebuilt (a reload); events still owed to it count as done.
//
// Bounds: at most `max_events_in_flight` events are held (fetched, not yet acked), at most
// `workers` sink calls run at once and at most `max_calls_per_sink` of them for any one sink, so a
// hung or slow sink (each call blocks for at most the sink's timeout) cannot take every worker and
// stall the other sinks. Due attempts are started oldest event first.
//
// Time: every deadline is computed from the injected Clock. The coordinator sleeps until the
// earliest deadline, at most `poll_interval` (which is also how often an empty outbox is polled);
// Wake() makes it look again at once (tests call it after advancing a FakeClock).
#ifndef SLUICE_ALERTS_DISPATCHER_H_
#define SLUICE_ALERTS_DISPATCHER_H_

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/random/bit_gen_ref.h"
#include "absl/random/random.h"
#include "absl/time/time.h"
#include "sluice/alerts/dead_letters.h"
#include "sluice/alerts/sink.h"
#include "sluice/common/clock.h"
#include "sluice/common/log.h"
#include "sluice/config/config.h"
#include "sluice/limiter/outbox_source.h"
#include "sluice/metrics/metrics.h"

namespace sluice::alerts {

struct DispatcherOptions {
  config::RetryConfig retry;
  int workers = 4;
  int max_calls_per_sink = 2;  // capped to `workers`
  size_t max_events_in_flight = 256;
  size_t fetch_batch = 64;
  absl::Duration poll_interval = absl::Milliseconds(200);
  absl::Duration stats_interval = absl::Seconds(5);
  // An event handed out more often than this (its holders kept dying before finishing it: a
  // poison event, or a crash loop) is dead-lettered for every sink still owed it and acked.
  int64_t max_deliveries = 20;
  // The subject's own address and webhook (from the key registry); null: nobody has one. Called on
  // the coordinator thread once per event; must be thread-safe with respect to reloads.
  std::function<Contact(std::string_view subject)> contacts;
  // Not owned; null: the dispatcher keeps its own list (lost when it is destroyed).
  DeadLetterList* dead_letters = nullptr;
  // Not owned; null: metrics are kept but not exported. Families (labels in braces):
  //   sluice_alert_events_fetched_total, sluice_alert_events_acked_total,
  //   sluice_alert_deliveries_total{sink,outcome}  outcome: delivered skipped retry permanent gone
  //                                                         dead disabled abandoned
  //   sluice_alert_source_errors_total, sluice_alert_dead_letters, sluice_alert_events_in_flight,
  //   sluice_alert_outbox_depth, sluice_alert_outbox_oldest_age_seconds,
  //   sluice_alert_sink_duration_seconds{sink}  (histogram: each sink call, by the Clock)
  metrics::Registry* metrics = nullptr;
  // Not owned; null: a per-dispatcher absl::BitGen. Used only on the coordinator thread.
  std::optional<absl::BitGenRef> random;
};

// One (event, sink) pair still owed a delivery; for tests and an admin view.
struct PendingDelivery {
  std::string event_id;
  std::string sink;
  int attempts = 0;         // calls made so far
  absl::Time next_attempt;  // when the next call is due
  bool in_flight = false;   // a call is running now
};

class Dispatcher {
 public:
  // `source`, `sinks` and `clock` must outlive the dispatcher. The source is used only on the
  // coordinator thread (see outbox_source.h). Does not start any thread.
  Dispatcher(OutboxSource* source, std::vector<Sink*> sinks, const Clock* clock,
             DispatcherOptions options);
  // Stops (see Stop()).
  ~Dispatcher();
  Dispatcher(const Dispatcher&) = delete;
  Dispatcher& operator=(const Dispatcher&) = delete;

  // Starts the coordinator and worker threads. Call at most once.
  void Start();

  // Starts no new sink call, waits for the calls in progress (each bounded by its sink's
  // timeout), acks the events that those calls completed, and joins every thread. Events that are
  // not done are left in the outbox unacked, to be delivered again. Idempotent.
  void Stop();
  // The first half of Stop(): from now on no sink call starts. Does not wait. (A server stopping
  // several components calls this on each first, then Stop().)
  void RequestStop();

  // Makes the coordinator re-read the clock and fetch from the outbox now (e.g. after a store
  // recorded an event, or in tests after advancing a FakeClock).
  void Wake();

  // Deliveries still owed, oldest event first.
  [[nodiscard]] std::vector<PendingDelivery> Pending() const;
  // The dead-letter list (the one passed in options, or the dispatcher's own), oldest first.
  [[nodiscard]] std::vector<DeadLetter> DeadLetters() const;
  // Names of sinks disabled by a kGone outcome.
  [[nodiscard]] std::vector<std::string> DisabledSinks() const;
  // Events acked since Start().
  [[nodiscard]] uint64_t acked() const;

 private:
  struct SinkState;
  struct Tracked;
  struct Task;
  struct Result;
  struct Metrics;
  struct Schedule;
  struct Cycle;

  // The coordinator's loop, one cycle per turn: under mu_, take the workers' results and plan
  // what to ask the source; without it, ask (ack, claim, fetch, renew, stats); under mu_ again,
  // apply the answers, start the due calls and wait for more work.
  void CoordinatorLoop();
  void WorkerLoop();
  // The coordinator's phases, in cycle order (coordinator thread only). Those named ...Locked run
  // with mu_ held; the others call the source, which may block, and run without it.
  //
  // mu_ held. Handles Wake() (fetch now), applies the results of finished calls at `now`, and
  // when stopping puts the queued calls back.
  void TakeResultsLocked(absl::Time now, Schedule& schedule);
  // mu_ held. What to ask the source this cycle: the events to ack and, unless stopping, whether
  // to fetch, claim, renew (and what) and read the stats. Drops abandoned events no call holds.
  [[nodiscard]] Cycle PlanCycleLocked(absl::Time now, const Schedule& schedule);
  // mu_ not held. Acks the cycle's done events.
  void AckAll(Cycle& cycle);
  // mu_ not held. Claims, then fetches, new events (looking up their contacts) and renews the
  // held ones; sets when each is next due.
  void FetchClaimRenew(Cycle& cycle, Schedule& schedule);
  // mu_ not held. The outbox's depth and its oldest event's age, into the gauges.
  void RefreshStats(const Cycle& cycle, Schedule& schedule);
  // mu_ held. Forgets acked events, retries failed acks later (forgets them when stopping), and
  // abandons the events whose lease another consumer took.
  void ApplyOutcomesLocked(const Cycle& cycle, absl::Time now);
  // mu_ held. The debug line of a cycle that moved something.
  void LogCycleLocked(const Cycle& cycle) const;
  // mu_ held through `lock` (released while waiting). Sleeps until the earliest deadline (at most
  // poll_interval), a result, Wake() or Stop(); returns at once if one of those is already there.
  void WaitForWorkLocked(std::unique_lock<std::mutex>& lock, absl::Time now,
                         const Schedule& schedule);

  // Each REQUIRES mu_ held.
  void TrackLocked(std::vector<std::pair<OutboxItem, Contact>> items, absl::Time now);
  void ApplyLocked(Result result, absl::Time now);
  // The debug line of a finished sink call; `next_retry` when another attempt is scheduled.
  void LogAttempt(const Tracked& t, const Result& r,
                  std::optional<absl::Duration> next_retry) const;
  void FinishLocked(Tracked& t, size_t sink, std::string_view outcome);
  void DeadLetterLocked(Tracked& t, size_t sink, std::string reason, absl::Time now);
  void DisableSinkLocked(size_t sink);
  void StartDueLocked(absl::Time now);
  [[nodiscard]] absl::Time NextDueLocked() const;
  void Count(size_t sink, std::string_view outcome);

  OutboxSource* const source_;
  const std::vector<Sink*> sinks_;
  const Clock* const clock_;
  const DispatcherOptions options_;
  std::unique_ptr<DeadLetterList> own_dead_letters_;
  DeadLetterList* const dead_letters_;
  std::unique_ptr<metrics::Registry> own_registry_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<absl::BitGen> own_random_;
  absl::BitGenRef random_;

  // std::mutex rather than absl::Mutex: Debian's abseil is not built for ThreadSanitizer, which
  // then reports races that are not there.
  mutable std::mutex mu_;
  // By sink, set in the constructor: each sink call's duration.
  std::vector<metrics::Histogram*> sink_seconds_;
  std::condition_variable coordinator_cv_;  // results, Wake(), Stop()
  std::condition_variable worker_cv_;       // tasks, Stop()
  bool started_ = false;                    // guarded by mu_
  bool wakeup_registered_ = false;          // the source calls Wake(); guarded by mu_
  bool stopping_ = false;                   // guarded by mu_
  bool woken_ = false;                      // guarded by mu_
  uint64_t next_key_ = 1;                   // guarded by mu_
  std::map<uint64_t, Tracked> tracked_;     // guarded by mu_; by fetch order
  std::deque<Task> tasks_;                  // guarded by mu_; at most `workers` long
  std::deque<Result> results_;              // guarded by mu_
  int running_ = 0;                         // guarded by mu_; tasks queued or being called
  std::vector<int> running_per_sink_;       // guarded by mu_
  std::vector<bool> disabled_;              // guarded by mu_
  uint64_t acked_ = 0;                      // guarded by mu_
  // The outbox's failures, each logged at most once a minute (a store or a cluster node that stays
  // down fails every poll); coordinator thread only.
  LogEvery read_failures_, ack_failures_, renew_failures_;

  std::thread coordinator_;
  std::vector<std::thread> workers_;
};

}  // namespace sluice::alerts

#endif  // SLUICE_ALERTS_DISPATCHER_H_
