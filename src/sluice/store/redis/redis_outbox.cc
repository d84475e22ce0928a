#include "sluice/store/redis/redis_outbox.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "sluice/common/log.h"
#include "sluice/common/strings.h"
#include "sluice/store/redis/outbox_renew_script.h"

namespace sluice::redis {
namespace {

constexpr std::string_view kEventType = "quota.threshold_reached";

// Flat field list [f1, v1, f2, v2, …] of a stream entry -> AlertEvent (fields: decide.lua header).
std::optional<AlertEvent> ParseEvent(const Reply& fields) {
  if (!fields.is_array()) return std::nullopt;
  std::map<std::string_view, std::string_view> f;
  for (size_t i = 0; i + 1 < fields.elements.size(); i += 2) {
    f[fields.elements[i].str] = fields.elements[i + 1].str;
  }
  auto text = [&](std::string_view name) -> std::optional<std::string_view> {
    auto it = f.find(name);
    if (it == f.end()) return std::nullopt;
    return it->second;
  };
  auto number = [&](std::string_view name) -> std::optional<int64_t> {
    std::optional<std::string_view> t = text(name);
    int64_t v = 0;
    if (!t || !absl::SimpleAtoi(ToAbsl(*t), &v)) return std::nullopt;
    return v;
  };
  const std::optional<std::string_view> type = text("type"), subject = text("subject"),
                                        plan = text("plan"), limit = text("limit");
  const std::optional<int64_t> threshold = number("threshold"), used = number("used"),
                               quota = number("quota"), start = number("window_start"),
                               end = number("window_end"), occurred = number("occurred_at_ms");
  if (!type || *type != kEventType || !subject || subject->empty() || !plan || !limit ||
      !threshold || *threshold < 1 || *threshold > 100 || !used || !quota || !start || !end ||
      !occurred) {
    return std::nullopt;
  }
  return AlertEvent{.subject = std::string(*subject),
                    .plan = std::string(*plan),
                    .limit = std::string(*limit),
                    .threshold = static_cast<int>(*threshold),
                    .used = *used,
                    .quota = *quota,
                    .window_start = absl::FromUnixSeconds(*start),
                    .window_end = absl::FromUnixSeconds(*end),
                    .occurred_at = absl::FromUnixMillis(*occurred)};
}

std::string Millis(absl::Duration d) {
  return absl::StrCat(std::max<int64_t>(0, absl::ToInt64Milliseconds(d)));
}

}  // namespace

std::string OutboxStreamKey(std::string_view prefix, int bucket) {
  return absl::StrCat(ToAbsl(prefix), ":{", bucket, "}:outbox");
}

std::string DefaultConsumerName() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  absl::BitGen gen;
  return absl::StrCat(host[0] ? host : "sluice", "-", getpid(), "-",
                      absl::Hex(absl::Uniform<uint32_t>(gen), absl::kZeroPad8));
}

// EVAL, not EVALSHA: a renewal is rare (every lease/3), and its text needs no NOSCRIPT round.
RedisOutbox::RedisOutbox(RedisOutboxOptions options)
    : options_(std::move(options)), renew_(kOutboxRenewScript, LuaScript::Send::kEval) {
  if (options_.consumer.empty()) options_.consumer = DefaultConsumerName();
  options_.buckets = std::max(1, options_.buckets);
  for (int b = 0; b < options_.buckets; ++b) {
    streams_.push_back(OutboxStreamKey(options_.key_prefix, b));
    bucket_of_[streams_.back()] = b;
  }
  history_.assign(streams_.size(), std::string("0"));
  claim_cursor_.assign(streams_.size(), "0-0");
  group_ready_.assign(streams_.size(), false);
  if (options_.cluster_seeds.empty()) {
    connection_ = std::make_unique<Connection>(io_, options_.connection);
  } else {
    connection_ = std::make_unique<ClusterClient>(
        io_, ClusterOptions{.connection = options_.connection, .seeds = options_.cluster_seeds});
  }
  connection_->Start();
}

RedisOutbox::~RedisOutbox() {
  connection_->Stop();
  connection_.reset();
  io_.restart();
  io_.poll();  // callbacks posted by Stop() own their state; let them run here
}

