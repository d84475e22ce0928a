#include "sluice/http/registry_api.h"

#include <algorithm>
#include <chrono>
#include <utility>
#include <variant>
#include <vector>

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/beast/http/verb.hpp>
#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "sluice/common/digest.h"
#include "sluice/common/log.h"
#include "sluice/common/strings.h"
#include "sluice/common/subject.h"
#include "sluice/http/await.h"
#include "sluice/http/render.h"
#include "sluice/http/sha256.h"
#include "sluice/limiter/algorithm.h"
#include "sluice/limiter/decision.h"
#include "sluice/limiter/window.h"
#include "sluice/registry/effective_plan.h"
#include "sluice/registry/keys.h"
#include "sluice/registry/validate.h"

namespace sluice::http {
namespace asio = boost::asio;
namespace bhttp = boost::beast::http;
using Json = nlohmann::json;

namespace {

constexpr std::string_view kSubjects = "/v1/subjects";
constexpr std::string_view kSubjectsSlash = "/v1/subjects/";
constexpr std::string_view kKeysSlash = "/v1/keys/";
constexpr std::string_view kKeysSuffix = "/keys";
constexpr std::string_view kCreditsSuffix = "/credits";
constexpr size_t kDefaultPageSize = 100;
constexpr size_t kMaxPageSize = 1000;
constexpr absl::Duration kReplayWindow = absl::Minutes(10);
constexpr size_t kReplayEntries = 10'000;
// How long a replay waits for the first try's key to reach this instance (50 ms steps).
constexpr int kReplayWaitSteps = 40;

std::string_view Sv(boost::beast::string_view s) { return {s.data(), s.size()}; }

// True if the query string has a parameter named exactly `name` (with or without a value).
bool HasParam(std::string_view query, std::string_view name) {
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (pair.substr(0, pair.find('=')) == name) return true;
  }
  return false;
}

// A webhook URL as a read-only token sees it: scheme and host, the rest (which may itself be a
// credential, as Slack's are) cut.
std::string RedactedUrl(const std::string& url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos) return "…";
  const size_t path = url.find_first_of("/?#", scheme + 3);
  return path == std::string::npos ? url : url.substr(0, path) + "/…";
}

// A problem+json answer; `field` (when not empty) names the input at fault.
Response FieldProblem(unsigned status, std::string_view title, std::string_view detail,
                      std::string_view field, unsigned version) {
  Json body{{"type", "about:blank"}, {"title", title}, {"status", status}, {"detail", detail}};
  if (!field.empty()) body["field"] = field;
  Response res = JsonResponse(status, body.dump(), version, true);
  res.set(bhttp::field::content_type, "application/problem+json");
  return res;
}

// A validation error "<field>: <what>" as a problem naming the field. Malformed JSON is 400, and so
// is a number out of range (OutOfRange), which stops the parse: the rest of the body was never
// read. A well-formed body with a bad value is 422.
Response InvalidInput(const absl::Status& s, unsigned version) {
  const std::string message(ToStd(s.message()));
  const size_t colon = message.find(':');
  const std::string field = colon == std::string::npos ? "" : message.substr(0, colon);
  if (field == "body" || s.code() == absl::StatusCode::kOutOfRange) {
    return FieldProblem(400, "Bad Request", message, field, version);
  }
  return FieldProblem(422, "Unprocessable Content", message, field, version);
}

// `detail` is "<field>: <what>", as every caller words it: the field is named as in every other
// error.
Response NotFoundProblem(std::string_view detail, unsigned version) {
  const size_t colon = detail.find(':');
  return FieldProblem(404, "Not Found", detail,
                      colon == std::string_view::npos ? "" : detail.substr(0, colon), version);
}

Response Conflict(std::string_view detail, std::string_view field, unsigned version) {
  return FieldProblem(409, "Conflict", detail, field, version);
}

Response ReadOnlyConfigSubject(unsigned version) {
  return Conflict(
      "id: this subject is defined by the configuration file (keys:) and is read-only here", "id",
      version);
}

Response Unavailable(const absl::Status& s, unsigned version) {
  return FieldProblem(503, "Service Unavailable",
                      absl::StrCat("the registry could not be written: ", s.message()), "",
                      version);
}

Response NoContent(unsigned version) {
  Response res(bhttp::status::no_content, version);
  res.keep_alive(true);
  return res;
}

Response MethodNotAllowedHere(std::string_view allow, unsigned version) {
  Response res =
      FieldProblem(405, "Method Not Allowed", absl::StrCat("use ", ToAbsl(allow)), "", version);
  res.set(bhttp::field::allow, std::string(allow));
  return res;
}

// One audit log line per change: who (the token's name, the client's address), what, on which
// record. Never a key, a digest or a secret.
void Audit(std::string_view action, const AdminToken& token, const Peer& peer,
           std::string_view subject, std::string_view key_id, std::string_view outcome) {
  Log log(LogLevel::kInfo, "registry change");
  log.Str("action", action).Str("token", token.name).Str("client", peer.address.to_string());
  if (!subject.empty()) log.Str("subject", subject);
  if (!key_id.empty()) log.Str("key_id", key_id);
  log.Str("outcome", outcome);
}

