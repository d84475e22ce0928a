"""Reports (docs/semantics.md, Reports) through the Envoy Rate Limit Service, as Envoy sends them
for an LLM API whose token count is known only when the response ends: a check when the request
arrives (hits_addend 0: a peek) and, at the end of the stream (apply_on_stream_done), a call that
charges the tokens and is marked as a report. A report is charged past the quota and never denied,
so once the tokens charged reach the quota the next check is denied. Both markings (sluice's own
descriptor mapping, and envoyproxy/ratelimit configuration files with envoy.ratelimit_report_key),
on the memory store and on Redis; and many streams at once, whose charged total must be exactly
what their reports said."""
import concurrent.futures
import json
import os
import random
import unittest

import harness
import test_redis
from test_grpc import OK, OVER_LIMIT, Client, headers, rls

# 250 tokens a minute: each answer below spends 100, so three requests pass their check (the
# third takes the counter past the quota, to 300) and the fourth is denied.
PLANS = """
plans:
  free:
    limits:
      - { name: per_minute, quota: 3, window: 1m }
  tokens:
    limits:
      - { name: tokens, quota: 250, window: 1m, alert_at: [80, 100] }
  wide:
    limits:
      - { name: tokens, quota: 10000, window: 1m }
  trial:
    limits:
      - { name: tokens, quota: 250, window: 1m, shadow: true }
"""

# An envoyproxy/ratelimit file, unchanged: one model's tokens per minute.
RULES = """
domain: llm
descriptors:
  - key: model
    value: small
    rate_limit:
      unit: minute
      requests_per_unit: 250
"""

TOKENS_PER_ANSWER = 100


def call(descriptor, addend, domain="api"):
    """A RateLimitRequest of one descriptor (a list of (key, value)) with a descriptor hits_addend,
    as Envoy builds it from a rate_limits entry with hits_addend. The domain "llm" is the rules
    file's; any other is decided by sluice's own mapping."""
    req = rls.RateLimitRequest(domain=domain)
    desc = req.descriptors.add()
    for key, value in descriptor:
        desc.entries.add(key=key, value=value)
    desc.hits_addend.SetInParent()  # present even when 0
    desc.hits_addend.value = addend
    return req


class ReportCase:
    """The tests, on a store given by store_yaml() (a mixin of unittest.TestCase)."""

    def store_yaml(self):
        return ""

    def setUp(self):
        harness.clear_of_window_end(60, 20)
        d = harness.tempdir()
        self.addCleanup(d.cleanup)
        rules = os.path.join(d.name, "ratelimit")
        os.makedirs(rules)
        with open(os.path.join(rules, "llm.yaml"), "w") as f:
            f.write(RULES)
        self.grpc_port = harness.free_port()
        envoy = (f"envoy:\n  ratelimit_config: {json.dumps(rules)}\n"
                 "  ratelimit_report_key: charged\n")
        self.svc = harness.Service(self.store_yaml() + PLANS + envoy, d.name,
                                   extra_server=f'  grpc_listen: "127.0.0.1:{self.grpc_port}"\n')
        self.svc.__enter__()
        self.addCleanup(self.svc.__exit__)
        if self.store_yaml():
            test_redis.RedisStoreTest.warm(self, self.svc)
        self.client = Client(self.grpc_port)
        self.addCleanup(self.client.close)

    def used(self, subject, plan):
        status, _, body = self.svc.request(
            "GET", f"/v1/usage/{subject}?plan={plan}",
            headers={"Authorization": f"Bearer {self.svc.admin_token}"}, admin=True)
        self.assertEqual(status, 200, body)
        return json.loads(body)["limits"][0]["used"]

    def assert_fourth_check_is_denied(self, check, report):
        """token-quota's flow: check (a peek), then the tokens reported at the end of the stream."""
        for i in range(3):
            res = self.client.call(check, timeout=10)
            self.assertEqual(res.overall_code, OK, f"check {i + 1}")
            res = self.client.call(report, timeout=10)
            self.assertEqual(res.overall_code, OK, f"report {i + 1}: a report is never denied")
            self.assertNotIn("Sluice-Degraded", headers(res))
        res = self.client.call(check, timeout=10)
        self.assertEqual(res.overall_code, OVER_LIMIT, "the fourth check")
        self.assertEqual(res.statuses[0].code, OVER_LIMIT)
        self.assertEqual(res.statuses[0].limit_remaining, 0)
        # A report still charges, with the quota spent.
        self.assertEqual(self.client.call(report, timeout=10).overall_code, OK)

    def test_own_mapping_a_report_entry_charges_past_the_quota_and_the_fourth_check_is_denied(self):
        who = [("subject", "team-a"), ("plan", "tokens")]
        self.assert_fourth_check_is_denied(
            call(who, 0), call(who + [("report", "true")], TOKENS_PER_ANSWER))
        self.assertEqual(self.used("team-a", "tokens"), 4 * TOKENS_PER_ANSWER)
        # The charged usage fired both alerts once: 80% at 200, 100% at 300.
        lines = test_redis.metric_lines(self.svc, "sluice_alert_events_recorded_total")
        self.assertTrue(lines, "no sluice_alert_events_recorded_total")
        self.assertEqual(sum(float(line.rsplit(" ", 1)[1]) for line in lines), 2)

    def test_ratelimit_files_the_marker_entry_counts_on_the_checks_counter(self):
        model = [("model", "small")]
        self.assert_fourth_check_is_denied(
            call(model, 0, "llm"), call(model + [("charged", "true")], TOKENS_PER_ANSWER, "llm"))

    def test_a_report_past_a_shadow_limit_is_no_shadow_denial(self):
        who = [("subject", "team-b"), ("plan", "trial")]
        for _ in range(4):
            res = self.client.call(call(who + [("report", "1")], TOKENS_PER_ANSWER), timeout=10)
            self.assertEqual(res.overall_code, OK)
        self.assertEqual(self.used("team-b", "trial"), 4 * TOKENS_PER_ANSWER)
        self.assertEqual(test_redis.metric(self.svc, "sluice_shadow_denials_total"), 0)
        # An ordinary request past it is one.
        self.assertEqual(self.client.call(call(who, 1), timeout=10).overall_code, OK)
        self.assertEqual(test_redis.metric(self.svc, "sluice_shadow_denials_total"), 1)

    def test_concurrent_streams_are_charged_exactly_what_they_reported(self):
        """Envoy's two calls per stream, many streams at once on one subject: each checks (a
        peek), and if admitted reports a random token count. The counter ends at exactly the sum
        of the admitted streams' reports; checks are denied once it reaches the quota."""
        who = [("subject", "hot"), ("plan", "wide")]
        check = call(who, 0)
        rng = random.Random(7)
        tokens = [rng.randint(1, 100) for _ in range(400)]
        workers = 50

        def stream(n):
            res = self.client.call(check, timeout=30)
            if res.overall_code != OK:
                return 0
            report = self.client.call(call(who + [("report", "true")], n), timeout=30)
            self.assertEqual(report.overall_code, OK)
            return n

        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            charged = list(pool.map(stream, tokens))
        admitted = [n for n in charged if n > 0]
        self.assertGreater(len(admitted), 0)
        self.assertLess(len(admitted), len(tokens), "the quota never stopped a check")
        self.assertEqual(self.used("hot", "wide"), sum(admitted))
        # Past the quota by at most what the streams in flight when it was reached reported.
        self.assertGreaterEqual(sum(admitted), 10000)
        self.assertLessEqual(sum(admitted), 10000 + workers * 100)
        self.assertEqual(self.client.call(check, timeout=10).overall_code, OVER_LIMIT)


