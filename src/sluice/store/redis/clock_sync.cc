#include "sluice/store/redis/clock_sync.h"

#include <string>
#include <utility>

#include <boost/asio/steady_timer.hpp>

#include "absl/strings/numbers.h"
#include "sluice/common/log.h"
#include "sluice/common/strings.h"

namespace sluice::redis {

absl::StatusOr<absl::Time> ParseTimeReply(const Reply& reply) {
  int64_t seconds = 0, micros = 0;
  if (!reply.is_array() || reply.elements.size() != 2 || !reply.elements[0].is_string() ||
      !reply.elements[1].is_string() ||
      !absl::SimpleAtoi(ToAbsl(reply.elements[0].str), &seconds) ||
      !absl::SimpleAtoi(ToAbsl(reply.elements[1].str), &micros) || micros < 0 ||
      micros >= 1'000'000) {
    return absl::InternalError("redis: unexpected reply to TIME");
  }
  return absl::FromUnixSeconds(seconds) + absl::Microseconds(micros);
}

class ClockSync::Impl : public std::enable_shared_from_this<Impl> {
 public:
  Impl(boost::asio::io_context& io, CommandSender* connection, const Clock* local,
       OffsetClock* target, ClockSyncOptions options)
      : timer_(io), connection_(connection), local_(local), target_(target), options_(options) {}

  void Start() { Sample(); }

  void Stop() {
    stopped_ = true;
    boost::system::error_code ignored;
    timer_.cancel(ignored);
  }

  uint64_t samples() const { return samples_; }

 private:
  void Sample() {
    if (stopped_) return;
    const absl::Time before = local_->Now();
    connection_->Send({"TIME"}, [self = shared_from_this(), before](absl::StatusOr<Reply> reply) {
      if (self->stopped_) return;
      const absl::Time after = self->local_->Now();
      self->OnReply(reply, before, after);
    });
  }

  void OnReply(const absl::StatusOr<Reply>& reply, absl::Time before, absl::Time after) {
    bool good = false;
    if (reply.ok() && !reply->is_error() && after - before <= options_.max_rtt) {
      absl::StatusOr<absl::Time> redis_now = ParseTimeReply(*reply);
      if (redis_now.ok()) {
        const absl::Duration offset = *redis_now - (before + (after - before) / 2);
        const bool first = !target_->synced();
        const absl::Duration change = offset - target_->offset();
        target_->SetOffset(offset);
        ++samples_;
        good = true;
        if (samples_ == 1 && options_.on_first_sample) options_.on_first_sample();
        if (first || change > absl::Seconds(1) || change < absl::Seconds(-1)) {
          Log(first ? LogLevel::kInfo : LogLevel::kWarn, "redis clock offset measured")
              .Int("offset_us", absl::ToInt64Microseconds(offset))
              .Int("rtt_us", absl::ToInt64Microseconds(after - before));
        } else {
          // One per interval (30 s by default).
          Log(LogLevel::kDebug, "redis clock sample")
              .Int("offset_us", absl::ToInt64Microseconds(offset))
              .Int("change_us", absl::ToInt64Microseconds(change))
              .Int("rtt_us", absl::ToInt64Microseconds(after - before))
              .Int("samples", static_cast<int64_t>(samples_));
        }
      }
    }
    // Unsynced, a sample is retried every few milliseconds: only the first failure of a run and
    // every hundredth after it are logged.
    discarded_ = good ? 0 : discarded_ + 1;
    if (!good && discarded_ % 100 == 1 && LogEnabled(LogLevel::kDebug)) {
      std::string why = "bad TIME reply";
      if (!reply.ok()) {
        why = ToStd(reply.status().message());
      } else if (reply->is_error()) {
        why = "error reply";
      } else if (after - before > options_.max_rtt) {
        why = "round trip above max_rtt";
      }
      Log(LogLevel::kDebug, "redis clock sample discarded")
          .Int("rtt_us", absl::ToInt64Microseconds(after - before))
          .Int("in_a_row", static_cast<int64_t>(discarded_))
          .Str("why", why);
    }
    const absl::Duration wait = good || target_->synced() ? options_.interval : options_.retry;
    timer_.expires_after(absl::ToChronoNanoseconds(wait));
    timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (!ec) self->Sample();
    });
  }

  boost::asio::steady_timer timer_;
  CommandSender* connection_;
  const Clock* local_;
  OffsetClock* target_;
  const ClockSyncOptions options_;
  bool stopped_ = false;
  uint64_t samples_ = 0;
  uint64_t discarded_ = 0;  // samples discarded in a row
};

ClockSync::ClockSync(boost::asio::io_context& io, CommandSender* connection, const Clock* local,
                     OffsetClock* target, ClockSyncOptions options)
    : impl_(std::make_shared<Impl>(io, connection, local, target, options)) {}

ClockSync::~ClockSync() { impl_->Stop(); }
void ClockSync::Start() { impl_->Start(); }
void ClockSync::Stop() { impl_->Stop(); }
uint64_t ClockSync::samples() const { return impl_->samples(); }

}  // namespace sluice::redis
