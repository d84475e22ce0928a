#include "sluice/alerts/dispatcher.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "sluice/alerts/retry.h"
#include "sluice/common/log.h"

namespace sluice::alerts {

struct Dispatcher::SinkState {
  enum class Phase { kWaiting, kInFlight, kDone };
  Phase phase = Phase::kWaiting;
  int attempts = 0;
  absl::Time next_attempt;
  std::string last_detail;
};

struct Dispatcher::Tracked {
  OutboxItem item;
  std::string id;  // item.event.Id()
  Contact contact;
  std::vector<SinkState> sinks;
  size_t remaining = 0;                       // sinks not done
  int in_flight = 0;                          // sink calls queued or running
  bool abandoned = false;                     // the lease was lost: finish the calls, never ack
  absl::Time ack_due = absl::InfinitePast();  // when done: next time to try Ack()
};

struct Dispatcher::Task {
  uint64_t key = 0;
  size_t sink = 0;
  int attempt = 0;
  AlertEvent event;
  Contact contact;
};

struct Dispatcher::Result {
  uint64_t key = 0;
  size_t sink = 0;
  int attempt = 0;
  Outcome outcome;
  absl::Duration took;  // the sink call's duration
};

struct Dispatcher::Metrics {
  explicit Metrics(metrics::Registry& r)
      : fetched(r.AddCounter("sluice_alert_events_fetched_total",
                             "Alert events taken from the outbox (claimed ones included).")),
        acked(r.AddCounter("sluice_alert_events_acked_total",
                           "Alert events removed from the outbox after every sink was done.")),
        deliveries(r.AddCounterFamily("sluice_alert_deliveries_total",
                                      "Alert delivery results by sink and outcome.",
                                      {"sink", "outcome"})),
        source_errors(r.AddCounter("sluice_alert_source_errors_total",
                                   "Failed outbox operations (fetch, claim, renew, ack, stats).")),
        dead_letters(
            r.AddGauge("sluice_alert_dead_letters", "Deliveries in the dead-letter list.")),
        dead_letters_dropped(
            r.AddCounter("sluice_alert_dead_letters_dropped_total",
                         "Dead letters pushed out of the bounded list by newer ones.")),
        in_flight(r.AddGauge("sluice_alert_events_in_flight",
                             "Alert events held by the dispatcher, not yet acked.")),
        depth(r.AddGauge("sluice_alert_outbox_depth",
                         "Undelivered alert events in the outbox, held ones included.")),
        oldest_age(r.AddGauge("sluice_alert_outbox_oldest_age_seconds",
                              "Age of the oldest undelivered alert event; 0 when none.")),
        sink_seconds(r.AddHistogramFamily(
            "sluice_alert_sink_duration_seconds",
            "Duration of each delivery attempt (one sink call), by sink, whatever its outcome.",
            {"sink"}, {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30})) {}

