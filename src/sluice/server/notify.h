// Telling systemd where the service is in its life (sd_notify(3)): ready, reloading, stopping,
// still alive. A Notifier built outside systemd (NOTIFY_SOCKET unset) does nothing, so `serve`
// needs no flag to run under systemd or without it.
//
// Every call sends one datagram and ignores the outcome: a service manager that is gone or slow
// must not stop the service, and nothing here can fail the caller. Thread-safe (sd_notify opens a
// socket per call), though Serve() calls it from the control thread only.
#ifndef SLUICE_SERVER_NOTIFY_H_
#define SLUICE_SERVER_NOTIFY_H_

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace sluice::server {

class Notifier {
 public:
  // Reads NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID once; the environment is left as it is.
  Notifier();

  // True when NOTIFY_SOCKET was set; otherwise every call below is a no-op.
  [[nodiscard]] bool enabled() const { return enabled_; }

  // How often systemd expects WATCHDOG=1 (WatchdogSec=, passed as WATCHDOG_USEC), or nullopt when
  // the watchdog is off or meant for another process (WATCHDOG_PID). Send at half of it.
  [[nodiscard]] std::optional<std::chrono::microseconds> watchdog_interval() const {
    return watchdog_interval_;
  }

  // READY=1: the service answers requests. Also after a reload (success or refusal). `status`, if
  // not empty, goes in the same datagram as STATUS=.
  void Ready(std::string_view status = {}) const;
  // RELOADING=1 with MONOTONIC_USEC=<now on CLOCK_MONOTONIC>, which Type=notify-reload (systemd
  // 253+) requires and older versions ignore. Follow with Ready() once the reload has ended.
  void Reloading() const;
  // STOPPING=1: the stop has begun; `status` as for Ready().
  void Stopping(std::string_view status = {}) const;
  // STATUS=<text>, shown by `systemctl status`. Newlines become spaces.
  void Status(std::string_view text) const;
  // WATCHDOG=1: the process is alive (send only when it is).
  void Watchdog() const;

 private:
  void Send(const std::string& message) const;

  bool enabled_ = false;
  std::optional<std::chrono::microseconds> watchdog_interval_;
};

}  // namespace sluice::server

#endif  // SLUICE_SERVER_NOTIFY_H_
