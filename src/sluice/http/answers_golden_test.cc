// The data plane's answers, byte for byte as a client reads them off the socket (status line,
// every header in order, body), for every kind of answer /v1/authorize and /v1/check give: an
// admission, a denial (429 and server.deny_status 403), a store failure under on_store_error deny
// and allow, a shadow limit that would have denied, and each refusal (unknown, expired or missing
// key, disabled subject, registry loading, plan unknown here, bad input). Also what the server
// itself adds or refuses: HTTP/1.0, HEAD, pipelining, a request it cannot parse. Only the Date
// header's value is masked.
//
// These pin today's bytes so that a change to how answers are built or written shows here first;
// a deliberate change of an answer updates its golden in the same commit.
#include <sys/socket.h>
#include <sys/time.h>

#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "sluice/common/clock.h"
#include "sluice/config/config.h"
#include "sluice/frontend/client_address.h"
#include "sluice/frontend/key_registry.h"
#include "sluice/http/routes.h"
#include "sluice/http/server.h"
#include "sluice/http/sha256.h"
#include "sluice/limiter/limiter.h"
#include "sluice/limiter/plan.h"
#include "sluice/limiter/test_counting_store.h"
#include "sluice/metrics/metrics.h"
#include "sluice/registry/index.h"
#include "sluice/registry/model.h"
#include "sluice/store/memory/memory_store.h"

namespace sluice::http {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;

// 2026-12-06 14:00:18 UTC: 42 s left in the minute, 35982 s in the day.
constexpr absl::Time kNow = absl::FromUnixSeconds(1796565600 + 18);

constexpr char kConfig[] = R"(
server:
  api_key_header: X-API-Key
  deny_status: 429
plans:
  free:
    limits:
      - { name: per_minute, quota: 2, window: 1m }
      - { name: daily, quota: 10, window: day }
  trial:
    limits:
      - { name: per_minute, quota: 5, window: 1m }
      - { name: preview, quota: 1, window: 1h, shadow: true }
keys:
  - { key: free-key, subject: user-1, plan: free }
  - { key: trial-key, subject: user-2, plan: trial }
)";

// The raw SHA-256 of `key` as the registry keeps it.
registry::Digest DigestOf(std::string_view key) {
  const std::string raw = Sha256(key);
  registry::Digest d{};
  std::copy(raw.begin(), raw.end(), reinterpret_cast<char*>(d.data()));
  return d;
}

// The registry: reg-1 (free, its per_minute raised to 3 by an override) with a valid key, off-1
// disabled with a key, old-1 whose key expired, elsewhere-1 on a plan this configuration lacks.
void FillRegistry(registry::Index& index) {
  std::vector<registry::Subject> subjects = {
      {.id = "reg-1", .plan = "free", .overrides = {{.limit = "per_minute", .quota = 3}}},
      {.id = "off-1", .plan = "free", .disabled = true},
      {.id = "old-1", .plan = "free"},
      {.id = "elsewhere-1", .plan = "gold"},
  };
  std::vector<registry::Key> keys = {
      {.id = 1, .subject = "reg-1", .digest = DigestOf("reg-key")},
      {.id = 2, .subject = "off-1", .digest = DigestOf("off-key")},
      {.id = 3,
       .subject = "old-1",
       .digest = DigestOf("old-key"),
       .expires_at = kNow - absl::Hours(1)},
      {.id = 4, .subject = "elsewhere-1", .digest = DigestOf("elsewhere-key")},
  };
  index.Replace(std::move(subjects), std::move(keys));
}

struct FrontendOptions {
  int deny_status = 429;
  config::OnStoreError on_store_error = config::OnStoreError::kAllow;
};

class AnswersGoldenTest : public ::testing::Test {
 protected:
  AnswersGoldenTest() : clock_(kNow), metrics_(registry_) { FillRegistry(index_); }

  ~AnswersGoldenTest() override {
    io_.stop();
    if (thread_.joinable()) thread_.join();
    for (auto& p : planes_) p->server.ReleaseAcceptors();
  }

  // One data plane on its own port, over `store`, with `index` as its registry (may be null).
  struct Plane {
    Plane(std::shared_ptr<const Frontend> fe, HttpMetrics* metrics, const registry::Index* index)
        : holder(std::move(fe)), handler(&holder, metrics, index), server(&handler, {}) {}
    FrontendHolder holder;
    DataPlane handler;
    HttpServer server;
  };

  std::shared_ptr<const Frontend> MakeFrontend(Store* store, FrontendOptions options) {
    absl::StatusOr<config::Config> cfg = config::ParseConfig(kConfig, "golden.yaml");
    EXPECT_TRUE(cfg.ok()) << cfg.status();
    cfg->server.deny_status = options.deny_status;
    auto fe = std::make_shared<Frontend>();
    fe->server = cfg->server;
    fe->on_store_error = options.on_store_error;
    fe->limiter =
        std::make_unique<Limiter>(*PlanSet::FromConfig(*cfg), store, &clock_,
                                  LimiterOptions{.on_store_error = options.on_store_error});
    fe->keys = *frontend::KeyRegistry::FromConfig(*cfg);
    fe->proxies = *frontend::ProxyTrust::FromCidrs({});
    return fe;
  }

