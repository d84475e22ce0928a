"""Caddy `forward_auth` in front of sluice, black-box: examples/caddy/Caddyfile itself, with its
ports replaced, run by the real Caddy against the real sluice binary and a toy upstream.

Caddy must be installed (`scripts/install-deps` installs Debian's `caddy`); without it this test
fails, it is never skipped. Caddy runs with HOME and the XDG directories in the test's temporary
directory, without its admin endpoint and without automatic HTTPS (both are off in the example),
so it writes nothing outside that directory and several runs can share the machine.

The plan is 60 requests per *hour* (not per minute as in examples/caddy/sluice.yaml), and each
test starts at least a minute before the hour ends (`harness.clear_of_window_end`), so every
request of a test falls into one window.
"""
import http.client
import json
import os
import shutil
import subprocess
import time
import socket
import unittest

import harness

CADDY = os.environ.get("CADDY_BIN") or shutil.which("caddy") or "/usr/bin/caddy"
EXAMPLE = os.path.join(harness.SOURCE_DIR, "examples", "caddy", "Caddyfile")

QUOTA = 60
WINDOW = 3600
PLANS = f"""
store:
  type: memory
plans:
  demo:
    limits:
      - {{ name: hourly, quota: {QUOTA}, window: 1h }}
keys:
  - {{ key: demo-key, subject: demo-user, plan: demo }}
"""


def echo_headers(method, path, headers):
    """The toy application behind Caddy: answers with the request headers it got, as JSON."""
    return 200, "application/json", json.dumps(headers).encode()


def caddyfile(sluice_port, caddy_port, upstream_port):
    """The example's text with its ports replaced."""
    return harness.example_with_ports(EXAMPLE, [
        ("http://127.0.0.1:8000 {", f"http://127.0.0.1:{caddy_port} {{", 1),
        # The example's own toy upstream (a Caddy site); moved out of the way.
        ("http://127.0.0.1:8001 {", f"http://127.0.0.1:{harness.free_port()} {{", 1),
        ("reverse_proxy 127.0.0.1:8001 {", f"reverse_proxy 127.0.0.1:{upstream_port} {{", 1),
        ("forward_auth 127.0.0.1:8080 {", f"forward_auth 127.0.0.1:{sluice_port} {{", 1),
    ])


