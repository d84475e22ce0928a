#include "sluice/store/redis/cluster.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <iterator>
#include <utility>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "sluice/common/log.h"
#include "sluice/common/strings.h"

namespace sluice::redis {
namespace {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

constexpr std::array<uint16_t, 256> MakeCrc16Table() {
  std::array<uint16_t, 256> table{};
  for (int i = 0; i < 256; ++i) {
    uint16_t crc = static_cast<uint16_t>(i << 8);
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc & 0x8000) != 0 ? static_cast<uint16_t>((crc << 1) ^ 0x1021)
                                : static_cast<uint16_t>(crc << 1);
    }
    table[i] = crc;
  }
  return table;
}
constexpr std::array<uint16_t, 256> kCrc16Table = MakeCrc16Table();

bool Is(std::string_view a, std::string_view b) {
  return absl::EqualsIgnoreCase(ToAbsl(a), ToAbsl(b));
}

// Commands that name no key (they go to the keyless node, see ClusterOptions::keyless_key).
bool IsKeyless(std::string_view command) {
  static constexpr std::string_view kKeyless[] = {
      "PING",   "TIME",     "INFO",      "CLIENT",   "SCRIPT", "CLUSTER", "ASKING", "AUTH",
      "SELECT", "HELLO",    "COMMAND",   "DBSIZE",   "ECHO",   "CONFIG",  "ROLE",   "READONLY",
      "WAIT",   "FLUSHALL", "RANDOMKEY", "LASTSAVE", "MULTI",  "EXEC",    "SCAN",   "KEYS"};
  return std::any_of(std::begin(kKeyless), std::end(kKeyless),
                     [&](std::string_view k) { return Is(command, k); });
}

// "host:port" with an optional host (a redirection may leave it empty: the replying node's).
std::optional<NodeAddress> ParseAddress(std::string_view text, bool host_required) {
  const size_t colon = text.rfind(':');
  if (colon == std::string_view::npos) return std::nullopt;
  std::string_view host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  int port = 0;
  if (!absl::SimpleAtoi(ToAbsl(text.substr(colon + 1)), &port) || port < 1 || port > 65535) {
    return std::nullopt;
  }
  // "?": the node does not know the target's address — no usable redirection.
  if ((host_required && host.empty()) || host == "?" || host.size() > 253) return std::nullopt;
  return NodeAddress{.host = std::string(host), .port = static_cast<uint16_t>(port)};
}

// An endpoint of "?": the node's address is unknown (cluster-preferred-endpoint-type
// unknown-endpoint on a node without one). Such a node cannot be reached.
bool IsUnknownEndpoint(const Reply& node) {
  return node.is_array() && !node.elements.empty() && node.elements[0].is_string() &&
         node.elements[0].str == "?";
}

// NULL or "" as the endpoint: the node asked (Redis: "the same endpoint as the one asked").
std::optional<NodeAddress> ParseSlotNode(const Reply& node, std::string_view asked_host) {
  if (IsUnknownEndpoint(node)) return std::nullopt;
  if (!node.is_array() || node.elements.size() < 2 ||
      !(node.elements[0].is_string() || node.elements[0].is_nil()) ||
      !node.elements[1].is_integer() || node.elements[1].integer < 1 ||
      node.elements[1].integer > 65535 || node.elements[0].str.size() > 253) {
    return std::nullopt;
  }
  std::string host = node.elements[0].str;
  if (host.empty()) host = std::string(asked_host);
  return NodeAddress{.host = std::move(host),
                     .port = static_cast<uint16_t>(node.elements[1].integer)};
}

// At most this many redirections and retries per command, and none begun after the command has
// been under way for the connection's max_wait (the longest it is waited for).
constexpr int kMaxRetries = 3;

}  // namespace

uint16_t Crc16(std::string_view data) {
  uint16_t crc = 0;
  for (unsigned char c : data) {
    crc = static_cast<uint16_t>((crc << 8) ^ kCrc16Table[((crc >> 8) ^ c) & 0xff]);
  }
  return crc;
}

int KeySlot(std::string_view key) {
  const size_t open = key.find('{');
  if (open != std::string_view::npos) {
    const size_t close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) {
      key = key.substr(open + 1, close - open - 1);
    }
  }
  return Crc16(key) & (kClusterSlots - 1);
}

