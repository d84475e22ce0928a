// libFuzzer target for the request path: bytes -> Beast request_parser (the server's limits) ->
// DataPlane::Handle and AdminPlane::Handle -> serialized response, checked against invariants.
//
// The input is read as a connection's byte stream, the way HttpServer::Session reads it: requests
// are parsed one after another (pipelining) until the bytes run out, a parse error (answered with
// RequestHandler::Reject as the server does, then the connection ends) or a request that is not
// keep-alive. Every complete request goes through both planes. The raw input is also fed to the
// standalone parsers (ParseCheckBody, ParseCostHeader, PercentDecode, MatchAdminToken).
//
// The last input byte picks the variant (so one reproducer file always replays the same way):
//   bit 0:    which Frontend (A: anonymous plan, trusted proxies, admin token, deny 429;
//             B: none of those, deny 403, X-Custom-Key as the key header)
//   bits 1-2: the peer address (trusted proxy, untrusted IPv4, IPv6, IPv4-mapped IPv6)
// The store is emptied before every input, so the outcome depends on the input alone.
//
// A broken invariant prints what broke and calls __builtin_trap(). With SLUICE_FUZZ_VERBOSE set in
// the environment, each exchange is printed to stderr (for reading a reproducer).
#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>  // before awaitable.hpp (Boost 1.74 uses std::exchange without it)

#include <boost/asio/buffer.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/beast/core/buffer_traits.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/beast/http/string_body.hpp>
#include <nlohmann/json.hpp>

#include "sluice/common/clock.h"
#include "sluice/config/config.h"
#include "sluice/frontend/client_address.h"
#include "sluice/frontend/key_registry.h"
#include "sluice/http/check_body.h"
#include "sluice/http/routes.h"
#include "sluice/http/server.h"
#include "sluice/limiter/limiter.h"
#include "sluice/limiter/plan.h"
#include "sluice/metrics/metrics.h"
#include "sluice/store/memory/memory_store.h"

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using sluice::http::Peer;
using sluice::http::Request;
using sluice::http::Response;
using Json = nlohmann::json;

// The server's limits (ServerOptions defaults).
constexpr std::uint32_t kHeaderLimit = 8 * 1024;
constexpr std::uint64_t kBodyLimit = 64 * 1024;

constexpr std::string_view kAdminToken = "fuzz-admin-token";

// Two plans, three keys (one stored as SHA-256), an anonymous plan, trusted proxies, admin token.
// Small quotas, so that a handful of pipelined requests reaches a denial.
constexpr std::string_view kConfigA = R"yaml(
server:
  admin_token: "fuzz-admin-token"
  api_key_header: X-API-Key
  deny_status: 429
  anonymous_plan: free
  trusted_proxies: ["10.0.0.0/8", "fd00::/8", "192.0.2.1"]
plans:
  free:
    timezone: UTC
    limits:
      - { name: per_minute, quota: 3, window: 1m, alert_at: [50, 100] }
      - { name: daily, quota: 5, window: day, alert_at: [80] }
  pro:
    timezone: Europe/Berlin
    limits:
      - { name: per_second, quota: 2, window: 1s }
      - { name: daily, quota: 100, window: day }
      - { name: monthly, quota: 1000, window: month, alert_at: [50, 100] }
keys:
  - { key: free-key, subject: user-1, plan: free }
  - { key: pro-key, subject: user-2, plan: pro }
  - key_sha256: a4ae87b73fa5645e6aee415a6f72be4dcbd99d057a7b40cb1b867c181d179260  # "hashed-key"
    subject: user-3
    plan: pro
)yaml";

// No admin token (admin endpoints closed), no anonymous plan (401 without a key), no trusted
// proxies, a custom key header and 403 denials.
constexpr std::string_view kConfigB = R"yaml(
server:
  admin_token: ""
  api_key_header: X-Custom-Key
  deny_status: 403
plans:
  free:
    limits:
      - { name: per_minute, quota: 2, window: 1m }
  pro:
    timezone: America/New_York
    limits:
      - { name: per_hour, quota: 3, window: 1h, alert_at: [100] }
      - { name: monthly, quota: 10, window: month }
