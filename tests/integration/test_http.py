"""The HTTP service, black-box: every endpoint and status code of docs/http.md against the real binary."""
import concurrent.futures
import datetime
import json
import os
import signal
import socket
import time
import unittest
import zoneinfo

import harness

PLANS = """
plans:
  free:
    limits:
      - { name: per_minute, quota: 60, window: 1m }
      - { name: daily, quota: 5000, window: day, alert_at: [80, 100] }
  tiny:
    timezone: Asia/Ho_Chi_Minh
    limits:
      - { name: daily, quota: 2, window: day }
  anon:
    limits:
      - { name: per_minute, quota: 3, window: 1m }
keys:
  - { key: key-free, subject: user-1, plan: free }
  - { key: key-tiny, subject: user-2, plan: tiny }
  - { key_sha256: 01bc727c90fb6f9cf915487e84abeb3ba1339efc6ba94f928583977a76bab05e, subject: user-3, plan: tiny }
"""

ANON = '  anonymous_plan: anon\n  trusted_proxies: ["127.0.0.2/32"]\n'


class HttpTestCase(unittest.TestCase):
    extra_server = ""

    def setUp(self):
        self.dir = harness.tempdir()
        self.addCleanup(self.dir.cleanup)
        self.svc = harness.Service(PLANS, self.dir.name, extra_server=self.extra_server)
        self.svc.__enter__()
        self.addCleanup(self.svc.__exit__)
        # The tests count requests in the 1m windows: none may straddle a minute boundary.
        harness.clear_of_window_end(60, 3)

    def authorize(self, key=None, headers=None, **kw):
        h = dict(headers or {})
        if key is not None:
            h["X-API-Key"] = key
        return self.svc.request("GET", "/v1/authorize", headers=h, **kw)


def parse_policy(value):
    """'"a";q=1;w=60, "b";q=2;w=86400' -> {'a': {'q': 1, 'w': 60}, ...}"""
    out = {}
    for item in value.split(","):
        parts = item.strip().split(";")
        name = json.loads(parts[0])
        out[name] = {k: int(v) for k, v in (p.split("=") for p in parts[1:])}
    return out


