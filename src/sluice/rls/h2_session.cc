#include "sluice/rls/h2_session.h"

#include <nghttp2/nghttp2.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <utility>

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>

#include "absl/strings/str_cat.h"
#include "google/protobuf/message_lite.h"

namespace sluice::rls {
namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

namespace {

// A message's prefix: the compressed flag and the 4-byte big-endian length.
constexpr size_t kPrefix = 5;
// How often a connection looks at its deadlines (idle, requests not ended, grpc-timeout).
constexpr Clock::duration kTick = std::chrono::seconds(1);
constexpr size_t kReadBytes = 8 * 1024;
// How long a finished connection reads what the peer still sends before it closes.
constexpr Clock::duration kLinger = std::chrono::seconds(1);
// Closed streams kept for reuse per connection, unless their body buffer grew past this.
constexpr size_t kSpareStreams = 8;
constexpr size_t kKeptBufferBytes = 4 * 1024;
// Stream ids this side reset that a connection remembers (the latest): frames the client sent on
// them before it saw the RST_STREAM are ignored, as RFC 9113 §5.1 requires, for as long as the id
// is remembered. More than the streams one connection may have open at once by default.
constexpr size_t kRememberedResets = 128;
// Header bytes (name + value + 32 per field) one turn of the loop hands over at most: nghttp2
// checks every field before it hands it over, and a field can be a one-byte reference to a 4 KB
// entry of the HPACK table, so what a read of 8 KiB costs is bounded by this, not by its size.
// Past it the rest of the read is fed to nghttp2 next turn, after the loop's other work. About
// 200 usual calls (300 bytes each).
constexpr size_t kHeaderBytesPerTurn = 64 * 1024;
// Header lists past max_header_list_bytes a connection may send; one more is a connection error.
constexpr uint32_t kMaxOversizedHeaderLists = 8;

constexpr uint8_t kNoCopy = NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE;

// A header field; `flags` kNoCopy for strings that outlive the frame (literals), 0 to copy.
nghttp2_nv Field(std::string_view name, std::string_view value, uint8_t flags = kNoCopy) {
  return nghttp2_nv{.name = reinterpret_cast<uint8_t*>(const_cast<char*>(name.data())),
                    .value = reinterpret_cast<uint8_t*>(const_cast<char*>(value.data())),
                    .namelen = name.size(),
                    .valuelen = value.size(),
                    .flags = flags};
}

std::string_view View(const uint8_t* p, size_t n) { return {reinterpret_cast<const char*>(p), n}; }

// nghttp2 allocates several small blocks per stream and per frame (the stream's state, every
// header field it decodes, every frame it queues). A free list per size class and thread (a
// session is used on one thread only) makes them cheap: a block carries its class in a 16-byte
// header; blocks over 4 KiB go to malloc directly; each list keeps at most kMaxKept blocks. Under
// AddressSanitizer plain malloc is used, so that its checks cover nghttp2's memory too.
class BlockCache {
 public:
  ~BlockCache() {
    for (Header*& head : heads_) {
      while (head != nullptr) {
        Header* next = head->next;
        std::free(head);
        head = next;
      }
    }
  }

  void* Alloc(size_t n) {
    const uint32_t c = ClassOf(n);
    Header* h = nullptr;
    if (c == kLarge) {
      h = static_cast<Header*>(std::malloc(sizeof(Header) + n));
      if (h == nullptr) return nullptr;
      h->size = n;
    } else if (heads_[c] != nullptr) {
      h = heads_[c];
      heads_[c] = h->next;
      --counts_[c];
    } else {
      h = static_cast<Header*>(std::malloc(sizeof(Header) + (kSmallest << c)));
      if (h == nullptr) return nullptr;
    }
    h->cls = c;
    return h + 1;
  }

  void Free(void* p) {
    if (p == nullptr) return;
    Header* h = static_cast<Header*>(p) - 1;
    const uint32_t c = h->cls;
    if (c == kLarge || counts_[c] >= kMaxKept) {
      std::free(h);
      return;
    }
    h->next = heads_[c];
    heads_[c] = h;
    ++counts_[c];
  }

  void* Realloc(void* p, size_t n) {
    if (p == nullptr) return Alloc(n);
    Header* h = static_cast<Header*>(p) - 1;
    const size_t usable = h->cls == kLarge ? h->size : kSmallest << h->cls;
    if (n <= usable && h->cls != kLarge) return p;
    void* q = Alloc(n);
    if (q == nullptr) return nullptr;
    std::memcpy(q, p, std::min(usable, n));
    Free(p);
    return q;
  }

 private:
  static constexpr size_t kSmallest = 32;
  static constexpr uint32_t kClasses = 8;  // 32 B .. 4 KiB
  static constexpr uint32_t kLarge = kClasses;
  static constexpr size_t kMaxKept = 512;
  struct Header {
    uint32_t cls;
    uint32_t unused;
    union {
      Header* next;  // in a free list
      size_t size;   // a large block's size
    };
  };
  static_assert(sizeof(Header) == 16);

