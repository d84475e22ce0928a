"""Hostile clients and exhausted machines, black-box against the real binary: request smuggling,
forwarded-address spoofing, credential scheme case, connection caps, running out of file
descriptors, a second instance on the same address, readiness and the shutdown delay."""
import email.utils
import http.client
import json
import os
import re
import resource
import signal
import socket
import time
import unittest

import harness

PLANS = """
plans:
  free:
    limits:
      - { name: per_minute, quota: 60, window: 1m }
  anon:
    limits:
      - { name: per_minute, quota: 50, window: 1m }
keys:
  - { key: key-free, subject: user-1, plan: free }
"""

ANON = '  anonymous_plan: anon\n  trusted_proxies: ["127.0.0.2/32"]\n'


def read_until_closed(sock, timeout=5.0):
    """Everything the server sends until it closes the connection; raises if it stays open."""
    sock.settimeout(timeout)
    chunks = []
    deadline = time.monotonic() + timeout
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        except socket.timeout:
            raise AssertionError(f"connection still open after {timeout}s; got {b''.join(chunks)!r}")
        if not chunk:
            break
        chunks.append(chunk)
        if time.monotonic() > deadline:
            raise AssertionError("connection still open")
    return b"".join(chunks)


def status_lines(reply):
    return re.findall(rb"HTTP/1\.[01] \d{3} [^\r\n]*", reply)


class ServiceCase(unittest.TestCase):
    extra_server = ""

    def setUp(self):
        self.dir = harness.tempdir()
        self.addCleanup(self.dir.cleanup)
        self.svc = harness.Service(PLANS, self.dir.name, extra_server=self.extra_server)
        self.svc.__enter__()
        self.addCleanup(self.svc.__exit__)
        harness.clear_of_window_end(60, 5)

    def connect(self, admin=False, source=None):
        s = socket.create_connection(
            ("127.0.0.1", self.svc.admin_port if admin else self.svc.port), timeout=5,
            source_address=(source, 0) if source else None)
        self.addCleanup(s.close)
        return s

    def exchange(self, data, admin=False):
        """Sends `data` on a fresh connection and returns all the server sent until it closed."""
        s = self.connect(admin=admin)
        s.sendall(data)
        return read_until_closed(s)

    def used(self, subject="user-1", plan="free"):
        return self.svc.check({"subject": subject, "plan": plan, "cost": 0})[2]["limits"][0]["used"]


SMUGGLED = b"GET /v1/authorize HTTP/1.1\r\nHost: x\r\nX-API-Key: key-free\r\n\r\n"


