#include "sluice/grpc/rls_server.h"

#include <grpc/support/log.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <utility>

#include <boost/asio/post.hpp>

#include "absl/strings/str_cat.h"
#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "sluice/common/log.h"
#include "sluice/common/strings.h"
#include "sluice/grpc/mapping.h"
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

class RateLimitServiceImpl final : public rlsv3::RateLimitService::CallbackService {
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
            "key), or the gRPC error (invalid_argument, resource_exhausted).",
            {"code"})),
        ok_(requests_.WithLabels({"ok"})),
        over_limit_(requests_.WithLabels({"over_limit"})),
        invalid_(requests_.WithLabels({"invalid_argument"})),
        exhausted_(requests_.WithLabels({"resource_exhausted"})) {}

  grpc::ServerUnaryReactor* ShouldRateLimit(grpc::CallbackServerContext* ctx,
                                            const rlsv3::RateLimitRequest* req,
                                            rlsv3::RateLimitResponse* res) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    if (in_flight_.fetch_add(1) >= options_.max_in_flight) {
      exhausted_.Inc();
      Finish(reactor, grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                   "too many rate limit calls in flight"));
      return reactor;
    }
    std::shared_ptr<const http::Frontend> fe = frontend_->Get();
    absl::StatusOr<Query> query = ParseRequest(*req, fe->envoy.descriptor_keys);
    if (!query.ok()) {
      invalid_.Inc();
      Finish(reactor, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                   std::string(query.status().message())));
      return reactor;
    }
    // A Redis decision starts on an event loop's thread (its connection is that loop's).
    boost::asio::io_context* loop =
        loops_[next_loop_.fetch_add(1, std::memory_order_relaxed) % loops_.size()];
    boost::asio::post(
        *loop, [this, fe = std::move(fe), query = *std::move(query), reactor, res]() mutable {
          Decide(std::move(fe), std::move(query), reactor, res);
        });
    return reactor;
  }

  [[nodiscard]] int64_t in_flight() const { return in_flight_.load(); }

 private:
  // What a decision in flight keeps alive: the Frontend (its Limiter's plans) and the target (its
  // effective plan), both referred to by the Decision.
  struct Call {
    std::shared_ptr<const http::Frontend> fe;
    Query query;
    http::Target target;
    std::chrono::steady_clock::time_point start;
  };

  void Finish(grpc::ServerUnaryReactor* reactor, grpc::Status status) {
    in_flight_.fetch_sub(1);
    reactor->Finish(std::move(status));
  }

  // On an event loop: resolves who is asking, as /v1/authorize and /v1/check do, and decides.
  void Decide(std::shared_ptr<const http::Frontend> fe, Query query,
              grpc::ServerUnaryReactor* reactor, rlsv3::RateLimitResponse* res) {
    auto call = std::make_shared<Call>();
    call->fe = std::move(fe);
    call->query = std::move(query);
    const http::Frontend& frontend = *call->fe;
    const absl::Time now = frontend.limiter->clock().Now();
    http::Refusal refusal;
    const bool resolved =
        !call->query.api_key.empty()
            ? http::ResolveKey(frontend, index_, call->query.api_key, now, &call->target, &refusal)
            : http::ResolveSubject(frontend, index_, call->query.subject, call->query.plan, now,
                                   &call->target, &refusal);
    if (!resolved) {
      if (refusal.status == 400) {
        invalid_.Inc();
        Finish(reactor, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, refusal.detail));
        return;
      }
      *res = RefusalResponse(refusal, call->query.descriptors);
      over_limit_.Inc();
      Finish(reactor, grpc::Status::OK);
      return;
    }
    call->start = std::chrono::steady_clock::now();
    const DecisionRequest request{.subject = call->target.subject,
                                  .plan = call->target.plan,
                                  .cost = call->query.cost,
                                  .effective_plan = call->target.effective};
    frontend.limiter->Decide(request, [this, call, reactor, res](absl::StatusOr<Decision> d) {
      http_metrics_->ObserveDecisionSeconds(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - call->start).count());
      if (!d.ok()) {
        // A subject or plan the limiter refuses (the message names the field).
        invalid_.Inc();
        Finish(reactor,
               grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, std::string(d.status().message())));
        return;
      }
      http_metrics_->CountDecision(call->target.plan, *d);
      *res = DecisionResponse(*d, call->query.descriptors,
                              {.subject = call->target.subject, .plan = call->target.plan});
      (d->allowed ? ok_ : over_limit_).Inc();
      Finish(reactor, grpc::Status::OK);
    });
  }

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
  std::atomic<int64_t> in_flight_{0};
  std::atomic<size_t> next_loop_{0};
};

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
  builder.RegisterService(service_.get());
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

}  // namespace sluice::rls