// The Idempotency-Key header: "" when absent; at most one, 1-kMaxIdempotencyKeyBytes printable
// ASCII characters without spaces, else the 400 answer to give.
std::variant<std::string, Response> IdempotencyKeyOf(const Request& req) {
  const unsigned version = req.version();
  auto range = req.equal_range("Idempotency-Key");
  if (std::distance(range.first, range.second) > 1) {
    return FieldProblem(400, "Bad Request", "Idempotency-Key: more than one", "Idempotency-Key",
                        version);
  }
  if (range.first == range.second) return std::string();
  std::string key(Sv(range.first->value()));
  const bool printable =
      std::all_of(key.begin(), key.end(), [](char c) { return c > 0x20 && c < 0x7f; });
  if (key.empty() || key.size() > registry::kMaxIdempotencyKeyBytes || !printable) {
    return FieldProblem(
        400, "Bad Request",
        absl::StrCat("Idempotency-Key: must be 1-", registry::kMaxIdempotencyKeyBytes,
                     " printable ASCII characters without spaces"),
        "Idempotency-Key", version);
  }
  return key;
}

auto StartApply(registry::Backend* backend, registry::Change change) {
  return [backend, change = std::move(change)](registry::ChangeCallback done) mutable {
    backend->Apply(std::move(change), std::move(done));
  };
}

// A config subject as the registry API shows it (read-only).
Json ConfigSubjectJson(const std::string& id, const frontend::KeyEntry& entry, bool full = true) {
  const std::string webhook = full ? entry.webhook : RedactedUrl(entry.webhook);
  return Json{{"id", id},
              {"plan", entry.plan},
              {"email", entry.email.empty() ? Json(nullptr) : Json(entry.email)},
              {"webhook", entry.webhook.empty() ? Json(nullptr) : Json(webhook)},
              {"webhook_secret_set", false},
              {"metadata", Json::object()},
              {"disabled", false},
              {"overrides", Json::object()},
              {"created_at", nullptr},
              {"updated_at", nullptr},
              {"source", "config"}};
}

// `full`: for a read-write token; a read-only one sees webhook URLs redacted.
Json RegistrySubjectJson(const registry::Subject& s, bool full = true) {
  Json j = registry::SubjectJson(s);
  j["source"] = "registry";
  if (!full && !s.webhook.empty()) j["webhook"] = RedactedUrl(s.webhook);
  return j;
}

// A stable id for the config key with this digest: "key_" and 16 hex digits of a hash of it
// (not of the key: the digest is not shown).
std::string ConfigKeyId(const Sha256Digest& digest) {
  const std::string h = Sha256(
      absl::StrCat("sluice config key\n",
                   absl::string_view(reinterpret_cast<const char*>(digest.data()), digest.size())));
  uint64_t id = 0;
  for (size_t i = 0; i < 8 && i < h.size(); ++i) id = id << 8 | static_cast<uint8_t>(h[i]);
  return registry::KeyIdText(id);
}

// The subject id of a /v1/subjects/{id}[/keys] path, percent-decoded; false if malformed.
bool DecodeId(std::string_view encoded, std::string* id) {
  return !encoded.empty() && PercentDecode(encoded, id);
}

}  // namespace

bool RegistryApi::Owns(std::string_view path) {
  return path == kSubjects || path.starts_with(kSubjectsSlash) || path.starts_with(kKeysSlash);
}

