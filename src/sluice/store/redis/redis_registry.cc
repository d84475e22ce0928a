#include "sluice/store/redis/redis_registry.h"

#include <openssl/rand.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <future>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <nlohmann/json.hpp>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "sluice/common/hex.h"
#include "sluice/common/log.h"
#include "sluice/common/strings.h"
#include "sluice/registry/keys.h"
#include "sluice/registry/record_codec.h"
#include "sluice/store/redis/lua_script.h"
#include "sluice/store/redis/registry_read_script.h"
#include "sluice/store/redis/registry_write_script.h"

namespace sluice::redis {
namespace asio = boost::asio;
using registry::Change;
using registry::ChangeCallback;
using registry::ChangeResult;
using registry::Key;
using registry::Subject;

namespace {

using Argv = std::vector<std::string>;
constexpr int kIdempotencyTtlSeconds = 86400;  // model.h: records are kept for 24 hours

std::string NewEpoch() {
  uint8_t bytes[16] = {};
  if (RAND_bytes(bytes, sizeof bytes) != 1) {
    // Only uniqueness matters, not secrecy: the clock is good enough as a fallback.
    const int64_t now = absl::ToUnixNanos(absl::Now());
    std::memcpy(bytes, &now, sizeof now);
  }
  return EncodeHex(bytes);
}

std::optional<uint64_t> ParseKeyIdHex(std::string_view text) {
  uint64_t id = 0;
  if (text.size() != 16 || !absl::SimpleHexAtoi(ToAbsl(text), &id) || id == 0) return std::nullopt;
  return id;
}

// A Redis error reply: the transient ones (LOADING, BUSY, READONLY, …) are Unavailable.
absl::Status ErrorReply(const Reply& reply) {
  static constexpr std::string_view kTransient[] = {
      "BUSY", "LOADING", "OOM", "READONLY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN"};
  for (std::string_view prefix : kTransient) {
    if (reply.str.starts_with(prefix)) {
      return absl::UnavailableError(absl::StrCat("redis registry: ", reply.str));
    }
  }
  return absl::InternalError(absl::StrCat("redis registry: ", reply.str));
}

absl::Status Check(const absl::StatusOr<Reply>& reply) {
  if (!reply.ok()) {
    // No reply: nothing is known to have happened. Unavailable is what the caller maps to 503.
    return absl::UnavailableError(absl::StrCat("redis registry: ", reply.status().message()));
  }
  if (reply->is_error()) return ErrorReply(*reply);
  return absl::OkStatus();
}

std::string_view KindName(Change::Kind kind) {
  switch (kind) {
    case Change::Kind::kPutSubject:
      return "put_subject";
    case Change::Kind::kDeleteSubject:
      return "delete_subject";
    case Change::Kind::kAddKey:
      return "add_key";
    case Change::Kind::kRevokeKey:
      return "revoke_key";
    case Change::Kind::kGrantCredits:
      return "grant_credits";
  }
  return "";
}

}  // namespace

std::string RegistryBase(std::string_view prefix) {
  return absl::StrCat(ToAbsl(prefix), ":{registry}");
}

std::string KeyIdHex(uint64_t id) { return EncodeHex64(id); }

std::string SubjectRecord(const Subject& s) {
  nlohmann::ordered_json j = {{"plan", s.plan},
                              {"email", s.email},
                              {"webhook", s.webhook},
                              {"webhook_secret", s.webhook_secret},
                              {"metadata", s.metadata},
                              {"disabled", s.disabled},
                              {"overrides", registry::OverridesJson(s.overrides)},
                              {"created_at", absl::ToUnixMicros(s.created_at)},
                              {"updated_at", absl::ToUnixMicros(s.updated_at)}};
  return j.dump();
}

std::string CreditGrantRecord(const registry::CreditGrant& g) {
  nlohmann::ordered_json j = {{"at", absl::ToUnixMicros(g.at)},
                              {"amount", g.amount},
                              {"reason", g.reason},
                              {"actor", g.actor}};
  // Never throws: invalid UTF-8 (which validated input cannot hold) becomes U+FFFD.
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::optional<registry::CreditGrant> ParseCreditGrant(std::string_view record) {
  const nlohmann::json j = nlohmann::json::parse(record, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  registry::CreditGrant g;
  for (const auto& [name, out] : {std::pair<const char*, int64_t*>{"amount", &g.amount},
                                  {"seq", &g.seq},
                                  {"balance", &g.balance}}) {
    auto it = j.find(name);
    if (it == j.end() || !it->is_number_integer()) return std::nullopt;
    *out = it->get<int64_t>();
  }
  auto at = j.find("at");
  auto reason = j.find("reason");
  auto actor = j.find("actor");
  if (at == j.end() || !at->is_number_integer() || reason == j.end() || !reason->is_string() ||
      actor == j.end() || !actor->is_string()) {
    return std::nullopt;
  }
  g.at = absl::FromUnixMicros(at->get<int64_t>());
  g.reason = reason->get<std::string>();
  g.actor = actor->get<std::string>();
  return g;
}

std::string KeyRecord(const Key& k) {
  nlohmann::ordered_json j = {
      {"subject", k.subject},  {"digest", registry::DigestHex(k.digest)},
      {"prefix", k.prefix},    {"name", k.name},
      {"expires_at", nullptr}, {"created_at", absl::ToUnixMicros(k.created_at)}};
  if (k.expires_at) j["expires_at"] = absl::ToUnixMicros(*k.expires_at);
  return j.dump();
}

namespace {

// A reader of the flat JSON objects SubjectRecord and KeyRecord write: members whose values are
// strings, integers, booleans, null, or an array or object (handed over as its raw text, its
// brackets balanced outside strings but not checked further). Anything else, or malformed text,
// fails; unknown members are ignored. It builds no document: the full load parses
// one record per subject and per key, and a DOM parser was most of its cost.
class FlatObject {
 public:
  struct Value {
    enum class Kind { kString, kInteger, kBool, kNull, kArray, kObject } kind = Kind::kNull;
    std::string str;
    int64_t integer = 0;
    bool boolean = false;
    std::string_view raw;  // kArray, kObject: the text, brackets included
  };

  // Calls visit(name, value) for each member in order; false if the text is malformed or
  // visit returned false.
  template <typename Visit>
  static bool Parse(std::string_view text, Visit visit) {
    FlatObject p(text);
    p.SkipSpace();
    if (!p.Eat('{')) return false;
    p.SkipSpace();
    if (p.Eat('}')) return p.AtEnd();
    std::string name;
    Value value;
    for (;;) {
      p.SkipSpace();
      if (!p.String(&name)) return false;
      p.SkipSpace();
      if (!p.Eat(':')) return false;
      p.SkipSpace();
      if (!p.ReadValue(&value) || !visit(std::string_view(name), value)) return false;
      p.SkipSpace();
      if (p.Eat(',')) continue;
      if (p.Eat('}')) return p.AtEnd();
      return false;
    }
  }

 private:
  explicit FlatObject(std::string_view text) : t_(text) {}

  bool AtEnd() {
    SkipSpace();
    return i_ == t_.size();
  }
  void SkipSpace() {
    while (i_ < t_.size() &&
           (t_[i_] == ' ' || t_[i_] == '\t' || t_[i_] == '\n' || t_[i_] == '\r')) {
      ++i_;
    }
  }
  bool Eat(char c) {
    if (i_ < t_.size() && t_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  bool Word(std::string_view w) {
    if (t_.substr(i_, w.size()) != w) return false;
    i_ += w.size();
    return true;
  }

  bool Hex4(uint32_t* out) {
    if (i_ + 4 > t_.size()) return false;
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      const int digit = HexDigitValue(t_[i_++]);
      if (digit < 0) return false;
      v = v << 4 | static_cast<uint32_t>(digit);
    }
    *out = v;
    return true;
  }

  static void AppendUtf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  bool String(std::string* out) {
    if (!Eat('"')) return false;
    out->clear();
    for (;;) {
      // One pass to the next quote or backslash (find_first_of calls memchr per character).
      size_t run = i_;
      while (run < t_.size() && t_[run] != '"' && t_[run] != '\\') {
        if (static_cast<unsigned char>(t_[run]) < 0x20) return false;  // raw control character
        ++run;
      }
      if (run == t_.size()) return false;
      out->append(t_.data() + i_, run - i_);
      i_ = run + 1;
      if (t_[run] == '"') return true;
      if (i_ >= t_.size()) return false;
      const char e = t_[i_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out->push_back(e);
          break;
        case 'b':
          out->push_back('\b');
          break;
        case 'f':
          out->push_back('\f');
          break;
        case 'n':
          out->push_back('\n');
          break;
        case 'r':
          out->push_back('\r');
          break;
        case 't':
          out->push_back('\t');
          break;
        case 'u': {
          uint32_t cp = 0;
          if (!Hex4(&cp)) return false;
          if (cp >= 0xD800 && cp < 0xDC00) {  // a high surrogate: its low half must follow
            uint32_t low = 0;
            if (!Word("\\u") || !Hex4(&low) || low < 0xDC00 || low >= 0xE000) return false;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          } else if (cp >= 0xDC00 && cp < 0xE000) {
            return false;
          }
          AppendUtf8(cp, out);
          break;
        }
        default:
          return false;
      }
    }
  }

  bool ReadValue(Value* v) {
    if (i_ >= t_.size()) return false;
    const char c = t_[i_];
    if (c == '"') {
      v->kind = Value::Kind::kString;
      return String(&v->str);
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
      const size_t start = i_;
      if (c == '-') ++i_;
      while (i_ < t_.size() && t_[i_] >= '0' && t_[i_] <= '9') ++i_;
      if (i_ < t_.size() && (t_[i_] == '.' || t_[i_] == 'e' || t_[i_] == 'E')) return false;
      v->kind = Value::Kind::kInteger;
      return absl::SimpleAtoi(ToAbsl(t_.substr(start, i_ - start)), &v->integer);
    }
    if (c == '[' || c == '{') {
      // The raw text up to the matching bracket (strings may hold brackets).
      const size_t start = i_;
      int depth = 0;
      std::string ignored;
      while (i_ < t_.size()) {
        const char d = t_[i_];
        if (d == '"') {
          if (!String(&ignored)) return false;
          continue;
        }
        ++i_;
        if (d == '[' || d == '{') ++depth;
        if ((d == ']' || d == '}') && --depth == 0) {
          v->kind = c == '[' ? Value::Kind::kArray : Value::Kind::kObject;
          v->raw = t_.substr(start, i_ - start);
          return true;
        }
      }
      return false;
    }
    if (Word("true") || Word("false")) {
      v->kind = Value::Kind::kBool;
      v->boolean = c == 't';
      return true;
    }
    if (Word("null")) {
      v->kind = Value::Kind::kNull;
      return true;
    }
    return false;
  }

  std::string_view t_;
  size_t i_ = 0;
};

using Value = FlatObject::Value;

bool TakeString(Value& v, std::string* out) {
  if (v.kind != Value::Kind::kString) return false;
  *out = std::move(v.str);
  return true;
}

bool TakeTime(const Value& v, std::optional<absl::Time>* out) {
  if (v.kind != Value::Kind::kInteger) return false;
  *out = absl::FromUnixMicros(v.integer);
  return true;
}

// registry/record_codec.h; rare but "[]", so its DOM parser is fine here. An "until" that is
// neither an integer nor null refuses the record, as it always has here.
bool ParseOverrides(std::string_view raw, std::vector<registry::Override>* out) {
  absl::StatusOr<std::vector<registry::Override>> parsed =
      registry::ParseOverridesText(raw, {.bad_until = registry::BadUntil::kReject});
  if (!parsed.ok()) return false;
  out->insert(out->end(), std::make_move_iterator(parsed->begin()),
              std::make_move_iterator(parsed->end()));
  return true;
}

}  // namespace

std::optional<Subject> ParseSubject(std::string_view id, std::string_view record) {
  if (id.empty()) return std::nullopt;
  Subject s;
  s.id = std::string(id);
  s.metadata.clear();
  std::optional<absl::Time> created, updated;
  const bool ok = FlatObject::Parse(record, [&](std::string_view name, Value& v) {
    if (name == "plan") return TakeString(v, &s.plan);
    if (name == "email") return TakeString(v, &s.email);
    if (name == "webhook") return TakeString(v, &s.webhook);
    if (name == "webhook_secret") return TakeString(v, &s.webhook_secret);
    if (name == "metadata") return TakeString(v, &s.metadata);
    if (name == "created_at") return TakeTime(v, &created);
    if (name == "updated_at") return TakeTime(v, &updated);
    if (name == "credits") {
      s.credits = v.integer;
      return v.kind == Value::Kind::kInteger && v.integer >= 0 &&
             v.integer <= registry::kMaxCredits;
    }
    if (name == "disabled") {
      s.disabled = v.boolean;
      return v.kind == Value::Kind::kBool;
    }
    if (name == "overrides") {
      return v.kind == Value::Kind::kArray && ParseOverrides(v.raw, &s.overrides);
    }
    return true;
  });
  if (!ok || s.plan.empty() || !created || !updated) return std::nullopt;
  if (s.metadata.empty()) s.metadata = "{}";
  s.created_at = *created;
  s.updated_at = *updated;
  return s;
}

std::optional<Key> ParseKey(uint64_t id, std::string_view record) {
  if (id == 0) return std::nullopt;
  Key k{.id = id};
  std::optional<absl::Time> created;
  bool digest_ok = false;
  const bool ok = FlatObject::Parse(record, [&](std::string_view name, Value& v) {
    if (name == "subject") return TakeString(v, &k.subject);
    if (name == "prefix") return TakeString(v, &k.prefix);
    if (name == "name") return TakeString(v, &k.name);
    if (name == "created_at") return TakeTime(v, &created);
    if (name == "digest") {
      if (v.kind != Value::Kind::kString) return false;
      absl::StatusOr<registry::Digest> d = registry::ParseDigestHex(v.str);
      if (d.ok()) k.digest = *d;
      digest_ok = d.ok();
      return digest_ok;
    }
    if (name == "expires_at") return v.kind == Value::Kind::kNull || TakeTime(v, &k.expires_at);
    return true;
  });
  if (!ok || k.subject.empty() || !digest_ok || !created) return std::nullopt;
  k.created_at = *created;
  return k;
}

// Everything that runs on the private thread. Shared with the coroutines and handlers in flight.
namespace {

// A Connection to the one Redis, or on a cluster a ClusterClient whose keyless commands (CLIENT
// ID, INFO: what tells the follower that its server changed) go to the master of the registry's
// slot, the node every other registry command goes to.
std::unique_ptr<CommandSender> MakeSender(asio::io_context& io, const RedisRegistryOptions& o,
                                          const std::string& base) {
  if (o.cluster_seeds.empty()) return std::make_unique<Connection>(io, o.connection);
  return std::make_unique<ClusterClient>(
      io,
      ClusterOptions{.connection = o.connection, .seeds = o.cluster_seeds, .keyless_key = base});
}

}  // namespace

class RedisRegistry::Follower : public std::enable_shared_from_this<Follower> {
 public:
  Follower(RedisRegistry* owner, const RedisRegistryOptions& options)
      : owner_(owner),
        options_(options),
        base_(RegistryBase(options.key_prefix)),
        version_key_(base_ + ":version"),
        epoch_key_(base_ + ":epoch"),
        log_key_(base_ + ":log"),
        subjects_key_(base_ + ":subjects"),
        keys_key_(base_ + ":keys"),
        write_script_(kRegistryWriteScript),
        read_script_(kRegistryReadScript),
        work_(asio::make_work_guard(io_)),
        connection_(MakeSender(io_, options, base_)),
        timer_(io_) {}

  asio::io_context& io() { return io_; }

  // Lets io().run() return once every handler in flight has run.
  void ReleaseWork() { work_.reset(); }

  // On the private thread.
  void Begin(registry::Index* index, std::shared_ptr<std::promise<void>> first_load) {
    index_ = index;
    first_load_ = std::move(first_load);
    connection_->Start();
    force_reload_ = true;
    asio::co_spawn(io_, PollLoop(shared_from_this()), asio::detached);
  }

  // On the private thread.
  void Write(Change change, ChangeCallback done) {
    if (stopping_) {
      Finish(std::move(done), absl::UnavailableError("redis registry: stopped"));
      return;
    }
    ++writes_in_flight_;
    Argv argv = WriteCommand(change);
    RunScript(std::move(argv), write_script_,
              [self = shared_from_this(), change = std::move(change),
               done = std::move(done)](absl::StatusOr<Reply> reply) mutable {
                self->OnWritten(std::move(change), std::move(done), std::move(reply));
              });
  }

  // On the private thread: a page of the credit ledger (registry::Backend::ReadCredits).
  void ReadCredits(std::string subject, int64_t before, size_t limit,
                   registry::CreditPageCallback done) {
    if (stopping_) {
      Finish(std::move(done), absl::StatusOr<registry::CreditPage>(
                                  absl::UnavailableError("redis registry: stopped")));
      return;
    }
    asio::co_spawn(
        io_, ReadLedger(shared_from_this(), std::move(subject), before, limit, std::move(done)),
        asio::detached);
  }

  // On the private thread. `stopped` is set once no write is outstanding any more.
  void BeginStop(std::shared_ptr<std::promise<void>> stopped) {
    if (stopped_promise_) {  // a second Stop(): the first one finishes the job
      stopped->set_value();
      return;
    }
    stopping_ = true;
    stopped_promise_ = std::move(stopped);
    boost::system::error_code ignored;
    timer_.cancel(ignored);
    // Writes already answered but waiting for the follower to reach them: apply them locally.
    while (!waiters_.empty()) ResolveLocally();
    MaybeFinishStop();
  }

 private:
  // A write Redis has made, waiting until the Index holds it.
  struct Waiter {
    Change change;
    ChangeResult result;
    ChangeCallback done;
  };

  // Where the follower applies records: the Index, or what changed during a full load.
  struct Sink {
    virtual ~Sink() = default;
    virtual void SetSubject(const std::string& id, std::optional<Subject> subject) = 0;
    virtual void SetKey(uint64_t id, std::optional<Key> key) = 0;
  };
  struct IndexSink final : Sink {
    explicit IndexSink(registry::Index* i) : index(i) {}
    void SetSubject(const std::string& id, std::optional<Subject> subject) override {
      if (subject) {
        index->PutSubject(*std::move(subject));
      } else {
        index->DeleteSubject(id);
      }
    }
    void SetKey(uint64_t id, std::optional<Key> key) override {
      if (!key) {
        index->RevokeKey(id);
      } else if (!index->FindKey(id)) {  // keys never change once made
        index->AddKey(*std::move(key));
      }
    }
    registry::Index* index;
  };
  struct MapSink final : Sink {
    void SetSubject(const std::string& id, std::optional<Subject> subject) override {
      subjects[id] = std::move(subject);
    }
    void SetKey(uint64_t id, std::optional<Key> key) override { keys[id] = std::move(key); }
    // Every record touched, with its latest state (nullopt: deleted).
    absl::flat_hash_map<std::string, std::optional<Subject>> subjects;
    absl::flat_hash_map<uint64_t, std::optional<Key>> keys;
  };

  template <typename Handler, typename Result = absl::StatusOr<ChangeResult>>
  void Finish(Handler done, Result result) {
    asio::post(io_, [done = std::move(done), result = std::move(result)]() mutable {
      std::move(done)(std::move(result));
    });
  }

  // `script` with `argv` (its Command, keys and arguments), loaded on NOSCRIPT (LuaScript: the
  // load and the retry go out together, so one instance's writes keep the order they were made
  // in — a key is never added before its subject).
  void RunScript(Argv argv, const LuaScript& script, Connection::Callback done) {
    script.Run(connection_.get(), std::make_shared<const Argv>(std::move(argv)), std::move(done));
  }

  asio::awaitable<absl::StatusOr<Reply>> Script(Argv argv, const LuaScript& script) {
    auto initiation = [this, &argv, &script](auto handler) {
      RunScript(std::move(argv), script,
                [handler = std::move(handler)](absl::StatusOr<Reply> r) mutable {
                  std::move(handler)(std::move(r));
                });
    };
    absl::StatusOr<Reply> reply =
        co_await asio::async_initiate<decltype(asio::use_awaitable), void(absl::StatusOr<Reply>)>(
            std::move(initiation), asio::use_awaitable);
    co_return reply;
  }

  // Sends `commands` pipelined; the replies in order.
  asio::awaitable<std::vector<absl::StatusOr<Reply>>> Batch(std::vector<Argv> commands) {
    using Replies = std::vector<absl::StatusOr<Reply>>;
    auto initiation = [this, &commands](auto handler) {
      struct State {
        Replies replies;
        size_t left;
        decltype(handler) done;
      };
      auto state = std::make_shared<State>(State{Replies(commands.size(), absl::UnknownError("")),
                                                 commands.size(), std::move(handler)});
      if (commands.empty()) {
        asio::post(io_, [state] { std::move(state->done)(Replies{}); });
        return;
      }
      for (size_t i = 0; i < commands.size(); ++i) {
        connection_->Send(std::move(commands[i]), [state, i](absl::StatusOr<Reply> r) {
          state->replies[i] = std::move(r);
          if (--state->left == 0) std::move(state->done)(std::move(state->replies));
        });
      }
    };
    Replies replies = co_await asio::async_initiate<decltype(asio::use_awaitable), void(Replies)>(
        std::move(initiation), asio::use_awaitable);
    co_return replies;
  }

  Argv WriteCommand(const Change& c) const {
    // 3 keys and 4 arguments, then at most 8 of the change's.
    Argv argv = write_script_.Command(3, 7 + 8);
    argv.insert(argv.end(), {version_key_, epoch_key_, log_key_, base_, NewEpoch(),
                             absl::StrCat(options_.log_max), std::string(KindName(c.kind))});
    switch (c.kind) {
      case Change::Kind::kPutSubject:
        argv.push_back(c.subject.id);
        argv.push_back(SubjectRecord(c.subject));
        break;
      case Change::Kind::kDeleteSubject:
        argv.push_back(c.subject_id);
        break;
      case Change::Kind::kAddKey:
        argv.push_back(KeyIdHex(c.key.id));
        argv.push_back(c.key.subject);
        argv.push_back(registry::DigestHex(c.key.digest));
        argv.push_back(absl::StrCat(registry::kMaxKeysPerSubject));
        argv.push_back(c.idempotency_key);
        argv.push_back(c.fingerprint);
        argv.push_back(absl::StrCat(kIdempotencyTtlSeconds));
        argv.push_back(KeyRecord(c.key));
        break;
      case Change::Kind::kRevokeKey:
        argv.push_back(KeyIdHex(c.key_id));
        break;
      case Change::Kind::kGrantCredits:
        argv.push_back(c.subject_id);
        argv.push_back(c.idempotency_key);
        argv.push_back(c.fingerprint);
        argv.push_back(absl::StrCat(c.grant.amount));
        argv.push_back(absl::StrCat(registry::kMaxCredits));
        argv.push_back(absl::StrCat(registry::kMaxCreditGrants));
        argv.push_back(CreditGrantRecord(c.grant));
        break;
    }
    return argv;
  }

  void OnWritten(Change change, ChangeCallback done, absl::StatusOr<Reply> reply) {
    --writes_in_flight_;
    absl::StatusOr<ChangeResult> result = WriteResult(reply, change.kind);
    if (!result.ok() || reply->elements[1].integer == 0) {
      // An error, or an idempotent replay: nothing changed.
      Finish(std::move(done), std::move(result));
    } else {
      waiters_.push_back(
          Waiter{.change = std::move(change), .result = *result, .done = std::move(done)});
      if (stopping_) {
        ResolveLocally();
      } else {
        KickSync();
      }
    }
    MaybeFinishStop();
  }

  static absl::StatusOr<ChangeResult> WriteResult(const absl::StatusOr<Reply>& reply,
                                                  Change::Kind kind) {
    if (absl::Status st = Check(reply); !st.ok()) return st;
    const std::vector<Reply>& e = reply->elements;
    if (!reply->is_array() || e.size() != 4 || !e[0].is_integer() || !e[1].is_integer() ||
        !e[2].is_integer()) {
      return absl::InternalError("redis registry: unexpected reply to registry_write.lua");
    }
    switch (e[0].integer) {
      case 0:
        break;
      case 1:
        return absl::NotFoundError("not found");
      case 2:
        return absl::AlreadyExistsError("a key with this digest already exists");
      case 3:
        return absl::ResourceExhaustedError(
            absl::StrCat("the subject already has ", registry::kMaxKeysPerSubject, " keys"));
      case 4:
        return absl::FailedPreconditionError(
            "the idempotency key was used for a different request");
      case 5:
        return absl::OutOfRangeError(
            absl::StrCat("the credits would exceed ", registry::kMaxCredits));
      case 6:
        return absl::OutOfRangeError(
            absl::StrCat("a subject has at most ", registry::kMaxCreditGrants, " grants"));
      default:
        return absl::InternalError("redis registry: unexpected code from registry_write.lua");
    }
    ChangeResult out;
    out.created = e[2].integer == 1 && e[1].integer != 0;
    out.replayed = e[1].integer == 0 && e[2].integer == 1;
    if (kind == Change::Kind::kGrantCredits) {
      std::optional<registry::CreditGrant> grant =
          e[3].is_string() ? ParseCreditGrant(e[3].str) : std::nullopt;
      if (!grant) return absl::InternalError("redis registry: bad grant from registry_write.lua");
      out.grant = *std::move(grant);
      return out;
    }
    if (e[3].is_string() && !e[3].str.empty()) {
      std::optional<uint64_t> id = ParseKeyIdHex(e[3].str);
      if (!id) return absl::InternalError("redis registry: bad key id from registry_write.lua");
      out.key_id = *id;
    }
    return out;
  }

  // Reports the writes whose version the Index has reached.
  // Reports the first `n` waiters (those a sync that has just succeeded began after).
  void ResolveWaiters(size_t n) {
    for (n = std::min(n, waiters_.size()); n > 0; --n) {
      Finish(std::move(waiters_.front().done), std::move(waiters_.front().result));
      waiters_.pop_front();
    }
  }

  // The follower cannot reach the oldest waiter's version now (Redis went away right after the
  // write, or we are stopping): apply the change itself, which is exactly what Redis holds for
  // those records as of its version, and let the follower converge the rest later.
  void ResolveLocally() {
    Waiter w = std::move(waiters_.front());
    waiters_.pop_front();
    IndexSink sink(index_);
    const Change& c = w.change;
    switch (c.kind) {
      case Change::Kind::kPutSubject: {
        std::optional<Subject> s = ParseSubject(c.subject.id, SubjectRecord(c.subject));
        // Redis kept the credits the subject had (the record written holds none).
        if (std::shared_ptr<const Subject> before = index_->FindSubject(c.subject.id)) {
          if (s) s->credits = before->credits;
        }
        sink.SetSubject(c.subject.id, std::move(s));
        break;
      }
      case Change::Kind::kGrantCredits:
        if (std::shared_ptr<const Subject> before = index_->FindSubject(c.subject_id)) {
          Subject s = *before;
          s.credits = std::max(s.credits, w.result.grant.balance);
          sink.SetSubject(c.subject_id, std::move(s));
        }
        break;
      case Change::Kind::kDeleteSubject:
        sink.SetSubject(c.subject_id, std::nullopt);
        break;
      case Change::Kind::kAddKey:
        sink.SetKey(c.key.id, ParseKey(c.key.id, KeyRecord(c.key)));
        break;
      case Change::Kind::kRevokeKey:
        sink.SetKey(c.key_id, std::nullopt);
        break;
    }
    Finish(std::move(w.done), std::move(w.result));
  }

  static asio::awaitable<void> ReadLedger(std::shared_ptr<Follower> self, std::string subject,
                                          int64_t before, size_t limit,
                                          registry::CreditPageCallback done) {
    absl::StatusOr<registry::CreditPage> page =
        co_await self->LedgerPage(std::move(subject), before, limit);
    self->Finish(std::move(done), std::move(page));
  }

  asio::awaitable<absl::StatusOr<registry::CreditPage>> LedgerPage(std::string subject,
                                                                   int64_t before, size_t limit) {
    const std::string ledger = absl::StrCat(base_, ":credits:", subject);
    std::vector<Argv> head = {{"EXISTS", absl::StrCat(base_, ":subject:", subject)},
                              {"HGET", ledger, "n"}};
    std::vector<absl::StatusOr<Reply>> r = co_await Batch(std::move(head));
    for (const absl::StatusOr<Reply>& reply : r) {
      if (absl::Status st = Check(reply); !st.ok()) co_return st;
    }
    if (!r[0]->is_integer() || r[0]->integer == 0) co_return absl::NotFoundError("no such subject");
    int64_t n = 0;
    if (r[1]->is_string() && !absl::SimpleAtoi(r[1]->str, &n)) {
      co_return absl::InternalError("redis registry: a malformed credit ledger");
    }
    const int64_t first = before > 0 ? std::min(before - 1, n) : n;  // the newest to show
    registry::CreditPage page;
    if (first < 1) co_return page;
    Argv get = {"HMGET", ledger};
    const int64_t last = std::max<int64_t>(1, first - static_cast<int64_t>(limit) + 1);
    for (int64_t seq = first; seq >= last; --seq) get.push_back(absl::StrCat("e:", seq));
    std::vector<Argv> command = {std::move(get)};
    std::vector<absl::StatusOr<Reply>> entries = co_await Batch(std::move(command));
    if (absl::Status st = Check(entries[0]); !st.ok()) co_return st;
    for (const Reply& e : entries[0]->elements) {
      std::optional<registry::CreditGrant> g =
          e.is_string() ? ParseCreditGrant(e.str) : std::nullopt;
      if (!g) {
        owner_->malformed_.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      page.grants.push_back(*std::move(g));
    }
    if (last > 1) page.next_before = last;
    co_return page;
  }

  void MaybeFinishStop() {
    if (!stopping_ || writes_in_flight_ > 0 || !stopped_promise_ || stop_finished_) return;
    stop_finished_ = true;
    connection_->Stop();
    stopped_promise_->set_value();
  }

  void KickSync() {
    if (syncing_) {
      sync_again_ = true;
      return;
    }
    syncing_ = true;
    asio::co_spawn(io_, SyncLoop(shared_from_this()), asio::detached);
  }

  static asio::awaitable<void> SyncLoop(std::shared_ptr<Follower> self) {
    do {
      self->sync_again_ = false;
      // A sync that begins after a write was answered (on the same connection) reads a state at
      // least as new: when it succeeds, the Index holds that write. Versions cannot tell, as a
      // wiped registry numbers its changes from 1 again.
      const size_t covered = self->waiters_.size();
      absl::Status st = co_await self->SyncOnce();
      if (!st.ok()) {
        if (!self->stopping_) self->ReportFailure(st);
        // Writes reported by Redis must not wait for it to come back.
        while (!self->waiters_.empty()) self->ResolveLocally();
        break;
      }
      self->ResolveWaiters(covered);
    } while (self->sync_again_ && !self->stopping_);
    self->syncing_ = false;
  }

  void ReportFailure(const absl::Status& st) {
    const auto now = std::chrono::steady_clock::now();
    if (now - last_failure_log_ < std::chrono::seconds(60)) return;
    last_failure_log_ = now;
    Log(LogLevel::kWarn, "redis registry: cannot follow").Error(st);
  }

  // Brings the Index up to the version Redis holds now.
  asio::awaitable<absl::Status> SyncOnce() {
    if (!force_reload_) {
      IndexSink sink(index_);
      const uint64_t from = owner_->version_.load(std::memory_order_relaxed);
      uint64_t at = from;
      bool applied = false;
      size_t changes = 0;
      for (;;) {
        absl::StatusOr<std::optional<uint64_t>> next = co_await CatchUp(at, epoch_, sink);
        if (!next.ok()) co_return next.status();
        if (!next->has_value()) {
          force_reload_ = true;
          break;
        }
        applied = applied || **next != at;
        changes += last_entries_;
        at = **next;
        owner_->version_.store(at, std::memory_order_relaxed);
        if (!caught_up_short_) break;
      }
      if (!force_reload_) {
        if (applied) {
          owner_->catch_ups_.fetch_add(1, std::memory_order_relaxed);
          Log(LogLevel::kDebug, "redis registry changes applied")
              .Int("from_version", static_cast<int64_t>(from))
              .Int("version", static_cast<int64_t>(at))
              .Int("changes", static_cast<int64_t>(changes))
              .Int("subjects", static_cast<int64_t>(index_->subject_count()))
              .Int("keys", static_cast<int64_t>(index_->key_count()));
        }
        co_return absl::OkStatus();
      }
    }
    co_return co_await FullLoad();
  }

  // One registry_read.lua round from `after`: the version reached (entries applied to `sink`),
  // nullopt if only a full load can catch up. Sets caught_up_short_ when entries remain.
  asio::awaitable<absl::StatusOr<std::optional<uint64_t>>> CatchUp(uint64_t after,
                                                                   const std::string& epoch,
                                                                   Sink& sink) {
    caught_up_short_ = false;
    last_entries_ = 0;
    // Named arguments, not temporaries inside the co_await expression: GCC 12 mishandles those.
    Argv argv = read_script_.Command(3, 7);
    argv.insert(argv.end(), {version_key_, epoch_key_, log_key_, base_, absl::StrCat(after), epoch,
                             absl::StrCat(options_.catch_up_entries)});
    absl::StatusOr<Reply> reply = co_await Script(std::move(argv), read_script_);
    if (absl::Status st = Check(reply); !st.ok()) co_return st;
    const std::vector<Reply>& e = reply->elements;
    if (!reply->is_array() || e.size() < 3 || !e[0].is_integer() || !e[1].is_integer()) {
      co_return absl::InternalError("redis registry: unexpected reply to registry_read.lua");
    }
    if (e[0].integer != 0) co_return std::optional<uint64_t>();
    epoch_ = e[2].str;
    const uint64_t version = static_cast<uint64_t>(e[1].integer);
    uint64_t at = after;
    for (size_t i = 3; i < e.size(); ++i) {
      const std::vector<Reply>& entry = e[i].elements;
      if (entry.size() < 4 || entry.size() % 2 != 0 || !entry[0].is_integer()) {
        co_return absl::InternalError("redis registry: unexpected entry from registry_read.lua");
      }
      if (!entry[2].str.empty()) sink.SetSubject(entry[2].str, FromRecord(entry[2].str, entry[3]));
      for (size_t k = 4; k + 1 < entry.size(); k += 2) {
        std::optional<uint64_t> id = ParseKeyIdHex(entry[k].str);
        if (!id) {
          owner_->malformed_.fetch_add(1, std::memory_order_relaxed);
          continue;
        }
        sink.SetKey(*id, FromRecord(*id, entry[k + 1]));
      }
      at = static_cast<uint64_t>(entry[0].integer);
    }
    caught_up_short_ = at < version;
    last_entries_ = e.size() - 3;
    co_return std::optional<uint64_t>(at);
  }

  // A record's state as read: nullopt when absent (nil or "") or unparsable (counted).
  std::optional<Subject> FromRecord(const std::string& id, const Reply& record) {
    if (!record.is_string() || record.str.empty()) return std::nullopt;
    std::optional<Subject> s = ParseSubject(id, record.str);
    if (!s) owner_->malformed_.fetch_add(1, std::memory_order_relaxed);
    return s;
  }
  std::optional<Key> FromRecord(uint64_t id, const Reply& record) {
    if (!record.is_string() || record.str.empty()) return std::nullopt;
    std::optional<Key> k = ParseKey(id, record.str);
    if (!k) owner_->malformed_.fetch_add(1, std::memory_order_relaxed);
    return k;
  }

  static std::string RunId(const Reply& info) {
    constexpr std::string_view kField = "run_id:";
    const size_t at = info.str.find(kField);
    if (at == std::string::npos) return "";
    const size_t end = info.str.find_first_of("\r\n", at);
    return info.str.substr(at + kField.size(),
                           end == std::string::npos ? end : end - at - kField.size());
  }

  // Every member of the sorted set `index` (all scores 0: lexicographic order), in pages of
  // kIdPage by ZRANGE BYLEX from the last one, so members present throughout are all returned
  // even while others come and go.
  asio::awaitable<absl::StatusOr<std::vector<std::string>>> Members(const std::string& index) {
    static constexpr size_t kIdPage = 10000;
    std::vector<std::string> out;
    std::string from = "-";
    for (;;) {
      Argv argv = {"ZRANGE", index, from, "+", "BYLEX", "LIMIT", "0", absl::StrCat(kIdPage)};
      std::vector<Argv> command = {std::move(argv)};
      std::vector<absl::StatusOr<Reply>> r = co_await Batch(std::move(command));
      if (stopping_) co_return absl::CancelledError("redis registry: stopping");
      if (absl::Status st = Check(r[0]); !st.ok()) co_return st;
      if (!r[0]->is_array())
        co_return absl::InternalError("redis registry: unexpected ZRANGE reply");
      for (Reply& m : r[0]->elements) out.push_back(std::move(m.str));
      if (r[0]->elements.size() < kIdPage) break;
      from = absl::StrCat("(", out.back());
    }
    co_return out;
  }

  // The records `<prefix><id>` of `ids` by MGET, batch_size at a time with kWindow batches in
  // flight: each reply sends the next batch before it is parsed, so Redis works on one batch
  // while this thread parses another. `on_record(id, reply)` sees every record (nil if absent).
  template <typename OnRecord>
  asio::awaitable<absl::Status> Fetch(const std::vector<std::string>& ids,
                                      const std::string& prefix, OnRecord on_record) {
    static constexpr int kWindow = 4;
    using Done = absl::AnyInvocable<void(absl::Status) &&>;
    // Owned by the callbacks in flight; `ids`, `prefix` and `on_record` live in the awaiting
    // coroutine's frame until `done` has run.
    struct State {
      Follower* self;
      const std::vector<std::string>* ids;
      const std::string* prefix;
      OnRecord* on_record;
      size_t batch;
      size_t next = 0;
      int in_flight = 0;
      absl::Status status;
      Done done;

      static void Send(const std::shared_ptr<State>& state) {
        const size_t first = state->next, last = std::min(state->ids->size(), first + state->batch);
        state->next = last;
        ++state->in_flight;
        Argv argv = {"MGET"};
        argv.reserve(1 + last - first);
        for (size_t i = first; i < last; ++i) argv.push_back(*state->prefix + (*state->ids)[i]);
        state->self->connection_->Send(
            std::move(argv), [state, first, last](absl::StatusOr<Reply> r) {
              State& s = *state;
              if (absl::Status st = Check(r); !st.ok() && s.status.ok()) s.status = st;
              if (s.status.ok() && (!r->is_array() || r->elements.size() != last - first)) {
                s.status = absl::InternalError("redis registry: unexpected MGET reply");
              }
              if (s.self->stopping_ && s.status.ok()) {
                s.status = absl::CancelledError("redis registry: stopping");
              }
              if (s.status.ok() && s.next < s.ids->size()) Send(state);
              if (s.status.ok()) {
                for (size_t i = first; i < last; ++i)
                  (*s.on_record)((*s.ids)[i], r->elements[i - first]);
              }
              if (--s.in_flight == 0 && (s.next >= s.ids->size() || !s.status.ok())) {
                std::move(s.done)(s.status);
              }
            });
      }
    };
    auto initiation = [this, &ids, &prefix, &on_record](auto handler) {
      auto state = std::make_shared<State>(State{.self = this,
                                                 .ids = &ids,
                                                 .prefix = &prefix,
                                                 .on_record = &on_record,
                                                 .batch = std::max<size_t>(1, options_.batch_size),
                                                 .done = std::move(handler)});
      if (ids.empty()) {
        asio::post(io_, [state] { std::move(state->done)(absl::OkStatus()); });
        return;
      }
      for (int w = 0; w < kWindow && state->next < ids.size(); ++w) State::Send(state);
    };
    absl::Status st =
        co_await asio::async_initiate<decltype(asio::use_awaitable), void(absl::Status)>(
            std::move(initiation), asio::use_awaitable);
    co_return st;
  }

  // Everything, as of a version V: records are read without a snapshot while writes go on, then
  // the log from V is applied over them (every record a write touched after V is set to its
  // state at the end), and only then is the result swapped into the Index. Writes answered
  // meanwhile are covered: their versions are after V and before the last catch-up.
  asio::awaitable<absl::Status> FullLoad() {
    std::vector<Argv> first = {{"INFO", "server"}, {"MGET", version_key_, epoch_key_}};
    std::vector<absl::StatusOr<Reply>> head = co_await Batch(std::move(first));
    for (const auto& r : head) {
      if (absl::Status st = Check(r); !st.ok()) co_return st;
    }
    const std::string run_id = RunId(*head[0]);
    const Reply& mget = *head[1];
    if (!mget.is_array() || mget.elements.size() != 2) {
      co_return absl::InternalError("redis registry: unexpected MGET reply");
    }
    uint64_t at = 0;
    if (mget.elements[0].is_string() && !absl::SimpleAtoi(mget.elements[0].str, &at)) at = 0;
    std::string epoch = mget.elements[1].is_string() ? mget.elements[1].str : "";

    const auto started = std::chrono::steady_clock::now();
    std::vector<Subject> subjects;
    std::vector<Key> keys;
    {
      absl::StatusOr<std::vector<std::string>> ids = co_await Members(subjects_key_);
      if (!ids.ok()) co_return ids.status();
      subjects.reserve(ids->size());
      absl::Status st = co_await Fetch(
          *ids, base_ + ":subject:", [&](const std::string& id, const Reply& record) {
            std::optional<Subject> s = FromRecord(id, record);
            if (s) subjects.push_back(*std::move(s));
          });
      if (!st.ok()) co_return st;
    }
    {
      absl::StatusOr<std::vector<std::string>> ids = co_await Members(keys_key_);
      if (!ids.ok()) co_return ids.status();
      keys.reserve(ids->size());
      absl::Status st =
          co_await Fetch(*ids, base_ + ":key:", [&](const std::string& hex, const Reply& record) {
            std::optional<uint64_t> id = ParseKeyIdHex(hex);
            if (!id) {
              owner_->malformed_.fetch_add(1, std::memory_order_relaxed);
              return;
            }
            std::optional<Key> k = FromRecord(*id, record);
            if (k) keys.push_back(*std::move(k));
          });
      if (!st.ok()) co_return st;
    }
    // What changed since V, over what was read: set aside, then merged.
    MapSink sink;
    for (;;) {
      absl::StatusOr<std::optional<uint64_t>> next = co_await CatchUp(at, epoch, sink);
      if (!next.ok()) co_return next.status();
      if (!next->has_value()) {
        // Wiped or trimmed past V while loading: start again from a new V (next round).
        co_return absl::UnavailableError("redis registry: the registry changed under a full load");
      }
      at = **next;
      epoch = epoch_;
      if (!caught_up_short_) break;
    }

    if (!sink.subjects.empty()) {
      std::erase_if(subjects, [&](const Subject& s) { return sink.subjects.contains(s.id); });
      for (auto& [id, s] : sink.subjects) {
        if (s) subjects.push_back(*std::move(s));
      }
    }
    if (!sink.keys.empty()) {
      std::erase_if(keys, [&](const Key& k) { return sink.keys.contains(k.id); });
      for (auto& [id, k] : sink.keys) {
        if (k) keys.push_back(*std::move(k));
      }
    }
    sink = MapSink{};
    const size_t n_subjects = subjects.size(), n_keys = keys.size();
    index_->Replace(std::move(subjects), std::move(keys));
    owner_->version_.store(at, std::memory_order_relaxed);
    epoch_ = epoch;
    run_id_ = run_id;
    force_reload_ = false;
    owner_->full_loads_.fetch_add(1, std::memory_order_relaxed);
    Log(LogLevel::kInfo, "redis registry loaded")
        .Int("subjects", static_cast<int64_t>(n_subjects))
        .Int("keys", static_cast<int64_t>(n_keys))
        .Int("version", static_cast<int64_t>(at))
        .Int("ms", std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::steady_clock::now() - started)
                       .count());
    if (first_load_) std::exchange(first_load_, nullptr)->set_value();
    co_return absl::OkStatus();
  }

  // Every poll_interval: has the registry moved, been wiped, or is this another Redis server?
  asio::awaitable<absl::Status> Poll() {
    std::vector<Argv> poll = {{"CLIENT", "GETNAME"}, {"MGET", version_key_, epoch_key_}};
    std::vector<absl::StatusOr<Reply>> r = co_await Batch(std::move(poll));
    for (const auto& reply : r) {
      if (absl::Status st = Check(reply); !st.ok()) co_return st;
    }
    if (!r[0]->is_string() || r[0]->str != connection_name_) {
      // A connection this follower has not named yet: a reconnect, perhaps to a restarted Redis
      // (which may have lost the last writes even with persistence), or on a cluster to the
      // replica promoted in a failover of the registry's slot. Its run_id tells. (A connection's
      // name cannot repeat on another connection, as its CLIENT ID can on another server.)
      std::vector<Argv> command = {{"INFO", "server"}, {"CLIENT", "SETNAME", connection_name_}};
      std::vector<absl::StatusOr<Reply>> info = co_await Batch(std::move(command));
      for (const auto& reply : info) {
        if (absl::Status st = Check(reply); !st.ok()) co_return st;
      }
      if (RunId(*info[0]) != run_id_) force_reload_ = true;
    }
    const Reply& mget = *r[1];
    if (!mget.is_array() || mget.elements.size() != 2) {
      co_return absl::InternalError("redis registry: unexpected MGET reply");
    }
    uint64_t version = 0;
    if (mget.elements[0].is_string() && !absl::SimpleAtoi(mget.elements[0].str, &version)) {
      version = 0;
    }
    const std::string epoch = mget.elements[1].is_string() ? mget.elements[1].str : "";
    if (force_reload_ || version != owner_->version_.load(std::memory_order_relaxed) ||
        epoch != epoch_) {
      KickSync();
    }
    co_return absl::OkStatus();
  }

  static asio::awaitable<void> PollLoop(std::shared_ptr<Follower> self) {
    while (!self->stopping_) {
      if (self->connection_->connected() && !self->syncing_) {
        if (self->force_reload_) {
          self->KickSync();
        } else if (absl::Status st = co_await self->Poll(); !st.ok() && !self->stopping_) {
          self->ReportFailure(st);
        }
      }
      if (self->stopping_) break;
      boost::system::error_code ec;
      // Until the first load, wait for the connection more eagerly than the poll does.
      self->timer_.expires_after(self->force_reload_ ? std::min(self->options_.poll_interval,
                                                                std::chrono::milliseconds(20))
                                                     : self->options_.poll_interval);
      co_await self->timer_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
  }

  size_t last_entries_ = 0;  // change-log entries the latest CatchUp applied
  RedisRegistry* owner_;
  const RedisRegistryOptions options_;
  const std::string base_, version_key_, epoch_key_, log_key_, subjects_key_, keys_key_;
  const LuaScript write_script_, read_script_;
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  std::unique_ptr<CommandSender> connection_;
  asio::steady_timer timer_;

  registry::Index* index_ = nullptr;
  std::shared_ptr<std::promise<void>> first_load_;
  std::shared_ptr<std::promise<void>> stopped_promise_;
  std::deque<Waiter> waiters_;  // in the order Redis answered them
  std::string epoch_;           // of the registry the Index reflects ("" before any write)
  std::string run_id_;          // of the Redis server it was loaded from
  // CLIENT SETNAME of each connection the follower has checked (random per follower).
  const std::string connection_name_ = "sluice-registry-" + NewEpoch();
  int writes_in_flight_ = 0;
  bool force_reload_ = false;
  bool syncing_ = false;
  bool sync_again_ = false;
  bool caught_up_short_ = false;
  bool stopping_ = false;
  bool stop_finished_ = false;
  std::chrono::steady_clock::time_point last_failure_log_{};
};

RedisRegistry::RedisRegistry(RedisRegistryOptions options)
    : options_(std::move(options)), follower_(std::make_shared<Follower>(this, options_)) {
  thread_ = std::thread([f = follower_] { f->io().run(); });
}

RedisRegistry::~RedisRegistry() {
  Stop();
  asio::post(follower_->io(), [f = follower_] { f->ReleaseWork(); });
  thread_.join();
}

absl::Status RedisRegistry::Start(registry::Index* index) {
  auto loaded = std::make_shared<std::promise<void>>();
  std::future<void> done = loaded->get_future();
  asio::post(follower_->io(), [f = follower_, index, loaded] { f->Begin(index, loaded); });
  if (done.wait_for(options_.start_timeout) == std::future_status::ready) return absl::OkStatus();
  // The follower keeps trying; the caller decides whether to serve meanwhile.
  const std::string from =
      options_.cluster_seeds.empty()
          ? absl::StrCat(options_.connection.host, ":", options_.connection.port)
          : ClusterName(options_.cluster_seeds);
  return absl::UnavailableError(absl::StrCat("redis registry: not loaded from ", from, " within ",
                                             options_.start_timeout.count(), " ms"));
}

void RedisRegistry::Apply(registry::Change change, registry::ChangeCallback done) {
  asio::post(follower_->io(),
             [f = follower_, change = std::move(change), done = std::move(done)]() mutable {
               f->Write(std::move(change), std::move(done));
             });
}

void RedisRegistry::ReadCredits(std::string subject, int64_t before, size_t limit,
                                registry::CreditPageCallback done) {
  asio::post(follower_->io(), [f = follower_, subject = std::move(subject), before, limit,
                               done = std::move(done)]() mutable {
    f->ReadCredits(std::move(subject), before, limit, std::move(done));
  });
}

void RedisRegistry::Stop() {
  auto stopped = std::make_shared<std::promise<void>>();
  std::future<void> done = stopped->get_future();
  asio::post(follower_->io(), [f = follower_, stopped] { f->BeginStop(stopped); });
  done.wait();
}

}  // namespace sluice::redis
