#include "sluice/common/subject.h"

#include <array>

namespace sluice {
namespace {

// Every request's subject is checked, so this is a table, not a search per byte.
constexpr std::array<bool, 256> kSubjectBytes = [] {
  std::array<bool, 256> ok{};
  for (char c = '0'; c <= '9'; ++c) ok[static_cast<unsigned char>(c)] = true;
  for (char c = 'A'; c <= 'Z'; ++c) ok[static_cast<unsigned char>(c)] = true;
  for (char c = 'a'; c <= 'z'; ++c) ok[static_cast<unsigned char>(c)] = true;
  for (char c : std::string_view("._:@/+=-")) ok[static_cast<unsigned char>(c)] = true;
  return ok;
}();

}  // namespace

bool IsValidSubject(std::string_view subject) {
  if (subject.empty() || subject.size() > kMaxSubjectLength) return false;
  for (char c : subject) {
    if (!kSubjectBytes[static_cast<unsigned char>(c)]) return false;
  }
  return true;
}

}  // namespace sluice