std::optional<std::string_view> CommandKey(std::span<const std::string> argv) {
  if (argv.empty()) return std::nullopt;
  const std::string_view command = argv[0];
  if (Is(command, "EVAL") || Is(command, "EVALSHA") || Is(command, "EVAL_RO") ||
      Is(command, "EVALSHA_RO") || Is(command, "FCALL") || Is(command, "FCALL_RO")) {
    if (argv.size() < 4 || argv[2] == "0") return std::nullopt;
    return std::string_view(argv[3]);
  }
  if (Is(command, "XREAD") || Is(command, "XREADGROUP")) {
    for (size_t i = 1; i + 1 < argv.size(); ++i) {
      if (Is(argv[i], "STREAMS")) return std::string_view(argv[i + 1]);
    }
    return std::nullopt;
  }
  if (Is(command, "XGROUP") || Is(command, "XINFO")) {
    if (argv.size() < 3) return std::nullopt;
    return std::string_view(argv[2]);
  }
  if (IsKeyless(command) || argv.size() < 2) return std::nullopt;
  return std::string_view(argv[1]);
}

std::string ClusterName(std::span<const NodeAddress> seeds) {
  std::string out = "cluster";
  for (size_t i = 0; i < seeds.size(); ++i) {
    // An IPv6 host in brackets, as the seed was written: fd00::1 port 7000 is [fd00::1]:7000.
    const bool v6 = seeds[i].host.find(':') != std::string::npos;
    absl::StrAppend(&out, i == 0 ? " " : ",", v6 ? "[" : "", seeds[i].host, v6 ? "]" : "", ":",
                    seeds[i].port);
  }
  return out;
}

std::optional<NodeAddress> ParseNodeAddress(std::string_view text) {
  return ParseAddress(text, /*host_required=*/true);
}

std::optional<Redirect> ParseRedirect(std::string_view error) {
  Redirect r;
  std::string_view rest;
  if (error.starts_with("MOVED ")) {
    r.kind = Redirect::Kind::kMoved;
    rest = error.substr(6);
  } else if (error.starts_with("ASK ")) {
    r.kind = Redirect::Kind::kAsk;
    rest = error.substr(4);
  } else {
    return std::nullopt;
  }
  const size_t space = rest.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  if (!absl::SimpleAtoi(ToAbsl(rest.substr(0, space)), &r.slot) || r.slot < 0 ||
      r.slot >= kClusterSlots) {
    return std::nullopt;
  }
  const std::string_view address = rest.substr(space + 1);
  if (address.find(' ') != std::string_view::npos) return std::nullopt;
  std::optional<NodeAddress> node = ParseAddress(address, /*host_required=*/false);
  if (!node) return std::nullopt;
  r.node = *std::move(node);
  return r;
}

absl::StatusOr<std::vector<SlotRange>> ParseClusterSlots(const Reply& reply,
                                                         std::string_view asked_host) {
  if (!reply.is_array()) return absl::InternalError("redis cluster: CLUSTER SLOTS: not an array");
  std::vector<SlotRange> ranges;
  for (const Reply& e : reply.elements) {
    if (!e.is_array() || e.elements.size() < 3 || !e.elements[0].is_integer() ||
        !e.elements[1].is_integer()) {
      return absl::InternalError("redis cluster: CLUSTER SLOTS: malformed range");
    }
    SlotRange range;
    const int64_t first = e.elements[0].integer, last = e.elements[1].integer;
    if (first < 0 || last < first || last >= kClusterSlots) {
      return absl::InternalError("redis cluster: CLUSTER SLOTS: slot out of range");
    }
    range.first = static_cast<int>(first);
    range.last = static_cast<int>(last);
    // A master whose address is unknown: its slots have no usable master (as if it were down).
    if (IsUnknownEndpoint(e.elements[2])) continue;
    std::optional<NodeAddress> master = ParseSlotNode(e.elements[2], asked_host);
    if (!master) return absl::InternalError("redis cluster: CLUSTER SLOTS: malformed node");
    range.master = *std::move(master);
    for (size_t i = 3; i < e.elements.size(); ++i) {
      if (std::optional<NodeAddress> replica = ParseSlotNode(e.elements[i], asked_host)) {
        range.replicas.push_back(*std::move(replica));
      }
    }
    ranges.push_back(std::move(range));
  }
  return ranges;
}