class Caddy:
    """`caddy run` in the foreground; its HOME, config and data directories under `home`."""

    def __init__(self, home, config_text, port):
        if not os.access(CADDY, os.X_OK):
            raise AssertionError(f"no caddy at {CADDY}: scripts/install-deps installs Debian's "
                                 "caddy package (or set CADDY_BIN)")
        self.home = home
        self.port = port
        self.config = os.path.join(home, "Caddyfile")
        with open(self.config, "w") as f:
            f.write(config_text)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home,
               "XDG_CONFIG_HOME": os.path.join(home, "config"),
               "XDG_DATA_HOME": os.path.join(home, "data")}
        self.log_path = os.path.join(home, "caddy.log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [CADDY, "run", "--config", self.config, "--adapter", "caddyfile"],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT, env=env,
            cwd=home)

    def logs(self):
        with open(self.log_path) as f:
            return f.read()

    def wait_ready(self, timeout=15.0):
        """Returns once Caddy accepts connections on its port; raises if it exits or the
        deadline passes."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"caddy exited with {self.proc.returncode}\n{self.logs()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.02)
        raise AssertionError(f"caddy did not accept connections within {timeout}s\n{self.logs()}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


class CaddyForwardAuthTest(unittest.TestCase):
    def setUp(self):
        harness.clear_of_window_end(WINDOW, 60)
        self.dir = harness.tempdir()
        self.addCleanup(self.dir.cleanup)

        self.upstream = harness.GatewayUpstream(echo_headers)
        self.addCleanup(self.upstream.stop)

        self.svc = harness.Service(PLANS, self.dir.name)  # deny_status stays 429
        self.svc.__enter__()
        self.addCleanup(self.svc.__exit__)

        port = harness.free_port()
        home = os.path.join(self.dir.name, "caddy")
        os.mkdir(home)
        self.caddy = Caddy(home, caddyfile(self.svc.port, port, self.upstream.port), port)
        self.addCleanup(self.caddy.stop)
        self.caddy.wait_ready()

    def send(self, method="GET", path="/", key=None, headers=None, body=None):
        """One request to Caddy on a fresh connection: (status, lower-case headers, body)."""
        h = dict(headers or {})
        if key is not None:
            h["X-API-Key"] = key
        conn = http.client.HTTPConnection("127.0.0.1", self.caddy.port, timeout=10)
        try:
            conn.request(method, path, body=body, headers=h)
            res = conn.getresponse()
            return res.status, {k.lower(): v for k, v in res.getheaders()}, res.read()
        finally:
            conn.close()

    def assert_limits(self, headers, remaining):
        self.assertEqual(harness.parse_rate_limit_items(headers["ratelimit-policy"]),
                         {"hourly": {"q": QUOTA, "w": WINDOW}})
        state = harness.parse_rate_limit_items(headers["ratelimit"])["hourly"]
        self.assertEqual(state["r"], remaining)
        self.assertTrue(1 <= state["t"] <= WINDOW, state)
        self.assertEqual(headers["x-ratelimit-limit"], str(QUOTA))
        self.assertEqual(headers["x-ratelimit-remaining"], str(remaining))
        self.assertEqual(headers["x-ratelimit-reset"], str(state["t"]))

    def test_allowed_request_reaches_the_upstream_with_subject_and_plan_but_not_the_key(self):
        status, headers, body = self.send("GET", "/orders?id=7", key="demo-key")
        self.assertEqual(status, 200, self.caddy.logs())
        self.assert_limits(headers, QUOTA - 1)  # handed back to the client
        self.assertNotIn("retry-after", headers)
        method, path, seen = self.upstream.last()
        self.assertEqual((method, path), ("GET", "/orders?id=7"))
        self.assertEqual(json.loads(body), seen)
        self.assertEqual(seen["sluice-subject"], "demo-user")
        self.assertEqual(seen["sluice-plan"], "demo")
        # sluice's key and the limits stay with Caddy; the rest of the request goes on.
        for name in ("x-api-key", "authorization", "sluice-cost", "ratelimit", "ratelimit-policy",
                     "x-ratelimit-remaining"):
            self.assertNotIn(name, seen)

        # The key may come as a bearer token; a POST keeps its method and body upstream.
        status, headers, _ = self.send("POST", "/orders", body=b'{"n":1}',
                                       headers={"Authorization": "Bearer demo-key",
                                                "Content-Type": "application/json"})
        self.assertEqual(status, 200)
        self.assert_limits(headers, QUOTA - 2)
        method, _, seen = self.upstream.last()
        self.assertEqual((method, seen["content-length"]), ("POST", "7"))
        self.assertNotIn("authorization", seen)
        self.assertEqual(self.upstream.count(), 2)

    def test_61st_request_is_429_with_retry_after_and_never_reaches_the_upstream(self):
        for i in range(QUOTA):
            status, headers, _ = self.send(key="demo-key")
            self.assertEqual(status, 200, f"request {i + 1}")
            self.assertEqual(headers["x-ratelimit-remaining"], str(QUOTA - 1 - i))
        self.assertEqual(self.upstream.count(), QUOTA)

        for method in ("GET", "POST", "DELETE"):
            status, headers, body = self.send(method, "/orders", key="demo-key")
            self.assertEqual(status, 429, method)
            self.assertEqual(headers["content-type"], "application/problem+json")
            retry_after = int(headers["retry-after"])
            self.assertTrue(1 <= retry_after <= WINDOW, retry_after)
            self.assert_limits(headers, 0)
            self.assertEqual(harness.parse_rate_limit_items(headers["ratelimit"])["hourly"]["t"], retry_after)
            problem = json.loads(body)
            self.assertEqual(problem["status"], 429)
            self.assertTrue(problem["type"].endswith("#quota-exceeded"), problem)
        # Denied requests cost nothing and never reach the application.
        self.assertEqual(self.upstream.count(), QUOTA)

    def test_missing_or_unknown_key_is_401_and_never_reaches_the_upstream(self):
        for key in (None, "wrong-key"):
            status, headers, body = self.send(key=key)
            self.assertEqual(status, 401, (key, body))
            self.assertEqual(headers.get("www-authenticate"), "Bearer")
            self.assertEqual(json.loads(body)["status"], 401)
            self.assertNotIn("ratelimit", headers)
        self.assertEqual(self.upstream.count(), 0)

    def test_client_cannot_choose_its_subject_or_its_cost(self):
        status, headers, _ = self.send(key="demo-key", headers={"Sluice-Subject": "someone-else",
                                                                "Sluice-Plan": "gold",
                                                                "Sluice-Cost": "0"})
        self.assertEqual(status, 200, self.caddy.logs())
        # Sluice-Cost: 0 would be a free peek; Caddy replaces it with the route's cost.
        self.assert_limits(headers, QUOTA - 1)
        _, _, seen = self.upstream.last()
        self.assertEqual((seen["sluice-subject"], seen["sluice-plan"]), ("demo-user", "demo"))

    def test_expensive_route_costs_five(self):
        status, headers, _ = self.send("GET", "/expensive/report", key="demo-key")
        self.assertEqual(status, 200)
        self.assert_limits(headers, QUOTA - 5)
        status, headers, _ = self.send("GET", "/cheap", key="demo-key")
        self.assertEqual(status, 200)
        self.assert_limits(headers, QUOTA - 6)

    def test_sluice_unreachable_fails_closed(self):
        self.assertEqual(self.send(key="demo-key")[0], 200)
        self.svc.server.kill()
        status, _, _ = self.send(key="demo-key")
        self.assertEqual(status, 502)
        self.assertEqual(self.upstream.count(), 1)


if __name__ == "__main__":
    unittest.main()