  metrics::Counter& fetched;
  metrics::Counter& acked;
  metrics::CounterFamily& deliveries;
  metrics::Counter& source_errors;
  metrics::Gauge& dead_letters;
  metrics::Counter& dead_letters_dropped;
  metrics::Gauge& in_flight;
  metrics::Gauge& depth;
  metrics::Gauge& oldest_age;
  metrics::HistogramFamily& sink_seconds;
};

namespace {

std::string_view OutcomeName(Outcome::Kind kind) {
  switch (kind) {
    case Outcome::Kind::kDelivered:
      return "delivered";
    case Outcome::Kind::kSkipped:
      return "skipped";
    case Outcome::Kind::kRetry:
      return "retry";
    case Outcome::Kind::kPermanent:
      return "permanent";
    case Outcome::Kind::kGone:
      return "gone";
  }
  return "unknown";
}

std::chrono::nanoseconds ToChrono(absl::Duration d) {
  return absl::ToChronoNanoseconds(std::max(d, absl::ZeroDuration()));
}

}  // namespace

Dispatcher::Dispatcher(OutboxSource* source, std::vector<Sink*> sinks, const Clock* clock,
                       DispatcherOptions options)
    : source_(source),
      sinks_(std::move(sinks)),
      clock_(clock),
      options_(std::move(options)),
      own_dead_letters_(options_.dead_letters ? nullptr : std::make_unique<DeadLetterList>()),
      dead_letters_(options_.dead_letters ? options_.dead_letters : own_dead_letters_.get()),
      own_registry_(options_.metrics ? nullptr : std::make_unique<metrics::Registry>()),
      metrics_(std::make_unique<Metrics>(options_.metrics ? *options_.metrics : *own_registry_)),
      own_random_(options_.random ? nullptr : std::make_unique<absl::BitGen>()),
      random_(options_.random ? *options_.random : absl::BitGenRef(*own_random_)),
      running_per_sink_(sinks_.size(), 0),
      disabled_(sinks_.size(), false) {
  for (const Sink* sink : sinks_) {
    sink_seconds_.push_back(&metrics_->sink_seconds.WithLabels({sink->name()}));
  }
}

Dispatcher::~Dispatcher() { Stop(); }

void Dispatcher::Start() {
  {
    std::lock_guard lock(mu_);
    if (started_) return;
    started_ = true;
    const int workers = std::max(1, options_.workers);
    for (int i = 0; i < workers; ++i) workers_.emplace_back([this] { WorkerLoop(); });
    coordinator_ = std::thread([this] { CoordinatorLoop(); });
    wakeup_registered_ = true;
  }
  source_->SetWakeup([this] { Wake(); });
}

void Dispatcher::RequestStop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  coordinator_cv_.notify_all();
  worker_cv_.notify_all();
}

void Dispatcher::Stop() {
  // The wake-up is withdrawn first, without holding mu_: one in progress (it takes mu_) finishes,
  // and none reaches this dispatcher afterwards. Only once, and only if Start() set it: another
  // dispatcher may use the source by now.
  bool registered = false;
  {
    std::lock_guard lock(mu_);
    registered = std::exchange(wakeup_registered_, false);
  }
  if (registered) source_->SetWakeup(nullptr);
  RequestStop();
  if (coordinator_.joinable()) coordinator_.join();
  for (std::thread& w : workers_) {
    if (w.joinable()) w.join();
  }
}

void Dispatcher::Wake() {
  {
    std::lock_guard lock(mu_);
    woken_ = true;
  }
  coordinator_cv_.notify_all();
}

std::vector<PendingDelivery> Dispatcher::Pending() const {
  std::lock_guard lock(mu_);
  std::vector<PendingDelivery> out;
  for (const auto& [key, t] : tracked_) {
    if (t.abandoned) continue;
    for (size_t s = 0; s < t.sinks.size(); ++s) {
      const SinkState& st = t.sinks[s];
      if (st.phase == SinkState::Phase::kDone) continue;
      out.push_back(PendingDelivery{.event_id = t.id,
                                    .sink = sinks_[s]->name(),
                                    .attempts = st.attempts,
                                    .next_attempt = st.next_attempt,
                                    .in_flight = st.phase == SinkState::Phase::kInFlight});
    }
  }
  return out;
}

std::vector<DeadLetter> Dispatcher::DeadLetters() const { return dead_letters_->Snapshot(); }

std::vector<std::string> Dispatcher::DisabledSinks() const {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  for (size_t s = 0; s < sinks_.size(); ++s) {
    if (disabled_[s]) out.push_back(sinks_[s]->name());
  }
  return out;
}

uint64_t Dispatcher::acked() const {
  std::lock_guard lock(mu_);
  return acked_;
}

void Dispatcher::Count(size_t sink, std::string_view outcome) {
  metrics_->deliveries.WithLabels({sinks_[sink]->name(), outcome}).Inc();
}

