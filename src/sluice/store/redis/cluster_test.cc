#include "sluice/store/redis/cluster.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "sluice/common/stderr_capture.h"

namespace sluice::redis {
namespace {

using Argv = std::vector<std::string>;

TEST(Crc16Test, MatchesTheSpecificationsCheckValue) {
  EXPECT_EQ(Crc16("123456789"), 0x31C3);
  EXPECT_EQ(KeySlot("123456789"), 0x31C3 % kClusterSlots);
}

TEST(KeySlotTest, KnownSlots) {
  // Values redis-server's CLUSTER KEYSLOT gives.
  EXPECT_EQ(KeySlot("foo"), 12182);
  EXPECT_EQ(KeySlot("bar"), 5061);
  EXPECT_EQ(KeySlot(""), 0);
}

TEST(KeySlotTest, HashesOnlyTheFirstNonEmptyTag) {
  EXPECT_EQ(KeySlot("{user1000}.following"), KeySlot("user1000"));
  EXPECT_EQ(KeySlot("{user1000}.followers"), KeySlot("user1000"));
  EXPECT_EQ(KeySlot("foo{bar}{zap}"), KeySlot("bar"));
  EXPECT_EQ(KeySlot("foo{{bar}}zap"), KeySlot("{bar"));
  // An empty tag: the whole key.
  EXPECT_EQ(KeySlot("foo{}{bar}"), Crc16("foo{}{bar}") % kClusterSlots);
  EXPECT_EQ(KeySlot("sl:{7}:c:x"), KeySlot("7"));
  EXPECT_EQ(KeySlot("no{close"), Crc16("no{close") % kClusterSlots);
}

TEST(CommandKeyTest, FindsTheRoutingKey) {
  EXPECT_EQ(CommandKey(Argv{"EVALSHA", "abc", "2", "k1", "k2", "a"}), "k1");
  EXPECT_EQ(CommandKey(Argv{"EVAL", "return 1", "0"}), std::nullopt);
  EXPECT_EQ(CommandKey(Argv{"XREADGROUP", "GROUP", "g", "c", "COUNT", "5", "STREAMS", "s1", ">"}),
            "s1");
  EXPECT_EQ(CommandKey(Argv{"XGROUP", "CREATE", "s", "g", "0", "MKSTREAM"}), "s");
  EXPECT_EQ(CommandKey(Argv{"XAUTOCLAIM", "s", "g", "c", "1000", "0"}), "s");
  EXPECT_EQ(CommandKey(Argv{"MGET", "a", "b"}), "a");
  EXPECT_EQ(CommandKey(Argv{"time"}), std::nullopt);
  EXPECT_EQ(CommandKey(Argv{"CLIENT", "ID"}), std::nullopt);
  EXPECT_EQ(CommandKey(Argv{"SCRIPT", "LOAD", "return 1"}), std::nullopt);
}

TEST(ParseRedirectTest, MovedAndAsk) {
  std::optional<Redirect> moved = ParseRedirect("MOVED 3999 127.0.0.1:6381");
  ASSERT_TRUE(moved.has_value());
  EXPECT_EQ(moved->kind, Redirect::Kind::kMoved);
  EXPECT_EQ(moved->slot, 3999);
  EXPECT_EQ(moved->node, (NodeAddress{"127.0.0.1", 6381}));

  std::optional<Redirect> ask = ParseRedirect("ASK 0 [::1]:7000");
  ASSERT_TRUE(ask.has_value());
  EXPECT_EQ(ask->kind, Redirect::Kind::kAsk);
  EXPECT_EQ(ask->slot, 0);
  EXPECT_EQ(ask->node, (NodeAddress{"::1", 7000}));

  // Redis 7 leaves the host out when the node does not know it: the replying node's.
  std::optional<Redirect> hostless = ParseRedirect("MOVED 16383 :7002");
  ASSERT_TRUE(hostless.has_value());
  EXPECT_EQ(hostless->node, (NodeAddress{"", 7002}));
}

TEST(ParseRedirectTest, RefusesWhatIsNoRedirection) {
  EXPECT_FALSE(ParseRedirect("ERR unknown command").has_value());
  EXPECT_FALSE(ParseRedirect("MOVED 16384 127.0.0.1:1").has_value());
  EXPECT_FALSE(ParseRedirect("MOVED -1 127.0.0.1:1").has_value());
  EXPECT_FALSE(ParseRedirect("MOVED 1 127.0.0.1:0").has_value());
  EXPECT_FALSE(ParseRedirect("MOVED 1 127.0.0.1").has_value());
  EXPECT_FALSE(ParseRedirect("MOVED 1").has_value());
  EXPECT_FALSE(ParseRedirect("ASK x 127.0.0.1:1").has_value());
  EXPECT_FALSE(ParseRedirect("MOVED 1 a:1 extra").has_value());
}

TEST(ParseRedirectTest, AnUnknownEndpointIsNoRedirection) {
  EXPECT_FALSE(ParseRedirect("MOVED 1 ?:7002").has_value());
  EXPECT_FALSE(ParseRedirect("ASK 1 ?:7002").has_value());
}

TEST(ClusterNameTest, NamesTheSeedsAsTheyAreWritten) {
  const std::vector<NodeAddress> seeds = {{"10.0.0.1", 7000}, {"fd00::1", 7001}, {"redis-a", 7002}};
  EXPECT_EQ(ClusterName(seeds), "cluster 10.0.0.1:7000,[fd00::1]:7001,redis-a:7002");
}

TEST(ParseNodeAddressTest, HostAndPort) {
  EXPECT_EQ(ParseNodeAddress("10.0.0.1:6379"), (NodeAddress{"10.0.0.1", 6379}));
  EXPECT_EQ(ParseNodeAddress("[fd00::1]:6379"), (NodeAddress{"fd00::1", 6379}));
  EXPECT_FALSE(ParseNodeAddress(":6379").has_value());
  EXPECT_FALSE(ParseNodeAddress("host:65536").has_value());
}

Reply Int(int64_t v) { return Reply{.type = Reply::Type::kInteger, .integer = v}; }
Reply Str(std::string s) { return Reply{.type = Reply::Type::kString, .str = std::move(s)}; }
Reply Err(std::string s) { return Reply{.type = Reply::Type::kError, .str = std::move(s)}; }
Reply Arr(std::vector<Reply> e) { return Reply{.type = Reply::Type::kArray, .elements = e}; }
Reply NodeReply(const std::string& host, int port) {
  return Arr({Str(host), Int(port), Str("id")});
}

TEST(ParseClusterSlotsTest, RangesMastersAndReplicas) {
  const Reply reply =
      Arr({Arr({Int(0), Int(5460), NodeReply("127.0.0.1", 7000), NodeReply("127.0.0.1", 7003)}),
           Arr({Int(5461), Int(16383), NodeReply("", 7001)})});
  absl::StatusOr<std::vector<SlotRange>> ranges = ParseClusterSlots(reply, "10.1.1.1");
  ASSERT_TRUE(ranges.ok()) << ranges.status();
  ASSERT_EQ(ranges->size(), 2u);
  EXPECT_EQ((*ranges)[0].last, 5460);
  EXPECT_EQ((*ranges)[0].master, (NodeAddress{"127.0.0.1", 7000}));
  ASSERT_EQ((*ranges)[0].replicas.size(), 1u);
  EXPECT_EQ((*ranges)[1].master, (NodeAddress{"10.1.1.1", 7001}));
  EXPECT_FALSE(ParseClusterSlots(Arr({Arr({Int(5), Int(2), NodeReply("a", 1)})}), "").ok());
  EXPECT_FALSE(ParseClusterSlots(Arr({Arr({Int(0), Int(16384), NodeReply("a", 1)})}), "").ok());
  EXPECT_FALSE(ParseClusterSlots(Str("x"), "").ok());
}

TEST(ParseClusterSlotsTest, NullEndpointIsTheAskedHostAndUnknownIsLeftOut) {
  const Reply nil{.type = Reply::Type::kNil};
  const Reply reply = Arr({Arr({Int(0), Int(99), Arr({nil, Int(7000), Str("id")}),
                                NodeReply("?", 7003), NodeReply("10.0.0.4", 7004)}),
                           Arr({Int(100), Int(16383), NodeReply("?", 7001)})});
  absl::StatusOr<std::vector<SlotRange>> ranges = ParseClusterSlots(reply, "10.1.1.1");
  ASSERT_TRUE(ranges.ok()) << ranges.status();
  // The range whose master is unknown has no master; the unknown replica is left out.
  ASSERT_EQ(ranges->size(), 1u);
  EXPECT_EQ((*ranges)[0].master, (NodeAddress{"10.1.1.1", 7000}));
  ASSERT_EQ((*ranges)[0].replicas.size(), 1u);
  EXPECT_EQ((*ranges)[0].replicas[0], (NodeAddress{"10.0.0.4", 7004}));
}

// A cluster of fake nodes: each node's link answers by `answer(node, argv)`, posted.
class FakeCluster {
 public:
  using Answer = std::function<Reply(const NodeAddress&, const Argv&)>;