class ClusterClient::Impl : public std::enable_shared_from_this<Impl> {
 public:
  Impl(asio::io_context& io, ClusterOptions options)
      : io_(io),
        options_(std::move(options)),
        timer_(io),
        slots_(kClusterSlots, nullptr),
        keyless_slot_(options_.keyless_key.empty() ? -1 : KeySlot(options_.keyless_key)) {}

  void Start() {
    if (started_ || stopped_) return;
    started_ = true;
    for (const NodeAddress& seed : options_.seeds) {
      if (Node* n = NodeFor(seed)) n->seed = true;
    }
    Arm(std::chrono::milliseconds(0));
  }

  void Stop() {
    if (stopped_) return;
    stopped_ = true;
    timer_.cancel();
    for (const auto& node : nodes_) node->link.reset();  // outstanding commands: Unavailable
  }

  // `argv` is shared, never copied: every attempt (a MOVED or ASK retry) sends the same one.
  void Send(std::shared_ptr<const std::vector<std::string>> argv, Callback done, LateCallback late,
            bool despite) {
    if (stopped_) {
      return Post(std::move(done), absl::UnavailableError("redis cluster: stopped"));
    }
    if (argv->size() >= 2 && Is((*argv)[0], "SCRIPT") && Is((*argv)[1], "LOAD")) {
      return Broadcast(*argv, std::move(done));
    }
    auto cmd = std::make_shared<Command>();
    const std::optional<std::string_view> key = CommandKey(*argv);
    cmd->slot = key ? KeySlot(*key) : keyless_slot_;
    cmd->argv = std::move(argv);
    cmd->done = std::move(done);
    cmd->late = std::move(late);
    cmd->despite = despite;
    cmd->started = Clock::now();
    Node* node = cmd->slot >= 0 ? slots_[cmd->slot] : AnyMaster();
    if (node == nullptr) return NoMaster(std::move(cmd));
    Dispatch(node, std::move(cmd), /*asking=*/false);
  }

  bool connected() const {
    if (!map_known_) return false;
    if (keyless_slot_ >= 0) {
      const Node* n = slots_[keyless_slot_];
      return n != nullptr && n->link != nullptr && n->link->connected();
    }
    return std::any_of(masters_.begin(), masters_.end(),
                       [](const Node* n) { return n->link != nullptr && n->link->connected(); });
  }

  std::optional<NodeAddress> MasterOf(int slot) const {
    if (slot < 0 || slot >= kClusterSlots || slots_[slot] == nullptr) return std::nullopt;
    return slots_[slot]->address;
  }

  ClusterStats stats() const {
    return ClusterStats{.moved = stats_.moved.load(std::memory_order_relaxed),
                        .asked = stats_.asked.load(std::memory_order_relaxed),
                        .tryagain = stats_.tryagain.load(std::memory_order_relaxed),
                        .refreshes = stats_.refreshes.load(std::memory_order_relaxed),
                        .no_master = stats_.no_master.load(std::memory_order_relaxed)};
  }

 private:
  // Held by shared_ptr: a command in flight keeps the node it was sent to, even once a new map
  // has dropped it from nodes_.
  struct Node : std::enable_shared_from_this<Node> {
    explicit Node(NodeAddress a) : address(std::move(a)) {}
    NodeAddress address;
    std::unique_ptr<CommandSender> link;  // null while the node is out of the map
    bool seed = false;
  };

  struct Command {
    std::shared_ptr<const std::vector<std::string>> argv;
    Callback done;
    LateCallback late;
    bool despite = false;
    int slot = -1;
    int retries = 0;
    Clock::time_point started;
  };

  void Post(Callback done, absl::StatusOr<Reply> result) {
    asio::post(io_, [done = std::move(done), result = std::move(result)]() mutable {
      std::move(done)(std::move(result));
    });
  }

  Node* Find(const NodeAddress& address) const {
    for (const auto& n : nodes_) {
      if (n->address == address) return n.get();
    }
    return nullptr;
  }

