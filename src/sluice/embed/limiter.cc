// libsluice's Limiter (include/sluice/limiter.h) over the engine's store back end: the same
// store, clock, maintainer and alert delivery `sluice serve` runs, without the HTTP server.
//
// With Redis every store call runs on the library's one event loop (the back end's connection is
// that loop's), so a call from any other thread is posted there; a blocking call then waits for
// the callback. With the memory store every call completes on the calling thread.
#include "sluice/limiter.h"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "sluice/alerts/sinks.h"
#include "sluice/config/config.h"
#include "sluice/embed/callback_sink.h"
#include "sluice/embed/convert.h"
#include "sluice/engine/alert_delivery.h"
#include "sluice/engine/store_backend.h"
#include "sluice/limiter/limiter.h"
#include "sluice/limiter/plan.h"

namespace sluice::lib {
namespace {

namespace asio = boost::asio;

// How long Open waits for Redis to answer before deciding degraded until it does.
constexpr absl::Duration kRedisStartWait = absl::Seconds(2);
// A blocking call waits this much longer than the store timeout: the store answers within its
// timeout, and the loop may be busy with other callers' answers.
constexpr absl::Duration kBlockingMargin = absl::Seconds(1);
// Due reservations ended per call of ExpireReservations.
constexpr size_t kExpireBatch = 10'000;

Status Closed() { return Status(StatusCode::kFailedPrecondition, "the limiter is closed"); }
// The Limiter whose DecideAsync callback the calling thread is running (null outside one): Close()
// there would wait for the call it is part of, and destroying the Limiter would pull the frames
// still running out from under it.
thread_local const void* t_in_callback_of = nullptr;

class InCallback {
 public:
  explicit InCallback(const void* limiter) : previous_(t_in_callback_of) {
    t_in_callback_of = limiter;
  }
  ~InCallback() { t_in_callback_of = previous_; }
  InCallback(const InCallback&) = delete;
  InCallback& operator=(const InCallback&) = delete;

 private:
  const void* previous_;
};

Status OnLoopThread() {
  return Status(StatusCode::kFailedPrecondition,
                "blocking call on the limiter's I/O thread (use DecideAsync there)");
}

// The answer a blocking call waits for; shared with the callback, which may come after the
// waiter gave up.
template <typename T>
class Pending {
 public:
  void Set(Result<T> value) {
    std::lock_guard lock(mu_);
    value_.emplace(std::move(value));
    done_.notify_all();
  }
  // The value, or nullopt if it did not come within `timeout`.
  std::optional<Result<T>> Wait(absl::Duration timeout) {
    std::unique_lock lock(mu_);
    const auto ready = [&] { return value_.has_value(); };
    if (timeout == absl::InfiniteDuration()) {
      done_.wait(lock, ready);
    } else {
      done_.wait_for(lock, absl::ToChronoMilliseconds(timeout), ready);
    }
    return std::move(value_);
  }

 private:
  std::mutex mu_;
  std::condition_variable done_;
  std::optional<Result<T>> value_;
};

}  // namespace

class Limiter::Impl {
 public:
  ~Impl() {
    if (t_in_callback_of == this || OnIoThread()) {
      // Waiting here would deadlock and going on would free what the caller still runs in.
      std::fputs("sluice::lib::Limiter destroyed from its own callback or I/O thread\n", stderr);
      std::abort();
    }
    (void)Close();
  }

