// libsluice: the public entry point. Include this header to embed sluice in a C++ program:
//
//   absl::StatusOr<sluice::config::Config> cfg = sluice::config::LoadConfigFile("sluice.yaml");
//   absl::StatusOr<sluice::PlanSet> plans = sluice::PlanSet::FromConfig(*cfg);
//   sluice::SystemClock clock;
//   sluice::MemoryStore store;
//   sluice::Limiter limiter(std::move(*plans), &store, &clock, {});
//   limiter.Decide({.subject = "user-42", .plan = "free", .cost = 1},
//                  [](absl::StatusOr<sluice::Decision> d) { /* d->allowed, d->limits ... */ });
//
// Thread-safety, ownership and callback rules are stated on each class.
#ifndef SLUICE_SLUICE_H_
#define SLUICE_SLUICE_H_

#include "sluice/common/clock.h"
#include "sluice/config/config.h"
#include "sluice/limiter/decision.h"
#include "sluice/limiter/limiter.h"
#include "sluice/limiter/plan.h"
#include "sluice/limiter/store.h"
#include "sluice/store/memory/memory_store.h"
#include "sluice/store/memory/snapshot.h"

#endif  // SLUICE_SLUICE_H_