asio::awaitable<Response> RegistryApi::Handle(const Frontend& fe, const Request& req,
                                              const AdminToken& token, const Peer& peer) {
  const unsigned version = req.version();
  const std::string_view path = SplitTarget(Sv(req.target())).first;
  const bhttp::verb method = req.method();
  // HEAD is GET without the body (server.cc drops it): the same reads answer it.
  const bool read = method == bhttp::verb::get || method == bhttp::verb::head;
  // Read-only tokens (Prometheus, dashboards) never change anything.
  auto forbidden = [&] {
    // The path may hold a key sent where an id belongs: cut to its display prefix.
    Audit(absl::StrCat(ToAbsl(Sv(bhttp::to_string(method))), " ", registry::RedactKeys(path)),
          token, peer, "", "", "forbidden");
    return FieldProblem(403, "Forbidden",
                        absl::StrCat("the token \"", token.name,
                                     "\" is read-only; this needs a token with access: write"),
                        "", version);
  };

  if (!index_->loaded()) {
    // A shared registry still loading (Redis unreachable at start): "no such subject" or an empty
    // list would be a wrong answer, and a write could not tell a create from a replace.
    Response res = FieldProblem(503, "Service Unavailable",
                                "the registry is still loading; retry shortly", "", version);
    res.set(bhttp::field::retry_after, "1");
    co_return res;
  }
  if (path == kSubjects) {
    if (!read) co_return MethodNotAllowedHere("GET, HEAD", version);
    co_return ListSubjects(fe, req, token.write);
  }
  if (path.starts_with(kKeysSlash)) {
    const std::string_view key_id = path.substr(kKeysSlash.size());
    if (method != bhttp::verb::delete_) co_return MethodNotAllowedHere("DELETE", version);
    if (!token.write) co_return forbidden();
    Response res = co_await RevokeKey(fe, req, key_id, token, peer);
    co_return res;
  }
  std::string_view rest = path.substr(kSubjectsSlash.size());
  const bool keys = rest.ends_with(kKeysSuffix);
  if (keys) rest.remove_suffix(kKeysSuffix.size());
  const bool credits = !keys && rest.ends_with(kCreditsSuffix);
  if (credits) rest.remove_suffix(kCreditsSuffix.size());
  std::string id;
  if (!DecodeId(rest, &id) || rest.find('/') != std::string_view::npos) {
    co_return FieldProblem(404, "Not Found",
                           "no such endpoint (a subject id with / must be sent as %2F)", "",
                           version);
  }
  if (!IsValidSubject(id)) {
    co_return FieldProblem(
        422, "Unprocessable Content",
        "id: must be 1-200 bytes of letters, digits and ._:@/+=- (percent-encoded in the path)",
        "id", version);
  }
  if (keys) {
    if (read) co_return ListKeys(fe, req, id);
    if (method != bhttp::verb::post) co_return MethodNotAllowedHere("GET, HEAD, POST", version);
    if (!token.write) co_return forbidden();
    Response res = co_await CreateKey(fe, req, id, token, peer);
    co_return res;
  }
  if (credits) {
    if (read) {
      Response res = co_await ListCredits(fe, req, id);
      co_return res;
    }
    if (method != bhttp::verb::post) co_return MethodNotAllowedHere("GET, HEAD, POST", version);
    if (!token.write) co_return forbidden();
    Response res = co_await GrantCredits(fe, req, id, token, peer);
    co_return res;
  }
  if (read) {
    Response res = co_await GetSubject(fe, req, id, token.write);
    co_return res;
  }
  if (method == bhttp::verb::put) {
    if (!token.write) co_return forbidden();
    Response res = co_await PutSubject(fe, req, id, token, peer);
    co_return res;
  }
  if (method == bhttp::verb::delete_) {
    if (!token.write) co_return forbidden();
    Response res = co_await DeleteSubject(fe, req, id, token, peer);
    co_return res;
  }
  co_return MethodNotAllowedHere("GET, HEAD, PUT, DELETE", version);
}

asio::awaitable<Response> RegistryApi::PutSubject(const Frontend& fe, const Request& req,
                                                  const std::string& id, const AdminToken& token,
                                                  const Peer& peer) {
  const unsigned version = req.version();
  // Held until the write is done: a reload cannot remove the plan or add a key of this subject to
  // the file in between (see BlockSubjectWrites). What is checked is what is in force now, not
  // when the request came.
  std::shared_lock plans_lock(plans_mu_);
  std::shared_ptr<const Frontend> current = frontend_ != nullptr ? frontend_->Get() : nullptr;
  const Frontend& now_fe = current != nullptr ? *current : fe;
  if (now_fe.keys.FindSubject(id) != nullptr) co_return ReadOnlyConfigSubject(version);
  const Limiter& limiter = *now_fe.limiter;
  const absl::Time now = limiter.clock().Now();
  absl::StatusOr<registry::Subject> subject =
      registry::ParseSubjectBody(id, req.body(), limiter.plans(), now);
  if (!subject.ok()) co_return InvalidInput(subject.status(), version);
  std::shared_ptr<const registry::Subject> existing = index_->FindSubject(id);
  subject->created_at = existing != nullptr ? existing->created_at : now;
  subject->updated_at = now;
  registry::Change change{.kind = registry::Change::Kind::kPutSubject, .subject = *subject};
  absl::StatusOr<registry::ChangeResult> result =
      co_await AwaitCallback<absl::StatusOr<registry::ChangeResult>>(
          StartApply(backend_, std::move(change)));
  plans_lock.unlock();
  if (!result.ok()) {
    Audit(existing != nullptr ? "subject.replace" : "subject.create", token, peer, id, "",
          "failed");
    co_return Unavailable(result.status(), version);
  }
  Audit(result->created ? "subject.create" : "subject.replace", token, peer, id, "", "ok");
  std::shared_ptr<const registry::Subject> stored = index_->FindSubject(id);
  Response res =
      JsonResponse(result->created ? 201 : 200,
                   RegistrySubjectJson(stored ? *stored : *subject).dump(), version, true);
  if (result->created) {
    std::string location = std::string(kSubjectsSlash);
    location.append(req.target().data() + kSubjectsSlash.size(),
                    SplitTarget(Sv(req.target())).first.size() - kSubjectsSlash.size());
    res.set(bhttp::field::location, location);
  }
  co_return res;
}

