#include "sluice/frontend/client_address.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "sluice/common/subject.h"

namespace sluice::frontend {
namespace {

namespace ip = boost::asio::ip;

class ProxyTrustTest : public ::testing::Test {
 protected:
  static ProxyTrust Trust(const std::vector<std::string>& cidrs) {
    absl::StatusOr<ProxyTrust> trust = ProxyTrust::FromCidrs(cidrs);
    EXPECT_TRUE(trust.ok()) << trust.status();
    return trust.ok() ? *std::move(trust) : ProxyTrust();
  }
  static ip::address Ip(const std::string& text) { return ip::make_address(text); }

  // A load balancer at 10.0.0.1 and a local proxy at ::1, as many deployments have.
  ProxyTrust trust_ = Trust({"10.0.0.0/8", "::1/128"});
};

TEST_F(ProxyTrustTest, TrustsAddressesInsideANetwork) {
  EXPECT_TRUE(trust_.Trusts(Ip("10.0.0.1")));
  EXPECT_TRUE(trust_.Trusts(Ip("10.255.255.255")));
  EXPECT_TRUE(trust_.Trusts(Ip("::1")));
}

TEST_F(ProxyTrustTest, DoesNotTrustAddressesOutsideEveryNetwork) {
  EXPECT_FALSE(trust_.Trusts(Ip("11.0.0.1")));
  EXPECT_FALSE(trust_.Trusts(Ip("9.255.255.255")));
  EXPECT_FALSE(trust_.Trusts(Ip("::2")));
}

TEST_F(ProxyTrustTest, ABareAddressTrustsOnlyItself) {
  const ProxyTrust trust = Trust({"192.168.1.1", "2001:db8::1"});
  EXPECT_TRUE(trust.Trusts(Ip("192.168.1.1")));
  EXPECT_FALSE(trust.Trusts(Ip("192.168.1.2")));
  EXPECT_TRUE(trust.Trusts(Ip("2001:db8::1")));
  EXPECT_FALSE(trust.Trusts(Ip("2001:db8::2")));
}

TEST_F(ProxyTrustTest, PrefixesThatAreNotByteAlignedMatchBitByBit) {
  const ProxyTrust trust = Trust({"172.16.0.0/12", "fd00::/7"});
  EXPECT_TRUE(trust.Trusts(Ip("172.31.255.255")));
  EXPECT_FALSE(trust.Trusts(Ip("172.32.0.0")));
  EXPECT_TRUE(trust.Trusts(Ip("fc00::1")));
  EXPECT_FALSE(trust.Trusts(Ip("fe00::1")));
}

TEST_F(ProxyTrustTest, ZeroPrefixTrustsEveryAddressOfItsFamily) {
  const ProxyTrust trust = Trust({"0.0.0.0/0"});
  EXPECT_TRUE(trust.Trusts(Ip("203.0.113.9")));
  EXPECT_FALSE(trust.Trusts(Ip("2001:db8::1")));
}

TEST_F(ProxyTrustTest, AnIpv4MappedPeerMatchesAnIpv4Network) {
  EXPECT_TRUE(trust_.Trusts(Ip("::ffff:10.1.2.3")));
}

TEST_F(ProxyTrustTest, AnIpv4MappedNetworkMatchesIpv4Addresses) {
  const ProxyTrust trust = Trust({"::ffff:10.0.0.0/104"});
  EXPECT_TRUE(trust.Trusts(Ip("10.9.9.9")));
  EXPECT_FALSE(trust.Trusts(Ip("11.0.0.1")));
}

TEST_F(ProxyTrustTest, NothingIsTrustedWithoutNetworks) {
  EXPECT_FALSE(Trust({}).Trusts(Ip("127.0.0.1")));
}

TEST_F(ProxyTrustTest, RefusesBadCidrsNamingTheEntry) {
  for (const std::string cidr : {"10.0.0.0/33", "::1/129", "10.0.0.0/", "10.0.0.0/x", "10.0.0",
                                 "example.com", "", "fe80::1%eth0", "::ffff:10.0.0.0/95"}) {
    absl::StatusOr<ProxyTrust> trust = ProxyTrust::FromCidrs({"10.0.0.0/8", cidr});
    EXPECT_EQ(trust.status().code(), absl::StatusCode::kInvalidArgument) << cidr;
    EXPECT_EQ(trust.status().message(), "trusted_proxies[1]: bad CIDR \"" + cidr + "\"");
  }
}

TEST_F(ProxyTrustTest, AnUntrustedPeerIsTheClientWhateverItForwards) {
  EXPECT_EQ(trust_.ClientAddress(Ip("203.0.113.7"), "198.51.100.1"), "203.0.113.7");
}

TEST_F(ProxyTrustTest, ATrustedPeerWithoutForwardedForIsTheClient) {
  EXPECT_EQ(trust_.ClientAddress(Ip("10.0.0.1"), ""), "10.0.0.1");
}

TEST_F(ProxyTrustTest, ATrustedPeerForwardsTheRightmostAddress) {
  EXPECT_EQ(trust_.ClientAddress(Ip("10.0.0.1"), "198.51.100.1"), "198.51.100.1");
}

TEST_F(ProxyTrustTest, SkipsTrustedHopsFromTheRight) {
  EXPECT_EQ(trust_.ClientAddress(Ip("::1"), "192.0.2.66, 198.51.100.1, 10.0.0.2, 10.0.0.1"),
            "198.51.100.1");
}

TEST_F(ProxyTrustTest, IgnoresWhatTheClientItselfClaimsToForward) {
  // The client wrote "1.1.1.1" into its own X-Forwarded-For; the proxy appended the real address.
  EXPECT_EQ(trust_.ClientAddress(Ip("10.0.0.1"), "1.1.1.1,198.51.100.1"), "198.51.100.1");
}

TEST_F(ProxyTrustTest, EveryHopTrustedGivesTheLeftmost) {
  EXPECT_EQ(trust_.ClientAddress(Ip("10.0.0.1"), "10.0.0.3, 10.0.0.2"), "10.0.0.3");
}

TEST_F(ProxyTrustTest, AMalformedEntryStopsTheWalkAtTheLastTrustedHop) {
  EXPECT_EQ(trust_.ClientAddress(Ip("10.0.0.1"), "198.51.100.1, unknown, 10.0.0.2"), "10.0.0.2");
}

TEST_F(ProxyTrustTest, AMalformedRightmostEntryLeavesThePeer) {
  EXPECT_EQ(trust_.ClientAddress(Ip("10.0.0.1"), "198.51.100.1, garbage"), "10.0.0.1");
}

TEST_F(ProxyTrustTest, AnEmptyEntryIsMalformed) {
  EXPECT_EQ(trust_.ClientAddress(Ip("10.0.0.1"), "198.51.100.1,"), "10.0.0.1");
  EXPECT_EQ(trust_.ClientAddress(Ip("10.0.0.1"), "198.51.100.1,,10.0.0.2"), "10.0.0.2");
}

TEST_F(ProxyTrustTest, AcceptsPortsAndBrackets) {
  EXPECT_EQ(trust_.ClientAddress(Ip("10.0.0.1"), "198.51.100.1:4711"), "198.51.100.1");
  EXPECT_EQ(trust_.ClientAddress(Ip("10.0.0.1"), "[2001:db8::7]"), "2001:db8::7");
  EXPECT_EQ(trust_.ClientAddress(Ip("10.0.0.1"), "[2001:db8::7]:443"), "2001:db8::7");
}

TEST_F(ProxyTrustTest, RefusesMalformedPortsAndBrackets) {
  for (const char* entry : {"198.51.100.1:", "198.51.100.1:x", "[2001:db8::7", "[2001:db8::7]x",
                            "[198.51.100.1]", "2001:db8::7%eth0", "1.2.3.4.5"}) {
    EXPECT_EQ(trust_.ClientAddress(Ip("10.0.0.1"), entry), "10.0.0.1") << entry;
  }
}

TEST_F(ProxyTrustTest, ReturnsCanonicalIpv6WithoutBrackets) {
  EXPECT_EQ(trust_.ClientAddress(Ip("10.0.0.1"), "2001:DB8:0:0:0:0:0:7"), "2001:db8::7");
}

TEST_F(ProxyTrustTest, AnIpv4MappedPeerIsReportedAsIpv4) {
  EXPECT_EQ(trust_.ClientAddress(Ip("::ffff:203.0.113.7"), ""), "203.0.113.7");
}

TEST_F(ProxyTrustTest, AnIpv4MappedForwardedAddressIsReportedAsIpv4) {
  EXPECT_EQ(trust_.ClientAddress(Ip("::ffff:10.0.0.1"), "::ffff:198.51.100.1"), "198.51.100.1");
}

TEST_F(ProxyTrustTest, DropsTheZoneOfALinkLocalPeer) {
  EXPECT_EQ(Trust({}).ClientAddress(Ip("fe80::1%1"), ""), "fe80::1");
}

TEST(ForwardedForNodesTest, ReadsTheForNodeOfEachElement) {
  EXPECT_EQ(
      ForwardedForNodes("for=192.0.2.60;proto=http;by=203.0.113.43, For=\"[2001:db8::17]:4711\""),
      "192.0.2.60,[2001:db8::17]:4711");
  EXPECT_EQ(ForwardedForNodes("proto=https, for=unknown, for=_hidden"), "unknown,unknown,_hidden");
  EXPECT_EQ(ForwardedForNodes("for=\"a,b\";by=x, for=1.2.3.4"), "unknown,1.2.3.4");
  EXPECT_EQ(ForwardedForNodes("for=1.1.1.1\nfor=2.2.2.2"), "1.1.1.1,2.2.2.2");
  EXPECT_EQ(ForwardedForNodes(" , ,for=1.1.1.1,,"), "1.1.1.1");
}

TEST(ForwardedForNodesTest, ABrokenElementIsUnknownAndCannotSwallowTheNextLine) {
  EXPECT_EQ(ForwardedForNodes("for=1.1.1.1, x=\"\nfor=2.2.2.2"), "1.1.1.1,unknown,2.2.2.2");
  EXPECT_EQ(ForwardedForNodes("for=1.1.1.1;x=\", for=2.2.2.2"), "unknown");
  EXPECT_EQ(ForwardedForNodes("for=\"1.1.1.1\"x, for=2.2.2.2"), "unknown,2.2.2.2");
  EXPECT_EQ(ForwardedForNodes("for=1.1.1.1;for=3.3.3.3"), "unknown");
  EXPECT_EQ(ForwardedForNodes("for = 1.1.1.1"), "unknown");
  EXPECT_EQ(ForwardedForNodes("for="), "unknown");
  EXPECT_EQ(ForwardedForNodes("garbage"), "unknown");
}

TEST_F(ProxyTrustTest, BothHeadersMustAgreeOrThePeerIsTheClient) {
  const ProxyTrust trust = Trust({"127.0.0.2/32"});
  EXPECT_EQ(trust.ClientAddress(Ip("127.0.0.2"), "", "for=1.1.1.1"), "1.1.1.1");
  EXPECT_EQ(trust.ClientAddress(Ip("127.0.0.2"), "1.1.1.1", "for=1.1.1.1"), "1.1.1.1");
  EXPECT_EQ(trust.ClientAddress(Ip("127.0.0.2"), "1.1.1.1", "for=2.2.2.2"), "127.0.0.2");
  EXPECT_EQ(trust.ClientAddress(Ip("10.0.0.1"), "1.1.1.1", "for=2.2.2.2"), "10.0.0.1");
}

// How anonymous clients are grouped: by default one subject per IPv4 address and per IPv6 /64.
class ClientNetworkTest : public ::testing::Test {
 protected:
  static std::string Network(const std::string& address, ClientPrefixes prefixes = {}) {
    return ClientNetwork(ip::make_address(address), prefixes);
  }
};

TEST_F(ClientNetworkTest, EveryAddressOfOneIpv6Slash64IsOneNetwork) {
  EXPECT_EQ(Network("2001:db8:1:2::1"), "2001:db8:1:2::/64");
  EXPECT_EQ(Network("2001:db8:1:2:ffff:ffff:ffff:ffff"), "2001:db8:1:2::/64");
  EXPECT_EQ(Network("2001:db8:1:2:a:b:c:d"), "2001:db8:1:2::/64");
  EXPECT_EQ(Network("2001:db8:1:3::1"), "2001:db8:1:3::/64");
}

TEST_F(ClientNetworkTest, CompressedAndExpandedSpellingsAreOneNetwork) {
  EXPECT_EQ(Network("2001:0DB8:0001:0002:0000:0000:0000:0007"), "2001:db8:1:2::/64");
  EXPECT_EQ(Network("2001:db8:1:2:0:0:0:7"), "2001:db8:1:2::/64");
  EXPECT_EQ(Network("fe80::1%1"), "fe80::/64");
}

TEST_F(ClientNetworkTest, AnIpv4MappedAddressIsItsIpv4Address) {
  EXPECT_EQ(Network("::ffff:203.0.113.7"), "203.0.113.7");
  EXPECT_EQ(Network("::ffff:203.0.113.7", {.ipv4 = 24}), "203.0.113.0/24");
}

TEST_F(ClientNetworkTest, AnIpv4AddressIsItselfUnlessAShorterPrefixIsSet) {
  EXPECT_EQ(Network("203.0.113.7"), "203.0.113.7");
  EXPECT_EQ(Network("203.0.113.7", {.ipv4 = 24}), "203.0.113.0/24");
  EXPECT_EQ(Network("203.0.113.250", {.ipv4 = 24}), "203.0.113.0/24");
  EXPECT_EQ(Network("203.0.114.7", {.ipv4 = 24}), "203.0.114.0/24");
  EXPECT_EQ(Network("203.0.113.7", {.ipv4 = 1}), "128.0.0.0/1");
  // The IPv6 prefix does not touch IPv4 clients, nor the IPv4 one IPv6 clients.
  EXPECT_EQ(Network("203.0.113.7", {.ipv4 = 32, .ipv6 = 8}), "203.0.113.7");
  EXPECT_EQ(Network("2001:db8::1", {.ipv4 = 8, .ipv6 = 128}), "2001:db8::1");
}

TEST_F(ClientNetworkTest, AShorterIpv6PrefixGroupsMore) {
  const ClientPrefixes slash48{.ipv6 = 48};
  EXPECT_EQ(Network("2001:db8:1:2::1", slash48), "2001:db8:1::/48");
  EXPECT_EQ(Network("2001:db8:1:ffff::1", slash48), "2001:db8:1::/48");
  EXPECT_EQ(Network("2001:db8:2::1", slash48), "2001:db8:2::/48");
  // Prefixes that end inside a group clear only the bits beyond them.
  EXPECT_EQ(Network("2001:db8:1:2ff::1", {.ipv6 = 56}), "2001:db8:1:200::/56");
  EXPECT_EQ(Network("2001:db8:1:2::1", {.ipv6 = 1}), "::/1");
  EXPECT_EQ(Network("2001:db8:1:2::1", {.ipv6 = 128}), "2001:db8:1:2::1");
}

TEST_F(ClientNetworkTest, TheTextIsAValidSubject) {
  for (const char* address : {"2001:db8:1:2::1", "::1", "203.0.113.7", "::"}) {
    for (const int v6 : {1, 48, 64, 127, 128}) {
      EXPECT_TRUE(IsValidSubject("ip:" + Network(address, {.ipv4 = 24, .ipv6 = v6})))
          << address << "/" << v6;
    }
  }
  EXPECT_TRUE(
      IsValidSubject("ip:" + Network("ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe", {.ipv6 = 127})));
}

}  // namespace
}  // namespace sluice::frontend