  // Opens the back end `cfg` names (validated), starts its threads, then alert delivery when
  // there is anywhere to deliver to.
  // `clock` null: the system clock.
  static absl::StatusOr<std::unique_ptr<Impl>> Start(config::Config cfg, AlertCallback on_alert,
                                                     bool log, std::shared_ptr<const Clock> clock) {
    absl::StatusOr<PlanSet> plans = PlanSet::FromConfig(cfg);
    if (!plans.ok()) return plans.status();
    const bool deliver = on_alert || !cfg.alerts.sinks.empty() || !cfg.keys.empty();
    // libcurl's process-wide set-up is not thread-safe: done before this starts any thread.
    if (deliver) {
      if (absl::Status s = alerts::GlobalInit(); !s.ok()) return s;
    }
    auto impl = std::unique_ptr<Impl>(new Impl(std::move(cfg)));
    if (clock != nullptr) impl->clock_ = std::make_unique<embed::PublicClock>(std::move(clock));
    const bool redis = impl->cfg_.store.type == config::StoreType::kRedis;
    engine::StoreBackendOptions options{
        .open_registry = false, .log = log, .clock = impl->clock_.get()};
    if (redis) {
      impl->io_ = std::make_unique<asio::io_context>(1);
      options.loops = {impl->io_.get()};
    }
    absl::StatusOr<std::unique_ptr<engine::StoreBackend>> backend =
        engine::OpenStoreBackend(impl->cfg_, std::move(options));
    if (!backend.ok()) return backend.status();
    impl->backend_ = *std::move(backend);
    engine::StoreBackend& b = *impl->backend_;
    impl->limiter_ = std::make_unique<sluice::Limiter>(
        *std::move(plans), b.store(), b.clock(), b.limiter_options(impl->cfg_.on_store_error));
    if (redis) {
      impl->work_.emplace(asio::make_work_guard(*impl->io_));
      impl->io_thread_ = std::thread([raw = impl.get()] {
        raw->backend_->Attach(0);
        raw->io_->run();
      });
      // Written before any call can post to the loop (they come after Open returns).
      impl->io_thread_id_ = impl->io_thread_.get_id();
      // Not an error if it does not answer: decisions are degraded until it does.
      (void)b.WaitForStore(kRedisStartWait);
    }
    if (deliver) {
      engine::AlertDeliveryContext context{
          .backend = &b, .clock = b.system_clock(), .registry_index = b.index()};
      if (on_alert) {
        impl->callback_sink_ = std::make_unique<embed::CallbackSink>(std::move(on_alert));
        context.extra_sinks.push_back(impl->callback_sink_.get());
      }
      impl->alerts_ = std::make_unique<engine::AlertDelivery>(impl->cfg_, context);
    }
    impl->StartExpirer();
    return impl;
  }

  void DecideAsync(const Request& request, DecisionCallback done) {
    if (!Enter()) {
      done(Closed());
      return;
    }
    // The views are the caller's: a posted call needs its own copies.
    RunOnStore([this, subject = std::string(request.subject), plan = std::string(request.plan),
                cost = request.cost, done = std::move(done)]() mutable {
      limiter_->Decide({.subject = subject, .plan = plan, .cost = cost},
                       [this, done = std::move(done)](absl::StatusOr<sluice::Decision> d) mutable {
                         Leave leave(this);
                         const InCallback in_callback(this);
                         if (d.ok()) {
                           done(embed::ToPublic(*d));
                         } else {
                           done(embed::FromAbsl(d.status()));
                         }
                       });
    });
  }

  Result<lib::Decision> Decide(const Request& request) {
    return Blocking<lib::Decision>(
        [&](std::function<void(Result<lib::Decision>)> set) { DecideAsync(request, set); });
  }

  Result<std::vector<LimitUsage>> Usage(std::string_view subject, std::string_view plan) {
    return Blocking<std::vector<LimitUsage>>(
        [&](std::function<void(Result<std::vector<LimitUsage>>)> set) {
          if (!Enter()) return set(Closed());
          RunOnStore([this, subject = std::string(subject), plan = std::string(plan),
                      set = std::move(set)]() mutable {
            limiter_->Usage(subject, plan,
                            [this, plan, set = std::move(set)](
                                absl::StatusOr<std::vector<sluice::LimitUsage>> usage) mutable {
                              Leave leave(this);
                              if (!usage.ok()) return set(embed::FromAbsl(usage.status()));
                              // Found: the limiter has just resolved it.
                              const Plan& p = *limiter_->plans().Find(plan);
                              set(embed::ToPublic(p, *usage, backend_->clock()->Now()));
                            });
          });
        });
  }

