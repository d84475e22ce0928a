// The server side of gRPC over HTTP/2 (grpc/grpc doc/PROTOCOL-HTTP2.md) for unary calls of one
// method, on libnghttp2 and one Asio socket: h2c with prior knowledge, as gRPC clients and Envoy
// connect. The connection reads into a buffer, feeds it to nghttp2, hands every complete call to
// a GrpcService and, once a read is processed, writes all the frames nghttp2 produced in one write
// (one write in flight at a time; answers that come while it is in flight go out with the next).
//
// What the session answers itself, before the service sees a call: a method other than POST
// (:status 405), a content-type not application/grpc (:status 415), another :path
// (UNIMPLEMENTED), a compressed message (UNIMPLEMENTED, grpc-accept-encoding: identity), a message
// longer than max_message_bytes (RESOURCE_EXHAUSTED, the rest of the request refused with
// RST_STREAM NO_ERROR), no message, a truncated one (INTERNAL) or a second one
// (INVALID_ARGUMENT), a grpc-timeout already past (DEADLINE_EXCEEDED). A call still being decided
// when its grpc-timeout passes is answered DEADLINE_EXCEEDED then; the decision's answer is
// dropped. A protocol error or a bad connection preface ends the connection with GOAWAY (nghttp2
// sends it) and the socket is closed once it is written; so does a HEADERS on a stream id at or
// below the last one the client opened, for a stream not open (a reused or skipped id: GOAWAY
// PROTOCOL_ERROR, which nghttp2 alone would drop unanswered), unless this side reset that stream
// (one of the latest 128 RST_STREAMs sent): what the client sent before it saw the reset is
// ignored.
//
// Bounds: SETTINGS_MAX_CONCURRENT_STREAMS (nghttp2 refuses a stream beyond it with RST_STREAM
// REFUSED_STREAM before the client has acknowledged the setting, and ends the connection with
// GOAWAY PROTOCOL_ERROR after), decisions
// pending per connection (reading pauses while max_concurrent_streams calls handed to the service
// are unanswered, whether or not their streams are still open: resetting a stream does not end its
// decision), partial request messages buffered per connection (max_buffered_request_bytes; the
// request that would pass it is RESOURCE_EXHAUSTED), a header list of at most max_header_list_bytes
// (a longer one resets the stream, and the rest of its block is decoded for the HPACK table only,
// neither checked nor handed over; the ninth such list ends the connection with GOAWAY
// ENHANCE_YOUR_CALM), header work per turn of the loop (at most 64 KiB of header list is handed
// over per turn, a field being checked before: a one-byte reference to a 4 KB table entry costs a
// 4 KB check; the rest of the read waits for a later turn, after the loop's other connections),
// output buffered per connection (reading pauses while more than
// max_buffered_output waits for a peer that does not read), a request that has not ended
// request_timeout after it began is reset, and so is a stream still open request_timeout after its
// answer was submitted (a client that does not open flow control), a write not complete after
// write_timeout closes the connection, as does a client preface and SETTINGS not received within
// handshake_timeout, a connection without a stream for idle_timeout (counted from its start or its
// last stream's close, whatever else it sends, PINGs included) gets GOAWAY and is closed, and one
// that has sent GOAWAY is closed goaway_timeout later whatever is still open.
//
// Thread safety: none; everything runs on the socket's io_context thread (one thread per loop).
#ifndef SLUICE_RLS_H2_SESSION_H_
#define SLUICE_RLS_H2_SESSION_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

struct nghttp2_session;

namespace google::protobuf {
class MessageLite;
}  // namespace google::protobuf

namespace sluice::rls {

// The gRPC status codes sluice answers with.
enum class GrpcCode : int {
  kOk = 0,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kResourceExhausted = 8,
  kUnimplemented = 12,
  kInternal = 13,
};

class H2Connection;

// A call handed to the service: answer it exactly once, now or later, on the connection's thread.
// An answer for a call whose stream or connection is gone (reset, closed, timed out) is dropped.
// Copies share one answer: the first Reply or Fail of any copy answers, the rest are no-ops. Until
// the call is answered (or its last copy is destroyed unanswered) it counts against its
// connection's decisions pending, which stops the connection reading at max_concurrent_streams:
// a client that resets its streams cannot start more decisions than that at once.
class GrpcCall {
 public:
  // grpc-status 0 with `message` as the one response message. True if the answer went to the
  // stream; false if it was dropped (the stream or connection is gone, already answered, e.g.
  // DEADLINE_EXCEEDED at its grpc-timeout, or this call was answered before).
  bool Reply(const google::protobuf::MessageLite& message) const;
  // The same, with the message already serialized.
  bool ReplySerialized(std::string_view message) const;
  // grpc-status `code` with grpc-message `message` (Trailers-Only). Returns as Reply.
  bool Fail(GrpcCode code, std::string_view message) const;