  static uint32_t ClassOf(size_t n) {
    uint32_t c = 0;
    while (c < kClasses && (kSmallest << c) < n) ++c;
    return c;
  }

  Header* heads_[kClasses] = {};
  size_t counts_[kClasses] = {};
};

#if defined(__SANITIZE_ADDRESS__)
nghttp2_mem* Allocator() { return nullptr; }  // nghttp2's default: malloc
#else
thread_local BlockCache t_blocks;
nghttp2_mem* Allocator() {
  static nghttp2_mem mem{
      .mem_user_data = nullptr,
      .malloc = [](size_t n, void*) { return t_blocks.Alloc(n); },
      .free = [](void* p, void*) { t_blocks.Free(p); },
      .calloc = [](size_t count, size_t n, void*) -> void* {
        if (n != 0 && count > SIZE_MAX / n) return nullptr;
        void* p = t_blocks.Alloc(count * n);
        if (p != nullptr) std::memset(p, 0, count * n);
        return p;
      },
      .realloc = [](void* p, size_t n, void*) { return t_blocks.Realloc(p, n); },
  };
  return &mem;
}
#endif

// True if `v` starts with `prefix`, letters in any case (`prefix` in lower case).
bool StartsWithNoCase(std::string_view v, std::string_view prefix) {
  if (v.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    const char c = v[i] >= 'A' && v[i] <= 'Z' ? static_cast<char>(v[i] - 'A' + 'a') : v[i];
    if (c != prefix[i]) return false;
  }
  return true;
}

// application/grpc or application/grpc+proto, with or without parameters: the messages are
// protobuf. Another suffix (+json) names an encoding sluice does not read.
bool IsGrpcContentType(std::string_view v) {
  for (const std::string_view type : {"application/grpc+proto", "application/grpc"}) {
    if (StartsWithNoCase(v, type)) return v.size() == type.size() || v[type.size()] == ';';
  }
  return false;
}

}  // namespace

std::string PercentEncode(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c <= 0x7E && c != '%') {
      out += ch;
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 0xF];
    }
  }
  return out;
}

std::optional<std::chrono::nanoseconds> ParseGrpcTimeout(std::string_view value) {
  if (value.size() < 2 || value.size() > 9) return std::nullopt;
  int64_t n = 0;
  for (const char c : value.substr(0, value.size() - 1)) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + (c - '0');
  }
  using std::chrono::nanoseconds;
  // 99999999H in nanoseconds overflows int64: hours, minutes and seconds are clamped to a year
  // (a deadline further away means none in practice), which 8 digits of m, u or n never reach.
  constexpr int64_t kYearSeconds = int64_t{365} * 24 * 3600;
  switch (value.back()) {
    case 'H':
      return std::chrono::seconds(std::min(n, kYearSeconds / 3600) * 3600);
    case 'M':
      return std::chrono::seconds(std::min(n, kYearSeconds / 60) * 60);
    case 'S':
      return std::chrono::seconds(std::min(n, kYearSeconds));
    case 'm':
      return std::chrono::duration_cast<nanoseconds>(std::chrono::milliseconds(n));
    case 'u':
      return std::chrono::duration_cast<nanoseconds>(std::chrono::microseconds(n));
    case 'n':
      return nanoseconds(n);
    default:
      return std::nullopt;
  }
}

// One request stream, from its first HEADERS frame to nghttp2's closing it.
struct H2Connection::Stream {
  enum class State {
    kHeaders,   // reading the request's header block
    kBody,      // a call of the served method: reading its message
    kDeciding,  // handed to the service, no answer yet
    kAnswered,  // answered (or refused); whatever else comes is ignored
  };
  // For a new stream; a stream object is reused (its buffers keep their capacity).
  void Reset(int32_t stream_id) {
    id = stream_id;
    state = State::kHeaders;
    post = grpc_type = path_served = has_deadline = refuse_rest = false;
    reset_sent = false;
    header_bytes = 0;
    body.clear();
    payload.clear();
    sent = 0;
  }
  int32_t id = 0;
  State state = State::kHeaders;
  bool post = false;
  bool grpc_type = false;
  bool path_served = false;
  bool has_deadline = false;
  bool refuse_rest = false;       // answered early: reset the stream once the answer is out
  bool reset_sent = false;        // RST_STREAM CANCEL submitted by the timer
  Clock::time_point answered_at;  // when the answer was submitted (kAnswered)
  size_t header_bytes = 0;
  Clock::time_point deadline;          // grpc-timeout, if has_deadline
  Clock::time_point request_deadline;  // the request must have ended by then
  std::string body;                    // the message's prefix and bytes as they come
  std::string payload;                 // the answer's DATA: prefix and message
  size_t sent = 0;
};

// The nghttp2 callbacks: each finds its connection in `user_data`.
struct H2Connection::Callbacks {
  static H2Connection* Self(void* user_data) { return static_cast<H2Connection*>(user_data); }