asio::awaitable<Response> RegistryApi::GetSubject(const Frontend& fe, const Request& req,
                                                  const std::string& id, bool full) {
  const unsigned version = req.version();
  const Limiter& limiter = *fe.limiter;
  const absl::Time now = limiter.clock().Now();
  Json body;
  const Plan* plan = nullptr;
  std::optional<Plan> storage;
  if (std::shared_ptr<const registry::Subject> s = index_->FindSubject(id)) {
    body = RegistrySubjectJson(*s, full);
    plan = registry::EffectivePlan(limiter.plans(), *s, now, &storage);
  } else if (const frontend::KeyEntry* entry = fe.keys.FindSubject(id)) {
    body = ConfigSubjectJson(id, *entry, full);
    plan = limiter.plans().Find(entry->plan);
  } else {
    co_return NotFoundProblem(absl::StrCat("id: no subject \"", id, "\""), version);
  }
  if (plan == nullptr) {
    body["usage"] = nullptr;
    co_return JsonResponse(200, body.dump(), version, true);
  }
  absl::StatusOr<std::vector<LimitUsage>> usage =
      co_await AwaitCallback<absl::StatusOr<std::vector<LimitUsage>>>(
          [&](UsageCallback done) { limiter.Usage(id, *plan, std::move(done)); });
  if (!usage.ok()) {
    co_return FieldProblem(
        503, "Service Unavailable",
        absl::StrCat("usage: the store did not answer: ", usage.status().message()), "", version);
  }
  Json limits = Json::array();
  for (size_t i = 0; i < plan->limits.size() && i < usage->size(); ++i) {
    const Limit& l = plan->limits[i];
    const WindowBounds w = WindowAt(l.window, plan->tz, now);
    const LimitUsage& u = (*usage)[i];
    const UnitsView v = ViewOf(l, w, now, u.used, u.prev, u.held);
    limits.push_back({{"name", l.name},
                      {"window", l.window.text},
                      {"quota", l.quota},
                      {"used", v.used},
                      {"held", u.held},
                      {"remaining", v.remaining},
                      {"reset_after", v.reset_after},
                      {"alerts_fired", (*usage)[i].fired}});
  }
  body["usage"] = Json{{"plan", plan->name}, {"limits", std::move(limits)}};
  co_return JsonResponse(200, body.dump(), version, true);
}

asio::awaitable<Response> RegistryApi::DeleteSubject(const Frontend& fe, const Request& req,
                                                     const std::string& id, const AdminToken& token,
                                                     const Peer& peer) {
  const unsigned version = req.version();
  if (fe.keys.FindSubject(id) != nullptr) co_return ReadOnlyConfigSubject(version);
  registry::Change change{.kind = registry::Change::Kind::kDeleteSubject, .subject_id = id};
  absl::StatusOr<registry::ChangeResult> result =
      co_await AwaitCallback<absl::StatusOr<registry::ChangeResult>>(
          StartApply(backend_, std::move(change)));
  if (absl::IsNotFound(result.status())) {
    co_return NotFoundProblem(absl::StrCat("id: no subject \"", id, "\""), version);
  }
  if (!result.ok()) {
    Audit("subject.delete", token, peer, id, "", "failed");
    co_return Unavailable(result.status(), version);
  }
  Audit("subject.delete", token, peer, id, "", "ok");
  co_return NoContent(version);
}

