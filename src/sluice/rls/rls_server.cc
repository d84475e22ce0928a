#include "sluice/rls/rls_server.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <utility>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/socket_base.hpp>
#include <boost/asio/steady_timer.hpp>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "envoy/service/ratelimit/v3/rls.pb.h"
#include "google/protobuf/arena.h"
#include "sluice/common/log.h"
#include "sluice/common/strings.h"
#include "sluice/frontend/decide.h"
#include "sluice/frontend/resolve.h"
#include "sluice/limiter/limiter.h"
#include "sluice/net/listener.h"
#include "sluice/rls/h2_session.h"
#include "sluice/rls/mapping.h"
#include "sluice/rls/ratelimit_request.h"

namespace sluice::rls {
namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

constexpr std::string_view kMethod = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

// A protobuf arena whose first block is on the stack, for one message parsed or built and dropped
// in the same call: no allocation for a message of usual size (a larger one spills to the heap),
// and one release for all of its parts.
class StackArena {
 public:
  StackArena() : arena_(Options(block_)) {}
  StackArena(const StackArena&) = delete;
  StackArena& operator=(const StackArena&) = delete;

  google::protobuf::Arena* get() { return &arena_; }

 private:
  static google::protobuf::ArenaOptions Options(char* block) {
    google::protobuf::ArenaOptions options;
    options.initial_block = block;
    options.initial_block_size = kBlockBytes;
    return options;
  }

  static constexpr size_t kBlockBytes = 4096;
  alignas(std::max_align_t) char block_[kBlockBytes];
  google::protobuf::Arena arena_;
};

}  // namespace

class RateLimitServiceImpl;

// One call being decided: answers it once and gives back its place in the in-flight count.
class RlsCall {
 public:
  RlsCall(RateLimitServiceImpl* service, GrpcCall call)
      : service_(service), call_(std::move(call)) {}
  // True if the answer reached the call's stream (not dropped: reset, timed out, closed).
  bool Reply(const rlsv3::RateLimitResponse& res) const;
  // `res` is a RateLimitResponse already serialized.
  bool ReplySerialized(std::string_view res) const;
  bool Fail(GrpcCode code, std::string_view message) const;

 private:
  void Done() const;

  RateLimitServiceImpl* service_;
  GrpcCall call_;
};

// The calls' side: parses and decides each call on the thread of the connection it came on, and
// keeps the books of connections and listeners for the shutdown.
class RateLimitServiceImpl final : public GrpcService {
 public:
  RateLimitServiceImpl(const frontend::FrontendHolder* frontend,
                       frontend::FrontendMetrics* http_metrics, const registry::Index* index,
                       metrics::Registry* metrics, std::vector<boost::asio::io_context*> loops,
                       RlsServerOptions options)
      : frontend_(frontend),
        http_metrics_(http_metrics),
        index_(index),
        options_(options),
        requests_(metrics->AddCounterFamily(
            "sluice_grpc_requests_total",
            "Envoy Rate Limit Service calls by outcome: ok, over_limit (a decision or a refused "
            "key), the gRPC error (invalid_argument, resource_exhausted, unimplemented, internal: "
            "a truncated message, deadline_exceeded: grpc-timeout passed), not_grpc (an HTTP/2 "
            "request that is no gRPC call: answered 405 or 415), or cancelled (the client reset "
            "or abandoned the call before its request was complete).",
            {"code"})),
        ok_(requests_.WithLabels({"ok"})),
        over_limit_(requests_.WithLabels({"over_limit"})),
        invalid_(requests_.WithLabels({"invalid_argument"})),
        exhausted_(requests_.WithLabels({"resource_exhausted"})),
        unimplemented_(requests_.WithLabels({"unimplemented"})),
        cancelled_(requests_.WithLabels({"cancelled"})),
        internal_(requests_.WithLabels({"internal"})),
        deadline_(requests_.WithLabels({"deadline_exceeded"})),
        not_grpc_(requests_.WithLabels({"not_grpc"})),
        rule_hits_(metrics->AddCounterFamily(
            "sluice_ratelimit_rule_hits_total",
            "Rules of envoy.ratelimit_config decided, by domain, rule (its descriptor path, as "
            "envoyproxy/ratelimit names it in its stats) and result (ok, over_limit, "
            "shadow_over_limit, not_counted: the call was denied by another rule).",
            {"domain", "rule", "result"})) {
    h2_.method = std::string(kMethod);
    h2_.max_message_bytes = static_cast<size_t>(std::max(options.max_message_bytes, 0));
    h2_.max_concurrent_streams = options.max_concurrent_streams;
    h2_.handshake_timeout = absl::ToChronoMilliseconds(options.handshake_timeout);
    h2_.idle_timeout = absl::ToChronoMilliseconds(options.idle_timeout);
    h2_.request_timeout = absl::ToChronoMilliseconds(options.request_timeout);
    h2_.write_timeout = absl::ToChronoMilliseconds(options.write_timeout);
    for (asio::io_context* io : loops) {
      auto loop = std::make_unique<Loop>();
      loop->io = io;
      loops_.push_back(std::move(loop));
    }
  }