std::vector<absl::StatusOr<Reply>> RedisOutbox::Run(std::vector<Argv> commands,
                                                    const LuaScript* script) {
  using SteadyClock = std::chrono::steady_clock;
  const auto timeout = options_.connection.command_timeout;
  const auto connect_deadline = SteadyClock::now() + timeout;
  while (!ever_connected_ && !connection_->connected() && SteadyClock::now() < connect_deadline) {
    io_.restart();
    io_.run_one_for(std::chrono::milliseconds(10));
  }
  if (connection_->connected()) ever_connected_ = true;

  // Shared with the callbacks: each runs exactly once, but possibly after a hard deadline here.
  struct Pending {
    std::vector<std::optional<absl::StatusOr<Reply>>> replies;
    size_t done = 0;
  };
  auto pending = std::make_shared<Pending>();
  pending->replies.resize(commands.size());
  for (size_t i = 0; i < commands.size(); ++i) {
    auto on_reply = [pending, i](absl::StatusOr<Reply> reply) {
      pending->replies[i] = std::move(reply);
      ++pending->done;
    };
    if (script != nullptr) {
      script->Run(connection_.get(), std::make_shared<const Argv>(std::move(commands[i])),
                  std::move(on_reply));
    } else {
      connection_->Send(std::move(commands[i]), std::move(on_reply));
    }
  }
  // The connection answers every command within its timeout; this bound is only a safety net.
  const auto hard_deadline = SteadyClock::now() + 2 * timeout + std::chrono::seconds(1);
  while (pending->done < pending->replies.size() && SteadyClock::now() < hard_deadline) {
    io_.restart();
    io_.run_one_for(timeout);
  }
  std::vector<absl::StatusOr<Reply>> out;
  for (auto& r : pending->replies) {
    out.push_back(r ? std::move(*r) : absl::DeadlineExceededError("redis outbox: no reply"));
  }
  return out;
}

absl::StatusOr<Reply> RedisOutbox::RunOne(Argv command) {
  std::vector<Argv> commands;
  commands.push_back(std::move(command));
  return std::move(Run(std::move(commands)).front());
}

absl::Status RedisOutbox::CheckReply(const absl::StatusOr<Reply>& reply) {
  if (!reply.ok()) return reply.status();
  if (!reply->is_error()) return absl::OkStatus();
  if (absl::StartsWith(reply->str, "NOGROUP")) {
    // Redis lost a stream or the group: create them again (BUSYGROUP where they still exist).
    group_ready_.assign(streams_.size(), false);
    return absl::UnavailableError(absl::StrCat("redis outbox: ", reply->str));
  }
  return absl::InternalError(absl::StrCat("redis outbox: ", reply->str));
}

absl::Status RedisOutbox::EnsureGroups() {
  std::vector<Argv> commands;
  std::vector<size_t> buckets;
  for (size_t b = 0; b < streams_.size(); ++b) {
    if (group_ready_[b]) continue;
    // Id 0: entries recorded before the group existed are delivered too.
    commands.push_back({"XGROUP", "CREATE", streams_[b], options_.group, "0", "MKSTREAM"});
    buckets.push_back(b);
  }
  if (commands.empty()) return absl::OkStatus();
  // Per bucket: one whose node is down (a cluster) does not hold back the others.
  absl::Status first_error;
  std::vector<absl::StatusOr<Reply>> replies = Run(std::move(commands));
  for (size_t i = 0; i < replies.size(); ++i) {
    const absl::StatusOr<Reply>& reply = replies[i];
    if (!reply.ok()) {
      if (first_error.ok()) first_error = reply.status();
    } else if (reply->is_error() && !absl::StartsWith(reply->str, "BUSYGROUP")) {
      if (first_error.ok()) {
        first_error =
            absl::InternalError(absl::StrCat("redis outbox: XGROUP CREATE: ", reply->str));
      }
    } else {
      group_ready_[buckets[i]] = true;
    }
  }
  if (std::none_of(group_ready_.begin(), group_ready_.end(), [](bool r) { return r; })) {
    return first_error;
  }
  return absl::OkStatus();
}