  // A client's HEADERS on a stream id at or below the last stream it opened, for a stream that is
  // not open, is no new stream (RFC 9113 §5.1.1: a new stream's id is above every id used before;
  // a skipped id is closed) and no trailers of an open one: a connection error, PROTOCOL_ERROR.
  // nghttp2 itself drops such a header block without a word (it cannot tell a reused id from a
  // frame the client sent before it saw our RST_STREAM); the client then waits for an answer that
  // never comes. Streams this side reset are remembered, and frames on them ignored. Even ids
  // (the server's) nghttp2 refuses itself.
  static int OnBeginFrame(nghttp2_session* session, const nghttp2_frame_hd* hd, void* user_data) {
    if (hd->type != NGHTTP2_HEADERS || hd->stream_id % 2 == 0) return 0;
    H2Connection* self = Self(user_data);
    if (hd->stream_id <= nghttp2_session_get_last_proc_stream_id(session) &&
        nghttp2_session_find_stream(session, hd->stream_id) == nullptr &&
        std::find(self->reset_ids_.begin(), self->reset_ids_.end(), hd->stream_id) ==
            self->reset_ids_.end()) {
      self->connection_error_ = NGHTTP2_PROTOCOL_ERROR;
      return NGHTTP2_ERR_CALLBACK_FAILURE;  // stops nghttp2 at once; OnRead sends the GOAWAY
    }
    return 0;
  }

  static int OnBeginHeaders(nghttp2_session* session, const nghttp2_frame* frame, void* user_data) {
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
    H2Connection* self = Self(user_data);
    std::unique_ptr<Stream> stream;
    if (self->spare_.empty()) {
      stream = std::make_unique<Stream>();
    } else {
      stream = std::move(self->spare_.back());
      self->spare_.pop_back();
    }
    stream->Reset(frame->hd.stream_id);
    stream->request_deadline = Clock::now() + self->options_->request_timeout;
    nghttp2_session_set_stream_user_data(session, frame->hd.stream_id, stream.get());
    self->streams_.push_back(std::move(stream));
    return 0;
  }

  static int OnHeader(nghttp2_session* session, const nghttp2_frame* frame, const uint8_t* name,
                      size_t namelen, const uint8_t* value, size_t valuelen, uint8_t /*flags*/,
                      void* user_data) {
    H2Connection* self = Self(user_data);
    auto* s =
        static_cast<Stream*>(nghttp2_session_get_stream_user_data(session, frame->hd.stream_id));
    if (s == nullptr) return 0;
    const size_t bytes = namelen + valuelen + 32;
    s->header_bytes += bytes;
    self->header_bytes_received_ += bytes;
    self->turn_header_bytes_ += bytes;
    if (s->header_bytes > self->options_->max_header_list_bytes) return self->RefuseHeaderList(*s);
    if (s->state == Stream::State::kHeaders) {  // else trailers of the request: not read
      ReadField(*self, *s, View(name, namelen), View(value, valuelen));
    }
    if (self->turn_header_bytes_ >= kHeaderBytesPerTurn) {
      // nghttp2_session_mem_recv returns here; Receive feeds it the rest of the read next turn.
      self->paused_ = true;
      return NGHTTP2_ERR_PAUSE;
    }
    return 0;
  }

  static void ReadField(const H2Connection& self, Stream& s, std::string_view n,
                        std::string_view v) {
    if (n == ":method") {
      s.post = v == "POST";
    } else if (n == ":path") {
      s.path_served = v == self.options_->method;
    } else if (n == "content-type") {
      s.grpc_type = IsGrpcContentType(v);
    } else if (n == "grpc-timeout") {
      // A malformed one is ignored (as if absent), as gRPC's own servers do.
      if (std::optional<std::chrono::nanoseconds> t = ParseGrpcTimeout(v)) {
        s.has_deadline = true;
        s.deadline = Clock::now() +
                     std::chrono::duration_cast<Clock::duration>(
                         std::min<std::chrono::nanoseconds>(*t, std::chrono::hours(24 * 365)));
      }
    }
  }

