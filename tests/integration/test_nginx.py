"""nginx `auth_request` in front of sluice, black-box: examples/nginx/nginx.conf itself, with its
ports replaced, run by the real nginx against the real sluice binary and a toy upstream.

The plan here is 60 requests per *hour* (not per minute as in examples/nginx/sluice.yaml): windows
are aligned to the epoch, so a 1m window could roll over in the middle of a test and hand out 60
fresh requests. Each test also starts at least a minute before the next hour boundary (see
`harness.clear_of_window_end`), so every request of a test falls into one window.
"""
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import unittest

import harness

NGINX = os.environ.get("NGINX_BIN") or shutil.which("nginx") or "/usr/sbin/nginx"
EXAMPLE = os.path.join(harness.SOURCE_DIR, "examples", "nginx", "nginx.conf")

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


def greet(method, path, headers):
    """The toy application behind nginx: greets the Sluice-Subject nginx set; GET /forbidden
    answers 403 (the application's own refusal)."""
    status = 403 if path == "/forbidden" else 200
    return status, "text/plain", f"hello {headers.get('sluice-subject', '')}\n".encode()


def nginx_config(sluice_port, nginx_port, upstream_port):
    """The example's text with its ports replaced."""
    return harness.example_with_ports(EXAMPLE, [
        ("listen 127.0.0.1:8000;", f"listen 127.0.0.1:{nginx_port};", 1),
        # The example's own toy upstream (an nginx server block); moved out of the way.
        ("listen 127.0.0.1:8001;", f"listen 127.0.0.1:{harness.free_port()};", 1),
        ("proxy_pass http://127.0.0.1:8001;", f"proxy_pass http://127.0.0.1:{upstream_port};", 2),
        ("server 127.0.0.1:8080;", f"server 127.0.0.1:{sluice_port};", 1),
    ])


