#include "sluice/grpc/rls_server.h"

#include <grpc/support/log.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/proto_utils.h>

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <utility>

#include <boost/asio/post.hpp>

#include "absl/strings/str_cat.h"
#include "envoy/service/ratelimit/v3/rls.pb.h"
#include "google/protobuf/arena.h"
#include "sluice/common/log.h"
#include "sluice/common/strings.h"
#include "sluice/grpc/mapping.h"
#include "sluice/grpc/ratelimit_request.h"
#include "sluice/http/resolve.h"
#include "sluice/limiter/limiter.h"

namespace sluice::rls {
namespace {

// gRPC's own log lines, as sluice's (one JSON object per line on stderr).
void LogGrpc(gpr_log_func_args* args) {
  const LogLevel level = args->severity == GPR_LOG_SEVERITY_ERROR  ? LogLevel::kError
                         : args->severity == GPR_LOG_SEVERITY_INFO ? LogLevel::kInfo
                                                                   : LogLevel::kDebug;
  Log(level, "grpc").Str("message", args->message == nullptr ? "" : args->message);
}

}  // namespace

class RlsCall;

// A generic (byte buffer) service rather than the generated typed one: sluice parses the request
// itself, so a body that is no RateLimitRequest is INVALID_ARGUMENT naming the problem (the typed
// handler answers such a body with a bare status of gRPC's choosing).
class RateLimitServiceImpl final {
 public:
  RateLimitServiceImpl(const http::FrontendHolder* frontend, http::HttpMetrics* http_metrics,
                       const registry::Index* index, metrics::Registry* metrics,
                       std::vector<boost::asio::io_context*> loops, RlsServerOptions options)
      : frontend_(frontend),
        http_metrics_(http_metrics),
        index_(index),
        loops_(std::move(loops)),
        options_(options),
        requests_(metrics->AddCounterFamily(
            "sluice_grpc_requests_total",
            "Envoy Rate Limit Service calls by outcome: ok, over_limit (a decision or a refused "
            "key), the gRPC error (invalid_argument, resource_exhausted, unimplemented), or "
            "cancelled (the client cancelled or reset the call before sending its request).",
            {"code"})),
        ok_(requests_.WithLabels({"ok"})),
        over_limit_(requests_.WithLabels({"over_limit"})),
        invalid_(requests_.WithLabels({"invalid_argument"})),
        exhausted_(requests_.WithLabels({"resource_exhausted"})),
        unimplemented_(requests_.WithLabels({"unimplemented"})),
        cancelled_(requests_.WithLabels({"cancelled"})),
        rule_hits_(metrics->AddCounterFamily(
            "sluice_ratelimit_rule_hits_total",
            "Rules of envoy.ratelimit_config decided, by domain, rule (its descriptor path, as "
            "envoyproxy/ratelimit names it in its stats) and result (ok, over_limit, "
            "shadow_over_limit, not_counted: the call was denied by another rule).",
            {"domain", "rule", "result"})) {}

  [[nodiscard]] int64_t in_flight() const { return in_flight_.load(); }
  [[nodiscard]] size_t loop_count() const { return loops_.size(); }
  grpc::AsyncGenericService* generic() { return &generic_; }

  // Asks gRPC for one more call on `cq` (a call object waits for it).
  void Arm(grpc::ServerCompletionQueue* cq);
  // The thread of `cq`: handles its events until the queue is shut down and drained.
  void Poll(grpc::ServerCompletionQueue* cq);
  // Returns once no call object is left (every armed request has come back, every call has been
  // answered and finished). REQUIRES: the server has been shut down (nothing is armed any more).
  void WaitForCalls();

  void SetRules(std::shared_ptr<const RlRuleSet> rules) { rules_.store(std::move(rules)); }

 private:
  friend class RlsCall;

  // What a decision in flight keeps alive: the Frontend (its Limiter's plans) and the target (its
  // effective plan), both referred to by the Decision.
  struct Decision {
    std::shared_ptr<const http::Frontend> fe;
    Query query;
    http::Target target;
    std::chrono::steady_clock::time_point start;
  };
  // The same for a request of an envoy.ratelimit_config domain: the rules (their plans) too.
  struct RlDecision {
    std::shared_ptr<const http::Frontend> fe;
    std::shared_ptr<const RlRuleSet> rules;
    RlQuery query;
    std::chrono::steady_clock::time_point start;
  };

