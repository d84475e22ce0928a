// libsluice's error model: a cheap Status (a code and a message) and Result<T> (a value or the
// Status saying why there is none). The library throws no exceptions of its own; every call that
// can fail returns one of these, and the message names what was wrong ("plans.free.limits[0].quota:
// must be between 1 and 1000000000000000, got 0").
//
// Only the standard library is used, so this header compiles with nothing but the install prefix
// on the include path.
#ifndef SLUICE_STATUS_H_
#define SLUICE_STATUS_H_

#include <cstdlib>
#include <optional>
#include <string>
#include <utility>

namespace sluice::lib {

// The canonical error codes (the same numbers as gRPC's and abseil's).
enum class StatusCode : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,  // bad options, subject, cost or plan
  kDeadlineExceeded = 4,
  kNotFound = 5,  // an unknown plan or limit
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,  // a call on a closed limiter, or a blocking call from its I/O thread
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,  // the store could not be reached (Usage, ResetUsage)
  kDataLoss = 15,     // a damaged snapshot file
  kUnauthenticated = 16,
};

class Status {
 public:
  // OK.
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  [[nodiscard]] bool ok() const { return code_ == StatusCode::kOk; }
  [[nodiscard]] StatusCode code() const { return code_; }
  // Empty when ok().
  [[nodiscard]] const std::string& message() const { return message_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// A T, or the Status that says why there is none.
template <typename T>
class Result {
 public:
  // REQUIRES: !status.ok() (an OK Result has a value).
  Result(Status status) : status_(std::move(status)) {  // NOLINT: implicit, like a return value
    if (status_.ok()) status_ = Status(StatusCode::kInternal, "Result built from an OK Status");
  }
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit, like a return value

  [[nodiscard]] bool ok() const { return value_.has_value(); }
  // OK when there is a value.
  [[nodiscard]] const Status& status() const { return status_; }

  // REQUIRES: ok(); aborts the process otherwise (reading a value that is not there is a bug).
  [[nodiscard]] T& value() & {
    Check();
    return *value_;
  }
  [[nodiscard]] const T& value() const& {
    Check();
    return *value_;
  }
  [[nodiscard]] T&& value() && {
    Check();
    return std::move(*value_);
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  void Check() const {
    if (!value_.has_value()) std::abort();
  }

  Status status_;
  std::optional<T> value_;
};

}  // namespace sluice::lib

#endif  // SLUICE_STATUS_H_