class Nginx:
    """nginx in the foreground, one process, everything (logs, pid, temp files) under `prefix`."""

    def __init__(self, prefix, config_text, port):
        self.prefix = prefix
        self.port = port
        self.conf = os.path.join(prefix, "nginx.conf")
        with open(self.conf, "w") as f:
            f.write(config_text)
        self.stderr = open(os.path.join(prefix, "nginx.stderr"), "w")
        self.proc = subprocess.Popen(
            [NGINX, "-p", prefix + "/", "-c", self.conf, "-g", "daemon off; master_process off;"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.stderr)

    def logs(self):
        out = []
        for name in ("nginx.stderr", "error.log"):
            path = os.path.join(self.prefix, name)
            if os.path.exists(path):
                with open(path) as f:
                    out.append(f"--- {name}\n{f.read()}")
        return "\n".join(out)

    def wait_ready(self, timeout=10.0):
        """Returns once nginx accepts connections on its port; raises if it exits or the deadline
        passes."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"nginx exited with {self.proc.returncode}\n{self.logs()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.02)
        raise AssertionError(f"nginx did not accept connections within {timeout}s\n{self.logs()}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)  # graceful shutdown
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.stderr.close()


class NginxAuthRequestTest(unittest.TestCase):
    def setUp(self):
        harness.clear_of_window_end(WINDOW, 60)
        self.dir = harness.tempdir()
        self.addCleanup(self.dir.cleanup)

        self.upstream = harness.GatewayUpstream(greet)
        self.addCleanup(self.upstream.stop)

        # nginx auth_request passes only 401 and 403 from the subrequest: sluice denies with 403.
        self.svc = harness.Service(PLANS, self.dir.name, extra_server="  deny_status: 403\n")
        self.svc.__enter__()
        self.addCleanup(self.svc.__exit__)

        port = harness.free_port()
        prefix = os.path.join(self.dir.name, "nginx")
        os.mkdir(prefix)
        self.nginx = Nginx(prefix, nginx_config(self.svc.port, port, self.upstream.port), port)
        self.addCleanup(self.nginx.stop)
        self.nginx.wait_ready()

    def get(self, path="/", key=None, headers=None):
        """One request to nginx on a fresh connection: (status, lower-case headers, body)."""
        h = dict(headers or {})
        if key is not None:
            h["X-API-Key"] = key
        conn = http.client.HTTPConnection("127.0.0.1", self.nginx.port, timeout=10)
        try:
            conn.request("GET", path, headers=h)
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

    def test_allowed_request_reaches_the_upstream_with_subject_and_plan(self):
        status, headers, body = self.get("/orders?id=7", key="demo-key")
        self.assertEqual(status, 200, self.nginx.logs())
        self.assertEqual(body, b"hello demo-user\n")
        self.assert_limits(headers, QUOTA - 1)
        self.assertNotIn("retry-after", headers)
        _, path, seen = self.upstream.last()
        self.assertEqual(path, "/orders?id=7")
        self.assertEqual(seen["sluice-subject"], "demo-user")
        self.assertEqual(seen["sluice-plan"], "demo")

        # The key may also come as a bearer token.
        status, headers, _ = self.get(headers={"Authorization": "Bearer demo-key"})
        self.assertEqual(status, 200)
        self.assert_limits(headers, QUOTA - 2)
        self.assertEqual(self.upstream.count(), 2)

    def test_61st_request_is_429_with_retry_after_and_never_reaches_the_upstream(self):
        for i in range(QUOTA):
            status, headers, _ = self.get(key="demo-key")
            self.assertEqual(status, 200, f"request {i + 1}")
            self.assertEqual(headers["x-ratelimit-remaining"], str(QUOTA - 1 - i))
        self.assertEqual(self.upstream.count(), QUOTA)

        for _ in range(5):
            status, headers, body = self.get(key="demo-key")
            self.assertEqual(status, 429)
            self.assertEqual(headers["content-type"], "application/problem+json")
            retry_after = int(headers["retry-after"])
            self.assertTrue(1 <= retry_after <= WINDOW, retry_after)
            self.assert_limits(headers, 0)
            self.assertEqual(harness.parse_rate_limit_items(headers["ratelimit"])["hourly"]["t"], retry_after)
            problem = json.loads(body)
            self.assertEqual(problem["status"], 429)
            self.assertTrue(problem["type"].endswith("#quota-exceeded"), problem)
            self.assertNotIn("sluice-denied", headers)  # sluice's word to nginx, not the client's
        # Denied requests cost nothing and never reach the application.
        self.assertEqual(self.upstream.count(), QUOTA)

    def disabled_key(self):
        """A key of a registry subject that is disabled (created through the admin plane)."""
        auth = {"Authorization": f"Bearer {self.svc.admin_token}",
                "Content-Type": "application/json"}
        status, _, _ = self.svc.request("PUT", "/v1/subjects/blocked-user",
                                        json.dumps({"plan": "demo", "disabled": True}), auth,
                                        admin=True)
        self.assertEqual(status, 201)
        status, _, body = self.svc.request("POST", "/v1/subjects/blocked-user/keys", "{}", auth,
                                           admin=True)
        self.assertEqual(status, 201)
        return json.loads(body)["key"]

    def test_a_disabled_key_is_403_forbidden_not_a_quota_denial(self):
        key = self.disabled_key()
        for _ in range(2):
            status, headers, body = self.get(key=key)
            self.assertEqual(status, 403, self.nginx.logs())
            self.assertEqual(headers["content-type"], "application/problem+json")
            problem = json.loads(body)
            self.assertEqual((problem["status"], problem["title"]), (403, "Forbidden"))
            self.assertIn("disabled", problem["detail"])
            self.assertFalse(problem["type"].endswith("#quota-exceeded"), problem)
            # Waiting does not help: no Retry-After, and no limits (none were spent).
            for name in ("retry-after", "ratelimit", "ratelimit-policy", "x-ratelimit-remaining"):
                self.assertNotIn(name, headers)
        self.assertEqual(self.upstream.count(), 0)
        # The keys that work still work, their quota untouched.
        status, headers, _ = self.get(key="demo-key")
        self.assertEqual(status, 200)
        self.assert_limits(headers, QUOTA - 1)

    def test_missing_or_unknown_key_is_401_and_never_reaches_the_upstream(self):
        for key in (None, "wrong-key"):
            status, headers, _ = self.get(key=key)
            self.assertEqual(status, 401, key)
            self.assertEqual(headers.get("www-authenticate"), "Bearer")
            self.assertNotIn("ratelimit", headers)
        self.assertEqual(self.upstream.count(), 0)

    def test_client_cannot_choose_its_subject_or_its_cost(self):
        status, headers, _ = self.get(key="demo-key", headers={"Sluice-Subject": "someone-else",
                                                               "Sluice-Plan": "gold",
                                                               "Sluice-Cost": "0"})
        self.assertEqual(status, 200)
        # Sluice-Cost: 0 would be a free peek; nginx replaces it with the location's cost.
        self.assert_limits(headers, QUOTA - 1)
        _, _, seen = self.upstream.last()
        self.assertEqual((seen["sluice-subject"], seen["sluice-plan"]), ("demo-user", "demo"))

    def test_expensive_location_costs_five(self):
        status, headers, _ = self.get("/expensive/report", key="demo-key")
        self.assertEqual(status, 200)
        self.assert_limits(headers, QUOTA - 5)
        status, headers, _ = self.get("/cheap", key="demo-key")
        self.assertEqual(status, 200)
        self.assert_limits(headers, QUOTA - 6)

    def test_the_upstreams_own_403_passes_through_unchanged(self):
        status, headers, body = self.get("/forbidden", key="demo-key")
        self.assertEqual(status, 403)
        self.assertEqual(body, b"hello demo-user\n")
        self.assert_limits(headers, QUOTA - 1)
        self.assertEqual(self.upstream.count(), 1)

    def test_sluice_unreachable_fails_closed_with_500(self):
        self.assertEqual(self.get(key="demo-key")[0], 200)
        self.svc.server.kill()
        status, _, _ = self.get(key="demo-key")
        self.assertEqual(status, 500)  # auth_request turns the subrequest's 502 into a 500
        self.assertEqual(self.upstream.count(), 1)

    def test_authorization_subrequest_location_is_not_reachable_from_outside(self):
        status, _, _ = self.get("/_sluice", key="demo-key")
        self.assertEqual(status, 404)


if __name__ == "__main__":
    unittest.main()