class SmugglingTest(ServiceCase):
    def send_framed(self, framing_headers, body):
        return self.exchange(b"POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
                             framing_headers + b"\r\n" + body)

    def assert_refused_and_closed(self, framing_headers, body=SMUGGLED):
        reply = self.send_framed(framing_headers, body)
        self.assertEqual(status_lines(reply), [b"HTTP/1.1 400 Bad Request"], reply)
        self.assertIn(b"Connection: close", reply)
        # The body was never read as a request: user-1 was not charged.
        self.assertEqual(self.used(), 0)

    def test_transfer_encoding_not_ending_in_chunked_is_400_and_closed(self):
        for te in [b"identity", b"gzip", b"xchunked", b"chunked, identity", b"chunked, gzip",
                   b"chunked;ext=1", b" ", b"Chunked\x0b"]:
            with self.subTest(te=te):
                self.assert_refused_and_closed(b"Transfer-Encoding: " + te + b"\r\n")

    def test_a_coding_before_chunked_is_501_and_closed(self):
        # The body's end is known (chunked is last), the coding before it is not implemented.
        reply = self.send_framed(b"Transfer-Encoding: gzip, chunked\r\n", SMUGGLED)
        self.assertEqual(status_lines(reply), [b"HTTP/1.1 501 Not Implemented"], reply)
        self.assertIn(b"Connection: close", reply)
        self.assertEqual(self.used(), 0)

    def test_options_asterisk_answers_for_the_server_and_connect_is_501(self):
        s = self.connect()
        s.sendall(b"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n" + SMUGGLED[:-2] +
                  b"Connection: close\r\n\r\n")
        reply = read_until_closed(s)
        self.assertEqual(status_lines(reply), [b"HTTP/1.1 200 OK", b"HTTP/1.1 200 OK"], reply)
        self.assertIn(b"Allow: GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS\r\n", reply)
        self.assertEqual(self.used(), 1)
        reply = self.exchange(b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n")
        self.assertEqual(status_lines(reply), [b"HTTP/1.1 501 Not Implemented"], reply)
        # The admin plane names its own methods (no PATCH, no OPTIONS route there).
        reply = self.exchange(b"OPTIONS * HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                              admin=True)
        self.assertIn(b"\r\nAllow: GET, HEAD, POST, PUT, DELETE\r\n", reply)

    def test_transfer_encoding_over_two_lines_is_one_list(self):
        self.assert_refused_and_closed(b"Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n")

    def test_transfer_encoding_and_content_length_in_either_order_are_400_and_closed(self):
        n = str(len(SMUGGLED)).encode()
        self.assert_refused_and_closed(b"Transfer-Encoding: chunked\r\nContent-Length: " + n + b"\r\n",
                                       b"0\r\n\r\n" + SMUGGLED)
        self.assert_refused_and_closed(b"Content-Length: " + n + b"\r\nTransfer-Encoding: chunked\r\n",
                                       b"0\r\n\r\n" + SMUGGLED)
        self.assert_refused_and_closed(b"Content-Length: 0\r\nTransfer-Encoding: identity\r\n")

    def test_conflicting_content_lengths_are_400_and_closed(self):
        self.assert_refused_and_closed(b"Content-Length: 2\r\nContent-Length: 3\r\n", b"{}" + SMUGGLED)
        self.assert_refused_and_closed(b"Content-Length: +2\r\n", b"{}" + SMUGGLED)

    def test_transfer_encoding_in_http10_is_refused(self):
        reply = self.exchange(b"POST /v1/check HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + SMUGGLED)
        self.assertEqual(len(status_lines(reply)), 1, reply)
        self.assertIn(b" 400 ", reply)
        self.assertEqual(self.used(), 0)

    def test_chunked_body_is_read_as_the_body(self):
        body = json.dumps({"subject": "user-1", "plan": "free", "cost": 2}).encode()
        reply = self.exchange(b"POST /v1/check HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                  b"Connection: close\r\n\r\n" + b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n")
        self.assertEqual(status_lines(reply), [b"HTTP/1.1 200 OK"], reply)
        self.assertEqual(self.used(), 2)

    def test_chunk_lines_ended_by_a_bare_lf_are_400_at_once(self):
        """A chunk-size line, the line after a chunk's data or a trailer line ended by LF alone
        is answered 400 at once (not left to the request deadline); an LF inside a chunk's data
        is data, and a chunked body sent a byte at a time is read whole."""
        body = b'{"subject": "user-1",\n"plan": "free"}'
        size = b"%x" % len(body)
        for framing in [size + b"\n" + body + b"\r\n0\r\n\r\n",
                        size + b"\r\n" + body + b"\n0\r\n\r\n",
                        size + b"\r\n" + body + b"\r\n0\n\n",
                        size + b"\r\n" + body + b"\r\n0\r\nX-T: 1\n\r\n",
                        size + b"\r\n" + body + b"\r\n0\r\nX-T: 1\rY"]:  # a bare CR
            with self.subTest(framing=framing):
                s = self.connect()
                s.sendall(b"POST /v1/check HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                          b"\r\n" + framing)
                started = time.monotonic()
                reply = read_until_closed(s)
                self.assertEqual(status_lines(reply), [b"HTTP/1.1 400 Bad Request"], reply)
                self.assertLess(time.monotonic() - started, 5)  # the request deadline is 10 s
        self.assertEqual(self.used(), 0)
        good = (b"POST /v1/check HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                b"Connection: close\r\n\r\n" + size + b";e=1\r\n" + body + b"\r\n0\r\nX-T: 1\r\n\r\n")
        s = self.connect()
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(len(good)):
            s.sendall(good[i:i + 1])
        self.assertEqual(status_lines(read_until_closed(s)), [b"HTTP/1.1 200 OK"])
        self.assertEqual(self.used(), 1)
        # A request pipelined behind a chunked body with a trailer, in the same write, is the
        # next request (its bytes are not taken for the body's).
        s = self.connect()
        s.sendall(good.replace(b"Connection: close\r\n", b"") + SMUGGLED[:-2] +
                  b"Connection: close\r\n\r\n")
        self.assertEqual(status_lines(read_until_closed(s)), [b"HTTP/1.1 200 OK"] * 2)
        self.assertEqual(self.used(), 3)

    def test_trailer_fields_are_not_header_fields(self):
        # An API key or a forwarding address smuggled in a chunked body's trailer section is
        # never read as if it were in the header block.
        reply = self.exchange(b"GET /v1/authorize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                  b"Connection: close\r\n\r\n0\r\nX-API-Key: key-free\r\n\r\n")
        self.assertEqual(status_lines(reply), [b"HTTP/1.1 401 Unauthorized"])
        reply = self.exchange(b"GET /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                  b"Connection: close\r\n\r\n0\r\nAuthorization: Bearer " +
                  self.svc.admin_token.encode() + b"\r\n\r\n", admin=True)
        self.assertEqual(status_lines(reply), [b"HTTP/1.1 401 Unauthorized"])
        self.assertEqual(self.used(), 0)

    def test_chunk_extensions_and_trailers_are_bounded(self):
        for body in [b"1;a=" + b"x" * 100_000, b"0\r\n" + b"X-T: " + b"b" * 100_000]:
            with self.subTest(body=body[:8]):
                s = self.connect()
                s.sendall(b"POST /v1/check HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
                try:
                    s.sendall(body)
                except OSError:
                    pass  # refused while sending: fine
                reply = read_until_closed(s)
                self.assertEqual(len(status_lines(reply)), 1, reply[:200])
                self.assertTrue(reply.startswith(b"HTTP/1.1 413 Content Too Large"), reply[:200])

    def test_the_header_block_limit_is_exact(self):
        head = b"GET /v1/authorize HTTP/1.1\r\nHost: x\r\nX-API-Key: key-free\r\n"
        padding = b"".join(b"X: a\r\n" for _ in range(2720))  # ~16 KiB in one write
        reply = self.exchange(head + padding + b"\r\n")
        self.assertTrue(reply.startswith(b"HTTP/1.1 431 "), reply[:80])
        # Three long lines in one write, the key last (it was read and charged before: Beast
        # drops complete lines from its buffer as it parses them).
        long_lines = b"".join(b"X-%d: %s\r\n" % (i, b"a" * 4000) for i in range(3))
        reply = self.exchange(b"GET /v1/authorize HTTP/1.1\r\nHost: x\r\n" + long_lines +
                              b"X-API-Key: key-free\r\n\r\n")
        self.assertTrue(reply.startswith(b"HTTP/1.1 431 "), reply[:80])
        self.assertEqual(self.used(), 0)
        # The bound is the block's 8 KiB, however its bytes arrive: exactly 8192 passes, 8193 not.
        for extra, status in ((0, b"200"), (1, b"431")):
            filler = 8192 - len(head) - len(b"X-Pad: \r\nConnection: close\r\n\r\n") + extra
            block = head + b"X-Pad: " + b"p" * filler + b"\r\nConnection: close\r\n\r\n"
            for pieces in (1, 7):
                with self.subTest(size=len(block), pieces=pieces):
                    s = self.connect()
                    step = -(-len(block) // pieces)
                    for i in range(0, len(block), step):
                        s.sendall(block[i:i + step])
                        time.sleep(0.01)
                    reply = read_until_closed(s)
                    self.assertEqual(reply[9:12], status, reply[:80])

    def test_chunk_extensions_of_all_chunks_together_are_bounded(self):
        # Each chunk line is short, but 39 of them carry 273 KB of extensions.
        body = b'{"subject": "user-1", "plan": "free"}'
        chunks = b"".join(b"1;a=%s\r\n%s\r\n" % (b"x" * 7000, body[i:i + 1])
                          for i in range(len(body)))
        s = self.connect()
        s.sendall(b"POST /v1/check HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                  b"Content-Type: application/json\r\n\r\n")
        try:
            s.sendall(chunks + b"0\r\n\r\n")
        except OSError:
            pass  # refused while sending: fine
        reply = read_until_closed(s)
        self.assertTrue(reply.startswith(b"HTTP/1.1 413 Content Too Large"), reply[:200])
        self.assertEqual(self.used(), 0)
        # Short extensions on many chunks are fine.
        chunks = b"".join(b"1;a=b\r\n%s\r\n" % body[i:i + 1] for i in range(len(body)))
        reply = self.exchange(b"POST /v1/check HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                              b"Content-Type: application/json\r\nConnection: close\r\n\r\n" +
                              chunks + b"0\r\n\r\n")
        self.assertEqual(status_lines(reply), [b"HTTP/1.1 200 OK"], reply[:200])

    def test_every_answer_carries_a_date(self):
        for data, admin in ((b"GET /v1/authorize HTTP/1.1\r\nHost: x\r\nX-API-Key: key-free\r\n"
                             b"Connection: close\r\n\r\n", False),
                            (b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", True),
                            (b"GET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", False),
                            (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", False)):
            reply = self.exchange(data, admin=admin)
            m = re.search(rb"\r\nDate: ([^\r]+)\r\n", reply)
            self.assertIsNotNone(m, reply[:300])
            sent = email.utils.parsedate_to_datetime(m.group(1).decode())
            self.assertEqual(m.group(1).decode(), email.utils.format_datetime(sent, usegmt=True))
            self.assertLess(abs(time.time() - sent.timestamp()), 5)

    def test_bad_host_values_and_target_characters_are_400_and_closed(self):
        for head in [b"GET /v1/authorize HTTP/1.1\r\nHost: x:abc\r\n",
                     b"GET /v1/authorize HTTP/1.1\r\nHost: [::1\r\n",
                     b"GET /v1/authorize HTTP/1.1\r\nHost: %zz\r\n",
                     b"GET /v1/authorize/\xff HTTP/1.1\r\nHost: x\r\n",
                     b"GET /v1/authorize/a\\b HTTP/1.1\r\nHost: x\r\n",
                     b"GET /v1/authorize/<a> HTTP/1.1\r\nHost: x\r\n",
                     b"GET /v1/authorize?%zz HTTP/1.1\r\nHost: x\r\n"]:
            with self.subTest(head=head):
                reply = self.exchange(head + b"X-API-Key: key-free\r\n\r\n" + SMUGGLED)
                self.assertEqual(status_lines(reply), [b"HTTP/1.1 400 Bad Request"], reply)
        self.assertEqual(self.used(), 0)
        # What browsers leave unencoded in a query (and a gateway forwards) is decided.
        reply = self.exchange(b"GET /v1/authorize/items?filter[name]={x}|y^z&ids[]=1 HTTP/1.1\r\n"
                              b"Host: x\r\nX-API-Key: key-free\r\nConnection: close\r\n\r\n")
        self.assertEqual(status_lines(reply), [b"HTTP/1.1 200 OK"], reply)
        self.assertEqual(self.used(), 1)

    def test_a_header_block_sent_a_byte_at_a_time_is_read_whole(self):
        """The block's end (CR LF CR LF) and a bare CR are found however the bytes are split
        across reads."""
        good = (b"GET /v1/authorize HTTP/1.1\r\nHost: x\r\nX-API-Key: key-free\r\n"
                b"X-Pad: " + b"p" * 200 + b"\r\nConnection: close\r\n\r\n")
        # Refused at its last byte (a CR not followed by LF), so nothing is sent after the answer.
        bare_cr = b"GET /v1/authorize HTTP/1.1\r\nHost: x\r\nX-API-Key: key-free\r\nX-A: 1\rx"
        for data, want in ((good, b"HTTP/1.1 200 OK"), (bare_cr, b"HTTP/1.1 400 Bad Request")):
            s = self.connect()
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for i in range(len(data)):
                s.sendall(data[i:i + 1])
            self.assertEqual(status_lines(read_until_closed(s)), [want], data)
        self.assertEqual(self.used(), 1)

    def test_rejected_requests_are_logged_at_most_once_a_second_per_loop(self):
        for _ in range(50):
            self.exchange(b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n")
        self.svc.server.wait_for_line('"request rejected"')  # the log reader has caught up
        lines = [json.loads(l) for l in self.svc.server.lines if '"request rejected"' in l]
        # 50 rejections within a few seconds, on the service's loops: a handful of lines.
        self.assertGreaterEqual(len(lines), 1)
        self.assertLess(len(lines), 20, len(lines))
        # Every one is counted, though: the metrics show a flood the log only samples.
        self.assertEqual(metric(self.svc, 'sluice_http_requests_total{route="-",code="400"}'), 50)

    def test_answers_given_before_any_route_are_counted_as_route_dash(self):
        for plane in (False, True):
            self.exchange(b"OPTIONS * HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", admin=plane)
            self.exchange(b"BREW / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", admin=plane)
            self.exchange(b"GET / HTTP/1.2\r\nHost: x\r\n\r\n", admin=plane)
        for code in (200, 501, 505):
            self.assertEqual(
                metric(self.svc, f'sluice_http_requests_total{{route="-",code="{code}"}}'), 2, code)

    def test_connection_close_on_any_line_closes(self):
        reply = self.exchange(b"GET /nope HTTP/1.1\r\nHost: x\r\nConnection: foo\r\nConnection: close\r\n\r\n"
                  b"GET /v1/authorize HTTP/1.1\r\nHost: x\r\nX-API-Key: key-free\r\n\r\n")
        self.assertEqual(status_lines(reply), [b"HTTP/1.1 404 Not Found"], reply)
        self.assertEqual(self.used(), 0)

    def test_an_unknown_method_is_501_and_the_connection_stays_in_step(self):
        reply = self.exchange(b"FOO /v1/check HTTP/1.1\r\nHost: x\r\n\r\n"
                  b"GET /v1/authorize HTTP/1.1\r\nHost: x\r\nX-API-Key: key-free\r\nConnection: close\r\n\r\n")
        self.assertEqual(status_lines(reply),
                         [b"HTTP/1.1 501 Not Implemented", b"HTTP/1.1 200 OK"])

    def test_missing_or_doubled_host_is_400_and_closed(self):
        for head in [b"GET /v1/authorize HTTP/1.1\r\nX-API-Key: key-free\r\n\r\n",
                     b"GET /v1/authorize HTTP/1.1\r\nHost: a\r\nHost: b\r\nX-API-Key: key-free\r\n\r\n"]:
            with self.subTest(head=head):
                reply = self.exchange(head + SMUGGLED)
                self.assertEqual(status_lines(reply), [b"HTTP/1.1 400 Bad Request"], reply)
        self.assertEqual(self.used(), 0)

    def test_a_handler_error_with_its_body_read_keeps_the_connection_in_step(self):
        bad = b"{not json"
        reply = self.exchange(b"POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(bad) + bad +
                  b"GET /v1/authorize HTTP/1.1\r\nHost: x\r\nX-API-Key: key-free\r\nConnection: close\r\n\r\n")
        self.assertEqual(status_lines(reply), [b"HTTP/1.1 400 Bad Request", b"HTTP/1.1 200 OK"], reply)
        self.assertEqual(self.used(), 1)


class ExpectAndTargetTest(ServiceCase):
    def test_expect_100_continue_is_answered_before_the_body(self):
        body = json.dumps({"subject": "user-1", "plan": "free"}).encode()
        s = self.connect()
        s.sendall(b"POST /v1/check HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                  b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body))
        s.settimeout(3)
        first = s.recv(4096)
        self.assertTrue(first.startswith(b"HTTP/1.1 100 Continue\r\n\r\n"), first)
        s.sendall(body)
        reply = first[len(b"HTTP/1.1 100 Continue\r\n\r\n"):] + read_until_closed(s)
        self.assertEqual(status_lines(reply), [b"HTTP/1.1 200 OK"], reply)

    def test_expect_with_a_body_over_the_limit_gets_413_without_100(self):
        reply = self.exchange(b"POST /v1/check HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                  b"Content-Length: 10000000\r\n\r\n")
        self.assertEqual(len(status_lines(reply)), 1, reply)
        self.assertTrue(reply.startswith(b"HTTP/1.1 413 "), reply)

    def test_unknown_expectation_is_417(self):
        reply = self.exchange(b"POST /v1/check HTTP/1.1\r\nHost: x\r\nExpect: something\r\nContent-Length: 2\r\n\r\n{}")
        self.assertEqual(status_lines(reply), [b"HTTP/1.1 417 Expectation Failed"], reply)

    def test_absolute_form_target_is_accepted(self):
        body = json.dumps({"subject": "user-1", "plan": "free"}).encode()
        reply = self.exchange(b"POST http://127.0.0.1:%d/v1/check HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  b"Content-Length: %d\r\nConnection: close\r\n\r\n" % (self.svc.port, len(body)) + body)
        self.assertEqual(status_lines(reply), [b"HTTP/1.1 200 OK"], reply)
        self.assertIn(b'"allowed":true', reply)

    def test_malformed_request_lines_are_400_and_closed(self):
        for line in [b"GET /v1/authorize HTTP/1.1\nHost: x\n\n",  # bare LF
                     b"GET /v1/authorize#frag HTTP/1.1\r\nHost: x\r\n\r\n",
                     b"GET v1/authorize HTTP/1.1\r\nHost: x\r\n\r\n",
                     b"GET /v1/authorize HTTP/1.1\r\nHost: x\r\nX-API-Key : key-free\r\n\r\n",
                     b"\r\n" * 40 + b"GET /healthz HTTP/1.1\r\n\r\n",
                     b"GET /v1/ch eck HTTP/1.1\r\nHost: x\r\n\r\n",
                     b"GET * HTTP/1.1\r\nHost: x\r\n\r\n",
                     b"GET http:///v1/authorize HTTP/1.1\r\nHost: x\r\n\r\n",
                     b"GET http://u:p@x/v1/authorize HTTP/1.1\r\nHost: x\r\n\r\n"]:
            with self.subTest(line=line[:40]):
                reply = self.exchange(line)
                self.assertEqual(status_lines(reply), [b"HTTP/1.1 400 Bad Request"])
        self.assertEqual(self.used(), 0)

    def test_an_empty_line_before_a_request_is_ignored(self):
        reply = self.exchange(b"\r\nGET /v1/authorize HTTP/1.1\r\nHost: x\r\nX-API-Key: key-free\r\n"
                  b"Connection: close\r\n\r\n")
        self.assertEqual(status_lines(reply), [b"HTTP/1.1 200 OK"])

    def test_other_http_versions_are_505(self):
        reply = self.exchange(b"GET /healthz HTTP/1.2\r\nHost: x\r\n\r\n")
        self.assertEqual(status_lines(reply), [b"HTTP/1.1 505 HTTP Version Not Supported"])

    def test_an_http10_client_gets_our_version_and_a_connection_header_that_says_what_happens(self):
        # Without keep-alive: answered as HTTP/1.1 (our version), and since persistence is 1.1's
        # default the answer says close, then closes.
        reply = self.exchange(b"GET /v1/authorize HTTP/1.0\r\nX-API-Key: key-free\r\n\r\n")
        self.assertEqual(status_lines(reply), [b"HTTP/1.1 200 OK"], reply)
        self.assertRegex(reply, rb"\r\nConnection: close\r\n")
        # With keep-alive: said back, and the connection takes a second request.
        s = self.connect()
        s.settimeout(5)
        s.sendall(b"GET /v1/authorize HTTP/1.0\r\nX-API-Key: key-free\r\nConnection: keep-alive\r\n\r\n")
        first = b""
        while b"\r\n\r\n" not in first:
            first += s.recv(4096)
        self.assertTrue(first.startswith(b"HTTP/1.1 200 OK\r\n"), first)
        self.assertRegex(first, rb"\r\nConnection: keep-alive\r\n")
        s.sendall(b"GET /v1/authorize HTTP/1.0\r\nX-API-Key: key-free\r\n\r\n")
        rest = read_until_closed(s)
        self.assertEqual(status_lines(first + rest), [b"HTTP/1.1 200 OK"] * 2, first + rest)
        self.assertEqual(self.used(), 3)


def trickle_until_closed(sock, pieces, gap=0.5):
    """Sends `pieces` one every `gap` seconds; returns how long it took the server to close the
    connection, or None if it never did."""
    start = time.monotonic()
    for piece in pieces:
        try:
            sock.sendall(piece)
        except OSError:
            return time.monotonic() - start
        if closed_by_server(sock, timeout=gap):
            return time.monotonic() - start
    return None


class DeadlineTest(ServiceCase):
    extra_server = "  anonymous_plan: anon\n"

    def test_a_request_after_an_idle_period_still_has_only_the_header_timeout(self):
        s = self.connect()
        self.assertTrue(answers(s, b"GET /v1/authorize HTTP/1.1\r\nHost: x\r\nX-API-Key: key-free\r\n\r\n"))
        time.sleep(6)  # idle, within the keep-alive timeout: the connection stays
        closed = trickle_until_closed(
            s, [bytes([c]) for c in b"GET /v1/authorize HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 40])
        self.assertIsNotNone(closed, "a trickled request outlived the 10 s header timeout")
        self.assertLess(closed, 12)

    def test_empty_lines_do_not_extend_the_header_timeout(self):
        s = self.connect()
        closed = trickle_until_closed(s, [b"\n"] * 30)
        self.assertIsNotNone(closed, "empty lines kept the connection open")
        self.assertLess(closed, 12)


class ForwardedTest(ServiceCase):
    extra_server = ANON

    def subject_from_proxy(self, headers):
        conn = http.client.HTTPConnection("127.0.0.1", self.svc.port, timeout=5,
                                          source_address=("127.0.0.2", 0))
        try:
            conn.putrequest("GET", "/v1/authorize")
            for name, value in headers:
                conn.putheader(name, value)
            conn.endheaders()
            res = conn.getresponse()
            res.read()
            self.assertEqual(res.status, 200)
            return res.getheader("Sluice-Subject")
        finally:
            conn.close()

    def assert_subjects(self, cases):
        """`cases`: (header lines sent by the trusted proxy 127.0.0.2, the subject expected)."""
        for headers, expected in cases:
            with self.subTest(headers=headers):
                self.assertEqual(self.subject_from_proxy(headers), expected)

    def test_several_x_forwarded_for_lines_are_one_list(self):
        # The client forged the first line; the trusted proxy appended the second.
        xff = "X-Forwarded-For"
        self.assert_subjects([
            ([(xff, "203.0.113.9"), (xff, "198.51.100.7")], "ip:198.51.100.7"),
            ([(xff, "203.0.113.9, 127.0.0.2"), (xff, "127.0.0.2")], "ip:203.0.113.9"),
        ])

    def test_forwarded_for_is_walked_by_the_same_rule(self):
        fwd = "Forwarded"
        self.assert_subjects([
            ([(fwd, "for=203.0.113.9, for=198.51.100.7;proto=http")], "ip:198.51.100.7"),
            # An IPv6 client is its /64 (server.anonymous_ipv6_prefix).
            ([(fwd, 'For="[2001:db8:cafe::17]:4711"')], "ip:2001:db8:cafe::/64"),
            ([(fwd, "for=203.0.113.9"), (fwd, "for=198.51.100.8")], "ip:198.51.100.8"),
            # A line the client broke (an unterminated quote, text after a quote) cannot swallow or
            # outrank the line or element the proxy appended.
            ([(fwd, 'for=203.0.113.9, x="'), (fwd, "for=198.51.100.8")], "ip:198.51.100.8"),
            ([(fwd, 'for=203.0.113.9;x="a"b'), (fwd, 'for="198.51.100.8"')], "ip:198.51.100.8"),
            ([(fwd, 'for=203.0.113.9;x=", for=198.51.100.8')], "ip:127.0.0.2"),
            ([(fwd, "for=203.0.113.9;for=203.0.113.10")], "ip:127.0.0.2"),
            # "unknown" or an obfuscated node: nothing left of it can be believed.
            ([(fwd, "for=203.0.113.9, for=_hidden")], "ip:127.0.0.2"),
        ])

    def test_disagreeing_headers_fall_back_to_the_proxy(self):
        self.assert_subjects([
            ([("X-Forwarded-For", "198.51.100.7"), ("Forwarded", "for=203.0.113.9")], "ip:127.0.0.2"),
            ([("X-Forwarded-For", "198.51.100.7"), ("Forwarded", "for=198.51.100.7")],
             "ip:198.51.100.7"),
        ])

    def test_an_untrusted_peer_cannot_choose_its_address(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.svc.port, timeout=5)
        conn.request("GET", "/v1/authorize", headers={"X-Forwarded-For": "203.0.113.9",
                                                      "Forwarded": "for=203.0.113.9"})
        res = conn.getresponse()
        res.read()
        conn.close()
        self.assertEqual(res.getheader("Sluice-Subject"), "ip:127.0.0.1")


ANON_PLANS = """
plans:
  anon:
    limits:
      - { name: per_minute, quota: 5, window: 1m }
"""


class AnonymousCase(unittest.TestCase):
    """Anonymous clients are limited per network: an IPv6 subscriber owns a /64 at least and can
    send every request from a new address of it. 127.0.0.1 is a trusted proxy here, so the tests
    send from many client addresses with X-Forwarded-For."""
    extra_server = '  anonymous_plan: anon\n  trusted_proxies: ["127.0.0.1/32"]\n'

    def setUp(self):
        self.dir = harness.tempdir()
        self.addCleanup(self.dir.cleanup)
        self.svc = harness.Service(ANON_PLANS, self.dir.name, extra_server=self.extra_server)
        self.svc.__enter__()
        self.addCleanup(self.svc.__exit__)
        harness.clear_of_window_end(60, 5)

    def authorize_from(self, client):
        """(status, Sluice-Subject) of an anonymous request forwarded for `client`."""
        status, headers, _ = self.svc.request("GET", "/v1/authorize",
                                              headers={"X-Forwarded-For": client})
        return status, headers.get("sluice-subject")


class AnonymousNetworkTest(AnonymousCase):
    def test_twenty_addresses_of_one_ipv6_slash64_share_one_quota(self):
        answers = [self.authorize_from(f"2001:db8:1:2:{i:x}:{i * 7:x}::{i + 1:x}")
                   for i in range(20)]
        self.assertEqual([status for status, _ in answers], [200] * 5 + [429] * 15)
        self.assertEqual({subject for _, subject in answers}, {"ip:2001:db8:1:2::/64"})
        # The next /64 is another client.
        self.assertEqual(self.authorize_from("2001:db8:1:3::1"), (200, "ip:2001:db8:1:3::/64"))

    def test_every_spelling_of_an_address_is_one_client(self):
        spellings = ["2001:db8:1:2::7", "2001:0DB8:0001:0002:0000:0000:0000:0007",
                     "[2001:db8:1:2::7]:4711", "2001:db8:1:2:0:0:0:7", "2001:db8:1:2::8",
                     "2001:db8:1:2::9"]
        answers = [self.authorize_from(a) for a in spellings]
        self.assertEqual([status for status, _ in answers], [200] * 5 + [429])
        # IPv4 stays one subject per address, written as such; IPv4-mapped is the same client.
        self.assertEqual(self.authorize_from("203.0.113.7"), (200, "ip:203.0.113.7"))
        self.assertEqual(self.authorize_from("::ffff:203.0.113.7"), (200, "ip:203.0.113.7"))
        self.assertEqual(self.authorize_from("203.0.113.8"), (200, "ip:203.0.113.8"))

    def test_forwarded_is_grouped_like_x_forwarded_for(self):
        for i in range(6):
            status, headers, _ = self.svc.request(
                "GET", "/v1/authorize", headers={"Forwarded": f'for="[2001:db8:5:6::{i + 1}]"'})
            self.assertEqual((status, headers.get("sluice-subject")),
                             (200 if i < 5 else 429, "ip:2001:db8:5:6::/64"))


class AnonymousPrefixesTest(AnonymousCase):
    """server.anonymous_ipv6_prefix and anonymous_ipv4_prefix set wider networks."""
    extra_server = (AnonymousCase.extra_server +
                    "  anonymous_ipv6_prefix: 48\n  anonymous_ipv4_prefix: 24\n")

    def test_the_slash64s_of_one_ipv6_slash48_share_one_quota(self):
        answers = [self.authorize_from(f"2001:db8:1:{i:x}::1") for i in range(8)]
        self.assertEqual([status for status, _ in answers], [200] * 5 + [429] * 3)
        self.assertEqual({subject for _, subject in answers}, {"ip:2001:db8:1::/48"})
        self.assertEqual(self.authorize_from("2001:db8:2::1"), (200, "ip:2001:db8:2::/48"))

    def test_the_addresses_of_one_ipv4_slash24_share_one_quota(self):
        answers = [self.authorize_from(f"198.51.100.{i}") for i in range(1, 7)]
        self.assertEqual([status for status, _ in answers], [200] * 5 + [429])
        self.assertEqual({subject for _, subject in answers}, {"ip:198.51.100.0/24"})
        self.assertEqual(self.authorize_from("::ffff:198.51.100.200"), (429, "ip:198.51.100.0/24"))
        self.assertEqual(self.authorize_from("198.51.101.1"), (200, "ip:198.51.101.0/24"))

    def test_forwarded_is_grouped_by_the_same_prefix(self):
        for i in range(6):
            status, headers, _ = self.svc.request(
                "GET", "/v1/authorize", headers={"Forwarded": f'for="[2001:db8:5:{i}::1]"'})
            self.assertEqual((status, headers.get("sluice-subject")),
                             (200 if i < 5 else 429, "ip:2001:db8:5::/48"))


class AuthSchemeTest(ServiceCase):
    def test_bearer_scheme_is_case_insensitive_on_the_data_plane(self):
        for scheme in ["Bearer", "bearer", "BEARER", "bEaReR"]:
            with self.subTest(scheme=scheme):
                status, headers, _ = self.svc.request("GET", "/v1/authorize",
                                                      headers={"Authorization": f"{scheme} key-free"})
                self.assertEqual((status, headers.get("sluice-subject")), (200, "user-1"))

    def test_bearer_scheme_is_case_insensitive_on_the_admin_plane(self):
        for scheme in ["Bearer", "bearer", "BEARER"]:
            with self.subTest(scheme=scheme):
                status, _, _ = self.svc.request(
                    "GET", "/metrics", headers={"Authorization": f"{scheme} {self.svc.admin_token}"},
                    admin=True)
                self.assertEqual(status, 200)
        self.assertEqual(self.svc.request("GET", "/metrics", admin=True,
                                          headers={"Authorization": "Basic " + self.svc.admin_token})[0], 401)

    def test_unreadable_credentials_are_not_anonymous(self):
        for value in ["Basic dXNlcjpwdw==", "Bearer ", "Bearer\tkey-free", "Token key-free"]:
            with self.subTest(value=value):
                status, _, _ = self.svc.request("GET", "/v1/authorize", headers={"Authorization": value})
                self.assertEqual(status, 401)

    def test_two_costs_or_two_admin_tokens_are_refused(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.svc.port, timeout=5)
        conn.putrequest("GET", "/v1/authorize")
        conn.putheader("X-API-Key", "key-free")
        conn.putheader("Sluice-Cost", "1")
        conn.putheader("Sluice-Cost", "0")
        conn.endheaders()
        res = conn.getresponse()
        res.read()
        conn.close()
        self.assertEqual(res.status, 400)
        conn = http.client.HTTPConnection("127.0.0.1", self.svc.admin_port, timeout=5)
        conn.putrequest("GET", "/metrics")
        conn.putheader("Authorization", "Bearer " + self.svc.admin_token)
        conn.putheader("Authorization", "Bearer wrong")
        conn.endheaders()
        res = conn.getresponse()
        res.read()
        conn.close()
        self.assertEqual(res.status, 400)
        self.assertEqual(self.used(), 0)

    def test_two_credentials_are_refused(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.svc.port, timeout=5)
        conn.putrequest("GET", "/v1/authorize")
        conn.putheader("X-API-Key", "key-free")
        conn.putheader("X-API-Key", "other")
        conn.endheaders()
        res = conn.getresponse()
        res.read()
        conn.close()
        self.assertEqual(res.status, 400)
        self.assertEqual(self.used(), 0)


def metric(svc, name, conn=None):
    """The value of the first sample of `name` in /metrics (0 if absent)."""
    if conn is None:
        status, _, body = svc.request("GET", "/metrics", admin=True,
                                      headers={"Authorization": "Bearer " + svc.admin_token})
    else:
        conn.request("GET", "/metrics", headers={"Authorization": "Bearer " + svc.admin_token})
        res = conn.getresponse()
        status, body = res.status, res.read()
    assert status == 200, status
    for line in body.decode().splitlines():
        if line.startswith(name):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def answers(sock, request=b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"):
    """True if `sock` still gets an answer to a request."""
    try:
        sock.settimeout(5)
        sock.sendall(request)
        return sock.recv(4096).startswith(b"HTTP/1.1 ")
    except OSError:
        return False


def closed_by_server(sock, timeout=3.0):
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


class ConnectionCapTest(ServiceCase):
    extra_server = "  max_connections: 5\n  admin_max_connections: 4\n"

    def test_the_data_plane_cap_is_exact(self):
        held = [self.connect() for _ in range(5)]
        for s in held:  # each one is being served before the next one comes
            self.assertTrue(answers(s, b"GET /v1/authorize HTTP/1.1\r\nHost: x\r\nX-API-Key: key-free\r\n\r\n"))
        extra = self.connect()
        self.assertTrue(closed_by_server(extra), "a 6th connection was kept under a cap of 5")
        for s in held:
            self.assertTrue(answers(s, b"GET /v1/authorize HTTP/1.1\r\nHost: x\r\nX-API-Key: key-free\r\n\r\n"))
        self.assertGreaterEqual(metric(self.svc, 'sluice_connections_refused_total{plane="data"}'), 1)
        # A freed slot is usable again.
        held[0].close()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            s = self.connect()
            if answers(s, b"GET /v1/authorize HTTP/1.1\r\nHost: x\r\nX-API-Key: key-free\r\n\r\n"):
                break
            time.sleep(0.05)
        else:
            self.fail("no connection accepted after one was closed")

    def test_idle_admin_connections_cannot_lock_out_probes_and_metrics(self):
        hoard = [self.connect(admin=True) for _ in range(70)]
        time.sleep(0.2)  # let the server accept (and evict) them all
        self.assertEqual(self.svc.request("GET", "/healthz", admin=True)[0], 200)
        self.assertEqual(self.svc.request("GET", "/readyz", admin=True)[0], 200)
        self.assertGreaterEqual(metric(self.svc, 'sluice_connections_evicted_total{plane="admin"}'), 60)
        del hoard

    def test_a_probe_that_has_sent_its_request_outlasts_idle_hoarders(self):
        probe = self.connect(admin=True)
        probe.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # the request has begun
        time.sleep(0.2)  # let the server read it
        hoard = [self.connect(admin=True) for _ in range(20)]
        time.sleep(0.2)  # let the server accept (and evict) them
        probe.sendall(b"\r\n")
        probe.settimeout(5)
        self.assertTrue(probe.recv(4096).startswith(b"HTTP/1.1 200 "))
        del hoard

    def test_an_authenticated_admin_connection_is_not_evicted(self):
        scraper = http.client.HTTPConnection("127.0.0.1", self.svc.admin_port, timeout=5)
        self.addCleanup(scraper.close)
        metric(self.svc, "sluice_build_info", conn=scraper)
        hoard = [self.connect(admin=True) for _ in range(20)]
        time.sleep(0.2)
        self.assertEqual(self.svc.request("GET", "/healthz", admin=True)[0], 200)
        # The scraper's keep-alive connection survived the flood.
        self.assertEqual(metric(self.svc, "sluice_build_info", conn=scraper), 1)
        del hoard


class SecondInstanceTest(unittest.TestCase):
    def test_a_second_serve_on_the_same_listen_address_refuses_to_start(self):
        with harness.tempdir() as d, harness.Service(PLANS, d) as first:
            other = os.path.join(d, "other")
            os.mkdir(other)
            config = harness.write_config(other, (
                "server:\n"
                f'  listen: "127.0.0.1:{first.port}"\n'
                f'  admin_listen: "127.0.0.1:{harness.free_port()}"\n' + PLANS))
            second = harness.run("serve", "-c", config, timeout=20)
            self.assertNotEqual(second.returncode, 0)
            self.assertIn("already in use", second.stderr)
            self.assertEqual(first.check({"subject": "s", "plan": "free"})[0], 200)


    def test_a_second_serve_on_the_same_admin_address_exits_cleanly(self):
        with harness.tempdir() as d, harness.Service(PLANS, d) as first:
            other = os.path.join(d, "other")
            os.mkdir(other)
            config = harness.write_config(other, (
                "server:\n"
                f'  listen: "127.0.0.1:{harness.free_port()}"\n'
                f'  admin_listen: "127.0.0.1:{first.admin_port}"\n' + PLANS))
            second = harness.run("serve", "-c", config, timeout=20)
            self.assertEqual(second.returncode, 1, second.stderr)
            self.assertIn("cannot start the admin plane", second.stderr)
            self.assertNotIn("AddressSanitizer", second.stderr)


class FileDescriptorExhaustionTest(unittest.TestCase):
    LIMIT = 64

    def test_emfile_backs_off_keeps_serving_and_recovers(self):
        with harness.tempdir() as d:
            svc = harness.Service(PLANS, d)
            harness.write_config(d, svc.server_yaml.replace("threads: 2", "threads: 1") + PLANS)
            limit = self.LIMIT
            server = harness.Server(
                svc.config_path,
                preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit)))
            self.addCleanup(server.kill)
            proc = server.proc
            server.wait_for_line("sluice started")
            scraper = http.client.HTTPConnection("127.0.0.1", svc.admin_port, timeout=5)
            self.addCleanup(scraper.close)
            metric(svc, "sluice_build_info", conn=scraper)
            first = socket.create_connection(("127.0.0.1", svc.port), timeout=5)
            self.addCleanup(first.close)
            self.assertTrue(answers(first))
            hoard = []
            for _ in range(limit + 20):
                try:
                    hoard.append(socket.create_connection(("127.0.0.1", svc.port), timeout=2))
                except OSError:
                    break
            time.sleep(0.5)
            # Out of descriptors: CPU stays low (no busy loop) over two seconds.
            cpu_before = self._cpu_seconds(proc.pid)
            time.sleep(2.0)
            cpu = self._cpu_seconds(proc.pid) - cpu_before
            self.assertLess(cpu, 0.3, f"sluice used {cpu:.2f} s of CPU in 2 s while out of descriptors")
            # The connections it has are still served.
            self.assertTrue(answers(first))
            self.assertGreater(metric(svc, 'sluice_accept_failures_total{plane="data"}', conn=scraper), 0)
            # A new client is not left hanging: it is closed (or answered) promptly.
            late = socket.create_connection(("127.0.0.1", svc.port), timeout=5)
            self.addCleanup(late.close)
            self.assertTrue(closed_by_server(late, timeout=3.0))
            warnings = [l for l in server.lines if "cannot accept connections" in l]
            self.assertLessEqual(len(warnings), 2, warnings)
            # Descriptors free again: it recovers by itself.
            for s in hoard:
                s.close()
            deadline = time.monotonic() + 5
            recovered = False
            while time.monotonic() < deadline and not recovered:
                try:
                    with socket.create_connection(("127.0.0.1", svc.port), timeout=2) as s:
                        recovered = answers(s)
                except OSError:
                    pass
                if not recovered:
                    time.sleep(0.1)
            self.assertTrue(recovered, "no new connection served after descriptors were freed")

    @staticmethod
    def _cpu_seconds(pid):
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class ProbesAndShutdownTest(unittest.TestCase):
    def start(self, d, extra=""):
        svc = harness.Service(PLANS, d, extra_server=extra)
        svc.__enter__()
        self.addCleanup(svc.__exit__)
        return svc

    def test_health_and_readiness_with_the_memory_store(self):
        with harness.tempdir() as d:
            svc = self.start(d)
            status, _, body = svc.request("GET", "/healthz", admin=True)
            self.assertEqual((status, json.loads(body)), (200, {"status": "ok"}))
            status, _, body = svc.request("GET", "/readyz", admin=True)
            self.assertEqual((status, json.loads(body)), (200, {"status": "ready", "store": "ok"}))
            self.assertEqual(metric(svc, "sluice_store_up"), 1)

    def test_sigterm_fails_readiness_at_once_and_serves_until_the_delay_ends(self):
        with harness.tempdir() as d:
            svc = self.start(d, "  shutdown_delay: 2s\n")
            sent = time.monotonic()
            svc.server.proc.send_signal(signal.SIGTERM)
            deadline = sent + 1.0
            while True:
                status, _, body = svc.request("GET", "/readyz", admin=True)
                if status == 503:
                    break
                self.assertLess(time.monotonic(), deadline, "readiness still 200 a second after SIGTERM")
                time.sleep(0.02)
            self.assertEqual(json.loads(body)["status"], "stopping")
            decisions = 0
            while time.monotonic() < sent + 1.6:
                self.assertEqual(svc.check({"subject": "late", "plan": "free"})[0], 200)
                decisions += 1
            self.assertGreater(decisions, 0)
            code = svc.server.proc.wait(timeout=10)
            took = time.monotonic() - sent
            self.assertEqual(code, 0)
            self.assertGreaterEqual(took, 1.9)
            self.assertLess(took, 6)

    def test_sigint_skips_the_delay(self):
        with harness.tempdir() as d:
            svc = self.start(d, "  shutdown_delay: 30s\n")
            sent = time.monotonic()
            svc.server.proc.send_signal(signal.SIGINT)
            self.assertEqual(svc.server.proc.wait(timeout=10), 0)
            self.assertLess(time.monotonic() - sent, 5)

    def test_a_second_sigterm_ends_the_delay(self):
        with harness.tempdir() as d:
            svc = self.start(d, "  shutdown_delay: 30s\n")
            sent = time.monotonic()
            svc.server.proc.send_signal(signal.SIGTERM)
            svc.server.wait_for_line("readiness now fails")
            svc.server.proc.send_signal(signal.SIGTERM)
            self.assertEqual(svc.server.proc.wait(timeout=10), 0)
            self.assertLess(time.monotonic() - sent, 5)


if __name__ == "__main__":
    unittest.main()