  // Starts a data plane and returns its port.
  uint16_t Start(Store* store, FrontendOptions options = {},
                 const registry::Index* index = nullptr) {
    auto plane = std::make_unique<Plane>(MakeFrontend(store, options), &metrics_,
                                         index != nullptr ? index : &index_);
    const absl::Status listening =
        plane->server.Listen({&io_}, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    EXPECT_TRUE(listening.ok()) << listening;
    const uint16_t port = plane->server.port();
    planes_.push_back(std::move(plane));
    if (!thread_.joinable()) {
      thread_ = std::thread([this] {
        auto guard = asio::make_work_guard(io_);
        io_.run();
      });
    }
    return port;
  }

  // Sends `request` on a new connection and returns the `answers` it gets, as read, with the Date
  // header's value masked.
  static std::vector<std::string> Exchange(uint16_t port, std::string_view request,
                                           size_t answers = 1, bool head = false) {
    asio::io_context io;
    tcp::socket socket(io);
    socket.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
    timeval timeout{.tv_sec = 10, .tv_usec = 0};  // a missing answer fails instead of hanging
    ::setsockopt(socket.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    asio::write(socket, asio::buffer(request));
    std::string input;
    std::vector<std::string> out;
    while (out.size() < answers) {
      size_t end = input.find("\r\n\r\n");
      while (end == std::string::npos) {
        if (!ReadMore(socket, &input)) return out;
        end = input.find("\r\n\r\n");
      }
      const size_t length = head ? 0 : ContentLength(input.substr(0, end + 2));
      while (input.size() < end + 4 + length) {
        if (!ReadMore(socket, &input)) return out;
      }
      out.push_back(MaskDate(input.substr(0, end + 4 + length)));
      input.erase(0, end + 4 + length);
    }
    return out;
  }

  static std::string Answer(uint16_t port, std::string_view request) {
    std::vector<std::string> got = Exchange(port, request);
    return got.empty() ? "(no answer)" : got[0];
  }

  static bool ReadMore(tcp::socket& socket, std::string* input) {
    char buf[4096];
    boost::system::error_code ec;
    const size_t n = socket.read_some(asio::buffer(buf), ec);
    if (ec) return false;
    input->append(buf, n);
    return true;
  }

  static size_t ContentLength(std::string_view head) {
    for (size_t at = head.find("\r\n"); at != std::string_view::npos;
         at = head.find("\r\n", at + 2)) {
      const std::string line(head.substr(at + 2, head.find("\r\n", at + 2) - at - 2));
      constexpr std::string_view kName = "content-length: ";
      if (absl::AsciiStrToLower(line.substr(0, kName.size())) == kName) {
        size_t n = 0;
        if (absl::SimpleAtoi(line.substr(kName.size()), &n)) return n;
      }
    }
    return 0;
  }

  static std::string MaskDate(std::string answer) {
    const size_t at = answer.find("\r\nDate: ");
    if (at == std::string::npos) return answer;
    const size_t from = at + 8;
    return answer.replace(from, answer.find("\r\n", from) - from, "<date>");
  }

  static std::string Authorize(std::string_view key) {
    return "GET /v1/authorize HTTP/1.1\r\nHost: sluice\r\nX-API-Key: " + std::string(key) +
           "\r\n\r\n";
  }
  static std::string Check(std::string_view body) {
    return "POST /v1/check HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\n"
           "Content-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + std::string(body);
  }

  FakeClock clock_;
  MemoryStore store_;
  testing_util::CountingStore failing_store_;
  metrics::Registry registry_;
  HttpMetrics metrics_;
  registry::Index index_;
  std::vector<std::unique_ptr<Plane>> planes_;
  std::thread thread_;
  // Last: destroyed first, with the sessions' coroutine frames, while the planes still exist.
  asio::io_context io_{1};
};

TEST_F(AnswersGoldenTest, AuthorizeAdmission) {
  const uint16_t port = Start(&store_);
  EXPECT_EQ(Answer(port, Authorize("free-key")),
            "HTTP/1.1 200 OK\r\n"
            "Date: <date>\r\n"
            "Sluice-Subject: user-1\r\n"
            "Sluice-Plan: free\r\n"
            "RateLimit-Policy: \"per_minute\";q=2;w=60, \"daily\";q=10;w=86400\r\n"
            "RateLimit: \"per_minute\";r=1;t=42, \"daily\";r=9;t=35982\r\n"
            "X-RateLimit-Limit: 2\r\n"
            "X-RateLimit-Remaining: 1\r\n"
            "X-RateLimit-Reset: 42\r\n"
            "Content-Length: 0\r\n"
            "\r\n");
}

TEST_F(AnswersGoldenTest, AuthorizeDenialWith429) {
  const uint16_t port = Start(&store_);
  Answer(port, Authorize("free-key"));
  Answer(port, Authorize("free-key"));
  EXPECT_EQ(Answer(port, Authorize("free-key")),
            "HTTP/1.1 429 Too Many Requests\r\n"
            "Date: <date>\r\n"
            "Content-Type: application/problem+json\r\n"
            "RateLimit-Policy: \"per_minute\";q=2;w=60, \"daily\";q=10;w=86400\r\n"
            "RateLimit: \"per_minute\";r=0;t=42, \"daily\";r=8;t=35982\r\n"
            "X-RateLimit-Limit: 2\r\n"
            "X-RateLimit-Remaining: 0\r\n"
            "X-RateLimit-Reset: 42\r\n"
            "Retry-After: 42\r\n"
            "Sluice-Denied: quota\r\n"
            "Sluice-Subject: user-1\r\n"
            "Sluice-Plan: free\r\n"
            "Content-Length: 258\r\n"
            "\r\n"
            "{\"type\":\"https://iana.org/assignments/http-problem-types#quota-exceeded\","
            "\"title\":\"Request cannot be satisfied as assigned quota has been exceeded\","
            "\"status\":429,\"detail\":\"Quota exceeded: per_minute; retry after 42 seconds.\","
            "\"violated-policies\":[\"per_minute\"]}");
}

TEST_F(AnswersGoldenTest, AuthorizeDenialWithDenyStatus403) {
  const uint16_t port = Start(&store_, {.deny_status = 403});
  Answer(port, Authorize("free-key"));
  Answer(port, Authorize("free-key"));
  EXPECT_EQ(Answer(port, Authorize("free-key")),
            "HTTP/1.1 403 Forbidden\r\n"
            "Date: <date>\r\n"
            "Content-Type: application/problem+json\r\n"
            "RateLimit-Policy: \"per_minute\";q=2;w=60, \"daily\";q=10;w=86400\r\n"
            "RateLimit: \"per_minute\";r=0;t=42, \"daily\";r=8;t=35982\r\n"
            "X-RateLimit-Limit: 2\r\n"
            "X-RateLimit-Remaining: 0\r\n"
            "X-RateLimit-Reset: 42\r\n"
            "Retry-After: 42\r\n"
            "Sluice-Denied: quota\r\n"
            "Sluice-Subject: user-1\r\n"
            "Sluice-Plan: free\r\n"
            "Content-Length: 258\r\n"
            "\r\n"
            "{\"type\":\"https://iana.org/assignments/http-problem-types#quota-exceeded\","
            "\"title\":\"Request cannot be satisfied as assigned quota has been exceeded\","
            "\"status\":403,\"detail\":\"Quota exceeded: per_minute; retry after 42 seconds.\","
            "\"violated-policies\":[\"per_minute\"]}");
}

TEST_F(AnswersGoldenTest, AuthorizeStoreFailureUnderDeny) {
  failing_store_.failure = StoreFailure::kTimeout;
  const uint16_t port = Start(&failing_store_, {.on_store_error = config::OnStoreError::kDeny});
  EXPECT_EQ(Answer(port, Authorize("free-key")),
            "HTTP/1.1 503 Service Unavailable\r\n"
            "Date: <date>\r\n"
            "Content-Type: application/problem+json\r\n"
            "Sluice-Degraded: 1\r\n"
            "RateLimit-Policy: \"per_minute\";q=2;w=60, \"daily\";q=10;w=86400\r\n"
            "RateLimit: \"per_minute\";r=2;t=42, \"daily\";r=10;t=35982\r\n"
            "X-RateLimit-Limit: 2\r\n"
            "X-RateLimit-Remaining: 2\r\n"
            "X-RateLimit-Reset: 42\r\n"
            "Content-Length: 139\r\n"
            "\r\n"
            "{\"type\":\"about:blank\",\"title\":\"Service Unavailable\",\"status\":503,"
            "\"detail\":\"the rate limit store is unavailable and on_store_error is deny\"}");
}

TEST_F(AnswersGoldenTest, AuthorizeStoreFailureUnderAllow) {
  failing_store_.failure = StoreFailure::kConnection;
  const uint16_t port = Start(&failing_store_, {.on_store_error = config::OnStoreError::kAllow});
  EXPECT_EQ(Answer(port, Authorize("free-key")),
            "HTTP/1.1 200 OK\r\n"
            "Date: <date>\r\n"
            "Sluice-Subject: user-1\r\n"
            "Sluice-Plan: free\r\n"
            "Sluice-Degraded: 1\r\n"
            "RateLimit-Policy: \"per_minute\";q=2;w=60, \"daily\";q=10;w=86400\r\n"
            "RateLimit: \"per_minute\";r=2;t=42, \"daily\";r=10;t=35982\r\n"
            "X-RateLimit-Limit: 2\r\n"
            "X-RateLimit-Remaining: 2\r\n"
            "X-RateLimit-Reset: 42\r\n"
            "Content-Length: 0\r\n"
            "\r\n");
}

TEST_F(AnswersGoldenTest, AuthorizeShadowLimitThatWouldHaveDenied) {
  const uint16_t port = Start(&store_);
  Answer(port, Authorize("trial-key"));
  EXPECT_EQ(Answer(port, Authorize("trial-key")),
            "HTTP/1.1 200 OK\r\n"
            "Date: <date>\r\n"
            "Sluice-Subject: user-2\r\n"
            "Sluice-Plan: trial\r\n"
            "Sluice-Shadow-Denied: preview\r\n"
            "RateLimit-Policy: \"per_minute\";q=5;w=60, \"preview\";q=1;w=3600\r\n"
            "RateLimit: \"per_minute\";r=3;t=42, \"preview\";r=0;t=3582\r\n"
            "X-RateLimit-Limit: 5\r\n"
            "X-RateLimit-Remaining: 3\r\n"
            "X-RateLimit-Reset: 42\r\n"
            "Content-Length: 0\r\n"
            "\r\n");
}

TEST_F(AnswersGoldenTest, AuthorizeRegistryKeyWithAnOverride) {
  const uint16_t port = Start(&store_);
  EXPECT_EQ(Answer(port, Authorize("reg-key")),
            "HTTP/1.1 200 OK\r\n"
            "Date: <date>\r\n"
            "Sluice-Subject: reg-1\r\n"
            "Sluice-Plan: free\r\n"
            "RateLimit-Policy: \"per_minute\";q=3;w=60, \"daily\";q=10;w=86400\r\n"
            "RateLimit: \"per_minute\";r=2;t=42, \"daily\";r=9;t=35982\r\n"
            "X-RateLimit-Limit: 3\r\n"
            "X-RateLimit-Remaining: 2\r\n"
            "X-RateLimit-Reset: 42\r\n"
            "Content-Length: 0\r\n"
            "\r\n");
}

TEST_F(AnswersGoldenTest, AuthorizeUnknownKey) {
  const uint16_t port = Start(&store_);
  EXPECT_EQ(Answer(port, Authorize("no-such-key")),
            "HTTP/1.1 401 Unauthorized\r\n"
            "Date: <date>\r\n"
            "Content-Type: application/problem+json\r\n"
            "WWW-Authenticate: Bearer\r\n"
            "Content-Length: 85\r\n"
            "\r\n"
            "{\"type\":\"about:blank\",\"title\":\"Unauthorized\",\"status\":401,"
            "\"detail\":\"unknown API key\"}");
}

TEST_F(AnswersGoldenTest, AuthorizeExpiredKey) {
  const uint16_t port = Start(&store_);
  EXPECT_EQ(Answer(port, Authorize("old-key")),
            "HTTP/1.1 401 Unauthorized\r\n"
            "Date: <date>\r\n"
            "Content-Type: application/problem+json\r\n"
            "WWW-Authenticate: Bearer\r\n"
            "Content-Length: 85\r\n"
            "\r\n"
            "{\"type\":\"about:blank\",\"title\":\"Unauthorized\",\"status\":401,"
            "\"detail\":\"API key expired\"}");
}

TEST_F(AnswersGoldenTest, AuthorizeDisabledSubject) {
  const uint16_t port = Start(&store_);
  EXPECT_EQ(Answer(port, Authorize("off-key")),
            "HTTP/1.1 403 Forbidden\r\n"
            "Date: <date>\r\n"
            "Content-Type: application/problem+json\r\n"
            "Sluice-Denied: disabled\r\n"
            "Content-Length: 96\r\n"
            "\r\n"
            "{\"type\":\"about:blank\",\"title\":\"Forbidden\",\"status\":403,"
            "\"detail\":\"subject \\\"off-1\\\" is disabled\"}");
}

TEST_F(AnswersGoldenTest, AuthorizeWhileTheRegistryLoads) {
  registry::Index loading;
  const uint16_t port = Start(&store_, {}, &loading);
  EXPECT_EQ(Answer(port, Authorize("reg-key")),
            "HTTP/1.1 503 Service Unavailable\r\n"
            "Date: <date>\r\n"
            "Content-Type: application/problem+json\r\n"
            "Retry-After: 1\r\n"
            "Content-Length: 133\r\n"
            "\r\n"
            "{\"type\":\"about:blank\",\"title\":\"Service Unavailable\",\"status\":503,"
            "\"detail\":\"the registry of API keys is still loading; retry shortly\"}");
}

TEST_F(AnswersGoldenTest, AuthorizeSubjectOnAPlanThisInstanceLacks) {
  const uint16_t port = Start(&store_);
  EXPECT_EQ(Answer(port, Authorize("elsewhere-key")),
            "HTTP/1.1 503 Service Unavailable\r\n"
            "Date: <date>\r\n"
            "Content-Type: application/problem+json\r\n"
            "Content-Length: 173\r\n"
            "\r\n"
            "{\"type\":\"about:blank\",\"title\":\"Service Unavailable\",\"status\":503,"
            "\"detail\":\"subject \\\"elsewhere-1\\\" is on plan \\\"gold\\\","
            " which this instance's configuration does not define\"}");
}

TEST_F(AnswersGoldenTest, AuthorizeWithoutAKey) {
  const uint16_t port = Start(&store_);
  EXPECT_EQ(Answer(port, "GET /v1/authorize HTTP/1.1\r\nHost: sluice\r\n\r\n"),
            "HTTP/1.1 401 Unauthorized\r\n"
            "Date: <date>\r\n"
            "Content-Type: application/problem+json\r\n"
            "WWW-Authenticate: Bearer\r\n"
            "Content-Length: 127\r\n"
            "\r\n"
            "{\"type\":\"about:blank\",\"title\":\"Unauthorized\",\"status\":401,"
            "\"detail\":\"missing API key (send X-API-Key or Authorization: Bearer)\"}");
}

TEST_F(AnswersGoldenTest, AuthorizeWithABadCost) {
  const uint16_t port = Start(&store_);
  EXPECT_EQ(Answer(port,
                   "GET /v1/authorize HTTP/1.1\r\nHost: sluice\r\nX-API-Key: free-key\r\n"
                   "Sluice-Cost: many\r\n\r\n"),
            "HTTP/1.1 400 Bad Request\r\n"
            "Date: <date>\r\n"
            "Content-Type: application/problem+json\r\n"
            "Content-Length: 118\r\n"
            "\r\n"
            "{\"type\":\"about:blank\",\"title\":\"Bad Request\",\"status\":400,"
            "\"detail\":\"Sluice-Cost: must be an integer from 0 to 1000000\"}");
}

TEST_F(AnswersGoldenTest, CheckAdmission) {
  const uint16_t port = Start(&store_);
  EXPECT_EQ(Answer(port, Check(R"({"api_key":"free-key"})")),
            "HTTP/1.1 200 OK\r\n"
            "Date: <date>\r\n"
            "Content-Type: application/json\r\n"
            "RateLimit-Policy: \"per_minute\";q=2;w=60, \"daily\";q=10;w=86400\r\n"
            "RateLimit: \"per_minute\";r=1;t=42, \"daily\";r=9;t=35982\r\n"
            "X-RateLimit-Limit: 2\r\n"
            "X-RateLimit-Remaining: 1\r\n"
            "X-RateLimit-Reset: 42\r\n"
            "Content-Length: 297\r\n"
            "\r\n"
            "{\"allowed\":true,\"subject\":\"user-1\",\"plan\":\"free\",\"degraded\":false,"
            "\"retry_after\":0,\"violated\":[],\"limits\":[{\"name\":\"per_minute\",\"quota\":2,"
            "\"used\":1,\"held\":0,\"remaining\":1,\"reset_after\":42,\"window\":\"1m\"},"
            "{\"name\":\"daily\",\"quota\":10,\"used\":1,\"held\":0,\"remaining\":9,\"reset_"
            "after\":35982,"
            "\"window\":\"day\"}]}");
}

TEST_F(AnswersGoldenTest, CheckDenial) {
  const uint16_t port = Start(&store_);
  Answer(port, Check(R"({"subject":"user-9","plan":"free","cost":2})"));
  EXPECT_EQ(
      Answer(port, Check(R"({"subject":"user-9","plan":"free"})")),
      "HTTP/1.1 200 OK\r\n"
      "Date: <date>\r\n"
      "Content-Type: application/json\r\n"
      "RateLimit-Policy: \"per_minute\";q=2;w=60, \"daily\";q=10;w=86400\r\n"
      "RateLimit: \"per_minute\";r=0;t=42, \"daily\";r=8;t=35982\r\n"
      "X-RateLimit-Limit: 2\r\n"
      "X-RateLimit-Remaining: 0\r\n"
      "X-RateLimit-Reset: 42\r\n"
      "Content-Length: 311\r\n"
      "\r\n"
      "{\"allowed\":false,\"subject\":\"user-9\",\"plan\":\"free\",\"degraded\":false,"
      "\"retry_after\":42,\"violated\":[\"per_minute\"],"
      "\"limits\":[{\"name\":\"per_minute\",\"quota\":2,\"used\":2,\"held\":0,\"remaining\":0,"
      "\"reset_after\":42,\"window\":\"1m\"},{\"name\":\"daily\",\"quota\":10,\"used\":2,"
      "\"held\":0,\"remaining\":8,\"reset_after\":35982,\"window\":\"day\"}]}");
}

TEST_F(AnswersGoldenTest, CheckStoreFailureUnderDeny) {
  failing_store_.failure = StoreFailure::kTimeout;
  const uint16_t port = Start(&failing_store_, {.on_store_error = config::OnStoreError::kDeny});
  EXPECT_EQ(Answer(port, Check(R"({"subject":"user-9","plan":"free"})")),
            "HTTP/1.1 200 OK\r\n"
            "Date: <date>\r\n"
            "Content-Type: application/json\r\n"
            "Sluice-Degraded: 1\r\n"
            "RateLimit-Policy: \"per_minute\";q=2;w=60, \"daily\";q=10;w=86400\r\n"
            "RateLimit: \"per_minute\";r=2;t=42, \"daily\";r=10;t=35982\r\n"
            "X-RateLimit-Limit: 2\r\n"
            "X-RateLimit-Remaining: 2\r\n"
            "X-RateLimit-Reset: 42\r\n"
            "Content-Length: 298\r\n"
            "\r\n"
            "{\"allowed\":false,\"subject\":\"user-9\",\"plan\":\"free\",\"degraded\":true,"
            "\"retry_after\":0,\"violated\":[],\"limits\":[{\"name\":\"per_minute\",\"quota\":2,"
            "\"used\":0,\"held\":0,\"remaining\":2,\"reset_after\":42,\"window\":\"1m\"},"
            "{\"name\":\"daily\",\"quota\":10,\"used\":0,\"held\":0,\"remaining\":10,\"reset_"
            "after\":35982,"
            "\"window\":\"day\"}]}");
}

TEST_F(AnswersGoldenTest, CheckShadowLimitThatWouldHaveDenied) {
  const uint16_t port = Start(&store_);
  Answer(port, Check(R"({"api_key":"trial-key"})"));
  EXPECT_EQ(Answer(port, Check(R"({"api_key":"trial-key"})")),
            "HTTP/1.1 200 OK\r\n"
            "Date: <date>\r\n"
            "Content-Type: application/json\r\n"
            "Sluice-Shadow-Denied: preview\r\n"
            "RateLimit-Policy: \"per_minute\";q=5;w=60, \"preview\";q=1;w=3600\r\n"
            "RateLimit: \"per_minute\";r=3;t=42, \"preview\";r=0;t=3582\r\n"
            "X-RateLimit-Limit: 5\r\n"
            "X-RateLimit-Remaining: 3\r\n"
            "X-RateLimit-Reset: 42\r\n"
            "Content-Length: 297\r\n"
            "\r\n"
            "{\"allowed\":true,\"subject\":\"user-2\",\"plan\":\"trial\",\"degraded\":false,"
            "\"retry_after\":0,\"violated\":[],\"limits\":[{\"name\":\"per_minute\",\"quota\":5,"
            "\"used\":2,\"held\":0,\"remaining\":3,\"reset_after\":42,\"window\":\"1m\"},"
            "{\"name\":\"preview\",\"quota\":1,\"used\":2,\"held\":0,\"remaining\":0,\"reset_"
            "after\":3582,"
            "\"window\":\"1h\"}]}");
}

TEST_F(AnswersGoldenTest, CheckUnknownKey) {
  const uint16_t port = Start(&store_);
  EXPECT_EQ(Answer(port, Check(R"({"api_key":"no-such-key"})")),
            "HTTP/1.1 401 Unauthorized\r\n"
            "Date: <date>\r\n"
            "Content-Type: application/problem+json\r\n"
            "WWW-Authenticate: Bearer\r\n"
            "Content-Length: 85\r\n"
            "\r\n"
            "{\"type\":\"about:blank\",\"title\":\"Unauthorized\",\"status\":401,"
            "\"detail\":\"unknown API key\"}");
}

TEST_F(AnswersGoldenTest, CheckDisabledSubject) {
  const uint16_t port = Start(&store_);
  EXPECT_EQ(Answer(port, Check(R"({"subject":"off-1"})")),
            "HTTP/1.1 403 Forbidden\r\n"
            "Date: <date>\r\n"
            "Content-Type: application/problem+json\r\n"
            "Sluice-Denied: disabled\r\n"
            "Content-Length: 96\r\n"
            "\r\n"
            "{\"type\":\"about:blank\",\"title\":\"Forbidden\",\"status\":403,"
            "\"detail\":\"subject \\\"off-1\\\" is disabled\"}");
}

TEST_F(AnswersGoldenTest, CheckSubjectWithoutAPlanWhileTheRegistryLoads) {
  registry::Index loading;
  const uint16_t port = Start(&store_, {}, &loading);
  EXPECT_EQ(Answer(port, Check(R"({"subject":"reg-1"})")),
            "HTTP/1.1 503 Service Unavailable\r\n"
            "Date: <date>\r\n"
            "Content-Type: application/problem+json\r\n"
            "Retry-After: 1\r\n"
            "Content-Length: 121\r\n"
            "\r\n"
            "{\"type\":\"about:blank\",\"title\":\"Service Unavailable\",\"status\":503,"
            "\"detail\":\"the registry is still loading; retry shortly\"}");
}

TEST_F(AnswersGoldenTest, CheckUnknownSubjectWithoutAPlan) {
  const uint16_t port = Start(&store_);
  EXPECT_EQ(Answer(port, Check(R"({"subject":"nobody"})")),
            "HTTP/1.1 400 Bad Request\r\n"
            "Date: <date>\r\n"
            "Content-Type: application/problem+json\r\n"
            "Content-Length: 127\r\n"
            "\r\n"
            "{\"type\":\"about:blank\",\"title\":\"Bad Request\",\"status\":400,"
            "\"detail\":\"plan: required (subject \\\"nobody\\\" is not in the registry)\"}");
}

TEST_F(AnswersGoldenTest, CheckBadBody) {
  const uint16_t port = Start(&store_);
  EXPECT_EQ(Answer(port, Check(R"({"subject":)")),
            "HTTP/1.1 400 Bad Request\r\n"
            "Date: <date>\r\n"
            "Content-Type: application/problem+json\r\n"
            "Content-Length: 89\r\n"
            "\r\n"
            "{\"type\":\"about:blank\",\"title\":\"Bad Request\",\"status\":400,"
            "\"detail\":\"body: not valid JSON\"}");
}

TEST_F(AnswersGoldenTest, CheckUnknownPlan) {
  const uint16_t port = Start(&store_);
  EXPECT_EQ(Answer(port, Check(R"({"subject":"user-9","plan":"gold"})")),
            "HTTP/1.1 400 Bad Request\r\n"
            "Date: <date>\r\n"
            "Content-Type: application/problem+json\r\n"
            "Content-Length: 96\r\n"
            "\r\n"
            "{\"type\":\"about:blank\",\"title\":\"Bad Request\",\"status\":400,"
            "\"detail\":\"plan: unknown plan \\\"gold\\\"\"}");
}

TEST_F(AnswersGoldenTest, Http10WithoutKeepAliveIsClosed) {
  const uint16_t port = Start(&store_);
  EXPECT_EQ(Answer(port, "GET /v1/authorize HTTP/1.0\r\nX-API-Key: free-key\r\n\r\n"),
            "HTTP/1.1 200 OK\r\n"
            "Date: <date>\r\n"
            "Sluice-Subject: user-1\r\n"
            "Sluice-Plan: free\r\n"
            "RateLimit-Policy: \"per_minute\";q=2;w=60, \"daily\";q=10;w=86400\r\n"
            "RateLimit: \"per_minute\";r=1;t=42, \"daily\";r=9;t=35982\r\n"
            "X-RateLimit-Limit: 2\r\n"
            "X-RateLimit-Remaining: 1\r\n"
            "X-RateLimit-Reset: 42\r\n"
            "Connection: close\r\n"
            "Content-Length: 0\r\n"
            "\r\n");
}

TEST_F(AnswersGoldenTest, Http10WithKeepAlive) {
  const uint16_t port = Start(&store_);
  EXPECT_EQ(Answer(port,
                   "GET /v1/authorize HTTP/1.0\r\nConnection: keep-alive\r\n"
                   "X-API-Key: free-key\r\n\r\n"),
            "HTTP/1.1 200 OK\r\n"
            "Date: <date>\r\n"
            "Sluice-Subject: user-1\r\n"
            "Sluice-Plan: free\r\n"
            "RateLimit-Policy: \"per_minute\";q=2;w=60, \"daily\";q=10;w=86400\r\n"
            "RateLimit: \"per_minute\";r=1;t=42, \"daily\";r=9;t=35982\r\n"
            "X-RateLimit-Limit: 2\r\n"
            "X-RateLimit-Remaining: 1\r\n"
            "X-RateLimit-Reset: 42\r\n"
            "Connection: keep-alive\r\n"
            "Content-Length: 0\r\n"
            "\r\n");
}

TEST_F(AnswersGoldenTest, HeadHasTheHeadersOfGetAndNoBody) {
  const uint16_t port = Start(&store_);
  const std::vector<std::string> got = Exchange(
      port, "HEAD /v1/authorize HTTP/1.1\r\nHost: sluice\r\nX-API-Key: nope\r\n\r\n", 1, true);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0],
            "HTTP/1.1 401 Unauthorized\r\n"
            "Date: <date>\r\n"
            "Content-Type: application/problem+json\r\n"
            "WWW-Authenticate: Bearer\r\n"
            "Content-Length: 85\r\n"
            "\r\n");
}