keys:
  - { key: free-key, subject: user-1, plan: free }
  - { key: pro-key, subject: user-2, plan: pro }
)yaml";

[[noreturn]] void Fail(const char* what, std::string_view detail = {}) {
  std::fprintf(stderr, "INVARIANT BROKEN: %s: %.*s\n", what, static_cast<int>(detail.size()),
               detail.data());
  __builtin_trap();
}

void Check(bool ok, const char* what, std::string_view detail = {}) {
  if (!ok) Fail(what, detail);
}

std::string_view Sv(beast::string_view s) { return {s.data(), s.size()}; }

bool Verbose() {
  static const bool verbose = std::getenv("SLUICE_FUZZ_VERBOSE") != nullptr;
  return verbose;
}

std::shared_ptr<const sluice::frontend::Frontend> BuildFrontend(std::string_view yaml,
                                                                sluice::Store* store,
                                                                const sluice::Clock* clock) {
  auto cfg = sluice::config::ParseConfig(yaml, "fuzz.yaml");
  if (!cfg.ok()) Fail("fuzz config does not parse", std::string(cfg.status().ToString()));
  auto plans = sluice::PlanSet::FromConfig(*cfg);
  if (!plans.ok()) Fail("fuzz plans", std::string(plans.status().ToString()));
  auto keys = sluice::frontend::KeyRegistry::FromConfig(*cfg);
  if (!keys.ok()) Fail("fuzz keys", std::string(keys.status().ToString()));
  auto proxies = sluice::frontend::ProxyTrust::FromCidrs(cfg->server.trusted_proxies);
  if (!proxies.ok()) Fail("fuzz proxies", std::string(proxies.status().ToString()));
  auto fe = std::make_shared<sluice::frontend::Frontend>();
  fe->server = cfg->server;
  if (!cfg->server.admin_token.empty()) {
    fe->admin_tokens.push_back(
        sluice::frontend::MakeAdminToken("admin", cfg->server.admin_token, true));
  }
  fe->limiter = std::make_unique<sluice::Limiter>(
      std::move(*plans), store, clock,
      sluice::LimiterOptions{.on_store_error = cfg->on_store_error});
  fe->keys = std::move(*keys);
  fe->proxies = std::move(*proxies);
  return fe;
}

struct World {
  // 2024-03-31 00:59:30 UTC: a minute before Europe/Berlin's spring-forward (a 23-hour day).
  sluice::FakeClock clock{absl::FromUnixSeconds(1711846770)};
  sluice::MemoryStore store;
  sluice::metrics::Registry registry;
  sluice::frontend::FrontendMetrics metrics{registry};
  sluice::frontend::FrontendHolder frontend_a{BuildFrontend(kConfigA, &store, &clock)};
  sluice::frontend::FrontendHolder frontend_b{BuildFrontend(kConfigB, &store, &clock)};
  sluice::http::DataPlane data_a{&frontend_a, &metrics};
  sluice::http::AdminPlane admin_a{&frontend_a, &metrics, &registry};
  sluice::http::DataPlane data_b{&frontend_b, &metrics};
  sluice::http::AdminPlane admin_b{&frontend_b, &metrics, &registry};
  asio::io_context io{1};
};

World& GetWorld() {
  static World* world = new World();  // never destroyed: libFuzzer may exit from any point
  return *world;
}

// Runs handler.Handle(req, peer) to completion on the world's io_context.
Response RunHandler(sluice::http::RequestHandler& handler, Request& req, Peer peer) {
  asio::io_context& io = GetWorld().io;
  io.restart();
  std::optional<Response> out;
  std::exception_ptr error;
  asio::co_spawn(io, handler.Handle(req, peer), [&](std::exception_ptr e, Response res) {
    error = e;
    if (!e) out = std::move(res);
  });
  io.run();
  if (error) {
    // In the server an exception escaping Handle ends the session without an answer.
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      Fail("Handle threw", e.what());
    } catch (...) {
      Fail("Handle threw a non-std exception");
    }
  }
  Check(out.has_value(), "Handle did not complete");
  return std::move(*out);
}