  Result<Reservation> Reserve(const ReserveRequest& request) {
    return Blocking<Reservation>([&](std::function<void(Result<Reservation>)> set) {
      if (!Enter()) return set(Closed());
      RunOnStore([this, subject = std::string(request.subject), plan = std::string(request.plan),
                  estimate = request.estimate, ttl = absl::FromChrono(request.ttl),
                  set = std::move(set)]() mutable {
        limiter_->Reserve({.decision = {.subject = subject, .plan = plan, .cost = 0},
                           .hold = estimate,
                           .ttl = ttl},
                          [this, set = std::move(set)](absl::StatusOr<ReserveDecision> r) mutable {
                            Leave leave(this);
                            if (!r.ok()) return set(embed::FromAbsl(r.status()));
                            set(Reservation{.decision = embed::ToPublic(r->decision),
                                            .id = r->id,
                                            .expires_at = absl::ToChronoTime(r->expires_at)});
                          });
      });
    });
  }

  // Ends reservation `id`: a settle of `cost`, or a release.
  Result<lib::Decision> End(std::string_view id, ReservationEnd end, int64_t cost) {
    return Blocking<lib::Decision>([&](std::function<void(Result<lib::Decision>)> set) {
      if (!Enter()) return set(Closed());
      RunOnStore([this, id = std::string(id), end, cost, set = std::move(set)]() mutable {
        limiter_->Settle(
            {.id = id, .cost = cost, .end = end},
            [this, set = std::move(set)](absl::StatusOr<SettleDecision> s) mutable {
              Leave leave(this);
              if (!s.ok()) return set(embed::FromAbsl(s.status()));
              switch (s->outcome) {
                case StoreSettleResult::Outcome::kEnded:
                case StoreSettleResult::Outcome::kRepeated:
                  return set(embed::ToPublic(s->decision));
                case StoreSettleResult::Outcome::kConflict:
                  return set(Status(StatusCode::kFailedPrecondition,
                                    s->ended_by == ReservationEnd::kSettle
                                        ? "the reservation was settled with another cost"
                                    : s->ended_by == ReservationEnd::kRelease
                                        ? "the reservation was released"
                                        : "the reservation expired"));
                case StoreSettleResult::Outcome::kNotFound:
                case StoreSettleResult::Outcome::kNotDue:
                  break;
              }
              set(Status(StatusCode::kNotFound, "no such reservation"));
            });
      });
    });
  }

  Result<std::chrono::system_clock::time_point> Extend(std::string_view id,
                                                       std::chrono::milliseconds ttl) {
    using TimePoint = std::chrono::system_clock::time_point;
    return Blocking<TimePoint>([&](std::function<void(Result<TimePoint>)> set) {
      if (!Enter()) return set(Closed());
      RunOnStore([this, id = std::string(id), ttl = absl::FromChrono(ttl),
                  set = std::move(set)]() mutable {
        limiter_->Extend(
            id, ttl, [this, set = std::move(set)](absl::StatusOr<StoreExtendResult> e) mutable {
              Leave leave(this);
              if (!e.ok()) return set(embed::FromAbsl(e.status()));
              switch (e->outcome) {
                case StoreExtendResult::Outcome::kExtended:
                  return set(absl::ToChronoTime(e->expires_at));
                case StoreExtendResult::Outcome::kEnded:
                  return set(Status(StatusCode::kFailedPrecondition, "the reservation has ended"));
                case StoreExtendResult::Outcome::kNotFound:
                  break;
              }
              set(Status(StatusCode::kNotFound, "no such reservation"));
            });
      });
    });
  }

  size_t ExpireReservations() {
    Result<size_t> ended = Blocking<size_t>([&](std::function<void(Result<size_t>)> set) {
      if (!Enter()) return set(Closed());
      RunOnStore([this, set = std::move(set)]() mutable {
        limiter_->ExpireDue(kExpireBatch,
                            [this, set = std::move(set)](absl::StatusOr<size_t> n) mutable {
                              Leave leave(this);
                              if (!n.ok()) return set(embed::FromAbsl(n.status()));
                              set(*n);
                            });
      });
    });
    return ended.ok() ? *ended : 0;
  }

