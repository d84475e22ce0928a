#include "sluice/common/subject.h"

#include <string>
#include <string_view>

#include "gtest/gtest.h"

namespace sluice {
namespace {

TEST(IsValidSubjectTest, AcceptsTheSubjectAlphabetUpTo200Bytes) {
  EXPECT_TRUE(IsValidSubject("user-42"));
  EXPECT_TRUE(IsValidSubject("ip:2001:db8::1/128"));
  EXPECT_TRUE(IsValidSubject("a.b_c:d@e/f+g=h-i"));
  EXPECT_TRUE(IsValidSubject(std::string(200, 'a')));
}

TEST(IsValidSubjectTest, RejectsEmptyTooLongAndOtherCharacters) {
  EXPECT_FALSE(IsValidSubject(""));
  EXPECT_FALSE(IsValidSubject(std::string(201, 'a')));
  EXPECT_FALSE(IsValidSubject("user 1"));
  EXPECT_FALSE(IsValidSubject("user\n1"));
  EXPECT_FALSE(IsValidSubject(std::string_view("user\0", 5)));
  EXPECT_FALSE(IsValidSubject("usér"));
  EXPECT_FALSE(IsValidSubject("a,b"));
  EXPECT_FALSE(IsValidSubject("\xff"));
  EXPECT_FALSE(IsValidSubject("a#"));
  EXPECT_FALSE(IsValidSubject("[a]"));
}

}  // namespace
}  // namespace sluice
