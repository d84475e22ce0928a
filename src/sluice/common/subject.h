// The subject rule (docs/semantics.md): who a decision counts for. Every layer that takes a subject
// from outside — the configuration's keys, a request, the admin API, a snapshot — checks it here.
#ifndef SLUICE_COMMON_SUBJECT_H_
#define SLUICE_COMMON_SUBJECT_H_

#include <cstddef>
#include <string_view>

namespace sluice {

inline constexpr size_t kMaxSubjectLength = 200;

// True if `subject` is 1-200 bytes of [A-Za-z0-9._:@/+=-].
[[nodiscard]] bool IsValidSubject(std::string_view subject);

// Subjects beginning "rl:" hold the counters of envoyproxy/ratelimit rules (docs/gateways.md):
// sluice makes them, nobody names them. The configuration, the registry and requests naming a
// subject refuse them, so no customer or client can read or spend a rule's counter.
inline constexpr std::string_view kRuleSubjectPrefix = "rl:";
[[nodiscard]] inline bool IsRuleSubject(std::string_view subject) {
  return subject.substr(0, kRuleSubjectPrefix.size()) == kRuleSubjectPrefix;
}

}  // namespace sluice

#endif  // SLUICE_COMMON_SUBJECT_H_