  // Once per parsed request, on any thread: checks the request, then decides inline (in-process
  // store) or hands the decision to an event loop.
  void Handle(RlsCall* call, const rlsv3::RateLimitRequest& req);
  // On an event loop (or, for an in-process store, any thread): resolves who is asking, as
  // /v1/authorize and /v1/check do, and decides.
  void Decide(RlsCall* call, std::shared_ptr<const http::Frontend> fe, Query query);
  // On an event loop: decides every counter of an envoy.ratelimit_config request as one group.
  void DecideRules(RlsCall* call, std::shared_ptr<RlDecision> state);
  // Counts the rules of a decided request in sluice_ratelimit_rule_hits_total.
  void CountRules(const RlQuery& q, const std::vector<sluice::Decision>& decisions);
  // A call object is gone.
  void Released();

  const http::FrontendHolder* frontend_;
  http::HttpMetrics* http_metrics_;
  const registry::Index* index_;
  std::vector<boost::asio::io_context*> loops_;
  RlsServerOptions options_;
  grpc::AsyncGenericService generic_;
  metrics::CounterFamily& requests_;
  metrics::Counter& ok_;
  metrics::Counter& over_limit_;
  metrics::Counter& invalid_;
  metrics::Counter& exhausted_;
  metrics::Counter& unimplemented_;
  metrics::Counter& cancelled_;
  metrics::CounterFamily& rule_hits_;
  std::atomic<std::shared_ptr<const RlRuleSet>> rules_;
  std::atomic<int64_t> in_flight_{0};
  std::atomic<size_t> next_loop_{0};
  // Call objects alive (armed or serving a call); WaitForCalls waits for 0.
  std::atomic<int64_t> live_{0};
  std::mutex live_mu_;
  std::condition_variable live_cv_;
};

// One ShouldRateLimit call, from gRPC's request for it to its end: reads the one request message,
// answers once. Its events (the tags it gives gRPC) all come back on its completion queue, whose
// one thread runs them; it deletes itself once gRPC is done with it (the answer is written and the
// call is over) and Reply or Fail, which every path reaches exactly once, has returned.
class RlsCall final {
 public:
  static constexpr std::string_view kMethod =
      "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

  // Each exactly once per call, from any thread; the call may be gone once they return.
  void Reply(const rlsv3::RateLimitResponse& res) {
    bool own = false;
    grpc::Status s =
        grpc::SerializationTraits<rlsv3::RateLimitResponse>::Serialize(res, &response_, &own);
    if (!s.ok()) {
      Fail(std::move(s));
      return;
    }
    Done();
    stream_.WriteAndFinish(response_, grpc::WriteOptions(), grpc::Status::OK, Tag(kFinished));
    Unref();
  }

  void Fail(grpc::Status status) {
    Done();
    stream_.Finish(status, Tag(kFinished));
    Unref();
  }

 private:
  friend class RateLimitServiceImpl;

  // What a tag stands for, in its low bits (a call object is aligned to more than 4).
  enum Event : uintptr_t { kRequested = 0, kRead = 1, kFinished = 2, kDone = 3 };
  static constexpr uintptr_t kEventBits = 3;
  // The stack block a request is parsed into (a larger one spills to the heap).
  static constexpr size_t kArenaBlockBytes = 2048;

  RlsCall(RateLimitServiceImpl* service, grpc::ServerCompletionQueue* cq)
      : service_(service), cq_(cq) {}

  void* Tag(Event e) { return reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(this) | e); }

  // On the completion queue's thread.
  void On(Event e, bool ok) {
    switch (e) {
      case kRequested:
        if (!ok) {  // the server is shutting down: no call came (and no kDone will)
          Delete();
          return;
        }
        refs_.store(2, std::memory_order_relaxed);
        service_->Arm(cq_);  // for the next call
        Start();
        return;
      case kRead:
        OnRead(ok);
        return;
      case kFinished:
        finished_ = true;
        break;
      case kDone:
        done_ = true;
        break;
    }
    if (finished_ && done_) {
      if (no_message_) (ctx_.IsCancelled() ? service_->cancelled_ : service_->invalid_).Inc();
      Unref();
    }
  }