 private:
  friend class H2Connection;
  // One per call: gives back the connection's pending decision once, when answered or destroyed.
  struct Pending {
    Pending(std::shared_ptr<H2Connection> c, int32_t id) : conn(std::move(c)), stream_id(id) {}
    ~Pending();
    Pending(const Pending&) = delete;
    Pending& operator=(const Pending&) = delete;
    // False if this call was already answered; otherwise marks it and gives the decision back.
    bool Take();
    std::shared_ptr<H2Connection> conn;
    int32_t stream_id;
    bool answered = false;
  };
  explicit GrpcCall(std::shared_ptr<Pending> pending) : pending_(std::move(pending)) {}
  std::shared_ptr<Pending> pending_;
};

// What a connection hands up. Every method is called on the connection's thread.
class GrpcService {
 public:
  virtual ~GrpcService() = default;
  // A complete request of the served method; `message` (the one message, without its prefix) is
  // valid during the call only.
  virtual void OnCall(GrpcCall call, std::string_view message) = 0;
  // A call the session answered or dropped without the service, by outcome: "invalid_argument",
  // "internal", "unimplemented", "resource_exhausted", "deadline_exceeded", "not_grpc" (405 or
  // 415), "cancelled" (reset or abandoned by the client before its request was complete);
  // "internal" also for a request nghttp2 reset as malformed (PROTOCOL_ERROR), "resource_exhausted"
  // for a header list past the bound (RST_STREAM ENHANCE_YOUR_CALM).
  virtual void Count(std::string_view outcome) = 0;
  // The connection closed its socket (once) / its object is gone (once, after it closed).
  virtual void ConnectionClosed(H2Connection* conn) = 0;
  virtual void ConnectionDestroyed() = 0;
};

struct H2Options {
  // The :path served, e.g. "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit".
  std::string method;
  size_t max_message_bytes = 64 * 1024;
  // Request bytes buffered per connection over all its requests not yet complete; a DATA frame
  // that would go past it has its stream answered RESOURCE_EXHAUSTED (the rest refused).
  size_t max_buffered_request_bytes = 1024 * 1024;
  uint32_t max_concurrent_streams = 100;
  // Sum over a request's header fields of name + value + 32 (RFC 9113's measure).
  size_t max_header_list_bytes = 16 * 1024;
  // Output waiting for the peer beyond which the connection stops reading.
  size_t max_buffered_output = 256 * 1024;
  std::chrono::steady_clock::duration request_timeout = std::chrono::seconds(10);
  std::chrono::steady_clock::duration idle_timeout = std::chrono::minutes(5);
  // A write that has not completed after this (a peer that stopped reading) closes the connection.
  std::chrono::steady_clock::duration write_timeout = std::chrono::seconds(10);
  // After GOAWAY, a connection whose streams have not finished by then is closed.
  std::chrono::steady_clock::duration goaway_timeout = std::chrono::seconds(30);
  // A connection whose client preface and SETTINGS have not come by then is closed.
  std::chrono::steady_clock::duration handshake_timeout = std::chrono::seconds(10);
};

class H2Connection : public std::enable_shared_from_this<H2Connection> {
 public:
  // `service` and `options` must outlive the connection. `loop` is the caller's tag (which event
  // loop owns it).
  H2Connection(boost::asio::ip::tcp::socket socket, GrpcService* service, const H2Options* options,
               size_t loop);
  ~H2Connection();
  H2Connection(const H2Connection&) = delete;
  H2Connection& operator=(const H2Connection&) = delete;

  // Sends the server's SETTINGS and starts reading.
  void Start();
  // Graceful end: GOAWAY naming the last stream taken; the streams in flight are answered, then
  // the connection closes. Idempotent.
  void GoAway();
  // Closes the socket now; the streams not answered are dropped. Idempotent.
  void Close();

  [[nodiscard]] size_t loop() const { return loop_; }
  // Header bytes (name + value + 32 per field) nghttp2 has checked and handed over since the
  // start: what decoding headers has cost this connection's loop.
  [[nodiscard]] uint64_t header_bytes_received() const { return header_bytes_received_; }

  // Implementation details (h2_session.cc): the nghttp2 callbacks.
  struct Callbacks;
  struct Stream;

 private:
  friend class GrpcCall;

  void StartRead();
  void OnRead(const boost::system::error_code& ec, size_t n);
  // Feeds the read's bytes not yet fed to nghttp2, for one turn's header work at most (paused_:
  // the rest goes next turn), then reads again.
  void Receive();
  // Drains nghttp2's output into the write buffer and starts a write if none is in flight.
  void Flush();
  // Flushes now unless inside nghttp2_session_mem_recv (the read path flushes after it) or a flush
  // is already posted: answers that come together go out in one write.
  void ScheduleFlush();
  void OnWritten(const boost::system::error_code& ec);
  // Closes once nghttp2 wants neither to read nor to write and nothing waits to be written.
  void MaybeFinish();
  // The last frames are written: shuts the sending side and reads (discarding) until the peer's
  // EOF or kLinger, then closes. Closing with unread input would reset the connection (RST) and
  // could lose the GOAWAY and trailers just written.
  void Linger();
  void ArmTimer(std::chrono::steady_clock::time_point at);
  void OnTimer();

