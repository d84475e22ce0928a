// The subject rule (docs/semantics.md): who a decision counts for. Every layer that takes a subject
// from outside — the configuration's keys, a request, the admin API, a snapshot — checks it here.
#ifndef SLUICE_COMMON_SUBJECT_H_
#define SLUICE_COMMON_SUBJECT_H_

#include <array>
#include <cstddef>
#include <string_view>

namespace sluice {
inline namespace common {

inline constexpr size_t kMaxSubjectLength = 200;

namespace subject_internal {
// Every request's subject is checked, so this is a table, not a search per byte.
inline constexpr std::array<bool, 256> kSubjectBytes = [] {
  std::array<bool, 256> ok{};
  for (char c = '0'; c <= '9'; ++c) ok[static_cast<unsigned char>(c)] = true;
  for (char c = 'A'; c <= 'Z'; ++c) ok[static_cast<unsigned char>(c)] = true;
  for (char c = 'a'; c <= 'z'; ++c) ok[static_cast<unsigned char>(c)] = true;
  for (char c : std::string_view("._:@/+=-")) ok[static_cast<unsigned char>(c)] = true;
  return ok;
}();
}  // namespace subject_internal

// True if `c` may stand in a subject: one of [A-Za-z0-9._:@/+=-].
[[nodiscard]] constexpr bool IsSubjectByte(char c) {
  return subject_internal::kSubjectBytes[static_cast<unsigned char>(c)];
}

// True if `subject` is 1-200 bytes of which each IsSubjectByte.
[[nodiscard]] bool IsValidSubject(std::string_view subject);

// Subjects beginning "rl:" hold the counters of envoyproxy/ratelimit rules (docs/gateways.md):
// sluice makes them, nobody names them. The configuration, the registry and requests naming a
// subject refuse them, so no customer or client can read or spend a rule's counter.
inline constexpr std::string_view kRuleSubjectPrefix = "rl:";
[[nodiscard]] inline bool IsRuleSubject(std::string_view subject) {
  return subject.substr(0, kRuleSubjectPrefix.size()) == kRuleSubjectPrefix;
}

}  // namespace common
}  // namespace sluice

#endif  // SLUICE_COMMON_SUBJECT_H_
