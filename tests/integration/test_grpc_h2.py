"""The gRPC rate limit service (server.grpc_listen) at the HTTP/2 level: odd and hostile input
from a hand-driven HTTP/2 client (python3-h2 for the framing, raw bytes where h2 would refuse),
each asserting the status or the behaviour sluice answers with (docs/gateways.md, "gRPC over
HTTP/2")."""
import json
import signal
import socket
import struct
import sys
import time
import unittest

try:
    import h2.config
    import h2.connection
    import h2.events
except ImportError:
    # python3-h2 installs into Debian's dist-packages, which a python3 of another origin does not
    # search.
    sys.path.append("/usr/lib/python3/dist-packages")
    import h2.config
    import h2.connection
    import h2.events

import harness
import test_grpc
import test_redis

METHOD = test_grpc.METHOD
rls = test_grpc.rls

PLANS = """
plans:
  wide:
    limits:
      - { name: per_minute, quota: 1000000, window: 1m }
keys:
  - { key: key-wide, subject: user-1, plan: wide }
"""

PROTOCOL_ERROR = 1
REFUSED_STREAM = 7
GOAWAY = 7  # frame type
PING = 6  # frame type


def message(key="key-wide"):
    """A gRPC message (flag 0, 4-byte length, bytes) of a valid request for `key`."""
    body = test_grpc.request([("api_key", key), ("cost", "0")]).SerializeToString()
    return b"\0" + struct.pack(">I", len(body)) + body


class Stream:
    def __init__(self):
        self.headers = None
        self.data = b""
        self.trailers = None
        self.reset = None  # error code of an RST_STREAM from the server
        self.ended = False

    @property
    def done(self):
        return self.ended or self.reset is not None

    def grpc(self):
        """(grpc-status, grpc-message) from the trailers, or from the headers (Trailers-Only)."""
        fields = self.trailers if self.trailers is not None else self.headers
        return int(fields["grpc-status"]), fields.get("grpc-message", "")


class H2Client:
    """One HTTP/2 connection with prior knowledge (h2c), driven by hand."""

    def __init__(self, port, handshake=True):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.h2 = h2.connection.H2Connection(config=h2.config.H2Configuration(
            client_side=True, header_encoding="utf-8", validate_outbound_headers=False))
        self.streams = {}
        self.goaway = None
        self.closed = False
        self.h2.initiate_connection()
        self.flush()
        if handshake:
            self.pump(lambda: True, once=True)  # the server's SETTINGS

    def close(self):
        self.sock.close()

    def flush(self):
        data = self.h2.data_to_send()
        if data:
            self.sock.sendall(data)

    def start(self, path=METHOD, method="POST", content_type="application/grpc", extra=()):
        sid = self.h2.get_next_available_stream_id()
        headers = [(":method", method), (":scheme", "http"), (":authority", "sluice"),
                   (":path", path), ("te", "trailers")]
        if content_type is not None:
            headers.append(("content-type", content_type))
        self.h2.send_headers(sid, headers + list(extra))
        self.streams[sid] = Stream()
        self.flush()
        return sid

    def send(self, sid, data, end=True):
        self.h2.send_data(sid, data, end_stream=end)
        self.flush()

    def call(self, body, **kwargs):
        sid = self.start(**kwargs)
        self.send(sid, body)
        return self.wait(sid)

    def pump(self, until, timeout=10, once=False):
        """Reads and handles frames until `until()` holds or the server closes the connection."""
        deadline = time.monotonic() + timeout
        while not until() or once:
            once = False
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("timed out waiting for the server")
            self.sock.settimeout(left)
            data = self.sock.recv(65536)
            if not data:
                self.closed = True
                return
            for event in self.h2.receive_data(data):
                self.on_event(event)
            self.flush()

    def on_event(self, e):
        s = self.streams.get(getattr(e, "stream_id", None))
        if isinstance(e, h2.events.ResponseReceived):
            s.headers = dict(e.headers)
        elif isinstance(e, h2.events.DataReceived):
            s.data += e.data
            self.h2.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
        elif isinstance(e, h2.events.TrailersReceived):
            s.trailers = dict(e.headers)
        elif isinstance(e, h2.events.StreamEnded):
            s.ended = True
        elif isinstance(e, h2.events.StreamReset):
            if s is not None:
                s.reset = e.error_code
        elif isinstance(e, h2.events.ConnectionTerminated):
            self.goaway = e.error_code

    def wait(self, sid, timeout=10):
        s = self.streams[sid]
        self.pump(lambda: s.done or self.closed, timeout)
        return s


