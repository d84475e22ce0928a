#include "sluice/http/request_framing.h"

#include <string>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::http {
namespace {

namespace bhttp = boost::beast::http;
using ::testing::HasSubstr;

// The header block of `wire` as Beast parses it, or a test failure if Beast refuses it.
bhttp::request_header<> Header(std::string wire) {
  bhttp::request_parser<bhttp::string_body> parser;
  boost::system::error_code ec;
  parser.put(boost::asio::buffer(wire), ec);
  if (ec == bhttp::error::need_more) ec = {};
  EXPECT_FALSE(ec) << ec.message() << " in " << wire;
  EXPECT_TRUE(parser.is_header_done());
  return parser.get().base();
}

std::optional<FramingError> Check(std::string head) {
  return CheckFraming(Header(std::move(head) + "\r\n"));
}

TEST(RequestFramingTest, PlainRequestsPass) {
  EXPECT_EQ(Check("GET /v1/authorize HTTP/1.1\r\nHost: x\r\n"), std::nullopt);
  EXPECT_EQ(Check("POST /v1/check HTTP/1.1\r\nHost: a.b:8080\r\nContent-Length: 2\r\n"),
            std::nullopt);
  EXPECT_EQ(Check("POST /v1/check HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"),
            std::nullopt);
  EXPECT_EQ(Check("POST /v1/check HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: CHUNKED\r\n"),
            std::nullopt);
  EXPECT_EQ(Check("GET / HTTP/1.0\r\n"), std::nullopt);           // HTTP/1.0 needs no Host
  EXPECT_EQ(Check("GET / HTTP/1.1\r\nHost:\r\n"), std::nullopt);  // empty Host is allowed
}

TEST(RequestFramingTest, TransferEncodingMustEndInChunkedAlone) {
  // Not chunked once and last: the body's end is unknown (RFC 9112 §6.3), 400.
  for (const char* te : {"identity", "gzip", "xchunked", "chunked, identity", "chunked, chunked",
                         "chunked;q=1", "chunked, gzip, chunked"}) {
    std::optional<FramingError> e = Check(
        std::string("POST /v1/check HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: ") + te + "\r\n");
    ASSERT_TRUE(e.has_value()) << te;
    EXPECT_EQ(e->status, 400u) << te;
  }
  // Chunked last, with a coding before it that sluice does not implement (§6.1): 501.
  for (const char* te : {"gzip, chunked", "gzip,, chunked", "deflate, gzip, chunked"}) {
    std::optional<FramingError> e = Check(
        std::string("POST /v1/check HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: ") + te + "\r\n");
    ASSERT_TRUE(e.has_value()) << te;
    EXPECT_EQ(e->status, 501u) << te;
  }
}

TEST(RequestFramingTest, TransferEncodingOverSeveralLinesIsOneList) {
  std::optional<FramingError> e = Check(
      "POST /v1/check HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: "
      "chunked\r\n");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->status, 501u);  // "gzip, chunked"
  // (A line after "chunked" Beast refuses itself.)
}

TEST(RequestFramingTest, TransferEncodingWithContentLengthIsRefused) {
  // Beast itself refuses Content-Length after chunked; the other orders reach us.
  std::optional<FramingError> e = Check(
      "POST /v1/check HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: identity\r\nContent-Length: 3\r\n");
  ASSERT_TRUE(e.has_value());
  EXPECT_THAT(e->detail, HasSubstr("both Transfer-Encoding and Content-Length"));
}

TEST(RequestFramingTest, TransferEncodingInHttp10IsRefused) {
  std::optional<FramingError> e =
      Check("POST /v1/check HTTP/1.0\r\nTransfer-Encoding: chunked\r\n");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->status, 400u);
}

TEST(RequestFramingTest, HostRules) {
  EXPECT_TRUE(Check("GET / HTTP/1.1\r\n").has_value());
  EXPECT_TRUE(Check("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n").has_value());
  EXPECT_TRUE(Check("GET / HTTP/1.0\r\nHost: a\r\nHost: a\r\n").has_value());
  EXPECT_TRUE(Check("GET / HTTP/1.1\r\nHost: a b\r\n").has_value());
  EXPECT_TRUE(Check("GET / HTTP/1.1\r\nHost: a/b\r\n").has_value());
  EXPECT_FALSE(Check("GET / HTTP/1.1\r\nHost: [::1]:8080\r\n").has_value());
  // RFC 9112 §3.2: a Host that is no uri-host [":" port] is 400.
  for (const char* good : {"a.b", "a.b:8080", "a:", "10.0.0.1:80", "[fd00::1]",
                           "[::ffff:1.2.3.4]:1", "[v1.x:y]", "xn--d1a.example", "a%20b", "a_b~c"}) {
    EXPECT_FALSE(Check(std::string("GET / HTTP/1.1\r\nHost: ") + good + "\r\n").has_value())
        << good;
  }
  for (const char* bad : {"x:abc", "x:80:80", "[::1", "[zz]", "[]", "[::1]x", "%zz", "%4", "a<b",
                          "a\"b", "a{b", "a|b", "a\\b", "a^b", "[v.x]", "h\xff"}) {
    EXPECT_TRUE(Check(std::string("GET / HTTP/1.1\r\nHost: ") + bad + "\r\n").has_value()) << bad;
  }
}