TEST_F(AnswersGoldenTest, PipelinedRequestsAreAnsweredInOrder) {
  const uint16_t port = Start(&store_);
  const std::vector<std::string> got =
      Exchange(port,
               Authorize("free-key") + "GET /nowhere HTTP/1.1\r\nHost: sluice\r\n\r\n" +
                   Authorize("free-key") + Authorize("free-key"),
               4);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0],
            "HTTP/1.1 200 OK\r\n"
            "Date: <date>\r\n"
            "Sluice-Subject: user-1\r\n"
            "Sluice-Plan: free\r\n"
            "RateLimit-Policy: \"per_minute\";q=2;w=60, \"daily\";q=10;w=86400\r\n"
            "RateLimit: \"per_minute\";r=1;t=42, \"daily\";r=9;t=35982\r\n"
            "X-RateLimit-Limit: 2\r\n"
            "X-RateLimit-Remaining: 1\r\n"
            "X-RateLimit-Reset: 42\r\n"
            "Content-Length: 0\r\n"
            "\r\n");
  EXPECT_EQ(got[1],
            "HTTP/1.1 404 Not Found\r\n"
            "Date: <date>\r\n"
            "Content-Type: application/problem+json\r\n"
            "Content-Length: 83\r\n"
            "\r\n"
            "{\"type\":\"about:blank\",\"title\":\"Not Found\",\"status\":404,"
            "\"detail\":\"no such endpoint\"}");
  EXPECT_EQ(got[2],
            "HTTP/1.1 200 OK\r\n"
            "Date: <date>\r\n"
            "Sluice-Subject: user-1\r\n"
            "Sluice-Plan: free\r\n"
            "RateLimit-Policy: \"per_minute\";q=2;w=60, \"daily\";q=10;w=86400\r\n"
            "RateLimit: \"per_minute\";r=0;t=42, \"daily\";r=8;t=35982\r\n"
            "X-RateLimit-Limit: 2\r\n"
            "X-RateLimit-Remaining: 0\r\n"
            "X-RateLimit-Reset: 42\r\n"
            "Content-Length: 0\r\n"
            "\r\n");
  EXPECT_EQ(got[3],
            "HTTP/1.1 429 Too Many Requests\r\n"
            "Date: <date>\r\n"
            "Content-Type: application/problem+json\r\n"
            "RateLimit-Policy: \"per_minute\";q=2;w=60, \"daily\";q=10;w=86400\r\n"
            "RateLimit: \"per_minute\";r=0;t=42, \"daily\";r=8;t=35982\r\n"
            "X-RateLimit-Limit: 2\r\n"
            "X-RateLimit-Remaining: 0\r\n"
            "X-RateLimit-Reset: 42\r\n"
            "Retry-After: 42\r\n"
            "Sluice-Denied: quota\r\n"
            "Sluice-Subject: user-1\r\n"
            "Sluice-Plan: free\r\n"
            "Content-Length: 258\r\n"
            "\r\n"
            "{\"type\":\"https://iana.org/assignments/http-problem-types#quota-exceeded\","
            "\"title\":\"Request cannot be satisfied as assigned quota has been exceeded\","
            "\"status\":429,\"detail\":\"Quota exceeded: per_minute; retry after 42 seconds.\","
            "\"violated-policies\":[\"per_minute\"]}");
}