  [[nodiscard]] int64_t in_flight() const { return in_flight_.load(); }
  void SetRules(std::shared_ptr<const RlRuleSet> rules) { rules_.store(std::move(rules)); }

  absl::Status Listen(const tcp::endpoint& endpoint, int* port);
  void BeginShutdown(absl::Time deadline);
  void FinishShutdown();

  // GrpcService, on the connection's loop.
  void OnCall(GrpcCall call, std::string_view message) override;
  void Count(std::string_view outcome) override;
  void ConnectionClosed(H2Connection* conn) override;
  void ConnectionDestroyed() override;

 private:
  friend class RlsCall;

  // One event loop's acceptor and open connections (touched only on its thread).
  struct Loop {
    asio::io_context* io = nullptr;
    std::unique_ptr<tcp::acceptor> acceptor;
    std::unique_ptr<asio::steady_timer> pause;  // after accept() ran out of descriptors
    absl::flat_hash_set<H2Connection*> open;
  };

  // What a decision in flight keeps alive: the Frontend (its Limiter's plans) and the target (its
  // effective plan), both referred to by the Decision.
  struct Decision {
    std::shared_ptr<const frontend::Frontend> fe;
    Query query;
    frontend::Target target;
    frontend::DecisionTimer timer;
  };
  // The same for a request of an envoy.ratelimit_config domain: the rules (their plans) too.
  struct RlDecision {
    std::shared_ptr<const frontend::Frontend> fe;
    std::shared_ptr<const RlRuleSet> rules;
    RlQuery query;
    frontend::DecisionTimer timer;
  };

  void Accept(Loop* loop, size_t index);
  // Runs `fn` on every loop and waits until each has.
  void OnEveryLoop(const std::function<void(Loop&)>& fn);
  // Waits until `done` holds (checked whenever a connection or a call ends) or `until` passes;
  // returns whether it holds.
  bool WaitUntil(const std::function<bool()>& done, std::chrono::steady_clock::time_point until);
  void Notify();

  // Checks a parsed request, then decides it.
  void Handle(RlsCall call, const rlsv3::RateLimitRequest& req);
  // Resolves who is asking, as /v1/authorize and /v1/check do, and decides.
  void Decide(RlsCall call, std::shared_ptr<const frontend::Frontend> fe, Query query);
  // Decides every counter of an envoy.ratelimit_config request as one group.
  void DecideRules(RlsCall call, std::shared_ptr<RlDecision> state);
  // Counts the rules of a decided request in sluice_ratelimit_rule_hits_total.
  void CountRules(const RlQuery& q, const std::vector<sluice::Decision>& decisions);

