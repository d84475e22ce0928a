#include "sluice/rls/h2_session.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include "envoy/service/ratelimit/v3/rls.pb.h"

namespace sluice::rls {
namespace {

using std::chrono::nanoseconds;

TEST(PercentEncodeTest, PrintableAsciiStaysAndEverythingElseIsEscaped) {
  EXPECT_EQ(PercentEncode("plan \"x\": unknown"), "plan \"x\": unknown");
  EXPECT_EQ(PercentEncode("100%"), "100%25");
  EXPECT_EQ(PercentEncode("caf\xc3\xa9"), "caf%C3%A9");
  EXPECT_EQ(PercentEncode("a\nb\x7f"), "a%0Ab%7F");
  EXPECT_EQ(PercentEncode(""), "");
}

TEST(ParseGrpcTimeoutTest, EveryUnit) {
  EXPECT_EQ(ParseGrpcTimeout("2H"), std::chrono::hours(2));
  EXPECT_EQ(ParseGrpcTimeout("3M"), std::chrono::minutes(3));
  EXPECT_EQ(ParseGrpcTimeout("1S"), std::chrono::seconds(1));
  EXPECT_EQ(ParseGrpcTimeout("250m"), std::chrono::milliseconds(250));
  EXPECT_EQ(ParseGrpcTimeout("7u"), std::chrono::microseconds(7));
  EXPECT_EQ(ParseGrpcTimeout("99999999n"), nanoseconds(99'999'999));
}

TEST(ParseGrpcTimeoutTest, TheLargestValuesAreClampedToAYearNotOverflowed) {
  constexpr std::chrono::seconds kYear(int64_t{365} * 24 * 3600);
  EXPECT_EQ(ParseGrpcTimeout("99999999H"), kYear);
  EXPECT_EQ(ParseGrpcTimeout("99999999M"), kYear);
  EXPECT_EQ(ParseGrpcTimeout("99999999S"), kYear);  // over 3 years
  EXPECT_EQ(ParseGrpcTimeout("8760H"), kYear);
  EXPECT_EQ(ParseGrpcTimeout("99999999m"), std::chrono::milliseconds(99'999'999));
}

TEST(ParseGrpcTimeoutTest, MalformedIsNullopt) {
  EXPECT_EQ(ParseGrpcTimeout(""), std::nullopt);
  EXPECT_EQ(ParseGrpcTimeout("S"), std::nullopt);
  EXPECT_EQ(ParseGrpcTimeout("10"), std::nullopt);
  EXPECT_EQ(ParseGrpcTimeout("10s"), std::nullopt);
  EXPECT_EQ(ParseGrpcTimeout("-1S"), std::nullopt);
  EXPECT_EQ(ParseGrpcTimeout("123456789S"), std::nullopt);  // at most 8 digits
  EXPECT_EQ(ParseGrpcTimeout("1 S"), std::nullopt);
}

// Counts what a connection reports; answers a call with an empty RateLimitResponse if `reply`,
// else keeps it in `held` unanswered (a decision still waiting for Redis).
class RecordingService final : public GrpcService {
 public:
  void OnCall(GrpcCall call, std::string_view message) override {
    ++calls;
    messages.emplace_back(message);
    if (reply) {
      call.Reply(envoy::service::ratelimit::v3::RateLimitResponse());
    } else {
      held.push_back(std::move(call));
    }
  }
  bool reply = false;
  std::vector<GrpcCall> held;
  void Count(std::string_view outcome) override { last_outcome = std::string(outcome); }
  void ConnectionClosed(H2Connection* /*conn*/) override { closed = true; }
  void ConnectionDestroyed() override { destroyed = true; }
  int calls = 0;
  std::vector<std::string> messages;  // of every call, in the order they came
  std::string last_outcome;
  bool closed = false;
  bool destroyed = false;
};

class H2ConnectionTest : public ::testing::Test {
 protected:
  // A served connection and the client's end of it, on loopback.
  // `small_buffers`: socket buffers of a few KiB, so that a peer not reading stalls a write soon.
  void Connect(bool small_buffers = false) { conn_ = ConnectOn(client_, small_buffers); }
  // A served connection whose client end is `client`; weak: the connection's own handlers keep it.
  std::weak_ptr<H2Connection> ConnectOn(boost::asio::ip::tcp::socket& client,
                                        bool small_buffers = false) {
    namespace ip = boost::asio::ip;
    ip::tcp::acceptor acceptor(io_, ip::tcp::endpoint(ip::address_v4::loopback(), 0));
    client.open(ip::tcp::v4());
    if (small_buffers) client.set_option(boost::asio::socket_base::receive_buffer_size(4096));
    client.connect(acceptor.local_endpoint());
    ip::tcp::socket server = acceptor.accept();
    if (small_buffers) server.set_option(boost::asio::socket_base::send_buffer_size(4096));
    auto conn = std::make_shared<H2Connection>(std::move(server), &service_, &options_, 0);
    conn->Start();
    return conn;
  }
  void TearDown() override {
    // Nothing may outlive the fixture's options and service: end the connections first.
    service_.held.clear();
    boost::system::error_code ignored;
    client_.close(ignored);
    other_client_.close(ignored);
    if (auto conn = conn_.lock()) conn->Close();
    if (auto conn = other_conn_.lock()) conn->Close();
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while ((!conn_.expired() || !other_conn_.expired()) && std::chrono::steady_clock::now() < end) {
      io_.run_one_for(std::chrono::milliseconds(50));
    }
  }
  // Runs the loop until `done`, at most `limit`; returns done().
  template <typename Done>
  bool RunUntil(Done done, std::chrono::milliseconds limit) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (!done() && std::chrono::steady_clock::now() < end) {
      io_.run_one_for(std::chrono::milliseconds(20));
    }
    return done();
  }
  // Reads whatever the server sends into wire_, on the loop, until the socket ends.
  void ReadIntoWire() {
    client_.async_read_some(boost::asio::buffer(chunk_),
                            [this](const boost::system::error_code& ec, size_t n) {
                              wire_.append(chunk_, n);
                              if (!ec) {
                                ReadIntoWire();
                              } else {
                                wire_end_ = ec;
                              }
                            });
  }
  static std::string Frame(uint8_t type, uint8_t flags, uint32_t stream, std::string_view payload) {
    std::string f;
    f += static_cast<char>(payload.size() >> 16);
    f += static_cast<char>(payload.size() >> 8);
    f += static_cast<char>(payload.size());
    f += static_cast<char>(type);
    f += static_cast<char>(flags);
    f += static_cast<char>(stream >> 24);
    f += static_cast<char>(stream >> 16);
    f += static_cast<char>(stream >> 8);
    f += static_cast<char>(stream);
    f += payload;
    return f;
  }
  // HEADERS of a gRPC call of the served method (HPACK literals, no Huffman) and, if
  // `with_message`, a DATA frame with an empty message ending the stream.
  // `extra_name`, if not empty: one more field of that name (value "v").
  std::string Call(uint32_t stream, bool with_message = true,
                   std::string_view extra_name = {}) const {
    std::string block;
    const auto literal = [&block](std::string_view n, std::string_view v) {
      block += '\0';
      block += static_cast<char>(n.size());
      block += n;
      block += static_cast<char>(v.size());
      block += v;
    };
    literal(":method", "POST");
    literal(":scheme", "http");
    literal(":path", options_.method);
    literal(":authority", "x");
    literal("content-type", "application/grpc");
    literal("te", "trailers");
    if (!extra_name.empty()) literal(extra_name, "v");
    std::string out = Frame(1, 0x4, stream, block);  // END_HEADERS
    if (with_message) out += Frame(0, 0x1, stream, std::string_view("\0\0\0\0\0", 5));
    return out;
  }
  // An HPACK literal field with a new name, with incremental indexing (it enters the dynamic
  // table) if `indexed`. Lengths of up to 126 and of 127..254 (one continuation byte).
  static std::string Literal(std::string_view name, std::string_view value, bool indexed) {
    const auto length = [](size_t n) {
      std::string out;
      if (n < 127) {
        out += static_cast<char>(n);
      } else {
        out += static_cast<char>(127);
        for (n -= 127; n >= 128; n >>= 7) out += static_cast<char>((n & 0x7F) | 0x80);
        out += static_cast<char>(n);
      }
      return out;
    };
    return std::string(1, indexed ? '\x40' : '\0') + length(name.size()) + std::string(name) +
           length(value.size()) + std::string(value);
  }
  // A HEADERS frame of a call of the served method (literals without indexing, then `more`)
  // followed by `refs` references to dynamic table entry 62 (the latest inserted), and a DATA
  // frame of the one-byte message `message` ending the stream.
  std::string CallWithRefs(uint32_t stream, int refs, char message = 'x',
                           std::string_view more = {}) const {
    std::string block;
    for (const auto& [n, v] : {std::pair<std::string_view, std::string_view>{":method", "POST"},
                               {":scheme", "http"},
                               {":path", options_.method},
                               {":authority", "x"},
                               {"content-type", "application/grpc"}}) {
      block += Literal(n, v, /*indexed=*/false);
    }
    block += more;
    block += std::string(static_cast<size_t>(refs), '\xbe');  // indexed field 62
    const char body[6] = {0, 0, 0, 0, 1, message};
    return Frame(1, 0x4, stream, block) + Frame(0, 0x1, stream, std::string_view(body, 6));
  }
  // Stream `stream`: a call that puts one field of 4,040 bytes (name + value + 32) into the
  // dynamic table as entry 62, then every reference to it costs 4,040 bytes of header list.
  std::string CallInsertingBomb(uint32_t stream) const {
    return CallWithRefs(stream, 0, 'x', Literal("x-bomb", std::string(4002, 'a'), true));
  }
  static std::string Rst(uint32_t stream, uint32_t code) {
    const char p[4] = {static_cast<char>(code >> 24), static_cast<char>(code >> 16),
                       static_cast<char>(code >> 8), static_cast<char>(code)};
    return Frame(3, 0, stream, std::string_view(p, 4));
  }
  // True if `wire` holds a PING ACK (the server has processed all that was sent before the PING).
  static bool HasPingAck(std::string_view wire) {
    while (wire.size() >= 9) {
      const auto* p = reinterpret_cast<const unsigned char*>(wire.data());
      const size_t length = (size_t{p[0]} << 16) | (size_t{p[1]} << 8) | p[2];
      if (wire.size() < 9 + length) return false;
      if (p[3] == 6 && (p[4] & 1) != 0) return true;
      wire.remove_prefix(9 + length);
    }
    return false;
  }
  // True if `wire` holds an RST_STREAM for `stream` with error code `code`.
  static bool HasRst(std::string_view wire, uint32_t stream, uint32_t code) {
    while (wire.size() >= 9) {
      const auto* p = reinterpret_cast<const unsigned char*>(wire.data());
      const size_t length = (size_t{p[0]} << 16) | (size_t{p[1]} << 8) | p[2];
      if (wire.size() < 9 + length) return false;
      const uint32_t id =
          ((uint32_t{p[5]} & 0x7F) << 24) | (uint32_t{p[6]} << 16) | (uint32_t{p[7]} << 8) | p[8];
      if (p[3] == 3 && length == 4 && id == stream) {
        const uint32_t error =
            (uint32_t{p[9]} << 24) | (uint32_t{p[10]} << 16) | (uint32_t{p[11]} << 8) | p[12];
        if (error == code) return true;
      }
      wire.remove_prefix(9 + length);
    }
    return false;
  }
  void Handshake(std::string_view settings = {}) {
    Send(kPreface);
    Send(Frame(4, 0, 0, settings));
    Send(Frame(4, 0x1, 0, {}));  // ACK of the server's SETTINGS
  }
  // Runs the loop until the connection has closed, at most `limit`.
  void RunUntilClosed(std::chrono::milliseconds limit) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (!service_.destroyed && std::chrono::steady_clock::now() < end) {
      io_.run_one_for(std::chrono::milliseconds(50));
    }
  }
  // Every byte the server sent, up to its close.
  std::string ReadAll() {
    std::string out;
    boost::system::error_code ec;
    boost::asio::read(client_, boost::asio::dynamic_buffer(out), ec);
    return out;
  }
  // True if `wire` holds a GOAWAY frame with error code `code`.
  static bool HasGoAway(std::string_view wire, uint32_t code) {
    while (wire.size() >= 9) {
      const auto* p = reinterpret_cast<const unsigned char*>(wire.data());
      const size_t length = (size_t{p[0]} << 16) | (size_t{p[1]} << 8) | p[2];
      if (wire.size() < 9 + length) return false;
      if (p[3] == 7 && length >= 8) {
        const uint32_t error =
            (uint32_t{p[13]} << 24) | (uint32_t{p[14]} << 16) | (uint32_t{p[15]} << 8) | p[16];
        if (error == code) return true;
      }
      wire.remove_prefix(9 + length);
    }
    return false;
  }
  void Send(std::string_view bytes) { boost::asio::write(client_, boost::asio::buffer(bytes)); }

