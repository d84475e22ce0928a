#include "sluice/net/listener.h"

#include <unistd.h>

#include <cerrno>

#include <boost/asio/error.hpp>
#include <boost/asio/io_context.hpp>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::net {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using ::testing::EndsWith;
using ::testing::HasSubstr;

TEST(ParseEndpointTest, TakesAnIpv4OrABracketedIpv6AddressAndAPort) {
  absl::StatusOr<tcp::endpoint> v4 = ParseEndpoint("127.0.0.1:8080");
  ASSERT_TRUE(v4.ok()) << v4.status();
  EXPECT_EQ(v4->address().to_string(), "127.0.0.1");
  EXPECT_EQ(v4->port(), 8080);
  absl::StatusOr<tcp::endpoint> v6 = ParseEndpoint("[::1]:9090");
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_TRUE(v6->address().is_v6());
  EXPECT_EQ(v6->address().to_string(), "::1");
  EXPECT_EQ(v6->port(), 9090);
  absl::StatusOr<tcp::endpoint> any = ParseEndpoint("0.0.0.0:0");
  ASSERT_TRUE(any.ok()) << any.status();
  EXPECT_EQ(any->port(), 0);
}

TEST(ParseEndpointTest, SaysWhatIsWrong) {
  EXPECT_EQ(ParseEndpoint("localhost").status().message(), "want host:port");
  EXPECT_EQ(ParseEndpoint("[::1]8080").status().message(), "want [v6addr]:port");
  EXPECT_EQ(ParseEndpoint("127.0.0.1:65536").status().message(), "bad port \"65536\"");
  EXPECT_EQ(ParseEndpoint("127.0.0.1:http").status().message(), "bad port \"http\"");
  EXPECT_EQ(ParseEndpoint("127.0.0.1:").status().message(), "bad port \"\"");
  EXPECT_EQ(ParseEndpoint("localhost:80").status().message(), "bad address \"localhost\"");
  EXPECT_EQ(ParseEndpoint("300.1.1.1:80").status().message(), "bad address \"300.1.1.1\"");
  EXPECT_TRUE(absl::IsInvalidArgument(ParseEndpoint("x").status()));
}

TEST(ResourceExhaustionTest, OnlyFailuresThatRetryingCannotCureCount) {
  using boost::system::error_code;
  using boost::system::system_category;
  EXPECT_TRUE(IsResourceExhaustion(asio::error::no_descriptors));
  EXPECT_TRUE(IsResourceExhaustion(error_code(ENFILE, system_category())));
  EXPECT_TRUE(IsResourceExhaustion(asio::error::no_buffer_space));
  EXPECT_TRUE(IsResourceExhaustion(asio::error::no_memory));
  EXPECT_TRUE(IsResourceExhaustion(error_code(EPERM, system_category())));
  EXPECT_FALSE(IsResourceExhaustion(asio::error::connection_aborted));
  EXPECT_FALSE(IsResourceExhaustion(asio::error::operation_aborted));
  EXPECT_FALSE(IsResourceExhaustion(error_code()));
}

class ListenerTest : public ::testing::Test {
 protected:
  // An address nothing listens on now: a port the kernel picked, then released.
  tcp::endpoint FreeAddress() {
    tcp::acceptor probe(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    const tcp::endpoint free = probe.local_endpoint();
    probe.close();
    return free;
  }

  asio::io_context io_;
};

TEST_F(ListenerTest, AcceptorsShareAnAddress) {
  tcp::acceptor first(io_), second(io_);
  ASSERT_FALSE(OpenSharedListener(first, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)));
  const tcp::endpoint bound = first.local_endpoint();
  EXPECT_NE(bound.port(), 0);
  EXPECT_FALSE(OpenSharedListener(second, bound));
  EXPECT_EQ(second.local_endpoint(), bound);
}

TEST_F(ListenerTest, TheLockRefusesASecondHolderOfTheAddress) {
  const tcp::endpoint address = FreeAddress();
  absl::StatusOr<int> lock = LockListenAddress(address);
  ASSERT_TRUE(lock.ok()) << lock.status();
  ASSERT_GE(*lock, 0);
  absl::StatusOr<int> again = LockListenAddress(address);
  EXPECT_TRUE(absl::IsUnavailable(again.status())) << again.status();
  EXPECT_EQ(again.status().message(),
            "cannot listen on " + address.address().to_string() + ":" +
                std::to_string(address.port()) +
                ": address already in use by another sluice process (two instances sharing a "
                "port would each count half of every subject's requests)");
  // Released with the descriptor (as when the process dies): the address is free again.
  ::close(*lock);
  absl::StatusOr<int> after = LockListenAddress(address);
  ASSERT_TRUE(after.ok()) << after.status();
  ::close(*after);
}

TEST_F(ListenerTest, TheLockRefusesAnAddressAnotherProgramListensOn) {
  // A listener without the lock (and with SO_REUSEPORT, which a second sluice would share).
  tcp::acceptor other(io_);
  ASSERT_FALSE(OpenSharedListener(other, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)));
  const tcp::endpoint taken = other.local_endpoint();
  absl::StatusOr<int> lock = LockListenAddress(taken);
  EXPECT_TRUE(absl::IsUnavailable(lock.status())) << lock.status();
  EXPECT_THAT(std::string(lock.status().message()), EndsWith(": address already in use"));
  EXPECT_THAT(std::string(lock.status().message()),
              HasSubstr("127.0.0.1:" + std::to_string(taken.port())));
}

TEST_F(ListenerTest, AnIpv6AddressIsNamedInBrackets) {
  tcp::acceptor other(io_);
  // The IPv6 loopback is required, as by the integration tests: without it this fails, not skips.
  ASSERT_FALSE(OpenSharedListener(other, tcp::endpoint(asio::ip::make_address("::1"), 0)))
      << "no IPv6 loopback (::1) on this machine";
  const tcp::endpoint taken = other.local_endpoint();
  EXPECT_EQ(LockListenAddress(taken).status().message(),
            "cannot listen on [::1]:" + std::to_string(taken.port()) + ": address already in use");
}

}  // namespace
}  // namespace sluice::net