  // The node at `address`, its link made (and started) if it has none; null when max_nodes nodes
  // are in use already (nodes_ holds only the nodes in use: the last map's, the seeds, and those a
  // redirection has named since).
  Node* NodeFor(const NodeAddress& address) {
    Node* node = Find(address);
    if (node == nullptr) {
      if (nodes_.size() >= options_.max_nodes) {
        Warn("redis cluster: node refused: max_nodes in use", absl::StrCat(nodes_.size()));
        return nullptr;
      }
      nodes_.push_back(std::make_shared<Node>(address));
      node = nodes_.back().get();
    }
    Link(node);
    return node;
  }

  void Link(Node* node) {
    const NodeAddress& address = node->address;
    if (node->link == nullptr && !stopped_) {
      ConnectionOptions connection = options_.connection;
      connection.host = address.host;
      connection.port = address.port;
      if (options_.make_link) {
        node->link = options_.make_link(io_, connection);
      } else {
        node->link = std::make_unique<Connection>(io_, connection);
      }
      node->link->Start();
    }
  }

  Node* AnyMaster() const {
    for (Node* n : masters_) {
      if (n->link != nullptr && n->link->connected()) return n;
    }
    return masters_.empty() ? nullptr : masters_.front();
  }

  void NoMaster(std::shared_ptr<Command> cmd) {
    stats_.no_master.fetch_add(1, std::memory_order_relaxed);
    RequestRefresh();
    Post(std::move(cmd->done),
         absl::UnavailableError(
             cmd->slot >= 0 ? absl::StrCat("redis cluster: no master known for slot ", cmd->slot)
                            : std::string("redis cluster: no master known")));
  }

  void Dispatch(Node* node, std::shared_ptr<Command> cmd, bool asking) {
    if (node->link == nullptr) {
      // Dropped from the map since: the slot map is stale.
      node = NodeFor(node->address);
      if (node == nullptr || node->link == nullptr) return NoMaster(std::move(cmd));
    }
    LateCallback late = nullptr;
    if (cmd->late) {
      // Only the attempt whose `done` timed out can have a late reply: there is no retry then.
      late = [cmd](Reply r) {
        if (cmd->late) std::exchange(cmd->late, nullptr)(std::move(r));
      };
    }
    auto on_reply = [self = shared_from_this(), node = node->shared_from_this(),
                     cmd](absl::StatusOr<Reply> r) mutable {
      self->OnReply(node.get(), std::move(cmd), std::move(r));
    };
    CommandSender& link = *node->link;
    if (asking) {
      // Pipelined with the command: both are queued before the connection next writes.
      link.SendDespiteBreaker({"ASKING"}, [](absl::StatusOr<Reply>) {});
    }
    if (cmd->despite) {
      // Rare (a refund): the one copy is Connection's interface.
      link.SendDespiteBreaker(*cmd->argv, std::move(on_reply), std::move(late));
    } else {
      link.SendShared(cmd->argv, std::move(on_reply), std::move(late));
    }
  }

  bool MayRetry(const Command& cmd) const {
    return !stopped_ && cmd.retries < kMaxRetries &&
           Clock::now() - cmd.started <
               std::max(options_.connection.max_wait, options_.connection.command_timeout);
  }