def envoy_calls(envoy_yaml, api_key):
    """The two RateLimitRequests Envoy builds from the example's route for a call with `api_key`:
    (the request phase's, the stream-done phase's as a function of the tokens used). Only the
    actions the example uses are played: request_headers (the X-API-Key header) and generic_key."""
    import yaml
    with open(envoy_yaml) as f:
        config = yaml.safe_load(f)
    hcm = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
    typed = hcm["typed_config"]
    domain = next(f["typed_config"]["domain"] for f in typed["http_filters"]
                  if f["name"] == "envoy.filters.http.ratelimit")
    (route,) = typed["route_config"]["virtual_hosts"][0]["routes"]
    phases = {False: None, True: None}
    for rate_limit in route["route"]["rate_limits"]:
        entries = []
        for action in rate_limit["actions"]:
            if "request_headers" in action:
                assert action["request_headers"]["header_name"] == "x-api-key"
                entries.append((action["request_headers"]["descriptor_key"], api_key))
            else:
                generic = action["generic_key"]
                entries.append((generic["descriptor_key"], generic["descriptor_value"]))
        phases[rate_limit.get("apply_on_stream_done", False)] = (entries, rate_limit["hits_addend"])
    (check_entries, check_addend), (done_entries, done_addend) = phases[False], phases[True]
    assert "DYNAMIC_METADATA" in done_addend["format"]
    return (call(check_entries, check_addend["number"], domain),
            lambda tokens: call(done_entries, tokens, domain))


class EnvoyExampleTest(unittest.TestCase):
    """examples/envoy: its sluice.yaml, with Envoy's two calls as its envoy.yaml builds them."""

    def test_the_example_refuses_a_key_once_its_reported_tokens_pass_the_quota(self):
        example = os.path.join(harness.SOURCE_DIR, "examples", "envoy")
        result = harness.run("check-config", "-c", os.path.join(example, "sluice.yaml"))
        self.assertEqual(result.returncode, 0, result.stderr)
        harness.clear_of_window_end(60, 20)
        d = harness.tempdir()
        self.addCleanup(d.cleanup)
        grpc_port, port, admin_port = (harness.free_port() for _ in range(3))
        text = harness.example_with_ports(os.path.join(example, "sluice.yaml"), [
            ('listen: "127.0.0.1:8080"', f'listen: "127.0.0.1:{port}"', 1),
            ('admin_listen: "127.0.0.1:9090"', f'admin_listen: "127.0.0.1:{admin_port}"', 1),
            ('grpc_listen: "127.0.0.1:8081"', f'grpc_listen: "127.0.0.1:{grpc_port}"', 1),
        ])
        server = harness.Server(harness.write_config(d.name, text))
        self.addCleanup(server.kill)
        server.wait_for_line("sluice started")
        client = Client(grpc_port)
        self.addCleanup(client.close)
        check, done = envoy_calls(os.path.join(example, "envoy.yaml"), "demo-key")
        for _ in range(2):  # 30,000 tokens each: the second takes the key past its 50,000
            self.assertEqual(client.call(check, timeout=10).overall_code, OK)
            self.assertEqual(client.call(done(30000), timeout=10).overall_code, OK)
        res = client.call(check, timeout=10)
        self.assertEqual(res.overall_code, OVER_LIMIT)
        self.assertEqual(headers(res)["Sluice-Subject"], "demo-team")


class MemoryReportTest(ReportCase, unittest.TestCase):
    pass


class RedisReportTest(ReportCase, unittest.TestCase):
    def setUp(self):
        self.redis = test_redis.RedisServer().start()
        self.addCleanup(self.redis.close)
        super().setUp()

    def store_yaml(self):
        # A generous timeout: this is about exactness, not latency (a degraded answer would blur it).
        return test_redis.redis_yaml(self.redis.port, timeout="500ms")


if __name__ == "__main__":
    unittest.main()
