// For tests: what sluice logs (one JSON line per record, on stderr) goes to a temporary file while
// a StderrCapture lives, so a test can read back what was logged.
#ifndef SLUICE_COMMON_STDERR_CAPTURE_H_
#define SLUICE_COMMON_STDERR_CAPTURE_H_

#include <sys/types.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <string>
#include <string_view>

namespace sluice {
inline namespace common {

class StderrCapture {
 public:
  StderrCapture() {
    fd_ = mkstemp(path_);
    saved_ = dup(STDERR_FILENO);
    if (fd_ >= 0) dup2(fd_, STDERR_FILENO);
  }
  ~StderrCapture() {
    dup2(saved_, STDERR_FILENO);
    close(saved_);
    if (fd_ >= 0) {
      close(fd_);
      unlink(path_);
    }
  }
  StderrCapture(const StderrCapture&) = delete;
  StderrCapture& operator=(const StderrCapture&) = delete;

  // Everything logged since construction.
  [[nodiscard]] std::string Text() const {
    std::string out;
    std::array<char, 4096> buf;
    for (off_t off = 0; fd_ >= 0;) {
      const ssize_t n = pread(fd_, buf.data(), buf.size(), off);
      if (n <= 0) break;
      out.append(buf.data(), static_cast<size_t>(n));
      off += n;
    }
    return out;
  }

  // How many times `what` occurs in Text().
  [[nodiscard]] size_t Count(std::string_view what) const {
    const std::string text = Text();
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  }

 private:
  char path_[32] = "/tmp/sluice-stderr-XXXXXX";
  int fd_ = -1;
  int saved_ = -1;
};

}  // namespace common
}  // namespace sluice

#endif  // SLUICE_COMMON_STDERR_CAPTURE_H_
