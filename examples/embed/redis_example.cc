// libsluice with Redis: a plan of 5 requests a minute; 7 blocking requests, exactly 5 allowed;
// 7 asynchronous ones for another subject, exactly 5 allowed; usage read and reset.
// Usage: redis_example [redis://host:port/db]   (else $SLUICE_REDIS_URL, else 127.0.0.1:6379)
// Prints what it sees; exits 1 on any wrong answer.
#include <sluice/sluice.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

namespace {

int failures = 0;

void Check(bool ok, const char* what) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what);
  if (!ok) ++failures;
}

// Seven requests must fall in one minute: if this one is about to end, wait for the next.
void AwayFromTheMinutesEnd(sluice::lib::Limiter& limiter, const std::string& subject) {
  sluice::lib::Result<sluice::lib::Decision> peek =
      limiter.Decide({.subject = subject, .plan = "free", .cost = 0});
  if (peek.ok() && peek->limits[0].reset_after < std::chrono::seconds(3)) {
    std::this_thread::sleep_for(peek->limits[0].reset_after);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string url = "redis://127.0.0.1:6379/0";
  if (const char* env = std::getenv("SLUICE_REDIS_URL"); env != nullptr) url = env;
  if (argc > 1) url = argv[1];

  sluice::lib::Options options;
  options.plans.push_back(
      {.name = "free", .limits = {{.name = "per_minute", .quota = 5, .window = "1m"}}});
  // A prefix of this run's own, so that a run never sees the counters of an earlier one.
  const std::string prefix =
      "ex" + std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count());
  options.store = sluice::lib::RedisStoreOptions{
      .url = url, .key_prefix = prefix, .timeout = std::chrono::milliseconds(200)};
  options.on_store_error = sluice::lib::OnStoreError::kDeny;
  sluice::lib::Result<std::unique_ptr<sluice::lib::Limiter>> opened =
      sluice::lib::Limiter::Open(std::move(options));
  if (!opened.ok()) {
    std::fprintf(stderr, "cannot open the limiter: %s\n", opened.status().message().c_str());
    return 1;
  }
  sluice::lib::Limiter& limiter = **opened;

  AwayFromTheMinutesEnd(limiter, "blocking");
  int allowed = 0;
  for (int i = 1; i <= 7; ++i) {
    sluice::lib::Result<sluice::lib::Decision> d =
        limiter.Decide({.subject = "blocking", .plan = "free"});
    if (!d.ok()) {
      std::fprintf(stderr, "decision failed: %s\n", d.status().message().c_str());
      return 1;
    }
    std::printf("blocking request %d: %s%s, remaining %lld\n", i, d->allowed ? "allowed" : "denied",
                d->degraded ? " (degraded)" : "", static_cast<long long>(d->limits[0].remaining));
    Check(!d->degraded, "Redis answered");
    if (d->allowed) ++allowed;
  }
  Check(allowed == 5, "5 of 7 blocking requests allowed");

  // The callbacks run on the library's I/O thread: they only record the answer.
  AwayFromTheMinutesEnd(limiter, "async");
  std::mutex mu;
  std::condition_variable cv;
  int answered = 0, async_allowed = 0, async_degraded = 0;
  for (int i = 0; i < 7; ++i) {
    limiter.DecideAsync({.subject = "async", .plan = "free"},
                        [&](sluice::lib::Result<sluice::lib::Decision> d) {
                          std::lock_guard lock(mu);
                          ++answered;
                          if (d.ok() && d->allowed) ++async_allowed;
                          if (!d.ok() || d->degraded) ++async_degraded;
                          cv.notify_all();
                        });
  }
  {
    std::unique_lock lock(mu);
    Check(cv.wait_for(lock, std::chrono::seconds(10), [&] { return answered == 7; }),
          "7 asynchronous answers");
    std::printf("async: %d allowed, %d degraded\n", async_allowed, async_degraded);
    Check(async_allowed == 5 && async_degraded == 0, "5 of 7 asynchronous requests allowed");
  }

  sluice::lib::Result<std::vector<sluice::lib::LimitUsage>> usage =
      limiter.Usage("blocking", "free");
  Check(usage.ok() && (*usage)[0].used == 5, "usage reads 5");
  Check(limiter.ResetUsage("blocking", "free").ok(), "reset");
  usage = limiter.Usage("blocking", "free");
  Check(usage.ok() && (*usage)[0].used == 0, "usage reads 0 after the reset");
  Check(limiter.Close().ok(), "closed");

  std::printf("redis_example: %s\n", failures == 0 ? "PASS" : "FAIL");
  return failures == 0 ? 0 : 1;
}
