#include "sluice/server/notify.h"

#include <systemd/sd-daemon.h>
#include <time.h>

#include <cstdint>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "sluice/common/strings.h"

namespace sluice::server {
namespace {

// STATUS= is one line of the datagram; a newline would start another assignment.
std::string StatusLine(std::string_view text) {
  std::string line = absl::StrCat("STATUS=", ToAbsl(text));
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return line;
}

}  // namespace

Notifier::Notifier() {
  const char* socket = std::getenv("NOTIFY_SOCKET");
  enabled_ = socket != nullptr && socket[0] != '\0';
  if (!enabled_) return;
  uint64_t usec = 0;
  // > 0: enabled for this process (WATCHDOG_PID unset or ours); 0: off; < 0: bad values.
  if (sd_watchdog_enabled(/*unset_environment=*/0, &usec) > 0 && usec > 0) {
    watchdog_interval_ = std::chrono::microseconds(usec);
  }
}

void Notifier::Ready(std::string_view status) const {
  Send(status.empty() ? std::string("READY=1") : absl::StrCat("READY=1\n", StatusLine(status)));
}

void Notifier::Reloading() const {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  const int64_t usec = static_cast<int64_t>(ts.tv_sec) * 1'000'000 + ts.tv_nsec / 1'000;
  Send(absl::StrCat("RELOADING=1\nMONOTONIC_USEC=", usec));
}

void Notifier::Stopping(std::string_view status) const {
  Send(status.empty() ? std::string("STOPPING=1")
                      : absl::StrCat("STOPPING=1\n", StatusLine(status)));
}

void Notifier::Status(std::string_view text) const { Send(StatusLine(text)); }

void Notifier::Watchdog() const { Send("WATCHDOG=1"); }

void Notifier::Send(const std::string& message) const {
  if (!enabled_) return;
  // A negative errno (no such socket, no permission, a full queue) changes nothing for the service.
  (void)sd_notify(/*unset_environment=*/0, message.c_str());
}

}  // namespace sluice::server
