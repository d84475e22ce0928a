// RESP codec of sluice's Redis client: commands are encoded from argument vectors (never format
// strings) and replies are parsed by hiredis's redisReader. The codec does no I/O; the connection
// feeds it the bytes it reads and writes the bytes it is given. This is the only hiredis user.
#ifndef SLUICE_STORE_REDIS_RESP_H_
#define SLUICE_STORE_REDIS_RESP_H_

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

struct redisReader;

namespace sluice::redis {

namespace detail {
struct ReaderLimits;  // shared with hiredis through the reader's privdata; stable across moves
}  // namespace detail

// One parsed reply (RESP2). `str` holds the payload of kString, kStatus and kError; `integer` that
// of kInteger; `elements` that of kArray. A nil bulk string and a nil array are both kNil.
struct Reply {
  enum class Type { kString, kArray, kInteger, kNil, kStatus, kError };

  Type type = Type::kNil;
  std::string str;
  int64_t integer = 0;
  std::vector<Reply> elements;

  [[nodiscard]] bool is_string() const { return type == Type::kString; }
  [[nodiscard]] bool is_array() const { return type == Type::kArray; }
  [[nodiscard]] bool is_integer() const { return type == Type::kInteger; }
  [[nodiscard]] bool is_nil() const { return type == Type::kNil; }
  [[nodiscard]] bool is_status() const { return type == Type::kStatus; }
  [[nodiscard]] bool is_error() const { return type == Type::kError; }

  friend bool operator==(const Reply&, const Reply&) = default;
};

// "*N\r\n" followed by "$len\r\narg\r\n" per argument. Arguments may hold any bytes.
[[nodiscard]] std::string EncodeCommand(std::span<const std::string_view> argv);
[[nodiscard]] std::string EncodeCommand(std::initializer_list<std::string_view> argv);
// The same, appended to *out (a connection's write buffer: no copy in between).
void AppendCommand(std::span<const std::string> argv, std::string* out);

// Incremental reply parser over hiredis's redisReader. Feed() bytes as they arrive, then call
// Next() until it yields nullopt (more bytes needed). Replies come out in the order they were
// received.
//
// Errors are sticky: after a protocol error, or after the buffered input exceeds
// `max_buffered_bytes` (bytes fed but not yet returned as a complete reply, including a reply still
// being parsed), Next() returns that error forever and Feed() ignores its input. The connection
// must be dropped and a new reader made. Nesting depth is bounded by hiredis (arrays nested more
// than 7 levels are a protocol error); an array header announcing more elements than could fit in
// `max_buffered_bytes` is rejected up front instead of allocated.
class ReplyReader {
 public:
  static constexpr size_t kDefaultMaxBufferedBytes = size_t{512} << 20;  // 512 MiB

  explicit ReplyReader(size_t max_buffered_bytes = kDefaultMaxBufferedBytes);
  ~ReplyReader();
  ReplyReader(const ReplyReader&) = delete;
  ReplyReader& operator=(const ReplyReader&) = delete;
  ReplyReader(ReplyReader&& other) noexcept;
  ReplyReader& operator=(ReplyReader&& other) noexcept;

  void Feed(std::string_view bytes);

  // A complete reply, nullopt if more bytes are needed, or the (sticky) error. A moved-from reader
  // returns FailedPrecondition.
  [[nodiscard]] absl::StatusOr<std::optional<Reply>> Next();

  // Bytes fed that have not yet come out as part of a complete reply.
  [[nodiscard]] size_t buffered_bytes() const;

 private:
  void Reset() noexcept;
  [[nodiscard]] size_t Unparsed() const;

  redisReader* reader_ = nullptr;
  std::unique_ptr<detail::ReaderLimits> limits_;
  size_t max_buffered_bytes_;
  size_t in_progress_ = 0;  // bytes consumed into a reply not yet complete
  absl::Status error_;
};

}  // namespace sluice::redis

#endif  // SLUICE_STORE_REDIS_RESP_H_
