#include "sluice/frontend/resolve.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sluice/common/digest.h"
#include "sluice/common/subject.h"
#include "sluice/frontend/frontend.h"
#include "sluice/frontend/key_registry.h"
#include "sluice/registry/effective_plan.h"
#include "sluice/registry/index.h"

namespace sluice::frontend {
namespace {

bool Refuse(Refusal* refusal, unsigned status, std::string_view title, std::string detail) {
  refusal->status = status;
  refusal->title = std::string(title);
  refusal->detail = std::move(detail);
  return false;
}

bool Disabled(const registry::Subject& record, Refusal* refusal) {
  refusal->disabled = true;
  return Refuse(refusal, 403, "Forbidden", absl::StrCat("subject \"", record.id, "\" is disabled"));
}

// Fills `target` from a registry subject. False (and `refusal` set) if it may not be decided.
bool FromRecord(const Frontend& fe, std::shared_ptr<const registry::Subject> record, absl::Time now,
                Target* target, Refusal* refusal) {
  if (record->disabled) return Disabled(*record, refusal);
  target->subject = record->id;
  target->plan = record->plan;
  target->effective =
      registry::EffectivePlan(fe.limiter->plans(), *record, now, &target->effective_storage);
  if (target->effective == nullptr) {
    // Another instance's configuration may know a plan this one does not (yet).
    return Refuse(refusal, 503, "Service Unavailable",
                  absl::StrCat("subject \"", record->id, "\" is on plan \"", record->plan,
                               "\", which this instance's configuration does not define"));
  }
  target->record = std::move(record);
  return true;
}

}  // namespace

bool ResolveKey(const Frontend& fe, const registry::Index* index, std::string_view key,
                absl::Time now, Target* target, Refusal* refusal) {
  if (key.size() > kMaxApiKeyLength) return Refuse(refusal, 401, "Unauthorized", "unknown API key");
  // The same digest type the registry indexes keys by (registry::Digest): looked up as it is.
  const std::optional<Sha256Digest> digest = Sha256(key);
  if (!digest) return Refuse(refusal, 401, "Unauthorized", "unknown API key");
  if (const KeyEntry* entry = fe.keys.FindDigest(*digest)) {
    target->subject = entry->subject;
    target->plan = entry->plan;
    return true;
  }
  if (index != nullptr) {
    registry::Index::KeyLookup found = index->FindByDigest(*digest, now);
    if (found.state == registry::Index::KeyState::kValid) {
      target->key_id = found.key_id;
      return FromRecord(fe, std::move(found.subject), now, target, refusal);
    }
    if (found.state == registry::Index::KeyState::kExpired) {
      return Refuse(refusal, 401, "Unauthorized", "API key expired");
    }
    if (!index->loaded()) {
      // A shared registry still loading (Redis unreachable at start): the key may be in it.
      refusal->retry_soon = true;
      return Refuse(refusal, 503, "Service Unavailable",
                    "the registry of API keys is still loading; retry shortly");
    }
  }
  return Refuse(refusal, 401, "Unauthorized", "unknown API key");
}

bool ResolveSubject(const Frontend& fe, const registry::Index* index, std::string subject,
                    std::string plan, absl::Time now, Target* target, Refusal* refusal) {
  if (IsRuleSubject(subject)) {
    return Refuse(refusal, 400, "Bad Request",
                  "subject: subjects beginning \"rl:\" are reserved (envoy.ratelimit_config's "
                  "counters)");
  }
  std::shared_ptr<const registry::Subject> record =
      index != nullptr ? index->FindSubject(subject) : nullptr;
  if (plan.empty()) {
    // A subject alone: its plan from the registry (or from the config file's keys).
    if (record != nullptr) return FromRecord(fe, std::move(record), now, target, refusal);
    if (const KeyEntry* entry = fe.keys.FindSubject(subject)) {
      target->subject = entry->subject;
      target->plan = entry->plan;
      return true;
    }
    if (index != nullptr && !index->loaded()) {
      // A shared registry still loading (Redis unreachable at start): the subject may be in it.
      // (With a plan named, the decision goes on as the store allows: on_store_error decides.)
      refusal->retry_soon = true;
      return Refuse(refusal, 503, "Service Unavailable",
                    "the registry is still loading; retry shortly");
    }
    return Refuse(
        refusal, 400, "Bad Request",
        absl::StrCat("plan: required (subject \"", subject, "\" is not in the registry)"));
  }
  // A registry subject named with its own plan keeps its overrides; a disabled one is refused
  // whatever plan is named.
  if (record != nullptr && record->disabled) return Disabled(*record, refusal);
  if (record != nullptr && record->plan == plan) {
    return FromRecord(fe, std::move(record), now, target, refusal);
  }
  target->subject = std::move(subject);
  target->plan = std::move(plan);
  return true;
}

}  // namespace sluice::frontend
