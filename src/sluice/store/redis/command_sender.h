// Where sluice's Redis commands go: one standalone Redis (Connection) or a Redis Cluster
// (ClusterClient, which routes each command to the master of its key's slot). The store, the
// alert outbox, the registry and the clock sync talk to this interface, so each of them works on
// both without knowing which it has.
#ifndef SLUICE_STORE_REDIS_COMMAND_SENDER_H_
#define SLUICE_STORE_REDIS_COMMAND_SENDER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sluice/common/strings.h"
#include "sluice/store/redis/resp.h"

namespace sluice::redis {

// Not thread-safe: an implementation belongs to one io_context thread; every call, including the
// destructor, is made there and every callback runs there, posted (never inside the call).
//
// Outcomes of a command, delivered to `done` exactly once (Connection documents them in full):
// OK with the reply (a Redis error reply is an OK result of type kError); DeadlineExceeded (the
// reply may still arrive: it then goes to `late`, if not null); Unavailable (not connected, the
// connection was lost, the circuit breaker is open, or on a cluster no master is known for the
// command's slot); ResourceExhausted (too many commands outstanding).
//
// Routing (ClusterClient): a command goes to the master of the slot of its first key — argv[1]
// for most commands, the first key after numkeys for EVAL/EVALSHA/FCALL, the first stream after
// STREAMS for XREAD/XREADGROUP, argv[2] for XGROUP/XINFO (CommandKey in cluster.h). A command of
// several keys must keep them in one slot (one hash tag), or Redis answers CROSSSLOT.
class CommandSender {
 public:
  using Callback = absl::AnyInvocable<void(absl::StatusOr<Reply>) &&>;
  // The reply of a command that had already timed out (see Connection).
  using LateCallback = absl::AnyInvocable<void(Reply) &&>;

  virtual ~CommandSender() = default;

  // Connects in the background (reconnecting on loss) and, for a cluster, discovers the slots.
  virtual void Start() = 0;
  // Closes for good; outstanding commands complete with Unavailable.
  virtual void Stop() = 0;

  virtual void Send(std::vector<std::string> argv, Callback done, LateCallback late = nullptr) = 0;
  // As Send, for a command the caller keeps (to send it again, or to read it back with a late
  // reply): an implementation that only encodes it (Connection) makes no copy.
  virtual void SendShared(std::shared_ptr<const std::vector<std::string>> argv, Callback done,
                          LateCallback late = nullptr) {
    Send(*argv, std::move(done), std::move(late));
  }
  // As Send, but not refused while a circuit breaker is open (see Connection).
  virtual void SendDespiteBreaker(std::vector<std::string> argv, Callback done,
                                  LateCallback late = nullptr) = 0;

  // True when a command sent now can reach Redis: connected and handshaken; for a cluster, the
  // slot map is known and the node keyless commands go to is connected.
  [[nodiscard]] virtual bool connected() const = 0;

  // What LuaScript (lua_script.h) keeps per sender and script: the SCRIPT LOADs sent through
  // this sender so far, and the outcome of the last (set when its reply arrives).
  struct ScriptLoads {
    uint64_t sent = 0;
    std::shared_ptr<absl::Status> last;
  };
  // The state of the script whose SHA-1 is `sha`; made on first use.
  ScriptLoads& ScriptLoadsOf(std::string_view sha) {
    auto it = script_loads_.find(ToAbsl(sha));
    if (it == script_loads_.end())
      it = script_loads_.emplace(std::string(sha), ScriptLoads{}).first;
    return it->second;
  }

 private:
  absl::flat_hash_map<std::string, ScriptLoads> script_loads_;
};

}  // namespace sluice::redis

#endif  // SLUICE_STORE_REDIS_COMMAND_SENDER_H_
