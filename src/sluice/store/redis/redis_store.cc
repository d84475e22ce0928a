#include "sluice/store/redis/redis_store.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "sluice/common/log.h"
#include "sluice/common/stable_hash.h"
#include "sluice/common/strings.h"
#include "sluice/limiter/limiter.h"
#include "sluice/store/redis/decide_script.h"
#include "sluice/store/redis/refund_script.h"
#include "sluice/store/redis/reservation_script.h"
#include "sluice/store/redis/reset_script.h"

namespace sluice::redis {
namespace {

// A Redis error reply as a Status, tagged with its kind for the metrics. Errors that mean "Redis
// cannot serve now" (BUSY, LOADING, OOM, READONLY, MASTERDOWN, NOREPLICAS, MISCONF, ...) are
// Unavailable; anything else is Internal.
absl::Status ErrorReply(const Reply& reply) {
  static constexpr std::pair<std::string_view, StoreFailure> kTransient[] = {
      {"BUSY", StoreFailure::kBusy},           {"LOADING", StoreFailure::kLoading},
      {"OOM", StoreFailure::kOutOfMemory},     {"READONLY", StoreFailure::kReadOnly},
      {"MASTERDOWN", StoreFailure::kReadOnly}, {"NOREPLICAS", StoreFailure::kReadOnly},
      {"MISCONF", StoreFailure::kOther},       {"TRYAGAIN", StoreFailure::kOther},
      {"CLUSTERDOWN", StoreFailure::kOther}};
  for (const auto& [prefix, kind] : kTransient) {
    if (reply.str.starts_with(prefix)) {
      return WithStoreFailure(absl::UnavailableError(absl::StrCat("redis: ", reply.str)), kind);
    }
  }
  return absl::InternalError(absl::StrCat("redis: ", reply.str));
}

// A counter key's value by decide.lua's rule: "0" or a decimal integer without leading zeros of
// at most kMaxUsed; anything else is unusable (-1).
int64_t ParseCounter(std::string_view text) {
  if (text.empty() || text.size() > 16 || (text.size() > 1 && text[0] == '0')) return -1;
  if (!std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return -1;
  }
  int64_t value = 0;
  if (!absl::SimpleAtoi(ToAbsl(text), &value) || value > kMaxUsed) return -1;
  return value;
}

// decide.lua's reply in `reply`'s elements from `at` on, for parts of `sizes` limits: allowed, the
// counters, fired, refused, and (when something is held) the holds.
absl::StatusOr<StoreGroupResult> ParseDecideReply(const Reply& reply, size_t at,
                                                  absl::Span<const size_t> sizes) {
  size_t n = 0;
  for (size_t size : sizes) n += size;
  const size_t left = reply.elements.size() >= at ? reply.elements.size() - at : 0;
  if (left != n + 3 && left != 2 * n + 3) {
    return absl::InternalError("redis: unexpected reply to decide.lua");
  }
  const bool held = left == 2 * n + 3;
  StoreGroupResult result;
  result.allowed = reply.elements[at].integer == 1;
  result.parts.resize(sizes.size());
  size_t e = at + 1;
  size_t h = at + n + 3;
  for (size_t p = 0; p < sizes.size(); ++p) {
    StoreResult& part = result.parts[p];
    part.allowed = result.allowed;
    part.used.resize(sizes[p]);
    for (size_t i = 0; i < sizes[p]; ++i) part.used[i] = reply.elements[e++].integer;
    if (!held) continue;
    bool any = false;
    for (size_t i = 0; i < sizes[p]; ++i) any = any || reply.elements[h + i].integer != 0;
    if (any) {
      part.held.resize(sizes[p]);
      for (size_t i = 0; i < sizes[p]; ++i) part.held[i] = reply.elements[h + i].integer;
    }
    h += sizes[p];
  }
  return result;
}

// A failure of the connection (no reply at all) tagged with its kind.
absl::Status ConnectionFailure(const absl::Status& s) {
  StoreFailure kind = StoreFailure::kOther;
  switch (s.code()) {
    case absl::StatusCode::kDeadlineExceeded:
      kind = StoreFailure::kTimeout;
      break;
    case absl::StatusCode::kResourceExhausted:
      kind = StoreFailure::kOverloaded;
      break;
    case absl::StatusCode::kUnavailable:
      kind = ToStd(s.message()) == kCircuitOpenMessage ? StoreFailure::kCircuitOpen
                                                       : StoreFailure::kConnection;
      break;
    default:
      break;
  }
  return WithStoreFailure(s, kind);
}

// An EVALSHA command, shared by its sends and by what its late reply needs (the refunds are
// built from it only then, not for every decision).
using SharedCommand = std::shared_ptr<const std::vector<std::string>>;

// The major version in an INFO server reply ("redis_version:7.0.15"), or -1 if there is none.
int RedisMajorVersion(std::string_view info) {
  static constexpr std::string_view kField = "redis_version:";
  const size_t at = info.find(kField);
  if (at == std::string_view::npos) return -1;
  int major = 0;
  size_t i = at + kField.size();
  if (i >= info.size() || info[i] < '0' || info[i] > '9') return -1;
  for (; i < info.size() && info[i] >= '0' && info[i] <= '9' && major < 1000; ++i) {
    major = major * 10 + (info[i] - '0');
  }
  return major;
}

// Logs an error when the server is older than decide.lua needs (Redis 7.0: EXPIREAT NX): on it,
// every decision that creates a counter fails and is degraded. Asked where the script is loaded
// (LuaScript's BeforeLoad: pipelined ahead of SCRIPT LOAD, so it adds no round trip).
void CheckServerVersion(CommandSender* conn) {
  conn->Send({"INFO", "server"}, [](absl::StatusOr<Reply> reply) {
    if (!reply.ok() || reply->is_error()) return;
    const int major = RedisMajorVersion(reply->str);
    if (major >= 0 && major < 7) {
      Log(LogLevel::kError, "redis server too old: decide.lua needs Redis 7.0 or newer")
          .Int("redis_major_version", major);
    }
  });
}

// The calls of `refund_script` (refund.lua) that take back what the decision `decide` (an
// EVALSHA of decide.lua as DecideCommand builds it) charged: one per part that paid, with its
// counter hashes (not its hold hash), its cost and its subject. All keys share the decision's
// hash tag.
std::vector<std::vector<std::string>> RefundsOf(const LuaScript& refund_script,
                                                const std::vector<std::string>& decide) {
  std::vector<std::vector<std::string>> refunds;
  size_t keys = 0;
  if (!absl::SimpleAtoi(ToAbsl(decide[2]), &keys)) return refunds;
  size_t key = 3;             // the part's first counter hash
  size_t arg = 3 + keys + 2;  // the part's cost (after deadline_us and the event values)
  while (arg + 3 < decide.size()) {
    size_t n = 0;
    if (!absl::SimpleAtoi(ToAbsl(decide[arg + 1]), &n)) break;
    // Only counters: a sliding or gcra limit's charge (kinds 5 to 8) is not taken back (a late
    // admission stays charged to it).
    std::vector<std::string> counters;
    for (size_t i = 0; i < n && arg + 6 + 4 * i < decide.size(); ++i) {
      const std::string& kind = decide[arg + 6 + 4 * i];
      if (kind == "0" || kind == "1" || kind == "2") counters.push_back(decide[key + i]);
    }
    if (decide[arg] != "0" && !counters.empty()) {
      std::vector<std::string>& refund =
          refunds.emplace_back(refund_script.Command(counters.size(), counters.size() + 2));
      for (std::string& k : counters) refund.push_back(std::move(k));
      refund.push_back(decide[arg]);      // cost
      refund.push_back(decide[arg + 2]);  // subject
    }
    key += n + 1;  // and the hold hash
    arg += 5 + 4 * n;
  }
  return refunds;
}

}  // namespace

std::string_view RedisCommandKindName(RedisCommandKind kind) {
  switch (kind) {
    case RedisCommandKind::kDecide:
      return "decide";
    case RedisCommandKind::kRefund:
      return "refund";
    case RedisCommandKind::kUsage:
      return "usage";
    case RedisCommandKind::kReset:
      return "reset";
    case RedisCommandKind::kReservation:
      return "reservation";
  }
  return "decide";
}

absl::Time RedisStore::StartTimer() const {
  // Round trips are intervals, never instants of a window: the host's clock is right here.
  return options_.observe_round_trip ? absl::Now() : absl::InfinitePast();
}

void RedisStore::Observed(RedisCommandKind kind, absl::Time start) const {
  if (options_.observe_round_trip && start != absl::InfinitePast()) {
    options_.observe_round_trip(kind, absl::Now() - start);
  }
}

RedisStore::RedisStore(std::function<CommandSender*()> connection_for_thread,
                       RedisStoreOptions options)
    : connection_for_thread_(std::move(connection_for_thread)),
      options_(std::move(options)),
      decide_(kDecideScript, &CheckServerVersion),
      // EVAL, not EVALSHA: refunds and resets are rare, and their text needs no NOSCRIPT round.
      refund_(kRefundScript, LuaScript::Send::kEval),
      reset_(kResetScript, LuaScript::Send::kEval),
      reservation_(kReservationScript) {}

int RedisStore::BucketOf(std::string_view subject) const {
  return static_cast<int>(StableHash64(subject) % static_cast<uint64_t>(options_.buckets));
}

std::string RedisStore::Tag(std::string_view subject) const {
  return absl::StrCat(options_.key_prefix, ":{", BucketOf(subject), "}");
}

std::string RedisStore::OutboxKey(int bucket) const {
  return absl::StrCat(options_.key_prefix, ":{", bucket, "}:outbox");
}

std::string RedisStore::DueKey(int bucket) const {
  return absl::StrCat(options_.key_prefix, ":{", bucket, "}:rsvdue");
}

std::string RedisStore::ReservationKey(std::string_view placement, std::string_view id) const {
  return absl::StrCat(Tag(placement), ":rsv:", ToAbsl(id.substr(0, id.find('.'))));
}

namespace {

// The parts that identify limit i's counter of the request's subject: the limit (its name and
// window — with the zone for a calendar window — not the plan: usage follows the subject) and the
// window id. None of them contains ':'.
std::string LimitWindow(const StoreRequest& req, size_t i) {
  const Limit& limit = req.plan->limits[i];
  // A gcra limit's state is kept by periods of two windows (decide.lua).
  const int64_t id = IsGcra(limit) ? req.windows[i].id / 2 : req.windows[i].id;
  return absl::StrCat(limit.name, ":", WindowKey(limit.window, req.plan->tz), ":", id);
}

// The letter of limit i's state keys: a counter hash "h", a sliding one "s", a gcra one "g".
const char* KeyKind(const Limit& limit) {
  return IsSliding(limit) ? "s" : IsGcra(limit) ? "g" : "h";
}

// decide.lua's kind of limit i: see its header.
const char* LimitKind(const Limit& limit, bool charged) {
  if (limit.window.kind == config::WindowSpec::Kind::kConcurrent) return charged ? "4" : "3";
  if (IsSliding(limit)) return charged ? "6" : "5";
  if (IsGcra(limit)) return charged ? "8" : "7";
  if (charged) return "1";
  return limit.window.kind == config::WindowSpec::Kind::kCredit ? "2" : "0";
}

// A field as decide.lua's algorithm part reads it: missing (nullopt), a canonical integer of at
// most 16 digits, or anything else (-1: unusable; a key of another type included).
std::optional<int64_t> StoredOf(const Reply& r) {
  if (r.is_error()) return -1;
  if (!r.is_string()) return std::nullopt;
  const std::string& t = r.str;
  if (t.empty() || t.size() > 16 || (t.size() > 1 && t[0] == '0') ||
      !std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return -1;
  }
  int64_t v = 0;
  if (!absl::SimpleAtoi(ToAbsl(t), &v)) return -1;
  return v;
}

}  // namespace

// What Usage reads of a sliding or gcra limit: fields[0] this window's (period's), fields[1]
// the next one's, fields[2] (sliding) the previous one's.
struct RedisStore::AlgorithmFields {
  size_t limit = 0;
  bool sliding = false;
  int64_t now_us = 0;
  int64_t period_us = 0;        // gcra: two windows
  int64_t period_start_us = 0;  // gcra: the start of the period of fields[0]
  std::array<std::optional<int64_t>, 3> fields;
};

// The state decide.lua would read from `a` (its algo_read), as StoreResult holds it.
void RedisStore::ReadAlgorithm(const AlgorithmFields& a, LimitUsage& out) {
  const auto valid = [](int64_t v) { return v >= 0 && SlidingValid(v); };
  out.used = 0;
  out.prev = 0;
  if (a.sliding) {
    std::optional<int64_t> v = a.fields[1].has_value() ? a.fields[1] : a.fields[0];
    const bool late = a.fields[1].has_value();
    if (!v.has_value() && a.fields[2].has_value()) {
      // The previous window's count is this one's previous.
      v = valid(*a.fields[2]) ? (*a.fields[2] % config::kSlidingRadix) * config::kSlidingRadix : -1;
    }
    if (!v.has_value()) return;
    if (!valid(*v)) {
      out.used = -1;
      return;
    }
    const int64_t prev = *v / config::kSlidingRadix;
    const int64_t cur = *v % config::kSlidingRadix;
    out.used = late ? prev + cur : cur;
    out.prev = late ? 0 : prev;
    return;
  }
  // Arrival times are kept as microseconds after the start of their hash's period.
  int64_t tat = 0;
  for (int j = 0; j < 2; ++j) {
    if (!a.fields[j].has_value()) continue;
    if (*a.fields[j] < 0) {
      out.used = -1;
      return;
    }
    tat = std::max(tat, a.period_start_us + j * a.period_us + *a.fields[j]);
  }
  const int64_t debt = std::max<int64_t>(tat - a.now_us, 0);
  out.used = debt > a.period_us ? -1 : debt;
}

namespace {

// Which limits of `parts` are sliding, part by part in plan order (empty when none is), for
// DecodeSliding once the parts are gone.
std::vector<bool> SlidingLimits(absl::Span<const StoreRequest> parts) {
  std::vector<bool> sliding;
  bool any = false;
  for (const StoreRequest& part : parts) {
    for (const Limit& limit : part.plan->limits) {
      sliding.push_back(IsSliding(limit));
      any = any || sliding.back();
    }
  }
  if (!any) sliding.clear();
  return sliding;
}

// A sliding limit's value in decide.lua's reply (prev * 10^8 + cur) as StoreResult holds it:
// `used` the current window's count, `prev` the previous one's.
void DecodeSliding(const std::vector<bool>& sliding, StoreGroupResult& result) {
  size_t at = 0;
  for (StoreResult& part : result.parts) {
    const size_t n = part.used.size();
    for (size_t i = 0; i < n; ++i, ++at) {
      if (at >= sliding.size() || !sliding[at]) continue;
      part.prev.resize(n);
      const int64_t v = part.used[i];
      if (v < 0) continue;  // unusable (decide.lua's -1); a late call's prev + cur is no pack
      part.prev[i] = v / config::kSlidingRadix;
      part.used[i] = v % config::kSlidingRadix;
    }
  }
}

// The field of limit i in the subject's hold hash: the limit's name and window without the window
// id (a hold belongs to no window), after "s:" or "g:" for a sliding or gcra limit (its algorithm
// is part of its identity), as decide.lua reads it.
std::string HoldField(const StoreRequest& req, size_t i) {
  const Limit& limit = req.plan->limits[i];
  const std::string_view kind = IsSliding(limit) ? "s:" : IsGcra(limit) ? "g:" : "";
  return absl::StrCat(ToAbsl(kind), limit.name, ":", WindowKey(limit.window, req.plan->tz));
}

// Where a request's keys live: its group's bucket for a group-placed subject, else its own.
std::string_view Placement(const StoreRequest& req) {
  return req.group.empty() ? req.subject : req.group;
}

}  // namespace

// The counters of a slot's subjects share a hash (field: the subject; the subject's alert flags
// are the field "#<subject>"), so the slot goes last. FlagsKey is where flags were before they
// moved into the counter hash (a key per subject, the subject last: it may contain ':', and
// every part before it cannot); still read, never written.
std::string RedisStore::CounterKey(const StoreRequest& req, size_t i) const {
  return absl::StrCat(Tag(Placement(req)), ":", KeyKind(req.plan->limits[i]), ":",
                      LimitWindow(req, i), ":", SlotOf(req.subject));
}

std::string RedisStore::BesideKey(const StoreRequest& req, size_t i, int delta) const {
  const Limit& limit = req.plan->limits[i];
  const int64_t id = (IsGcra(limit) ? req.windows[i].id / 2 : req.windows[i].id) + delta;
  return absl::StrCat(Tag(Placement(req)), ":", KeyKind(limit), ":", limit.name, ":",
                      WindowKey(limit.window, req.plan->tz), ":", id, ":", SlotOf(req.subject));
}

std::string RedisStore::FlagsKey(const StoreRequest& req, size_t i) const {
  return absl::StrCat(Tag(Placement(req)), ":a:", LimitWindow(req, i), ":", ToAbsl(req.subject));
}

std::string RedisStore::HoldKey(const StoreRequest& req) const {
  return absl::StrCat(Tag(Placement(req)), ":hold:", ToAbsl(req.subject));
}

int RedisStore::SlotOf(std::string_view subject) const {
  // Other bits of the hash than BucketOf's, so the subjects of one bucket spread over its slots.
  return static_cast<int>(StableHash64(subject) / static_cast<uint64_t>(options_.buckets) %
                          static_cast<uint64_t>(options_.counter_slots));
}

std::vector<std::string> RedisStore::DecideCommand(absl::Span<const StoreRequest> parts,
                                                   std::string_view placement) const {
  size_t keys = 1;
  size_t args = 2;
  for (const StoreRequest& part : parts) {
    keys += part.plan->limits.size() + 1;
    args += 5 + 4 * part.plan->limits.size();
  }
  std::vector<std::string> argv = decide_.Command(keys, keys + args);
  AppendDecideKeys(parts, placement, argv);
  AppendDecideArgs(parts, DecideArgs{}, argv);
  return argv;
}

void RedisStore::AppendDecideKeys(absl::Span<const StoreRequest> parts, std::string_view placement,
                                  std::vector<std::string>& argv) const {
  for (const StoreRequest& part : parts) {
    // CounterKey's parts, the tag and slot computed once per part.
    const std::string tag = Tag(Placement(part));
    const int slot = SlotOf(part.subject);
    for (size_t i = 0; i < part.plan->limits.size(); ++i) {
      argv.push_back(absl::StrCat(tag, ":", KeyKind(part.plan->limits[i]), ":",
                                  LimitWindow(part, i), ":", slot));
    }
    argv.push_back(absl::StrCat(tag, ":hold:", ToAbsl(part.subject)));
  }
  argv.push_back(OutboxKey(BucketOf(placement)));
}

void RedisStore::AppendDecideArgs(absl::Span<const StoreRequest> parts, const DecideArgs& how,
                                  std::vector<std::string>& argv) const {
  const StoreRequest& first = parts.front();
  const absl::Time redis_now = options_.redis_clock ? options_.redis_clock->Now() : first.now;
  // The caller gives up decision_deadline after the command is queued, i.e. after this instant;
  // the clock may be off by clock_error either way, hence the margin. Microseconds, rounded down:
  // the script runs only while Redis's TIME is before it.
  // The margin never takes more than a quarter of the timeout (store.redis.timeout may be as
  // short as 1 ms): a deadline already past would answer every decision "late". What it leaves
  // uncovered is a command run after the give-up, whose reply is then late and refunded.
  const absl::Duration margin =
      options_.sync_state == nullptr || options_.sync_state->synced()
          ? -std::min(options_.clock_error, options_.decision_deadline / 4)
          : options_.unsynced_allowance;
  argv.push_back(
      options_.decision_deadline == absl::ZeroDuration() || how.charge
          ? std::string("0")
          : absl::StrCat(std::max<int64_t>(
                1, absl::ToUnixMicros(redis_now + options_.decision_deadline + margin))));
  argv.push_back(absl::StrCat(absl::ToUnixMillis(first.now), " ", options_.outbox_max));
  for (const StoreRequest& req : parts) {
    const Plan& plan = *req.plan;
    argv.push_back(absl::StrCat(req.cost));
    argv.push_back(absl::StrCat(plan.limits.size()));
    argv.push_back(std::string(req.subject));
    argv.push_back(plan.name);
    argv.push_back(how.hold);
    for (size_t i = 0; i < plan.limits.size(); ++i) {
      const Limit& limit = plan.limits[i];
      const WindowBounds& w = req.windows[i];
      // A sliding count is read as the previous one for one more window; a gcra state lives in
      // its period (two windows), which ends at the end of this window or the next.
      absl::Time state_end = w.end;
      if (IsSliding(limit)) state_end = w.end + (w.end - w.start);
      if (IsGcra(limit) && w.id % 2 == 0) state_end = w.end + (w.end - w.start);
      const absl::Time expire_at = redis_now + (state_end + options_.grace - req.now);
      // Nothing fires under a quota of 0 (a credit limit with nothing granted), as in the memory
      // store: such a limit is sent without thresholds.
      const bool alerts = !limit.thresholds.empty() && limit.quota > 0;
      argv.push_back(absl::StrCat(limit.quota));
      // A report, and a reservation's charge (how.charge), are charged as decide.lua charges a
      // shadow limit: past the quota (capped at kMaxUsed), never denying, every threshold the
      // charge reaches fired (a credit limit's expiry is pushed forward on that path too). "2" is
      // an enforced credit limit, whose expiry every charge pushes forward; "3" a concurrent
      // limit, "4" a shadow (or charged) one.
      const bool charged = limit.shadow || how.charge || req.mode == DecideMode::kReport;
      argv.push_back(LimitKind(limit, charged));
      // Whether another instance may already have written the next window's (period's) state
      // when this call runs: only if this one may run at or after the instant it begins (the
      // deadline bounds how late it runs; another instance's clock may be ahead by as much as
      // an unsynced one's). A charge has no deadline.
      const auto next_may_exist = [&](absl::Time begins) {
        return how.charge || options_.decision_deadline == absl::ZeroDuration() ||
               req.now + options_.decision_deadline + options_.unsynced_allowance +
                       absl::Seconds(1) >=
                   begins;
      };
      if (IsSliding(limit)) {
        // The previous window's weight now, whether to read the next window, and the first
        // threshold's count.
        std::string& weight = argv.emplace_back(
            absl::StrCat(SlidingWeight(w, req.now), next_may_exist(w.end) ? " 1" : " 0"));
        if (alerts) absl::StrAppend(&weight, " ", limit.thresholds.front().count);
      } else if (IsGcra(limit)) {
        // Times in microseconds of the limiter's clock (as the windows): now, the interval, the
        // burst, the largest debt, the period (two windows) and the end of this one; then
        // whether to read the next period (an arrival time there is at least its start, and no
        // decision puts one more than the largest debt after its now).
        const int64_t window_us = absl::ToInt64Microseconds(w.end - w.start);
        const int64_t period_end_us = (w.id / 2 + 1) * 2 * window_us;
        const absl::Time begins =
            absl::FromUnixMicros(period_end_us) - absl::Microseconds(GcraMaxDebt(limit));
        argv.push_back(absl::StrCat(absl::ToUnixMicros(req.now), " ", limit.emission_us, " ",
                                    limit.burst, " ", GcraMaxDebt(limit), " ", 2 * window_us, " ",
                                    period_end_us, next_may_exist(begins) ? " 1" : " 0"));
      } else {
        argv.push_back(alerts ? absl::StrCat(limit.thresholds.front().count) : std::string());
      }
      std::string& static_part = argv.emplace_back(absl::StrCat(
          absl::ToUnixSeconds(absl::Ceil(expire_at - absl::UnixEpoch(), absl::Seconds(1)) +
                              absl::UnixEpoch()),
          " ", absl::ToUnixSeconds(w.start), " ", absl::ToUnixSeconds(w.end), " ", limit.name));
      for (size_t t = 0; alerts && t < limit.thresholds.size(); ++t) {
        absl::StrAppend(&static_part, " ", limit.thresholds[t].percent, " ",
                        limit.thresholds[t].count);
      }
    }
  }
}

void RedisStore::OnLateDecision(CommandSender* conn, const Reply& reply, size_t n,
                                const std::vector<std::string>& decide) {
  // A denial, a peek, a "late" {-1} or an error changed no counter: nothing to take back.
  if (!reply.is_array() || (reply.elements.size() != n + 3 && reply.elements.size() != 2 * n + 3) ||
      reply.elements[0].integer != 1) {
    return;
  }
  late_admissions_.fetch_add(1, std::memory_order_relaxed);
  std::vector<std::vector<std::string>> refunds = RefundsOf(refund_, decide);
  if (refunds.empty()) return;
  // The late replies of a stall typically arrive while the breaker is still open; the refund
  // must go out anyway. Counted when its reply arrives, in time or late (a group's refunds, one
  // per part that paid, count as one).
  const absl::Time start = StartTimer();
  auto pending = std::make_shared<size_t>(refunds.size());
  auto refunded = std::make_shared<bool>(true);
  auto count = [this, start, pending, refunded](bool ok) {
    *refunded = *refunded && ok;
    if (--*pending > 0) return;
    Observed(RedisCommandKind::kRefund, start);
    if (*refunded) refunds_.fetch_add(1, std::memory_order_relaxed);
    shrinks_.fetch_add(1, std::memory_order_release);
  };
  for (std::vector<std::string>& refund : refunds) {
    refund_.Run(
        conn, std::make_shared<const std::vector<std::string>>(std::move(refund)),
        [count](absl::StatusOr<Reply> r) { count(r.ok() && r->is_integer()); },
        [count](Reply r) { count(r.is_integer()); }, {.despite_breaker = true});
  }
}

void RedisStore::Decide(const StoreRequest& req, DecideCallback done) {
  DecideParts(absl::MakeConstSpan(&req, 1), Placement(req),
              [done = std::move(done)](absl::StatusOr<StoreGroupResult> result) mutable {
                if (!result.ok()) {
                  std::move(done)(result.status());
                  return;
                }
                std::move(done)(std::move(result->parts.front()));
              });
}

void RedisStore::DecideGroup(const StoreGroupRequest& req, GroupDecideCallback done) {
  if (req.parts.empty() || req.parts.size() > kMaxGroupParts) {
    std::move(done)(absl::InvalidArgumentError("redis: a group has 1 to 64 parts"));
    return;
  }
  DecideParts(req.parts, req.group.empty() ? req.parts.front().subject : req.group,
              std::move(done));
}

void RedisStore::DecideParts(absl::Span<const StoreRequest> parts, std::string_view placement,
                             GroupDecideCallback done) {
  absl::InlinedVector<size_t, 4> sizes;
  size_t n = 0;
  for (const StoreRequest& part : parts) {
    sizes.push_back(part.plan->limits.size());
    n += part.plan->limits.size();
  }
  CommandSender* conn = connection_for_thread_();
  auto command = std::make_shared<const std::vector<std::string>>(DecideCommand(parts, placement));
  CommandSender::LateCallback late = nullptr;
  if (std::any_of(parts.begin(), parts.end(), [](const StoreRequest& p) { return p.cost > 0; })) {
    late = [this, conn, n, command](Reply reply) { OnLateDecision(conn, reply, n, *command); };
  }
  const absl::Time start = StartTimer();
  decide_.Run(
      conn, std::move(command),
      [this, n, sizes = std::move(sizes), start, sliding = SlidingLimits(parts),
       done = std::move(done)](absl::StatusOr<Reply> reply) mutable {
        if (!reply.ok()) {
          std::move(done)(ConnectionFailure(reply.status()));
          return;
        }
        Observed(RedisCommandKind::kDecide, start);
        if (reply->is_error()) {
          std::move(done)(ErrorReply(*reply));
          return;
        }
        if (reply->is_array() && reply->elements.size() == 1 && reply->elements[0].integer == -1) {
          std::move(done)(
              WithStoreFailure(absl::DeadlineExceededError("redis: decision arrived too late"),
                               StoreFailure::kLate));
          return;
        }
        if (!reply->is_array()) {
          std::move(done)(absl::InternalError("redis: unexpected reply to decide.lua"));
          return;
        }
        absl::StatusOr<StoreGroupResult> result = ParseDecideReply(*reply, 0, sizes);
        if (!result.ok()) {
          std::move(done)(result.status());
          return;
        }
        DecodeSliding(sliding, *result);
        CountEvents(*reply, 0, n);
        std::move(done)(std::move(result));
      },
      std::move(late));
}

namespace {

// The fired thresholds of one limit, gathered from the flags' two places (RedisStore::Usage).
struct FlagReader {
  int64_t quota;
  std::vector<int> percents;
  int pending = 2;
  std::vector<int> fired;  // sorted, without repeats

