// The bounds the values of sluice.yaml are checked against (docs/configuration.md lists them), and
// what one configuration file may hold. Internal to the config module.
#ifndef SLUICE_CONFIG_LIMITS_H_
#define SLUICE_CONFIG_LIMITS_H_

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace sluice::config {

// The largest quota: the limiter's arithmetic relies on it.
inline constexpr int64_t kMaxQuota = 1'000'000'000'000'000;
// A quota of 0 is a credit limit's only: a subject may start with nothing granted.
inline constexpr absl::string_view kZeroQuotaMessage =
    "must be at least 1 (0 only for a limit with window: credit)";
inline constexpr size_t kMaxAlertThresholds = 16;
inline constexpr size_t kMaxNameLength = 64;
inline constexpr size_t kMaxKeyPrefixLength = 32;
inline constexpr size_t kMaxEmailLength = 254;
inline constexpr size_t kMaxPathLength = 4096;  // PATH_MAX
inline constexpr absl::string_view kNameRule = "1-64 characters of A-Z a-z 0-9 _ . -";

// What a configuration file may hold before yaml-cpp builds a tree of it: a hostile or mistaken
// file (a device, a log, a deeply nested or alias-bomb document) is refused with a message instead
// of exhausting memory, time or the stack.
inline constexpr size_t kMaxFileBytes = size_t{16} << 20;  // 16 MiB
inline constexpr size_t kMaxDepth = 64;                    // the schema itself needs 6 levels
// Values in the document with every alias expanded: an alias costs as much as what it names, so a
// "billion laughs" document is refused before the config structs copy it out.
inline constexpr uint64_t kMaxExpandedValues = 4'000'000;  // ~570,000 keys in the file
// yaml-cpp reads a whole flow collection ("[a, b, ...]") ahead before it reports any of it, at a
// few hundred bytes per entry, so BoundsCheck alone would stop an 8-million-entry list only after
// gigabytes. Every entry but the last follows a ',', so counting commas (wherever they are) bounds
// that before parsing; a real configuration has a few per key at most.
inline constexpr size_t kMaxCommas = 2'000'000;

// Duration bounds (docs/configuration.md lists them). A value outside them is a typo or a unit
// mix-up: a 3,000,000h Redis timeout would hold every decision as long as Redis is slow.
inline constexpr absl::Duration kMinSnapshotInterval = absl::Milliseconds(100);
inline constexpr absl::Duration kMaxSnapshotInterval = absl::Hours(1);
inline constexpr absl::Duration kMinRedisTimeout = absl::Milliseconds(1);
inline constexpr absl::Duration kMaxRedisTimeout = absl::Seconds(10);
inline constexpr absl::Duration kMaxRedisMaxWait = absl::Seconds(60);
inline constexpr absl::Duration kMinAlertLease = absl::Seconds(1);
inline constexpr absl::Duration kMaxAlertLease = absl::Hours(1);
inline constexpr absl::Duration kMinRetryDelay = absl::Milliseconds(100);
inline constexpr absl::Duration kMaxRetryFirstDelay = absl::Hours(1);
inline constexpr absl::Duration kMaxRetryMaxDelay = absl::Hours(24);

// The gRPC listener's timeouts (docs/configuration.md). A connection checks them about once a
// second, so less than a second would not be kept; the upper bounds keep a unit mix-up (5h for
// 5s) from holding a stalled connection for hours.
inline constexpr absl::Duration kMinGrpcTimeout = absl::Seconds(1);
inline constexpr absl::Duration kMaxGrpcHandshakeTimeout = absl::Minutes(5);
inline constexpr absl::Duration kMaxGrpcIdleTimeout = absl::Hours(24);
inline constexpr absl::Duration kMaxGrpcRequestTimeout = absl::Minutes(10);
inline constexpr absl::Duration kMaxGrpcWriteTimeout = absl::Minutes(10);

}  // namespace sluice::config

#endif  // SLUICE_CONFIG_LIMITS_H_