  Stream* Find(int32_t stream_id);
  // The stream `call` answers, if this is its first answer and the stream still waits for it
  // (else nullptr: the answer is dropped).
  Stream* Claim(GrpcCall::Pending& call);
  // The request's headers are complete: answers what the session refuses.
  void OnRequestHeaders(Stream& s);
  void OnRequestData(Stream& s, const uint8_t* data, size_t len);
  // END_STREAM: checks the message and hands the call to the service.
  void OnRequestEnd(Stream& s);
  // `error_code`: the RST_STREAM's, either side's (NO_ERROR if none).
  void OnStreamClose(int32_t stream_id, uint32_t error_code);
  // A call handed to the service was answered or abandoned: reading resumes if it had paused.
  void DecisionDone();
  // An RST_STREAM went out for `stream_id`: kept among the last resets (h2_session.cc).
  void RememberReset(int32_t stream_id);
  // `s`'s header list has passed max_header_list_bytes: resets the stream, or ends the connection
  // if it has done so too often. Returns what the header callback returns to nghttp2.
  int RefuseHeaderList(Stream& s);

  void AnswerMessage(Stream& s, const google::protobuf::MessageLite& message);
  void AnswerSerialized(Stream& s, std::string_view message);
  // Starts an answer of one message of `size` bytes: its place in the stream's payload, to fill
  // before SubmitAnswer.
  uint8_t* StartAnswer(Stream& s, size_t size);
  void SubmitAnswer(Stream& s);
  // Trailers-Only: grpc-status and grpc-message in the response's one HEADERS frame.
  void AnswerStatus(Stream& s, GrpcCode code, std::string_view message,
                    bool accept_identity = false);
  // A plain HTTP answer (:status only) for a request that is no gRPC call.
  void AnswerHttp(Stream& s, std::string_view status);
  // After an answer sent before the request ended: RST_STREAM NO_ERROR (RFC 9113 §8.1) once
  // the answer is out, unless the request has ended by then.
  void RefuseRestOfRequest(Stream& s);

  boost::asio::ip::tcp::socket socket_;
  boost::asio::steady_timer timer_;
  GrpcService* service_;
  const H2Options* options_;
  size_t loop_;
  nghttp2_session* session_ = nullptr;
  std::vector<std::unique_ptr<Stream>> streams_;  // open, in no particular order
  std::vector<std::unique_ptr<Stream>> spare_;    // closed, kept for reuse
  std::vector<uint8_t> in_;
  size_t in_begin_ = 0;  // in_[in_begin_, in_end_): read, not yet fed to nghttp2 (paused_)
  size_t in_end_ = 0;
  std::string out_;      // produced, not yet being written
  std::string writing_;  // the write in flight
  std::chrono::steady_clock::time_point started_;
  // When the connection started or its last stream closed: idle_timeout counts from it.
  std::chrono::steady_clock::time_point last_activity_;
  std::chrono::steady_clock::time_point write_started_;
  std::chrono::steady_clock::time_point goaway_deadline_;
  // Calls handed to the service and not yet answered, whether or not their stream is still open.
  uint32_t decisions_pending_ = 0;
  // The stream ids of the latest RST_STREAMs sent (a ring; next_reset_ is the oldest once full).
  std::vector<int32_t> reset_ids_;
  size_t next_reset_ = 0;
  // The GOAWAY's error code when a callback has found a connection error (0: none found).
  uint32_t connection_error_ = 0;
  uint32_t oversized_header_lists_ = 0;  // header lists past max_header_list_bytes so far
  uint64_t header_bytes_received_ = 0;
  size_t turn_header_bytes_ = 0;  // handed over in this turn's nghttp2_session_mem_recv
  bool paused_ = false;           // that turn stopped at kHeaderBytesPerTurn
  bool handshake_done_ = false;
  bool lingering_ = false;
  std::chrono::steady_clock::time_point
      linger_until_;  // the client's preface and SETTINGS have come
  bool reading_ = false;
  bool writing_now_ = false;
  bool in_recv_ = false;
  bool flush_posted_ = false;
  bool going_away_ = false;
  bool closed_ = false;
};

// grpc-message's encoding: bytes 0x20..0x7E except '%' as they are, every other byte %XX.
[[nodiscard]] std::string PercentEncode(std::string_view text);
// grpc-timeout ("1S", "250m", at most 8 digits and one of H M S m u n); nullopt if malformed.
// Hours, minutes and seconds beyond a year are a year.
[[nodiscard]] std::optional<std::chrono::nanoseconds> ParseGrpcTimeout(std::string_view value);

}  // namespace sluice::rls

#endif  // SLUICE_RLS_H2_SESSION_H_