void Dispatcher::WorkerLoop() {
  std::unique_lock lock(mu_);
  while (true) {
    worker_cv_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
    // Stop() starts no new call; the coordinator puts queued tasks back.
    if (stopping_) return;
    Task task = std::move(tasks_.front());
    tasks_.pop_front();
    lock.unlock();
    const absl::Time start = clock_->Now();
    Outcome outcome = sinks_[task.sink]->Deliver(task.event, task.contact, task.attempt);
    const absl::Duration took = clock_->Now() - start;
    sink_seconds_[task.sink]->Observe(took);
    lock.lock();
    results_.push_back(Result{.key = task.key,
                              .sink = task.sink,
                              .attempt = task.attempt,
                              .outcome = std::move(outcome),
                              .took = took});
    coordinator_cv_.notify_all();
  }
}

// When the coordinator next asks the source for each thing. Coordinator thread only.
struct Dispatcher::Schedule {
  absl::Duration renew_every;  // a third of the lease; infinite without one
  absl::Duration claim_every;  // half the lease; infinite without one
  absl::Time next_fetch;
  absl::Time next_claim;
  absl::Time next_renew;
  absl::Time next_stats;
};

// One turn of the coordinator: what it asks the source (planned under mu_) and what the source
// answered (gathered without it, applied under it again).
struct Dispatcher::Cycle {
  absl::Time now;  // when it was planned: the source's calls are scheduled from it
  bool stopping = false;
  // Asks.
  std::vector<std::pair<uint64_t, OutboxHandle>> to_ack;  // tracked key, handle
  size_t room = 0;  // events that may still be taken before max_events_in_flight
  bool want_fetch = false;
  bool want_claim = false;
  bool want_renew = false;
  bool want_stats = false;
  std::vector<OutboxHandle> held;  // to renew
  // Answers.
  std::vector<uint64_t> acked_keys;
  std::vector<uint64_t> failed_acks;
  std::vector<std::pair<OutboxItem, Contact>> fresh;  // fetched and claimed
  size_t claimed = 0;                                 // of `fresh`
  absl::StatusOr<std::vector<OutboxHandle>> lost = std::vector<OutboxHandle>{};
};

void Dispatcher::CoordinatorLoop() {
  const absl::Duration lease = source_->lease();
  const bool leased = lease != absl::InfiniteDuration();
  const absl::Duration renew_every = leased ? lease / 3 : absl::InfiniteDuration();
  Schedule schedule{.renew_every = renew_every,
                    .claim_every = leased ? lease / 2 : absl::InfiniteDuration(),
                    .next_fetch = absl::InfinitePast(),
                    .next_claim = leased ? absl::InfinitePast() : absl::InfiniteFuture(),
                    .next_renew = clock_->Now() + renew_every,
                    .next_stats = absl::InfinitePast()};

  std::unique_lock lock(mu_);
  while (true) {
    const absl::Time planned = clock_->Now();
    TakeResultsLocked(planned, schedule);
    // Decide what to ask the source, then ask it without holding the lock.
    Cycle cycle = PlanCycleLocked(planned, schedule);
    if (cycle.stopping && running_ == 0 && cycle.to_ack.empty()) break;
    lock.unlock();

    AckAll(cycle);
    FetchClaimRenew(cycle, schedule);
    RefreshStats(cycle, schedule);

    lock.lock();
    const absl::Time now = clock_->Now();
    ApplyOutcomesLocked(cycle, now);
    LogCycleLocked(cycle);
    TrackLocked(std::move(cycle.fresh), now);
    StartDueLocked(now);
    metrics_->in_flight.Set(static_cast<int64_t>(tracked_.size()));
    WaitForWorkLocked(lock, now, schedule);
  }
}

