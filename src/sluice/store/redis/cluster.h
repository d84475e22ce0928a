// A Redis Cluster client (docs/redis.md, "Redis Cluster"): one per io_context thread, like
// Connection. It learns the slot map (CLUSTER SLOTS) from any node it knows — the seeds first —,
// keeps one Connection to every node of the map (masters and replicas, so that a promoted replica
// is already connected), and sends each command to the master of its key's slot.
//
// Redirections (the cluster specification):
//   - `-MOVED <slot> <host>:<port>`: the slot belongs to that node now. The map is updated at once
//     for that slot, a full refresh is scheduled, and the command is sent again there.
//   - `-ASK <slot> <host>:<port>`: the slot is being migrated and this key is already on that
//     node. ASKING and the command are sent there together (pipelined on its connection); the
//     map is not changed.
//   - `-TRYAGAIN` (a multi-key command during a migration, its keys split between the two nodes):
//     sent again to the slot's master after `tryagain_delay`.
// A command is redirected or retried at most three times in all (kMaxRetries), and not again
// once it has been under way for the command timeout. Each attempt has its connection's own
// timeout, so a redirected command fails within about twice the command timeout at worst. A
// redirection past that, a redirection to an unknown endpoint ("?:port"), `-CLUSTERDOWN`, a
// connection that is down and a slot without a known master are the caller's failure (the error
// reply, or Unavailable). A command that timed out is never retried (it may have run); its
// late reply goes to its `late` callback as with Connection, whichever node gave it.
//
// The map is refreshed every `refresh_interval`, and soon (at most every `refresh_min_interval`)
// after a MOVED, a CLUSTERDOWN, a lost connection or a slot without a master; a refresh never
// holds a command back (commands go by the map of the moment).
//
// Thread safety: as CommandSender — one io_context thread.
#ifndef SLUICE_STORE_REDIS_CLUSTER_H_
#define SLUICE_STORE_REDIS_CLUSTER_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "absl/status/statusor.h"
#include "sluice/store/redis/command_sender.h"
#include "sluice/store/redis/connection.h"
#include "sluice/store/redis/resp.h"

namespace sluice::redis {

inline constexpr int kClusterSlots = 16384;

// CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0), as the cluster specification uses.
// Crc16("123456789") == 0x31C3.
[[nodiscard]] uint16_t Crc16(std::string_view data);
// The key's hash slot: CRC16 mod 16384 of its hash tag — the text between the first '{' and the
// first '}' after it, when that is not empty — else of the whole key.
[[nodiscard]] int KeySlot(std::string_view key);
// The key a command is routed by (see CommandSender), or nullopt for a command without keys.
[[nodiscard]] std::optional<std::string_view> CommandKey(std::span<const std::string> argv);

// A "host:port" (IPv6 host in brackets, or not: the last ':' splits) with the port in 1..65535.
struct NodeAddress {
  std::string host;
  uint16_t port = 0;
  friend bool operator==(const NodeAddress&, const NodeAddress&) = default;
};
[[nodiscard]] std::optional<NodeAddress> ParseNodeAddress(std::string_view text);
// "cluster <host>:<port>,<host>:<port>..." for log lines: the seeds a cluster is reached by.
[[nodiscard]] std::string ClusterName(std::span<const NodeAddress> seeds);

// A redirection error reply: "MOVED 3999 127.0.0.1:6381" or "ASK 3999 127.0.0.1:6381". An empty
// host is the replying node's; "?" (unknown) is no usable redirection (nullopt).
struct Redirect {
  enum class Kind { kMoved, kAsk };
  Kind kind = Kind::kMoved;
  int slot = 0;
  NodeAddress node;
};
[[nodiscard]] std::optional<Redirect> ParseRedirect(std::string_view error);

// One range of CLUSTER SLOTS: slots first..last, served by `master`, replicated by `replicas`.
struct SlotRange {
  int first = 0;
  int last = 0;
  NodeAddress master;
  std::vector<NodeAddress> replicas;
};
// CLUSTER SLOTS' reply. A node listed with a NULL or empty endpoint (Redis: the node asked)
// takes `asked_host`; one listed as "?" (its address is unknown) is left out — a range whose
// master it is has no master.
[[nodiscard]] absl::StatusOr<std::vector<SlotRange>> ParseClusterSlots(const Reply& reply,
                                                                       std::string_view asked_host);

struct ClusterOptions {
  // Every node's connection is a copy of this with host and port changed (credentials, timeouts,
  // breaker and any transport settings carry over).
  ConnectionOptions connection;
  std::vector<NodeAddress> seeds;
  std::chrono::milliseconds refresh_interval{1000};
  std::chrono::milliseconds refresh_min_interval{100};
  std::chrono::milliseconds tryagain_delay{5};
  // Commands without a key (TIME, CLIENT, INFO, PING) go to the master of this key's slot
  // (the registry: its hash tag), or, when empty, to any connected master. SCRIPT LOAD goes to
  // every master (a script must be loaded where it runs).
  std::string keyless_key;
  // At most this many nodes in use at once: the current map's (masters and replicas), the seeds,
  // and those a redirection named since the last map. A node the cluster no longer lists is
  // forgotten at the next map (so addresses that change over time never use this up); a map
  // naming more is refused (logged) before any connection is made.
  size_t max_nodes = 1000;
  // Makes a node's link (tests: a fake). Null: a Connection with these options.
  std::function<std::unique_ptr<CommandSender>(boost::asio::io_context&, const ConnectionOptions&)>
      make_link;
};

// What a ClusterClient did, for tests and metrics.
struct ClusterStats {
  uint64_t moved = 0;      // MOVED redirections followed
  uint64_t asked = 0;      // ASK redirections followed
  uint64_t tryagain = 0;   // TRYAGAIN retries
  uint64_t refreshes = 0;  // slot maps applied
  uint64_t no_master = 0;  // commands refused: no master known for their slot
};

class ClusterClient final : public CommandSender {
 public:
  ClusterClient(boost::asio::io_context& io, ClusterOptions options);
  ~ClusterClient() override;
  ClusterClient(const ClusterClient&) = delete;
  ClusterClient& operator=(const ClusterClient&) = delete;

  void Start() override;
  void Stop() override;
  void Send(std::vector<std::string> argv, Callback done, LateCallback late = nullptr) override;
  void SendShared(std::shared_ptr<const std::vector<std::string>> argv, Callback done,
                  LateCallback late = nullptr) override;
  void SendDespiteBreaker(std::vector<std::string> argv, Callback done,
                          LateCallback late = nullptr) override;
  [[nodiscard]] bool connected() const override;

  // The master the map names for `slot` (nullopt: none known).
  [[nodiscard]] std::optional<NodeAddress> MasterOf(int slot) const;
  // May be called from any thread.
  [[nodiscard]] ClusterStats stats() const;

 private:
  class Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace sluice::redis

#endif  // SLUICE_STORE_REDIS_CLUSTER_H_
