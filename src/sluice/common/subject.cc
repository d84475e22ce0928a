#include "sluice/common/subject.h"

#include <string_view>

namespace sluice {
inline namespace common {

bool IsValidSubject(std::string_view subject) {
  if (subject.empty() || subject.size() > kMaxSubjectLength) return false;
  for (char c : subject) {
    if (!IsSubjectByte(c)) return false;
  }
  return true;
}

}  // namespace common
}  // namespace sluice
