// libsluice with the memory store: a plan of 5 requests a minute, 7 requests, exactly 5 allowed;
// then the usage is read and reset. Prints what it sees; exits 1 on any wrong answer.
#include <sluice/sluice.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>
#include <utility>

namespace {

int failures = 0;

void Check(bool ok, const char* what) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what);
  if (!ok) ++failures;
}

}  // namespace

int main() {
  sluice::lib::Options options;
  options.plans.push_back(
      {.name = "free", .limits = {{.name = "per_minute", .quota = 5, .window = "1m"}}});
  sluice::lib::Result<std::unique_ptr<sluice::lib::Limiter>> opened =
      sluice::lib::Limiter::Open(std::move(options));
  if (!opened.ok()) {
    std::fprintf(stderr, "cannot open the limiter: %s\n", opened.status().message().c_str());
    return 1;
  }
  sluice::lib::Limiter& limiter = **opened;

  // Seven requests must fall in one minute: if this one is about to end, wait for the next.
  sluice::lib::Result<sluice::lib::Decision> peek =
      limiter.Decide({.subject = "user-42", .plan = "free", .cost = 0});
  if (peek.ok() && peek->limits[0].reset_after < std::chrono::seconds(3)) {
    std::this_thread::sleep_for(peek->limits[0].reset_after);
  }

  int allowed = 0;
  for (int i = 1; i <= 7; ++i) {
    sluice::lib::Result<sluice::lib::Decision> d =
        limiter.Decide({.subject = "user-42", .plan = "free"});
    if (!d.ok()) {
      std::fprintf(stderr, "decision failed: %s\n", d.status().message().c_str());
      return 1;
    }
    std::printf("request %d: %s, remaining %lld, retry after %llds\n", i,
                d->allowed ? "allowed" : "denied", static_cast<long long>(d->limits[0].remaining),
                static_cast<long long>(d->retry_after.count()));
    Check(d->allowed == (i <= 5), "allowed exactly while under the quota");
    if (d->allowed) ++allowed;
  }
  Check(allowed == 5, "5 of 7 allowed");

  sluice::lib::Result<std::vector<sluice::lib::LimitUsage>> usage =
      limiter.Usage("user-42", "free");
  Check(usage.ok() && (*usage)[0].used == 5, "usage reads 5");
  Check(limiter.ResetUsage("user-42", "free").ok(), "reset");
  usage = limiter.Usage("user-42", "free");
  Check(usage.ok() && (*usage)[0].used == 0, "usage reads 0 after the reset");
  Check(limiter.Decide({.subject = "user-42", .plan = "free"})->allowed, "allowed again");
  Check(limiter.Close().ok(), "closed");

  std::printf("memory_example: %s\n", failures == 0 ? "PASS" : "FAIL");
  return failures == 0 ? 0 : 1;
}