def read_until_closed(sock, timeout=10):
    """Every byte the server sends until it closes the connection."""
    sock.settimeout(timeout)
    out = b""
    while True:
        data = sock.recv(65536)
        if not data:
            return out
        out += data


def frames(data):
    """(type, flags, stream id, payload) of each frame in raw server output."""
    out = []
    while len(data) >= 9:
        length = int.from_bytes(data[:3], "big")
        out.append((data[3], data[4], int.from_bytes(data[5:9], "big") & 0x7FFFFFFF,
                    data[9:9 + length]))
        data = data[9 + length:]
    return out


def hpack_literal(name, value, indexed=False):
    """An HPACK literal field with a new name, with incremental indexing (into the dynamic table)
    or without."""
    def string(b):
        if len(b) < 127:
            return bytes([len(b)])
        n, out = len(b) - 127, bytearray([127])
        while n >= 128:
            out.append((n & 0x7F) | 0x80)
            n >>= 7
        return bytes(out + bytes([n]))
    name, value = name.encode(), value.encode()
    return bytes([0x40 if indexed else 0]) + string(name) + name + string(value) + value


def raw_headers(sid, fields, end_stream=False, more=b""):
    """A HEADERS frame (END_HEADERS) of `fields` as HPACK literals without indexing, then the
    block bytes `more`. Without `more` it leaves both ends' dynamic tables as they were, so h2 can
    go on framing the connection after it."""
    block = b"".join(hpack_literal(name, value) for name, value in fields) + more
    flags = 0x4 | (0x1 if end_stream else 0)
    return (struct.pack(">I", len(block))[1:] + bytes([1, flags]) + struct.pack(">I", sid)
            + block)


def call_fields():
    return [(":method", "POST"), (":scheme", "http"), (":authority", "sluice"), (":path", METHOD),
            ("content-type", "application/grpc"), ("te", "trailers")]


class H2Case(unittest.TestCase):
    def start(self, body=PLANS, extra_server="", args=()):
        d = harness.tempdir()
        self.addCleanup(d.cleanup)
        self.grpc_port = harness.free_port()
        self.svc = harness.Service(body, d.name, extra_server=(
            f'  grpc_listen: "127.0.0.1:{self.grpc_port}"\n' + extra_server), args=args)
        self.svc.__enter__()
        self.addCleanup(self.svc.__exit__)

    def client(self, **kwargs):
        c = H2Client(self.grpc_port, **kwargs)
        self.addCleanup(c.close)
        return c

    def counts(self):
        lines = test_redis.metric_lines(self.svc, "sluice_grpc_requests_total{")
        return {line.split('"')[1]: float(line.split()[-1]) for line in lines}

    def assert_serving(self):
        """A fresh connection is still answered (nothing above broke the service)."""
        s = self.client().call(message())
        self.assertEqual(s.grpc(), (0, ""))


