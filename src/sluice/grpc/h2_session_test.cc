#include "sluice/grpc/h2_session.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

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

TEST(ParseGrpcTimeoutTest, MalformedIsNullopt) {
  EXPECT_EQ(ParseGrpcTimeout(""), std::nullopt);
  EXPECT_EQ(ParseGrpcTimeout("S"), std::nullopt);
  EXPECT_EQ(ParseGrpcTimeout("10"), std::nullopt);
  EXPECT_EQ(ParseGrpcTimeout("10s"), std::nullopt);
  EXPECT_EQ(ParseGrpcTimeout("-1S"), std::nullopt);
  EXPECT_EQ(ParseGrpcTimeout("123456789S"), std::nullopt);  // at most 8 digits
  EXPECT_EQ(ParseGrpcTimeout("1 S"), std::nullopt);
}

// Counts what a connection reports; answers no call (the tests below send none).
class RecordingService final : public GrpcService {
 public:
  void OnCall(GrpcCall /*call*/, std::string_view /*message*/) override { ++calls; }
  void Count(std::string_view outcome) override { last_outcome = std::string(outcome); }
  void ConnectionClosed(H2Connection* /*conn*/) override { closed = true; }
  void ConnectionDestroyed() override { destroyed = true; }
  int calls = 0;
  std::string last_outcome;
  bool closed = false;
  bool destroyed = false;
};

class H2ConnectionTest : public ::testing::Test {
 protected:
  // A served connection and the client's end of it, on loopback.
  void Connect() {
    namespace ip = boost::asio::ip;
    ip::tcp::acceptor acceptor(io_, ip::tcp::endpoint(ip::address_v4::loopback(), 0));
    client_.connect(acceptor.local_endpoint());
    auto conn = std::make_shared<H2Connection>(acceptor.accept(), &service_, &options_, 0);
    conn->Start();
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

}  // namespace
}  // namespace sluice::rls