void Dispatcher::TakeResultsLocked(absl::Time now, Schedule& schedule) {
  if (woken_) {
    woken_ = false;
    schedule.next_fetch = absl::InfinitePast();  // Wake(): look at the outbox now
  }
  while (!results_.empty()) {
    Result r = std::move(results_.front());
    results_.pop_front();
    ApplyLocked(std::move(r), now);
  }
  if (stopping_ && !tasks_.empty()) {
    // Queued calls never started: put them back (they are "new calls" Stop() forbids).
    for (Task& task : tasks_) {
      Tracked& t = tracked_.at(task.key);
      SinkState& st = t.sinks[task.sink];
      st.phase = SinkState::Phase::kWaiting;
      --st.attempts;
      --t.in_flight;
      --running_;
      --running_per_sink_[task.sink];
    }
    tasks_.clear();
  }
}

Dispatcher::Cycle Dispatcher::PlanCycleLocked(absl::Time now, const Schedule& schedule) {
  Cycle cycle;
  cycle.now = now;
  cycle.stopping = stopping_;
  for (auto it = tracked_.begin(); it != tracked_.end();) {
    Tracked& t = it->second;
    if (t.in_flight == 0 && t.abandoned) {
      it = tracked_.erase(it);
      continue;
    }
    if (t.in_flight == 0 && t.remaining == 0 && (cycle.stopping || t.ack_due <= cycle.now)) {
      cycle.to_ack.emplace_back(it->first, t.item.handle);
    }
    ++it;
  }
  if (cycle.stopping) return cycle;  // nothing is fetched, claimed, renewed or counted

  cycle.room = options_.max_events_in_flight > tracked_.size()
                   ? options_.max_events_in_flight - tracked_.size()
                   : 0;
  cycle.want_fetch = cycle.room > 0 && cycle.now >= schedule.next_fetch;
  cycle.want_claim = cycle.room > 0 && cycle.now >= schedule.next_claim;
  cycle.want_renew = cycle.now >= schedule.next_renew;
  if (cycle.want_renew) {
    for (const auto& [key, t] : tracked_) {
      if (!t.abandoned) cycle.held.push_back(t.item.handle);
    }
  }
  cycle.want_stats = cycle.now >= schedule.next_stats;
  return cycle;
}
void Dispatcher::AckAll(Cycle& cycle) {
  for (const auto& [key, handle] : cycle.to_ack) {
    const absl::Status st = source_->Ack(handle);
    if (st.ok()) {
      cycle.acked_keys.push_back(key);
    } else {
      metrics_->source_errors.Inc();
      if (uint64_t held_back = 0; ack_failures_.Allow(&held_back)) {
        Log(LogLevel::kWarn, "alert outbox ack failed")
            .Str("handle", handle.id)
            .Error(st)
            .Int("failures_not_logged", static_cast<int64_t>(held_back));
      }
      cycle.failed_acks.push_back(key);
    }
  }
}

void Dispatcher::FetchClaimRenew(Cycle& cycle, Schedule& schedule) {
  const absl::Time now = cycle.now;
  std::vector<std::pair<OutboxItem, Contact>>& fresh = cycle.fresh;
  auto take = [&](absl::StatusOr<std::vector<OutboxItem>> items, std::string_view what) {
    if (!items.ok()) {
      metrics_->source_errors.Inc();
      if (uint64_t held_back = 0; read_failures_.Allow(&held_back)) {
        Log(LogLevel::kWarn, "alert outbox read failed")
            .Str("op", what)
            .Error(items.status())
            .Int("failures_not_logged", static_cast<int64_t>(held_back));
      }
      return false;
    }
    for (OutboxItem& item : *items) {
      Contact contact = options_.contacts ? options_.contacts(item.event.subject) : Contact{};
      fresh.emplace_back(std::move(item), std::move(contact));
    }
    return true;
  };
  if (cycle.want_claim) {
    const size_t before = fresh.size();
    const size_t ask = std::min(cycle.room, options_.fetch_batch);
    const bool ok = take(source_->Claim(ask), "claim");
    cycle.claimed = fresh.size() - before;
    // A full batch: there may be more abandoned entries, look again at once.
    schedule.next_claim = ok && fresh.size() - before == ask ? now : now + schedule.claim_every;
  }
  if (cycle.want_fetch && fresh.size() < cycle.room) {
    const size_t before = fresh.size();
    const size_t ask = std::min(cycle.room - fresh.size(), options_.fetch_batch);
    const bool ok = take(source_->Fetch(ask), "fetch");
    schedule.next_fetch = ok && fresh.size() - before == ask ? now : now + options_.poll_interval;
  }
  if (cycle.want_renew) {
    if (!cycle.held.empty()) cycle.lost = source_->Renew(cycle.held);
    if (cycle.lost.ok()) {
      schedule.next_renew = now + schedule.renew_every;
    } else {
      metrics_->source_errors.Inc();
      if (uint64_t held_back = 0; renew_failures_.Allow(&held_back)) {
        Log(LogLevel::kWarn, "alert outbox renew failed")
            .Error(cycle.lost.status())
            .Int("failures_not_logged", static_cast<int64_t>(held_back));
      }
      schedule.next_renew = now + options_.poll_interval;
    }
  }
}