absl::Status RedisOutbox::TakeEntries(int bucket, const Reply& entries, bool read_counts,
                                      std::vector<OutboxItem>& out) {
  if (!entries.is_array()) return absl::OkStatus();
  const std::string& stream = streams_[bucket];
  std::vector<Argv> cleanup;
  const size_t first = out.size();
  for (const Reply& entry : entries.elements) {
    if (!entry.is_array() || entry.elements.size() != 2 || !entry.elements[0].is_string()) {
      return absl::InternalError("redis outbox: unexpected stream entry shape");
    }
    const std::string& id = entry.elements[0].str;
    if (entry.elements[1].is_nil()) {
      // Deleted while pending (acked by another consumer that lost its lease): drop from the PEL.
      cleanup.push_back({"XACK", stream, options_.group, id});
      continue;
    }
    std::optional<AlertEvent> event = ParseEvent(entry.elements[1]);
    if (!event) {
      ++malformed_;
      Log(LogLevel::kError, "malformed alert outbox entry removed")
          .Str("stream", stream)
          .Str("id", id);
      cleanup.push_back({"XACK", stream, options_.group, id});
      cleanup.push_back({"XDEL", stream, id});
      continue;
    }
    out.push_back(OutboxItem{.handle = {.stream = static_cast<uint32_t>(bucket), .id = id},
                             .event = std::move(*event)});
  }
  if (read_counts) {
    for (size_t i = first; i < out.size(); ++i) {
      cleanup.push_back(
          {"XPENDING", stream, options_.group, out[i].handle.id, out[i].handle.id, "1"});
    }
  }
  if (cleanup.empty()) return absl::OkStatus();
  std::vector<absl::StatusOr<Reply>> replies = Run(cleanup);
  size_t r = 0;
  for (size_t c = 0; c < cleanup.size(); ++c) {
    if (cleanup[c][0] != "XPENDING") continue;
    const absl::StatusOr<Reply>& reply = replies[c];
    OutboxItem& item = out[first + r++];
    // [[id, consumer, idle_ms, delivery_count]]
    if (reply.ok() && reply->is_array() && !reply->elements.empty() &&
        reply->elements[0].elements.size() == 4 && reply->elements[0].elements[3].is_integer()) {
      item.deliveries = std::max<int64_t>(1, reply->elements[0].elements[3].integer);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<OutboxItem>> RedisOutbox::ReadGroup(std::span<const int> buckets,
                                                               std::span<const std::string> ids,
                                                               size_t count, bool history) {
  const Argv head = {"XREADGROUP",        "GROUP",  options_.group, options_.consumer, "COUNT",
                     absl::StrCat(count), "STREAMS"};
  // One command naming every stream; on a cluster one per stream (each its own slot).
  std::vector<Argv> commands;
  std::vector<std::vector<int>> named;  // by command: the buckets it names
  const bool split = !options_.cluster_seeds.empty();
  for (size_t i = 0; i < buckets.size(); ++i) {
    if (split || commands.empty()) {
      commands.push_back(head);
      named.emplace_back();
    }
    named.back().push_back(buckets[i]);
  }
  for (size_t c = 0; c < commands.size(); ++c) {
    for (int b : named[c]) commands[c].push_back(streams_[b]);
    for (size_t i = 0; i < named[c].size(); ++i) {
      commands[c].push_back(ids[split ? c : i]);
    }
  }
  std::vector<absl::StatusOr<Reply>> replies = Run(std::move(commands));

  std::vector<OutboxItem> out;
  std::vector<bool> seen(streams_.size(), false);
  absl::Status first_error;
  size_t answered = 0;
  for (size_t c = 0; c < replies.size(); ++c) {
    const absl::StatusOr<Reply>& reply = replies[c];
    if (absl::Status st = CheckReply(reply); !st.ok()) {
      if (first_error.ok()) first_error = st;
      continue;
    }
    ++answered;
    if (!reply->is_array()) continue;  // nil: nothing new in any stream it names
    for (const Reply& per_stream : reply->elements) {
      if (!per_stream.is_array() || per_stream.elements.size() != 2) {
        return absl::InternalError("redis outbox: unexpected XREADGROUP reply");
      }
      auto it = bucket_of_.find(per_stream.elements[0].str);
      if (it == bucket_of_.end()) continue;
      const int b = it->second;
      const Reply& entries = per_stream.elements[1];
      if (absl::Status st = TakeEntries(b, entries, /*read_counts=*/history, out); !st.ok()) {
        return st;
      }
      if (history) {
        // Fewer than COUNT entries: this bucket's pending list has been read to its end.
        // (TakeEntries checked the shape of every entry.)
        if (entries.elements.size() < count) {
          history_[b].reset();
        } else {
          history_[b] = entries.elements.back().elements[0].str;
        }
        seen[b] = true;
      }
    }
  }
  if (history) {
    // A bucket that failed (its node is down) is not re-read, also when no bucket answered: the
    // caller would loop on it. Its pending entries are still this consumer's, and come back
    // through Claim once their lease has passed.
    for (int b : buckets) {
      if (!seen[b]) history_[b].reset();
    }
  }
  if (answered == 0 && !first_error.ok()) return first_error;
  return out;
}

absl::StatusOr<std::vector<OutboxItem>> RedisOutbox::Fetch(size_t max) {
  if (max == 0) return std::vector<OutboxItem>{};
  if (absl::Status st = EnsureGroups(); !st.ok()) return st;
  const size_t n = streams_.size();

  // This consumer's own pending entries first (left by a previous RedisOutbox of this name).
  // (Of the buckets whose group is ready; the others' are read once it is.)
  const auto history_left = [&] {
    for (size_t b = 0; b < n; ++b) {
      if (group_ready_[b] && history_[b]) return true;
    }
    return false;
  };
  while (history_left()) {
    std::vector<int> buckets;
    std::vector<std::string> ids;
    for (size_t b = 0; b < n && buckets.size() < max; ++b) {
      if (!group_ready_[b] || !history_[b]) continue;
      buckets.push_back(static_cast<int>(b));
      ids.push_back(*history_[b]);
    }
    absl::StatusOr<std::vector<OutboxItem>> items =
        ReadGroup(buckets, ids, std::max<size_t>(1, max / buckets.size()), /*history=*/true);
    if (!items.ok() || !items->empty()) return items;
  }

  // New entries. COUNT is per stream: name at most `max` streams, rotating, so that the total
  // stays within `max` and no bucket is starved.
  // Only buckets whose group is ready (EnsureGroups made sure one is).
  std::vector<int> buckets;
  size_t next = next_fetch_bucket_;
  for (size_t i = 0; i < n && buckets.size() < max; ++i) {
    const size_t b = (next_fetch_bucket_ + i) % n;
    if (!group_ready_[b]) continue;
    buckets.push_back(static_cast<int>(b));
    next = (b + 1) % n;
  }
  next_fetch_bucket_ = next;
  if (buckets.empty()) return absl::UnavailableError("redis outbox: no bucket's group is ready");
  const std::vector<std::string> ids(buckets.size(), ">");
  return ReadGroup(buckets, ids, max / buckets.size(), /*history=*/false);
}

absl::StatusOr<std::vector<OutboxItem>> RedisOutbox::Claim(size_t max) {
  std::vector<OutboxItem> out;
  if (max == 0) return out;
  if (absl::Status st = EnsureGroups(); !st.ok()) return st;
  const std::string min_idle = Millis(options_.claim_min_idle);
  // A bucket that fails (its node is down) is skipped: what XAUTOCLAIM already moved to this
  // consumer from the others is returned, not left to age into the dead letters undelivered.
  absl::Status first_error;
  size_t answered = 0;
  for (size_t step = 0; step < streams_.size() && out.size() < max; ++step) {
    const size_t b = next_claim_bucket_;
    next_claim_bucket_ = (next_claim_bucket_ + 1) % streams_.size();
    if (!group_ready_[b]) continue;
    absl::StatusOr<Reply> reply =
        RunOne({"XAUTOCLAIM", streams_[b], options_.group, options_.consumer, min_idle,
                claim_cursor_[b], "COUNT", absl::StrCat(max - out.size())});
    absl::Status st = CheckReply(reply);
    // Redis 7: [next_cursor, [[id, fields]…], [deleted ids]]; deleted ones leave the PEL by
    // themselves.
    if (st.ok() &&
        (!reply->is_array() || reply->elements.size() < 2 || !reply->elements[0].is_string())) {
      st = absl::InternalError("redis outbox: unexpected XAUTOCLAIM reply");
    }
    if (st.ok()) {
      claim_cursor_[b] = reply->elements[0].str;
      st = TakeEntries(static_cast<int>(b), reply->elements[1], /*read_counts=*/true, out);
    }
    if (!st.ok()) {
      if (first_error.ok()) first_error = st;
      continue;
    }
    ++answered;
  }
  if (out.empty() && answered == 0 && !first_error.ok()) return first_error;
  return out;
}

absl::Status RedisOutbox::Ack(const OutboxHandle& handle) {
  if (handle.stream >= streams_.size()) {
    return absl::InvalidArgumentError("redis outbox: handle of another outbox");
  }
  const std::string& stream = streams_[handle.stream];
  std::vector<absl::StatusOr<Reply>> replies =
      Run({{"XACK", stream, options_.group, handle.id}, {"XDEL", stream, handle.id}});
  for (const absl::StatusOr<Reply>& reply : replies) {
    if (absl::Status st = CheckReply(reply); !st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<OutboxHandle>> RedisOutbox::Renew(std::span<const OutboxHandle> held) {
  std::vector<OutboxHandle> lost;
  std::map<uint32_t, std::vector<std::string>> by_stream;
  for (const OutboxHandle& h : held) {
    if (h.stream >= streams_.size()) {
      lost.push_back(h);
    } else {
      by_stream[h.stream].push_back(h.id);
    }
  }
  std::vector<Argv> commands;
  for (const auto& [stream, ids] : by_stream) {
    Argv argv = renew_.Command(1, 3 + ids.size());
    argv.push_back(streams_[stream]);
    argv.push_back(options_.group);
    argv.push_back(options_.consumer);
    argv.insert(argv.end(), ids.begin(), ids.end());
    commands.push_back(std::move(argv));
  }
  std::vector<absl::StatusOr<Reply>> replies = Run(std::move(commands), &renew_);
  size_t i = 0;
  for (const auto& [stream, ids] : by_stream) {
    const absl::StatusOr<Reply>& reply = replies[i++];
    if (absl::Status st = CheckReply(reply); !st.ok()) return st;
    if (!reply->is_array() || reply->elements.size() != ids.size()) {
      return absl::InternalError("redis outbox: unexpected renew reply");
    }
    for (size_t k = 0; k < ids.size(); ++k) {
      if (reply->elements[k].integer != 1) lost.push_back({.stream = stream, .id = ids[k]});
    }
  }
  return lost;
}

absl::StatusOr<OutboxStats> RedisOutbox::Stats() {
  std::vector<Argv> commands;
  for (const std::string& stream : streams_) {
    commands.push_back({"XLEN", stream});
    commands.push_back({"XRANGE", stream, "-", "+", "COUNT", "1"});
  }
  std::vector<absl::StatusOr<Reply>> replies = Run(std::move(commands));
  OutboxStats stats;
  for (size_t i = 0; i + 1 < replies.size(); i += 2) {
    if (absl::Status st = CheckReply(replies[i]); !st.ok()) return st;
    if (absl::Status st = CheckReply(replies[i + 1]); !st.ok()) return st;
    stats.depth += replies[i]->integer;
    const Reply& range = *replies[i + 1];
    if (!range.is_array() || range.elements.empty()) continue;
    const Reply& entry = range.elements[0];
    if (entry.elements.size() != 2) continue;
    std::optional<AlertEvent> event = ParseEvent(entry.elements[1]);
    if (event && (!stats.oldest_event || event->occurred_at < *stats.oldest_event)) {
      stats.oldest_event = event->occurred_at;
    }
  }
  return stats;
}

}  // namespace sluice::redis
