#include "sluice/grpc/rls_server.h"

#include <grpc/support/log.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/proto_utils.h>

#include <chrono>
#include <utility>

#include <boost/asio/post.hpp>

#include "absl/strings/str_cat.h"
#include "envoy/service/ratelimit/v3/rls.pb.h"
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
class RateLimitServiceImpl final : public grpc::CallbackGenericService {
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
            "key), or the gRPC error (invalid_argument, resource_exhausted, unimplemented).",
            {"code"})),
        ok_(requests_.WithLabels({"ok"})),
        over_limit_(requests_.WithLabels({"over_limit"})),
        invalid_(requests_.WithLabels({"invalid_argument"})),
        exhausted_(requests_.WithLabels({"resource_exhausted"})),
        unimplemented_(requests_.WithLabels({"unimplemented"})),
        rule_hits_(metrics->AddCounterFamily(
            "sluice_ratelimit_rule_hits_total",
            "Rules of envoy.ratelimit_config decided, by domain, rule (its descriptor path, as "
            "envoyproxy/ratelimit names it in its stats) and result (ok, over_limit, "
            "shadow_over_limit).",
            {"domain", "rule", "result"})) {}

  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* ctx) override;

  [[nodiscard]] int64_t in_flight() const { return in_flight_.load(); }

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

  // On a gRPC thread: checks the request, then hands the decision to an event loop.
  void Handle(RlsCall* call, const rlsv3::RateLimitRequest& req);
  // On an event loop: resolves who is asking, as /v1/authorize and /v1/check do, and decides.
  void Decide(RlsCall* call, std::shared_ptr<const http::Frontend> fe, Query query);
  // On an event loop: decides every counter of an envoy.ratelimit_config request as one group.
  void DecideRules(RlsCall* call, std::shared_ptr<RlDecision> state);
  // Counts the rules of a decided request in sluice_ratelimit_rule_hits_total.
  void CountRules(const RlQuery& q, const std::vector<sluice::Decision>& decisions);

  const http::FrontendHolder* frontend_;
  http::HttpMetrics* http_metrics_;
  const registry::Index* index_;
  std::vector<boost::asio::io_context*> loops_;
  RlsServerOptions options_;
  metrics::CounterFamily& requests_;
  metrics::Counter& ok_;
  metrics::Counter& over_limit_;
  metrics::Counter& invalid_;
  metrics::Counter& exhausted_;
  metrics::Counter& unimplemented_;
  metrics::CounterFamily& rule_hits_;
  std::atomic<std::shared_ptr<const RlRuleSet>> rules_;
  std::atomic<int64_t> in_flight_{0};
  std::atomic<size_t> next_loop_{0};
};

// One ShouldRateLimit call: reads the one request message, answers once. Deletes itself when gRPC
// is done with it (after Reply or Fail, which every path reaches exactly once).
class RlsCall final : public grpc::ServerGenericBidiReactor {
 public:
  static constexpr std::string_view kMethod =
      "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

  RlsCall(RateLimitServiceImpl* service, const grpc::GenericCallbackServerContext& ctx)
      : service_(service) {
    if (ctx.method() != kMethod) {
      service_->unimplemented_.Inc();
      Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                          absl::StrCat("sluice serves only ", ToAbsl(kMethod))));
      return;
    }
    counted_ = true;
    if (service_->in_flight_.fetch_add(1) >= service_->options_.max_in_flight) {
      service_->exhausted_.Inc();
      Fail(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        "too many rate limit calls in flight"));
      return;
    }
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      service_->invalid_.Inc();
      Fail(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "request: no message"));
      return;
    }
    rlsv3::RateLimitRequest req;
    if (!grpc::SerializationTraits<rlsv3::RateLimitRequest>::Deserialize(&request_, &req).ok()) {
      service_->invalid_.Inc();
      Fail(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "request: not a valid envoy.service.ratelimit.v3.RateLimitRequest"));
      return;
    }
    service_->Handle(this, req);
  }

  void Reply(const rlsv3::RateLimitResponse& res) {
    bool own = false;
    grpc::Status s =
        grpc::SerializationTraits<rlsv3::RateLimitResponse>::Serialize(res, &response_, &own);
    if (!s.ok()) {
      Fail(std::move(s));
      return;
    }
    Done();
    StartWriteAndFinish(&response_, grpc::WriteOptions(), grpc::Status::OK);
  }

  void Fail(grpc::Status status) {
    Done();
    Finish(std::move(status));
  }

  void OnDone() override { delete this; }

 private:
  void Done() {
    if (counted_) service_->in_flight_.fetch_sub(1);
    counted_ = false;
  }

  RateLimitServiceImpl* service_;
  bool counted_ = false;  // in in_flight_
  grpc::ByteBuffer request_;
  grpc::ByteBuffer response_;
};

grpc::ServerGenericBidiReactor* RateLimitServiceImpl::CreateReactor(
    grpc::GenericCallbackServerContext* ctx) {
  return new RlsCall(this, *ctx);
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
    const std::string_view result = l.violated     ? "over_limit"
                                    : l.would_deny ? "shadow_over_limit"
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

absl::Status RlsServer::Start(const std::string& address) {
  gpr_set_log_function(&LogGrpc);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &port_);
  builder.SetMaxReceiveMessageSize(max_message_bytes_);
  // gRPC sets SO_REUSEPORT by default: a second sluice on the same address would then share the
  // port silently and see half of the calls (and, with the memory store, double every quota).
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.RegisterCallbackGenericService(service_.get());
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port_ == 0) {
    server_.reset();
    return absl::UnavailableError(absl::StrCat("cannot listen on ", address, " (gRPC)"));
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
  server_.reset();
}

int64_t RlsServer::in_flight() const { return service_->in_flight(); }

void RlsServer::SetRules(std::shared_ptr<const RlRuleSet> rules) {
  service_->SetRules(std::move(rules));
}

}  // namespace sluice::rls