  void Start() {
    if (ctx_.method() != kMethod) {
      service_->unimplemented_.Inc();
      stream_.Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                                  absl::StrCat("sluice serves only ", ToAbsl(kMethod))),
                     Tag(kFinished));
      Unref();
      return;
    }
    counted_ = true;
    if (service_->in_flight_.fetch_add(1) >= service_->options_.max_in_flight) {
      service_->exhausted_.Inc();
      Fail(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        "too many rate limit calls in flight"));
      return;
    }
    stream_.Read(&request_, Tag(kRead));
  }

  void OnRead(bool ok) {
    if (!ok) {
      // No message: the client half-closed without one, or cancelled (reset) the call. Which it
      // was is known once the call is over (kDone), and counted then.
      no_message_ = true;
      Fail(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "request: no message"));
      return;
    }
    // The parsed request lives in an arena whose first block is on the stack: no allocation for a
    // request of usual size, and one release for all of its strings.
    alignas(std::max_align_t) char block[kArenaBlockBytes];
    google::protobuf::ArenaOptions arena_options;
    arena_options.initial_block = block;
    arena_options.initial_block_size = sizeof(block);
    google::protobuf::Arena arena(arena_options);
    auto* req = google::protobuf::Arena::CreateMessage<rlsv3::RateLimitRequest>(&arena);
    if (!grpc::SerializationTraits<rlsv3::RateLimitRequest>::Deserialize(&request_, req).ok()) {
      service_->invalid_.Inc();
      Fail(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "request: not a valid envoy.service.ratelimit.v3.RateLimitRequest"));
      return;
    }
    service_->Handle(this, *req);
  }

  void Done() {
    if (counted_) service_->in_flight_.fetch_sub(1);
    counted_ = false;
  }

  // The call is deleted by whichever comes last: the answer's thread leaving Reply or Fail, or the
  // call's end on the queue's thread (the answer's completion can come back there while Reply is
  // still returning from gRPC).
  void Unref() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) Delete();
  }

  void Delete() {
    RateLimitServiceImpl* service = service_;
    delete this;
    service->Released();
  }

  RateLimitServiceImpl* service_;
  grpc::ServerCompletionQueue* cq_;
  grpc::GenericServerContext ctx_;
  grpc::GenericServerAsyncReaderWriter stream_{&ctx_};
  grpc::ByteBuffer request_;
  grpc::ByteBuffer response_;
  bool counted_ = false;      // in in_flight_
  std::atomic<int> refs_{0};  // once the call came: the answer's and the queue's (Unref)
  // Written and read on the completion queue's thread only.
  bool no_message_ = false;  // the read found no message (counted when the call is over)
  bool finished_ = false;    // kFinished came back
  bool done_ = false;        // kDone came back
};

void RateLimitServiceImpl::Arm(grpc::ServerCompletionQueue* cq) {
  auto* call = new RlsCall(this, cq);
  live_.fetch_add(1, std::memory_order_relaxed);
  call->ctx_.AsyncNotifyWhenDone(call->Tag(RlsCall::kDone));
  generic_.RequestCall(&call->ctx_, &call->stream_, cq, cq, call->Tag(RlsCall::kRequested));
}

void RateLimitServiceImpl::Poll(grpc::ServerCompletionQueue* cq) {
  void* tag = nullptr;
  bool ok = false;
  while (cq->Next(&tag, &ok)) {
    const auto bits = reinterpret_cast<uintptr_t>(tag);
    auto* call = reinterpret_cast<RlsCall*>(bits & ~RlsCall::kEventBits);
    call->On(static_cast<RlsCall::Event>(bits & RlsCall::kEventBits), ok);
  }
}

void RateLimitServiceImpl::Released() {
  if (live_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    const std::lock_guard lock(live_mu_);
    live_cv_.notify_all();
  }
}

void RateLimitServiceImpl::WaitForCalls() {
  std::unique_lock lock(live_mu_);
  live_cv_.wait(lock, [this] { return live_.load(std::memory_order_acquire) == 0; });
}