TEST_F(AnswersGoldenTest, AClosingRequestEndsTheConnection) {
  const uint16_t port = Start(&store_);
  EXPECT_EQ(Answer(port,
                   "GET /v1/authorize HTTP/1.1\r\nHost: sluice\r\nConnection: close\r\n"
                   "X-API-Key: free-key\r\n\r\n"),
            "HTTP/1.1 200 OK\r\n"
            "Date: <date>\r\n"
            "Sluice-Subject: user-1\r\n"
            "Sluice-Plan: free\r\n"
            "RateLimit-Policy: \"per_minute\";q=2;w=60, \"daily\";q=10;w=86400\r\n"
            "RateLimit: \"per_minute\";r=1;t=42, \"daily\";r=9;t=35982\r\n"
            "X-RateLimit-Limit: 2\r\n"
            "X-RateLimit-Remaining: 1\r\n"
            "X-RateLimit-Reset: 42\r\n"
            "Connection: close\r\n"
            "Content-Length: 0\r\n"
            "\r\n");
}

TEST_F(AnswersGoldenTest, ARequestTheServerCannotParseIsRejected) {
  const uint16_t port = Start(&store_);
  EXPECT_EQ(Answer(port, "GET /v1/authorize HTTP/1.1\r\nHost sluice\r\n\r\n"),
            "HTTP/1.1 400 Bad Request\r\n"
            "Date: <date>\r\n"
            "Content-Type: application/problem+json\r\n"
            "Connection: close\r\n"
            "Content-Length: 78\r\n"
            "\r\n"
            "{\"type\":\"about:blank\",\"title\":\"Bad Request\",\"status\":400,"
            "\"detail\":\"bad field\"}");
}