  struct Sent {
    NodeAddress node;
    Argv argv;
  };

  class Link final : public CommandSender {
   public:
    Link(boost::asio::io_context& io, NodeAddress node, FakeCluster* cluster)
        : io_(io), node_(std::move(node)), cluster_(cluster) {}
    void Start() override {}
    void Stop() override {}
    void Send(Argv argv, Callback done, LateCallback late) override {
      if (argv[0] != "CLUSTER") cluster_->sent.push_back({node_, argv});
      Reply r = cluster_->answer(node_, argv);
      if (r.is_error() && r.str == "fake: time out") {
        // As Connection: DeadlineExceeded now, the reply later to `late`.
        boost::asio::post(io_, [done = std::move(done), late = std::move(late)]() mutable {
          std::move(done)(absl::DeadlineExceededError("timeout"));
          if (late) std::move(late)(Reply{.type = Reply::Type::kString, .str = "late reply"});
        });
        return;
      }
      boost::asio::post(io_, [done = std::move(done), r = std::move(r)]() mutable {
        std::move(done)(std::move(r));
      });
    }
    void SendDespiteBreaker(Argv argv, Callback done, LateCallback late) override {
      Send(std::move(argv), std::move(done), std::move(late));
    }
    bool connected() const override { return true; }

   private:
    boost::asio::io_context& io_;
    NodeAddress node_;
    FakeCluster* cluster_;
  };