void Dispatcher::RefreshStats(const Cycle& cycle, Schedule& schedule) {
  if (!cycle.want_stats) return;
  absl::StatusOr<OutboxStats> stats = source_->Stats();
  if (stats.ok()) {
    metrics_->depth.Set(stats->depth);
    metrics_->oldest_age.Set(
        stats->oldest_event
            ? std::max<int64_t>(0, absl::ToInt64Seconds(cycle.now - *stats->oldest_event))
            : 0);
  } else {
    metrics_->source_errors.Inc();
  }
  schedule.next_stats = cycle.now + options_.stats_interval;
}

void Dispatcher::ApplyOutcomesLocked(const Cycle& cycle, absl::Time now) {
  for (uint64_t key : cycle.acked_keys) {
    tracked_.erase(key);
    ++acked_;
    metrics_->acked.Inc();
  }
  for (uint64_t key : cycle.failed_acks) {
    if (cycle.stopping) {
      tracked_.erase(key);  // left in the outbox: delivered again later, at-least-once
    } else {
      tracked_.at(key).ack_due = now + options_.poll_interval;
    }
  }
  if (!cycle.lost.ok()) return;
  for (const OutboxHandle& h : *cycle.lost) {
    for (auto& [key, t] : tracked_) {
      if (t.abandoned || !(t.item.handle == h)) continue;
      t.abandoned = true;
      for (size_t s = 0; s < t.sinks.size(); ++s) {
        if (t.sinks[s].phase == SinkState::Phase::kWaiting) {
          t.sinks[s].phase = SinkState::Phase::kDone;
          Count(s, "abandoned");
        }
      }
      Log(LogLevel::kWarn, "alert event taken over by another consumer")
          .Str("event", t.id)
          .Str("handle", h.id);
    }
  }
}

void Dispatcher::LogCycleLocked(const Cycle& cycle) const {
  // A cycle that moved something (never an idle poll, which would flood the log).
  if ((cycle.fresh.empty() && cycle.to_ack.empty()) || !LogEnabled(LogLevel::kDebug)) return;
  Log(LogLevel::kDebug, "alert dispatch cycle")
      .Int("fetched", static_cast<int64_t>(cycle.fresh.size() - cycle.claimed))
      .Int("claimed", static_cast<int64_t>(cycle.claimed))
      .Int("acked", static_cast<int64_t>(cycle.acked_keys.size()))
      .Int("ack_failed", static_cast<int64_t>(cycle.failed_acks.size()))
      .Int("in_flight", static_cast<int64_t>(tracked_.size() + cycle.fresh.size()));
}