  static int OnFrameRecv(nghttp2_session* session, const nghttp2_frame* frame, void* user_data) {
    H2Connection* self = Self(user_data);
    // nghttp2 takes a SETTINGS frame only after a valid preface, and requires it first.
    if (frame->hd.type == NGHTTP2_SETTINGS && (frame->hd.flags & NGHTTP2_FLAG_ACK) == 0) {
      self->handshake_done_ = true;
    }
    if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) return 0;
    auto* s =
        static_cast<Stream*>(nghttp2_session_get_stream_user_data(session, frame->hd.stream_id));
    if (s == nullptr) return 0;
    if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
      self->OnRequestHeaders(*s);
    }
    if ((frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0) {
      s->refuse_rest = false;  // the request is complete anyway
      self->OnRequestEnd(*s);
    }
    return 0;
  }

  // Once an answer given before the request ended is out (nghttp2 would drop a response still
  // queued behind an RST_STREAM): RST_STREAM NO_ERROR, the client need not send the rest (RFC
  // 9113 §8.1).
  static int OnFrameSend(nghttp2_session* session, const nghttp2_frame* frame, void* user_data) {
    if (frame->hd.type == NGHTTP2_RST_STREAM) {
      Self(user_data)->RememberReset(frame->hd.stream_id);
      return 0;
    }
    if (frame->hd.type != NGHTTP2_HEADERS || (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) == 0) {
      return 0;
    }
    auto* s =
        static_cast<Stream*>(nghttp2_session_get_stream_user_data(session, frame->hd.stream_id));
    if (s != nullptr && s->refuse_rest &&
        nghttp2_session_get_stream_remote_close(session, s->id) == 0) {
      s->refuse_rest = false;
      nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_NO_ERROR);
    }
    return 0;
  }

  static int OnDataChunk(nghttp2_session* session, uint8_t /*flags*/, int32_t stream_id,
                         const uint8_t* data, size_t len, void* user_data) {
    auto* s = static_cast<Stream*>(nghttp2_session_get_stream_user_data(session, stream_id));
    if (s != nullptr) Self(user_data)->OnRequestData(*s, data, len);
    return 0;
  }

  static int OnStreamClose(nghttp2_session* /*session*/, int32_t stream_id, uint32_t error_code,
                           void* user_data) {
    Self(user_data)->OnStreamClose(stream_id, error_code);
    return 0;
  }

  // The answer's DATA, then its trailers.
  static ssize_t ReadPayload(nghttp2_session* session, int32_t stream_id, uint8_t* buf,
                             size_t length, uint32_t* data_flags, nghttp2_data_source* source,
                             void* /*user_data*/) {
    auto* s = static_cast<Stream*>(source->ptr);
    const size_t n = std::min(length, s->payload.size() - s->sent);
    std::memcpy(buf, s->payload.data() + s->sent, n);
    s->sent += n;
    if (s->sent == s->payload.size()) {
      *data_flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
      const nghttp2_nv trailers[] = {Field("grpc-status", "0")};
      if (nghttp2_submit_trailer(session, stream_id, trailers, 1) != 0) {
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
      }
    }
    return static_cast<ssize_t>(n);
  }
};

GrpcCall::Pending::~Pending() {
  if (!answered) conn->DecisionDone();
}

bool GrpcCall::Pending::Take() {
  if (answered) return false;
  answered = true;
  conn->DecisionDone();
  return true;
}

H2Connection::Stream* H2Connection::Claim(GrpcCall::Pending& call) {
  if (!call.Take()) return nullptr;
  Stream* s = Find(call.stream_id);
  if (s == nullptr || s->state != Stream::State::kDeciding) return nullptr;
  return s;
}

bool GrpcCall::Reply(const google::protobuf::MessageLite& message) const {
  H2Connection* conn = pending_->conn.get();
  H2Connection::Stream* s = conn->Claim(*pending_);
  if (s == nullptr) return false;
  conn->AnswerMessage(*s, message);
  conn->ScheduleFlush();
  return true;
}

bool GrpcCall::ReplySerialized(std::string_view message) const {
  H2Connection* conn = pending_->conn.get();
  H2Connection::Stream* s = conn->Claim(*pending_);
  if (s == nullptr) return false;
  conn->AnswerSerialized(*s, message);
  conn->ScheduleFlush();
  return true;
}

bool GrpcCall::Fail(GrpcCode code, std::string_view message) const {
  H2Connection* conn = pending_->conn.get();
  H2Connection::Stream* s = conn->Claim(*pending_);
  if (s == nullptr) return false;
  conn->AnswerStatus(*s, code, message);
  conn->ScheduleFlush();
  return true;
}

H2Connection::H2Connection(asio::ip::tcp::socket socket, GrpcService* service,
                           const H2Options* options, size_t loop)
    : socket_(std::move(socket)),
      timer_(socket_.get_executor()),
      service_(service),
      options_(options),
      loop_(loop),
      in_(kReadBytes) {
  nghttp2_session_callbacks* callbacks = nullptr;
  nghttp2_session_callbacks_new(&callbacks);
  nghttp2_session_callbacks_set_on_begin_frame_callback(callbacks, &Callbacks::OnBeginFrame);
  nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, &Callbacks::OnBeginHeaders);
  nghttp2_session_callbacks_set_on_header_callback(callbacks, &Callbacks::OnHeader);
  nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, &Callbacks::OnFrameRecv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, &Callbacks::OnDataChunk);
  nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, &Callbacks::OnStreamClose);
  nghttp2_session_callbacks_set_on_frame_send_callback(callbacks, &Callbacks::OnFrameSend);
  nghttp2_option* option = nullptr;
  nghttp2_option_new(&option);
  // Header fields are bounded by max_header_list_bytes (checked as they come); the HPACK table
  // the peer may make us keep is bounded by nghttp2's default SETTINGS_HEADER_TABLE_SIZE (4 KiB).
  nghttp2_option_set_max_send_header_block_length(option, 16 * 1024);
  // Set explicitly, not left to nghttp2's defaults: a build against headers without these
  // (before Debian's backports of the rapid-reset and CONTINUATION-flood fixes) fails here. A
  // peer resetting more streams than this (a burst of 1000, then 33 a second) or sending more
  // CONTINUATION frames after a HEADERS frame gets GOAWAY.
  nghttp2_option_set_stream_reset_rate_limit(option, /*burst=*/1000, /*rate=*/33);
  nghttp2_option_set_max_continuations(option, 8);
  nghttp2_session_server_new3(&session_, callbacks, this, option, Allocator());
  nghttp2_option_del(option);
  nghttp2_session_callbacks_del(callbacks);
}