Response RegistryApi::ListSubjects(const Frontend& fe, const Request& req, bool full) {
  const unsigned version = req.version();
  const std::string_view query = SplitTarget(Sv(req.target())).second;
  if (std::optional<std::string_view> twice = RepeatedParam(query)) {
    return FieldProblem(400, "Bad Request", absl::StrCat(ToAbsl(*twice), ": given more than once"),
                        *twice, version);
  }
  size_t limit = kDefaultPageSize;
  if (std::optional<std::string> text = QueryParam(query, "limit")) {
    uint64_t n = 0;
    if (!absl::SimpleAtoi(*text, &n) || n < 1 || n > kMaxPageSize ||
        !std::all_of(text->begin(), text->end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return FieldProblem(400, "Bad Request",
                          absl::StrCat("limit: must be an integer from 1 to ", kMaxPageSize),
                          "limit", version);
    }
    limit = static_cast<size_t>(n);
  }
  std::optional<std::string> plan = QueryParam(query, "plan");
  if (!plan.has_value() && HasParam(query, "plan")) {
    return FieldProblem(400, "Bad Request", "plan: bad percent-encoding", "plan", version);
  }
  if (plan.has_value() && !plan->empty() && fe.limiter->plans().Find(*plan) == nullptr) {
    return FieldProblem(400, "Bad Request", absl::StrCat("plan: unknown plan \"", *plan, "\""),
                        "plan", version);
  }
  std::optional<std::string> cursor = QueryParam(query, "cursor");
  if (!cursor.has_value() && HasParam(query, "cursor")) {
    return FieldProblem(400, "Bad Request", "cursor: bad percent-encoding", "cursor", version);
  }
  const std::string after = cursor.value_or("");
  const std::string plan_filter = plan.value_or("");

  // The registry's subjects and the config file's, merged in id order (they are disjoint: a
  // config subject cannot be created in the registry).
  registry::Index::Page page = index_->List(plan_filter, after, limit + 1);
  const std::vector<std::string>& config_subjects = fe.keys.subjects();
  auto cfg = std::upper_bound(config_subjects.begin(), config_subjects.end(), after);
  size_t r = 0;
  Json subjects = Json::array();
  std::string last;
  bool more = false;
  while (true) {
    // The next config subject that passes the filter.
    while (cfg != config_subjects.end() && !plan_filter.empty() &&
           fe.keys.FindSubject(*cfg)->plan != plan_filter) {
      ++cfg;
    }
    const bool have_cfg = cfg != config_subjects.end();
    const bool have_reg = r < page.subjects.size();
    if (!have_cfg && !have_reg) break;
    if (subjects.size() == limit) {
      more = true;
      break;
    }
    if (have_reg && (!have_cfg || page.subjects[r]->id < *cfg)) {
      subjects.push_back(RegistrySubjectJson(*page.subjects[r], full));
      last = page.subjects[r]->id;
      ++r;
    } else {
      subjects.push_back(ConfigSubjectJson(*cfg, *fe.keys.FindSubject(*cfg), full));
      last = *cfg;
      ++cfg;
    }
  }
  // The page asked the index for one more than it shows, so "more" is exact unless the index had
  // more still.
  if (!more && !page.next_cursor.empty() && r < page.subjects.size()) more = true;
  Json body{{"subjects", std::move(subjects)}, {"next_cursor", more ? Json(last) : Json(nullptr)}};
  return JsonResponse(200, body.dump(), version, true);
}

asio::awaitable<Response> RegistryApi::CreateKey(const Frontend& fe, const Request& req,
                                                 const std::string& id, const AdminToken& token,
                                                 const Peer& peer) {
  const unsigned version = req.version();
  if (fe.keys.FindSubject(id) != nullptr) co_return ReadOnlyConfigSubject(version);
  // The idempotency key: at most one, bounded, printable.
  std::variant<std::string, Response> key_header = IdempotencyKeyOf(req);
  if (Response* bad = std::get_if<Response>(&key_header)) co_return std::move(*bad);
  const std::string idempotency_key = std::get<std::string>(std::move(key_header));
  const absl::Time now = fe.limiter->clock().Now();
  absl::StatusOr<registry::KeyRequest> request = registry::ParseKeyBody(req.body(), now);
  if (!request.ok()) co_return InvalidInput(request.status(), version);
  // Whether the subject exists is the backend's to say, atomically with the write: with Redis,
  // another instance may have created it a moment ago.
  registry::Key key{
      .subject = id, .name = request->name, .expires_at = request->expires_at, .created_at = now};
  std::string plaintext;
  if (request->imported_digest.has_value()) {
    key.digest = *request->imported_digest;
  } else {
    absl::StatusOr<registry::GeneratedKey> generated = registry::GenerateKey();
    if (!generated.ok()) {
      co_return FieldProblem(500, "Internal Server Error", "cannot generate a key", "", version);
    }
    plaintext = std::move(generated->plaintext);
    key.digest = generated->digest;
    key.prefix = std::move(generated->prefix);
  }
  if (fe.keys.FindDigest(key.digest) != nullptr) {
    co_return Conflict("key_sha256: this key is already defined by the configuration file",
                       "key_sha256", version);
  }
  absl::StatusOr<uint64_t> key_id = registry::NewKeyId();
  if (!key_id.ok()) {
    co_return FieldProblem(500, "Internal Server Error", "cannot generate a key id", "", version);
  }
  key.id = *key_id;
  if (!idempotency_key.empty() && !plaintext.empty()) {
    RememberPlaintext(idempotency_key, key.id, plaintext, now, /*made=*/false);
  }
  registry::Change change{.kind = registry::Change::Kind::kAddKey, .key = key};
  if (!idempotency_key.empty()) {
    change.idempotency_key = idempotency_key;
    // The same request, retried: the subject and the body. (A generated key differs between
    // tries, so it is not part of it.)
    change.fingerprint = Sha256(absl::StrCat(id, "\n", req.body()));
  }
  absl::StatusOr<registry::ChangeResult> result =
      co_await AwaitCallback<absl::StatusOr<registry::ChangeResult>>(
          StartApply(backend_, std::move(change)));
  const std::string id_text = registry::KeyIdText(result.ok() ? result->key_id : key.id);
  if (!result.ok()) {
    const absl::Status& s = result.status();
    if (!idempotency_key.empty()) ForgetPlaintext(idempotency_key, key.id);
    Audit(request->imported_digest ? "key.import" : "key.create", token, peer, id, "",
          absl::IsUnavailable(s) ? "failed" : "refused");
    if (absl::IsNotFound(s)) {
      co_return NotFoundProblem(absl::StrCat("id: no subject \"", id, "\" (create it first)"),
                                version);
    }
    if (absl::IsAlreadyExists(s)) {
      co_return Conflict("key_sha256: a key with this digest is already registered", "key_sha256",
                         version);
    }
    if (absl::IsResourceExhausted(s)) {
      co_return FieldProblem(422, "Unprocessable Content",
                             absl::StrCat("id: the subject already has ",
                                          registry::kMaxKeysPerSubject, " keys (revoke one first)"),
                             "id", version);
    }
    if (absl::IsFailedPrecondition(s)) {
      co_return FieldProblem(422, "Unprocessable Content",
                             "Idempotency-Key: already used for a different request",
                             "Idempotency-Key", version);
    }
    co_return Unavailable(s, version);
  }
  Json body;
  if (result->replayed) {
    if (!plaintext.empty()) ForgetPlaintext(idempotency_key, key.id);  // this try made nothing
    // The first try may have been made on another instance a moment ago: its key reaches this
    // instance's index within the propagation delay.
    std::optional<registry::Key> earlier = index_->FindKey(result->key_id);
    asio::steady_timer timer(co_await asio::this_coro::executor);
    for (int i = 0; i < kReplayWaitSteps && !earlier.has_value(); ++i) {
      timer.expires_after(std::chrono::milliseconds(50));
      co_await timer.async_wait(asio::use_awaitable);
      earlier = index_->FindKey(result->key_id);
    }
    if (!earlier.has_value()) {
      co_return NotFoundProblem(
          "Idempotency-Key: the key this request created earlier has been revoked", version);
    }
    body = registry::KeyJson(*earlier);
    std::string remembered = RecallPlaintext(idempotency_key, result->key_id, now);
    if (!remembered.empty()) body["key"] = std::move(remembered);
    Audit("key.create", token, peer, id, id_text, "replayed");
  } else {
    std::optional<registry::Key> stored = index_->FindKey(key.id);
    body = registry::KeyJson(stored.value_or(key));
    if (!plaintext.empty()) {
      body["key"] = plaintext;
      if (!idempotency_key.empty()) {
        RememberPlaintext(idempotency_key, key.id, plaintext, now, /*made=*/true);
      }
    }
    Audit(request->imported_digest ? "key.import" : "key.create", token, peer, id, id_text, "ok");
  }
  Response res = JsonResponse(201, body.dump(), version, true);
  if (result->replayed) res.set("Idempotent-Replayed", "true");
  res.set(bhttp::field::cache_control, "no-store");
  co_return res;
}

asio::awaitable<Json> RegistryApi::CreditBalance(const Frontend& fe, const std::string& id,
                                                 int64_t granted) {
  const Limiter& limiter = *fe.limiter;
  std::shared_ptr<const registry::Subject> subject = index_->FindSubject(id);
  Json limits = Json::array();
  std::optional<Plan> storage;
  const Plan* plan = subject != nullptr ? registry::EffectivePlan(limiter.plans(), *subject,
                                                                  limiter.clock().Now(), &storage)
                                        : nullptr;
  if (plan != nullptr) {
    absl::StatusOr<std::vector<LimitUsage>> usage =
        co_await AwaitCallback<absl::StatusOr<std::vector<LimitUsage>>>(
            [&](UsageCallback done) { limiter.Usage(id, *plan, std::move(done)); });
    for (size_t i = 0; i < plan->limits.size(); ++i) {
      const Limit& l = plan->limits[i];
      if (l.window.kind != config::WindowSpec::Kind::kCredit) continue;
      Json limit{{"name", l.name}, {"quota", l.quota}};
      if (usage.ok() && i < usage->size()) {
        const int64_t used = (*usage)[i].used;
        const int64_t held = (*usage)[i].held;
        limit["used"] = used;
        limit["held"] = held;
        limit["remaining"] = std::max<int64_t>(l.quota - used - held, 0);
      } else {
        limit["used"] = nullptr;  // the store did not answer: unknown, not 0
        limit["held"] = nullptr;
        limit["remaining"] = nullptr;
      }
      limits.push_back(std::move(limit));
    }
  }
  co_return Json{{"granted", granted}, {"limits", std::move(limits)}};
}

asio::awaitable<Response> RegistryApi::GrantCredits(const Frontend& fe, const Request& req,
                                                    const std::string& id, const AdminToken& token,
                                                    const Peer& peer) {
  const unsigned version = req.version();
  if (fe.keys.FindSubject(id) != nullptr) co_return ReadOnlyConfigSubject(version);
  std::variant<std::string, Response> key_header = IdempotencyKeyOf(req);
  if (Response* bad = std::get_if<Response>(&key_header)) co_return std::move(*bad);
  const std::string idempotency_key = std::get<std::string>(std::move(key_header));
  if (idempotency_key.empty()) {
    // A grant retried after a lost answer must not be granted twice: the key says it is a retry.
    co_return FieldProblem(400, "Bad Request",
                           "Idempotency-Key: required (a retried grant with the same key is "
                           "answered without granting again)",
                           "Idempotency-Key", version);
  }
  absl::StatusOr<registry::CreditRequest> request = registry::ParseCreditBody(req.body());
  if (!request.ok()) co_return InvalidInput(request.status(), version);
  registry::Change change{.kind = registry::Change::Kind::kGrantCredits,
                          .subject_id = id,
                          .grant = {.amount = request->add,
                                    .reason = request->reason,
                                    .actor = token.name,
                                    .at = fe.limiter->clock().Now()},
                          .idempotency_key = idempotency_key,
                          // The same request, retried: the subject and the body (not the token: a
                          // retry by another operator with the same key is the same grant).
                          .fingerprint = Sha256(absl::StrCat(id, "\n", req.body()))};
  absl::StatusOr<registry::ChangeResult> result =
      co_await AwaitCallback<absl::StatusOr<registry::ChangeResult>>(
          StartApply(backend_, std::move(change)));
  if (!result.ok()) {
    const absl::Status& s = result.status();
    Audit("credits.grant", token, peer, id, "", absl::IsUnavailable(s) ? "failed" : "refused");
    if (absl::IsNotFound(s)) {
      co_return NotFoundProblem(absl::StrCat("id: no subject \"", id, "\""), version);
    }
    if (absl::IsFailedPrecondition(s)) {
      co_return FieldProblem(422, "Unprocessable Content",
                             "Idempotency-Key: already used for a different request",
                             "Idempotency-Key", version);
    }
    if (absl::IsOutOfRange(s)) {
      co_return FieldProblem(422, "Unprocessable Content", absl::StrCat("add: ", s.message()),
                             "add", version);
    }
    co_return Unavailable(s, version);
  }
  Audit("credits.grant", token, peer, id, "", result->replayed ? "replayed" : "ok");
  // The grant reaches this instance's index before the answer; a replay's balance is the one in
  // force now (at least the grant's own).
  std::shared_ptr<const registry::Subject> now = index_->FindSubject(id);
  const int64_t granted =
      std::max(result->grant.balance, now != nullptr ? now->credits : int64_t{0});
  // Named, not inside the braces: GCC mishandles co_await in an initializer list.
  Json balance = co_await CreditBalance(fe, id, granted);
  Json body{{"subject", id},
            {"grant", registry::CreditGrantJson(result->grant)},
            {"credits", std::move(balance)}};
  Response res = JsonResponse(201, body.dump(), version, true);
  if (result->replayed) res.set("Idempotent-Replayed", "true");
  res.set(bhttp::field::cache_control, "no-store");
  co_return res;
}

asio::awaitable<Response> RegistryApi::ListCredits(const Frontend& fe, const Request& req,
                                                   const std::string& id) {
  const unsigned version = req.version();
  const std::string_view query = SplitTarget(Sv(req.target())).second;
  if (std::optional<std::string_view> twice = RepeatedParam(query)) {
    co_return FieldProblem(400, "Bad Request",
                           absl::StrCat(ToAbsl(*twice), ": given more than once"), *twice, version);
  }
  const auto digits = [](const std::string& t) {
    return !t.empty() &&
           std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  size_t limit = kDefaultPageSize;
  if (std::optional<std::string> text = QueryParam(query, "limit")) {
    uint64_t n = 0;
    if (!digits(*text) || !absl::SimpleAtoi(*text, &n) || n < 1 || n > kMaxPageSize) {
      co_return FieldProblem(400, "Bad Request",
                             absl::StrCat("limit: must be an integer from 1 to ", kMaxPageSize),
                             "limit", version);
    }
    limit = static_cast<size_t>(n);
  }
  int64_t before = 0;
  if (HasParam(query, "cursor")) {
    std::optional<std::string> text = QueryParam(query, "cursor");
    if (!text.has_value() || !digits(*text) || !absl::SimpleAtoi(*text, &before) || before < 1) {
      co_return FieldProblem(400, "Bad Request",
                             "cursor: must be the next_cursor of an earlier page", "cursor",
                             version);
    }
  }
  if (index_->FindSubject(id) == nullptr) {
    if (fe.keys.FindSubject(id) != nullptr) {
      // A subject of the configuration file has no credits of its own.
      Json balance = co_await CreditBalance(fe, id, 0);
      Json body{{"subject", id},
                {"credits", std::move(balance)},
                {"grants", Json::array()},
                {"next_cursor", nullptr}};
      co_return JsonResponse(200, body.dump(), version, true);
    }
    co_return NotFoundProblem(absl::StrCat("id: no subject \"", id, "\""), version);
  }
  absl::StatusOr<registry::CreditPage> page =
      co_await AwaitCallback<absl::StatusOr<registry::CreditPage>>(
          [&](registry::CreditPageCallback done) {
            backend_->ReadCredits(id, before, limit, std::move(done));
          });
  if (!page.ok()) {
    if (absl::IsNotFound(page.status())) {
      co_return NotFoundProblem(absl::StrCat("id: no subject \"", id, "\""), version);
    }
    co_return FieldProblem(
        503, "Service Unavailable",
        absl::StrCat("the registry could not be read: ", page.status().message()), "", version);
  }
  Json grants = Json::array();
  for (const registry::CreditGrant& g : page->grants)
    grants.push_back(registry::CreditGrantJson(g));
  // The newest grant's balance is the total the registry holds; this instance's index may not
  // have it yet (another instance granted it a moment ago).
  std::shared_ptr<const registry::Subject> subject = index_->FindSubject(id);
  int64_t granted = subject != nullptr ? subject->credits : 0;
  if (before == 0 && !page->grants.empty()) {
    granted = std::max(granted, page->grants.front().balance);
  }
  Json balance = co_await CreditBalance(fe, id, granted);
  Json body{{"subject", id},
            {"credits", std::move(balance)},
            {"grants", std::move(grants)},
            {"next_cursor",
             page->next_before > 0 ? Json(absl::StrCat(page->next_before)) : Json(nullptr)}};
  co_return JsonResponse(200, body.dump(), version, true);
}

Response RegistryApi::ListKeys(const Frontend& fe, const Request& req, const std::string& id) {
  const unsigned version = req.version();
  Json keys = Json::array();
  if (index_->FindSubject(id) != nullptr) {
    for (const registry::Key& k : index_->KeysOf(id)) keys.push_back(registry::KeyJson(k));
  } else if (fe.keys.FindSubject(id) != nullptr) {
    for (const Sha256Digest& digest : fe.keys.DigestsOf(id)) {
      keys.push_back(Json{{"id", ConfigKeyId(digest)},
                          {"subject", id},
                          {"prefix", ""},
                          {"name", nullptr},
                          {"expires_at", nullptr},
                          {"created_at", nullptr},
                          {"imported", true},
                          {"source", "config"}});
    }
  } else {
    return NotFoundProblem(absl::StrCat("id: no subject \"", id, "\""), version);
  }
  return JsonResponse(200, Json{{"keys", std::move(keys)}}.dump(), version, true);
}

asio::awaitable<Response> RegistryApi::RevokeKey(const Frontend& fe, const Request& req,
                                                 std::string_view key_id, const AdminToken& token,
                                                 const Peer& peer) {
  const unsigned version = req.version();
  std::optional<uint64_t> id = registry::ParseKeyId(key_id);
  if (!id.has_value()) {
    co_return NotFoundProblem("key_id: no such key (want key_ and 16 hex digits)", version);
  }
  if (!index_->FindKey(*id).has_value()) {
    for (const std::string& subject : fe.keys.subjects()) {
      for (const Sha256Digest& digest : fe.keys.DigestsOf(subject)) {
        if (ConfigKeyId(digest) == key_id) {
          co_return Conflict(
              "key_id: this key is defined by the configuration file (keys:) and is read-only "
              "here",
              "key_id", version);
        }
      }
    }
  }
  std::optional<registry::Key> known = index_->FindKey(*id);
  const std::string subject = known.has_value() ? known->subject : "";
  registry::Change change{.kind = registry::Change::Kind::kRevokeKey, .key_id = *id};
  absl::StatusOr<registry::ChangeResult> result =
      co_await AwaitCallback<absl::StatusOr<registry::ChangeResult>>(
          StartApply(backend_, std::move(change)));
  if (absl::IsNotFound(result.status())) {
    co_return NotFoundProblem(absl::StrCat("key_id: no key \"", ToAbsl(key_id), "\""), version);
  }
  if (!result.ok()) {
    Audit("key.revoke", token, peer, subject, key_id, "failed");
    co_return Unavailable(result.status(), version);
  }
  Audit("key.revoke", token, peer, subject, key_id, "ok");
  co_return NoContent(version);
}

void RegistryApi::RememberPlaintext(const std::string& idempotency_key, uint64_t key_id,
                                    std::string plaintext, absl::Time now, bool made) {
  std::lock_guard lock(replay_mu_);
  if (replays_.size() >= kReplayEntries) {
    absl::erase_if(replays_, [now](const auto& kv) { return kv.second.until <= now; });
    if (replays_.size() >= kReplayEntries) return;  // bounded: the replay then omits the key
  }
  // Before the write, a try does not displace an earlier one's entry (that one may be the key that
  // was made); the try whose key was made writes it again once it knows (`made`). A replay shows
  // only the key that was made.
  Replay entry{.key_id = key_id, .plaintext = std::move(plaintext), .until = now + kReplayWindow};
  auto [it, inserted] = replays_.try_emplace(idempotency_key, entry);
  if (!inserted && (made || it->second.until <= now)) it->second = std::move(entry);
}

void RegistryApi::ForgetPlaintext(const std::string& idempotency_key, uint64_t key_id) {
  std::lock_guard lock(replay_mu_);
  auto it = replays_.find(idempotency_key);
  if (it != replays_.end() && it->second.key_id == key_id) replays_.erase(it);
}

std::string RegistryApi::RecallPlaintext(const std::string& idempotency_key, uint64_t key_id,
                                         absl::Time now) {
  std::lock_guard lock(replay_mu_);
  auto it = replays_.find(idempotency_key);
  if (it == replays_.end() || it->second.until <= now || it->second.key_id != key_id) return "";
  return it->second.plaintext;
}

}  // namespace sluice::http