  const frontend::FrontendHolder* frontend_;
  frontend::FrontendMetrics* http_metrics_;
  const registry::Index* index_;
  RlsServerOptions options_;
  H2Options h2_;
  std::vector<std::unique_ptr<Loop>> loops_;
  metrics::CounterFamily& requests_;
  metrics::Counter& ok_;
  metrics::Counter& over_limit_;
  metrics::Counter& invalid_;
  metrics::Counter& exhausted_;
  metrics::Counter& unimplemented_;
  metrics::Counter& cancelled_;
  metrics::Counter& internal_;
  metrics::Counter& deadline_;
  metrics::Counter& not_grpc_;
  metrics::CounterFamily& rule_hits_;
  std::atomic<std::shared_ptr<const RlRuleSet>> rules_;
  std::atomic<int64_t> in_flight_{0};
  // Open connections (the cap) and connection objects alive (the shutdown waits for none).
  std::atomic<int64_t> connections_{0};
  std::atomic<int64_t> objects_{0};
  std::atomic<bool> stopping_{false};
  std::chrono::steady_clock::time_point deadline_at_;
  int address_lock_ = -1;
  std::mutex mu_;
  std::condition_variable cv_;

 public:
  ~RateLimitServiceImpl() override {
    if (address_lock_ >= 0) ::close(address_lock_);
  }
};

bool RlsCall::Reply(const rlsv3::RateLimitResponse& res) const {
  const bool delivered = call_.Reply(res);
  Done();
  return delivered;
}

bool RlsCall::ReplySerialized(std::string_view res) const {
  const bool delivered = call_.ReplySerialized(res);
  Done();
  return delivered;
}

bool RlsCall::Fail(GrpcCode code, std::string_view message) const {
  const bool delivered = call_.Fail(code, message);
  Done();
  return delivered;
}

void RlsCall::Done() const {
  service_->in_flight_.fetch_sub(1);
  service_->Notify();
}

void RateLimitServiceImpl::Notify() {
  if (!stopping_.load(std::memory_order_relaxed)) return;
  const std::lock_guard lock(mu_);
  cv_.notify_all();
}

void RateLimitServiceImpl::Count(std::string_view outcome) {
  if (outcome == "cancelled") {
    cancelled_.Inc();
  } else if (outcome == "invalid_argument") {
    invalid_.Inc();
  } else if (outcome == "resource_exhausted") {
    exhausted_.Inc();
  } else if (outcome == "unimplemented") {
    unimplemented_.Inc();
  } else if (outcome == "internal") {
    internal_.Inc();
  } else if (outcome == "deadline_exceeded") {
    deadline_.Inc();
  } else {
    not_grpc_.Inc();
  }
}

void RateLimitServiceImpl::ConnectionClosed(H2Connection* conn) {
  loops_[conn->loop()]->open.erase(conn);
  connections_.fetch_sub(1);
}

void RateLimitServiceImpl::ConnectionDestroyed() {
  objects_.fetch_sub(1);
  Notify();
}

void RateLimitServiceImpl::OnCall(GrpcCall grpc_call, std::string_view message) {
  if (in_flight_.fetch_add(1) >= options_.max_in_flight) {
    in_flight_.fetch_sub(1);
    exhausted_.Inc();
    grpc_call.Fail(GrpcCode::kResourceExhausted, "too many rate limit calls in flight");
    return;
  }
  RlsCall call(this, std::move(grpc_call));
  StackArena arena;
  auto* req = google::protobuf::Arena::CreateMessage<rlsv3::RateLimitRequest>(arena.get());
  if (!req->ParseFromArray(message.data(), static_cast<int>(message.size()))) {
    invalid_.Inc();
    call.Fail(GrpcCode::kInvalidArgument,
              "request: not a valid envoy.service.ratelimit.v3.RateLimitRequest");
    return;
  }
  Handle(std::move(call), *req);
}