H2Connection::~H2Connection() {
  nghttp2_session_del(session_);
  service_->ConnectionDestroyed();
}

void H2Connection::Start() {
  boost::system::error_code ignored;
  socket_.set_option(asio::ip::tcp::no_delay(true), ignored);
  started_ = last_activity_ = Clock::now();
  const nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, options_->max_concurrent_streams},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE,
       static_cast<uint32_t>(options_->max_header_list_bytes)},
      // Every stream is one small call: RFC 7540's priority tree would only cost.
      {NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES, 1},
  };
  nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings, std::size(settings));
  ArmTimer(last_activity_ + kTick);
  Flush();
  StartRead();
}

void H2Connection::GoAway() {
  if (closed_ || going_away_) return;
  going_away_ = true;
  goaway_deadline_ = Clock::now() + options_->goaway_timeout;
  nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE,
                        nghttp2_session_get_last_proc_stream_id(session_), NGHTTP2_NO_ERROR,
                        nullptr, 0);
  ScheduleFlush();
}

void H2Connection::Close() {
  if (closed_) return;
  closed_ = true;
  for (auto& s : streams_) {
    if (s->state == Stream::State::kHeaders || s->state == Stream::State::kBody ||
        s->state == Stream::State::kDeciding) {
      // The client went away before its request was complete, or while it was decided (the
      // answer, when it comes, finds no stream and is not counted).
      service_->Count("cancelled");
    }
    s->state = Stream::State::kAnswered;
  }
  boost::system::error_code ignored;
  timer_.cancel();
  socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  service_->ConnectionClosed(this);
}

H2Connection::Stream* H2Connection::Find(int32_t stream_id) {
  if (closed_) return nullptr;
  // At most max_concurrent_streams, usually one or a few: a scan is cheaper than a map.
  for (const auto& s : streams_) {
    if (s->id == stream_id) return s.get();
  }
  return nullptr;
}

void H2Connection::StartRead() {
  // While paused, the read buffer still holds input for nghttp2.
  if (closed_ || reading_ || lingering_ || paused_) return;
  if (nghttp2_session_want_read(session_) == 0) {
    MaybeFinish();
    return;
  }
  // A peer that does not read its answers is not read from either.
  if (out_.size() + writing_.size() > options_->max_buffered_output) return;
  // Nor one with max_concurrent_streams decisions pending: closing a stream (RST_STREAM, a
  // grpc-timeout) does not end its decision, so a stream slot alone does not bound them.
  if (decisions_pending_ >= options_->max_concurrent_streams) return;
  reading_ = true;
  socket_.async_read_some(asio::buffer(in_),
                          [self = shared_from_this()](const boost::system::error_code& ec,
                                                      size_t n) { self->OnRead(ec, n); });
}

void H2Connection::OnRead(const boost::system::error_code& ec, size_t n) {
  reading_ = false;
  if (closed_) return;
  if (ec) {
    Close();
    return;
  }
  if (lingering_) {  // discarded: the connection has finished
    reading_ = true;
    socket_.async_read_some(asio::buffer(in_),
                            [self = shared_from_this()](const boost::system::error_code& e,
                                                        size_t m) { self->OnRead(e, m); });
    return;
  }
  in_begin_ = 0;
  in_end_ = n;
  Receive();
}

void H2Connection::Receive() {
  in_recv_ = true;
  paused_ = false;
  turn_header_bytes_ = 0;
  const ssize_t rv =
      nghttp2_session_mem_recv(session_, in_.data() + in_begin_, in_end_ - in_begin_);
  in_recv_ = false;
  if (rv < 0) {
    // A bad connection preface, a flood, an error a callback found, or the like: GOAWAY, then
    // close once it is written.
    paused_ = false;
    nghttp2_session_terminate_session(
        session_, connection_error_ != 0 ? connection_error_ : uint32_t{NGHTTP2_PROTOCOL_ERROR});
  } else {
    in_begin_ += static_cast<size_t>(rv);
  }
  Flush();
  if (paused_ && !closed_) {
    // This turn's header work is done: the rest of the read (even none: nghttp2 may still have to
    // end the header block it paused in) after what else the loop has to do.
    asio::post(socket_.get_executor(), [self = shared_from_this()] {
      if (!self->closed_ && !self->lingering_) self->Receive();
    });
    return;
  }
  StartRead();
}

