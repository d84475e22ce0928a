#include "sluice/http/routes.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <utility>

#include <boost/beast/http/field.hpp>
#include <boost/beast/http/verb.hpp>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "sluice/common/log.h"
#include "sluice/common/strings.h"
#include "sluice/frontend/cost.h"
#include "sluice/frontend/decide.h"
#include "sluice/frontend/resolve.h"
#include "sluice/http/await.h"
#include "sluice/http/check_body.h"
#include "sluice/http/registry_api.h"
#include "sluice/http/render.h"
#include "sluice/limiter/algorithm.h"
#include "sluice/registry/effective_plan.h"
#include "sluice/registry/index.h"
#include "sluice/registry/keys.h"

namespace sluice::http {
namespace asio = boost::asio;
namespace bhttp = boost::beast::http;
using Json = nlohmann::json;

namespace {

constexpr std::string_view kBadRequest = "about:blank";
constexpr std::string_view kReservationsPrefix = "/v1/reservations/";

std::string_view Sv(boost::beast::string_view s) { return {s.data(), s.size()}; }

Response BadRequest(std::string_view detail, unsigned version) {
  return Problem(400, kBadRequest, "Bad Request", detail, version, true);
}

Response MethodNotAllowed(std::string_view allow, unsigned version) {
  Response res = Problem(405, kBadRequest, "Method Not Allowed",
                         absl::StrCat("use ", ToAbsl(allow)), version, true);
  res.set(bhttp::field::allow, std::string(allow));
  return res;
}

Response NotFound(unsigned version) {
  return Problem(404, kBadRequest, "Not Found", "no such endpoint", version, true);
}

Response Unauthorized(std::string_view detail, unsigned version) {
  Response res = Problem(401, kBadRequest, "Unauthorized", detail, version, true);
  res.set(bhttp::field::www_authenticate, "Bearer");
  return res;
}

// Input errors from the Limiter name the field; both kinds are the client's to fix.
Response LimiterError(const absl::Status& s, unsigned version) {
  return BadRequest(ToStd(s.message()), version);
}

// The start function for AwaitCallback that asks `limiter` to decide `req`. (A coroutine wrapper
// would cost one more coroutine frame per request, and wrapping `done` in a larger callback an
// allocation.)
auto StartDecide(const Limiter& limiter, DecisionRequest req) {
  return [&limiter, req](DecisionCallback done) { limiter.Decide(req, std::move(done)); };
}

// Likewise for reservations.
auto StartReserve(const Limiter& limiter, ReserveRequest req) {
  return [&limiter, req](ReserveCallback done) { limiter.Reserve(req, std::move(done)); };
}
auto StartSettle(const Limiter& limiter, SettleRequest req) {
  return [&limiter, req](SettleDecisionCallback done) { limiter.Settle(req, std::move(done)); };
}
auto StartExtend(const Limiter& limiter, std::string_view id, absl::Duration ttl) {
  return [&limiter, id, ttl](ExtendCallback done) { limiter.Extend(id, ttl, std::move(done)); };
}

// The answer to a reservation call the store cannot keep (a store without reservations).
Response NotImplemented(const absl::Status& s, unsigned version) {
  return Problem(501, kBadRequest, "Not Implemented", ToStd(s.message()), version, true);
}

// The store holds as many reservations as it may: 503 with Retry-After, as for any overload.
Response TooManyReservations(const absl::Status& s, const Request& req) {
  Response res =
      Problem(503, kBadRequest, "Service Unavailable", ToStd(s.message()), req.version(), true);
  res.set(bhttp::field::retry_after, "1");
  return res;
}

Response UnknownReservation(unsigned version) {
  return Problem(404, kBadRequest, "Not Found",
                 "no such reservation (never made, or ended more than 10 minutes after it expired)",
                 version, true);
}

// How many field lines named `name` the request carries.
size_t CountFields(const Request& req, std::string_view name) {
  auto range = req.equal_range(boost::beast::string_view(name.data(), name.size()));
  return static_cast<size_t>(std::distance(range.first, range.second));
}

// Every field line named `name`, joined with `separator` ("," makes one list, RFC 9110 §5.3).
std::string JoinFields(const Request& req, std::string_view name, char separator = ',') {
  std::string joined;
  auto range = req.equal_range(boost::beast::string_view(name.data(), name.size()));
  for (auto it = range.first; it != range.second; ++it) {
    if (it != range.first) joined += separator;
    joined += Sv(it->value());
  }
  return joined;
}

// The API key of an /v1/authorize request: the configured header, else `Authorization: Bearer`.
std::string_view PresentedKey(const Request& req, const std::string& header) {
  auto it = req.find(header);
  if (it != req.end() && !it->value().empty()) return Sv(it->value());
  auto auth = req.find(bhttp::field::authorization);
  if (auth != req.end()) return BearerToken(Sv(auth->value()));
  return {};
}

// Envoy's ext_authz forwards the client's method and path below `http_service.path_prefix`, so
// the gateway route decides every method a client is likely to use, alike (a body is read within
// the limits and ignored; HEAD answers carry no body, see server.cc).
constexpr std::string_view kAuthorizeMethods = "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS";

bool IsAuthorizeMethod(bhttp::verb method) {
  switch (method) {
    case bhttp::verb::get:
    case bhttp::verb::head:
    case bhttp::verb::post:
    case bhttp::verb::put:
    case bhttp::verb::patch:
    case bhttp::verb::delete_:
    case bhttp::verb::options:
      return true;
    default:
      return false;
  }
}

// The prefix itself or any path below it ("<prefix>/orders"), never "<prefix>x".
bool IsAuthorizePath(std::string_view path, std::string_view prefix) {
  return path.starts_with(prefix) && (path.size() == prefix.size() || path[prefix.size()] == '/');
}

Response Forbidden(std::string_view detail, unsigned version) {
  return Problem(403, kBadRequest, "Forbidden", detail, version, true);
}

// The answer to a request resolve.h refused.
Response RefusalResponse(const frontend::Refusal& r, unsigned version) {
  return Render(frontend::RefusalAnswer(r, {.denied_header = true}), version, true);
}

}  // namespace

std::pair<std::string_view, std::string_view> SplitTarget(std::string_view target) {
  size_t q = target.find('?');
  if (q == std::string_view::npos) return {target, {}};
  return {target.substr(0, q), target.substr(q + 1)};
}

std::optional<std::string> QueryParam(std::string_view query, std::string_view name) {
  while (!query.empty()) {
    size_t amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    size_t eq = pair.find('=');
    if (pair.substr(0, eq) != name) continue;
    std::string value;
    if (eq == std::string_view::npos) return value;
    if (!PercentDecode(pair.substr(eq + 1), &value)) return std::nullopt;
    return value;
  }
  return std::nullopt;
}

std::optional<std::string_view> RepeatedParam(std::string_view query) {
  // Queries are short (the request target is bounded by the header block): pairwise is enough,
  // but bounded all the same.
  std::vector<std::string_view> names;
  while (!query.empty() && names.size() < 64) {
    const size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    const std::string_view name = pair.substr(0, pair.find('='));
    if (std::find(names.begin(), names.end(), name) != names.end()) return name;
    names.push_back(name);
  }
  return std::nullopt;
}

bool PercentDecode(std::string_view in, std::string* out) {
  out->clear();
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out->push_back(in[i]);
      continue;
    }
    if (i + 2 >= in.size()) return false;
    auto hex = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    int hi = hex(in[i + 1]), lo = hex(in[i + 2]);
    if (hi < 0 || lo < 0) return false;
    out->push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return true;
}