  static constexpr std::string_view kPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  static constexpr std::string_view kEmptySettings{"\0\0\0\4\0\0\0\0\0", 9};

  boost::asio::io_context io_;
  boost::asio::ip::tcp::socket client_{io_};
  RecordingService service_;
  H2Options options_{.method = "/pkg.Service/Method", .idle_timeout = std::chrono::milliseconds(1)};
  std::weak_ptr<H2Connection> conn_;
  boost::asio::ip::tcp::socket other_client_{io_};  // a second connection's client end, if any
  std::weak_ptr<H2Connection> other_conn_;
  char chunk_[4096];
  std::string wire_;
  std::optional<boost::system::error_code> wire_end_;  // how the client's reading ended
};

TEST_F(H2ConnectionTest, AnIdleConnectionGetsGoAwayAndIsClosed) {
  Connect();
  Send(kPreface);
  Send(kEmptySettings);
  RunUntilClosed(std::chrono::seconds(5));
  EXPECT_TRUE(service_.closed);
  EXPECT_TRUE(service_.destroyed);
  EXPECT_TRUE(HasGoAway(ReadAll(), 0));  // NO_ERROR: a graceful close
  EXPECT_EQ(service_.calls, 0);
}

TEST_F(H2ConnectionTest, ABadPrefaceGetsAProtocolErrorGoAwayAndIsClosed) {
  options_.idle_timeout = std::chrono::minutes(5);
  Connect();
  Send("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  RunUntilClosed(std::chrono::seconds(5));
  EXPECT_TRUE(service_.destroyed);
  EXPECT_TRUE(HasGoAway(ReadAll(), 1));  // PROTOCOL_ERROR
}

TEST_F(H2ConnectionTest, APeerThatHangsUpIsClosedAtOnce) {
  options_.idle_timeout = std::chrono::minutes(5);
  Connect();
  Send(kPreface);
  client_.close();
  RunUntilClosed(std::chrono::seconds(5));
  EXPECT_TRUE(service_.destroyed);
}

// A client that resets each stream once its call is handed over frees the stream slot but not the
// decision: past max_concurrent_streams decisions pending the connection stops reading, and
// resumes when one is answered.
TEST_F(H2ConnectionTest, StreamsResetWhileDecidingDoNotStartMoreDecisionsThanTheStreamLimit) {
  options_.idle_timeout = std::chrono::minutes(5);
  options_.max_concurrent_streams = 2;
  Connect();
  ReadIntoWire();
  Handshake();
  constexpr uint32_t kCancel = 8;
  Send(Call(1) + Rst(1, kCancel));
  ASSERT_TRUE(RunUntil([&] { return service_.calls == 1; }, std::chrono::seconds(5)));
  Send(Call(3) + Rst(3, kCancel));
  ASSERT_TRUE(RunUntil([&] { return service_.calls == 2; }, std::chrono::seconds(5)));
  Send(Call(5) + Rst(5, kCancel));
  // Read at once if the connection were reading: a bounded look is enough to see it is not.
  EXPECT_FALSE(RunUntil([&] { return service_.calls > 2; }, std::chrono::milliseconds(300)));
  // The answer of a reset stream is dropped, and its decision given back: reading resumes.
  EXPECT_FALSE(service_.held[0].Fail(GrpcCode::kInternal, "late"));
  EXPECT_TRUE(RunUntil([&] { return service_.calls == 3; }, std::chrono::seconds(5)));
  EXPECT_FALSE(service_.closed);
}

// A copy of a call shares its answer: only the first of Reply and Fail is delivered.
TEST_F(H2ConnectionTest, ACallIsAnsweredOnceAndTheSecondAnswerReportsDropped) {
  options_.idle_timeout = std::chrono::minutes(5);
  Connect();
  ReadIntoWire();
  Handshake();
  Send(Call(1));
  ASSERT_TRUE(RunUntil([&] { return service_.calls == 1; }, std::chrono::seconds(5)));
  const GrpcCall copy = service_.held[0];
  EXPECT_TRUE(copy.Fail(GrpcCode::kInternal, "first"));
  EXPECT_FALSE(service_.held[0].Reply(envoy::service::ratelimit::v3::RateLimitResponse()));
}

// A client that never opens flow control (SETTINGS_INITIAL_WINDOW_SIZE 0) cannot keep an answered
// stream open: request_timeout after the answer it is reset CANCEL.
TEST_F(H2ConnectionTest, AnAnswerHeldByFlowControlIsResetAfterRequestTimeout) {
  options_.idle_timeout = std::chrono::minutes(5);
  options_.request_timeout = std::chrono::milliseconds(100);
  service_.reply = true;
  Connect();
  ReadIntoWire();
  Handshake(std::string_view("\0\4\0\0\0\0", 6));  // INITIAL_WINDOW_SIZE 0
  Send(Call(1));
  EXPECT_TRUE(RunUntil([&] { return HasRst(wire_, 1, 8); }, std::chrono::seconds(5)));
  EXPECT_EQ(service_.calls, 1);
}

// After GOAWAY a stream that never finishes does not hold the connection past goaway_timeout.
TEST_F(H2ConnectionTest, AfterGoAwayTheConnectionClosesByItsDeadlineEvenWithAStreamOpen) {
  options_.idle_timeout = std::chrono::minutes(5);
  options_.request_timeout = std::chrono::minutes(5);
  options_.goaway_timeout = std::chrono::milliseconds(100);
  Connect();
  ReadIntoWire();
  Handshake();
  Send(Call(1, /*with_message=*/false));  // the request never ends
  Send(Frame(6, 0, 0, "12345678"));
  ASSERT_TRUE(RunUntil([&] { return HasPingAck(wire_); }, std::chrono::seconds(5)));
  conn_.lock()->GoAway();
  EXPECT_TRUE(RunUntil([&] { return service_.closed; }, std::chrono::seconds(5)));
  EXPECT_TRUE(RunUntil([&] { return HasGoAway(wire_, 0); }, std::chrono::seconds(1)));
  EXPECT_FALSE(HasRst(wire_, 1, 8));  // closed by the GOAWAY deadline, not request_timeout
}

// A peer that stops reading: the write that cannot complete closes the connection at
// write_timeout.
TEST_F(H2ConnectionTest, APeerThatStopsReadingIsClosedAtTheWriteTimeout) {
  options_.idle_timeout = std::chrono::minutes(5);
  options_.write_timeout = std::chrono::milliseconds(200);
  Connect(/*small_buffers=*/true);
  Handshake();
  // PINGs whose ACKs (17 bytes each) are never read: far more than loopback's socket buffers.
  std::string pings;
  for (int i = 0; i < 50000; ++i) pings += Frame(6, 0, 0, std::string_view("12345678", 8));
  boost::asio::async_write(client_, boost::asio::buffer(pings),
                           [](const boost::system::error_code&, size_t) {});
  EXPECT_TRUE(RunUntil([&] { return service_.closed; }, std::chrono::seconds(20)));
}

// A socket that never sends the client preface is closed at handshake_timeout, not kept for
// idle_timeout.
TEST_F(H2ConnectionTest, APeerThatNeverSendsThePrefaceIsClosedAtTheHandshakeTimeout) {
  options_.idle_timeout = std::chrono::minutes(5);
  options_.handshake_timeout = std::chrono::milliseconds(100);
  Connect();
  EXPECT_TRUE(RunUntil([&] { return service_.closed; }, std::chrono::seconds(5)));
}

// A client that only PINGs has no stream: idle_timeout counts from the last stream, not the last
// frame, and the connection gets GOAWAY.
TEST_F(H2ConnectionTest, PingsDoNotKeepAConnectionWithoutStreamsFromGoingIdle) {
  options_.idle_timeout = std::chrono::milliseconds(500);
  Connect();
  ReadIntoWire();
  Handshake();
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!service_.closed && std::chrono::steady_clock::now() < end) {
    Send(Frame(6, 0, 0, "12345678"));
    RunUntil([&] { return service_.closed; }, std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(service_.closed);
  EXPECT_TRUE(RunUntil([&] { return HasGoAway(wire_, 0); }, std::chrono::seconds(1)));
}

// Incomplete requests buffer at most max_buffered_request_bytes per connection: the one that would
// go past it is answered RESOURCE_EXHAUSTED and the rest of it refused (RST_STREAM NO_ERROR).
TEST_F(H2ConnectionTest, IncompleteRequestsPastTheConnectionsBudgetAreResourceExhausted) {
  options_.idle_timeout = std::chrono::minutes(5);
  options_.max_buffered_request_bytes = 1000;
  Connect();
  ReadIntoWire();
  Handshake();
  // A prefix announcing 800 bytes, then 600 of them: each request stays incomplete.
  std::string partial("\0\0\0\x03\x20", 5);
  partial += std::string(600, 'x');
  Send(Call(1, /*with_message=*/false) + Frame(0, 0, 1, partial));
  Send(Frame(6, 0, 0, "12345678"));
  ASSERT_TRUE(RunUntil([&] { return HasPingAck(wire_); }, std::chrono::seconds(5)));
  EXPECT_EQ(service_.last_outcome, "");  // 605 bytes: within the budget
  Send(Call(3, /*with_message=*/false) + Frame(0, 0, 3, partial));
  EXPECT_TRUE(RunUntil([&] { return HasRst(wire_, 3, 0); }, std::chrono::seconds(5)));
  EXPECT_EQ(service_.last_outcome, "resource_exhausted");
  EXPECT_FALSE(HasRst(wire_, 1, 0));
  EXPECT_FALSE(service_.closed);
}

// Once the client has acknowledged SETTINGS_MAX_CONCURRENT_STREAMS, a stream beyond it is a
// connection error: GOAWAY PROTOCOL_ERROR (nghttp2; before the ack it is RST_STREAM
// REFUSED_STREAM).
TEST_F(H2ConnectionTest, AStreamBeyondTheAcknowledgedLimitGetsGoAwayProtocolError) {
  options_.idle_timeout = std::chrono::minutes(5);
  options_.max_concurrent_streams = 1;
  Connect();
  ReadIntoWire();
  Handshake();
  Send(Call(1, /*with_message=*/false) + Call(3, /*with_message=*/false));
  EXPECT_TRUE(RunUntil([&] { return HasGoAway(wire_, 1); }, std::chrono::seconds(5)));
  EXPECT_TRUE(RunUntil([&] { return service_.closed; }, std::chrono::seconds(5)));
}

// A request nghttp2 resets as malformed (an upper-case field name: RST_STREAM PROTOCOL_ERROR, which
// the client sees as INTERNAL) is counted internal, not cancelled; a client's own CANCEL is
// cancelled.
TEST_F(H2ConnectionTest, AMalformedRequestIsCountedInternalAndAClientsCancelCancelled) {
  options_.idle_timeout = std::chrono::minutes(5);
  Connect();
  ReadIntoWire();
  Handshake();
  Send(Call(1, /*with_message=*/true, "X-Upper"));
  EXPECT_TRUE(RunUntil([&] { return HasRst(wire_, 1, 1); }, std::chrono::seconds(5)));
  EXPECT_EQ(service_.last_outcome, "internal");
  EXPECT_EQ(service_.calls, 0);
  Send(Call(3, /*with_message=*/false) + Rst(3, 8));
  EXPECT_TRUE(
      RunUntil([&] { return service_.last_outcome == "cancelled"; }, std::chrono::seconds(5)));
}

// A header list past max_header_list_bytes is reset ENHANCE_YOUR_CALM (a gRPC client's
// RESOURCE_EXHAUSTED, as it is counted) and the connection goes on.
TEST_F(H2ConnectionTest, AHeaderListPastTheBoundIsResetEnhanceYourCalm) {
  options_.idle_timeout = std::chrono::minutes(5);
  options_.max_header_list_bytes = 400;  // a usual call is about 290
  Connect();
  ReadIntoWire();
  Handshake();
  Send(Call(1, /*with_message=*/true, std::string(120, 'x')));
  EXPECT_TRUE(RunUntil([&] { return HasRst(wire_, 1, 11); }, std::chrono::seconds(5)));
  EXPECT_EQ(service_.last_outcome, "resource_exhausted");
  EXPECT_EQ(service_.calls, 0);
  Send(Call(3));
  EXPECT_TRUE(RunUntil([&] { return service_.calls == 1; }, std::chrono::seconds(5)));
}

// RFC 9113 §5.1.1: a new stream's id must be above every id the client has used. A HEADERS on a
// lower one (stream 5, then a call on stream 3) is a connection error, not dropped unanswered.
TEST_F(H2ConnectionTest, AHeadersOnAStreamIdBelowOneAlreadyUsedGetsGoAwayProtocolError) {
  options_.idle_timeout = std::chrono::minutes(5);
  Connect();
  ReadIntoWire();
  Handshake();
  Send(Call(5));
  ASSERT_TRUE(RunUntil([&] { return service_.calls == 1; }, std::chrono::seconds(5)));
  Send(Call(3));
  EXPECT_TRUE(RunUntil([&] { return HasGoAway(wire_, 1); }, std::chrono::seconds(5)));
  EXPECT_TRUE(RunUntil([&] { return service_.closed; }, std::chrono::seconds(5)));
  EXPECT_EQ(service_.calls, 1);
}

// A stream id used and closed is not a new stream either: a call on it again is a connection error.
TEST_F(H2ConnectionTest, AHeadersOnAClosedStreamGetsGoAwayProtocolError) {
  options_.idle_timeout = std::chrono::minutes(5);
  service_.reply = true;
  Connect();
  ReadIntoWire();
  Handshake();
  Send(Call(1));
  Send(Frame(6, 0, 0, "12345678"));
  ASSERT_TRUE(RunUntil([&] { return HasPingAck(wire_); }, std::chrono::seconds(5)));
  ASSERT_EQ(service_.calls, 1);  // answered, both ends closed: the stream is gone
  Send(Call(1));
  EXPECT_TRUE(RunUntil([&] { return HasGoAway(wire_, 1); }, std::chrono::seconds(5)));
  EXPECT_TRUE(RunUntil([&] { return service_.closed; }, std::chrono::seconds(5)));
  EXPECT_EQ(service_.calls, 1);
}

// Even stream ids are the server's (RFC 9113 §5.1.1): a client's HEADERS on one is a connection
// error.
TEST_F(H2ConnectionTest, AHeadersOnAServerInitiatedStreamIdGetsGoAwayProtocolError) {
  options_.idle_timeout = std::chrono::minutes(5);
  Connect();
  ReadIntoWire();
  Handshake();
  Send(Call(2));
  EXPECT_TRUE(RunUntil([&] { return HasGoAway(wire_, 1); }, std::chrono::seconds(5)));
  EXPECT_TRUE(RunUntil([&] { return service_.closed; }, std::chrono::seconds(5)));
  EXPECT_EQ(service_.calls, 0);
}

// What the client sent on a stream before it saw the server's RST_STREAM (here trailers after a
// header list past the bound) is ignored (RFC 9113 §5.1), not taken for a reused stream id.
TEST_F(H2ConnectionTest, TrailersOnAStreamTheServerResetAreIgnored) {
  options_.idle_timeout = std::chrono::minutes(5);
  options_.max_header_list_bytes = 400;
  service_.reply = true;
  Connect();
  ReadIntoWire();
  Handshake();
  Send(Call(1, /*with_message=*/false, std::string(120, 'x')));
  ASSERT_TRUE(RunUntil([&] { return HasRst(wire_, 1, 11); }, std::chrono::seconds(5)));
  Send(Call(3, /*with_message=*/false));  // a later stream: 1 is now below the last one
  Send(Frame(0, 0, 1, std::string_view("\0\0\0\0\0", 5)) +
       Frame(1, 0x5, 1, std::string_view("\0\1x\1v", 5)));  // DATA, trailers (END_STREAM)
  Send(Frame(0, 0x1, 3, std::string_view("\0\0\0\0\0", 5)));
  EXPECT_TRUE(RunUntil([&] { return service_.calls == 1; }, std::chrono::seconds(5)));
  Send(Frame(6, 0, 0, "12345678"));
  EXPECT_TRUE(RunUntil([&] { return HasPingAck(wire_); }, std::chrono::seconds(5)));
  EXPECT_FALSE(HasGoAway(wire_, 1));
  EXPECT_FALSE(service_.closed);
}

// An HPACK bomb: one large field in the dynamic table, then a header block of references to it
// (4,040 bytes of header list per byte sent). Past max_header_list_bytes the stream is reset and
// nghttp2 hands over (and checks) no more of the block: the rest is only decoded.
TEST_F(H2ConnectionTest, AHeaderBlockPastTheBoundIsNotCheckedFurther) {
  options_.idle_timeout = std::chrono::minutes(5);
  Connect();
  ReadIntoWire();
  Handshake();
  Send(CallInsertingBomb(1) + CallWithRefs(3, 2000));  // stream 3: 8 MB of header list
  ASSERT_TRUE(RunUntil([&] { return HasRst(wire_, 3, 11); }, std::chrono::seconds(5)));
  Send(Frame(6, 0, 0, "12345678"));
  ASSERT_TRUE(RunUntil([&] { return HasPingAck(wire_); }, std::chrono::seconds(5)));
  const std::shared_ptr<H2Connection> conn = conn_.lock();
  ASSERT_NE(conn, nullptr);
  // Stream 1's list (about 4.3 KB), and stream 3's up to the first field past the bound.
  EXPECT_LT(conn->header_bytes_received(), 2 * options_.max_header_list_bytes);
  EXPECT_EQ(service_.calls, 1);
  EXPECT_EQ(service_.last_outcome, "resource_exhausted");
}

// A client whose header lists keep passing the bound is no client that misjudged one request: past
// kMaxOversizedHeaderLists (8) of them the connection gets GOAWAY ENHANCE_YOUR_CALM.
TEST_F(H2ConnectionTest, AConnectionWhoseHeaderListsKeepPassingTheBoundGetsGoAwayEnhanceYourCalm) {
  options_.idle_timeout = std::chrono::minutes(5);
  Connect();
  ReadIntoWire();
  Handshake();
  Send(CallInsertingBomb(1));
  for (uint32_t id = 3; id < 3 + 2 * 8; id += 2) Send(CallWithRefs(id, 5));
  Send(Frame(6, 0, 0, "12345678"));
  ASSERT_TRUE(RunUntil([&] { return HasPingAck(wire_); }, std::chrono::seconds(5)));
  EXPECT_TRUE(HasRst(wire_, 17, 11));
  EXPECT_FALSE(HasGoAway(wire_, 11));  // eight: each stream reset, the connection goes on
  Send(CallWithRefs(19, 5));
  EXPECT_TRUE(RunUntil([&] { return HasGoAway(wire_, 11); }, std::chrono::seconds(5)));
  EXPECT_TRUE(RunUntil([&] { return service_.closed; }, std::chrono::seconds(5)));
}

// Header lists under the bound can still cost much per byte read (references to a large table
// entry): one turn of the loop decodes at most kHeaderBytesPerTurn (64 KiB) of them, then the rest
// of the read waits for the next turn, after the loop's other connections. Here 40 calls of 12 KB
// of header list each come in one read; another connection's call, sent once the first of the 40
// is handed over, is handed over before the last of them.
TEST_F(H2ConnectionTest, HeaderDecodingYieldsTheLoopToOtherConnectionsBetweenTurns) {
  options_.idle_timeout = std::chrono::minutes(5);
  Connect();
  ReadIntoWire();
  Handshake();
  Send(CallInsertingBomb(1));
  ASSERT_TRUE(RunUntil([&] { return service_.calls == 1; }, std::chrono::seconds(5)));
  other_conn_ = ConnectOn(other_client_);
  const std::string preface = std::string(kPreface) + Frame(4, 0, 0, {}) + Frame(4, 0x1, 0, {});
  boost::asio::write(other_client_, boost::asio::buffer(preface));
  std::string many;
  for (uint32_t id = 3; id < 3 + 2 * 40; id += 2) many += CallWithRefs(id, 3, 'a');
  ASSERT_LT(many.size(), 8 * 1024u);  // one read
  Send(many);
  ASSERT_TRUE(RunUntil([&] { return service_.calls >= 2; }, std::chrono::seconds(5)));
  const std::string other_call = CallWithRefs(1, 0, 'b');
  boost::asio::write(other_client_, boost::asio::buffer(other_call));
  ASSERT_TRUE(RunUntil([&] { return service_.calls == 42; }, std::chrono::seconds(5)));
  const auto other = std::find(service_.messages.begin(), service_.messages.end(), "b");
  ASSERT_NE(other, service_.messages.end());
  EXPECT_LT(other - service_.messages.begin(), 41);  // not after all 40
  EXPECT_EQ(std::count(service_.messages.begin(), service_.messages.end(), "a"), 40);
  EXPECT_FALSE(service_.closed);
}

// A connection ended while the peer still sends (a bad preface followed by more bytes) shuts its
// sending side and reads on until the peer's EOF: the peer gets the GOAWAY and a clean EOF, not a
// reset for the input left unread.
TEST_F(H2ConnectionTest, AConnectionEndedWhileThePeerStillSendsEndsWithEofNotReset) {
  options_.idle_timeout = std::chrono::minutes(5);
  Connect();
  ReadIntoWire();
  std::string junk = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  junk += std::string(256 * 1024, 'x');
  boost::asio::async_write(client_, boost::asio::buffer(junk),
                           [](const boost::system::error_code&, size_t) {});
  ASSERT_TRUE(RunUntil([&] { return wire_end_.has_value(); }, std::chrono::seconds(5)));
  EXPECT_EQ(*wire_end_, boost::asio::error::eof);
  EXPECT_TRUE(HasGoAway(wire_, 1));
  // The server's FIN came first either way; a close with the input unread also sends RST, which a
  // read after the EOF reports.
  ASSERT_TRUE(RunUntil([&] { return service_.closed; }, std::chrono::seconds(5)));
  char byte = 0;
  boost::system::error_code again;
  client_.read_some(boost::asio::buffer(&byte, 1), again);
  EXPECT_EQ(again, boost::asio::error::eof);
}

}  // namespace
}  // namespace sluice::rls