TEST(RequestFramingTest, RequestTargetForms) {
  EXPECT_FALSE(Check("POST http://h/v1/check HTTP/1.1\r\nHost: h\r\n").has_value());
  EXPECT_FALSE(Check("OPTIONS * HTTP/1.1\r\nHost: h\r\n").has_value());
  std::optional<FramingError> connect = Check("CONNECT h:443 HTTP/1.1\r\nHost: h\r\n");
  ASSERT_TRUE(connect.has_value());
  EXPECT_EQ(connect->status, 501u);  // a method sluice knows and does not implement
  EXPECT_TRUE(Check("GET v1/check HTTP/1.1\r\nHost: h\r\n").has_value());
  EXPECT_TRUE(Check("GET /v1/check#frag HTTP/1.1\r\nHost: h\r\n").has_value());
}

TEST(RequestFramingTest, RequestTargetCharactersAreRfc3986s) {
  // What browsers send unencoded in a path or query passes too: [ ] { } | ^ `.
  for (const char* good :
       {"/v1/authorize/a%2Fb?x=1&y=a:b@c/d?e",
        "/v1/usage/u-1._~!$&'()*+,;=", "http://[::1]:8080/v1/check?q=1", "http://h:1",
        "/v1/authorize/items?filter[name]=x&ids[]=1", "/a{b}|c^d`e[f]", "http://h/x?[a]={b}"}) {
    EXPECT_FALSE(Check(std::string("GET ") + good + " HTTP/1.1\r\nHost: h\r\n").has_value())
        << good;
  }
  for (const char* bad : {"/v1/authorize/\xff", "/a\"b", "/<x>", "/a>", "/a\\b", "/a%zz", "/a%",
                          "/a%4", "http://h/a<b", "http://h/a\\b"}) {
    std::optional<FramingError> e = Check(std::string("GET ") + bad + " HTTP/1.1\r\nHost: h\r\n");
    ASSERT_TRUE(e.has_value()) << bad;
    EXPECT_EQ(e->status, 400) << bad;
  }
}

TEST(RequestFramingTest, ExpectOtherThanContinueIs417) {
  std::optional<FramingError> e = Check("POST / HTTP/1.1\r\nHost: h\r\nExpect: teapot\r\n");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->status, 417u);
  EXPECT_FALSE(Check("POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-Continue\r\n").has_value());
  EXPECT_TRUE(
      ExpectsContinue(Header("POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\n\r\n")));
  // A list: 100-continue on two lines is that one expectation, an empty value none; any other
  // member is 417.
  const std::string twice =
      "POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nExpect: 100-continue\r\n";
  EXPECT_FALSE(Check(twice).has_value());
  EXPECT_TRUE(ExpectsContinue(Header(twice + "\r\n")));
  const std::string empty = "POST / HTTP/1.1\r\nHost: h\r\nExpect:\r\n";
  EXPECT_FALSE(Check(empty).has_value());
  EXPECT_FALSE(ExpectsContinue(Header(empty + "\r\n")));
  e = Check("POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue, teapot\r\n");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->status, 417u);
}

TEST(RequestFramingTest, AbsoluteFormBecomesOriginForm) {
  EXPECT_EQ(OriginFormTarget("http://host:8080/v1/check?x=1"), "/v1/check?x=1");
  EXPECT_EQ(OriginFormTarget("HTTPS://host/v1/authorize"), "/v1/authorize");
  EXPECT_EQ(OriginFormTarget("http://host"), "/");
  EXPECT_EQ(OriginFormTarget("http://host?a=b"), "/?a=b");
  EXPECT_EQ(OriginFormTarget("/v1/check"), std::nullopt);
  EXPECT_EQ(OriginFormTarget("*"), std::nullopt);
}

}  // namespace
}  // namespace sluice::http
