#include "sluice/store/redis/resp.h"

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::redis {
namespace {

using ::testing::HasSubstr;
using Type = Reply::Type;

Reply Str(std::string s) { return Reply{.type = Type::kString, .str = std::move(s)}; }
Reply Int(int64_t i) { return Reply{.type = Type::kInteger, .integer = i}; }
Reply Arr(std::vector<Reply> e) { return Reply{.type = Type::kArray, .elements = std::move(e)}; }

// Feeds `bytes` in one go and expects exactly one reply.
Reply ParseOne(std::string_view bytes) {
  ReplyReader reader;
  reader.Feed(bytes);
  auto next = reader.Next();
  EXPECT_TRUE(next.ok()) << next.status();
  if (!next.ok() || !next->has_value()) {
    ADD_FAILURE() << "no reply for " << bytes;
    return {};
  }
  Reply reply = std::move(**next);
  auto after = reader.Next();
  EXPECT_TRUE(after.ok() && !after->has_value());
  EXPECT_EQ(reader.buffered_bytes(), 0u);
  return reply;
}

TEST(EncodeCommandTest, EncodesArgvAsArrayOfBulkStrings) {
  EXPECT_EQ(EncodeCommand({"GET", "key"}), "*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n");
  EXPECT_EQ(EncodeCommand({"PING"}), "*1\r\n$4\r\nPING\r\n");
}

TEST(EncodeCommandTest, EmptyArgvAndEmptyArgument) {
  EXPECT_EQ(EncodeCommand(std::span<const std::string_view>{}), "*0\r\n");
  EXPECT_EQ(EncodeCommand({"SET", "k", ""}), "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n");
}

TEST(EncodeCommandTest, BinaryArgumentsAreLengthPrefixed) {
  const std::string binary("a\r\nb\0c", 6);
  const std::vector<std::string_view> argv = {"SET", binary};
  EXPECT_EQ(EncodeCommand(argv), std::string("*2\r\n$3\r\nSET\r\n$6\r\na\r\nb\0c\r\n", 25));
}

TEST(ReplyReaderTest, DecodesStatus) {
  Reply r = ParseOne("+OK\r\n");
  EXPECT_TRUE(r.is_status());
  EXPECT_EQ(r.str, "OK");
}

TEST(ReplyReaderTest, DecodesErrorReplyAsValueNotStatus) {
  Reply r = ParseOne("-ERR unknown command\r\n");
  EXPECT_TRUE(r.is_error());
  EXPECT_EQ(r.str, "ERR unknown command");
}

TEST(ReplyReaderTest, DecodesIntegers) {
  EXPECT_EQ(ParseOne(":42\r\n"), Int(42));
  EXPECT_EQ(ParseOne(":-7\r\n"), Int(-7));
  EXPECT_EQ(ParseOne(":9223372036854775807\r\n"), Int(INT64_MAX));
}

TEST(ReplyReaderTest, DecodesNilBulkAndNilArray) {
  EXPECT_TRUE(ParseOne("$-1\r\n").is_nil());
  EXPECT_TRUE(ParseOne("*-1\r\n").is_nil());
}

TEST(ReplyReaderTest, DecodesBulkStrings) {
  EXPECT_EQ(ParseOne("$5\r\nhello\r\n"), Str("hello"));
  EXPECT_EQ(ParseOne("$0\r\n\r\n"), Str(""));
  EXPECT_EQ(ParseOne(std::string("$4\r\n\r\n\0x\r\n", 10)), Str(std::string("\r\n\0x", 4)));
}

TEST(ReplyReaderTest, DecodesArrays) {
  EXPECT_EQ(ParseOne("*2\r\n$3\r\nfoo\r\n:1\r\n"), Arr({Str("foo"), Int(1)}));
  EXPECT_EQ(ParseOne("*0\r\n"), Arr({}));
  Reply mixed = ParseOne("*3\r\n$-1\r\n+QUEUED\r\n-ERR x\r\n");
  ASSERT_TRUE(mixed.is_array());
  ASSERT_EQ(mixed.elements.size(), 3u);
  EXPECT_TRUE(mixed.elements[0].is_nil());
  EXPECT_TRUE(mixed.elements[1].is_status());
  EXPECT_TRUE(mixed.elements[2].is_error());
}

TEST(ReplyReaderTest, DecodesNestedArrays) {
  EXPECT_EQ(ParseOne("*2\r\n*2\r\n:1\r\n:2\r\n*1\r\n*1\r\n$1\r\nx\r\n"),
            Arr({Arr({Int(1), Int(2)}), Arr({Arr({Str("x")})})}));
}

TEST(ReplyReaderTest, ReplySplitByteByByte) {
  const std::string wire = "*3\r\n$5\r\nhello\r\n:42\r\n*1\r\n+OK\r\n";
  ReplyReader reader;
  for (size_t i = 0; i + 1 < wire.size(); ++i) {
    reader.Feed(wire.substr(i, 1));
    auto next = reader.Next();
    ASSERT_TRUE(next.ok()) << next.status();
    ASSERT_FALSE(next->has_value()) << "complete after " << i + 1 << " bytes";
    EXPECT_EQ(reader.buffered_bytes(), i + 1);
  }
  reader.Feed(wire.substr(wire.size() - 1));
  auto next = reader.Next();
  ASSERT_TRUE(next.ok()) << next.status();
  ASSERT_TRUE(next->has_value());
  EXPECT_EQ(**next, Arr({Str("hello"), Int(42), Arr({Reply{.type = Type::kStatus, .str = "OK"}})}));
  EXPECT_EQ(reader.buffered_bytes(), 0u);
}

TEST(ReplyReaderTest, PipelinedRepliesComeOutInOrder) {
  ReplyReader reader;
  reader.Feed("+OK\r\n:1\r\n$1\r\na\r\n*1\r\n:2\r\n-ERR no\r\n:3");
  std::vector<Reply> got;
  while (true) {
    auto next = reader.Next();
    ASSERT_TRUE(next.ok()) << next.status();
    if (!next->has_value()) break;
    got.push_back(std::move(**next));
  }
  ASSERT_EQ(got.size(), 5u);
  EXPECT_TRUE(got[0].is_status());
  EXPECT_EQ(got[1], Int(1));
  EXPECT_EQ(got[2], Str("a"));
  EXPECT_EQ(got[3], Arr({Int(2)}));
  EXPECT_TRUE(got[4].is_error());
  EXPECT_EQ(reader.buffered_bytes(), 2u);  // ":3" awaits its CRLF
  reader.Feed("\r\n");
  auto last = reader.Next();
  ASSERT_TRUE(last.ok() && last->has_value());
  EXPECT_EQ(**last, Int(3));
}

TEST(ReplyReaderTest, ProtocolErrorIsStickyStatus) {
  ReplyReader reader;
  reader.Feed("?garbage\r\n");
  auto next = reader.Next();
  ASSERT_FALSE(next.ok());
  EXPECT_EQ(next.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(next.status().message()), HasSubstr("protocol error"));
  reader.Feed("+OK\r\n");
  EXPECT_FALSE(reader.Next().ok());
}

TEST(ReplyReaderTest, TooDeepNestingIsProtocolError) {
  std::string wire;
  for (int i = 0; i < 20; ++i) wire += "*1\r\n";
  wire += ":1\r\n";
  ReplyReader reader;
  reader.Feed(wire);
  EXPECT_FALSE(reader.Next().ok());
}

TEST(ReplyReaderTest, BufferedBytesAreCapped) {
  ReplyReader reader(/*max_buffered_bytes=*/16);
  reader.Feed("$20\r\n0123456");  // 12 bytes, incomplete
  auto next = reader.Next();
  ASSERT_TRUE(next.ok());
  EXPECT_FALSE(next->has_value());
  reader.Feed("789012");  // 18 bytes in total
  next = reader.Next();
  ASSERT_FALSE(next.ok());
  EXPECT_EQ(next.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(ReplyReaderTest, CapCountsPartlyParsedArray) {
  ReplyReader reader(/*max_buffered_bytes=*/32);
  reader.Feed("*10\r\n:1\r\n:2\r\n:3\r\n");  // 17 bytes, consumed into an unfinished array
  auto next = reader.Next();
  ASSERT_TRUE(next.ok());
  EXPECT_FALSE(next->has_value());
  EXPECT_EQ(reader.buffered_bytes(), 17u);
  reader.Feed(":4\r\n:5\r\n:6\r\n:7\r\n");  // 33
  EXPECT_EQ(reader.Next().status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(ReplyReaderTest, HugeArrayHeaderIsRejectedWithoutAllocating) {
  ReplyReader reader;
  reader.Feed("*2147483647\r\n");
  auto next = reader.Next();
  ASSERT_FALSE(next.ok());
  EXPECT_EQ(next.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(ReplyReaderTest, MovedReaderKeepsState) {
  ReplyReader a;
  a.Feed("$5\r\nhel");
  ASSERT_TRUE(a.Next().ok());
  ReplyReader b = std::move(a);
  EXPECT_EQ(a.Next().status().code(), absl::StatusCode::kFailedPrecondition);  // NOLINT
  b.Feed("lo\r\n");
  auto next = b.Next();
  ASSERT_TRUE(next.ok() && next->has_value());
  EXPECT_EQ(**next, Str("hello"));
  ReplyReader c;
  c = std::move(b);
  c.Feed(":1\r\n");
  next = c.Next();
  ASSERT_TRUE(next.ok() && next->has_value());
  EXPECT_EQ(**next, Int(1));
}

TEST(RoundTripTest, EncodedCommandParsesAsArrayOfStrings) {
  const std::string binary("\0\r\n$*", 5);
  const std::vector<std::string_view> argv = {"EVALSHA", "abc", "1", "", binary};
  Reply r = ParseOne(EncodeCommand(argv));
  ASSERT_TRUE(r.is_array());
  ASSERT_EQ(r.elements.size(), argv.size());
  for (size_t i = 0; i < argv.size(); ++i) EXPECT_EQ(r.elements[i], Str(std::string(argv[i])));
}

}  // namespace
}  // namespace sluice::redis