std::string_view BearerToken(std::string_view authorization) {
  constexpr std::string_view kScheme = "bearer";
  if (authorization.size() <= kScheme.size()) return {};
  for (size_t i = 0; i < kScheme.size(); ++i) {
    const char c = authorization[i];
    if ((c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c) != kScheme[i]) return {};
  }
  std::string_view rest = authorization.substr(kScheme.size());
  if (rest.front() != ' ') return {};  // "Bearerx": another scheme
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  while (!rest.empty() && (rest.back() == ' ' || rest.back() == '\t')) rest.remove_suffix(1);
  return rest;
}

const AdminToken* MatchAdminToken(std::string_view authorization,
                                  const std::vector<AdminToken>& tokens) {
  if (tokens.empty()) return nullptr;
  return frontend::MatchToken(BearerToken(authorization), tokens);
}

asio::awaitable<Response> DataPlane::Handle(Request& req, Peer& peer) {
  std::shared_ptr<const Frontend> fe = frontend_->Get();
  auto [path, query] = SplitTarget(Sv(req.target()));
  (void)query;
  std::string_view route = "other";
  Response res;
  // The access log's whole cost when it is off: this branch and the one below (the entry is
  // allocated only when it is on, so that it does not grow every request's coroutine frame).
  std::unique_ptr<AccessEntry> access;
  std::chrono::steady_clock::time_point received;
  if (fe->server.access_log.mode != config::AccessLogMode::kOff) [[unlikely]] {
    access = std::make_unique<AccessEntry>();
    received = std::chrono::steady_clock::now();
  }
  AccessEntry* entry = access.get();
  if (path == "/v1/check") {
    route = path;
    // Plain if/else: GCC 12 miscompiles co_await inside a conditional expression.
    if (req.method() == bhttp::verb::post) {
      res = co_await Check(*fe, req, entry);
    } else {
      res = MethodNotAllowed("POST", req.version());
    }
  } else if (path == "/v1/reserve") {
    route = path;
    if (req.method() == bhttp::verb::post) {
      res = co_await Reserve(*fe, req, entry);
    } else {
      res = MethodNotAllowed("POST", req.version());
    }
  } else if (path.starts_with(kReservationsPrefix)) {
    route = "/v1/reservations";
    res = co_await Reservation(*fe, req, path.substr(kReservationsPrefix.size()));
  } else if (IsAuthorizePath(path, fe->server.authorize_prefix)) {
    route = "/v1/authorize";  // whatever the prefix and the path below it: one label
    if (IsAuthorizeMethod(req.method())) {
      res = co_await Authorize(*fe, req, peer, entry);
    } else {
      res = MethodNotAllowed(kAuthorizeMethods, req.version());
    }
  } else {
    res = NotFound(req.version());
  }
  if (entry != nullptr && entry->decided) [[unlikely]] {
    entry->route = route;
    LogAccess(*fe, req, peer, res.result_int(), received, *entry);
  }
  metrics_->CountRequest(route, res.result_int());
  co_return res;
}