int H2Connection::RefuseHeaderList(Stream& s) {
  if (!s.reset_sent) {
    // RST_STREAM ENHANCE_YOUR_CALM, which gRPC clients report as RESOURCE_EXHAUSTED, as it is
    // counted. A request already answered (trailers past the bound) is reset too: what is left of
    // its answer is dropped.
    if (s.state != Stream::State::kAnswered) service_->Count("resource_exhausted");
    s.state = Stream::State::kAnswered;
    s.answered_at = Clock::now();
    s.reset_sent = true;
    nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, s.id, NGHTTP2_ENHANCE_YOUR_CALM);
    if (++oversized_header_lists_ > kMaxOversizedHeaderLists) {
      connection_error_ = NGHTTP2_ENHANCE_YOUR_CALM;
      return NGHTTP2_ERR_CALLBACK_FAILURE;  // stops nghttp2 at once; OnRead sends the GOAWAY
    }
  }
  // nghttp2 decodes the rest of the block (the HPACK table must stay in step) but neither checks
  // nor hands over its fields: an HPACK bomb's references cost a table lookup each, not a check
  // of a 4 KB value. It would reset the stream INTERNAL_ERROR, but not one with a reset queued.
  return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
}

void H2Connection::RememberReset(int32_t stream_id) {
  if (reset_ids_.size() < kRememberedResets) {
    reset_ids_.push_back(stream_id);
  } else {
    reset_ids_[next_reset_] = stream_id;
    next_reset_ = (next_reset_ + 1) % kRememberedResets;
  }
}

void H2Connection::DecisionDone() {
  --decisions_pending_;
  // Inside nghttp2_session_mem_recv the read buffer is in use; the read path resumes after it.
  if (!in_recv_) StartRead();
}

void H2Connection::ScheduleFlush() {
  if (in_recv_ || flush_posted_ || closed_) return;
  flush_posted_ = true;
  asio::post(socket_.get_executor(), [self = shared_from_this()] {
    self->flush_posted_ = false;
    self->Flush();
  });
}

void H2Connection::Flush() {
  if (closed_) return;
  for (;;) {
    const uint8_t* data = nullptr;
    const ssize_t n = nghttp2_session_mem_send(session_, &data);
    if (n < 0) {
      Close();
      return;
    }
    if (n == 0) break;
    out_.append(reinterpret_cast<const char*>(data), static_cast<size_t>(n));
  }
  if (writing_now_) return;
  if (out_.empty()) {
    MaybeFinish();
    return;
  }
  writing_now_ = true;
  write_started_ = Clock::now();
  writing_.swap(out_);
  asio::async_write(socket_, asio::buffer(writing_),
                    [self = shared_from_this()](const boost::system::error_code& ec, size_t) {
                      self->OnWritten(ec);
                    });
}

void H2Connection::OnWritten(const boost::system::error_code& ec) {
  writing_now_ = false;
  writing_.clear();
  if (closed_) return;
  if (ec) {
    Close();
    return;
  }
  Flush();
  StartRead();  // if it paused for the output to drain
}

void H2Connection::MaybeFinish() {
  if (closed_ || writing_now_ || !out_.empty()) return;
  if (nghttp2_session_want_read(session_) == 0 && nghttp2_session_want_write(session_) == 0) {
    Linger();
  }
}

void H2Connection::Linger() {
  if (closed_ || lingering_) return;
  lingering_ = true;
  boost::system::error_code ignored;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
  linger_until_ = Clock::now() + kLinger;
  ArmTimer(linger_until_);
  if (!reading_) {
    reading_ = true;
    socket_.async_read_some(asio::buffer(in_),
                            [self = shared_from_this()](const boost::system::error_code& ec,
                                                        size_t n) { self->OnRead(ec, n); });
  }
}

void H2Connection::ArmTimer(Clock::time_point at) {
  timer_.expires_at(at);  // cancels a wait in progress (its handler sees operation_aborted)
  timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
    if (ec != asio::error::operation_aborted) self->OnTimer();
  });
}

