// A Lua script of sluice's and how it goes to Redis: the one type every script is built and sent
// through. decide.lua and the registry's scripts run with EVALSHA and are loaded when Redis does
// not have them; the rarely run ones (refund.lua, reset.lua, outbox_renew.lua) carry their text
// with EVAL.
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

// How LuaScript::Run sends (LuaScript::RunOptions; out of the class so that it can be a default
// argument there).
struct LuaScriptRunOptions {
  // Sent even while the sender's circuit breaker is open (CommandSender::SendDespiteBreaker),
  // every send and any SCRIPT LOAD: for a command that must go out anyway, such as a refund of an
  // admission the breaker's stall made late.
  bool despite_breaker = false;
};

// Immutable and thread-safe; Run keeps per-sender state on the sender (CommandSender::ScriptLoads),
// so it is made on the sender's thread like every call to it.
class LuaScript {
 public:
  using Argv = std::vector<std::string>;

  // How the script's commands name it.
  enum class Send {
    // `EVALSHA <sha>`: the text crosses the wire only in a SCRIPT LOAD, after NOSCRIPT. For the
    // scripts run often.
    kEvalSha,
    // `EVAL <text>`: the text in every command, each sent once as it is; nothing is loaded, so
    // there is no NOSCRIPT round to pay. For the scripts run rarely.
    kEval,
  };

  using RunOptions = LuaScriptRunOptions;

  // Called with the sender just before each SCRIPT LOAD goes out on it (a command sent there is
  // pipelined ahead of the load).
  using BeforeLoad = void (*)(CommandSender* sender);

  // `text` must outlive the LuaScript (the scripts are embedded at build time). Sent as
  // Send::kEvalSha.
  explicit LuaScript(std::string_view text, BeforeLoad before_load = nullptr);
  // `before_load` is only called for kEvalSha (kEval loads nothing).
  LuaScript(std::string_view text, Send send, BeforeLoad before_load = nullptr);

  [[nodiscard]] const std::string& sha() const { return sha_; }
  [[nodiscard]] std::string_view text() const { return text_; }
  [[nodiscard]] Send send() const { return send_; }

  // The first words of a command running the script with `numkeys` keys — `EVALSHA <sha()>
  // <numkeys>`, or `EVAL <text()> <numkeys>` for kEval — with room for the `more` words (keys,
  // then arguments) the caller appends before it passes the command to Run.
  [[nodiscard]] Argv Command(size_t numkeys, size_t more = 0) const;

  // Runs `argv` — a Command with its keys and arguments — on `sender`.
  //
  // kEval: `argv` is sent once, as it is, and never again: its reply or failure goes to `done`,
  // its late reply to `late`.
  //
  // kEvalSha: on NOSCRIPT (a restart, a failover, SCRIPT FLUSH: the script did not run, so
  // sending it again cannot apply it twice) the script is loaded and the command sent again, the
  // load and the retry together, at once (a command sent meanwhile, which finds the script the
  // load put back, then still runs after the retry: one sender's commands keep their order). Loads
  // are shared: a command that was sent before a load went out on the same sender — a burst on a
  // new connection, answered NOSCRIPT together — is sent again behind that load without another
  // one, so a burst costs one load, not one per command. At most two retries; a retry that still
  // finds no script reports the load's failure if the load failed, else its own reply.
  //
  // `late` (may be null) sees the reply of whichever send timed out (CommandSender); a NOSCRIPT
  // that comes late is not retried (the caller has its answer). Every send carries `argv` as it
  // is, so a retry keeps the arguments (and any deadline in them) of the first send.
  void Run(CommandSender* sender, std::shared_ptr<const Argv> argv, CommandSender::Callback done,
           CommandSender::LateCallback late = nullptr, RunOptions options = {}) const;

 private:
  struct Call;
  void SendCall(std::shared_ptr<Call> call) const;
  void Retry(std::shared_ptr<Call> call) const;

  std::string_view text_;
  std::string sha_;
  Send send_;
  BeforeLoad before_load_;
};

}  // namespace sluice::redis

#endif  // SLUICE_STORE_REDIS_LUA_SCRIPT_H_