namespace {

// Fills `entry` from a decision (the caller adds route, status, client and latency).
void DescribeDecision(const frontend::Target& target, int64_t cost, const Decision& d,
                      AccessEntry* entry) {
  entry->decided = true;
  entry->subject = target.subject;
  entry->plan = target.plan;
  entry->key_id = target.key_id;
  entry->cost = cost;
  entry->allowed = d.allowed;
  entry->degraded = d.degraded;
  entry->failure = d.failure;
  for (const LimitDecision& l : d.limits) {
    if (l.would_deny && l.limit != nullptr) entry->shadow_denied.push_back(l.limit->name);
  }
  for (const LimitDecision& l : d.limits) {
    if (!l.violated || l.limit == nullptr) continue;
    entry->limit = l.limit->name;
    entry->window = l.limit->window.text;
    entry->used = l.used;
    entry->quota = l.limit->quota;
    entry->retry_after = d.retry_after;
    break;
  }
}

}  // namespace

void DataPlane::LogAccess(const Frontend& fe, const Request& req, const Peer& peer, unsigned status,
                          std::chrono::steady_clock::time_point received, AccessEntry& entry) {
  const config::AccessLogConfig& cfg = fe.server.access_log;
  if (!access_log_.Wants(cfg, entry.allowed, entry.degraded)) return;
  const auto now = std::chrono::steady_clock::now();
  const int64_t second =
      std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count();
  if (!access_log_.Admit(cfg.max_per_second, second)) return;
  entry.status = status;
  entry.latency_us = std::chrono::duration_cast<std::chrono::microseconds>(now - received).count();
  entry.client = fe.proxies.ClientAddress(peer.address, JoinFields(req, "X-Forwarded-For"),
                                          JoinFields(req, "Forwarded", '\n'));
  AccessLog::Write(entry);
}

bool DataPlane::ResolveBody(const Frontend& fe, CheckBody& body, frontend::Target* target,
                            frontend::Refusal* refusal) const {
  const absl::Time now = fe.limiter->clock().Now();
  return !body.api_key.empty()
             ? frontend::ResolveKey(fe, registry_, body.api_key, now, target, refusal)
             : frontend::ResolveSubject(fe, registry_, std::move(body.subject),
                                        std::move(body.plan), now, target, refusal);
}

asio::awaitable<Response> DataPlane::Check(const Frontend& fe, Request& req, AccessEntry* access) {
  absl::StatusOr<CheckBody> body = ParseCheckBody(req.body());
  if (!body.ok()) co_return BadRequest(ToStd(body.status().message()), req.version());
  frontend::Target target;
  frontend::Refusal refusal;
  if (!ResolveBody(fe, *body, &target, &refusal)) {
    co_return RefusalResponse(refusal, req.version());
  }
  const frontend::DecisionTimer timer = frontend::DecisionTimer::Start();
  absl::StatusOr<Decision> d = co_await AwaitCallback<absl::StatusOr<Decision>>(
      StartDecide(*fe.limiter, frontend::RequestFor(target, body->cost)));
  frontend::Record(*metrics_, fe, target.plan, timer, d);
  if (!d.ok()) co_return LimiterError(d.status(), req.version());
  if (access != nullptr) DescribeDecision(target, body->cost, *d, access);

  Response res = JsonResponse(200, DecisionJson(*d, target.subject), req.version(), true);
  SetRateLimitHeaders(*d, res);
  co_return res;
}