class OddRequestsTest(H2Case):
    def setUp(self):
        self.start()

    def test_a_valid_call_is_headers_one_message_and_trailers(self):
        s = self.client().call(message())
        self.assertEqual(s.headers[":status"], "200")
        self.assertEqual(s.headers["content-type"], "application/grpc")
        self.assertNotIn("grpc-status", s.headers)
        self.assertEqual(s.trailers["grpc-status"], "0")
        self.assertEqual(s.data[0], 0)
        length = struct.unpack(">I", s.data[1:5])[0]
        self.assertEqual(length, len(s.data) - 5)
        res = rls.RateLimitResponse.FromString(s.data[5:])
        self.assertEqual(res.overall_code, rls.RateLimitResponse.OK)

    def test_a_bad_preface_gets_goaway_and_the_connection_is_closed(self):
        sock = socket.create_connection(("127.0.0.1", self.grpc_port), timeout=10)
        self.addCleanup(sock.close)
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        out = frames(read_until_closed(sock))
        goaways = [f for f in out if f[0] == GOAWAY]
        self.assertEqual(len(goaways), 1, out)
        self.assertEqual(struct.unpack(">I", goaways[0][3][4:8])[0], PROTOCOL_ERROR)
        self.assert_serving()

    def test_a_frame_on_stream_zero_that_needs_a_stream_is_a_connection_error(self):
        c = self.client()
        # A DATA frame on stream 0 (RFC 9113 §6.1: PROTOCOL_ERROR for the connection).
        c.sock.sendall(struct.pack(">I", 4)[1:] + b"\x00\x01" + b"\0\0\0\0" + b"abcd")
        c.pump(lambda: False)
        self.assertTrue(c.closed)
        self.assertEqual(c.goaway, PROTOCOL_ERROR)

    def test_a_call_on_a_stream_id_below_one_used_gets_goaway_protocol_error(self):
        c = self.client()
        c.h2.send_headers(5, call_fields())
        c.streams[5] = Stream()
        c.send(5, message())
        self.assertEqual(c.wait(5).grpc(), (0, ""))
        # Stream 3 was skipped, so it is closed (RFC 9113 §5.1.1): a call on it is a connection
        # error, not a call that waits out its deadline unanswered. (h2 refuses to send it: raw.)
        c.sock.sendall(raw_headers(3, call_fields()))
        c.pump(lambda: c.closed, timeout=5)
        self.assertEqual(c.goaway, PROTOCOL_ERROR)
        self.assert_serving()

    def test_a_get_is_405(self):
        s = self.client().call(b"", method="GET")
        self.assertEqual((s.headers[":status"], s.headers["allow"]), ("405", "POST"))
        self.assertEqual(self.counts().get("not_grpc"), 1)

    def test_a_content_type_other_than_grpc_is_415(self):
        s = self.client().call(message(), content_type="application/json")
        self.assertEqual(s.headers[":status"], "415")
        s = self.client().call(message(), content_type=None)
        self.assertEqual(s.headers[":status"], "415")
        # Another encoding than protobuf is not read as protobuf.
        for other in ("application/grpc+json", "application/grpc+protox", "application/grpcx"):
            s = self.client().call(message(), content_type=other)
            self.assertEqual(s.headers[":status"], "415", other)
        # application/grpc+proto is gRPC, in any case and with parameters.
        for same in ("application/grpc+proto", "Application/GRPC+Proto; charset=x",
                     "application/grpc;x=y"):
            s = self.client().call(message(), content_type=same)
            self.assertEqual(s.grpc(), (0, ""), same)

    def test_another_path_is_unimplemented_trailers_only(self):
        s = self.client().call(message(), path="/envoy.service.ratelimit.v2.RateLimitService/X")
        self.assertIsNone(s.trailers)
        self.assertEqual(s.headers[":status"], "200")
        code, text = s.grpc()
        self.assertEqual(code, 12)
        self.assertIn("sluice serves only", text)
        self.assertEqual(self.counts().get("unimplemented"), 1)

    def test_a_compressed_message_is_unimplemented_naming_identity(self):
        body = message()
        s = self.client().call(b"\1" + body[1:], extra=[("grpc-encoding", "gzip")])
        self.assertEqual(s.grpc()[0], 12)
        self.assertEqual(s.headers["grpc-accept-encoding"], "identity")

    def test_a_message_over_the_bound_is_resource_exhausted_and_the_rest_refused(self):
        c = self.client()
        sid = c.start()
        # Only the prefix: a message of 1 MiB announced; sluice answers before the rest comes.
        c.send(sid, b"\0" + struct.pack(">I", 1 << 20), end=False)
        c.pump(lambda: c.streams[sid].reset is not None)
        s = c.streams[sid]
        code, text = s.grpc()
        self.assertEqual(code, 8)
        self.assertIn("1048576 bytes", text)
        self.assertEqual(s.reset, 0)  # RST_STREAM NO_ERROR: stop sending
        self.assertEqual(self.counts().get("resource_exhausted"), 1)
        # The connection goes on.
        self.assertEqual(c.call(message()).grpc(), (0, ""))

    def test_a_truncated_message_is_internal(self):
        body = message()
        s = self.client().call(body[:-3])
        self.assertEqual(s.grpc(), (13, "request: truncated message"))
        s = self.client().call(body[:3])  # not even a whole prefix
        self.assertEqual(s.grpc()[0], 13)
        self.assertEqual(self.counts().get("internal"), 2)

    def test_a_second_message_is_invalid_argument(self):
        s = self.client().call(message() + message())
        code, text = s.grpc()
        self.assertEqual(code, 3)
        self.assertIn("more than one message", text)

    def test_no_message_and_bytes_that_are_no_request_are_invalid_argument(self):
        self.assertEqual(self.client().call(b"").grpc(), (3, "request: no message"))
        s = self.client().call(b"\0\0\0\0\4\xff\xff\xff\xff")
        code, text = s.grpc()
        self.assertEqual(code, 3)
        self.assertIn("not a valid envoy.service.ratelimit.v3.RateLimitRequest", text)

    def test_grpc_message_is_percent_encoded(self):
        req = test_grpc.request([("subject", "user-1"), ("plan", "nosuch\u00e9")])
        body = req.SerializeToString()
        s = self.client().call(b"\0" + struct.pack(">I", len(body)) + body)
        code, text = s.grpc()
        self.assertEqual(code, 3)
        self.assertTrue(all(0x20 <= ord(ch) <= 0x7E for ch in text), text)
        self.assertIn("%C3%A9", text)

    def test_a_header_list_over_the_bound_resets_the_stream(self):
        c = self.client()
        sid = c.start(extra=[("x-big", "v" * 20000)])
        c.send(sid, message())
        s = c.wait(sid)
        # ENHANCE_YOUR_CALM: gRPC clients report RESOURCE_EXHAUSTED, as sluice counts it.
        self.assertEqual(s.reset, 11)
        self.assertIsNone(s.headers)
        self.assertEqual(c.call(message()).grpc(), (0, ""))
        self.assertEqual(self.counts().get("resource_exhausted"), 1)

    def test_an_hpack_bomb_is_reset_and_the_ninth_gets_goaway_enhance_your_calm(self):
        sock = socket.create_connection(("127.0.0.1", self.grpc_port), timeout=10)
        self.addCleanup(sock.close)
        # Stream 1 puts one field of 4,040 bytes into the dynamic table (index 62); every later
        # stream's block refers to it 2,000 times: 8 MB of header list from 2 KB.
        out = (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\0\0\0\4\0\0\0\0\0" +
               raw_headers(1, call_fields(), more=hpack_literal("x-bomb", "a" * 4002, True)) +
               b"\0\0\0\0\1" + struct.pack(">I", 1))  # an empty DATA frame ending stream 1
        for sid in range(3, 3 + 2 * 9, 2):
            out += raw_headers(sid, call_fields(), end_stream=True, more=b"\xbe" * 2000)
        sock.sendall(out)
        got = frames(read_until_closed(sock))
        # ENHANCE_YOUR_CALM (11) for the first eight, those not still queued when the ninth ends
        # the connection (a GOAWAY that ends it goes out first, and nothing after it).
        resets = {f[2]: struct.unpack(">I", f[3])[0] for f in got if f[0] == 3}
        self.assertTrue(resets)
        self.assertEqual(resets, {sid: 11 for sid in resets})
        self.assertLess(max(resets), 19)
        goaways = [struct.unpack(">I", f[3][4:8])[0] for f in got if f[0] == GOAWAY]
        self.assertEqual(goaways, [11])
        self.assertEqual(self.counts().get("resource_exhausted"), 9)
        self.assert_serving()

    def test_grpc_timeout_already_past_is_deadline_exceeded_and_a_long_one_is_kept(self):
        c = self.client()
        s = c.call(message(), extra=[("grpc-timeout", "1n")])
        self.assertEqual(s.grpc()[0], 4)
        self.assertEqual(c.call(message(), extra=[("grpc-timeout", "10S")]).grpc(), (0, ""))
        # A malformed one is ignored.
        self.assertEqual(c.call(message(), extra=[("grpc-timeout", "soon")]).grpc(), (0, ""))
        self.assertEqual(self.counts().get("deadline_exceeded"), 1)

    def test_streams_beyond_max_concurrent_streams_are_refused(self):
        # All headers go out before the server's SETTINGS are read, so the client does not hold
        # itself to the limit of 100.
        c = H2Client(self.grpc_port, handshake=False)
        self.addCleanup(c.close)
        sids = [c.start() for _ in range(101)]
        c.pump(lambda: c.streams[sids[-1]].reset is not None)
        self.assertEqual(c.streams[sids[-1]].reset, REFUSED_STREAM)
        # The 100 taken are answered once their requests come.
        for sid in sids[:-1]:
            c.h2.send_data(sid, message(), end_stream=True)
        c.flush()
        c.pump(lambda: all(c.streams[s].done for s in sids[:-1]))
        self.assertEqual([c.streams[s].grpc()[0] for s in sids[:-1]], [0] * 100)

    def test_rst_stream_before_the_request_is_counted_cancelled(self):
        c = self.client()
        sid = c.start()
        c.send(sid, message()[:4], end=False)
        c.h2.reset_stream(sid)
        c.flush()
        # Frames are handled in order: the next call's answer comes after the reset was read.
        self.assertEqual(c.call(message()).grpc(), (0, ""))
        self.assertEqual(self.counts().get("cancelled"), 1)

    def test_a_client_gone_mid_request_is_counted_cancelled(self):
        c = H2Client(self.grpc_port)
        sid = c.start()
        c.send(sid, message()[:6], end=False)
        # A PING's ACK: the server has read the stream, and the client all the server sent, so
        # its close is a FIN (a close with input unread is an RST, which can drop the stream's
        # frames still unread on the server's side).
        events = []
        handle = c.on_event
        c.on_event = lambda e: (events.append(e), handle(e))
        c.h2.ping(b"12345678")
        c.flush()
        c.pump(lambda: any(isinstance(e, h2.events.PingAckReceived) for e in events))
        c.close()
        deadline = time.monotonic() + 10
        while self.counts().get("cancelled", 0) < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertEqual(self.counts().get("cancelled"), 1)
        self.assert_serving()

    def test_many_calls_sent_together_on_one_connection_are_all_answered(self):
        c = self.client()
        for _ in range(20):
            sids = [c.start() for _ in range(50)]
            for sid in sids:
                c.h2.send_data(sid, message(), end_stream=True)
            c.flush()
            c.pump(lambda: all(c.streams[s].done for s in sids), timeout=30)
            self.assertTrue(all(c.streams[s].grpc()[0] == 0 for s in sids))


