// The registry routes of the admin plane (docs/registry.md): subjects and their API keys at
// runtime.
//
//   PUT    /v1/subjects/{id}        create (201) or replace (200) a subject
//   GET    /v1/subjects/{id}        the subject with its usage
//   DELETE /v1/subjects/{id}        delete it and revoke its keys (204)
//   GET    /v1/subjects             ?plan=&cursor=&limit= — pages of subjects
//   POST   /v1/subjects/{id}/keys   issue (or import) a key; the plaintext is in this answer only
//   GET    /v1/subjects/{id}/keys   its keys, without plaintext
//   DELETE /v1/keys/{key_id}        revoke a key (204)
//   POST   /v1/subjects/{id}/credits   grant prepaid credits (Idempotency-Key required)
//   GET    /v1/subjects/{id}/credits   ?cursor=&limit= — the credit ledger, newest first
//
// Subjects that the configuration file's `keys:` define are shown (`"source": "config"`) but
// cannot be changed here (409).
#ifndef SLUICE_HTTP_REGISTRY_API_H_
#define SLUICE_HTTP_REGISTRY_API_H_

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <boost/asio/awaitable.hpp>
#include <nlohmann/json.hpp>

#include <mutex>
#include <shared_mutex>
#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "sluice/http/routes.h"
#include "sluice/http/server.h"
#include "sluice/limiter/plan.h"
#include "sluice/registry/backend.h"
#include "sluice/registry/effective_plan.h"
#include "sluice/registry/index.h"

namespace sluice::http {

// Moved to registry/effective_plan.h; the old names stay for code that still spells them http::.
using registry::EffectivePlan;
using registry::NextOverrideEnd;

class RegistryApi {
 public:
  // `index`, `backend` and `frontend` must outlive this object.
  RegistryApi(registry::Index* index, registry::Backend* backend, const FrontendHolder* frontend)
      : index_(index), backend_(backend), frontend_(frontend) {}

  // Held by a reload while it checks that no subject is on a plan it removes and swaps the
  // Frontend in: a subject written meanwhile is validated against the plans in force once the
  // lock is released, so no write can put a subject on a plan that is going away.
  [[nodiscard]] std::unique_lock<std::shared_mutex> BlockSubjectWrites() {
    return std::unique_lock(plans_mu_);
  }

  // True if `path` is one of the routes above.
  [[nodiscard]] static bool Owns(std::string_view path);

  // Answers a request for one of the routes; `token` has already been checked.
  boost::asio::awaitable<Response> Handle(const Frontend& fe, const Request& req,
                                          const AdminToken& token, const Peer& peer);

 private:
  boost::asio::awaitable<Response> PutSubject(const Frontend& fe, const Request& req,
                                              const std::string& id, const AdminToken& token,
                                              const Peer& peer);
  boost::asio::awaitable<Response> GetSubject(const Frontend& fe, const Request& req,
                                              const std::string& id, bool full);
  boost::asio::awaitable<Response> DeleteSubject(const Frontend& fe, const Request& req,
                                                 const std::string& id, const AdminToken& token,
                                                 const Peer& peer);
  Response ListSubjects(const Frontend& fe, const Request& req, bool full);
  boost::asio::awaitable<Response> CreateKey(const Frontend& fe, const Request& req,
                                             const std::string& id, const AdminToken& token,
                                             const Peer& peer);
  Response ListKeys(const Frontend& fe, const Request& req, const std::string& id);
  boost::asio::awaitable<Response> GrantCredits(const Frontend& fe, const Request& req,
                                                const std::string& id, const AdminToken& token,
                                                const Peer& peer);
  boost::asio::awaitable<Response> ListCredits(const Frontend& fe, const Request& req,
                                               const std::string& id);
  // The subject's credits now: granted, and each credit limit's effective quota, used and
  // remaining. Null when the store did not answer (the grant itself is done).
  boost::asio::awaitable<nlohmann::json> CreditBalance(const Frontend& fe, const std::string& id,
                                                       int64_t granted);
  boost::asio::awaitable<Response> RevokeKey(const Frontend& fe, const Request& req,
                                             std::string_view key_id, const AdminToken& token,
                                             const Peer& peer);

  // The plaintext of keys created here recently, by idempotency key, so that a retried creation
  // can be answered in full. Kept in memory only, for kReplayWindow, at most kReplayEntries.
  // Remembered before the key is written (a retry racing the first attempt finds it), under the
  // key's id (a replay shows it only for the key the backend says was made).
  struct Replay {
    uint64_t key_id = 0;
    std::string plaintext;
    absl::Time until;
  };
  void RememberPlaintext(const std::string& idempotency_key, uint64_t key_id, std::string plaintext,
                         absl::Time now, bool made);
  void ForgetPlaintext(const std::string& idempotency_key, uint64_t key_id);
  [[nodiscard]] std::string RecallPlaintext(const std::string& idempotency_key, uint64_t key_id,
                                            absl::Time now);

  registry::Index* index_;
  registry::Backend* backend_;
  const FrontendHolder* frontend_;
  std::shared_mutex plans_mu_;  // see BlockSubjectWrites
  std::mutex replay_mu_;
  absl::flat_hash_map<std::string, Replay> replays_;  // guarded by replay_mu_
};

}  // namespace sluice::http

#endif  // SLUICE_HTTP_REGISTRY_API_H_
