#include "sluice/common/hex.h"

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "gtest/gtest.h"

namespace sluice {
namespace {

TEST(HexDigitValueTest, TakesDigitsAndLettersOfEitherCase) {
  EXPECT_EQ(HexDigitValue('0'), 0);
  EXPECT_EQ(HexDigitValue('9'), 9);
  EXPECT_EQ(HexDigitValue('a'), 10);
  EXPECT_EQ(HexDigitValue('f'), 15);
  EXPECT_EQ(HexDigitValue('A'), 10);
  EXPECT_EQ(HexDigitValue('F'), 15);
}

TEST(HexDigitValueTest, RefusesEverythingElse) {
  for (const char c : std::string_view("gG/:@`xX \0%-+", 13)) {
    EXPECT_EQ(HexDigitValue(c), -1) << "'" << c << "'";
  }
  EXPECT_EQ(HexDigitValue('\xff'), -1);
}

TEST(HexDigitValueTest, LowerCaseOnlyRefusesUpperCaseLetters) {
  EXPECT_EQ(HexDigitValue('c', HexLetters::kLowerCase), 12);
  EXPECT_EQ(HexDigitValue('7', HexLetters::kLowerCase), 7);
  EXPECT_EQ(HexDigitValue('C', HexLetters::kLowerCase), -1);
}

TEST(DecodeHexTest, DecodesEitherCaseIntoFixedSizeBytes) {
  std::array<uint8_t, 4> out{};
  ASSERT_TRUE(DecodeHex("00Ff7a80", out).ok());
  EXPECT_EQ(out, (std::array<uint8_t, 4>{0x00, 0xff, 0x7a, 0x80}));
}

TEST(DecodeHexTest, FixedSizeRefusesAnotherLengthByName) {
  std::array<uint8_t, 2> out{};
  const absl::Status s = DecodeHex("abc", out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "not 4 hex digits");
  EXPECT_FALSE(DecodeHex("abcdef", out).ok());
  EXPECT_FALSE(DecodeHex("", out).ok());
}

TEST(DecodeHexTest, NamesTheOffsetOfTheFirstNonDigitButNotTheText) {
  std::array<uint8_t, 2> out{};
  const absl::Status s = DecodeHex("a#cd", out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "not a hex digit at offset 1");
  EXPECT_EQ(DecodeHex("abcZ", out).message(), "not a hex digit at offset 3");
  EXPECT_EQ(DecodeHex("x0", std::span<uint8_t>(out.data(), 1)).message(),
            "not a hex digit at offset 0");
}

TEST(DecodeHexTest, DecodesAnyEvenLengthToAString) {
  absl::StatusOr<std::string> bytes = DecodeHex("48692100FF");
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, std::string("Hi!\0\xff", 5));
  bytes = DecodeHex("");
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(*bytes, "");
}

TEST(DecodeHexTest, StringFormRefusesAnOddLengthAndNonDigits) {
  EXPECT_EQ(DecodeHex("abc").status().message(), "an odd number of hex digits");
  EXPECT_EQ(DecodeHex("ab g").status().message(), "not a hex digit at offset 2");
  EXPECT_EQ(DecodeHex("0x12").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(EncodeHexTest, WritesLowerCaseTwoDigitsAByte) {
  EXPECT_EQ(EncodeHex(std::array<uint8_t, 4>{0x00, 0xff, 0x7a, 0x0b}), "00ff7a0b");
  EXPECT_EQ(EncodeHex(std::string_view("Hi!\0\xff", 5)), "48692100ff");
  EXPECT_EQ(EncodeHex(std::string_view()), "");
}

TEST(EncodeHexTest, RoundTripsThroughDecode) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  absl::StatusOr<std::string> back = DecodeHex(EncodeHex(all));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, all);
}

TEST(Hex64Test, EncodesSixteenZeroPaddedLowerCaseDigits) {
  EXPECT_EQ(EncodeHex64(0), "0000000000000000");
  EXPECT_EQ(EncodeHex64(0xabc), "0000000000000abc");
  EXPECT_EQ(EncodeHex64(0xfedcba9876543210ULL), "fedcba9876543210");
}

TEST(Hex64Test, DecodesExactlySixteenDigits) {
  EXPECT_EQ(DecodeHex64("fedcba9876543210"), 0xfedcba9876543210ULL);
  EXPECT_EQ(DecodeHex64("FEDCBA9876543210"), 0xfedcba9876543210ULL);
  EXPECT_EQ(DecodeHex64("0000000000000001"), 1u);
  EXPECT_EQ(DecodeHex64("000000000000001"), std::nullopt);
  EXPECT_EQ(DecodeHex64("00000000000000001"), std::nullopt);
  EXPECT_EQ(DecodeHex64("0x00000000000001"), std::nullopt);
  EXPECT_EQ(DecodeHex64("+000000000000001"), std::nullopt);
  EXPECT_EQ(DecodeHex64(" 000000000000001"), std::nullopt);
}

TEST(Hex64Test, LowerCaseOnlyRefusesUpperCaseLetters) {
  EXPECT_EQ(DecodeHex64("00000000000000ab", HexLetters::kLowerCase), 0xabu);
  EXPECT_EQ(DecodeHex64("00000000000000AB", HexLetters::kLowerCase), std::nullopt);
}

}  // namespace
}  // namespace sluice
