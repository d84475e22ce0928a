// Test helper for the limiter's tests: a Store with exact all-or-nothing counters that counts its
// calls and fails on cue. Header-only.
#ifndef SLUICE_LIMITER_TEST_COUNTING_STORE_H_
#define SLUICE_LIMITER_TEST_COUNTING_STORE_H_

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "sluice/limiter/store.h"

namespace sluice::testing_util {

// A store with exact all-or-nothing counters (no alerts, no expiry) that counts its calls, or
// fails every call with `failure` when set. A report (DecideMode::kReport) is admitted and
// charged whatever the counters.
class CountingStore final : public Store {
 public:
  void Decide(const StoreRequest& req, DecideCallback done) override {
    ++decides;
    if (failure.has_value()) {
      std::move(done)(WithStoreFailure(absl::UnavailableError("down"), *failure));
      return;
    }
    std::vector<int64_t>& used = Counters(req);
    StoreResult result{.allowed = true};
    for (size_t i = 0; i < used.size(); ++i) {
      if (used[i] + req.cost > req.plan->limits[i].quota && req.mode == DecideMode::kAdmit) {
        result.allowed = false;
      }
    }
    for (size_t i = 0; i < used.size(); ++i) {
      if (result.allowed) used[i] += req.cost;
      result.used.push_back(used[i]);
    }
    std::move(done)(std::move(result));
  }
  void DecideGroup(const StoreGroupRequest& req, GroupDecideCallback done) override {
    ++decides;
    if (failure.has_value()) {
      std::move(done)(WithStoreFailure(absl::UnavailableError("down"), *failure));
      return;
    }
    StoreGroupResult result{.allowed = true};
    for (const StoreRequest& part : req.parts) {
      std::vector<int64_t>& used = Counters(part);
      for (size_t i = 0; i < used.size(); ++i) {
        if (used[i] + part.cost > part.plan->limits[i].quota && part.mode == DecideMode::kAdmit) {
          result.allowed = false;
        }
      }
    }
    for (const StoreRequest& part : req.parts) {
      std::vector<int64_t>& used = Counters(part);
      StoreResult& r = result.parts.emplace_back();
      r.allowed = result.allowed;
      for (size_t i = 0; i < used.size(); ++i) {
        if (result.allowed) used[i] += part.cost;
        r.used.push_back(used[i]);
      }
    }
    std::move(done)(std::move(result));
  }
  void Usage(const StoreRequest&, UsageCallback done) override {
    std::move(done)(absl::UnimplementedError("not needed"));
  }
  void Reset(const StoreRequest& req, std::optional<size_t>, StatusCallback done) override {
    Counters(req).assign(req.plan->limits.size(), 0);
    std::move(done)(absl::OkStatus());
  }

  uint64_t shrinks() const override { return shrink_count; }
  // Takes `cost` back from every counter, as RedisStore's refund of a late admission does.
  void Refund(int64_t cost) {
    for (auto& [key, used] : counters_) {
      for (int64_t& u : used) u -= cost;
    }
    ++shrink_count;
  }

  int decides = 0;
  uint64_t shrink_count = 0;
  std::optional<StoreFailure> failure;

 private:
  std::vector<int64_t>& Counters(const StoreRequest& req) {
    std::string key = std::string(req.subject);
    for (const WindowBounds& w : req.windows) key += ":" + std::to_string(w.id);
    std::vector<int64_t>& used = counters_[key];
    used.resize(req.plan->limits.size());
    return used;
  }
  std::map<std::string, std::vector<int64_t>> counters_;
};

}  // namespace sluice::testing_util

#endif  // SLUICE_LIMITER_TEST_COUNTING_STORE_H_
