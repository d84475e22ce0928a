#include "sluice/store/redis/lua_script.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace sluice::redis {
namespace {

// At most this many sends again after NOSCRIPT: one behind a load another command sent, one
// behind a load of its own.
constexpr int kMaxRetries = 2;

bool IsNoScript(const absl::StatusOr<Reply>& r) {
  return r.ok() && r->is_error() && r->str.starts_with("NOSCRIPT");
}

}  // namespace

LuaScript::LuaScript(std::string_view text, BeforeLoad before_load)
    : LuaScript(text, Send::kEvalSha, before_load) {}

LuaScript::LuaScript(std::string_view text, Send send, BeforeLoad before_load)
    : text_(text), sha_(Sha1Hex(text)), send_(send), before_load_(before_load) {}

LuaScript::Argv LuaScript::Command(size_t numkeys, size_t more) const {
  Argv argv;
  argv.reserve(3 + more);
  if (send_ == Send::kEval) {
    argv.push_back("EVAL");
    argv.push_back(std::string(text_));
  } else {
    argv.push_back("EVALSHA");
    argv.push_back(sha_);
  }
  argv.push_back(absl::StrCat(numkeys));
  return argv;
}

// One Run: what its sends share. The script's text and SHA-1 are copied as views into the
// LuaScript, which outlives every call (the stores own theirs for as long as their senders).
struct LuaScript::Call {
  CommandSender* sender = nullptr;
  std::shared_ptr<const Argv> argv;
  CommandSender::Callback done;
  // Only the last send can time out (a retry follows a reply), so the one `late` is shared.
  std::shared_ptr<CommandSender::LateCallback> late;
  bool despite_breaker = false;  // RunOptions::despite_breaker
  uint64_t loads_when_sent = 0;  // the sender's ScriptLoads::sent when the last send went out
  int retries = 0;
  std::shared_ptr<absl::Status> load;  // the load the last retry went out behind
};

void LuaScript::Run(CommandSender* sender, std::shared_ptr<const Argv> argv,
                    CommandSender::Callback done, CommandSender::LateCallback late,
                    RunOptions options) const {
  if (send_ == Send::kEval) {
    // One send, nothing to retry: no Call to share.
    if (options.despite_breaker) {
      sender->SendDespiteBreaker(*argv, std::move(done), std::move(late));
    } else {
      sender->SendShared(std::move(argv), std::move(done), std::move(late));
    }
    return;
  }
  auto call = std::make_shared<Call>();
  call->sender = sender;
  call->argv = std::move(argv);
  call->done = std::move(done);
  if (late) call->late = std::make_shared<CommandSender::LateCallback>(std::move(late));
  call->despite_breaker = options.despite_breaker;
  SendCall(std::move(call));
}

void LuaScript::SendCall(std::shared_ptr<Call> call) const {
  call->loads_when_sent = call->sender->ScriptLoadsOf(sha_).sent;
  CommandSender::LateCallback on_late = nullptr;
  if (call->late != nullptr) {
    on_late = [late = call->late](Reply r) {
      if (*late) std::exchange(*late, nullptr)(std::move(r));
    };
  }
  std::shared_ptr<const Argv> argv = call->argv;
  CommandSender* sender = call->sender;
  const bool despite_breaker = call->despite_breaker;
  auto on_reply = [this, call = std::move(call)](absl::StatusOr<Reply> reply) mutable {
    if (!IsNoScript(reply)) {
      std::exchange(call->done, nullptr)(std::move(reply));
      return;
    }
    if (call->retries >= kMaxRetries) {
      // The load this retry went out behind failed: that is the reason to report.
      if (call->load != nullptr && !call->load->ok()) {
        std::exchange(call->done, nullptr)(*call->load);
      } else {
        std::exchange(call->done, nullptr)(std::move(reply));
      }
      return;
    }
    Retry(std::move(call));
  };
  if (despite_breaker) {
    sender->SendDespiteBreaker(*argv, std::move(on_reply), std::move(on_late));
  } else {
    sender->SendShared(std::move(argv), std::move(on_reply), std::move(on_late));
  }
}

void LuaScript::Retry(std::shared_ptr<Call> call) const {
  CommandSender::ScriptLoads& loads = call->sender->ScriptLoadsOf(sha_);
  if (loads.sent == call->loads_when_sent) {
    // No load has gone out on this sender since the command did: send one. Its outcome is kept
    // for the retries behind it (ScriptLoads::last).
    ++loads.sent;
    loads.last = std::make_shared<absl::Status>();
    if (before_load_ != nullptr) before_load_(call->sender);
    auto on_loaded = [last = loads.last](absl::StatusOr<Reply> loaded) {
      if (!loaded.ok()) {
        *last = loaded.status();
      } else if (loaded->is_error()) {
        *last = absl::UnavailableError(absl::StrCat("redis: SCRIPT LOAD: ", loaded->str));
      }
    };
    std::vector<std::string> load = {"SCRIPT", "LOAD", std::string(text_)};
    if (call->despite_breaker) {
      call->sender->SendDespiteBreaker(std::move(load), std::move(on_loaded));
    } else {
      call->sender->Send(std::move(load), std::move(on_loaded));
    }
  }
  call->load = loads.last;
  ++call->retries;
  SendCall(std::move(call));
}

}  // namespace sluice::redis