void RateLimitServiceImpl::Handle(RlsCall call, const rlsv3::RateLimitRequest& req) {
  std::shared_ptr<const frontend::Frontend> fe = frontend_->Get();
  if (std::shared_ptr<const RlRuleSet> rules = rules_.load();
      rules != nullptr && rules->HasDomain(req.domain())) {
    absl::StatusOr<RlQuery> query =
        ParseRlRequest(req, *rules,
                       {.dynamic_metadata = fe->envoy.response_dynamic_metadata,
                        .report_key = fe->envoy.ratelimit_report_key});
    if (!query.ok()) {
      invalid_.Inc();
      call.Fail(GrpcCode::kInvalidArgument, ToStd(query.status().message()));
      return;
    }
    if (query->parts.empty()) {  // nothing limits any descriptor: no counter to ask about
      ok_.Inc();
      call.Reply(RlResponse(*query, {}));
      return;
    }
    DecideRules(std::move(call), std::make_shared<RlDecision>(
                                     RlDecision{.fe = std::move(fe),
                                                .rules = std::move(rules),
                                                .query = *std::move(query),
                                                .timer = frontend::DecisionTimer::Start()}));
    return;
  }
  absl::StatusOr<Query> query = ParseRequest(req, fe->envoy.descriptor_keys);
  if (!query.ok()) {
    invalid_.Inc();
    call.Fail(GrpcCode::kInvalidArgument, ToStd(query.status().message()));
    return;
  }
  Decide(std::move(call), std::move(fe), *std::move(query));
}

void RateLimitServiceImpl::Decide(RlsCall call, std::shared_ptr<const frontend::Frontend> fe,
                                  Query query) {
  auto state = std::make_shared<Decision>();
  state->fe = std::move(fe);
  state->query = std::move(query);
  const frontend::Frontend& frontend = *state->fe;
  const absl::Time now = frontend.limiter->clock().Now();
  frontend::Refusal refusal;
  const bool resolved =
      !state->query.api_key.empty()
          ? frontend::ResolveKey(frontend, index_, state->query.api_key, now, &state->target,
                                 &refusal)
          : frontend::ResolveSubject(frontend, index_, state->query.subject, state->query.plan, now,
                                     &state->target, &refusal);
  if (!resolved) {
    if (refusal.status == 400) {  // the request's fault: no plan for an unknown subject
      invalid_.Inc();
      call.Fail(GrpcCode::kInvalidArgument, refusal.detail);
      return;
    }
    over_limit_.Inc();
    call.Reply(RefusalResponse(refusal, state->query.descriptors));
    return;
  }
  state->timer = frontend::DecisionTimer::Start();
  DecisionRequest request = frontend::RequestFor(state->target, state->query.cost);
  request.mode = state->query.mode;
  frontend.limiter->Decide(request, [this, call, state](absl::StatusOr<sluice::Decision> d) {
    frontend::Record(*http_metrics_, *state->fe, state->target.plan, state->timer, d);
    if (!d.ok()) {
      // A subject or plan the limiter refuses (the message names the field).
      if (call.Fail(GrpcCode::kInvalidArgument, ToStd(d.status().message()))) invalid_.Inc();
      return;
    }
    const Decided who{.subject = state->target.subject, .plan = state->target.plan};
    bool delivered;
    if (d->allowed) {
      // The common answer is written without a message (the same bytes: mapping.h), into a
      // buffer this thread keeps.
      thread_local std::string wire;
      wire.clear();
      AppendAdmissionWire(*d, state->query.descriptors, who, &wire);
      delivered = call.ReplySerialized(wire);
    } else {
      StackArena arena;
      auto* res = google::protobuf::Arena::CreateMessage<rlsv3::RateLimitResponse>(arena.get());
      DecisionResponse(*d, state->query.descriptors, who, res);
      delivered = call.Reply(*res);
    }
    // A call answered DEADLINE_EXCEEDED meanwhile was counted so: not counted again.
    if (delivered) {
      (d->allowed ? ok_ : over_limit_).Inc();
    }
  });
}

void RateLimitServiceImpl::DecideRules(RlsCall call, std::shared_ptr<RlDecision> state) {
  const std::vector<GroupPart> parts = GroupParts(state->query);
  state->fe->limiter->DecideGroup(
      state->query.group, parts,
      [this, call, state](absl::StatusOr<std::vector<sluice::Decision>> decisions) {
        // Denied by rules in quota mode while another still has room: decided again without them
        // (the denial counted nothing). Bounded by the call's quota rules. The call's decision
        // is the last one, and its time runs from the first.
        if (decisions.ok() && RetryWithoutSpentQuotas(state->query, *decisions)) {
          DecideRules(call, state);
          return;
        }
        http_metrics_->ObserveDecisionSeconds(state->timer.Seconds());
        if (!decisions.ok()) {
          if (call.Fail(GrpcCode::kInvalidArgument, ToStd(decisions.status().message()))) {
            invalid_.Inc();
          }
          return;
        }
        http_metrics_->CountDecision(*state->fe, state->query.group,
                                     Combined(state->query, *decisions));
        CountRules(state->query, *decisions);
        if (call.Reply(RlResponse(state->query, *decisions))) {
          ((*decisions)[0].allowed ? ok_ : over_limit_).Inc();
        }
      });
}

