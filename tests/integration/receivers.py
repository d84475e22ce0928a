"""Alert receivers for the integration tests: an HTTP receiver (webhooks, Slack) whose answers are
scripted per path, an SMTP receiver, and an independent Standard Webhooks signature check."""
import base64
import hashlib
import hmac
import http.server
import json
import socketserver
import threading
import time

import harness


def verify_webhook(secret, headers, body):
    """Standard Webhooks 1.0, written from the spec (not from sluice's code): the key is the
    base64 text after "whsec_"; the signed content is "<webhook-id>.<webhook-timestamp>.<body>";
    webhook-signature holds space-separated "v1,<base64 HMAC-SHA256>" entries."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f'{headers["webhook-id"]}.{headers["webhook-timestamp"]}.'.encode() + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    for entry in headers.get("webhook-signature", "").split():
        version, _, sig = entry.partition(",")
        if version == "v1" and hmac.compare_digest(sig, expected):
            return True
    return False


class Waitable:
    """A list of records that a test can wait on with a deadline."""

    def __init__(self):
        self.items = []
        self.cond = threading.Condition()

    def add(self, item):
        with self.cond:
            self.items.append(item)
            self.cond.notify_all()

    def wait_for(self, predicate, timeout, what="records"):
        deadline = time.monotonic() + timeout
        with self.cond:
            while not predicate(self.items):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no {what} within {timeout}s; have {self.items!r}")
                self.cond.wait(left)
            return list(self.items)

    def snapshot(self):
        with self.cond:
            return list(self.items)


class HttpReceiver:
    """Records every POST as {path, headers (lower-case), body (bytes), at (monotonic)}.

    script(path, [(status, headers), ...]) sets the next answers for `path` (then 200);
    a status of "hang" accepts the request and never answers until stop() or unhang()."""

    def __init__(self):
        self.requests = Waitable()
        self._scripts = {}
        self._lock = threading.Lock()
        self._release = threading.Event()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                length = int(self.headers.get("content-length", "0"))
                body = self.rfile.read(length)
                receiver.requests.add({"path": self.path,
                                       "headers": {k.lower(): v for k, v in self.headers.items()},
                                       "body": body, "at": time.monotonic()})
                status, headers = receiver._next(self.path)
                if status == "hang":
                    receiver._release.wait(60)
                    self.close_connection = True
                    return
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self._stop = harness.serve_in_background(self.server)

    def url(self, path):
        return f"http://127.0.0.1:{self.port}{path}"

    def script(self, path, answers):
        with self._lock:
            self._scripts[path] = list(answers)

    def _next(self, path):
        with self._lock:
            answers = self._scripts.get(path)
            if answers:
                answer = answers.pop(0)
                return (answer, {}) if isinstance(answer, (int, str)) else answer
        return 200, {}

    def on(self, path):
        return [r for r in self.requests.snapshot() if r["path"] == path]

    def wait_for(self, path, count, timeout=15):
        return [r for r in self.requests.wait_for(
            lambda items: len([r for r in items if r["path"] == path]) >= count, timeout,
            f"{count} requests on {path}") if r["path"] == path]

    def unhang(self):
        self._release.set()

    def stop(self):
        self._release.set()
        self._stop()


class SmtpReceiver:
    """A minimal SMTP server (RFC 5321 subset: EHLO/HELO, MAIL, RCPT, DATA, RSET, NOOP, QUIT) that
    records {mail_from, rcpt_to, data (str, dot-unstuffed)}."""

    def __init__(self):
        self.messages = Waitable()
        receiver = self

        class Handler(socketserver.StreamRequestHandler):
            def reply(self, line):
                self.wfile.write((line + "\r\n").encode())
                self.wfile.flush()

            def handle(self):
                self.reply("220 sluice-test ESMTP")
                mail_from, rcpt = None, []
                while True:
                    raw = self.rfile.readline()
                    if not raw:
                        return
                    line = raw.decode("utf-8", "replace").rstrip("\r\n")
                    verb = line[:4].upper()
                    if verb in ("EHLO", "HELO"):
                        self.reply("250-sluice-test")
                        self.reply("250 8BITMIME")
                    elif verb == "MAIL":
                        mail_from, rcpt = line.split(":", 1)[1].strip(), []
                        self.reply("250 OK")
                    elif verb == "RCPT":
                        rcpt.append(line.split(":", 1)[1].strip())
                        self.reply("250 OK")
                    elif verb == "DATA":
                        self.reply("354 end with .")
                        lines = []
                        while True:
                            data_line = self.rfile.readline().decode("utf-8", "replace")
                            if data_line in (".\r\n", ".\n", ""):
                                break
                            lines.append(data_line[1:] if data_line.startswith("..") else data_line)
                        receiver.messages.add({"mail_from": mail_from, "rcpt_to": rcpt,
                                               "data": "".join(lines)})
                        self.reply("250 queued")
                    elif verb == "QUIT":
                        self.reply("221 bye")
                        return
                    else:  # RSET, NOOP and anything else
                        self.reply("250 OK")

        class Server(socketserver.ThreadingTCPServer):
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self._stop = harness.serve_in_background(self.server)

    def stop(self):
        self._stop()


def event_of(request):
    return json.loads(request["body"])