asio::awaitable<Response> DataPlane::Reserve(const Frontend& fe, Request& req,
                                             AccessEntry* access) {
  absl::StatusOr<CheckBody> body = ParseCheckBody(req.body(), BodyOf::kReserve);
  if (!body.ok()) co_return BadRequest(ToStd(body.status().message()), req.version());
  frontend::Target target;
  frontend::Refusal refusal;
  if (!ResolveBody(fe, *body, &target, &refusal)) {
    co_return RefusalResponse(refusal, req.version());
  }
  const frontend::DecisionTimer timer = frontend::DecisionTimer::Start();
  // The body's cost is the estimate: held, not charged, until the reservation ends.
  absl::StatusOr<ReserveDecision> r =
      co_await AwaitCallback<absl::StatusOr<ReserveDecision>>(StartReserve(
          *fe.limiter,
          {.decision = frontend::RequestFor(target, 0), .hold = body->cost, .ttl = body->ttl}));
  if (!r.ok()) {
    if (absl::IsUnimplemented(r.status())) co_return NotImplemented(r.status(), req.version());
    if (absl::IsResourceExhausted(r.status())) co_return TooManyReservations(r.status(), req);
    co_return LimiterError(r.status(), req.version());
  }
  frontend::Record(*metrics_, fe, target.plan, timer, r->decision);
  if (access != nullptr) DescribeDecision(target, body->cost, r->decision, access);
  Response res = JsonResponse(200, ReserveJson(*r, target.subject), req.version(), true);
  SetRateLimitHeaders(r->decision, res);
  co_return res;
}

asio::awaitable<Response> DataPlane::Reservation(const Frontend& fe, Request& req,
                                                 std::string_view rest) {
  // {id}, {id}/settle or {id}/extend.
  std::string_view id = rest;
  std::string_view action;
  if (const size_t slash = rest.find('/'); slash != std::string_view::npos) {
    id = rest.substr(0, slash);
    action = rest.substr(slash + 1);
  }
  const bool known_action = action.empty() || action == "settle" || action == "extend";
  if (id.empty() || !known_action) co_return NotFound(req.version());
  const std::string_view allowed = action.empty() ? "DELETE" : "POST";
  if ((action.empty() && req.method() != bhttp::verb::delete_) ||
      (!action.empty() && req.method() != bhttp::verb::post)) {
    co_return MethodNotAllowed(allowed, req.version());
  }
  const std::optional<ReservationRef> ref = ParseReservationId(id);
  if (!ref.has_value()) co_return UnknownReservation(req.version());

  if (action == "extend") {
    absl::StatusOr<absl::Duration> ttl = ParseExtendBody(req.body());
    if (!ttl.ok()) co_return BadRequest(ToStd(ttl.status().message()), req.version());
    absl::StatusOr<StoreExtendResult> e = co_await AwaitCallback<absl::StatusOr<StoreExtendResult>>(
        StartExtend(*fe.limiter, id, *ttl));
    if (!e.ok()) {
      if (absl::IsUnimplemented(e.status())) co_return NotImplemented(e.status(), req.version());
      co_return LimiterError(e.status(), req.version());
    }
    switch (e->outcome) {
      case StoreExtendResult::Outcome::kExtended:
        co_return JsonResponse(
            200,
            Json{{"reservation", std::string(id)}, {"expires_at", FormatTimestamp(e->expires_at)}}
                .dump(),
            req.version(), true);
      case StoreExtendResult::Outcome::kEnded:
        co_return Problem(404, kBadRequest, "Not Found",
                          "the reservation has ended: it can no longer be extended", req.version(),
                          true);
      case StoreExtendResult::Outcome::kNotFound:
        break;
    }
    co_return UnknownReservation(req.version());
  }

  SettleRequest settle{.id = id, .end = ReservationEnd::kRelease};
  if (action == "settle") {
    absl::StatusOr<int64_t> cost = ParseSettleBody(req.body());
    if (!cost.ok()) co_return BadRequest(ToStd(cost.status().message()), req.version());
    settle.cost = *cost;
    settle.end = ReservationEnd::kSettle;
  }
  // The subject's plan now: a registry subject's own (with its overrides), else the plan the
  // reservation was made under.
  frontend::Target target;
  frontend::Refusal refusal;
  if (frontend::ResolveSubject(fe, registry_, ref->subject, "", fe.limiter->clock().Now(), &target,
                               &refusal) &&
      target.effective != nullptr) {
    settle.effective_plan = target.effective;
  } else {
    settle.effective_plan = fe.limiter->plans().Find(ref->plan);
  }
  absl::StatusOr<SettleDecision> s =
      co_await AwaitCallback<absl::StatusOr<SettleDecision>>(StartSettle(*fe.limiter, settle));
  if (!s.ok()) {
    if (absl::IsUnimplemented(s.status())) co_return NotImplemented(s.status(), req.version());
    co_return LimiterError(s.status(), req.version());
  }
  using Outcome = StoreSettleResult::Outcome;
  switch (s->outcome) {
    case Outcome::kNotFound:
    case Outcome::kNotDue:
      co_return UnknownReservation(req.version());
    case Outcome::kConflict:
      // Settled with another cost (or settled, for a release): a conflict. Expired or released:
      // there is no reservation left to end.
      if (s->ended_by == ReservationEnd::kSettle) {
        co_return Problem(409, kBadRequest, "Conflict",
                          absl::StrCat("the reservation was settled with cost ", s->charged),
                          req.version(), true);
      }
      co_return Problem(404, kBadRequest, "Not Found",
                        absl::StrCat("the reservation has ended: it was ",
                                     ToAbsl(ReservationEndName(s->ended_by))),
                        req.version(), true);
    case Outcome::kEnded:
      metrics_->CountEnded(settle.end, s->decision);
      [[fallthrough]];
    case Outcome::kRepeated:
      break;
  }
  if (settle.end == ReservationEnd::kRelease) {
    Response res;
    res.result(bhttp::status::no_content);
    res.version(req.version());
    res.keep_alive(true);
    co_return res;
  }
  co_return JsonResponse(200, SettleJson(*s, id, ref->subject), req.version(), true);
}

