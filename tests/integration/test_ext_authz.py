"""The gateway route as Envoy's ext_authz `http_service` calls it, black-box against the binary.

Envoy keeps the client's method and puts `path_prefix` in front of the client's path, so a client's
`DELETE /orders/7?x=1` reaches sluice as `DELETE /v1/authorize/orders/7?x=1`, possibly with the
client's body (`with_request_body`). Every one of those must be decided exactly like
`GET /v1/authorize`, against one counter.

The plan allows 5 requests per *hour*: windows are aligned to the epoch, and a test starts at least
a minute before the hour ends (`harness.clear_of_window_end`), so its requests share one window.
"""
import http.client
import json
import os
import signal
import socket
import unittest

import harness

QUOTA = 5
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
  - {{ key: other-key, subject: other-user, plan: demo }}
"""
KEY = {"X-API-Key": "demo-key"}
EVERY_METHOD = "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"
BODY_LIMIT = 64 * 1024


def parse_items(value):
    """'"a";r=1;t=60' -> {'a': {'r': 1, 't': 60}}"""
    out = {}
    for item in value.split(","):
        parts = item.strip().split(";")
        out[json.loads(parts[0])] = {k: int(v) for k, v in (p.split("=") for p in parts[1:])}
    return out


class ExtAuthzTest(unittest.TestCase):
    EXTRA_SERVER = ""

    def setUp(self):
        harness.clear_of_window_end(WINDOW, 60)
        self.dir = harness.tempdir()
        self.addCleanup(self.dir.cleanup)
        self.svc = harness.Service(PLANS, self.dir.name, extra_server=self.EXTRA_SERVER)
        self.svc.__enter__()
        self.addCleanup(self.svc.__exit__)

    def call(self, method, path, headers=KEY, body=None):
        return self.svc.request(method, path, body=body, headers=dict(headers))

    def assert_allowed(self, answer, remaining, what):
        status, headers, body = answer
        self.assertEqual(status, 200, (what, body))
        self.assertEqual(headers["sluice-subject"], "demo-user", what)
        self.assertEqual(headers["sluice-plan"], "demo", what)
        self.assertEqual(parse_items(headers["ratelimit-policy"]),
                         {"hourly": {"q": QUOTA, "w": WINDOW}}, what)
        self.assertEqual(parse_items(headers["ratelimit"])["hourly"]["r"], remaining, what)
        self.assertEqual(headers["x-ratelimit-remaining"], str(remaining), what)
        self.assertNotIn("retry-after", headers, what)
        self.assertEqual(body, b"", what)

    def assert_denied(self, answer, what, head=False):
        status, headers, body = answer
        self.assertEqual(status, 429, what)
        retry_after = int(headers["retry-after"])
        self.assertTrue(1 <= retry_after <= WINDOW, (what, retry_after))
        self.assertEqual(parse_items(headers["ratelimit"])["hourly"], {"r": 0, "t": retry_after},
                         what)
        self.assertEqual(headers["x-ratelimit-remaining"], "0", what)
        self.assertEqual(headers["sluice-subject"], "demo-user", what)
        self.assertEqual(headers["content-type"], "application/problem+json", what)
        if head:
            self.assertEqual(body, b"", what)
        else:
            problem = json.loads(body)
            self.assertEqual(problem["status"], 429, what)
            self.assertTrue(problem["type"].endswith("#quota-exceeded"), (what, problem))


class EveryMethodTest(ExtAuthzTest):
    def test_every_method_below_the_prefix_is_decided_against_one_counter(self):
        allowed = [("POST", "/v1/authorize/any/path"), ("PUT", "/v1/authorize/any/path?id=7"),
                   ("DELETE", "/v1/authorize/orders/7"), ("HEAD", "/v1/authorize/any/path"),
                   ("PATCH", "/v1/authorize/")]
        for i, (method, path) in enumerate(allowed):
            self.assert_allowed(self.call(method, path), QUOTA - 1 - i, f"{method} {path}")
        # The quota is spent over five methods: every method is now denied, and stays denied.
        for method in ("OPTIONS", "GET", "POST", "PUT", "PATCH", "DELETE"):
            self.assert_denied(self.call(method, "/v1/authorize/any/path"), method)
        self.assert_denied(self.call("HEAD", "/v1/authorize/any/path"), "HEAD", head=True)
        self.assert_denied(self.call("GET", "/v1/authorize"), "GET /v1/authorize")
        # Denials consumed nothing, and another subject has its own counter.
        _, _, usage = self.svc.request("GET", "/v1/usage/demo-user?plan=demo", admin=True,
                                       headers={"Authorization": "Bearer test-admin-token"})
        self.assertEqual(json.loads(usage)["limits"][0]["used"], QUOTA)
        status, headers, _ = self.call("OPTIONS", "/v1/authorize/x", {"X-API-Key": "other-key"})
        self.assertEqual((status, headers["sluice-subject"]), (200, "other-user"))

    def test_get_on_the_bare_prefix_still_works(self):
        self.assert_allowed(self.call("GET", "/v1/authorize"), QUOTA - 1, "GET")
        self.assert_allowed(self.call("GET", "/v1/authorize?x=1"), QUOTA - 2, "GET ?x=1")

    def test_unknown_key_cost_header_and_bearer_behave_as_on_get(self):
        status, headers, _ = self.call("POST", "/v1/authorize/orders", {"X-API-Key": "wrong"})
        self.assertEqual((status, headers.get("www-authenticate")), (401, "Bearer"))
        status, _, _ = self.call("DELETE", "/v1/authorize/orders", {})
        self.assertEqual(status, 401)
        status, _, body = self.call("PUT", "/v1/authorize/orders", dict(KEY, **{"Sluice-Cost": "0"}))
        self.assertEqual(status, 400, body)
        self.assertTrue(json.loads(body)["detail"].startswith("Sluice-Cost:"), body)
        self.assert_allowed(self.call("PATCH", "/v1/authorize/orders",
                                      {"Authorization": "Bearer demo-key", "Sluice-Cost": "3"}),
                            QUOTA - 3, "PATCH cost 3")

    def test_a_path_that_only_starts_like_the_prefix_is_not_the_route(self):
        for path in ("/v1/authorizex", "/v1/authorize.json", "/v1/authorizex/y", "/v1/authoriz"):
            status, headers, _ = self.call("GET", path)
            self.assertEqual(status, 404, path)
            self.assertEqual(headers["content-type"], "application/problem+json", path)
        self.assert_allowed(self.call("GET", "/v1/authorize"), QUOTA - 1, "nothing was counted")

    def test_other_methods_are_405_naming_every_accepted_one(self):
        status, headers, _ = self.call("TRACE", "/v1/authorize/x")
        self.assertEqual(status, 405)
        self.assertEqual(headers["allow"], EVERY_METHOD)

    def test_check_keeps_its_one_method(self):
        for method in ("GET", "PUT"):
            status, headers, _ = self.call(method, "/v1/check")
            self.assertEqual((status, headers["allow"]), (405, "POST"), method)


class BodyTest(ExtAuthzTest):
    def test_a_forwarded_body_is_read_and_ignored(self):
        status, _, _ = self.call("POST", "/v1/authorize/upload",
                                 dict(KEY, **{"Content-Type": "application/json"}),
                                 body=json.dumps({"api_key": "other-key", "cost": 0}))
        self.assertEqual(status, 200)
        status, headers, _ = self.call("PUT", "/v1/authorize/upload",
                                       dict(KEY, **{"Content-Type": "application/octet-stream"}),
                                       body=b"\x00garbage" * 1000)
        self.assertEqual((status, headers["sluice-subject"]), (200, "demo-user"))
        self.assertEqual(headers["x-ratelimit-remaining"], str(QUOTA - 2))

    def test_a_chunked_body_at_the_limit_is_accepted_on_a_kept_alive_connection(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.svc.port, timeout=10)
        self.addCleanup(conn.close)
        conn.request("POST", "/v1/authorize/upload", body=iter([b"a" * BODY_LIMIT]),
                     headers=dict(KEY), encode_chunked=True)
        res = conn.getresponse()
        res.read()
        self.assertEqual(res.status, 200)
        conn.request("DELETE", "/v1/authorize/upload", headers=dict(KEY))
        res = conn.getresponse()
        res.read()
        self.assertEqual((res.status, res.getheader("X-RateLimit-Remaining")), (200, str(QUOTA - 2)))

    def test_a_body_over_the_limit_is_413_and_counts_nothing(self):
        status, _, body = self.call("POST", "/v1/authorize/upload", body=b"a" * (BODY_LIMIT + 1))
        self.assertEqual(status, 413, body)
        self.assertEqual(json.loads(body)["status"], 413)
        self.assert_allowed(self.call("GET", "/v1/authorize"), QUOTA - 1, "after the 413")


class HeadTest(ExtAuthzTest):
    def exchange(self, data):
        """Sends raw bytes, then reads until sluice closes the connection."""
        with socket.create_connection(("127.0.0.1", self.svc.port), timeout=10) as s:
            s.sendall(data)
            out = b""
            while chunk := s.recv(65536):
                out += chunk
            return out

    def test_head_has_the_headers_of_get_and_no_body(self):
        # Pipelined on one connection: a body after HEAD's headers would be read as the start
        # of the next answer.
        reply = self.exchange(
            b"HEAD /v1/authorize/any HTTP/1.1\r\nHost: x\r\nX-API-Key: demo-key\r\n\r\n"
            b"HEAD /v1/authorize/any HTTP/1.1\r\nHost: x\r\nX-API-Key: wrong\r\n\r\n"
            b"GET /v1/authorize HTTP/1.1\r\nHost: x\r\nX-API-Key: wrong\r\nConnection: close\r\n\r\n")
        head_ok, rest = reply.split(b"\r\n\r\n", 1)
        self.assertTrue(head_ok.startswith(b"HTTP/1.1 200 OK\r\n"), head_ok)
        self.assertIn(b"\r\nSluice-Subject: demo-user\r\n", head_ok)
        self.assertIn(b"\r\nRateLimit: ", head_ok)
        head_401, rest = rest.split(b"\r\n\r\n", 1)
        self.assertTrue(head_401.startswith(b"HTTP/1.1 401 "), (head_401, rest))
        self.assertIn(b"\r\nWWW-Authenticate: Bearer\r\n", head_401)
        get_401, body = rest.split(b"\r\n\r\n", 1)
        self.assertTrue(get_401.startswith(b"HTTP/1.1 401 "), get_401)
        # HEAD announces the length GET's body has, and sends none of it.
        length = [line for line in get_401.split(b"\r\n") if line.lower().startswith(b"content-length:")]
        self.assertEqual(len(length), 1, get_401)
        self.assertIn(length[0], head_401.split(b"\r\n"))
        self.assertEqual(len(body), int(length[0].split(b":")[1]))
        self.assertEqual(json.loads(body)["status"], 401)


class CustomPrefixTest(ExtAuthzTest):
    EXTRA_SERVER = "  authorize_prefix: /ext/authz\n"

    def test_the_configured_prefix_is_the_route_and_the_default_is_gone(self):
        self.assert_allowed(self.call("POST", "/ext/authz/orders/7"), QUOTA - 1, "below")
        self.assert_allowed(self.call("GET", "/ext/authz"), QUOTA - 2, "the prefix itself")
        for path in ("/v1/authorize", "/v1/authorize/orders", "/ext/authzx", "/ext"):
            self.assertEqual(self.call("GET", path)[0], 404, path)
        self.assertEqual(self.call("POST", "/v1/check", body="{}")[0], 400)

    def test_a_reload_moves_the_route(self):
        harness.write_config(self.dir.name,
                             self.svc.server_yaml.replace("/ext/authz", "/gw") + PLANS)
        self.svc.server.proc.send_signal(signal.SIGHUP)
        self.svc.server.wait_for_line("configuration reloaded")
        self.assert_allowed(self.call("HEAD", "/gw/orders"), QUOTA - 1, "new prefix")
        self.assertEqual(self.call("GET", "/ext/authz/orders")[0], 404)


class CheckConfigTest(unittest.TestCase):
    def setUp(self):
        self.dir = harness.tempdir()
        self.addCleanup(self.dir.cleanup)

    def check_config(self, prefix):
        path = harness.write_config(self.dir.name,
                                    f"server:\n  authorize_prefix: {json.dumps(prefix)}\n" + PLANS)
        return harness.run("check-config", "-c", path)

    def test_bad_prefixes_are_refused_naming_the_field(self):
        for prefix in ("authz", "/authz/", "/", "/a?b=1", "/a/../b", "/a//b", "/v1/check", "/v1",
                       "/v1/check/deeper", "/a b", "/" + "a" * 200):
            result = self.check_config(prefix)
            self.assertEqual(result.returncode, 78, (prefix, result.stdout, result.stderr))
            self.assertIn("server.authorize_prefix:", result.stderr, prefix)

    def test_a_good_prefix_passes(self):
        result = self.check_config("/ext_authz/v1")
        self.assertEqual(result.returncode, 0, result.stderr)


if __name__ == "__main__":
    unittest.main()