class CheckTest(HttpTestCase):
    def test_check_answers_the_decision_with_every_field(self):
        status, headers, body = self.svc.check({"subject": "user-42", "plan": "free", "cost": 1})
        self.assertEqual(status, 200)
        self.assertEqual(headers["content-type"], "application/json")
        self.assertEqual(body["allowed"], True)
        self.assertEqual(body["subject"], "user-42")
        self.assertEqual(body["plan"], "free")
        self.assertEqual(body["degraded"], False)
        self.assertEqual(body["retry_after"], 0)
        self.assertEqual(body["violated"], [])
        names = [l["name"] for l in body["limits"]]
        self.assertEqual(names, ["per_minute", "daily"])
        minute = body["limits"][0]
        self.assertEqual((minute["quota"], minute["used"], minute["remaining"], minute["window"]),
                         (60, 1, 59, "1m"))
        self.assertTrue(1 <= minute["reset_after"] <= 60)

    def test_rate_limit_headers_match_the_decision(self):
        status, headers, body = self.svc.check({"subject": "user-42", "plan": "free", "cost": 3})
        policy = parse_policy(headers["ratelimit-policy"])
        self.assertEqual(policy["per_minute"], {"q": 60, "w": 60})
        self.assertEqual(policy["daily"]["q"], 5000)
        self.assertIn(policy["daily"]["w"], (82800, 86400, 90000))
        state = parse_policy(headers["ratelimit"])
        for limit in body["limits"]:
            self.assertEqual(state[limit["name"]], {"r": limit["remaining"], "t": limit["reset_after"]})
        # X-RateLimit-* describe the limit closest to exhaustion: per_minute (57 left).
        self.assertEqual(headers["x-ratelimit-limit"], "60")
        self.assertEqual(headers["x-ratelimit-remaining"], "57")
        self.assertEqual(headers["x-ratelimit-reset"], str(body["limits"][0]["reset_after"]))

    def test_check_by_api_key_resolves_subject_and_plan(self):
        status, _, body = self.svc.check({"api_key": "key-free"})
        self.assertEqual(status, 200)
        self.assertEqual((body["subject"], body["plan"]), ("user-1", "free"))

    def test_unknown_api_key_is_401_problem(self):
        status, headers, body = self.svc.check({"api_key": "nope"})
        self.assertEqual(status, 401)
        self.assertEqual(headers["content-type"], "application/problem+json")
        self.assertEqual(body["status"], 401)

    def test_malformed_input_is_400_naming_the_field(self):
        cases = [
            ("{not json", "body:"),
            (json.dumps({"subject": "a b", "plan": "free"}), "subject:"),
            (json.dumps({"subject": "a", "plan": "free", "cost": 1.5}), "cost:"),
            (json.dumps({"subject": "a", "plan": "free", "cost": 2000000}), "cost:"),
            (json.dumps({"subject": "a", "plan": "gold"}), "plan:"),
            (json.dumps({"subject": "a", "plan": "free", "colour": 1}), "colour:"),
        ]
        for payload, field in cases:
            status, headers, body = self.svc.request("POST", "/v1/check", payload)
            self.assertEqual(status, 400, payload)
            self.assertEqual(headers["content-type"], "application/problem+json")
            self.assertTrue(json.loads(body)["detail"].startswith(field), (payload, body))

    def test_a_number_beyond_any_double_is_400_naming_its_field_not_bad_json(self):
        for number in ("1e400", "-1e400", "9" * 60_000):
            for payload, detail in (
                    ('{"subject":"a","plan":"free","cost":%s}',
                     "cost: number out of range (must be an integer from 0 to 1000000)"),
                    ('{"api_key":"key-free","cost":%s}',
                     "cost: number out of range (must be an integer from 0 to 1000000)"),
                    ('{"subject":%s,"plan":"free"}', "subject: number out of range"),
                    ('{"subject":"a","plan":%s}', "plan: number out of range"),
                    ('{"api_key":%s}', "api_key: number out of range")):
                with self.subTest(payload=payload, number=number[:8]):
                    status, headers, body = self.svc.request("POST", "/v1/check",
                                                             payload % number)
                    self.assertEqual(status, 400)
                    self.assertEqual(headers["content-type"], "application/problem+json")
                    self.assertEqual(json.loads(body)["detail"], detail)

    def test_wrong_method_is_405_with_allow(self):
        status, headers, _ = self.svc.request("GET", "/v1/check")
        self.assertEqual(status, 405)
        self.assertEqual(headers["allow"], "POST")
        # The gateway route takes every method a gateway forwards (Envoy ext_authz), not TRACE.
        status, headers, _ = self.svc.request("TRACE", "/v1/authorize")
        self.assertEqual(status, 405)
        self.assertEqual(headers["allow"], "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS")

    def test_unknown_path_is_404(self):
        status, headers, _ = self.svc.request("GET", "/v2/nothing")
        self.assertEqual(status, 404)
        self.assertEqual(headers["content-type"], "application/problem+json")

    def test_cost_zero_peeks(self):
        self.svc.check({"subject": "u", "plan": "free", "cost": 5})
        _, _, body = self.svc.check({"subject": "u", "plan": "free", "cost": 0})
        self.assertEqual(body["limits"][0]["used"], 5)

    def test_two_hundred_concurrent_requests_admit_exactly_sixty(self):
        def one(_):
            return self.svc.check({"subject": "hot", "plan": "free"})[2]["allowed"]
        with concurrent.futures.ThreadPoolExecutor(max_workers=50) as pool:
            results = list(pool.map(one, range(200)))
        self.assertEqual(results.count(True), 60)
        self.assertEqual(results.count(False), 140)


