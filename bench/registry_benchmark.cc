// The registry Index on the decision path: FindByDigest with 10 and with 1,000,000 keys, the full
// load (Replace) of 1,000,000 subjects with one key each, the memory that load holds, and the
// SQLite backend's Start (open and load) of such a registry.
//
//   cmake --preset release && cmake --build build/release -j2 --target registry_benchmark
//   build/release/bench/registry_benchmark
//
// BM_Replace reports heap_per_key (malloc'd bytes the loaded index holds, the input freed),
// rss_per_key (the process's resident set growth over the same span) and heap_per_active_key
// (after a lookup of every key, when each subject holds the Subject its lookup made).
#include <malloc.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <sqlite3.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "sluice/registry/index.h"
#include "sluice/registry/keys.h"
#include "sluice/registry/sqlite_backend.h"

namespace sluice::registry {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'700'000'000);

// Subjects "user-1000000"... on "free", each with one key "sk_<n>" (prefix and all, no name).
void Build(int n, std::vector<Subject>* subjects, std::vector<Key>* keys) {
  subjects->reserve(n);
  keys->reserve(n);
  for (int i = 0; i < n; ++i) {
    Subject s;
    s.id = absl::StrCat("user-", 1'000'000 + i);
    s.plan = "free";
    s.created_at = s.updated_at = kT0;
    Key k;
    k.id = static_cast<uint64_t>(i) + 1;
    k.subject = s.id;
    const std::string plaintext = absl::StrCat("sk_", i);
    k.digest = DigestOf(plaintext);
    k.prefix = plaintext.substr(0, 8);
    k.created_at = kT0;
    subjects->push_back(std::move(s));
    keys->push_back(std::move(k));
  }
}

size_t HeapBytes() { return mallinfo2().uordblks; }

size_t RssBytes() {
  long pages = 0;
  long resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return static_cast<size_t>(resident) * static_cast<size_t>(::sysconf(_SC_PAGESIZE));
}

void BM_Replace(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  double heap_per_key = 0;
  double rss_per_key = 0;
  double heap_per_active_key = 0;
  for (auto _ : state) {
    state.PauseTiming();
    ::malloc_trim(0);
    const size_t heap0 = HeapBytes();
    const size_t rss0 = RssBytes();
    auto index = std::make_unique<Index>();
    std::vector<Subject> subjects;
    std::vector<Key> keys;
    Build(n, &subjects, &keys);
    state.ResumeTiming();
    index->Replace(std::move(subjects), std::move(keys));
    state.PauseTiming();
    ::malloc_trim(0);
    heap_per_key = static_cast<double>(HeapBytes() - heap0) / n;
    rss_per_key = static_cast<double>(RssBytes() - rss0) / n;
    // Every subject active: each keeps the Subject its lookup made.
    for (int i = 0; i < n; ++i) {
      benchmark::DoNotOptimize(index->FindByDigest(DigestOf(absl::StrCat("sk_", i)), kT0));
    }
    heap_per_active_key = static_cast<double>(HeapBytes() - heap0) / n;
    index.reset();
    state.ResumeTiming();
  }
  state.counters["heap_per_key"] = heap_per_key;
  state.counters["rss_per_key"] = rss_per_key;
  state.counters["heap_per_active_key"] = heap_per_active_key;
}
BENCHMARK(BM_Replace)->Arg(1'000'000)->Unit(benchmark::kMillisecond)->Iterations(3);

struct Loaded {
  Index index;
  std::vector<Digest> digests;
};

// One index per size, loaded once and shared by the threads of every run.
Loaded* LoadedIndex(int n) {
  static std::unique_ptr<Loaded> loaded[2];
  std::unique_ptr<Loaded>& slot = loaded[n > 10 ? 1 : 0];
  if (!slot) {
    slot = std::make_unique<Loaded>();
    std::vector<Subject> subjects;
    std::vector<Key> keys;
    Build(n, &subjects, &keys);
    for (const Key& k : keys) slot->digests.push_back(k.digest);
    slot->index.Replace(std::move(subjects), std::move(keys));
    // The steady state: every subject has been looked up once and holds its Subject.
    for (const Digest& d : slot->digests)
      benchmark::DoNotOptimize(slot->index.FindByDigest(d, kT0));
  }
  return slot.get();
}

// Each thread walks the keys in a scattered order, as independent clients would arrive.
void BM_FindByDigest(benchmark::State& state) {
  Loaded* loaded = LoadedIndex(static_cast<int>(state.range(0)));
  const size_t n = loaded->digests.size();
  size_t i = static_cast<size_t>(state.thread_index()) * 7919;
  const absl::Time now = absl::Now();
  for (auto _ : state) {
    i = (i + 104'729) % n;  // a prime step visits every key
    Index::KeyLookup found = loaded->index.FindByDigest(loaded->digests[i], now);
    benchmark::DoNotOptimize(found);
  }
}
BENCHMARK(BM_FindByDigest)->Arg(10)->Arg(1'000'000)->ThreadRange(1, 2)->UseRealTime();

void BM_FindByDigestUnknown(benchmark::State& state) {
  Loaded* loaded = LoadedIndex(static_cast<int>(state.range(0)));
  const Digest unknown = DigestOf("sk_not_a_key");
  const absl::Time now = absl::Now();
  for (auto _ : state) benchmark::DoNotOptimize(loaded->index.FindByDigest(unknown, now));
}
BENCHMARK(BM_FindByDigestUnknown)->Arg(1'000'000);

// A registry file of `n` subjects with a key each, written directly (one transaction) after the
// backend has created the schema.
std::string RegistryFile(int n) {
  const std::string path =
      (std::filesystem::temp_directory_path() / absl::StrCat("registry_benchmark_", n, ".db"))
          .string();
  for (const char* suffix : {"", "-wal", "-shm", ".lock"}) {
    std::filesystem::remove(path + suffix);
  }
  { (void)*SqliteBackend::Open({.path = path}); }
  sqlite3* db = nullptr;
  sqlite3_open(path.c_str(), &db);
  sqlite3_exec(db, "PRAGMA journal_mode = WAL; BEGIN", nullptr, nullptr, nullptr);
  sqlite3_stmt* subject = nullptr;
  sqlite3_stmt* key = nullptr;
  sqlite3_prepare_v2(db,
                     "INSERT INTO subjects VALUES (?1, 'free', '', '', '', '{}', 0, '[]', "
                     "1700000000000000, 1700000000000000)",
                     -1, &subject, nullptr);
  sqlite3_prepare_v2(db, "INSERT INTO keys VALUES (?1, ?2, ?3, ?4, '', NULL, 1700000000000000)", -1,
                     &key, nullptr);
  for (int i = 0; i < n; ++i) {
    const std::string id = absl::StrCat("user-", 1'000'000 + i);
    const std::string plaintext = absl::StrCat("sk_", i);
    const Digest digest = DigestOf(plaintext);
    sqlite3_bind_text(subject, 1, id.data(), static_cast<int>(id.size()), SQLITE_TRANSIENT);
    sqlite3_step(subject);
    sqlite3_reset(subject);
    sqlite3_bind_int64(key, 1, i + 1);
    sqlite3_bind_blob(key, 2, digest.data(), static_cast<int>(digest.size()), SQLITE_TRANSIENT);
    sqlite3_bind_text(key, 3, id.data(), static_cast<int>(id.size()), SQLITE_TRANSIENT);
    sqlite3_bind_text(key, 4, plaintext.data(), 8, SQLITE_TRANSIENT);
    sqlite3_step(key);
    sqlite3_reset(key);
  }
  sqlite3_finalize(subject);
  sqlite3_finalize(key);
  sqlite3_exec(db, "COMMIT; PRAGMA wal_checkpoint(TRUNCATE)", nullptr, nullptr, nullptr);
  sqlite3_close(db);
  return path;
}

void BM_SqliteStart(benchmark::State& state) {
  const std::string path = RegistryFile(static_cast<int>(state.range(0)));
  for (auto _ : state) {
    Index index;
    absl::StatusOr<std::unique_ptr<SqliteBackend>> backend = SqliteBackend::Open({.path = path});
    if (!backend.ok() || !(*backend)->Start(&index).ok()) {
      state.SkipWithError("cannot open the registry");
      break;
    }
    if (index.key_count() != static_cast<size_t>(state.range(0))) {
      state.SkipWithError("not every key was loaded");
      break;
    }
    state.PauseTiming();
    backend->reset();
    state.ResumeTiming();
  }
  for (const char* suffix : {"", "-wal", "-shm", ".lock"}) std::filesystem::remove(path + suffix);
}
BENCHMARK(BM_SqliteStart)->Arg(1'000'000)->Unit(benchmark::kMillisecond)->Iterations(2);

}  // namespace
}  // namespace sluice::registry

BENCHMARK_MAIN();