std::string Serialize(Response& res) {
  std::string wire;
  bhttp::serializer<false, bhttp::string_body> sr(res);
  beast::error_code ec;
  do {
    sr.next(ec, [&](beast::error_code& write_ec, const auto& buffers) {
      write_ec = {};
      wire += beast::buffers_to_string(buffers);
      sr.consume(beast::buffer_bytes(buffers));
    });
  } while (!ec && !sr.is_done());
  if (ec) Fail("serializer", ec.message());
  return wire;
}

std::string_view TrimOws(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool AllowedStatus(unsigned s) {
  constexpr unsigned kAllowed[] = {200, 400, 401, 403, 404, 405, 413, 429, 431, 503};
  return std::find(std::begin(kAllowed), std::end(kAllowed), s) != std::end(kAllowed);
}

// What the server does to a handler's answer before writing it, then the invariants on the wire.
void CheckResponse(Response& res, unsigned version, bool keep_alive) {
  res.version(version);
  res.keep_alive(keep_alive);
  res.prepare_payload();
  const unsigned status = res.result_int();
  Check(AllowedStatus(status), "unexpected status", std::to_string(status));

  const std::string wire = Serialize(res);
  if (Verbose()) std::fprintf(stderr, "%s\n", wire.c_str());

  // The wire form parses back as exactly one response with the same status, fields and body.
  bhttp::response_parser<bhttp::string_body> parser;
  parser.eager(true);
  parser.header_limit(UINT32_MAX);
  parser.body_limit(UINT64_MAX);
  beast::error_code ec;
  std::string_view rest = wire;
  while (!parser.is_done()) {
    const std::size_t n = parser.put(asio::buffer(rest.data(), rest.size()), ec);
    rest.remove_prefix(n);
    if (ec || n == 0) break;
  }
  if (ec) Fail("response does not parse back", ec.message() + "\n" + wire);
  Check(parser.is_done(), "response incomplete on the wire", wire);
  Check(rest.empty(), "bytes after the response", wire);
  const Response& back = parser.get();
  Check(back.result_int() == status, "status changed on the wire", wire);
  Check(back.body() == res.body(), "body changed on the wire", wire);
  auto a = res.begin();
  auto b = back.begin();
  for (; a != res.end() && b != back.end(); ++a, ++b) {
    Check(Sv(a->name_string()) == Sv(b->name_string()), "field name changed on the wire", wire);
    Check(TrimOws(Sv(a->value())) == Sv(b->value()), "field value changed on the wire", wire);
  }
  Check(a == res.end() && b == back.end(), "field count changed on the wire", wire);

  // Content-Length: exactly one, equal to the body's size; no Transfer-Encoding.
  Check(back.count(bhttp::field::content_length) == 1, "Content-Length count", wire);
  Check(Sv(back[bhttp::field::content_length]) == std::to_string(res.body().size()),
        "Content-Length does not match the body", wire);
  Check(back.count(bhttp::field::transfer_encoding) == 0, "Transfer-Encoding set", wire);

  const std::string_view type = Sv(back[bhttp::field::content_type]);
  if (type == "application/problem+json") {
    const Json j = Json::parse(res.body(), nullptr, /*allow_exceptions=*/false);
    Check(j.is_object(), "problem+json is not a JSON object", res.body());
    Check(j.contains("status") && j["status"].is_number_unsigned() &&
              j["status"].get<unsigned>() == status,
          "problem+json status differs from the response status", wire);
    Check(j.contains("type") && j["type"].is_string(), "problem+json type", wire);
    Check(j.contains("title") && j["title"].is_string(), "problem+json title", wire);
    Check(j.contains("detail") && j["detail"].is_string(), "problem+json detail", wire);
  } else if (type == "application/json") {
    const Json j = Json::parse(res.body(), nullptr, /*allow_exceptions=*/false);
    Check(j.is_object(), "application/json body is not a JSON object", res.body());
  }
  if (status != 200 && status != 503 && status != 429 && status != 403) {
    Check(type == "application/problem+json", "error without problem+json", wire);
  }
  if (status == 401)
    Check(back.count(bhttp::field::www_authenticate) == 1, "401 without WWW-Authenticate", wire);
  if (status == 405) Check(back.count(bhttp::field::allow) == 1, "405 without Allow", wire);
}

std::string_view PathOf(const Request& req) {
  std::string_view target = Sv(req.target());
  return target.substr(0, target.find('?'));
}

// The reference for the Bearer rule, written independently of BearerToken: the scheme "bearer" in
// any case, one or more spaces, exactly `token`, then nothing but spaces and tabs.
bool IsBearer(std::string_view value, std::string_view token) {
  if (token.empty() || value.size() < 7) return false;
  for (size_t i = 0; i < 6; ++i) {
    if (std::tolower(static_cast<unsigned char>(value[i])) != "bearer"[i]) return false;
  }
  size_t i = 6;
  if (value[i] != ' ') return false;
  while (i < value.size() && value[i] == ' ') ++i;
  if (value.substr(i, token.size()) != token) return false;
  for (i += token.size(); i < value.size(); ++i) {
    if (value[i] != ' ' && value[i] != '\t') return false;
  }
  return true;
}

// Security invariants of the admin plane: data behind the token is served only for the token.
void CheckAdminAuth(const Request& req, const Response& res, std::string_view token) {
  const std::string_view path = PathOf(req);
  const bool guarded = path == "/metrics" || path.substr(0, 10) == "/v1/usage/";
  if (!guarded || res.result_int() != 200) return;
  Check(!token.empty(), "admin data served with no admin token configured");
  std::string_view authorization;
  if (auto it = req.find(bhttp::field::authorization); it != req.end()) {
    authorization = Sv(it->value());
  }
  Check(IsBearer(authorization, token), "admin data served without the admin token", authorization);
}

// An allowed /v1/authorize names a configured subject or, with an anonymous plan, a client IP.
void CheckAuthorizeSubject(const Request& req, const Response& res, bool anonymous_plan) {
  if (PathOf(req) != "/v1/authorize" || res.result_int() != 200) return;
  const std::string_view subject = Sv(res["Sluice-Subject"]);
  const bool keyed = subject == "user-1" || subject == "user-2" || subject == "user-3";
  const bool anonymous = anonymous_plan && subject.substr(0, 3) == "ip:";
  Check(keyed || anonymous, "authorize allowed an unexpected subject", subject);
}

void FuzzStandaloneParsers(std::string_view raw) {
  if (auto cost = sluice::http::ParseCostHeader(raw); cost.ok()) {
    Check(*cost >= 0 && *cost <= sluice::kMaxCost, "ParseCostHeader out of range");
    Check(!raw.empty() && raw.find_first_not_of("0123456789") == std::string_view::npos,
          "ParseCostHeader accepted a non-digit", raw);
  }

  std::string decoded;
  if (sluice::http::PercentDecode(raw, &decoded)) {
    Check(decoded.size() <= raw.size(), "PercentDecode grew its input");
    if (raw.find('%') == std::string_view::npos) {
      Check(decoded == raw, "PercentDecode changed an escape-free input");
    }
  }

  if (auto body = sluice::http::ParseCheckBody(raw); body.ok()) {
    const bool by_key = !body->api_key.empty() && body->subject.empty() && body->plan.empty();
    // A subject with or without a plan (without: the registry's plan).
    const bool by_subject = body->api_key.empty() && !body->subject.empty();
    Check(by_key != by_subject, "ParseCheckBody: not exactly one of api_key / subject[+plan]");
    Check(body->cost >= 0 && body->cost <= sluice::kMaxCost, "ParseCheckBody: cost out of range");
    Check(Json::parse(raw, nullptr, /*allow_exceptions=*/false).is_object(),
          "ParseCheckBody accepted what nlohmann does not parse as an object", raw);
  }

  // Only the Bearer scheme (any case) with the token, and never with an empty token.
  static const std::vector<sluice::frontend::AdminToken> kTokens = {
      sluice::frontend::MakeAdminToken("reader", "fuzz-reader-token", false),
      sluice::frontend::MakeAdminToken("admin", kAdminToken, true)};
  const sluice::frontend::AdminToken* match = sluice::http::MatchAdminToken(raw, kTokens);
  Check((match != nullptr && match->name == "admin") == IsBearer(raw, kAdminToken),
        "MatchAdminToken", raw);
  Check((match != nullptr && match->name == "reader") == IsBearer(raw, "fuzz-reader-token"),
        "MatchAdminToken (second token)", raw);
  Check(sluice::http::MatchAdminToken(raw, {}) == nullptr, "MatchAdminToken without tokens", raw);
}

Peer PeerFor(std::uint8_t selector) {
  static const asio::ip::address kPeers[] = {
      asio::ip::make_address("10.1.2.3"),          // trusted proxy (config A)
      asio::ip::make_address("203.0.113.9"),       // untrusted IPv4
      asio::ip::make_address("2001:db8::7"),       // untrusted IPv6
      asio::ip::make_address("::ffff:192.0.2.1"),  // IPv4-mapped; trusted in config A
  };
  return Peer{.address = kPeers[(selector >> 1) & 3]};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  World& w = GetWorld();
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  FuzzStandaloneParsers(input);
  if (size == 0) return 0;

  // Same state for every input: no counters, no pending alerts.
  w.store.Restore({});
  w.store.outbox().Restore({});

  const std::uint8_t selector = data[size - 1];
  const bool variant_a = (selector & 1) == 0;
  sluice::http::DataPlane& data_plane = variant_a ? w.data_a : w.data_b;
  sluice::http::AdminPlane& admin_plane = variant_a ? w.admin_a : w.admin_b;
  const std::string_view admin_token = variant_a ? kAdminToken : std::string_view();
  const Peer peer = PeerFor(selector);

  std::string_view rest = input;
  while (!rest.empty()) {
    bhttp::request_parser<bhttp::string_body> parser;
    parser.header_limit(kHeaderLimit);
    parser.body_limit(kBodyLimit);
    parser.eager(true);  // as http::read does
    beast::error_code ec;
    // As http::read does at end of stream: a partial message is an error, nothing at all is not.
    auto at_eof = [&] {
      if (parser.got_some()) {
        parser.put_eof(ec);
      } else {
        ec = bhttp::error::end_of_stream;
      }
    };
    while (!parser.is_done()) {
      if (rest.empty()) {
        at_eof();
        break;
      }
      const std::size_t n = parser.put(asio::buffer(rest.data(), rest.size()), ec);
      rest.remove_prefix(n);
      if (ec == bhttp::error::need_more) {
        ec = {};
        if (n > 0) continue;
        at_eof();  // all the bytes left are not enough: the peer closed the connection here
        break;
      }
      if (ec) break;
      if (n == 0) Fail("parser made no progress without an error");
    }
    if (ec == bhttp::error::end_of_stream) return 0;  // the server closes silently
    if (ec) {
      // The server answers a parse error with Reject and closes the connection.
      if (Verbose()) std::fprintf(stderr, "=== parse error: %s\n", ec.message().c_str());
      const unsigned status = ec == bhttp::error::header_limit ? 431
                              : ec == bhttp::error::body_limit ? 413
                                                               : 400;
      Response res = data_plane.Reject(status, ec.message(), 11);
      Check(res.result_int() == status, "Reject changed the status");
      CheckResponse(res, 11, /*keep_alive=*/false);
      return 0;
    }
    if (!parser.is_done()) return 0;

    Request req = parser.release();
    const unsigned version = req.version();
    const bool keep_alive = req.keep_alive();

    if (Verbose()) {
      std::fprintf(
          stderr, "=== %s %.*s (variant %c)\n", std::string(Sv(req.method_string())).c_str(),
          static_cast<int>(req.target().size()), req.target().data(), variant_a ? 'A' : 'B');
    }
    Request admin_req = req;
    Response data_res = RunHandler(data_plane, req, peer);
    CheckAuthorizeSubject(req, data_res, /*anonymous_plan=*/variant_a);
    CheckResponse(data_res, version, keep_alive);

    Response admin_res = RunHandler(admin_plane, admin_req, peer);
    CheckAdminAuth(admin_req, admin_res, admin_token);
    CheckResponse(admin_res, version, keep_alive);

    if (!keep_alive) break;
  }
  return 0;
}
