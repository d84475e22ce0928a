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

TEST(IsSubjectByteTest, IsExactlyTheSubjectAlphabet) {
  const std::string_view alphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:@/+=-";
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    EXPECT_EQ(IsSubjectByte(c), alphabet.find(c) != std::string_view::npos) << "byte " << b;
  }
}

TEST(IsSubjectByteTest, IsWhatIsValidSubjectChecksOfEachByte) {
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    EXPECT_EQ(IsSubjectByte(c), IsValidSubject(std::string(1, c))) << "byte " << b;
    EXPECT_EQ(IsSubjectByte(c), IsValidSubject(std::string("a") + c + "b")) << "byte " << b;
  }
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