void RateLimitServiceImpl::Handle(RlsCall* call, const rlsv3::RateLimitRequest& req) {
  std::shared_ptr<const http::Frontend> fe = frontend_->Get();
  if (std::shared_ptr<const RlRuleSet> rules = rules_.load();
      rules != nullptr && rules->HasDomain(req.domain())) {
    absl::StatusOr<RlQuery> query = ParseRlRequest(req, *rules);
    if (!query.ok()) {
      invalid_.Inc();
      call->Fail(
          grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, std::string(query.status().message())));
      return;
    }
    if (query->parts.empty()) {  // nothing limits any descriptor: no counter to ask about
      ok_.Inc();
      call->Reply(RlResponse(*query, {}));
      return;
    }
    auto state = std::make_shared<RlDecision>(
        RlDecision{.fe = std::move(fe), .rules = std::move(rules), .query = *std::move(query)});
    if (options_.decide_inline) {  // an in-process store: answered before DecideGroup returns
      DecideRules(call, std::move(state));
      return;
    }
    boost::asio::io_context* loop =
        loops_[next_loop_.fetch_add(1, std::memory_order_relaxed) % loops_.size()];
    boost::asio::post(*loop, [this, call, state = std::move(state)]() mutable {
      DecideRules(call, std::move(state));
    });
    return;
  }
  absl::StatusOr<Query> query = ParseRequest(req, fe->envoy.descriptor_keys);
  if (!query.ok()) {
    invalid_.Inc();
    call->Fail(
        grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, std::string(query.status().message())));
    return;
  }
  if (options_.decide_inline) {  // an in-process store: answered before Decide returns
    Decide(call, std::move(fe), *std::move(query));
    return;
  }
  // A Redis decision starts on an event loop's thread (its connection is that loop's).
  boost::asio::io_context* loop =
      loops_[next_loop_.fetch_add(1, std::memory_order_relaxed) % loops_.size()];
  boost::asio::post(*loop, [this, call, fe = std::move(fe), query = *std::move(query)]() mutable {
    Decide(call, std::move(fe), std::move(query));
  });
}

void RateLimitServiceImpl::Decide(RlsCall* call, std::shared_ptr<const http::Frontend> fe,
                                  Query query) {
  auto state = std::make_shared<Decision>();
  state->fe = std::move(fe);
  state->query = std::move(query);
  const http::Frontend& frontend = *state->fe;
  const absl::Time now = frontend.limiter->clock().Now();
  http::Refusal refusal;
  const bool resolved =
      !state->query.api_key.empty()
          ? http::ResolveKey(frontend, index_, state->query.api_key, now, &state->target, &refusal)
          : http::ResolveSubject(frontend, index_, state->query.subject, state->query.plan, now,
                                 &state->target, &refusal);
  if (!resolved) {
    if (refusal.status == 400) {  // the request's fault: no plan for an unknown subject
      invalid_.Inc();
      call->Fail(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, refusal.detail));
      return;
    }
    over_limit_.Inc();
    call->Reply(RefusalResponse(refusal, state->query.descriptors));
    return;
  }
  state->start = std::chrono::steady_clock::now();
  const DecisionRequest request{.subject = state->target.subject,
                                .plan = state->target.plan,
                                .cost = state->query.cost,
                                .effective_plan = state->target.effective};
  frontend.limiter->Decide(request, [this, call, state](absl::StatusOr<sluice::Decision> d) {
    http_metrics_->ObserveDecisionSeconds(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - state->start).count());
    if (!d.ok()) {
      // A subject or plan the limiter refuses (the message names the field).
      invalid_.Inc();
      call->Fail(
          grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, std::string(d.status().message())));
      return;
    }
    http_metrics_->CountDecision(*state->fe, state->target.plan, *d);
    (d->allowed ? ok_ : over_limit_).Inc();
    call->Reply(DecisionResponse(*d, state->query.descriptors,
                                 {.subject = state->target.subject, .plan = state->target.plan}));
  });
}

void RateLimitServiceImpl::DecideRules(RlsCall* call, std::shared_ptr<RlDecision> state) {
  state->start = std::chrono::steady_clock::now();
  const std::vector<GroupPart> parts = GroupParts(state->query);
  state->fe->limiter->DecideGroup(
      state->query.group, parts,
      [this, call, state](absl::StatusOr<std::vector<sluice::Decision>> decisions) {
        http_metrics_->ObserveDecisionSeconds(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - state->start).count());
        if (!decisions.ok()) {
          invalid_.Inc();
          call->Fail(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                  std::string(decisions.status().message())));
          return;
        }
        http_metrics_->CountDecision(*state->fe, state->query.group, Combined(*decisions));
        CountRules(state->query, *decisions);
        ((*decisions)[0].allowed ? ok_ : over_limit_).Inc();
        call->Reply(RlResponse(state->query, *decisions));
      });
}