void H2Connection::OnTimer() {
  if (closed_) return;
  const Clock::time_point now = Clock::now();
  if (lingering_) {
    if (now >= linger_until_) {
      Close();
    } else {
      ArmTimer(linger_until_);
    }
    return;
  }
  Clock::time_point next = now + kTick;
  for (auto& s : streams_) {
    const int32_t id = s->id;
    switch (s->state) {
      case Stream::State::kHeaders:
      case Stream::State::kBody:
        if (now >= s->request_deadline) {
          // The client started a request and did not finish it in time.
          s->state = Stream::State::kAnswered;
          s->reset_sent = true;
          service_->Count("cancelled");
          nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
        }
        break;
      case Stream::State::kDeciding:
        if (s->has_deadline) {
          if (now >= s->deadline) {
            service_->Count("deadline_exceeded");
            AnswerStatus(*s, GrpcCode::kDeadlineExceeded, "deadline exceeded");
          } else {
            next = std::min(next, s->deadline);
          }
        }
        break;
      case Stream::State::kAnswered:
        // Answered early and the client has still not ended its request, or answered and the
        // answer still not out request_timeout later (flow control the client does not open):
        // either way the stream is given up.
        if (!s->reset_sent && ((now >= s->request_deadline &&
                                nghttp2_session_get_stream_remote_close(session_, id) == 0) ||
                               now >= s->answered_at + options_->request_timeout)) {
          nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
          s->reset_sent = true;
        }
        break;
    }
  }
  if (writing_now_ && now - write_started_ >= options_->write_timeout) {
    Close();  // the peer has stopped reading
    return;
  }
  if (going_away_ && now >= goaway_deadline_) {
    Close();  // GOAWAY sent, and the streams still open have had their time
    return;
  }
  if (!handshake_done_ && now - started_ >= options_->handshake_timeout) {
    Close();  // no HTTP/2 client: nothing to say GOAWAY to
    return;
  }
  if (streams_.empty() && now - last_activity_ >= options_->idle_timeout) GoAway();
  Flush();
  if (!closed_) ArmTimer(next);
}

void H2Connection::OnRequestHeaders(Stream& s) {
  if (s.state != Stream::State::kHeaders) return;
  if (!s.post) {
    service_->Count("not_grpc");
    AnswerHttp(s, "405");
  } else if (!s.grpc_type) {
    service_->Count("not_grpc");
    AnswerHttp(s, "415");
  } else if (!s.path_served) {
    service_->Count("unimplemented");
    AnswerStatus(s, GrpcCode::kUnimplemented,
                 absl::StrCat("sluice serves only ", options_->method));
  } else {
    s.state = Stream::State::kBody;
  }
  // A refused stream's body, if one comes, is dropped as it arrives; no RST_STREAM, which gRPC
  // clients can take for an error of its own (INTERNAL) when it comes before they have sent their
  // message. A client that never ends the stream has it reset at request_timeout.
}

void H2Connection::OnRequestData(Stream& s, const uint8_t* data, size_t len) {
  if (s.state != Stream::State::kBody) return;
  // One byte past the largest request is enough to know it is too long.
  const size_t room = kPrefix + options_->max_message_bytes + 1 - s.body.size();
  const size_t take = std::min(len, room);
  // Only requests not yet complete hold body bytes (at most max_concurrent_streams of them).
  size_t buffered = 0;
  for (const auto& other : streams_) buffered += other->body.size();
  if (buffered + take > options_->max_buffered_request_bytes) {
    service_->Count("resource_exhausted");
    AnswerStatus(s, GrpcCode::kResourceExhausted,
                 absl::StrCat("request: the connection's incomplete requests hold more than ",
                              options_->max_buffered_request_bytes, " bytes"));
    RefuseRestOfRequest(s);
    return;
  }
  s.body.append(reinterpret_cast<const char*>(data), take);
  if (s.body.size() < kPrefix) return;
  const auto* p = reinterpret_cast<const uint8_t*>(s.body.data());
  const uint32_t length =
      (uint32_t{p[1]} << 24) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 8) | uint32_t{p[4]};
  if (p[0] == 1) {
    service_->Count("unimplemented");
    AnswerStatus(s, GrpcCode::kUnimplemented,
                 "request: compressed messages are not supported; send identity",
                 /*accept_identity=*/true);
  } else if (p[0] != 0) {
    service_->Count("internal");
    AnswerStatus(s, GrpcCode::kInternal, "request: bad message flag");
  } else if (length > options_->max_message_bytes) {
    service_->Count("resource_exhausted");
    AnswerStatus(s, GrpcCode::kResourceExhausted,
                 absl::StrCat("request: a message of ", length, " bytes; at most ",
                              options_->max_message_bytes, " are accepted"));
    RefuseRestOfRequest(s);  // the client need not send the rest
  } else if (s.body.size() > kPrefix + length) {
    service_->Count("invalid_argument");
    AnswerStatus(s, GrpcCode::kInvalidArgument,
                 "request: more than one message (the method is unary)");
  }
}

void H2Connection::OnRequestEnd(Stream& s) {
  if (s.state != Stream::State::kBody) return;
  if (s.body.empty()) {
    service_->Count("invalid_argument");
    AnswerStatus(s, GrpcCode::kInvalidArgument, "request: no message");
    return;
  }
  const auto* p = reinterpret_cast<const uint8_t*>(s.body.data());
  if (s.body.size() < kPrefix ||
      s.body.size() < kPrefix + ((uint32_t{p[1]} << 24) | (uint32_t{p[2]} << 16) |
                                 (uint32_t{p[3]} << 8) | uint32_t{p[4]})) {
    service_->Count("internal");
    AnswerStatus(s, GrpcCode::kInternal, "request: truncated message");
    return;
  }
  if (s.has_deadline && Clock::now() >= s.deadline) {
    service_->Count("deadline_exceeded");
    AnswerStatus(s, GrpcCode::kDeadlineExceeded, "deadline exceeded before the decision");
    return;
  }
  s.state = Stream::State::kDeciding;
  const int32_t id = s.id;
  // The message stays put during the call whatever the service's answer does to the stream.
  std::string body = std::move(s.body);
  ++decisions_pending_;
  service_->OnCall(GrpcCall(std::make_shared<GrpcCall::Pending>(shared_from_this(), id)),
                   std::string_view(body).substr(kPrefix));
  Stream* after = Find(id);
  if (after == nullptr) return;
  after->body = std::move(body);  // its capacity, for the next stream that reuses this one
  after->body.clear();
  // A decision still waiting (Redis) with a grpc-timeout: wake when it passes.
  if (after->state == Stream::State::kDeciding && after->has_deadline &&
      after->deadline < timer_.expiry()) {
    ArmTimer(after->deadline);
  }
}