TEST_F(AnswersGoldenTest, AnUnknownMethodIsNotImplemented) {
  const uint16_t port = Start(&store_);
  EXPECT_EQ(Answer(port, "BREW /v1/authorize HTTP/1.1\r\nHost: sluice\r\n\r\n"),
            "HTTP/1.1 501 Not Implemented\r\n"
            "Date: <date>\r\n"
            "Content-Type: application/problem+json\r\n"
            "Content-Length: 87\r\n"
            "\r\n"
            "{\"type\":\"about:blank\",\"title\":\"Not Implemented\",\"status\":501,"
            "\"detail\":\"unknown method\"}");
}

TEST_F(AnswersGoldenTest, OptionsAsteriskListsTheMethods) {
  const uint16_t port = Start(&store_);
  EXPECT_EQ(Answer(port, "OPTIONS * HTTP/1.1\r\nHost: sluice\r\n\r\n"),
            "HTTP/1.1 200 OK\r\n"
            "Date: <date>\r\n"
            "Allow: GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS\r\n"
            "Content-Length: 0\r\n"
            "\r\n");
}

TEST_F(AnswersGoldenTest, AChunkedBodyIsReadWhole) {
  const uint16_t port = Start(&store_);
  EXPECT_EQ(Answer(port,
                   "POST /v1/check HTTP/1.1\r\nHost: sluice\r\nTransfer-Encoding: chunked\r\n"
                   "\r\n5\r\n{\"api\r\n11\r\n_key\":\"free-key\"}\r\n0\r\n\r\n"),
            "HTTP/1.1 200 OK\r\n"
            "Date: <date>\r\n"
            "Content-Type: application/json\r\n"
            "RateLimit-Policy: \"per_minute\";q=2;w=60, \"daily\";q=10;w=86400\r\n"
            "RateLimit: \"per_minute\";r=1;t=42, \"daily\";r=9;t=35982\r\n"
            "X-RateLimit-Limit: 2\r\n"
            "X-RateLimit-Remaining: 1\r\n"
            "X-RateLimit-Reset: 42\r\n"
            "Content-Length: 297\r\n"
            "\r\n"
            "{\"allowed\":true,\"subject\":\"user-1\",\"plan\":\"free\",\"degraded\":false,"
            "\"retry_after\":0,\"violated\":[],\"limits\":[{\"name\":\"per_minute\",\"quota\":2,"
            "\"used\":1,\"held\":0,\"remaining\":1,\"reset_after\":42,\"window\":\"1m\"},"
            "{\"name\":\"daily\",\"quota\":10,\"used\":1,\"held\":0,\"remaining\":9,\"reset_"
            "after\":35982,"
            "\"window\":\"day\"}]}");
}