  // A flag "<percent>:<quota>" counts if it names one of the limit's percents under its quota.
  void Add(std::string_view flag) {
    const size_t colon = flag.find(':');
    int percent = 0;
    int64_t fired_quota = 0;
    if (colon == std::string_view::npos ||
        !absl::SimpleAtoi(ToAbsl(flag.substr(0, colon)), &percent) ||
        !absl::SimpleAtoi(ToAbsl(flag.substr(colon + 1)), &fired_quota)) {
      return;  // not a flag of ours
    }
    if (fired_quota != quota ||
        std::find(percents.begin(), percents.end(), percent) == percents.end()) {
      return;
    }
    const auto at = std::lower_bound(fired.begin(), fired.end(), percent);
    if (at == fired.end() || *at != percent) fired.insert(at, percent);
  }
};

}  // namespace

void RedisStore::Usage(const StoreRequest& req, UsageCallback done) {
  const size_t n = req.plan->limits.size();
  struct State {
    size_t pending;
    absl::Status status;
    std::vector<LimitUsage> usage;
    UsageCallback done;
    // Per sliding or gcra limit: the fields of the keys decide.lua reads, read as it reads them.
    std::vector<AlgorithmFields> algorithms;
  };
  auto state = std::make_shared<State>(
      State{.pending = 3 * n + 1, .usage = std::vector<LimitUsage>(n), .done = std::move(done)});
  for (size_t i = 0; i < n; ++i) {
    const Limit& limit = req.plan->limits[i];
    if (limit.algorithm == config::Algorithm::kFixed) continue;
    const WindowBounds& w = req.windows[i];
    const int64_t window_us = absl::ToInt64Microseconds(w.end - w.start);
    state->algorithms.push_back({.limit = i,
                                 .sliding = IsSliding(limit),
                                 .now_us = absl::ToUnixMicros(req.now),
                                 .period_us = 2 * window_us,
                                 .period_start_us = w.id / 2 * 2 * window_us});
    state->pending += IsSliding(limit) ? 2 : 1;
  }
  auto finish = [state](absl::Status s) {
    if (!s.ok() && state->status.ok()) state->status = s;
    if (--state->pending > 0) return;
    if (state->status.ok()) {
      for (const AlgorithmFields& a : state->algorithms) {
        ReadAlgorithm(a, state->usage[a.limit]);
      }
      std::move(state->done)(std::move(state->usage));
    } else {
      std::move(state->done)(state->status);
    }
  };
  CommandSender* conn = connection_for_thread_();
  // Per limit, one HGET of the counter, one of the flags and an HKEYS of the earlier flag hash,
  // and one HMGET of what open reservations hold, pipelined (all keys share one hash tag).
  const absl::Time start = StartTimer();
  std::vector<std::string> holds{"HMGET", HoldKey(req)};
  for (size_t i = 0; i < n; ++i) holds.push_back(HoldField(req, i));
  conn->Send(std::move(holds), [state, finish](absl::StatusOr<Reply> r) mutable {
    if (!r.ok()) return finish(ConnectionFailure(r.status()));
    // decide.lua's rule: a hash of another type, or a value that is no count, holds nothing.
    if (r->is_array()) {
      for (size_t i = 0; i < r->elements.size() && i < state->usage.size(); ++i) {
        if (r->elements[i].is_string()) {
          state->usage[i].held = std::max<int64_t>(ParseCounter(r->elements[i].str), 0);
        }
      }
    }
    finish(absl::OkStatus());
  });
  for (size_t i = 0; i < n; ++i) {
    conn->Send({"HGET", CounterKey(req, i), std::string(req.subject)},
               [this, start, state, finish, i, first = i == 0](absl::StatusOr<Reply> r) mutable {
                 if (!r.ok()) return finish(ConnectionFailure(r.status()));
                 if (first) Observed(RedisCommandKind::kUsage, start);
                 if (r->is_error()) {
                   // A counter key of another type holds no counter: unusable, as decide.lua
                   // reads it.
                   if (r->str.starts_with("WRONGTYPE")) {
                     state->usage[i].used = -1;
                     for (AlgorithmFields& a : state->algorithms) {
                       if (a.limit == i) a.fields[0] = -1;
                     }
                     return finish(absl::OkStatus());
                   }
                   return finish(ErrorReply(*r));
                 }
                 // decide.lua's rule: anything but a counter it could have written is unusable.
                 if (r->is_string()) state->usage[i].used = ParseCounter(r->str);
                 for (AlgorithmFields& a : state->algorithms) {
                   if (a.limit == i) a.fields[0] = StoredOf(*r);
                 }
                 finish(absl::OkStatus());
               });
  }
  // A sliding limit's next and previous windows, a gcra limit's next period.
  for (size_t k = 0; k < state->algorithms.size(); ++k) {
    const size_t i = state->algorithms[k].limit;
    const int deltas[] = {1, -1};
    for (int j = 0; j < (state->algorithms[k].sliding ? 2 : 1); ++j) {
      conn->Send({"HGET", BesideKey(req, i, deltas[j]), std::string(req.subject)},
                 [state, finish, k, j](absl::StatusOr<Reply> r) mutable {
                   if (!r.ok()) return finish(ConnectionFailure(r.status()));
                   if (r->is_error() && !r->str.starts_with("WRONGTYPE")) {
                     return finish(ErrorReply(*r));
                   }
                   state->algorithms[k].fields[1 + j] = StoredOf(*r);
                   finish(absl::OkStatus());
                 });
    }
  }
  for (size_t i = 0; i < n; ++i) {
    // Only the plan's current percentages under the limit's current quota: a flag of a percentage
    // a reload removed, or of another quota (another plan, other overrides), stays until the
    // window ends, but is no fired threshold of this limit as it stands. Copied: the plan is read
    // only during the call. Both places flags are read, as decide.lua reads them: the counter
    // hash's "#<subject>" field (words "<percent>:<quota>") and the earlier flag hash (fields).
    std::vector<int> percents;
    for (const Threshold& th : req.plan->limits[i].thresholds) percents.push_back(th.percent);
    auto flags = std::make_shared<FlagReader>(
        FlagReader{.quota = req.plan->limits[i].quota, .percents = std::move(percents)});
    auto read = [state, finish, i, flags](absl::StatusOr<Reply> r, bool words) {
      if (!r.ok()) return finish(ConnectionFailure(r.status()));
      if (r->is_error() && !r->str.starts_with("WRONGTYPE")) return finish(ErrorReply(*r));
      // A counter key of another type holds no flags (nothing fires on an unusable counter); an
      // earlier flag hash of another type, read as fired, names no threshold of ours to report.
      if (words && r->is_string()) {
        for (absl::string_view w : absl::StrSplit(ToAbsl(r->str), ' ', absl::SkipEmpty()))
          flags->Add(ToStd(w));
      } else if (!words && r->is_array()) {
        for (const Reply& e : r->elements) flags->Add(e.str);
      }
      if (--flags->pending == 0) state->usage[i].fired = std::move(flags->fired);
      finish(absl::OkStatus());
    };
    conn->Send({"HGET", CounterKey(req, i), absl::StrCat("#", ToAbsl(req.subject))},
               [read](absl::StatusOr<Reply> r) mutable { read(std::move(r), true); });
    conn->Send({"HKEYS", FlagsKey(req, i)},
               [read](absl::StatusOr<Reply> r) mutable { read(std::move(r), false); });
  }
}

void RedisStore::Reset(const StoreRequest& req, std::optional<size_t> limit_index,
                       StatusCallback done) {
  // The subject's counter and flags fields of each counter hash, and its earlier flag hashes, in
  // one atomic call.
  const auto reset_limit = [&](size_t i) { return !limit_index.has_value() || *limit_index == i; };
  // A sliding limit's state may also be in the next or previous window's hash, a gcra one's in
  // the next period's: their pairs too (with the flag hash again, which does not exist for them).
  const auto besides = [&](size_t i) -> std::vector<int> {
    const Limit& limit = req.plan->limits[i];
    if (IsSliding(limit)) return {1, -1};
    if (IsGcra(limit)) return {1};
    return {};
  };
  size_t keys = 0;
  for (size_t i = 0; i < req.plan->limits.size(); ++i) {
    if (reset_limit(i)) keys += 2 + 2 * besides(i).size();
  }
  std::vector<std::string> reset = reset_.Command(keys, keys + 1);
  for (size_t i = 0; i < req.plan->limits.size(); ++i) {
    if (!reset_limit(i)) continue;
    reset.push_back(CounterKey(req, i));
    reset.push_back(FlagsKey(req, i));
    for (int delta : besides(i)) {
      reset.push_back(BesideKey(req, i, delta));
      reset.push_back(FlagsKey(req, i));
    }
  }
  reset.push_back(std::string(req.subject));
  const absl::Time start = StartTimer();
  reset_.Run(connection_for_thread_(),
             std::make_shared<const std::vector<std::string>>(std::move(reset)),
             [this, start, done = std::move(done)](absl::StatusOr<Reply> r) mutable {
               if (!r.ok()) {
                 return std::move(done)(ConnectionFailure(r.status()));
               }
               Observed(RedisCommandKind::kReset, start);
               if (r->is_error()) return std::move(done)(ErrorReply(*r));
               std::move(done)(absl::OkStatus());
             });
}

void RedisStore::CountEvents(const Reply& reply, size_t at, size_t n) {
  if (reply.elements.size() < at + n + 3) return;
  if (const int64_t fired = reply.elements[at + n + 1].integer; fired > 0) {
    recorded_.fetch_add(static_cast<uint64_t>(fired), std::memory_order_relaxed);
  }
  if (const int64_t refused = reply.elements[at + n + 2].integer; refused > 0) {
    refused_.fetch_add(static_cast<uint64_t>(refused), std::memory_order_relaxed);
  }
}

int64_t RedisStore::RedisSeconds(absl::Time at, absl::Time now) const {
  const absl::Time redis_now = options_.redis_clock ? options_.redis_clock->Now() : now;
  return absl::ToUnixSeconds(
      absl::UnixEpoch() + absl::Ceil(redis_now + (at - now) - absl::UnixEpoch(), absl::Seconds(1)));
}

void RedisStore::RunReservation(std::vector<std::string> argv,
                                absl::AnyInvocable<void(absl::StatusOr<Reply>) &&> done,
                                CommandSender::LateCallback late) {
  const absl::Time start = StartTimer();
  reservation_.Run(
      connection_for_thread_(), std::make_shared<const std::vector<std::string>>(std::move(argv)),
      [this, start, done = std::move(done)](absl::StatusOr<Reply> r) mutable {
        if (!r.ok()) return std::move(done)(ConnectionFailure(r.status()));
        Observed(RedisCommandKind::kReservation, start);
        if (r->is_error()) return std::move(done)(ErrorReply(*r));
        if (!r->is_array() || r->elements.empty()) {
          return std::move(done)(absl::InternalError("redis: unexpected reply to reservation.lua"));
        }
        std::move(done)(*std::move(r));
      },
      std::move(late));
}

namespace {

// reservation.lua's own arguments (ARGV 1..8) before decide.lua's.
struct ReservationArgs {
  std::string_view op;
  std::string_view id;
  std::string_view subject;
  int64_t at_ms = 0;
  std::string keep_at;
  std::string hold_at;
  std::string estimate;
  std::string charge;
};

void AppendReservationArgs(const ReservationArgs& a, std::vector<std::string>& argv) {
  argv.emplace_back(a.op);
  argv.emplace_back(a.id);
  argv.emplace_back(a.subject);
  argv.push_back(absl::StrCat(a.at_ms));
  argv.push_back(a.keep_at);
  argv.push_back(a.hold_at);
  argv.push_back(a.estimate);
  argv.push_back(a.charge);
}

}  // namespace

void RedisStore::Reserve(const StoreReserveRequest& req, DecideCallback done) {
  const StoreRequest& d = req.decide;
  const auto parts = absl::MakeConstSpan(&d, 1);
  const size_t n = d.plan->limits.size();
  std::vector<std::string> argv = reservation_.Command(3 + n + 2, 3 + n + 2 + 8 + 7 + 4 * n);
  argv.push_back(ReservationKey(Placement(d), req.id));
  argv.push_back(DueKey(BucketOf(Placement(d))));
  argv.push_back(HoldKey(d));
  AppendDecideKeys(parts, Placement(d), argv);
  AppendReservationArgs(
      {.op = "reserve",
       .id = req.id,
       .subject = d.subject,
       .at_ms = absl::ToUnixMillis(req.expires_at),
       .keep_at = absl::StrCat(RedisSeconds(req.expires_at + kReservationMemory, d.now)),
       .hold_at = absl::StrCat(RedisSeconds(req.expires_at + options_.grace, d.now)),
       .estimate = absl::StrCat(req.hold),
       .charge = req.charge_on_expiry ? "1" : "0"},
      argv);
  AppendDecideArgs(parts, {.hold = absl::StrCat(req.hold)}, argv);
  // A reservation that Redis made after the caller stopped waiting (answered degraded, with no
  // id) is released, and a cost it charged at once refunded, as a late admission is: its id is
  // known to no one, so it would otherwise hold until it expired (and be charged then).
  CommandSender::LateCallback late = nullptr;
  if (options_.decision_deadline != absl::ZeroDuration()) {
    std::vector<std::string> undo = EndCommand(d, req.id, ReservationEnd::kRelease);
    std::vector<std::string> refund;
    // Only counters (RefundsOf's rule): a sliding or gcra charge stays.
    std::vector<std::string> counters;
    for (size_t i = 0; i < n; ++i) {
      if (d.plan->limits[i].algorithm == config::Algorithm::kFixed) {
        counters.push_back(CounterKey(d, i));
      }
    }
    if (d.cost > 0 && !counters.empty()) {
      refund = refund_.Command(counters.size(), counters.size() + 2);
      for (std::string& key : counters) refund.push_back(std::move(key));
      refund.push_back(absl::StrCat(d.cost));
      refund.push_back(std::string(d.subject));
    }
    late = [this, conn = connection_for_thread_(), n, undo = std::move(undo),
            refund = std::move(refund)](Reply reply) mutable {
      if (!reply.is_array() || reply.elements.size() != 2 * n + 3 ||
          reply.elements[0].integer != 1) {
        return;  // denied, too late to run, or failed: nothing was made
      }
      late_admissions_.fetch_add(1, std::memory_order_relaxed);
      reservation_.Run(conn, std::make_shared<const std::vector<std::string>>(std::move(undo)),
                       [](absl::StatusOr<Reply>) {}, nullptr, {.despite_breaker = true});
      if (refund.empty()) return;
      refund_.Run(conn, std::make_shared<const std::vector<std::string>>(std::move(refund)),
                  [this](absl::StatusOr<Reply> r) {
                    if (r.ok() && r->is_integer()) refunds_.fetch_add(1, std::memory_order_relaxed);
                    shrinks_.fetch_add(1, std::memory_order_release);
                  },
                  nullptr, {.despite_breaker = true});
    };
  }
  RunReservation(
      std::move(argv),
      [this, n, sliding = SlidingLimits(parts),
       done = std::move(done)](absl::StatusOr<Reply> r) mutable {
        if (!r.ok()) {
          if (absl::StrContains(r.status().message(), "redis: EXISTS")) {
            return std::move(done)(
                absl::AlreadyExistsError("store: reservation id already in use"));
          }
          return std::move(done)(r.status());
        }
        if (r->elements.size() == 1 && r->elements[0].integer == -1) {
          return std::move(done)(
              WithStoreFailure(absl::DeadlineExceededError("redis: reservation arrived too late"),
                               StoreFailure::kLate));
        }
        const size_t sizes[] = {n};
        absl::StatusOr<StoreGroupResult> result = ParseDecideReply(*r, 0, sizes);
        if (!result.ok()) return std::move(done)(result.status());
        DecodeSliding(sliding, *result);
        CountEvents(*r, 0, n);
        std::move(done)(std::move(result->parts.front()));
      },
      std::move(late));
}

std::vector<std::string> RedisStore::EndCommand(const StoreRequest& d, std::string_view id,
                                                ReservationEnd end) const {
  const auto parts = absl::MakeConstSpan(&d, 1);
  const size_t n = d.plan->limits.size();
  std::vector<std::string> argv = reservation_.Command(3 + n + 2, 3 + n + 2 + 8 + 7 + 4 * n);
  argv.push_back(ReservationKey(Placement(d), id));
  argv.push_back(DueKey(BucketOf(Placement(d))));
  argv.push_back(HoldKey(d));
  AppendDecideKeys(parts, Placement(d), argv);
  std::string_view op = "settle";
  if (end == ReservationEnd::kRelease) op = "release";
  if (end == ReservationEnd::kExpire) op = "expire";
  AppendReservationArgs(
      {.op = op, .id = id, .subject = d.subject, .at_ms = absl::ToUnixMillis(d.now)}, argv);
  AppendDecideArgs(parts, {.charge = true}, argv);
  return argv;
}

void RedisStore::Settle(const StoreSettleRequest& req, SettleCallback done) {
  using Outcome = StoreSettleResult::Outcome;
  const StoreRequest& d = req.decide;
  const size_t n = d.plan->limits.size();
  std::vector<std::string> argv = EndCommand(d, req.id, req.end);
  absl::InlinedVector<int64_t, 4> quotas;
  absl::InlinedVector<bool, 4> counting;
  // A sliding or gcra limit's overshoot is in units (Overshoot); the windows and now for them.
  absl::InlinedVector<AlgorithmTerms, 4> terms;
  absl::InlinedVector<WindowBounds, 4> windows(d.windows.begin(), d.windows.end());
  for (const Limit& limit : d.plan->limits) {
    quotas.push_back(limit.quota);
    counting.push_back(limit.window.kind != config::WindowSpec::Kind::kConcurrent);
    terms.emplace_back(limit);
  }
  RunReservation(std::move(argv), [this, n, quotas = std::move(quotas),
                                   counting = std::move(counting), terms = std::move(terms),
                                   windows = std::move(windows), now = d.now,
                                   sliding = SlidingLimits(absl::MakeConstSpan(&d, 1)),
                                   done = std::move(done)](absl::StatusOr<Reply> r) mutable {
    if (!r.ok()) return std::move(done)(r.status());
    StoreSettleResult out;
    const int64_t outcome = r->elements[0].integer;
    if (outcome == 3 && r->elements.size() == 1) {
      out.outcome = Outcome::kNotFound;
      return std::move(done)(std::move(out));
    }
    if (outcome < 0 || outcome > 4 || outcome == 3 || r->elements.size() != 3 * n + 6) {
      return std::move(done)(absl::InternalError("redis: unexpected reply to reservation.lua"));
    }
    static constexpr Outcome kOutcomes[] = {Outcome::kEnded, Outcome::kRepeated, Outcome::kConflict,
                                            Outcome::kNotFound, Outcome::kNotDue};
    static constexpr ReservationEnd kEnds[] = {ReservationEnd::kSettle, ReservationEnd::kRelease,
                                               ReservationEnd::kExpire};
    out.outcome = kOutcomes[outcome];
    const int64_t ended_by = r->elements[1].integer;
    out.ended_by = ended_by >= 0 && ended_by <= 2 ? kEnds[ended_by] : ReservationEnd::kSettle;
    out.charged = r->elements[2].integer;
    const size_t sizes[] = {n};
    // decide.lua's reply with the holds after it, as reservation.lua answers it.
    Reply decided;
    decided.elements.assign(r->elements.begin() + 3, r->elements.begin() + 3 + 2 * n + 3);
    absl::StatusOr<StoreGroupResult> result = ParseDecideReply(decided, 0, sizes);
    if (!result.ok()) return std::move(done)(result.status());
    DecodeSliding(sliding, *result);
    CountEvents(decided, 0, n);
    out.result = std::move(result->parts.front());
    out.result.allowed = true;
    if (out.outcome == Outcome::kEnded && out.charged > 0) {
      out.overshoot.resize(n);
      for (size_t i = 0; i < n; ++i) {
        const int64_t after = out.result.used[i];
        if (terms[i].algorithm != config::Algorithm::kFixed) {
          if (UsableCounter(after)) {
            out.overshoot[i] = AlgorithmOvershoot(terms[i], windows[i], now, after,
                                                  out.result.prev_at(i), out.charged);
          }
          continue;
        }
        const int64_t before = r->elements[3 + 2 * n + 3 + i].integer;
        if (counting[i] && UsableCounter(before) && UsableCounter(after) && after > quotas[i]) {
          out.overshoot[i] = after - std::max(quotas[i], before);
        }
      }
    }
    std::move(done)(std::move(out));
  });
}

void RedisStore::Extend(std::string_view subject, std::string_view id, absl::Time expires_at,
                        absl::Time now, ExtendCallback done) {
  std::vector<std::string> argv = reservation_.Command(3, 3 + 8);
  argv.push_back(ReservationKey(subject, id));
  argv.push_back(DueKey(BucketOf(subject)));
  argv.push_back(absl::StrCat(Tag(subject), ":hold:", ToAbsl(subject)));
  AppendReservationArgs(
      {.op = "extend",
       .id = id,
       .subject = subject,
       .at_ms = absl::ToUnixMillis(expires_at),
       .keep_at = absl::StrCat(RedisSeconds(expires_at + kReservationMemory, now)),
       .hold_at = absl::StrCat(RedisSeconds(expires_at + options_.grace, now))},
      argv);
  RunReservation(std::move(argv),
                 [expires_at, done = std::move(done)](absl::StatusOr<Reply> r) mutable {
                   if (!r.ok()) return std::move(done)(r.status());
                   StoreExtendResult out;
                   switch (r->elements[0].integer) {
                     case 0:
                       out.outcome = StoreExtendResult::Outcome::kExtended;
                       out.expires_at = expires_at;
                       break;
                     case 2:
                       out.outcome = StoreExtendResult::Outcome::kEnded;
                       break;
                     default:
                       out.outcome = StoreExtendResult::Outcome::kNotFound;
                       break;
                   }
                   std::move(done)(out);
                 });
}

void RedisStore::DueReservations(absl::Time now, size_t max, DueCallback done) {
  struct State {
    int pending = 0;
    size_t max = 0;
    absl::Status failure;
    std::vector<DueReservation> due;
    DueCallback done;
  };
  auto state = std::make_shared<State>();
  state->pending = options_.buckets;
  state->max = max;
  state->done = std::move(done);
  CommandSender* conn = connection_for_thread_();
  const absl::Time start = StartTimer();
  const std::string until = absl::StrCat(absl::ToUnixMillis(now));
  const std::string limit = absl::StrCat(max);
  for (int b = 0; b < options_.buckets; ++b) {
    conn->Send({"ZRANGEBYSCORE", DueKey(b), "-inf", until, "LIMIT", "0", limit},
               [this, start, state, first = b == 0](absl::StatusOr<Reply> r) {
                 if (!r.ok()) {
                   if (state->failure.ok()) state->failure = ConnectionFailure(r.status());
                 } else if (r->is_error()) {
                   if (state->failure.ok()) state->failure = ErrorReply(*r);
                 } else {
                   if (first) Observed(RedisCommandKind::kReservation, start);
                   for (const Reply& member : r->elements) {
                     if (state->due.size() >= state->max) break;
                     // An id that does not name its subject and plan was not written by us.
                     std::optional<ReservationRef> ref = ParseReservationId(member.str);
                     if (!ref.has_value()) continue;
                     state->due.push_back({.id = member.str,
                                           .subject = std::move(ref->subject),
                                           .plan = std::move(ref->plan)});
                   }
                 }
                 if (--state->pending > 0) return;
                 // What was found is ended even if some bucket could not be read.
                 if (state->due.empty() && !state->failure.ok()) {
                   return std::move(state->done)(state->failure);
                 }
                 std::move(state->done)(std::move(state->due));
               });
  }
}

}  // namespace sluice::redis