asio::awaitable<Response> DataPlane::Authorize(const Frontend& fe, Request& req, const Peer& peer,
                                               AccessEntry* access) {
  // Two of these in one request: a gateway and sluice might each read a different one.
  if (CountFields(req, "Sluice-Cost") > 1) {
    co_return BadRequest("more than one Sluice-Cost header", req.version());
  }
  int64_t cost = 1;
  if (auto it = req.find("Sluice-Cost"); it != req.end()) {
    absl::StatusOr<int64_t> parsed = ParseCostHeader(Sv(it->value()));
    if (!parsed.ok()) co_return BadRequest(ToStd(parsed.status().message()), req.version());
    cost = *parsed;
    // A peek through a gateway would let a client that forges the header pass without being
    // counted; /v1/authorize always consumes. (POST /v1/check with cost 0 peeks.)
    if (cost == 0) {
      co_return BadRequest(
          "Sluice-Cost: must be from 1 to 1000000 on /v1/authorize "
          "(peek with POST /v1/check and cost 0)",
          req.version());
    }
  }
  // Two credentials in one request: a gateway and sluice might each read a different one.
  if (CountFields(req, fe.server.api_key_header) > 1 || CountFields(req, "Authorization") > 1) {
    co_return BadRequest(
        absl::StrCat("more than one ", fe.server.api_key_header, " or Authorization header"),
        req.version());
  }
  frontend::Target target;
  const std::string_view key = PresentedKey(req, fe.server.api_key_header);
  if (key.empty() && req.find(bhttp::field::authorization) != req.end()) {
    // Credentials sluice cannot read are not "no credentials": the client is not anonymous.
    co_return Unauthorized("Authorization: want \"Bearer <API key>\"", req.version());
  }
  if (!key.empty()) {
    frontend::Refusal refusal;
    if (!frontend::ResolveKey(fe, registry_, key, fe.limiter->clock().Now(), &target, &refusal)) {
      co_return RefusalResponse(refusal, req.version());
    }
  } else if (!fe.server.anonymous_plan.empty()) {
    // Per network, not per address: an IPv6 client owns a /64 at least and could send each
    // request from another address of it.
    target.subject = absl::StrCat(
        "ip:",
        frontend::ClientNetwork(
            fe.proxies.Client(peer.address, JoinFields(req, "X-Forwarded-For"),
                              JoinFields(req, "Forwarded", '\n')),
            {.ipv4 = fe.server.anonymous_ipv4_prefix, .ipv6 = fe.server.anonymous_ipv6_prefix}));
    target.plan = fe.server.anonymous_plan;
  } else {
    co_return Unauthorized(absl::StrCat("missing API key (send ", fe.server.api_key_header,
                                        " or Authorization: Bearer)"),
                           req.version());
  }

  // Sluice-Reserve: <estimate> holds the estimate instead of charging the cost; Sluice-Lease: 1
  // charges the cost and takes a slot of every concurrent limit. Either answers the
  // reservation's id in Sluice-Reservation, for whoever settles or releases it.
  std::optional<int64_t> estimate;
  bool lease = false;
  if (CountFields(req, "Sluice-Reserve") > 1 || CountFields(req, "Sluice-Lease") > 1) {
    co_return BadRequest("more than one Sluice-Reserve or Sluice-Lease header", req.version());
  }
  if (auto it = req.find("Sluice-Reserve"); it != req.end()) {
    absl::StatusOr<int64_t> parsed = frontend::ParseCost(Sv(it->value()));
    if (!parsed.ok()) {
      co_return BadRequest(absl::StrCat("Sluice-Reserve: ", parsed.status().message()),
                           req.version());
    }
    estimate = *parsed;
  }
  if (auto it = req.find("Sluice-Lease"); it != req.end()) {
    if (Sv(it->value()) != "1") co_return BadRequest("Sluice-Lease: must be 1", req.version());
    lease = true;
  }

  const frontend::DecisionTimer timer = frontend::DecisionTimer::Start();
  absl::StatusOr<Decision> d;
  std::string reservation;
  if (estimate.has_value() || lease) [[unlikely]] {
    absl::StatusOr<ReserveDecision> r =
        co_await AwaitCallback<absl::StatusOr<ReserveDecision>>(StartReserve(
            *fe.limiter, {.decision = frontend::RequestFor(target, estimate.has_value() ? 0 : cost),
                          .hold = estimate.value_or(0)}));
    if (!r.ok() && absl::IsUnimplemented(r.status())) {
      co_return NotImplemented(r.status(), req.version());
    }
    if (!r.ok() && absl::IsResourceExhausted(r.status())) {
      co_return TooManyReservations(r.status(), req);
    }
    if (r.ok()) {
      reservation = std::move(r->id);
      d = std::move(r->decision);
    } else {
      d = r.status();
    }
  } else {
    d = co_await AwaitCallback<absl::StatusOr<Decision>>(
        StartDecide(*fe.limiter, frontend::RequestFor(target, cost)));
  }
  frontend::Record(*metrics_, fe, target.plan, timer, d);
  if (!d.ok()) co_return LimiterError(d.status(), req.version());
  if (access != nullptr) DescribeDecision(target, cost, *d, access);
  const std::string& subject = target.subject;
  const std::string& plan = target.plan;

  if (!d->allowed) {
    co_return Render(frontend::DenialAnswer(*d, {.subject = subject, .plan = plan},
                                            {.status = static_cast<unsigned>(fe.server.deny_status),
                                             .name_who = true,
                                             .denied_header = true}),
                     req.version(), true);
  }
  Response res;
  res.result(bhttp::status::ok);
  res.version(req.version());
  res.set("Sluice-Subject", subject);
  res.set("Sluice-Plan", plan);
  if (!reservation.empty()) res.set("Sluice-Reservation", reservation);
  SetRateLimitHeaders(*d, res);
  co_return res;
}

