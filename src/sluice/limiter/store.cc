#include "sluice/limiter/store.h"

#include <optional>
#include <utility>

#include "absl/strings/cord.h"
#include "sluice/common/strings.h"

namespace sluice {
inline namespace limiter {
namespace {

constexpr std::string_view kPayloadUrl = "sluice/store_failure";
constexpr std::string_view kNames[kStoreFailureKinds] = {
    "other", "timeout", "connection", "circuit_open", "overloaded",
    "late",  "busy",    "oom",        "loading",      "readonly"};

}  // namespace

std::string_view StoreFailureName(StoreFailure f) {
  const auto i = static_cast<size_t>(f);
  return i < std::size(kNames) ? kNames[i] : kNames[0];
}

absl::Status WithStoreFailure(absl::Status status, StoreFailure kind) {
  status.SetPayload(ToAbsl(kPayloadUrl), absl::Cord(ToAbsl(StoreFailureName(kind))));
  return status;
}

void Store::DecideGroup(const StoreGroupRequest& req, GroupDecideCallback done) {
  (void)req;
  std::move(done)(absl::UnimplementedError("store: group decisions are not supported"));
}

namespace {
absl::Status NoReservations() {
  return absl::UnimplementedError("store: reservations are not supported by this store yet");
}
}  // namespace

void Store::Reserve(const StoreReserveRequest& req, DecideCallback done) {
  (void)req;
  std::move(done)(NoReservations());
}

void Store::Settle(const StoreSettleRequest& req, SettleCallback done) {
  (void)req;
  std::move(done)(NoReservations());
}

void Store::Extend(std::string_view subject, std::string_view id, absl::Time expires_at,
                   absl::Time now, ExtendCallback done) {
  (void)subject, (void)id, (void)expires_at, (void)now;
  std::move(done)(NoReservations());
}

void Store::DueReservations(absl::Time now, size_t max, DueCallback done) {
  (void)now, (void)max;
  std::move(done)(NoReservations());
}

StoreFailure StoreFailureOf(const absl::Status& status) {
  auto payload = status.GetPayload(ToAbsl(kPayloadUrl));
  if (!payload.has_value()) return StoreFailure::kOther;
  for (int i = 0; i < kStoreFailureKinds; ++i) {
    if (*payload == ToAbsl(kNames[i])) return static_cast<StoreFailure>(i);
  }
  return StoreFailure::kOther;
}

}  // namespace limiter
}  // namespace sluice
