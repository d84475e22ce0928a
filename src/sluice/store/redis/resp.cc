#include "sluice/store/redis/resp.h"

#include <hiredis/hiredis.h>

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace sluice::redis {

namespace detail {
struct ReaderLimits {
  size_t max_array_elements = 0;
  bool array_too_large = false;
};
}  // namespace detail

namespace {

// hiredis's own reply-object functions (static in hiredis.c; reached through a default reader).
const redisReplyObjectFunctions& DefaultFunctions() {
  static const redisReplyObjectFunctions fns = [] {
    redisReader* r = redisReaderCreate();
    redisReplyObjectFunctions copy = *r->fn;
    redisReaderFree(r);
    return copy;
  }();
  return fns;
}

// Refuses an array header announcing more elements than the byte budget could ever deliver, so a
// hostile "*2147483647\r\n" does not make hiredis allocate the element vector.
void* CreateArrayChecked(const redisReadTask* task, int elements) {
  auto* limits = static_cast<detail::ReaderLimits*>(task->privdata);
  if (elements < 0 ||
      (limits != nullptr && static_cast<size_t>(elements) > limits->max_array_elements)) {
    if (limits != nullptr) limits->array_too_large = true;
    return nullptr;  // hiredis turns this into a reader error
  }
  return DefaultFunctions().createArray(task, elements);
}

redisReplyObjectFunctions& CheckedFunctions() {
  static redisReplyObjectFunctions fns = [] {
    redisReplyObjectFunctions copy = DefaultFunctions();
    copy.createArray = &CreateArrayChecked;
    return copy;
  }();
  return fns;
}

// Depth is bounded by hiredis (at most 7 nested arrays), so the recursion is too.
Reply Convert(const redisReply& r) {
  Reply out;
  switch (r.type) {
    case REDIS_REPLY_STRING:
      out.type = Reply::Type::kString;
      out.str.assign(r.str, r.len);
      break;
    case REDIS_REPLY_STATUS:
      out.type = Reply::Type::kStatus;
      out.str.assign(r.str, r.len);
      break;
    case REDIS_REPLY_ERROR:
      out.type = Reply::Type::kError;
      out.str.assign(r.str, r.len);
      break;
    case REDIS_REPLY_INTEGER:
      out.type = Reply::Type::kInteger;
      out.integer = r.integer;
      break;
    case REDIS_REPLY_ARRAY:
      out.type = Reply::Type::kArray;
      out.elements.reserve(r.elements);
      for (size_t i = 0; i < r.elements; ++i) out.elements.push_back(Convert(*r.element[i]));
      break;
    case REDIS_REPLY_NIL:
    default:
      out.type = Reply::Type::kNil;
      break;
  }
  return out;
}

}  // namespace

namespace {

template <class Arg>
void Append(std::span<const Arg> argv, std::string* out) {
  absl::StrAppend(out, "*", argv.size(), "\r\n");
  for (const Arg& arg : argv) {
    absl::StrAppend(out, "$", arg.size(), "\r\n");
    out->append(arg.data(), arg.size());
    out->append("\r\n");
  }
}

}  // namespace

std::string EncodeCommand(std::span<const std::string_view> argv) {
  size_t size = 16;
  for (std::string_view arg : argv) size += arg.size() + 16;
  std::string out;
  out.reserve(size);
  Append(argv, &out);
  return out;
}

void AppendCommand(std::span<const std::string> argv, std::string* out) { Append(argv, out); }

std::string EncodeCommand(std::initializer_list<std::string_view> argv) {
  return EncodeCommand(std::span<const std::string_view>(argv.begin(), argv.size()));
}

ReplyReader::ReplyReader(size_t max_buffered_bytes)
    : limits_(std::make_unique<detail::ReaderLimits>()), max_buffered_bytes_(max_buffered_bytes) {
  // Every element takes at least 3 bytes (":\r\n"), so more than this can never arrive in budget.
  limits_->max_array_elements = max_buffered_bytes / 3;
  reader_ = redisReaderCreateWithFunctions(&CheckedFunctions());
  if (reader_ == nullptr) {
    error_ = absl::ResourceExhaustedError("redis reader: out of memory");
    return;
  }
  reader_->privdata = limits_.get();
}

ReplyReader::~ReplyReader() { Reset(); }

ReplyReader::ReplyReader(ReplyReader&& other) noexcept
    : reader_(std::exchange(other.reader_, nullptr)),
      limits_(std::move(other.limits_)),
      max_buffered_bytes_(other.max_buffered_bytes_),
      in_progress_(std::exchange(other.in_progress_, 0)),
      error_(std::move(other.error_)) {}

ReplyReader& ReplyReader::operator=(ReplyReader&& other) noexcept {
  if (this != &other) {
    Reset();
    reader_ = std::exchange(other.reader_, nullptr);
    limits_ = std::move(other.limits_);
    max_buffered_bytes_ = other.max_buffered_bytes_;
    in_progress_ = std::exchange(other.in_progress_, 0);
    error_ = std::move(other.error_);
  }
  return *this;
}

void ReplyReader::Reset() noexcept {
  if (reader_ != nullptr) {
    redisReaderFree(reader_);
    reader_ = nullptr;
  }
}

size_t ReplyReader::Unparsed() const {
  return reader_ == nullptr ? 0 : reader_->len - reader_->pos;
}

size_t ReplyReader::buffered_bytes() const { return Unparsed() + in_progress_; }

void ReplyReader::Feed(std::string_view bytes) {
  if (reader_ == nullptr || !error_.ok() || bytes.empty()) return;
  if (bytes.size() > max_buffered_bytes_ || buffered_bytes() > max_buffered_bytes_ - bytes.size()) {
    error_ = absl::ResourceExhaustedError(
        absl::StrCat("redis reply exceeds ", max_buffered_bytes_, " buffered bytes"));
    return;
  }
  if (redisReaderFeed(reader_, bytes.data(), bytes.size()) != REDIS_OK) {
    error_ = absl::ResourceExhaustedError(
        absl::StrCat("redis reader: ", static_cast<const char*>(reader_->errstr)));
  }
}

absl::StatusOr<std::optional<Reply>> ReplyReader::Next() {
  if (reader_ == nullptr) return absl::FailedPreconditionError("redis reader was moved from");
  if (!error_.ok()) return error_;
  const size_t before = Unparsed();
  void* raw = nullptr;
  if (redisReaderGetReply(reader_, &raw) != REDIS_OK) {
    if (limits_->array_too_large) {
      error_ = absl::ResourceExhaustedError(absl::StrCat(
          "redis array reply announces more elements than ", max_buffered_bytes_, " bytes hold"));
    } else {
      error_ = absl::InvalidArgumentError(
          absl::StrCat("redis protocol error: ", static_cast<const char*>(reader_->errstr)));
    }
    return error_;
  }
  const size_t consumed = before - Unparsed();
  if (raw == nullptr) {
    in_progress_ += consumed;
    return std::nullopt;
  }
  in_progress_ = 0;
  Reply reply = Convert(*static_cast<const redisReply*>(raw));
  freeReplyObject(raw);
  return reply;
}

}  // namespace sluice::redis