void H2Connection::OnStreamClose(int32_t stream_id, uint32_t error_code) {
  const auto it = std::find_if(streams_.begin(), streams_.end(),
                               [stream_id](const auto& s) { return s->id == stream_id; });
  if (it == streams_.end()) return;
  const Stream::State state = (*it)->state;
  if (state == Stream::State::kHeaders || state == Stream::State::kBody) {
    // Reset before its request was complete: by the client (CANCEL, or NO_ERROR), or by nghttp2
    // for a malformed request (PROTOCOL_ERROR and the like), which the client sees as INTERNAL.
    service_->Count(error_code == NGHTTP2_CANCEL || error_code == NGHTTP2_NO_ERROR ? "cancelled"
                                                                                   : "internal");
  }
  // Reset while decided: the service's answer, when it comes, finds no stream and is dropped
  // (and not counted), so the call is counted cancelled here.
  if (state == Stream::State::kDeciding) service_->Count("cancelled");
  std::unique_ptr<Stream> gone = std::move(*it);
  *it = std::move(streams_.back());
  streams_.pop_back();
  if (streams_.empty()) last_activity_ = Clock::now();  // idle from here
  if (spare_.size() < kSpareStreams && gone->body.capacity() <= kKeptBufferBytes) {
    spare_.push_back(std::move(gone));
  }
}

void H2Connection::AnswerMessage(Stream& s, const google::protobuf::MessageLite& message) {
  uint8_t* p = StartAnswer(s, message.ByteSizeLong());
  message.SerializeWithCachedSizesToArray(p);
  SubmitAnswer(s);
}

void H2Connection::AnswerSerialized(Stream& s, std::string_view message) {
  uint8_t* p = StartAnswer(s, message.size());
  std::memcpy(p, message.data(), message.size());
  SubmitAnswer(s);
}

uint8_t* H2Connection::StartAnswer(Stream& s, size_t size) {
  s.state = Stream::State::kAnswered;
  s.answered_at = Clock::now();
  s.payload.resize(kPrefix + size);
  auto* p = reinterpret_cast<uint8_t*>(s.payload.data());
  p[0] = 0;
  p[1] = static_cast<uint8_t>(size >> 24);
  p[2] = static_cast<uint8_t>(size >> 16);
  p[3] = static_cast<uint8_t>(size >> 8);
  p[4] = static_cast<uint8_t>(size);
  return p + kPrefix;
}

void H2Connection::SubmitAnswer(Stream& s) {
  s.sent = 0;
  const nghttp2_nv headers[] = {Field(":status", "200"), Field("content-type", "application/grpc")};
  nghttp2_data_provider provider{};
  provider.source.ptr = &s;
  provider.read_callback = &Callbacks::ReadPayload;
  nghttp2_submit_response(session_, s.id, headers, std::size(headers), &provider);
}

void H2Connection::AnswerStatus(Stream& s, GrpcCode code, std::string_view message,
                                bool accept_identity) {
  s.state = Stream::State::kAnswered;
  s.answered_at = Clock::now();
  s.body.clear();
  const std::string status = std::to_string(static_cast<int>(code));
  const std::string encoded = PercentEncode(message);
  nghttp2_nv headers[] = {Field(":status", "200"), Field("content-type", "application/grpc"),
                          Field("grpc-status", status, NGHTTP2_NV_FLAG_NO_COPY_NAME),
                          Field("grpc-message", encoded, NGHTTP2_NV_FLAG_NO_COPY_NAME),
                          Field("grpc-accept-encoding", "identity")};
  nghttp2_submit_response(session_, s.id, headers, accept_identity ? 5 : 4, nullptr);
}

void H2Connection::AnswerHttp(Stream& s, std::string_view status) {
  s.state = Stream::State::kAnswered;
  s.answered_at = Clock::now();
  const nghttp2_nv headers[] = {Field(":status", status), Field("allow", "POST")};
  nghttp2_submit_response(session_, s.id, headers, status == "405" ? 2 : 1, nullptr);
}

void H2Connection::RefuseRestOfRequest(Stream& s) {
  s.body.clear();
  s.refuse_rest = true;  // acted on once the answer is sent (OnFrameSend)
}

}  // namespace sluice::rls