class RedisPendingTest(H2Case):
    def test_a_client_gone_while_redis_decides_leaves_the_service_answering(self):
        # A "Redis" that accepts and never answers: every decision waits for the store timeout.
        silent = socket.socket()
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        self.addCleanup(silent.close)
        port = silent.getsockname()[1]
        self.start(test_redis.redis_yaml(port, "allow", "200ms") + PLANS)
        c = H2Client(self.grpc_port)
        sid = c.start()
        c.send(sid, message())
        c.close()  # gone before the decision's answer: the next call proves the service is fine
        s = self.client().call(message())
        self.assertEqual(s.grpc(), (0, ""))
        res = rls.RateLimitResponse.FromString(s.data[5:])
        self.assertEqual({h.key: h.value for h in res.response_headers_to_add}
                         .get("Sluice-Degraded"), "1")

    def test_a_call_reset_while_redis_decides_is_counted_cancelled_once(self):
        silent = socket.socket()
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        self.addCleanup(silent.close)
        # A timeout longer than sluice's start takes: the first command on the silent Redis (the
        # reservation expirer's, at start) is still waiting when the call comes, so the call
        # waits too (after a timeout the connection is renewed and, meanwhile, calls fail fast).
        self.start(test_redis.redis_yaml(silent.getsockname()[1], "allow", "2s") + PLANS)
        c = self.client()
        sid = c.start()
        c.send(sid, message())
        c.h2.reset_stream(sid)  # while the decision waits for the store
        c.flush()
        # The same connection's next call is answered once the first decision has given up.
        s = c.call(message())
        self.assertEqual(s.grpc(), (0, ""))
        counts = self.counts()
        self.assertEqual((counts.get("cancelled"), counts.get("ok")), (1, 1), counts)


