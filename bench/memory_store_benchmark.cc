// One decision on the memory store, through the Limiter, for a 2-limit plan (per_minute + daily
// with alerts), as a server thread makes it. Also reports the heap held per active subject.
//
//   cmake --preset release && cmake --build build/release -j2 --target memory_store_benchmark
//   build/release/bench/memory_store_benchmark
#include <malloc.h>

#include <memory>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "absl/strings/str_cat.h"
#include "sluice/common/clock.h"
#include "sluice/config/config.h"
#include "sluice/limiter/limiter.h"
#include "sluice/store/memory/memory_store.h"

namespace sluice {
namespace {

constexpr int kManySubjects = 1'000'000;

config::Config TwoLimitConfig() {
  config::Config cfg;
  // Quotas high enough that every benchmark decision is an admission that writes.
  cfg.plans.push_back(
      {.name = "free",
       .limits = {
           {.name = "per_minute", .quota = int64_t{1} << 40, .window = *config::ParseWindow("1m")},
           {.name = "daily",
            .quota = int64_t{1} << 41,
            .window = *config::ParseWindow("day"),
            .alert_at = {80, 100}}}});
  return cfg;
}

std::vector<std::string> Subjects(int n) {
  std::vector<std::string> out;
  out.reserve(n);
  for (int i = 0; i < n; ++i) out.push_back(absl::StrCat("user-", 1000000 + i));
  return out;
}

// Shared by the threads of one benchmark run.
struct Fixture {
  SystemClock clock;
  MemoryStore store;
  Limiter limiter{*PlanSet::FromConfig(TwoLimitConfig()), &store, &clock, {}};
  std::vector<std::string> subjects = Subjects(kManySubjects);
};
Fixture* g_fixture = nullptr;

void Decide(const std::string& subject);

// Setup/teardown run once per benchmark run, before and after all of its threads.
void FreshStore(const benchmark::State&) { g_fixture = new Fixture; }
void MillionActiveSubjects(const benchmark::State& state) {
  FreshStore(state);
  for (const std::string& s : g_fixture->subjects) Decide(s);
}
void DropStore(const benchmark::State&) {
  delete g_fixture;
  g_fixture = nullptr;
}

void Decide(const std::string& subject) {
  bool allowed = false;
  g_fixture->limiter.Decide({.subject = subject, .plan = "free", .cost = 1},
                            [&](absl::StatusOr<Decision> d) { allowed = d.ok() && d->allowed; });
  benchmark::DoNotOptimize(allowed);
}

void BM_DecisionHotSubject(benchmark::State& state) {
  const std::string& subject = g_fixture->subjects[0];
  for (auto _ : state) Decide(subject);
  state.SetItemsProcessed(state.iterations());
}

void BM_DecisionMillionSubjects(benchmark::State& state) {
  // Each thread walks the subjects from its own offset with a stride that visits them all.
  size_t i = static_cast<size_t>(state.thread_index()) * 7919;
  for (auto _ : state) {
    Decide(g_fixture->subjects[i % kManySubjects]);
    i += 104729;  // prime stride: scattered accesses, as real traffic is
  }
  state.SetItemsProcessed(state.iterations());
}

// Cost as the number of active subjects grows (1 thread): the same scattered walk over `n`
// subjects, all created before timing starts, so growth in cost with n (cache and TLB misses) is
// visible.
void BM_DecisionScaling(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  size_t i = 0;
  for (auto _ : state) {
    Decide(g_fixture->subjects[i % n]);
    i += 104729;
  }
  state.SetItemsProcessed(state.iterations());
}
void ActiveSubjects(const benchmark::State& state) {
  FreshStore(state);
  for (int64_t i = 0; i < state.range(0); ++i) Decide(g_fixture->subjects[i]);
}

// Heap bytes held per active subject after `n` subjects each made one decision.
void BM_MemoryPerSubject(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  std::vector<std::string> subjects = Subjects(n);
  for (auto _ : state) {
    SystemClock clock;
    size_t before = mallinfo2().uordblks;
    auto store = std::make_unique<MemoryStore>();
    Limiter limiter(*PlanSet::FromConfig(TwoLimitConfig()), store.get(), &clock, {});
    for (const std::string& s : subjects) {
      limiter.Decide({.subject = s, .plan = "free", .cost = 1}, [](absl::StatusOr<Decision>) {});
    }
    size_t after = mallinfo2().uordblks;
    state.counters["bytes_per_subject"] =
        static_cast<double>(after - before) / static_cast<double>(n);
    state.counters["subjects"] = static_cast<double>(store->subject_count());
  }
}

BENCHMARK(BM_DecisionHotSubject)
    ->Setup(FreshStore)
    ->Teardown(DropStore)
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();
// Steady state with a million active subjects (all created before timing starts).
BENCHMARK(BM_DecisionMillionSubjects)
    ->Setup(MillionActiveSubjects)
    ->Teardown(DropStore)
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();
BENCHMARK(BM_DecisionScaling)
    ->Setup(ActiveSubjects)
    ->Teardown(DropStore)
    ->Arg(10'000)
    ->Arg(100'000)
    ->Arg(1'000'000)
    ->UseRealTime();
BENCHMARK(BM_MemoryPerSubject)
    ->Arg(10'000)
    ->Arg(100'000)
    ->Arg(1'000'000)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace sluice

BENCHMARK_MAIN();
