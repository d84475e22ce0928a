// libsluice's limiter: decisions, usage and resets over the store the Options name
// (docs/library.md, docs/semantics.md).
//
//   sluice::lib::Options options;
//   options.plans.push_back({.name = "free", .limits = {{.name = "per_minute", .quota = 5,
//                                                        .window = "1m"}}});
//   sluice::lib::Result<std::unique_ptr<sluice::lib::Limiter>> limiter =
//       sluice::lib::Limiter::Open(std::move(options));
//   if (!limiter.ok()) { /* limiter.status().message() names the bad field */ }
//   sluice::lib::Result<sluice::lib::Decision> d =
//       (*limiter)->Decide({.subject = "user-42", .plan = "free"});
//   if (d.ok() && d->allowed) { /* serve the request */ }
//
// Threads. Every method may be called from any thread at once, except Close() and the
// destructor, which require that no other call is in progress or starts. The library runs its
// own threads: with Redis one I/O thread (an event loop that talks to Redis and runs every
// asynchronous callback); with the memory store a maintainer thread (sweeps, snapshots); with
// alert sinks a few delivery threads (which run the AlertCallback).
//
// Callbacks. DecideAsync's callback runs exactly once: with the memory store on the calling
// thread before DecideAsync returns; with Redis on the library's I/O thread. A callback running on
// the I/O thread must not make a blocking call on the same Limiter (Decide, Usage, ResetUsage,
// Close): they would wait for the thread they block, and are refused with
// kFailedPrecondition instead. It may call DecideAsync. No callback may call Close() (refused
// with kFailedPrecondition) or destroy its Limiter (the process aborts with a message: there is
// no safe way on), and none may throw: an exception leaving a callback that runs on the I/O
// thread ends the process.
//
// Lifetime. The Limiter owns everything it started; its destructor calls Close(). A Decision owns
// its data (strings are copies) and outlives the Limiter.
#ifndef SLUICE_LIMITER_H_
#define SLUICE_LIMITER_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/options.h"
#include "sluice/status.h"

namespace sluice::lib {

// "May `subject` spend `cost` under `plan` now?" The views are read only during the call.
struct Request {
  std::string_view subject;  // 1-200 bytes of [A-Za-z0-9._:@/+=-]
  std::string_view plan;     // one of the Options' plans
  int64_t cost = 1;          // 0..1,000,000; 0 asks without spending (a peek)
};

// One limit of the plan, after the request.
struct LimitResult {
  std::string name;
  int64_t quota = 0;
  int64_t used = 0;                     // the counter after this request (unchanged if denied)
  int64_t held = 0;                     // held by open reservations (a concurrent limit: slots)
  int64_t remaining = 0;                // max(quota - used - held, 0)
  int64_t overshoot = 0;                // Settle only: what its charge put beyond the quota
  std::chrono::seconds reset_after{0};  // until this limit's window ends, rounded up
  bool violated = false;                // this limit denied the request
  bool would_deny = false;              // a shadow limit that would have denied it (it never does)
  std::chrono::seconds retry_after{0};  // reset_after when violated, else 0
};

struct Decision {
  bool allowed = false;
  // The store could not answer in time; `allowed` follows OnStoreError, and `limits` carry
  // quotas but used = 0 and remaining = quota (the counters are unknown). Nothing was charged.
  bool degraded = false;
  std::string degraded_reason;  // when degraded: "timeout", "connection", "circuit_open", ...
  // When denied: until every violated limit has reset, so a retry then can succeed. Else 0.
  std::chrono::seconds retry_after{0};
  std::vector<LimitResult> limits;  // in the plan's order
};

// A limit's current counter, read without spending anything.
struct LimitUsage {
  std::string name;
  int64_t quota = 0;
  int64_t used = 0;
  int64_t held = 0;       // held by open reservations (a concurrent limit: slots)
  int64_t remaining = 0;  // max(quota - used - held, 0)
  std::chrono::seconds reset_after{0};
  std::vector<int> fired;  // alert percentages already fired in this window, ascending
};

using DecisionCallback = std::function<void(Result<Decision>)>;

// "Hold `estimate` for `subject` under `plan` until I know the real cost" (docs/semantics.md,
// Reservations). The views are read only during the call.
struct ReserveRequest {
  std::string_view subject;
  std::string_view plan;
  int64_t estimate = 0;  // 0..1,000,000, held on every counting limit; concurrent limits: a slot
  std::chrono::milliseconds ttl{60'000};  // more than 0, at most 1 h
};

struct Reservation {
  Decision decision;                                 // its limits show what is held after it
  std::string id;                                    // empty when denied (nothing is held then)
  std::chrono::system_clock::time_point expires_at;  // when allowed
};

class Limiter {
 public:
  // Validates `options`, opens the store (with a snapshot path: locks the file — one process per
  // snapshot — and loads it) and starts the library's threads. Errors: kInvalidArgument naming
  // the field; a snapshot locked by another process or unreadable (kDataLoss for a damaged file:
  // starting empty would hand every subject a fresh quota). An unreachable Redis is not an error:
  // Open waits up to 2 s for it to answer, then decisions are degraded until it does.
  [[nodiscard]] static Result<std::unique_ptr<Limiter>> Open(Options options);