class TimeoutsTest(H2Case):
    def test_a_configured_idle_timeout_closes_an_idle_connection(self):
        self.start(extra_server="  grpc_idle_timeout: 2s\n", args=("--log-level", "debug"))
        summary = json.loads(self.svc.server.wait_for_line('"msg":"configuration summary"'))
        self.assertEqual(summary["grpc_idle_timeout"], "2s")
        c = self.client()
        self.assertEqual(c.call(message()).grpc(), (0, ""))
        idle_since = time.monotonic()  # the call's stream is closed: idle from here
        c.pump(lambda: c.closed, timeout=20)
        took = time.monotonic() - idle_since
        self.assertTrue(c.closed)
        self.assertEqual(c.goaway, 0)  # GOAWAY NO_ERROR, then the close
        # Idle connections are looked at once a second: closed within a second or so of the 2 s,
        # not before, and not at the default of 5 minutes.
        self.assertGreaterEqual(took, 1.5)
        self.assertLess(took, 10)
        self.assert_serving()


    def test_a_reload_warns_that_changed_timeouts_need_a_restart(self):
        self.start()
        self.svc.rewrite(PLANS, extra_server="  grpc_idle_timeout: 2s\n"
                                              "  grpc_write_timeout: 5s\n")
        before = len(self.svc.server.lines)
        self.svc.server.proc.send_signal(signal.SIGHUP)
        self.svc.server.wait_for_line("configuration reloaded")
        warned = [json.loads(line)["field"] for line in self.svc.server.lines[before:]
                  if "reload ignores a changed setting" in line]
        self.assertEqual(warned, ["server.grpc_idle_timeout", "server.grpc_write_timeout"])
        self.assert_serving()


