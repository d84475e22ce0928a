// libsluice: sluice's rate limiter embedded in a C++20 program (docs/library.md). Include this
// header, link sluice::sluice (CMake) or `pkg-config --libs sluice`.
//
// Everything public is in namespace sluice::lib and in these headers, which use only the standard
// library:
//   sluice/status.h   Status and Result<T>: the error model (no exceptions)
//   sluice/options.h  Options: plans, store (memory or Redis), store-error policy, alerts, clock
//   sluice/limiter.h  Limiter: Open, Decide, DecideAsync, Reserve, Settle, Release, Extend,
//                     Usage, ResetUsage, Close
#ifndef SLUICE_SLUICE_H_
#define SLUICE_SLUICE_H_

#include "sluice/limiter.h"
#include "sluice/options.h"
#include "sluice/status.h"

#endif  // SLUICE_SLUICE_H_