  void OnReply(Node* from, std::shared_ptr<Command> cmd, absl::StatusOr<Reply> r) {
    if (!r.ok()) {
      if (absl::IsUnavailable(r.status()) && ToStd(r.status().message()) != kCircuitOpenMessage) {
        RequestRefresh();  // a lost connection: perhaps a failover
      }
      return Finish(std::move(cmd), std::move(r));
    }
    if (r->is_error()) {
      if (std::optional<Redirect> redirect = ParseRedirect(r->str)) {
        if (redirect->node.host.empty()) redirect->node.host = from->address.host;
        if (redirect->kind == Redirect::Kind::kMoved) {
          RequestRefresh();
          Node* target = NodeFor(redirect->node);
          if (target != nullptr) slots_[redirect->slot] = target;
          if (target != nullptr && MayRetry(*cmd)) {
            stats_.moved.fetch_add(1, std::memory_order_relaxed);
            ++cmd->retries;
            return Dispatch(target, std::move(cmd), /*asking=*/false);
          }
        } else if (Node* target = NodeFor(redirect->node); target != nullptr && MayRetry(*cmd)) {
          stats_.asked.fetch_add(1, std::memory_order_relaxed);
          ++cmd->retries;
          return Dispatch(target, std::move(cmd), /*asking=*/true);
        }
      } else if (r->str.starts_with("MOVED ") || r->str.starts_with("ASK ")) {
        // A redirection naming no usable node ("?:port", say): the map will tell.
        RequestRefresh();
        Warn("redis cluster: unusable redirection", FirstLine(r->str));
      } else if (r->str.starts_with("TRYAGAIN") && cmd->slot >= 0 && MayRetry(*cmd)) {
        // A migration is moving this command's keys; they are on one node again shortly.
        stats_.tryagain.fetch_add(1, std::memory_order_relaxed);
        ++cmd->retries;
        auto timer = std::make_shared<asio::steady_timer>(io_, options_.tryagain_delay);
        timer->async_wait([self = shared_from_this(), timer, cmd](boost::system::error_code) {
          Node* node = self->stopped_ ? nullptr : self->slots_[cmd->slot];
          if (node == nullptr) return self->NoMaster(cmd);
          self->Dispatch(node, cmd, /*asking=*/false);
        });
        return;
      } else if (r->str.starts_with("CLUSTERDOWN")) {
        RequestRefresh();
      }
    }
    Finish(std::move(cmd), std::move(r));
  }

  void Finish(std::shared_ptr<Command> cmd, absl::StatusOr<Reply> r) {
    std::exchange(cmd->done, nullptr)(std::move(r));
  }

  // SCRIPT LOAD on every master — of the last map, and any a MOVED has named since (a replica
  // just promoted has no scripts): the first successful reply, else the first failure.
  void Broadcast(std::vector<std::string> argv, Callback done) {
    std::vector<Node*> targets = masters_;
    for (Node* n : slots_) {
      if (n != nullptr && (targets.empty() || targets.back() != n) &&
          std::find(targets.begin(), targets.end(), n) == targets.end()) {
        targets.push_back(n);
      }
    }
    if (targets.empty()) {
      return Post(std::move(done), absl::UnavailableError("redis cluster: no master known"));
    }
    struct State {
      size_t pending;
      std::optional<absl::StatusOr<Reply>> result;
      Callback done;
    };
    auto state = std::make_shared<State>(State{.pending = targets.size(), .done = std::move(done)});
    for (Node* n : targets) {
      auto on_reply = [state](absl::StatusOr<Reply> r) {
        // The first success wins: a node that is down (a master of a stale map, say) must not
        // fail the load for the others; if the node that needed the script is the one that
        // failed, the caller's retry of its EVALSHA says so.
        const auto ok = [](const absl::StatusOr<Reply>& x) { return x.ok() && !x->is_error(); };
        if (!state->result.has_value() || (ok(r) && !ok(*state->result))) {
          state->result = std::move(r);
        }
        if (--state->pending == 0) std::exchange(state->done, nullptr)(*std::move(state->result));
      };
      if (n->link == nullptr) {
        Post(std::move(on_reply), absl::UnavailableError("redis cluster: node dropped"));
      } else {
        n->link->SendDespiteBreaker(argv, std::move(on_reply));
      }
    }
  }

  // --- the slot map ---

  void Arm(Clock::duration delay) {
    if (stopped_) return;
    timer_.expires_after(delay);
    const uint64_t generation = ++timer_generation_;
    timer_.async_wait([weak = weak_from_this(), generation](boost::system::error_code ec) {
      std::shared_ptr<Impl> self = weak.lock();
      if (self == nullptr || ec || generation != self->timer_generation_) return;
      self->Refresh();
    });
  }

  void RequestRefresh() {
    refresh_wanted_ = true;
    if (refreshing_ || stopped_ || !started_) return;
    const Clock::time_point earliest = last_refresh_ + options_.refresh_min_interval;
    if (timer_.expiry() > earliest) {
      Arm(std::max(Clock::duration::zero(), earliest - Clock::now()));
    }
  }