void RateLimitServiceImpl::CountRules(const RlQuery& q,
                                      const std::vector<sluice::Decision>& decisions) {
  for (size_t i = 0; i < q.parts.size(); ++i) {
    const RlPart& part = q.parts[i];
    if (part.rule == nullptr || decisions[i].limits.empty()) continue;
    const LimitDecision& l = decisions[i].limits.front();
    // A call denied by another descriptor's rule counted nothing here: "not_counted".
    const std::string_view result = l.violated              ? "over_limit"
                                    : !decisions[i].allowed ? "not_counted"
                                    : l.would_deny          ? "shadow_over_limit"
                                                            : "ok";
    rule_hits_.WithLabels({q.domain, part.rule->path, result}).Inc();
  }
}

RlsServer::RlsServer(const http::FrontendHolder* frontend, http::HttpMetrics* http_metrics,
                     const registry::Index* index, metrics::Registry* metrics,
                     std::vector<boost::asio::io_context*> loops, RlsServerOptions options)
    : service_(std::make_unique<RateLimitServiceImpl>(frontend, http_metrics, index, metrics,
                                                      std::move(loops), options)),
      max_message_bytes_(options.max_message_bytes) {}

RlsServer::~RlsServer() {
  if (server_ != nullptr) FinishShutdown();
}

namespace {

// Calls each completion queue keeps requested: a burst of new calls beyond it waits in gRPC's
// queue until a call's first event re-arms one.
constexpr int kArmedPerQueue = 16;

void DrainAndDrop(std::vector<std::unique_ptr<grpc::ServerCompletionQueue>>& cqs) {
  for (auto& cq : cqs) {
    cq->Shutdown();
    void* tag = nullptr;
    bool ok = false;
    while (cq->Next(&tag, &ok)) {
    }
  }
  cqs.clear();
}

}  // namespace

absl::Status RlsServer::Start(const std::string& address) {
  gpr_set_log_function(&LogGrpc);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &port_);
  builder.SetMaxReceiveMessageSize(max_message_bytes_);
  // gRPC sets SO_REUSEPORT by default: a second sluice on the same address would then share the
  // port silently and see half of the calls (and, with the memory store, double every quota).
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.RegisterAsyncGenericService(service_->generic());
  // Neither is of use here, and both cost on every call: channelz's per-call accounting (sluice
  // serves no channelz service) and BDP pings, which size flow-control windows for bulk transfers
  // (a call here is a few hundred bytes each way).
  builder.AddChannelArgument(GRPC_ARG_ENABLE_CHANNELZ, 0);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  // One completion queue per event loop, each with a thread of its own.
  const size_t queues = std::max<size_t>(service_->loop_count(), 1);
  for (size_t i = 0; i < queues; ++i) {
    cqs_.push_back(builder.AddCompletionQueue());
  }
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port_ == 0) {
    if (server_ != nullptr) server_->Shutdown();
    server_.reset();
    DrainAndDrop(cqs_);
    return absl::UnavailableError(absl::StrCat("cannot listen on ", address, " (gRPC)"));
  }
  for (auto& cq : cqs_) {
    for (int i = 0; i < kArmedPerQueue; ++i) service_->Arm(cq.get());
    pollers_.emplace_back([service = service_.get(), cq = cq.get()] {
      pthread_setname_np(pthread_self(), "sluice-grpc");
      service->Poll(cq);
    });
  }
  return absl::OkStatus();
}

void RlsServer::BeginShutdown(absl::Time deadline) {
  if (server_ == nullptr || shutdown_.joinable()) return;
  shutdown_ = std::thread(
      [server = server_.get(), deadline] { server->Shutdown(absl::ToChronoTime(deadline)); });
}

void RlsServer::FinishShutdown() {
  if (server_ == nullptr) return;
  BeginShutdown(absl::Now());
  shutdown_.join();
  server_->Wait();
  // The server is shut down: armed requests come back failed, calls cancelled at the deadline
  // still finish (their decisions end on the loops); then nothing can reach the queues any more.
  service_->WaitForCalls();
  for (auto& cq : cqs_) cq->Shutdown();
  for (std::thread& t : pollers_) t.join();
  pollers_.clear();
  server_.reset();
  cqs_.clear();
}

int64_t RlsServer::in_flight() const { return service_->in_flight(); }

void RlsServer::SetRules(std::shared_ptr<const RlRuleSet> rules) {
  service_->SetRules(std::move(rules));
}

}  // namespace sluice::rls