asio::awaitable<Response> AdminPlane::Handle(Request& req, Peer& peer) {
  Response res = co_await Route(req, peer);
  const std::string_view path = SplitTarget(Sv(req.target())).first;
  std::string_view route = "other";
  if (path.starts_with("/v1/usage/")) {
    route = "/v1/usage";
  } else if (path == "/metrics" || path == "/healthz" || path == "/readyz" ||
             path == "/v1/alerts/dead") {
    route = path;
  } else if (path == "/v1/subjects" || path.starts_with("/v1/subjects/")) {
    route = path.ends_with("/keys") ? "/v1/subjects/keys" : "/v1/subjects";
  } else if (path.starts_with("/v1/keys/")) {
    route = "/v1/keys";
  }
  metrics_->CountRequest(route, res.result_int());
  co_return res;
}

asio::awaitable<Response> AdminPlane::Route(Request& req, Peer& peer) {
  std::shared_ptr<const Frontend> fe = frontend_->Get();
  auto [path, query] = SplitTarget(Sv(req.target()));
  (void)query;
  const unsigned version = req.version();
  // HEAD is GET without the body (dropped in server.cc): every GET route answers it.
  const bool get = req.method() == bhttp::verb::get || req.method() == bhttp::verb::head;

  if (path == "/healthz") {
    if (!get) co_return MethodNotAllowed("GET, HEAD", version);
    if (options_.live && !options_.live()) {
      co_return JsonResponse(503, R"({"status":"stalled"})", version, true);
    }
    co_return JsonResponse(200, R"({"status":"ok"})", version, true);
  }
  if (path == "/readyz") {
    if (!get) co_return MethodNotAllowed("GET, HEAD", version);
    Response res = co_await Ready(*fe, req);
    co_return res;
  }
  const bool metrics_path = path == "/metrics";
  const bool dead_path = path == "/v1/alerts/dead" && options_.dead_letters != nullptr;
  constexpr std::string_view kUsagePrefix = "/v1/usage/";
  const bool usage_path = path.substr(0, kUsagePrefix.size()) == kUsagePrefix;
  const bool registry_path = options_.registry != nullptr && RegistryApi::Owns(path);
  if (!metrics_path && !usage_path && !dead_path && !registry_path) co_return NotFound(version);

  if (CountFields(req, "Authorization") > 1) {
    co_return BadRequest("more than one Authorization header", version);
  }
  std::string_view authorization;
  if (auto it = req.find(bhttp::field::authorization); it != req.end()) {
    authorization = Sv(it->value());
  }
  const AdminToken* token = MatchAdminToken(authorization, fe->admin_tokens);
  if (token == nullptr) {
    co_return Unauthorized(fe->admin_tokens.empty()
                               ? "no admin token is configured; admin endpoints are closed"
                               : "missing or wrong admin token",
                           version);
  }
  peer.authenticated = true;
  if (metrics_path) {
    if (!get) co_return MethodNotAllowed("GET, HEAD", version);
    Response res(bhttp::status::ok, version);
    res.set(bhttp::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
    res.body() = registry_->Render();
    co_return res;
  }
  if (dead_path) {
    if (!get) co_return MethodNotAllowed("GET, HEAD", version);
    co_return JsonResponse(200, options_.dead_letters(), version, true);
  }
  if (registry_path) {
    Response res = co_await options_.registry->Handle(*fe, req, *token, peer);
    co_return res;
  }
  if (!get && req.method() != bhttp::verb::delete_)
    co_return MethodNotAllowed("GET, HEAD, DELETE", version);
  if (!get && !token->write) {
    co_return Forbidden(absl::StrCat("the token \"", token->name,
                                     "\" is read-only; resetting usage needs access: write"),
                        version);
  }
  Response res = co_await Usage(*fe, req, path.substr(kUsagePrefix.size()));
  if (!get && res.result_int() == 200) {
    Log(LogLevel::kInfo, "usage reset")
        .Str("token", token->name)
        .Str("client", peer.address.to_string())
        .Str("target", registry::RedactKeys(Sv(req.target())));
  }
  co_return res;
}

asio::awaitable<Response> AdminPlane::Ready(const Frontend& fe, const Request& req) {
  const unsigned version = req.version();
  if (options_.stopping != nullptr && options_.stopping->load()) {
    co_return JsonResponse(503, R"({"status":"stopping"})", version, true);
  }
  absl::Status probed = absl::OkStatus();
  if (options_.probe_store) {
    probed = co_await AwaitCallback<absl::Status>(
        [this](StatusCallback done) { options_.probe_store(std::move(done)); });
  }
  StoreHealth& health = metrics_->store_health();
  health.Report(probed.ok(), StoreFailureOf(probed));
  const bool deny = fe.on_store_error == config::OnStoreError::kDeny;
  if (options_.index != nullptr && !options_.index->loaded()) {
    // Registry keys are answered 503 until it has loaded: like a failing store, unready under
    // deny, ready (and saying so) under allow.
    const Json body{{"status", deny ? "unready" : "ready"},
                    {"store", probed.ok() ? "ok" : "failing"},
                    {"registry", "loading"},
                    {"on_store_error", deny ? "deny" : "allow"}};
    co_return JsonResponse(deny ? 503 : 200, body.dump(), version, true);
  }
  if (probed.ok()) co_return JsonResponse(200, R"({"status":"ready","store":"ok"})", version, true);
  const Json body{{"status", deny ? "unready" : "ready"},
                  {"store", "failing"},
                  {"store_error", std::string(StoreFailureName(StoreFailureOf(probed)))},
                  {"on_store_error", deny ? "deny" : "allow"}};
  co_return JsonResponse(deny ? 503 : 200, body.dump(), version, true);
}

asio::awaitable<Response> AdminPlane::Usage(const Frontend& fe, const Request& req,
                                            std::string_view encoded_subject) {
  const unsigned version = req.version();
  auto [path, query] = SplitTarget(Sv(req.target()));
  (void)path;
  std::string subject;
  if (!PercentDecode(encoded_subject, &subject)) {
    co_return BadRequest("subject: bad percent-encoding", version);
  }
  if (std::optional<std::string_view> twice = RepeatedParam(query)) {
    co_return BadRequest(absl::StrCat(ToAbsl(*twice), ": given more than once"), version);
  }
  std::optional<std::string> plan = QueryParam(query, "plan");
  const Limiter& limiter = *fe.limiter;
  // Without a plan: the subject's own (the registry's, with its overrides; or the config file's).
  std::optional<Plan> effective_storage;
  const Plan* effective = nullptr;
  if (!plan || plan->empty()) {
    std::shared_ptr<const registry::Subject> record =
        options_.index != nullptr ? options_.index->FindSubject(subject) : nullptr;
    if (record != nullptr) {
      plan = record->plan;
      effective = registry::EffectivePlan(limiter.plans(), *record, limiter.clock().Now(),
                                          &effective_storage);
    } else if (const frontend::KeyEntry* entry = fe.keys.FindSubject(subject)) {
      plan = entry->plan;
    } else if (options_.index != nullptr && !options_.index->loaded()) {
      // A shared registry still loading (Redis unreachable at start): the subject may be in it.
      Response res = Problem(503, "about:blank", "Service Unavailable",
                             "the registry is still loading; retry shortly", version, true);
      res.set(bhttp::field::retry_after, "1");
      co_return res;
    } else {
      co_return BadRequest("plan: required query parameter (the subject is not in the registry)",
                           version);
    }
  }

  if (req.method() == bhttp::verb::delete_) {
    std::string limit = QueryParam(query, "limit").value_or("");
    absl::Status s = co_await AwaitCallback<absl::Status>(
        [&](StatusCallback done) { limiter.Reset(subject, *plan, limit, std::move(done)); });
    if (absl::IsInvalidArgument(s) || absl::IsNotFound(s)) {
      co_return BadRequest(ToStd(s.message()), version);
    }
    if (!s.ok()) {
      co_return Problem(503, "about:blank", "Service Unavailable", ToStd(s.message()), version,
                        true);
    }
    co_return JsonResponse(200, Json{{"subject", subject}, {"plan", *plan}, {"reset", true}}.dump(),
                           version, true);
  }

  absl::StatusOr<std::vector<LimitUsage>> usage =
      co_await AwaitCallback<absl::StatusOr<std::vector<LimitUsage>>>([&](UsageCallback done) {
        if (effective != nullptr) {
          limiter.Usage(subject, *effective, std::move(done));
        } else {
          limiter.Usage(subject, *plan, std::move(done));
        }
      });
  if (absl::IsInvalidArgument(usage.status()) || absl::IsNotFound(usage.status())) {
    co_return BadRequest(ToStd(usage.status().message()), version);
  }
  if (!usage.ok()) {
    co_return Problem(503, "about:blank", "Service Unavailable", ToStd(usage.status().message()),
                      version, true);
  }
  const Plan* p = effective != nullptr ? effective : limiter.plans().Find(*plan);
  const absl::Time now = limiter.clock().Now();
  Json limits = Json::array();
  for (size_t i = 0; i < p->limits.size(); ++i) {
    const Limit& l = p->limits[i];
    const WindowBounds w = WindowAt(l.window, p->tz, now);
    const LimitUsage& u = (*usage)[i];
    const UnitsView v = ViewOf(l, w, now, u.used, u.prev, u.held);
    limits.push_back(
        {{"name", l.name},
         {"quota", l.quota},
         {"used", v.used},
         {"held", u.held},
         {"remaining", v.remaining},
         {"reset_after", v.reset_after},
         {"window", l.window.text},
         {"window_start", absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", w.start, absl::UTCTimeZone())},
         {"window_end", absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", w.end, absl::UTCTimeZone())},
         {"alerts_fired", (*usage)[i].fired}});
  }
  co_return JsonResponse(
      200, Json{{"subject", subject}, {"plan", *plan}, {"limits", limits}}.dump(), version, true);
}

}  // namespace sluice::http