  Status ResetUsage(std::string_view subject, std::string_view plan, std::string_view limit) {
    Result<bool> done = Blocking<bool>([&](std::function<void(Result<bool>)> set) {
      if (!Enter()) return set(Closed());
      RunOnStore([this, subject = std::string(subject), plan = std::string(plan),
                  limit = std::string(limit), set = std::move(set)]() mutable {
        limiter_->Reset(subject, plan, limit, [this, set = std::move(set)](absl::Status s) {
          Leave leave(this);
          if (s.ok()) return set(true);
          set(embed::FromAbsl(s));
        });
      });
    });
    return done.status();
  }

  Status Close() {
    if (OnIoThread()) return OnLoopThread();
    if (t_in_callback_of == this) {
      return Status(StatusCode::kFailedPrecondition, "Close() from the limiter's own callback");
    }
    StopExpirer();
    {
      std::unique_lock lock(mu_);
      if (closed_) return close_status_;
      closed_ = true;
      // Each call in progress ends within the store timeout.
      idle_.wait(lock, [&] { return in_flight_ == 0; });
    }
    if (alerts_ != nullptr) alerts_->Stop();
    if (io_ != nullptr) {
      work_.reset();
      io_->stop();
      if (io_thread_.joinable()) io_thread_.join();
    }
    Status status = backend_ != nullptr ? embed::FromAbsl(backend_->Stop()) : Status();
    alerts_.reset();
    callback_sink_.reset();
    limiter_.reset();
    backend_.reset();
    io_.reset();
    std::lock_guard lock(mu_);
    close_status_ = status;
    return status;
  }

  Status SaveSnapshot() {
    if (!Enter()) return Closed();
    Leave leave(this);
    return embed::FromAbsl(backend_->SaveSnapshot());
  }

  size_t Sweep() {
    if (!Enter()) return 0;
    Leave leave(this);
    return backend_->Sweep();
  }

  std::string_view store_kind() const {
    return cfg_.store.type == config::StoreType::kRedis ? "redis" : "memory";
  }

  std::vector<std::string> plans() const {
    std::vector<std::string> names;
    for (const config::PlanConfig& p : cfg_.plans) names.push_back(p.name);
    return names;
  }

 private:
  explicit Impl(config::Config cfg) : cfg_(std::move(cfg)) {}

  // Counts a call in progress so that Close() waits for it; false once closed.
  bool Enter() {
    std::lock_guard lock(mu_);
    if (closed_) return false;
    ++in_flight_;
    return true;
  }
  class Leave {
   public:
    explicit Leave(Impl* impl) : impl_(impl) {}
    ~Leave() {
      std::lock_guard lock(impl_->mu_);
      if (--impl_->in_flight_ == 0) impl_->idle_.notify_all();
    }
    Leave(const Leave&) = delete;
    Leave& operator=(const Leave&) = delete;

   private:
    Impl* impl_;
  };

  bool OnIoThread() const { return io_ != nullptr && std::this_thread::get_id() == io_thread_id_; }

  // Ends due reservations every second on a thread of its own (ExpireReservations).
  void StartExpirer() {
    expirer_ = std::thread([this] {
      std::unique_lock lock(expirer_mu_);
      while (
          !expirer_wake_.wait_for(lock, std::chrono::seconds(1), [&] { return expirer_stop_; })) {
        lock.unlock();
        (void)ExpireReservations();
        lock.lock();
      }
    });
  }
  void StopExpirer() {
    {
      std::lock_guard lock(expirer_mu_);
      expirer_stop_ = true;
    }
    expirer_wake_.notify_all();
    if (expirer_.joinable()) expirer_.join();
  }

  // Runs `fn` where the store may be called: here with the memory store, on the loop with Redis.
  template <typename F>
  void RunOnStore(F fn) {
    if (io_ == nullptr || OnIoThread()) {
      fn();
    } else {
      asio::post(*io_, std::move(fn));
    }
  }

  // Starts a call with `start(set)` and waits until `set` is called, at most the store timeout
  // plus a margin.
  template <typename T>
  Result<T> Blocking(const std::function<void(std::function<void(Result<T>)>)>& start) {
    if (OnIoThread()) return OnLoopThread();
    auto pending = std::make_shared<Pending<T>>();
    start([pending](Result<T> value) { pending->Set(std::move(value)); });
    const absl::Duration wait =
        io_ == nullptr ? absl::InfiniteDuration() : cfg_.store.redis.timeout + kBlockingMargin;
    std::optional<Result<T>> value = pending->Wait(wait);
    if (!value.has_value()) {
      return Status(StatusCode::kDeadlineExceeded, "the store did not answer in time");
    }
    return *std::move(value);
  }