void Dispatcher::WaitForWorkLocked(std::unique_lock<std::mutex>& lock, absl::Time now,
                                   const Schedule& schedule) {
  // Stopping with no call running: nothing will arrive, go round once more to finish (waiting
  // here held Stop() for a whole poll interval after the last ack).
  if (!results_.empty() || woken_ || (stopping_ && running_ == 0)) return;
  absl::Duration wait = options_.poll_interval;
  if (!stopping_) {
    absl::Time wake = NextDueLocked();
    if (tracked_.size() < options_.max_events_in_flight) {
      wake = std::min({wake, schedule.next_fetch, schedule.next_claim});
    }
    wake = std::min({wake, schedule.next_renew, schedule.next_stats});
    wait = std::min(wake - now, wait);
  }
  const bool was_stopping = stopping_;
  coordinator_cv_.wait_for(lock, ToChrono(wait), [&] {
    return !results_.empty() || woken_ || (stopping_ && !was_stopping);
  });
}

void Dispatcher::TrackLocked(std::vector<std::pair<OutboxItem, Contact>> items, absl::Time now) {
  for (auto& [item, contact] : items) {
    metrics_->fetched.Inc();
    const bool held = std::any_of(tracked_.begin(), tracked_.end(), [&](const auto& kv) {
      return !kv.second.abandoned && kv.second.item.handle == item.handle;
    });
    if (held) continue;  // e.g. claimed back after our own renewals failed for a whole lease

    Tracked& t = tracked_[next_key_++];
    t.id = item.event.Id();
    t.item = std::move(item);
    t.contact = std::move(contact);
    t.sinks.resize(sinks_.size());
    t.remaining = sinks_.size();
    for (size_t s = 0; s < sinks_.size(); ++s) {
      t.sinks[s].next_attempt = now;
      if (disabled_[s]) {
        FinishLocked(t, s, "disabled");
      } else if (options_.max_deliveries > 0 && t.item.deliveries > options_.max_deliveries) {
        DeadLetterLocked(
            t, s, absl::StrCat("handed out ", t.item.deliveries, " times without being finished"),
            now);
      }
    }
  }
}

void Dispatcher::FinishLocked(Tracked& t, size_t sink, std::string_view outcome) {
  SinkState& st = t.sinks[sink];
  if (st.phase == SinkState::Phase::kDone) return;
  st.phase = SinkState::Phase::kDone;
  --t.remaining;
  if (!outcome.empty()) Count(sink, outcome);
}

void Dispatcher::DeadLetterLocked(Tracked& t, size_t sink, std::string reason, absl::Time now) {
  Log(LogLevel::kWarn, "alert delivery dead-lettered")
      .Str("event", t.id)
      .Str("sink", sinks_[sink]->name())
      .Str("reason", reason)
      .Int("attempts", t.sinks[sink].attempts);
  const uint64_t dropped_before = dead_letters_->dropped();
  dead_letters_->Add(DeadLetter{.event = t.item.event,
                                .sink = sinks_[sink]->name(),
                                .reason = std::move(reason),
                                .attempts = t.sinks[sink].attempts,
                                .failed_at = now});
  metrics_->dead_letters_dropped.Inc(dead_letters_->dropped() - dropped_before);
  metrics_->dead_letters.Set(static_cast<int64_t>(dead_letters_->size()));
  FinishLocked(t, sink, "dead");
}

void Dispatcher::DisableSinkLocked(size_t sink) {
  if (disabled_[sink]) return;
  disabled_[sink] = true;
  Log(LogLevel::kWarn, "alert sink disabled until reload (gone)").Str("sink", sinks_[sink]->name());
  for (auto& [key, t] : tracked_) {
    if (!t.abandoned && t.sinks[sink].phase == SinkState::Phase::kWaiting) {
      FinishLocked(t, sink, "disabled");
    }
  }
}