absl::Status RateLimitServiceImpl::Listen(const tcp::endpoint& endpoint, int* port) {
  if (endpoint.port() != 0) {
    absl::StatusOr<int> lock = net::LockListenAddress(endpoint);
    if (!lock.ok()) return lock.status();
    address_lock_ = *lock;
  }
  tcp::endpoint bound = endpoint;
  for (std::unique_ptr<Loop>& loop : loops_) {
    loop->acceptor = std::make_unique<tcp::acceptor>(*loop->io);
    loop->pause = std::make_unique<asio::steady_timer>(*loop->io);
    tcp::acceptor& acceptor = *loop->acceptor;
    const boost::system::error_code ec = net::OpenSharedListener(acceptor, bound);
    if (ec) {
      for (std::unique_ptr<Loop>& l : loops_) {
        l->acceptor.reset();
        l->pause.reset();
      }
      return absl::UnavailableError(absl::StrCat("cannot listen on ", bound.address().to_string(),
                                                 ":", bound.port(), ": ", ec.message()));
    }
    bound = acceptor.local_endpoint();  // with port 0 the first bind picks it
  }
  *port = bound.port();
  for (size_t i = 0; i < loops_.size(); ++i) Accept(loops_[i].get(), i);
  return absl::OkStatus();
}

void RateLimitServiceImpl::Accept(Loop* loop, size_t index) {
  loop->acceptor->async_accept(
      [this, loop, index](const boost::system::error_code& ec, tcp::socket socket) {
        if (stopping_.load()) return;  // the acceptor may be closed or gone
        if (ec) {
          if (net::IsResourceExhaustion(ec)) {
            // Retrying at once cannot succeed: pause a moment instead of spinning.
            loop->pause->expires_after(std::chrono::milliseconds(100));
            loop->pause->async_wait([this, loop, index](const boost::system::error_code& e) {
              if (!e && !stopping_.load()) Accept(loop, index);
            });
            return;
          }
          Accept(loop, index);  // e.g. ECONNABORTED: the client gave up while queued
          return;
        }
        if (connections_.fetch_add(1) >= options_.max_connections) {
          connections_.fetch_sub(1);
          if (options_.refused != nullptr) options_.refused->Inc();
          boost::system::error_code ignored;
          socket.close(ignored);
          Accept(loop, index);
          return;
        }
        objects_.fetch_add(1);
        auto conn = std::make_shared<H2Connection>(std::move(socket), this, &h2_, index);
        loop->open.insert(conn.get());
        conn->Start();
        Accept(loop, index);
      });
}

void RateLimitServiceImpl::OnEveryLoop(const std::function<void(Loop&)>& fn) {
  size_t pending = loops_.size();
  for (std::unique_ptr<Loop>& loop : loops_) {
    asio::post(*loop->io, [this, &fn, &pending, l = loop.get()] {
      fn(*l);
      const std::lock_guard lock(mu_);
      --pending;
      cv_.notify_all();
    });
  }
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return pending == 0; });
}

bool RateLimitServiceImpl::WaitUntil(const std::function<bool()>& done,
                                     std::chrono::steady_clock::time_point until) {
  std::unique_lock lock(mu_);
  // Notify() takes the lock after changing what `done` reads, so no wake-up is lost; the bounded
  // wait also covers changes made before stopping_ was set.
  while (!done()) {
    if (std::chrono::steady_clock::now() >= until) return false;
    cv_.wait_until(
        lock, std::min(until, std::chrono::steady_clock::now() + std::chrono::milliseconds(50)));
  }
  return true;
}

