"""Helpers shared by the integration tests: locate the binary, run it, wait on its output."""
import os
import subprocess
import tempfile
import time

SLUICE_BIN = os.environ.get("SLUICE_BIN", "sluice")
SOURCE_DIR = os.environ.get("SLUICE_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))


def run(*args, timeout=30):
    """Runs sluice to completion and returns the CompletedProcess (text mode)."""
    return subprocess.run([SLUICE_BIN, *args], capture_output=True, text=True, timeout=timeout)


def write_config(directory, text, name="sluice.yaml"):
    path = os.path.join(directory, name)
    with open(path, "w") as f:
        f.write(text)
    return path


class Server:
    """A `sluice serve` process whose stderr log lines can be awaited.

    A reader thread collects stderr lines as they arrive, so waiting never depends on pipe
    buffering (select() on a buffered text pipe misses lines already read ahead)."""

    def __init__(self, config_path, *extra, preexec_fn=None, env=None):
        import threading
        self.proc = subprocess.Popen([SLUICE_BIN, "serve", "-c", config_path, *extra],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     preexec_fn=preexec_fn, env=env)
        self.lines = []
        self._cond = threading.Condition()
        self._eof = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stderr:
            with self._cond:
                self.lines.append(line)
                self._cond.notify_all()
        with self._cond:
            self._eof = True
            self._cond.notify_all()

    def wait_for_line(self, needle, timeout=10.0):
        """Returns the first stderr line containing `needle`; raises after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for line in self.lines:
                    if needle in line:
                        return line
                left = deadline - time.monotonic()
                if left <= 0 or self._eof:
                    break
                self._cond.wait(left)
        raise AssertionError(f"no log line with {needle!r} within {timeout}s; got {self.lines}")

    def stop(self, sig, timeout=10.0):
        """Sends `sig`, waits for the exit and for the rest of stderr; returns the exit code."""
        self.proc.send_signal(sig)
        code = self.proc.wait(timeout=timeout)
        self._reader.join(timeout)
        self._close_stderr()
        return code

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(5)
        self._close_stderr()

    def _close_stderr(self):
        if not self._reader.is_alive():
            self.proc.stderr.close()


def serve_in_background(server):
    """Serves `server` (a socketserver server already bound, e.g. to 127.0.0.1 port 0) from a daemon
    thread, each connection on its own daemon thread. Returns a function that stops serving and
    closes the listening socket."""
    import threading
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()

    def stop():
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
    return stop


def clear_of_window_end(window, need):
    """Fixed windows are aligned to the Unix epoch (docs/semantics.md), so a test that counts requests in
    one window must not straddle its end. If the current `window`-second window ends within `need`
    seconds, this sleeps until the next one has begun; the test then has at least `need` seconds.
    (A 60 s window guards UTC days too: midnight is also a minute boundary.)"""
    left = window - time.time() % window
    if left < need:
        time.sleep(left + 0.05)


def tempdir():
    return tempfile.TemporaryDirectory(prefix="sluice-it-")


_handed_out = set()


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on right now and that this process has not
    handed out before (the kernel may offer the same free port to two calls in a row, e.g. for a
    server's listen and admin_listen)."""
    import socket
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port
    raise AssertionError("no fresh free port in 100 tries")


class Service:
    """`sluice serve` on free loopback ports, with a config built from `body` (YAML without the
    server section). Use as a context manager."""

    def __init__(self, body, directory, admin_token="test-admin-token", extra_server="",
                 args=()):
        self.args = tuple(args)
        self.port = free_port()
        self.admin_port = free_port()
        self.admin_token = admin_token
        self.dir = directory
        self.server_yaml = (
            "server:\n"
            f'  listen: "127.0.0.1:{self.port}"\n'
            f'  admin_listen: "127.0.0.1:{self.admin_port}"\n'
            f'  admin_token: "{admin_token}"\n'
            "  threads: 2\n" + extra_server)
        self.config_path = write_config(directory, self.server_yaml + body)
        self.server = None

    def rewrite(self, body, extra_server=None):
        """Replaces the config file's plans/keys part (for reload tests)."""
        server_yaml = self.server_yaml if extra_server is None else self.server_yaml + extra_server
        write_config(self.dir, server_yaml + body)

    def __enter__(self):
        self.server = Server(self.config_path, *self.args)
        self.server.wait_for_line("sluice started")
        return self

    def __exit__(self, *exc):
        self.server.kill()

    def request(self, method, path, body=None, headers=None, admin=False, timeout=10):
        """One request on a fresh connection; returns (status, headers dict (lower-case), body)."""
        import http.client
        conn = http.client.HTTPConnection("127.0.0.1", self.admin_port if admin else self.port,
                                          timeout=timeout)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            res = conn.getresponse()
            return res.status, {k.lower(): v for k, v in res.getheaders()}, res.read()
        finally:
            conn.close()

    def check(self, payload):
        import json
        status, headers, body = self.request("POST", "/v1/check", json.dumps(payload),
                                             {"Content-Type": "application/json"})
        return status, headers, json.loads(body) if body else None


def started_service(test, yaml, warm_plan=None):
    """A Service on `yaml` in a directory of its own, started for the unittest.TestCase `test`
    (stopped, and its directory removed, at the test's cleanup). With `warm_plan`, waits (at most
    10 s) until a peek of that plan is answered without degradation: the store is reached."""
    d = tempdir()
    test.addCleanup(d.cleanup)
    svc = Service(yaml, d.name)
    svc.__enter__()
    test.addCleanup(svc.__exit__)
    deadline = time.monotonic() + 10
    while warm_plan and svc.check({"subject": "warm", "plan": warm_plan, "cost": 0})[2]["degraded"]:
        test.assertLess(time.monotonic(), deadline, "sluice never reached its store")
    return svc


def parse_rate_limit_items(value):
    """A RateLimit or RateLimit-Policy value as a dict:
    '"a";q=1;w=60, "b";q=2' -> {'a': {'q': 1, 'w': 60}, 'b': {'q': 2}}"""
    import json
    out = {}
    for item in value.split(","):
        parts = item.strip().split(";")
        out[json.loads(parts[0])] = {k: int(v) for k, v in (p.split("=") for p in parts[1:])}
    return out


def example_with_ports(path, replacements):
    """The text of the shipped example at `path` with each (old, new, count) replaced; fails if the
    example no longer has exactly `count` places `old`, so a gateway test always runs the file
    users get."""
    with open(path) as f:
        text = f.read()
    for old, new, count in replacements:
        if text.count(old) != count:
            raise AssertionError(f"{path}: expected {count} x {old!r}, found {text.count(old)}")
        text = text.replace(old, new)
    return text


class GatewayUpstream:
    """A toy application behind a gateway on a free loopback port: records every request as
    (method, path, {lower-case header: value}) and answers with `answer(method, path, headers)`,
    which returns (status, content type, body bytes). Bodies of requests are read and dropped."""

    def __init__(self, answer):
        import http.server
        import threading
        self.requests = []
        self.lock = threading.Lock()
        upstream = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def handle_one(self):
                seen = {k.lower(): v for k, v in self.headers.items()}
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                with upstream.lock:
                    upstream.requests.append((self.command, self.path, seen))
                status, content_type, body = answer(self.command, self.path, seen)
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = handle_one

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self._stop = serve_in_background(self.server)

    def count(self):
        with self.lock:
            return len(self.requests)

    def last(self):
        with self.lock:
            return self.requests[-1]

    def stop(self):
        self._stop()


def burst(ports, n, path, payload):
    """`n` clients that each send one POST `path` with the JSON `payload` (round-robin over `ports`)
    at once: every connection is opened first, then all requests are written together. Returns
    the decoded JSON bodies, in client order."""
    import asyncio
    import json

    body = json.dumps(payload).encode()
    request = (f"POST {path} HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body

    async def all_at_once():
        go = asyncio.Event()
        opened = asyncio.Semaphore(0)

        async def one(port):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            opened.release()
            await go.wait()
            writer.write(request)
            await writer.drain()
            data = await asyncio.wait_for(reader.read(), 30)
            writer.close()
            return json.loads(data.partition(b"\r\n\r\n")[2])

        tasks = [asyncio.create_task(one(ports[i % len(ports)])) for i in range(n)]
        for _ in range(n):
            await asyncio.wait_for(opened.acquire(), 30)
        go.set()
        return await asyncio.gather(*tasks)

    return asyncio.run(all_at_once())