  ClusterOptions Options() {
    ClusterOptions o;
    o.seeds = {{"127.0.0.1", 7000}};
    o.connection.command_timeout = std::chrono::milliseconds(1000);
    o.make_link = [this](boost::asio::io_context& io, const ConnectionOptions& c) {
      linked.push_back(NodeAddress{c.host, c.port});
      return std::make_unique<Link>(io, NodeAddress{c.host, c.port}, this);
    };
    return o;
  }

  Answer answer;
  std::vector<Sent> sent;
  std::vector<NodeAddress> linked;  // every link made, in order
};

class ClusterClientTest : public ::testing::Test {
 protected:
  ClusterClientTest() {
    // Slots 0..8191 on 7000, the rest on 7001.
    slots_ = Arr({Arr({Int(0), Int(8191), NodeReply("127.0.0.1", 7000)}),
                  Arr({Int(8192), Int(16383), NodeReply("127.0.0.1", 7001)})});
    fake_.answer = [this](const NodeAddress& node, const Argv& argv) {
      if (argv[0] == "CLUSTER") return slots_;
      if (on_command_) return on_command_(node, argv);
      return Str(absl::StrCat("ok from ", node.port));
    };
    // No refresh during a test unless it asks for one.
    Make(std::chrono::milliseconds(100'000));
  }

  void Make(std::chrono::milliseconds refresh, size_t max_nodes = 1000) {
    ClusterOptions options = fake_.Options();
    options.max_nodes = max_nodes;
    options.refresh_interval = refresh;
    options.refresh_min_interval = refresh;
    client_ = std::make_unique<ClusterClient>(io_, std::move(options));
    client_->Start();
    RunUntil([&] { return client_->connected(); });
  }

  void RunUntil(const std::function<bool()>& done) {
    for (int i = 0; i < 100000 && !done(); ++i) io_.run_one_for(std::chrono::milliseconds(5));
    ASSERT_TRUE(done());
  }

  absl::StatusOr<Reply> Call(Argv argv) {
    std::optional<absl::StatusOr<Reply>> out;
    fake_.sent.clear();
    client_->Send(std::move(argv), [&](absl::StatusOr<Reply> r) { out = std::move(r); });
    RunUntil([&] { return out.has_value(); });
    return *out;
  }

  // Keys on either side of the map: "foo" is slot 12182 (7001), "bar" 5061 (7000).
  boost::asio::io_context io_;
  FakeCluster fake_;
  Reply slots_;
  FakeCluster::Answer on_command_;
  std::unique_ptr<ClusterClient> client_;
};

TEST_F(ClusterClientTest, RoutesEachCommandToItsSlotsMaster) {
  absl::StatusOr<Reply> foo = Call({"GET", "foo"});
  ASSERT_TRUE(foo.ok());
  EXPECT_EQ(foo->str, "ok from 7001");
  absl::StatusOr<Reply> bar = Call({"EVALSHA", "sha", "1", "bar", "x"});
  ASSERT_TRUE(bar.ok());
  EXPECT_EQ(bar->str, "ok from 7000");
  EXPECT_EQ(client_->MasterOf(KeySlot("foo"))->port, 7001);
}

TEST_F(ClusterClientTest, MovedUpdatesTheMapAndRetriesOnceOnTheNamedNode) {
  on_command_ = [](const NodeAddress& node, const Argv&) {
    if (node.port == 7001) return Err(absl::StrCat("MOVED ", KeySlot("foo"), " 127.0.0.1:7002"));
    return Str(absl::StrCat("ok from ", node.port));
  };
  absl::StatusOr<Reply> r = Call({"GET", "foo"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->str, "ok from 7002");
  EXPECT_EQ(client_->MasterOf(KeySlot("foo"))->port, 7002);
  EXPECT_EQ(client_->stats().moved, 1u);
  // The next command goes straight there.
  ASSERT_TRUE(Call({"GET", "foo"}).ok());
  ASSERT_EQ(fake_.sent.size(), 1u);
  EXPECT_EQ(fake_.sent[0].node.port, 7002);
}

TEST_F(ClusterClientTest, AskSendsAskingWithTheCommandAndKeepsTheMap) {
  on_command_ = [](const NodeAddress& node, const Argv& argv) {
    if (node.port == 7001) return Err(absl::StrCat("ASK ", KeySlot("foo"), " 127.0.0.1:7002"));
    return Str(absl::StrCat(argv[0], " on ", node.port));
  };
  absl::StatusOr<Reply> r = Call({"GET", "foo"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->str, "GET on 7002");
  ASSERT_EQ(fake_.sent.size(), 3u);
  EXPECT_EQ(fake_.sent[1].node.port, 7002);
  EXPECT_EQ(fake_.sent[1].argv, Argv{"ASKING"});
  EXPECT_EQ(fake_.sent[2].node.port, 7002);
  EXPECT_EQ(client_->MasterOf(KeySlot("foo"))->port, 7001);
  EXPECT_EQ(client_->stats().asked, 1u);
}

TEST_F(ClusterClientTest, RedirectionsAreBounded) {
  // Two nodes sending the command to each other forever: the caller gets the last MOVED.
  on_command_ = [](const NodeAddress& node, const Argv&) {
    return Err(
        absl::StrCat("MOVED ", KeySlot("foo"), " 127.0.0.1:", node.port == 7001 ? 7000 : 7001));
  };
  absl::StatusOr<Reply> r = Call({"GET", "foo"});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->is_error());
  EXPECT_TRUE(r->str.starts_with("MOVED"));
  EXPECT_EQ(fake_.sent.size(), 4u);  // the command and at most three retries
}

TEST_F(ClusterClientTest, TryAgainIsRetriedOnTheSlotsMaster) {
  int calls = 0;
  on_command_ = [&](const NodeAddress& node, const Argv&) {
    if (++calls == 1) return Err("TRYAGAIN Multiple keys request during rehashing of slot");
    return Str(absl::StrCat("ok from ", node.port));
  };
  absl::StatusOr<Reply> r = Call({"GET", "foo"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->str, "ok from 7001");
  EXPECT_EQ(client_->stats().tryagain, 1u);
}

TEST_F(ClusterClientTest, ClusterDownIsTheCallersFailure) {
  on_command_ = [](const NodeAddress&, const Argv&) {
    return Err("CLUSTERDOWN The cluster is down");
  };
  absl::StatusOr<Reply> r = Call({"GET", "foo"});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->is_error());
  EXPECT_EQ(fake_.sent.size(), 1u);
}

TEST_F(ClusterClientTest, ASlotWithoutMasterIsUnavailable) {
  Make(std::chrono::milliseconds(10));
  slots_ = Arr({Arr({Int(0), Int(8191), NodeReply("127.0.0.1", 7000)})});
  const uint64_t before = client_->stats().refreshes;
  RunUntil([&] { return client_->stats().refreshes > before; });
  absl::StatusOr<Reply> r = Call({"GET", "foo"});
  EXPECT_TRUE(absl::IsUnavailable(r.status())) << r.status();
  EXPECT_TRUE(fake_.sent.empty());
  EXPECT_TRUE(Call({"GET", "bar"}).ok());
}

TEST_F(ClusterClientTest, ATimedOutCommandIsNotRetriedAndItsLateReplyGoesToLate) {
  on_command_ = [](const NodeAddress&, const Argv&) { return Err("fake: time out"); };
  std::optional<absl::StatusOr<Reply>> out;
  std::optional<Reply> late;
  fake_.sent.clear();
  client_->Send(
      {"EVALSHA", "sha", "1", "foo"}, [&](absl::StatusOr<Reply> r) { out = std::move(r); },
      [&](Reply r) { late = std::move(r); });
  RunUntil([&] { return late.has_value(); });
  ASSERT_TRUE(out.has_value());
  EXPECT_TRUE(absl::IsDeadlineExceeded(out->status())) << out->status();
  EXPECT_EQ(late->str, "late reply");
  EXPECT_EQ(fake_.sent.size(), 1u);
}

TEST_F(ClusterClientTest, TheLateReplyOfARedirectedCommandComesFromTheNodeThatRanIt) {
  on_command_ = [](const NodeAddress& node, const Argv&) {
    if (node.port == 7001) return Err(absl::StrCat("MOVED ", KeySlot("foo"), " 127.0.0.1:7002"));
    return Err("fake: time out");
  };
  std::optional<absl::StatusOr<Reply>> out;
  int lates = 0;
  client_->Send(
      {"EVALSHA", "sha", "1", "foo"}, [&](absl::StatusOr<Reply> r) { out = std::move(r); },
      [&](Reply) { ++lates; });
  RunUntil([&] { return lates > 0; });
  EXPECT_TRUE(absl::IsDeadlineExceeded(out->status()));
  EXPECT_EQ(lates, 1);
  EXPECT_EQ(fake_.sent.back().node.port, 7002);
}

TEST_F(ClusterClientTest, ScriptLoadGoesToEveryMaster) {
  absl::StatusOr<Reply> r = Call({"SCRIPT", "LOAD", "return 1"});
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(fake_.sent.size(), 2u);
  EXPECT_NE(fake_.sent[0].node.port, fake_.sent[1].node.port);
}

TEST_F(ClusterClientTest, ScriptLoadSucceedsWhenOneMasterFails) {
  on_command_ = [](const NodeAddress& node, const Argv&) {
    return node.port == 7000 ? Err("ERR down") : Str("sha");
  };
  absl::StatusOr<Reply> r = Call({"SCRIPT", "LOAD", "return 1"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->str, "sha");
  on_command_ = [](const NodeAddress&, const Argv&) { return Err("ERR down"); };
  r = Call({"SCRIPT", "LOAD", "return 1"});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->is_error());
}

TEST_F(ClusterClientTest, ScriptLoadAlsoReachesAMasterNamedByMovedSinceTheLastMap) {
  on_command_ = [](const NodeAddress& node, const Argv&) {
    if (node.port == 7001) return Err(absl::StrCat("MOVED ", KeySlot("foo"), " 127.0.0.1:7002"));
    return Str("ok");
  };
  ASSERT_TRUE(Call({"GET", "foo"}).ok());
  ASSERT_TRUE(Call({"SCRIPT", "LOAD", "return 1"}).ok());
  std::vector<int> ports;
  for (const auto& sent : fake_.sent) ports.push_back(sent.node.port);
  std::sort(ports.begin(), ports.end());
  EXPECT_EQ(ports, (std::vector<int>{7000, 7001, 7002}));
}

Reply TwoMasterMap(int second_port) {
  return Arr({Arr({Int(0), Int(8191), NodeReply("127.0.0.1", 7000)}),
              Arr({Int(8192), Int(16383), NodeReply("127.0.0.1", second_port)})});
}

TEST_F(ClusterClientTest, MoreAddressesOverTimeThanMaxNodesStillRoute) {
  // Pods that come back with new addresses: ten maps, each with a new second master, and
  // max_nodes 3 (the seed and two more).
  Make(std::chrono::milliseconds(10), /*max_nodes=*/3);
  for (int i = 0; i < 10; ++i) {
    const int port = 8000 + i;
    slots_ = TwoMasterMap(port);
    RunUntil([&] { return client_->MasterOf(KeySlot("foo"))->port == port; });
    absl::StatusOr<Reply> r = Call({"GET", "foo"});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->str, absl::StrCat("ok from ", port));
  }
  // A MOVED to yet another new node is followed too.
  on_command_ = [](const NodeAddress& node, const Argv&) {
    if (node.port == 7000) return Err(absl::StrCat("MOVED ", KeySlot("bar"), " 127.0.0.1:9000"));
    return Str(absl::StrCat("ok from ", node.port));
  };
  absl::StatusOr<Reply> r = Call({"GET", "bar"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->str, "ok from 9000");
}

TEST_F(ClusterClientTest, AMapNamingMoreThanMaxNodesIsRefusedBeforeAnyLinkIsMade) {
  Make(std::chrono::milliseconds(10), /*max_nodes=*/3);
  ASSERT_EQ(client_->MasterOf(KeySlot("foo"))->port, 7001);
  // Four distinct nodes (with the seed): refused, the old map stays.
  slots_ = Arr({Arr({Int(0), Int(5000), NodeReply("127.0.0.1", 7000)}),
                Arr({Int(5001), Int(10000), NodeReply("127.0.0.1", 7005)}),
                Arr({Int(10001), Int(16383), NodeReply("127.0.0.1", 7006), NodeReply("h", 7007)})});
  const size_t links_before = fake_.linked.size();
  const uint64_t refreshes = client_->stats().refreshes;
  // Let several refreshes be asked for and answered.
  int asked = 0;
  fake_.answer = [&](const NodeAddress& node, const Argv& argv) {
    if (argv[0] == "CLUSTER") return ++asked, slots_;
    return Str(absl::StrCat("ok from ", node.port));
  };
  RunUntil([&] { return asked >= 3; });
  EXPECT_EQ(client_->stats().refreshes, refreshes);
  EXPECT_EQ(fake_.linked.size(), links_before);
  EXPECT_EQ(client_->MasterOf(KeySlot("foo"))->port, 7001);
  absl::StatusOr<Reply> r = Call({"GET", "foo"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->str, "ok from 7001");
}

TEST_F(ClusterClientTest, ARedirectionToAnUnknownEndpointIsNotFollowed) {
  on_command_ = [](const NodeAddress&, const Argv&) {
    return Err(absl::StrCat("MOVED ", KeySlot("foo"), " ?:7002"));
  };
  absl::StatusOr<Reply> r = Call({"GET", "foo"});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->is_error());
  EXPECT_EQ(fake_.sent.size(), 1u);  // not followed
  EXPECT_EQ(client_->MasterOf(KeySlot("foo"))->port, 7001);
  EXPECT_EQ(client_->stats().moved, 0u);
}

TEST_F(ClusterClientTest, AFailingFirstRefreshIsAskedAgainOnlyAfterTheMinimumInterval) {
  // A seed that is no cluster node answers CLUSTER SLOTS with an error at once; so does one whose
  // map is refused. Neither may be asked again at once, over and over.
  for (const bool refused_map : {false, true}) {
    int asked = 0;
    fake_.answer = [&](const NodeAddress& node, const Argv& argv) {
      if (argv[0] != "CLUSTER") return Str(absl::StrCat("ok from ", node.port));
      ++asked;
      if (!refused_map) return Err("ERR This instance has cluster support disabled");
      return Arr({Arr({Int(0), Int(8191), NodeReply("127.0.0.1", 7000)}),
                  Arr({Int(8192), Int(16383), NodeReply("127.0.0.1", 7001)})});
    };
    ClusterOptions options = fake_.Options();
    options.max_nodes = refused_map ? 1 : 1000;
    options.refresh_interval = std::chrono::milliseconds(1000);
    options.refresh_min_interval = std::chrono::milliseconds(50);
    client_ = std::make_unique<ClusterClient>(io_, std::move(options));
    const auto started = std::chrono::steady_clock::now();
    client_->Start();
    io_.restart();
    // It is asked again (not given up on), but never sooner than 50 ms after the last ask: four
    // asks take at least 150 ms however fast the machine (it was one every 10 ms: 30 ms).
    RunUntil([&] { return asked >= 4; });
    EXPECT_GE(std::chrono::steady_clock::now() - started, std::chrono::milliseconds(150))
        << refused_map;
    EXPECT_FALSE(client_->connected());
    client_->Stop();
    client_.reset();
  }
}

TEST_F(ClusterClientTest, ARefusedMapAndAFailedRefreshAreLoggedRateLimited) {
  StderrCapture log;
  Make(std::chrono::milliseconds(10), /*max_nodes=*/3);
  int asked = 0;
  fake_.answer = [&](const NodeAddress& node, const Argv& argv) {
    if (argv[0] != "CLUSTER") return Str(absl::StrCat("ok from ", node.port));
    ++asked;
    if (asked <= 3) {
      // Five nodes: refused.
      return Arr(
          {Arr({Int(0), Int(5000), NodeReply("127.0.0.1", 7000)}),
           Arr({Int(5001), Int(10000), NodeReply("127.0.0.1", 7005)}),
           Arr({Int(10001), Int(16383), NodeReply("127.0.0.1", 7006), NodeReply("h", 7007)})});
    }
    return Err("ERR This instance has cluster support disabled");
  };
  RunUntil([&] { return asked >= 6; });
  EXPECT_EQ(log.Count("slot map refused"), 1u) << log.Text();
  EXPECT_EQ(log.Count("cluster support disabled"), 1u) << log.Text();
}

}  // namespace
}  // namespace sluice::redis
