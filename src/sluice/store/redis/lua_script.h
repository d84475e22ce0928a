// A Lua script run with EVALSHA and loaded when Redis does not have it: the one runner of every
// script sluice keeps in Redis (decide.lua, the registry's scripts).
#ifndef SLUICE_STORE_REDIS_LUA_SCRIPT_H_
#define SLUICE_STORE_REDIS_LUA_SCRIPT_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/common/digest.h"
#include "sluice/store/redis/command_sender.h"

namespace sluice::redis {

// The SHA-1 of `data` in lower-case hex (what EVALSHA names a script by): common/digest.h's, under
// the name its tests use.
using common::Sha1Hex;

// Immutable and thread-safe; Run keeps per-sender state on the sender (CommandSender::ScriptLoads),
// so it is made on the sender's thread like every call to it.
class LuaScript {
 public:
  using Argv = std::vector<std::string>;

  // Called with the sender just before each SCRIPT LOAD goes out on it (a command sent there is
  // pipelined ahead of the load).
  using BeforeLoad = void (*)(CommandSender* sender);

  // `text` must outlive the LuaScript (the scripts are embedded at build time).
  explicit LuaScript(std::string_view text, BeforeLoad before_load = nullptr);

  [[nodiscard]] const std::string& sha() const { return sha_; }
  [[nodiscard]] std::string_view text() const { return text_; }

  // Runs `argv` — `EVALSHA <sha()> numkeys key... arg...` — on `sender`. On NOSCRIPT (a restart, a
  // failover, SCRIPT FLUSH: the script did not run, so sending it again cannot apply it twice) the
  // script is loaded and the command sent again, the load and the retry together, at once (a
  // command sent meanwhile, which finds the script the load put back, then still runs after the
  // retry: one sender's commands keep their order). Loads are shared: a command that was sent
  // before a load went out on the same sender — a burst on a new connection, answered NOSCRIPT
  // together — is sent again behind that load without another one, so a burst costs one load,
  // not one per command. At most two retries; a retry that still finds no script reports the
  // load's failure if the load failed, else its own reply.
  //
  // `late` (may be null) sees the reply of whichever send timed out (CommandSender); a NOSCRIPT
  // that comes late is not retried (the caller has its answer). Every send carries `argv` as it
  // is, so a retry keeps the arguments (and any deadline in them) of the first send.
  void Run(CommandSender* sender, std::shared_ptr<const Argv> argv, CommandSender::Callback done,
           CommandSender::LateCallback late = nullptr) const;

 private:
  struct Call;
  void Send(std::shared_ptr<Call> call) const;
  void Retry(std::shared_ptr<Call> call) const;

  std::string_view text_;
  std::string sha_;
  BeforeLoad before_load_;
};

}  // namespace sluice::redis

#endif  // SLUICE_STORE_REDIS_LUA_SCRIPT_H_