  // Until a map is known, every 10 ms while no node is connected yet (no command is sent then);
  // after a failed or refused refresh, refresh_min_interval (Refresh).
  void ScheduleNext() {
    if (!map_known_) return Arm(std::chrono::milliseconds(10));
    Arm(refresh_wanted_ ? std::chrono::duration_cast<Clock::duration>(options_.refresh_min_interval)
                        : std::chrono::duration_cast<Clock::duration>(options_.refresh_interval));
  }

  // Asks the next connected node (round robin over every node known) for the slot map.
  void Refresh() {
    if (stopped_ || refreshing_) return;
    Node* asked = nullptr;
    for (size_t i = 0; i < nodes_.size() && asked == nullptr; ++i) {
      Node* n = nodes_[(next_asked_ + i) % nodes_.size()].get();
      if (n->link != nullptr && n->link->connected()) {
        asked = n;
        next_asked_ = (next_asked_ + i + 1) % nodes_.size();
      }
    }
    if (asked == nullptr) return ScheduleNext();
    refreshing_ = true;
    refresh_wanted_ = false;
    last_refresh_ = Clock::now();
    asked->link->SendDespiteBreaker(
        {"CLUSTER", "SLOTS"},
        [self = shared_from_this(), asked = asked->shared_from_this()](absl::StatusOr<Reply> r) {
          self->refreshing_ = false;
          if (self->stopped_) return;
          absl::StatusOr<std::vector<SlotRange>> ranges =
              !r.ok()         ? absl::StatusOr<std::vector<SlotRange>>(r.status())
              : r->is_error() ? absl::StatusOr<std::vector<SlotRange>>(
                                    absl::UnavailableError(FirstLine(r->str)))
                              : ParseClusterSlots(*r, asked->address.host);
          if (ranges.ok() && ranges->empty()) {
            ranges = absl::UnavailableError("CLUSTER SLOTS: no slot served");
          }
          if (!ranges.ok()) {
            self->Warn("redis cluster: slot map refresh failed",
                       absl::StrCat(asked->address.host, ":", asked->address.port, ": ",
                                    ranges.status().message()));
          }
          if (!ranges.ok() || !self->Apply(*ranges)) {
            // Ask another node, but not before refresh_min_interval: a seed that is no cluster
            // node, or a map that is refused, answers the same at once, and asking again at once
            // would keep that node (and this thread) busy with nothing else.
            self->refresh_wanted_ = true;
            return self->Arm(
                std::chrono::duration_cast<Clock::duration>(self->options_.refresh_min_interval));
          }
          self->ScheduleNext();
        });
  }

  // Installs the map; false (nothing changed, no link made) if it names more nodes than
  // max_nodes, seeds included. Nodes neither in the map nor seeds leave nodes_ (and their links
  // go), so nodes that left the cluster long ago do not count.
  bool Apply(const std::vector<SlotRange>& ranges) {
    std::vector<NodeAddress> wanted;
    const auto want = [&](const NodeAddress& a) {
      if (std::find(wanted.begin(), wanted.end(), a) == wanted.end()) wanted.push_back(a);
    };
    for (const SlotRange& range : ranges) {
      want(range.master);
      for (const NodeAddress& replica : range.replicas) want(replica);
      // Checked as we go: a hostile reply cannot make this list long.
      if (wanted.size() > options_.max_nodes) break;
    }
    for (const NodeAddress& seed : options_.seeds) want(seed);
    if (wanted.size() > options_.max_nodes) {
      Warn("redis cluster: slot map refused: more nodes than max_nodes",
           absl::StrCat(options_.max_nodes));
      return false;
    }
    std::vector<std::shared_ptr<Node>> nodes;
    nodes.reserve(wanted.size());
    for (const NodeAddress& a : wanted) {
      auto it = std::find_if(nodes_.begin(), nodes_.end(),
                             [&](const std::shared_ptr<Node>& n) { return n->address == a; });
      nodes.push_back(it != nodes_.end() ? *it : std::make_shared<Node>(a));
    }
    for (const auto& node : nodes_) {
      if (std::find(nodes.begin(), nodes.end(), node) == nodes.end() && node->link != nullptr) {
        // The cluster no longer lists it: its connection goes (commands on it: Unavailable).
        node->link->Stop();
        node->link.reset();
      }
    }
    nodes_ = std::move(nodes);
    for (const auto& node : nodes_) {
      node->seed = std::find(options_.seeds.begin(), options_.seeds.end(), node->address) !=
                   options_.seeds.end();
      Link(node.get());  // replicas too: a failover promotes one of them
    }
    std::vector<Node*> slots(kClusterSlots, nullptr);
    std::vector<Node*> masters;
    for (const SlotRange& range : ranges) {
      Node* master = Find(range.master);
      if (std::find(masters.begin(), masters.end(), master) == masters.end()) {
        masters.push_back(master);
      }
      std::fill(slots.begin() + range.first, slots.begin() + range.last + 1, master);
    }
    slots_ = std::move(slots);
    masters_ = std::move(masters);
    map_known_ = true;
    stats_.refreshes.fetch_add(1, std::memory_order_relaxed);
    return true;
  }

