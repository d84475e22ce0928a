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

}  // namespace sluice

#endif  // SLUICE_COMMON_SUBJECT_H_
