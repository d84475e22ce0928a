"""Shadow limits end to end (docs/semantics.md, Shadow limits): the real binary on the memory store
and on a real redis-server. A plan enforces 10 per minute and tries 3 per minute in shadow: the
shadow limit never denies, every answer it would have denied names it in Sluice-Shadow-Denied,
/metrics counts those, and its 100% alert reaches the webhook exactly once."""
import tempfile
import time
import unittest

import harness
from receivers import HttpReceiver, event_of
from test_redis import RedisServer, metric, metric_lines, redis_yaml

SECRET = "whsec_c2x1aWNlLXNoYWRvdy10ZXN0LXNlY3JldCEhIQ=="


def shadow_yaml(http):
    return (
        "plans:\n"
        "  free:\n"
        "    limits:\n"
        "      - { name: per_minute, quota: 10, window: 1m }\n"
        "      - { name: trial, quota: 3, window: 1m, shadow: true, alert_at: [100] }\n"
        "keys:\n"
        "  - { key: k-alice, subject: alice, plan: free }\n"
        "alerts:\n"
        "  sinks:\n"
        f'    - {{ type: webhook, url: "{http.url("/hook")}", secret: "{SECRET}" }}\n'
        "  retry: { max_attempts: 3, first_delay: 200ms, max_delay: 1s }\n")


class ShadowCase:
    """The scenario, run against the store `store_yaml()` configures."""

    def store_yaml(self):
        return ""

    def setUp(self):
        # Eleven requests counted in one minute window: none may straddle its end.
        harness.clear_of_window_end(60, 20)
        self.http = HttpReceiver()
        self.addCleanup(self.http.stop)
        d = tempfile.TemporaryDirectory(prefix="sluice-it-")
        self.addCleanup(d.cleanup)
        self.svc = harness.Service(self.store_yaml() + shadow_yaml(self.http), d.name,
                                   extra_server="  access_log: { mode: denied }\n")
        self.svc.__enter__()
        self.addCleanup(self.svc.__exit__)

    def authorize(self):
        return self.svc.request("GET", "/v1/authorize", headers={"X-API-Key": "k-alice"})

    def wait_acked(self, events, timeout=15):
        deadline = time.monotonic() + timeout
        while metric(self.svc, "sluice_alert_events_acked_total") < events:
            self.assertLess(time.monotonic(), deadline, f"{events} events not acked in {timeout}s")
            time.sleep(0.05)  # polling /metrics, bounded by the deadline above

    def test_a_shadow_limit_reports_what_it_would_deny_and_never_denies(self):
        for i in range(1, 12):
            status, headers, _ = self.authorize()
            if i <= 3:
                self.assertEqual(status, 200, i)
                self.assertNotIn("sluice-shadow-denied", headers, i)
            elif i <= 10:
                self.assertEqual(status, 200, i)  # trial would deny, but it is shadow
                self.assertEqual(headers.get("sluice-shadow-denied"), "trial", i)
            else:
                self.assertEqual(status, 429, i)  # per_minute denies the 11th
                self.assertEqual(headers.get("sluice-shadow-denied"), "trial", i)
            # The enforced limit is the one the X-RateLimit-* headers show.
            self.assertEqual(headers.get("x-ratelimit-limit"), "10", i)

        self.assertIn('sluice_shadow_denials_total{plan="free",limit="trial"} 8',
                      metric_lines(self.svc, "sluice_shadow_denials_total"))
        self.assertIn('sluice_limit_denials_total{plan="free",limit="per_minute"} 1',
                      metric_lines(self.svc, "sluice_limit_denials_total"))
        self.assertIn('sluice_limit_denials_total{plan="free",limit="trial"} 0',
                      metric_lines(self.svc, "sluice_limit_denials_total"))

        # The denial's access line names the shadow limit beside the enforced one that denied.
        line = self.svc.server.wait_for_line('"msg":"access"')
        self.assertIn('"limit":"per_minute"', line)
        self.assertIn('"shadow_denied":["trial"]', line)

        # Usage shows the shadow counter past its quota: it counted every admitted request.
        import json
        status, _, body = self.svc.request(
            "POST", "/v1/check", json.dumps({"subject": "alice", "plan": "free", "cost": 0}),
            {"Content-Type": "application/json"})
        self.assertEqual(status, 200)
        limits = {l["name"]: l for l in json.loads(body)["limits"]}
        self.assertEqual(limits["trial"]["used"], 10)
        self.assertEqual(limits["per_minute"]["used"], 10)

        # Alerts are recorded in the decision's step: one for trial's 100%, none for the rest.
        self.assertEqual(metric(self.svc, "sluice_alert_events_recorded_total"), 1)
        self.wait_acked(1)
        hooks = self.http.on("/hook")
        self.assertEqual(len(hooks), 1)
        event = event_of(hooks[0])
        self.assertEqual((event["limit"], event["threshold"], event["used"], event["quota"]),
                         ("trial", 100, 3, 3))


class MemoryShadowTest(ShadowCase, unittest.TestCase):
    pass


class RedisShadowTest(ShadowCase, unittest.TestCase):
    def setUp(self):
        self.redis = RedisServer().start()
        self.addCleanup(self.redis.close)
        super().setUp()

    def store_yaml(self):
        return redis_yaml(self.redis.port, timeout="200ms")


if __name__ == "__main__":
    unittest.main()