TEST_F(AnswersGoldenTest, AnExpectationOfContinueIsAnsweredFirst) {
  const uint16_t port = Start(&store_);
  const std::string body = R"({"api_key":"free-key"})";
  const std::vector<std::string> got =
      Exchange(port,
               "POST /v1/check HTTP/1.1\r\nHost: sluice\r\nExpect: 100-continue\r\n"
               "Content-Length: " +
                   std::to_string(body.size()) + "\r\n\r\n" + body,
               2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0],
            "HTTP/1.1 100 Continue\r\n"
            "\r\n");
  EXPECT_EQ(got[1],
            "HTTP/1.1 200 OK\r\n"
            "Date: <date>\r\n"
            "Content-Type: application/json\r\n"
            "RateLimit-Policy: \"per_minute\";q=2;w=60, \"daily\";q=10;w=86400\r\n"
            "RateLimit: \"per_minute\";r=1;t=42, \"daily\";r=9;t=35982\r\n"
            "X-RateLimit-Limit: 2\r\n"
            "X-RateLimit-Remaining: 1\r\n"
            "X-RateLimit-Reset: 42\r\n"
            "Content-Length: 297\r\n"
            "\r\n"
            "{\"allowed\":true,\"subject\":\"user-1\",\"plan\":\"free\",\"degraded\":false,"
            "\"retry_after\":0,\"violated\":[],\"limits\":[{\"name\":\"per_minute\",\"quota\":2,"
            "\"used\":1,\"held\":0,\"remaining\":1,\"reset_after\":42,\"window\":\"1m\"},"
            "{\"name\":\"daily\",\"quota\":10,\"used\":1,\"held\":0,\"remaining\":9,\"reset_"
            "after\":35982,"
            "\"window\":\"day\"}]}");
}

}  // namespace
}  // namespace sluice::http