void Dispatcher::ApplyLocked(Result r, absl::Time now) {
  --running_;
  --running_per_sink_[r.sink];
  Tracked& t = tracked_.at(r.key);
  --t.in_flight;
  SinkState& st = t.sinks[r.sink];
  st.phase = SinkState::Phase::kWaiting;
  st.last_detail = r.outcome.detail;
  Count(r.sink, OutcomeName(r.outcome.kind));
  if (t.abandoned || r.outcome.kind != Outcome::Kind::kRetry) LogAttempt(t, r, std::nullopt);
  if (t.abandoned) {
    st.phase = SinkState::Phase::kDone;
    return;
  }
  switch (r.outcome.kind) {
    case Outcome::Kind::kDelivered:
    case Outcome::Kind::kSkipped:
      FinishLocked(t, r.sink, "");
      return;
    case Outcome::Kind::kGone:
      FinishLocked(t, r.sink, "");
      DisableSinkLocked(r.sink);
      return;
    case Outcome::Kind::kPermanent:
      DeadLetterLocked(t, r.sink, absl::StrCat("permanent: ", r.outcome.detail), now);
      return;
    case Outcome::Kind::kRetry:
      break;
  }
  if (disabled_[r.sink]) {
    FinishLocked(t, r.sink, "disabled");
  } else if (r.attempt >= options_.retry.max_attempts) {
    DeadLetterLocked(
        t, r.sink, absl::StrCat("gave up after ", r.attempt, " attempts: ", r.outcome.detail), now);
  } else {
    st.next_attempt =
        now + NextRetryDelay(options_.retry, r.attempt, r.outcome.retry_after, random_);
    LogAttempt(t, r, st.next_attempt - now);
    return;
  }
  LogAttempt(t, r, std::nullopt);  // a retry that will not come (disabled, or given up)
}

void Dispatcher::LogAttempt(const Tracked& t, const Result& r,
                            std::optional<absl::Duration> next_retry) const {
  if (!LogEnabled(LogLevel::kDebug)) return;
  Log line(LogLevel::kDebug, "alert delivery attempt");
  line.Str("event", t.id)
      .Str("sink", sinks_[r.sink]->name())
      .Int("attempt", r.attempt)
      .Str("outcome", OutcomeName(r.outcome.kind))
      .Double("ms", absl::ToDoubleMilliseconds(r.took));
  if (next_retry) line.Double("next_retry_s", absl::ToDoubleSeconds(*next_retry));
}

void Dispatcher::StartDueLocked(absl::Time now) {
  if (stopping_) return;
  const int workers = std::max(1, options_.workers);
  const int per_sink = std::clamp(options_.max_calls_per_sink, 1, workers);
  for (auto& [key, t] : tracked_) {
    if (running_ >= workers) return;
    if (t.abandoned) continue;
    for (size_t s = 0; s < t.sinks.size() && running_ < workers; ++s) {
      SinkState& st = t.sinks[s];
      if (st.phase != SinkState::Phase::kWaiting || st.next_attempt > now ||
          running_per_sink_[s] >= per_sink) {
        continue;
      }
      st.phase = SinkState::Phase::kInFlight;
      ++st.attempts;
      ++t.in_flight;
      ++running_;
      ++running_per_sink_[s];
      tasks_.push_back(Task{.key = key,
                            .sink = s,
                            .attempt = st.attempts,
                            .event = t.item.event,
                            .contact = t.contact});
      worker_cv_.notify_one();
    }
  }
}

absl::Time Dispatcher::NextDueLocked() const {
  const int workers = std::max(1, options_.workers);
  const int per_sink = std::clamp(options_.max_calls_per_sink, 1, workers);
  absl::Time next = absl::InfiniteFuture();
  for (const auto& [key, t] : tracked_) {
    if (t.abandoned) continue;
    if (t.remaining == 0 && t.in_flight == 0) next = std::min(next, t.ack_due);
    for (size_t s = 0; s < t.sinks.size(); ++s) {
      const SinkState& st = t.sinks[s];
      if (st.phase != SinkState::Phase::kWaiting) continue;
      // A due call that waits for a free worker is started when a result frees one.
      if (running_ >= workers || running_per_sink_[s] >= per_sink) continue;
      next = std::min(next, st.next_attempt);
    }
  }
  return next;
}

}  // namespace sluice::alerts