class ShutdownTest(H2Case):
    def test_sigterm_with_an_idle_connection_open_stops_at_once_after_goaway(self):
        self.start(extra_server="  shutdown_delay: 0s\n")
        c = self.client()
        self.assertEqual(c.call(message()).grpc(), (0, ""))
        self.svc.server.proc.send_signal(signal.SIGTERM)
        # Measured from the drain's start (its log line) to the connection's close, not the
        # process's exit (which also waits for the other planes and, under ASan, its leak check).
        # The drain deadline is 10 s from that line: an idle connection closes at once, one held
        # until the deadline would take about 10 s, so half of it tells the two apart under load.
        self.svc.server.wait_for_line("stopping")
        drain_start = time.monotonic()
        c.pump(lambda: c.closed, timeout=30)
        took = time.monotonic() - drain_start
        self.assertTrue(c.closed)
        self.assertLess(took, 5.0)
        self.assertEqual(c.goaway, 0)  # GOAWAY NO_ERROR before the close
        self.assertEqual(self.svc.server.proc.wait(timeout=30), 0)

    def test_a_call_in_flight_at_sigterm_is_answered(self):
        self.start(extra_server="  shutdown_delay: 0s\n")
        # h2 only writes here (it refuses to go on once it has read a GOAWAY): the answer is read
        # from the raw frames.
        c = H2Client(self.grpc_port, handshake=False)
        self.addCleanup(c.close)
        sid = c.start()
        body = message()
        c.send(sid, body[:-1], end=False)  # the request is not complete yet
        # The server reads a connection's bytes in order: its PING ACK proves the stream is open
        # on its side before the signal (else the GOAWAY may rightly refuse a stream it never saw).
        c.h2.ping(b"inflight")
        c.flush()
        c.sock.settimeout(10)
        seen = b""
        while not any(f[0] == PING and f[1] & 1 for f in frames(seen)):
            data = c.sock.recv(65536)
            self.assertTrue(data, "closed before the PING ACK")
            seen += data
        self.svc.server.proc.send_signal(signal.SIGTERM)
        self.svc.server.wait_for_line("stopping")
        while not any(f[0] == GOAWAY for f in frames(seen)):
            data = c.sock.recv(65536)
            self.assertTrue(data, "closed before GOAWAY")
            seen += data
        # The last byte, as a raw DATA frame with END_STREAM.
        c.sock.sendall(b"\0\0\1" + b"\x00\x01" + struct.pack(">I", sid) + body[-1:])
        seen += read_until_closed(c.sock)
        import hpack
        decoder = hpack.Decoder()
        fields = [dict(decoder.decode(f[3])) for f in frames(seen) if f[0] == 1 and f[2] == sid]
        self.assertEqual(fields[0][":status"], "200")
        self.assertEqual(fields[-1]["grpc-status"], "0")
        self.assertEqual(self.svc.server.proc.wait(timeout=15), 0)

if __name__ == "__main__":
    unittest.main()