  const config::Config cfg_;
  // Options::clock as the engine's; null: the back end uses the system clock.
  std::unique_ptr<embed::PublicClock> clock_;
  // Redis only: the loop the back end's connection runs on, and its thread.
  std::unique_ptr<asio::io_context> io_;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work_;
  std::thread io_thread_;
  std::thread::id io_thread_id_;
  std::unique_ptr<engine::StoreBackend> backend_;
  std::unique_ptr<sluice::Limiter> limiter_;
  std::unique_ptr<embed::CallbackSink> callback_sink_;
  std::unique_ptr<engine::AlertDelivery> alerts_;

  std::thread expirer_;
  std::mutex expirer_mu_;
  std::condition_variable expirer_wake_;
  bool expirer_stop_ = false;  // guarded by expirer_mu_

  std::mutex mu_;
  std::condition_variable idle_;
  int in_flight_ = 0;
  bool closed_ = false;
  Status close_status_;
};

Limiter::Limiter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Limiter::~Limiter() { (void)Close(); }

Result<std::unique_ptr<Limiter>> Limiter::Open(Options options) {
  absl::StatusOr<config::Config> cfg = embed::ToConfig(options);
  if (!cfg.ok()) return embed::FromAbsl(cfg.status());
  absl::StatusOr<std::unique_ptr<Impl>> impl = Impl::Start(
      *std::move(cfg), std::move(options.alerts.callback), options.log, std::move(options.clock));
  if (!impl.ok()) return embed::FromAbsl(impl.status());
  return std::unique_ptr<Limiter>(new Limiter(*std::move(impl)));
}

Result<std::unique_ptr<Limiter>> Limiter::OpenFile(const std::string& path,
                                                   AlertCallback on_alert) {
  absl::StatusOr<config::Config> cfg = config::LoadConfigFile(path);
  if (!cfg.ok()) return embed::FromAbsl(cfg.status());
  absl::StatusOr<std::unique_ptr<Impl>> impl =
      Impl::Start(*std::move(cfg), std::move(on_alert), /*log=*/false, /*clock=*/nullptr);
  if (!impl.ok()) return embed::FromAbsl(impl.status());
  return std::unique_ptr<Limiter>(new Limiter(*std::move(impl)));
}

Result<Decision> Limiter::Decide(const Request& request) { return impl_->Decide(request); }

void Limiter::DecideAsync(const Request& request, DecisionCallback done) {
  impl_->DecideAsync(request, std::move(done));
}

Result<std::vector<LimitUsage>> Limiter::Usage(std::string_view subject, std::string_view plan) {
  return impl_->Usage(subject, plan);
}

Result<Reservation> Limiter::Reserve(const ReserveRequest& request) {
  return impl_->Reserve(request);
}

Result<Decision> Limiter::Settle(std::string_view id, int64_t cost) {
  return impl_->End(id, ReservationEnd::kSettle, cost);
}

Status Limiter::Release(std::string_view id) {
  return impl_->End(id, ReservationEnd::kRelease, 0).status();
}

Result<std::chrono::system_clock::time_point> Limiter::Extend(std::string_view id,
                                                              std::chrono::milliseconds ttl) {
  return impl_->Extend(id, ttl);
}

size_t Limiter::ExpireReservations() { return impl_->ExpireReservations(); }

Status Limiter::ResetUsage(std::string_view subject, std::string_view plan,
                           std::string_view limit) {
  return impl_->ResetUsage(subject, plan, limit);
}

Status Limiter::SaveSnapshot() { return impl_->SaveSnapshot(); }

size_t Limiter::Sweep() { return impl_->Sweep(); }

Status Limiter::Close() { return impl_->Close(); }

std::string_view Limiter::store_kind() const { return impl_->store_kind(); }

std::vector<std::string> Limiter::plans() const { return impl_->plans(); }

}  // namespace sluice::lib