  // A warning, at once and then at most once a minute for each `what` (one of the four above,
  // so the list stays short), with how many were not logged; never a password: the details are
  // addresses, counts and Redis's error replies to CLUSTER SLOTS.
  void Warn(std::string_view what, std::string_view detail) {
    auto it = std::find_if(warnings_.begin(), warnings_.end(),
                           [&](const auto& w) { return w.first == what; });
    if (it == warnings_.end()) {
      warnings_.emplace_back(std::string(what), LogEvery());
      it = std::prev(warnings_.end());
    }
    uint64_t held_back = 0;
    if (!it->second.Allow(&held_back)) return;
    Log(LogLevel::kWarn, what)
        .Str("detail", detail)
        .Int("warnings_not_logged", static_cast<int64_t>(held_back));
  }

  static std::string FirstLine(std::string_view text) {
    return std::string(text.substr(0, std::min<size_t>(text.find_first_of("\r\n"), 200)));
  }

  asio::io_context& io_;
  const ClusterOptions options_;
  asio::steady_timer timer_;
  uint64_t timer_generation_ = 0;
  std::vector<std::shared_ptr<Node>> nodes_;  // the nodes in use (see NodeFor)
  std::vector<Node*> slots_;                  // by slot: its master, or null
  std::vector<Node*> masters_;                // distinct masters of the last map
  const int keyless_slot_;
  bool map_known_ = false;
  bool started_ = false;
  bool stopped_ = false;
  bool refreshing_ = false;
  bool refresh_wanted_ = false;
  Clock::time_point last_refresh_{};
  size_t next_asked_ = 0;
  std::vector<std::pair<std::string, LogEvery>> warnings_;  // by Warn's `what`
  // Written on the loop's thread, read from any (metrics).
  struct {
    std::atomic<uint64_t> moved{0}, asked{0}, tryagain{0}, refreshes{0}, no_master{0};
  } stats_;
};

ClusterClient::ClusterClient(asio::io_context& io, ClusterOptions options)
    : impl_(std::make_shared<Impl>(io, std::move(options))) {}

ClusterClient::~ClusterClient() { impl_->Stop(); }

void ClusterClient::Start() { impl_->Start(); }
void ClusterClient::Stop() { impl_->Stop(); }

void ClusterClient::Send(std::vector<std::string> argv, Callback done, LateCallback late) {
  impl_->Send(std::make_shared<const std::vector<std::string>>(std::move(argv)), std::move(done),
              std::move(late), /*despite=*/false);
}

void ClusterClient::SendShared(std::shared_ptr<const std::vector<std::string>> argv, Callback done,
                               LateCallback late) {
  impl_->Send(std::move(argv), std::move(done), std::move(late), /*despite=*/false);
}

void ClusterClient::SendDespiteBreaker(std::vector<std::string> argv, Callback done,
                                       LateCallback late) {
  impl_->Send(std::make_shared<const std::vector<std::string>>(std::move(argv)), std::move(done),
              std::move(late), /*despite=*/true);
}

bool ClusterClient::connected() const { return impl_->connected(); }

std::optional<NodeAddress> ClusterClient::MasterOf(int slot) const { return impl_->MasterOf(slot); }

ClusterStats ClusterClient::stats() const { return impl_->stats(); }

}  // namespace sluice::redis