void RateLimitServiceImpl::BeginShutdown(absl::Time deadline) {
  if (stopping_.exchange(true)) return;
  deadline_at_ = std::chrono::steady_clock::now() +
                 absl::ToChronoMilliseconds(std::max(deadline - absl::Now(), absl::ZeroDuration()));
  for (std::unique_ptr<Loop>& loop : loops_) {
    asio::post(*loop->io, [l = loop.get()] {
      boost::system::error_code ignored;
      if (l->acceptor) l->acceptor->close(ignored);
      if (l->pause) l->pause->cancel();
      // Closing erases from `open`: copy first. An idle connection closes at once.
      const std::vector<H2Connection*> open(l->open.begin(), l->open.end());
      for (H2Connection* c : open) c->GoAway();
    });
  }
}

void RateLimitServiceImpl::FinishShutdown() {
  BeginShutdown(absl::Now());
  // Connections finish their streams until the deadline; then what is left is closed.
  if (!WaitUntil([this] { return connections_.load() == 0; }, deadline_at_)) {
    OnEveryLoop([](Loop& l) {
      const std::vector<H2Connection*> open(l.open.begin(), l.open.end());
      for (H2Connection* c : open) c->Close();
    });
  }
  // Decisions still in flight end on the loops (each within the store's wait), and the objects of
  // closed connections go once their last handler has run. Bounded all the same: a store that
  // broke its bound must not hold the process at SIGTERM forever.
  const auto bound = std::chrono::steady_clock::now() +
                     absl::ToChronoMilliseconds(options_.shutdown_decisions_wait);
  if (!WaitUntil([this] { return in_flight_.load() == 0 && objects_.load() == 0; }, bound)) {
    Log(LogLevel::kWarn, "gRPC calls still being decided at shutdown are abandoned")
        .Int("in_flight", in_flight_.load())
        .Double("waited_s", absl::ToDoubleSeconds(options_.shutdown_decisions_wait));
  }
  OnEveryLoop([](Loop& l) {
    l.acceptor.reset();
    l.pause.reset();
  });
}

void RateLimitServiceImpl::CountRules(const RlQuery& q,
                                      const std::vector<sluice::Decision>& decisions) {
  for (size_t i = 0; i < q.parts.size(); ++i) {
    const RlPart& part = q.parts[i];
    if (part.rule == nullptr || decisions[i].limits.empty()) continue;
    const LimitDecision& l = decisions[i].limits.front();
    // A call denied by another descriptor's rule counted nothing here: "not_counted". A spent
    // quota rule over its limit is "over_limit", whether or not another quota rule admitted it.
    const std::string_view result = PartOverLimit(q, i, decisions[i]) ? "over_limit"
                                    : !decisions[i].allowed           ? "not_counted"
                                    : l.would_deny                    ? "shadow_over_limit"
                                                                      : "ok";
    rule_hits_.WithLabels({q.domain, part.rule->path, result}).Inc();
  }
}

RlsServer::RlsServer(const frontend::FrontendHolder* frontend,
                     frontend::FrontendMetrics* http_metrics, const registry::Index* index,
                     metrics::Registry* metrics, std::vector<boost::asio::io_context*> loops,
                     RlsServerOptions options)
    : service_(std::make_unique<RateLimitServiceImpl>(frontend, http_metrics, index, metrics,
                                                      std::move(loops), options)) {}

RlsServer::~RlsServer() {
  if (started_) FinishShutdown();
}

absl::Status RlsServer::Start(const std::string& address) {
  absl::StatusOr<tcp::endpoint> endpoint = net::ParseEndpoint(address);
  if (!endpoint.ok()) return endpoint.status();
  if (absl::Status s = service_->Listen(*endpoint, &port_); !s.ok()) return s;
  started_ = true;
  return absl::OkStatus();
}

void RlsServer::BeginShutdown(absl::Time deadline) {
  if (started_) service_->BeginShutdown(deadline);
}

void RlsServer::FinishShutdown() {
  if (!started_) return;
  service_->FinishShutdown();
  started_ = false;
}

int64_t RlsServer::in_flight() const { return service_->in_flight(); }

void RlsServer::SetRules(std::shared_ptr<const RlRuleSet> rules) {
  service_->SetRules(std::move(rules));
}

}  // namespace sluice::rls