class AuthorizeTest(HttpTestCase):
    extra_server = ANON

    def test_allowed_request_names_subject_and_plan_for_the_upstream(self):
        status, headers, _ = self.authorize("key-free")
        self.assertEqual(status, 200)
        self.assertEqual(headers["sluice-subject"], "user-1")
        self.assertEqual(headers["sluice-plan"], "free")
        self.assertIn("ratelimit-policy", headers)

    def test_bearer_token_and_hashed_keys_work(self):
        status, headers, _ = self.authorize(headers={"Authorization": "Bearer key-free"})
        self.assertEqual((status, headers["sluice-subject"]), (200, "user-1"))
        status, headers, _ = self.authorize("demo-hashed-key")
        self.assertEqual((status, headers["sluice-subject"]), (200, "user-3"))

    def test_unknown_key_is_401(self):
        status, _, _ = self.authorize("wrong")
        self.assertEqual(status, 401)

    def test_daily_quota_denies_with_retry_after_until_the_plans_midnight(self):
        self.assertEqual(self.authorize("key-tiny", headers={"Sluice-Cost": "2"})[0], 200)
        status, headers, body = self.authorize("key-tiny")
        now = datetime.datetime.now(zoneinfo.ZoneInfo("Asia/Ho_Chi_Minh"))
        midnight = (now + datetime.timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
        expected = (midnight - now).total_seconds()
        self.assertEqual(status, 429)
        self.assertAlmostEqual(int(headers["retry-after"]), expected, delta=2)
        problem = json.loads(body)
        self.assertEqual(headers["content-type"], "application/problem+json")
        self.assertTrue(problem["type"].endswith("quota-exceeded"))
        self.assertEqual(problem["violated-policies"], ["daily"])
        self.assertEqual(parse_policy(headers["ratelimit"])["daily"]["r"], 0)

    def test_cost_zero_is_refused_on_authorize(self):
        status, _, body = self.authorize("key-free", headers={"Sluice-Cost": "0"})
        self.assertEqual(status, 400)
        self.assertIn("peek with POST /v1/check", json.loads(body)["detail"])

    def test_denial_names_the_subject_for_gateway_logs(self):
        self.authorize("key-tiny", headers={"Sluice-Cost": "2"})
        status, headers, _ = self.authorize("key-tiny")
        self.assertEqual((status, headers["sluice-subject"]), (429, "user-2"))

    def test_bad_cost_header_is_400(self):
        status, _, body = self.authorize("key-free", headers={"Sluice-Cost": "-1"})
        self.assertEqual(status, 400)
        self.assertTrue(json.loads(body)["detail"].startswith("Sluice-Cost:"))

    def test_requests_without_a_key_are_limited_by_client_ip(self):
        statuses = [self.authorize()[0] for _ in range(4)]
        self.assertEqual(statuses, [200, 200, 200, 429])
        _, headers, _ = self.svc.request("GET", "/v1/authorize")
        self.assertEqual(headers["sluice-subject"], "ip:127.0.0.1")
        self.assertEqual(headers["sluice-plan"], "anon")

    def test_forwarded_for_is_ignored_from_an_untrusted_peer(self):
        for i in range(3):
            self.assertEqual(self.authorize(headers={"X-Forwarded-For": f"10.0.0.{i}"})[0], 200)
        # All three counted against 127.0.0.1, not against the claimed addresses.
        self.assertEqual(self.authorize(headers={"X-Forwarded-For": "10.0.0.9"})[0], 429)

    def test_forwarded_for_is_believed_from_a_trusted_proxy(self):
        def from_proxy(client):
            import http.client
            conn = http.client.HTTPConnection("127.0.0.1", self.svc.port, timeout=5,
                                              source_address=("127.0.0.2", 0))
            conn.request("GET", "/v1/authorize", headers={"X-Forwarded-For": client})
            res = conn.getresponse()
            res.read()
            conn.close()
            return res.status
        self.assertEqual([from_proxy("192.0.2.1") for _ in range(4)], [200, 200, 200, 429])
        self.assertEqual(from_proxy("192.0.2.2"), 200)


class DenyStatusTest(HttpTestCase):
    extra_server = "  deny_status: 403\n"

    def test_configured_deny_status_replaces_429(self):
        self.authorize("key-tiny", headers={"Sluice-Cost": "2"})
        status, headers, _ = self.authorize("key-tiny")
        self.assertEqual(status, 403)
        self.assertIn("retry-after", headers)

    def test_missing_key_without_anonymous_plan_is_401(self):
        self.assertEqual(self.authorize()[0], 401)

    def admin(self, method, path, payload):
        return self.svc.request(method, path, json.dumps(payload),
                                {"Authorization": f"Bearer {self.svc.admin_token}",
                                 "Content-Type": "application/json"}, admin=True)

    def disabled_key(self):
        self.assertEqual(self.admin("PUT", "/v1/subjects/blocked", {"plan": "free",
                                                                    "disabled": True})[0], 201)
        status, _, body = self.admin("POST", "/v1/subjects/blocked/keys", {})
        self.assertEqual(status, 201)
        return json.loads(body)["key"]

    def test_sluice_denied_tells_a_quota_denial_from_a_disabled_key_under_one_status(self):
        # nginx's auth_request passes the status and headers on, never the body: with both
        # answered 403, the header is what tells them apart.
        self.authorize("key-tiny", headers={"Sluice-Cost": "2"})
        status, headers, body = self.authorize("key-tiny")
        self.assertEqual((status, headers.get("sluice-denied")), (403, "quota"))
        self.assertTrue(json.loads(body)["type"].endswith("#quota-exceeded"))

        status, headers, body = self.authorize(self.disabled_key())
        self.assertEqual((status, headers.get("sluice-denied")), (403, "disabled"))
        problem = json.loads(body)
        self.assertEqual(problem["detail"], 'subject "blocked" is disabled')
        self.assertNotIn("retry-after", headers)

    def test_answers_that_deny_nothing_carry_no_sluice_denied(self):
        for status, headers, _ in (self.authorize("key-free"), self.authorize("wrong-key"),
                                   self.authorize()):
            self.assertIn(status, (200, 401))
            self.assertNotIn("sluice-denied", headers)


class SluiceDeniedTest(HttpTestCase):
    def test_a_denial_says_quota_whatever_the_deny_status(self):
        self.authorize("key-tiny", headers={"Sluice-Cost": "2"})
        status, headers, _ = self.authorize("key-tiny")
        self.assertEqual((status, headers.get("sluice-denied")), (429, "quota"))

    def test_a_disabled_subject_says_disabled_on_check_too(self):
        auth = {"Authorization": f"Bearer {self.svc.admin_token}"}
        status, _, _ = self.svc.request("PUT", "/v1/subjects/blocked",
                                        json.dumps({"plan": "free", "disabled": True}), auth,
                                        admin=True)
        self.assertEqual(status, 201)
        status, headers, body = self.svc.check({"subject": "blocked"})
        self.assertEqual((status, headers.get("sluice-denied")), (403, "disabled"))
        self.assertEqual(body["detail"], 'subject "blocked" is disabled')
        # A decision that denies is a 200 on /v1/check: its body says so, not this header.
        self.svc.check({"subject": "user-9", "plan": "tiny", "cost": 2})
        status, headers, body = self.svc.check({"subject": "user-9", "plan": "tiny"})
        self.assertEqual((status, body["allowed"]), (200, False))
        self.assertNotIn("sluice-denied", headers)


class AdminTest(HttpTestCase):
    def admin(self, method, path, token="test-admin-token"):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return self.svc.request(method, path, headers=headers, admin=True)

    def test_health_and_readiness(self):
        self.assertEqual(self.admin("GET", "/healthz", token=None)[0], 200)
        self.assertEqual(self.admin("GET", "/readyz", token=None)[0], 200)

    def test_head_answers_every_get_route_of_the_admin_plane_without_a_body(self):
        self.svc.check({"subject": "h", "plan": "free"})
        for path, token in (("/healthz", None), ("/readyz", None), ("/metrics", "test-admin-token"),
                            ("/v1/usage/h?plan=free", "test-admin-token"),
                            ("/v1/alerts/dead", "test-admin-token")):
            get_status, get_headers, get_body = self.admin("GET", path, token=token)
            status, headers, body = self.admin("HEAD", path, token=token)
            self.assertEqual((status, body), (get_status, b""), path)
            self.assertEqual(headers["content-type"], get_headers["content-type"], path)
            if path != "/metrics":  # the metrics change between the two requests
                self.assertEqual(int(headers["content-length"]), len(get_body), path)
        # HEAD needs the token as GET does; and 405s name it.
        self.assertEqual(self.admin("HEAD", "/metrics", token=None)[0], 401)
        status, headers, _ = self.admin("POST", "/healthz", token=None)
        self.assertEqual((status, headers["allow"]), (405, "GET, HEAD"))
        status, headers, _ = self.admin("PUT", "/v1/usage/h?plan=free")
        self.assertEqual((status, headers["allow"]), (405, "GET, HEAD, DELETE"))

    def test_metrics_need_the_token(self):
        self.assertEqual(self.admin("GET", "/metrics", token=None)[0], 401)
        self.assertEqual(self.admin("GET", "/metrics", token="wrong")[0], 401)
        self.svc.check({"subject": "m", "plan": "free"})
        status, headers, body = self.admin("GET", "/metrics")
        self.assertEqual(status, 200)
        text = body.decode()
        self.assertIn('sluice_decisions_total{plan="free",result="allowed"} 1', text)
        self.assertIn('sluice_http_requests_total{route="/v1/check",code="200"} 1', text)
        self.assertIn("sluice_decision_duration_seconds_bucket", text)
        self.assertIn("sluice_open_connections", text)
        self.assertIn("sluice_build_info", text)
        self.assertIn('sluice_http_requests_total{route="/metrics",code="401"} 2', text)

    def test_usage_shows_and_resets_counters(self):
        self.svc.check({"subject": "team/42", "plan": "free", "cost": 7})
        status, _, body = self.admin("GET", "/v1/usage/team%2F42?plan=free")
        self.assertEqual(status, 200)
        usage = json.loads(body)
        self.assertEqual(usage["limits"][0]["used"], 7)
        self.assertEqual(usage["limits"][1]["alerts_fired"], [])
        # Reading usage consumed nothing.
        self.assertEqual(json.loads(self.admin("GET", "/v1/usage/team%2F42?plan=free")[2])["limits"][0]["used"], 7)
        self.assertEqual(self.admin("DELETE", "/v1/usage/team%2F42?plan=free&limit=per_minute")[0], 200)
        usage = json.loads(self.admin("GET", "/v1/usage/team%2F42?plan=free")[2])
        self.assertEqual([l["used"] for l in usage["limits"]], [0, 7])

    def test_usage_needs_the_token_and_a_plan(self):
        self.assertEqual(self.admin("GET", "/v1/usage/u?plan=free", token=None)[0], 401)
        self.assertEqual(self.admin("GET", "/v1/usage/u")[0], 400)


class CalendarWindowTest(unittest.TestCase):
    """`week` and `year` windows start at Monday / January 1 midnight in the plan's zone."""

    PLANS = """
plans:
  cal:
    timezone: Europe/Paris
    limits:
      - { name: weekly, quota: 700, window: week }
      - { name: yearly, quota: 2, window: year }
"""

    def test_week_and_year_report_their_real_length_and_deny_until_new_year(self):
        zone = zoneinfo.ZoneInfo("Europe/Paris")
        with harness.tempdir() as d, harness.Service(self.PLANS, d) as svc:
            status, headers, body = svc.check({"subject": "user-9", "plan": "cal", "cost": 2})
            now = datetime.datetime.now(zone)
            self.assertEqual(status, 200)
            self.assertEqual([l["window"] for l in body["limits"]], ["week", "year"])
            # Aware datetimes of one zone subtract as wall clocks: compare Unix times instead.
            monday = (now - datetime.timedelta(days=now.weekday())).replace(
                hour=0, minute=0, second=0, microsecond=0)
            next_monday = (monday + datetime.timedelta(days=7)).replace(tzinfo=zone)
            new_year = datetime.datetime(now.year, 1, 1, tzinfo=zone)
            next_new_year = datetime.datetime(now.year + 1, 1, 1, tzinfo=zone)
            policy = parse_policy(headers["ratelimit-policy"])
            self.assertEqual(policy["weekly"]["w"], round(next_monday.timestamp() - monday.timestamp()))
            self.assertEqual(policy["yearly"]["w"],
                             round(next_new_year.timestamp() - new_year.timestamp()))
            weekly, yearly = body["limits"]
            self.assertAlmostEqual(weekly["reset_after"], next_monday.timestamp() - now.timestamp(),
                                   delta=2)
            self.assertAlmostEqual(yearly["reset_after"],
                                   next_new_year.timestamp() - now.timestamp(), delta=2)
            status, _, body = svc.check({"subject": "user-9", "plan": "cal", "cost": 1})
            self.assertEqual((status, body["allowed"], body["violated"]), (200, False, ["yearly"]))
            self.assertAlmostEqual(body["retry_after"], next_new_year.timestamp() - now.timestamp(),
                                   delta=2)


class LoggingTest(unittest.TestCase):
    def test_requests_are_logged_at_debug_without_keys_or_tokens(self):
        reader = ("  admin_tokens:\n"
                  '    - { name: dashboards, token: "reader-token-0123456789", access: read }\n')
        with harness.tempdir() as d, harness.Service(PLANS, d, args=("--log-level", "debug"),
                                                     extra_server=reader) as svc:
            svc.request("GET", "/v1/authorize", headers={"X-API-Key": "key-free"})
            svc.request("GET", "/v1/authorize", headers={"Authorization": "Bearer very-secret-unknown"})
            svc.request("GET", "/metrics", headers={"Authorization": "Bearer test-admin-token"}, admin=True)
            svc.request("POST", "/v1/check", json.dumps({"api_key": "key-free"}))
            # A generated key sent in a path by mistake (revoking by key instead of by id).
            svc.request("DELETE", "/v1/keys/sk_abcdefghijklmnopqrstuvwxyz234567", admin=True,
                        headers={"Authorization": "Bearer test-admin-token"})
            svc.server.wait_for_line('"path":"/v1/keys/sk_abcde..."')
            # The same mistakes with a read-only token: the refusal's audit line cuts the key, and
            # so does the line of a usage reset by key.
            reader_auth = {"Authorization": "Bearer reader-token-0123456789"}
            status = svc.request("DELETE", "/v1/keys/sk_abcdefghijklmnopqrstuvwxyz234567",
                                 admin=True, headers=reader_auth)[0]
            self.assertEqual(status, 403)
            svc.server.wait_for_line('"action":"DELETE /v1/keys/sk_abcde..."')
            status = svc.request("DELETE",
                                 "/v1/usage/sk_abcdefghijklmnopqrstuvwxyz234567?plan=free",
                                 admin=True,
                                 headers={"Authorization": "Bearer test-admin-token"})[0]
            self.assertEqual(status, 200)
            svc.server.wait_for_line('"target":"/v1/usage/sk_abcde...?plan=free"')
            svc.server.wait_for_line('"path":"/v1/check"')
            self.assertEqual(svc.server.stop(signal.SIGTERM), 0)
        logs = "".join(svc.server.lines)
        for line in svc.server.lines:
            json.loads(line)  # every line is one JSON object
        self.assertIn('"path":"/v1/authorize","status":200', logs)
        self.assertIn('"path":"/v1/authorize","status":401', logs)
        for secret in ("key-free", "very-secret-unknown", "test-admin-token",
                       "sk_abcdefghijklmnopqrstuvwxyz234567"):
            self.assertNotIn(secret, logs)


class NoAdminTokenTest(unittest.TestCase):
    def test_admin_refuses_everything_without_a_configured_token(self):
        with harness.tempdir() as d, harness.Service(PLANS, d, admin_token="") as svc:
            env_free = svc.request("GET", "/metrics", headers={"Authorization": "Bearer "}, admin=True)
            self.assertEqual(env_free[0], 401)


class BoundedInputTest(HttpTestCase):
    def raw(self, data, timeout=5):
        with socket.create_connection(("127.0.0.1", self.svc.port), timeout=timeout) as s:
            s.sendall(data)
            chunks = []
            while True:
                try:
                    chunk = s.recv(65536)
                except (ConnectionResetError, socket.timeout):
                    break
                if not chunk:
                    break
                chunks.append(chunk)
            return b"".join(chunks)

    def test_oversized_header_block_is_431(self):
        reply = self.raw(b"GET /v1/authorize HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n")
        self.assertTrue(reply.startswith(b"HTTP/1.1 431"), reply[:60])

    def test_oversized_body_is_413(self):
        body = b"{" + b" " * 70000 + b"}"
        reply = self.raw(b"POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        self.assertTrue(reply.startswith(b"HTTP/1.1 413"), reply[:60])

    def test_garbage_is_400(self):
        reply = self.raw(b"\x00\x01garbage\r\n\r\n")
        self.assertTrue(reply.startswith(b"HTTP/1.1 400"), reply[:60])

    def test_pipelined_requests_are_answered_in_order(self):
        req = b"GET /v1/authorize HTTP/1.1\r\nHost: x\r\nX-API-Key: key-free\r\n\r\n"
        last = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        reply = self.raw(req * 3 + last)
        self.assertEqual(reply.count(b"HTTP/1.1 200"), 3)
        self.assertEqual(reply.count(b"HTTP/1.1 404"), 1)
        self.assertLess(reply.rfind(b"HTTP/1.1 200"), reply.find(b"HTTP/1.1 404"))

    def test_slowloris_is_cut_off_while_others_are_served(self):
        s = socket.create_connection(("127.0.0.1", self.svc.port))
        self.addCleanup(s.close)
        start = time.monotonic()
        closed_after = None
        served = 0
        for ch in b"GET /v1/authorize HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 30:
            try:
                s.sendall(bytes([ch]))
            except OSError:
                closed_after = time.monotonic() - start
                break
            # Another client is served normally meanwhile.
            served += self.authorize("key-free")[0] == 200
            s.settimeout(1.0)
            try:
                if s.recv(1) == b"":
                    closed_after = time.monotonic() - start
                    break
            except socket.timeout:
                pass
        self.assertIsNotNone(closed_after, "slow client was never disconnected")
        self.assertLess(closed_after, 15)
        self.assertGreaterEqual(served, 8)


class SignalsTest(unittest.TestCase):
    def setUp(self):
        self.dir = harness.tempdir()
        self.addCleanup(self.dir.cleanup)

    def test_sighup_applies_a_good_config_and_keeps_counters(self):
        with harness.Service(PLANS, self.dir.name) as svc:
            harness.clear_of_window_end(60, 10)  # "keep" is counted in a 1m window
            svc.check({"subject": "keep", "plan": "free", "cost": 5})
            svc.rewrite(PLANS + "  - { key: key-new, subject: user-9, plan: free }\n")
            svc.server.proc.send_signal(signal.SIGHUP)
            svc.server.wait_for_line("configuration reloaded")
            status, _, body = svc.check({"api_key": "key-new"})
            self.assertEqual((status, body["subject"]), (200, "user-9"))
            self.assertEqual(svc.check({"subject": "keep", "plan": "free", "cost": 0})[2]["limits"][0]["used"], 5)

    def test_sighup_with_a_broken_config_keeps_the_old_one(self):
        with harness.Service(PLANS, self.dir.name) as svc:
            svc.rewrite(PLANS.replace("quota: 60", "quota: 0"))
            svc.server.proc.send_signal(signal.SIGHUP)
            line = json.loads(svc.server.wait_for_line("reload refused"))
            self.assertIn("plans.free.limits[0].quota", line["error"])
            self.assertEqual(svc.check({"api_key": "key-free"})[0], 200)

    def test_sigterm_drains_and_exits_zero(self):
        with harness.Service(PLANS, self.dir.name) as svc:
            errors = []
            import threading
            started = threading.Event()

            def hammer():
                done = 0
                deadline = time.monotonic() + 5
                while time.monotonic() < deadline:
                    try:
                        status, _, body = svc.check({"subject": "d", "plan": "free", "cost": 0})
                    except (ConnectionError, OSError):
                        return done  # refused after the listener closed: expected
                    if status != 200 or body is None:
                        errors.append(status)
                    done += 1
                    started.set()
                return done

            with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
                futures = [pool.submit(hammer) for _ in range(4)]
                self.assertTrue(started.wait(5), "no request succeeded before the signal")
                code = svc.server.stop(signal.SIGTERM)
                done = sum(f.result() for f in futures)
            self.assertEqual(code, 0)
            self.assertEqual(errors, [])
            self.assertGreater(done, 0)
            self.assertTrue(any("stopped" in l for l in svc.server.lines))


if __name__ == "__main__":
    unittest.main()