  // The same from a sluice.yaml file (docs/configuration.md), as `sluice serve` reads it, with
  // SLUICE_REDIS_URL and SLUICE_REDIS_PASSWORD_FILE applied. Its plans, store, on_store_error and
  // alerts (every sink type, keys' email and webhook as contacts) are used; the server section
  // and the registry of API keys are not. `on_alert`, if set, receives every alert as well.
  [[nodiscard]] static Result<std::unique_ptr<Limiter>> OpenFile(const std::string& path,
                                                                 AlertCallback on_alert = {});

  // Close().
  ~Limiter();
  Limiter(const Limiter&) = delete;
  Limiter& operator=(const Limiter&) = delete;

  // Decides `request` and waits for the answer: with the memory store it is computed on the
  // calling thread; with Redis it is asked on the I/O thread and waited for, at most about the
  // store timeout (then the answer is degraded). Errors: kInvalidArgument for a bad subject or
  // cost, kNotFound for an unknown plan (the message names the field), kFailedPrecondition after
  // Close() or on the I/O thread, and kDeadlineExceeded if the I/O thread is so busy that no
  // answer came a second after the store timeout. A store failure is not an error: it is a
  // degraded Decision.
  [[nodiscard]] Result<Decision> Decide(const Request& request);

  // The same, answered through `done` (see Callbacks above): never blocks on Redis. `done` must
  // not be empty.
  void DecideAsync(const Request& request, DecisionCallback done);

  // Reserves (ReserveRequest): decided as Decide with the estimate held; if admitted, the
  // reservation's id. Errors as Decide's (kInvalidArgument also for a bad estimate or ttl), and
  // kResourceExhausted when the memory store already remembers as many reservations as it may.
  [[nodiscard]] Result<Reservation> Reserve(const ReserveRequest& request);
  // Ends reservation `id` by charging the real `cost` (0..1,000,000) in full, past the quota if
  // it must; never denied. The Decision is the counters after it (each limit's `overshoot`).
  // The same settle again answers the same. Errors: kNotFound for an unknown or forgotten id,
  // kFailedPrecondition when it already ended otherwise (settled with another cost, released,
  // expired), kInvalidArgument for a malformed id or a bad cost.
  [[nodiscard]] Result<Decision> Settle(std::string_view id, int64_t cost);
  // Ends reservation `id` without charge (again: OK). Errors as Settle's.
  [[nodiscard]] Status Release(std::string_view id);
  // Keeps reservation `id` open until now + ttl. Errors as Settle's.
  [[nodiscard]] Result<std::chrono::system_clock::time_point> Extend(std::string_view id,
                                                                     std::chrono::milliseconds ttl);
  // Ends the reservations whose expiry has passed (each charged its estimate or released, by its
  // plan); returns how many. The library also does it every second in the background.
  size_t ExpireReservations();

  // `subject`'s counters of `plan`'s limits now; spends nothing. Counters belong to the subject
  // and the limit (name and window), not the plan: another plan with the same limit shares them.
  [[nodiscard]] Result<std::vector<LimitUsage>> Usage(std::string_view subject,
                                                      std::string_view plan);

  // Clears `subject`'s counters and fired alerts of one limit of `plan` (by name), or with an
  // empty `limit` of every limit of the plan. kNotFound for an unknown plan or limit.
  [[nodiscard]] Status ResetUsage(std::string_view subject, std::string_view plan,
                                  std::string_view limit = {});

  // Memory store upkeep on demand; the library also does both in the background (a sweep every
  // 10 s, a snapshot every snapshot_interval). SaveSnapshot writes the snapshot now, e.g. before
  // a backup — kFailedPrecondition without a snapshot path, with Redis (Redis keeps the
  // counters), or after Close(). Sweep drops the counters whose windows have all ended and
  // returns how many subjects it dropped (0 with Redis, whose keys expire by themselves, and
  // after Close()). Both may be called from any thread but the I/O thread's callbacks.
  [[nodiscard]] Status SaveSnapshot();
  size_t Sweep();

  // Stops the threads: waits for decisions in progress (each bounded by the store timeout) and for
  // the alert calls in progress, leaves undelivered alerts in the store, and with a snapshot path
  // saves the final snapshot — its failure is the Status returned. Later calls are refused with
  // kFailedPrecondition (DecideAsync's callback gets that error). Idempotent.
  // From a callback of this Limiter or its I/O thread: kFailedPrecondition, nothing closed.
  Status Close();

  // "memory" or "redis".
  [[nodiscard]] std::string_view store_kind() const;
  // The plans' names, in the order given.
  [[nodiscard]] std::vector<std::string> plans() const;

 private:
  class Impl;
  explicit Limiter(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::lib

#endif  // SLUICE_LIMITER_H_
