"""Quota alerts end to end : the real binary, real receivers (HTTP and SMTP), a real
redis-server. Exactly one event per threshold per sink, signatures checked independently, retries,
Retry-After, 410, dead letters, a hung receiver that does not slow decisions, crash recovery, and
thresholds re-armed by a new window."""
import base64
import concurrent.futures
import email
import email.utils
import http.client
import json
import os
import signal
import statistics
import tempfile
import time
import unittest

import harness
from receivers import HttpReceiver, SmtpReceiver, event_of, verify_webhook
from test_redis import RedisServer, metric, redis_yaml

SECRET = "whsec_" + base64.b64encode(b"sluice-integration-test-secret!!").decode()
ALICE_SECRET = "whsec_" + base64.b64encode(b"alice's own webhook secret 1234").decode()
TOKEN = {"Authorization": "Bearer test-admin-token"}


def alerts_yaml(http, smtp=None, retry="{ max_attempts: 4, first_delay: 200ms, max_delay: 1s }",
                quota=100, window="day", alert_at="[80, 100]", extra_alerts=""):
    sinks = (f'    - {{ type: webhook, url: "{http.url("/hook")}", secret: "{SECRET}" }}\n'
             f'    - {{ type: slack, url: "{http.url("/slack")}" }}\n')
    if smtp is not None:
        sinks += (f'    - {{ type: email, smtp_url: "smtp://127.0.0.1:{smtp.port}", '
                  'from: "sluice@example.com", to: ["ops@example.com"] }\n')
    return (
        "plans:\n"
        "  free:\n"
        "    limits:\n"
        f"      - {{ name: daily, quota: {quota}, window: {window}, alert_at: {alert_at} }}\n"
        "keys:\n"
        f'  - {{ key: k-alice, subject: alice, plan: free, email: alice@example.com, '
        f'webhook: "{http.url("/subject")}", webhook_secret: "{ALICE_SECRET}" }}\n'
        "alerts:\n"
        "  sinks:\n" + sinks +
        f"  retry: {retry}\n" + extra_alerts)


def spend(svc, subject, n, workers=32):
    def one(_):
        return svc.check({"subject": subject, "plan": "free"})[2]["allowed"]
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(one, range(n)))


def dead_letters(svc):
    status, _, body = svc.request("GET", "/v1/alerts/dead", headers=TOKEN, admin=True)
    assert status == 200, status
    return json.loads(body)["dead_letters"]


class Fixture(unittest.TestCase):
    def setUp(self):
        # Most tests count crossings of a daily quota (UTC): none may straddle midnight.
        harness.clear_of_window_end(86400, 120)
        self.http = HttpReceiver()
        self.addCleanup(self.http.stop)
        self.smtp = SmtpReceiver()
        self.addCleanup(self.smtp.stop)

    def service(self, body, store_yaml=""):
        d = tempfile.TemporaryDirectory(prefix="sluice-it-")
        self.addCleanup(d.cleanup)
        svc = harness.Service(store_yaml + body, d.name)
        svc.__enter__()
        self.addCleanup(svc.__exit__)
        return svc

    @staticmethod
    def reload(svc, body):
        """Rewrites svc's config with `body` and applies it with SIGHUP."""
        svc.rewrite(body)
        svc.server.proc.send_signal(signal.SIGHUP)
        svc.server.wait_for_line("configuration reloaded")

    def wait_acked(self, svcs, events, timeout=15):
        """Waits until `events` events were acked (every sink done) across `svcs`."""
        deadline = time.monotonic() + timeout
        while sum(metric(s, "sluice_alert_events_acked_total") for s in svcs) < events:
            self.assertLess(time.monotonic(), deadline, f"{events} events not acked in {timeout}s")
            time.sleep(0.05)  # polling /metrics, bounded by the deadline above

    def assert_one_event_per_threshold_and_sink(self, quota):
        hooks = self.http.on("/hook")
        self.assertEqual(sorted(event_of(r)["threshold"] for r in hooks), [80, 100])
        for r in hooks:
            ev = event_of(r)
            self.assertTrue(verify_webhook(SECRET, r["headers"], r["body"]), r["headers"])
            tampered = r["body"].replace(b'"used":', b'"used":1')
            self.assertFalse(verify_webhook(SECRET, r["headers"], tampered))
            self.assertEqual(r["headers"]["webhook-id"], ev["id"])
            self.assertEqual(r["headers"]["content-type"], "application/json")
            self.assertTrue(ev["id"].startswith("qa_"))
            self.assertEqual((ev["type"], ev["subject"], ev["plan"], ev["limit"], ev["quota"]),
                             ("quota.threshold_reached", "alice", "free", "daily", quota))
            self.assertEqual(ev["used"], quota * ev["threshold"] // 100)
            self.assertTrue(ev["window_start"].endswith("T00:00:00Z"), ev)
            self.assertTrue(ev["occurred_at"].endswith("Z"), ev)
        subject_hooks = self.http.on("/subject")
        self.assertEqual(sorted(event_of(r)["threshold"] for r in subject_hooks), [80, 100])
        for r in subject_hooks:  # signed with alice's own secret, never the operator's
            self.assertTrue(verify_webhook(ALICE_SECRET, r["headers"], r["body"]))
            self.assertFalse(verify_webhook(SECRET, r["headers"], r["body"]))
        slack = self.http.on("/slack")
        self.assertEqual(len(slack), 2)
        texts = sorted(json.loads(r["body"])["text"] for r in slack)
        for text, pct in zip(texts, ("100%", "80%")):
            self.assertIn("alice", text)
            self.assertIn(pct, text)
            self.assertIn("daily", text)
        mails = self.smtp.messages.snapshot()
        self.assertEqual(len(mails), 2)
        for m in mails:
            self.assertEqual(sorted(m["rcpt_to"]), ["<alice@example.com>", "<ops@example.com>"])
            msg = email.message_from_string(m["data"])
            for header in ("From", "To", "Subject", "Message-ID", "Date"):
                self.assertIn(header, msg, m["data"])
            self.assertIsNotNone(email.utils.parsedate_to_datetime(msg["Date"]))
            self.assertIn("alice", msg["Subject"])
            self.assertIn("alice", msg.get_payload())


class MemoryStoreAlertsTest(Fixture):
    def test_300_concurrent_requests_give_one_event_per_threshold_per_sink(self):
        svc = self.service(alerts_yaml(self.http, self.smtp))
        results = spend(svc, "alice", 300)
        self.assertEqual(results.count(True), 100)
        self.wait_acked([svc], 2)
        self.assert_one_event_per_threshold_and_sink(100)
        self.assertEqual(metric(svc, "sluice_alert_events_recorded_total"), 2)
        self.assertEqual(metric(svc, "sluice_alert_deliveries_total"), 8)

    def test_500_three_times_then_200_is_delivered_with_one_id_on_the_backoff_schedule(self):
        self.http.script("/hook", [500, 500, 500])
        svc = self.service(alerts_yaml(self.http, alert_at="[100]", quota=5))
        spend(svc, "alice", 5, workers=1)
        hooks = self.http.wait_for("/hook", 4)
        self.assertEqual(len({r["headers"]["webhook-id"] for r in hooks}), 1)
        self.assertEqual(len({r["headers"]["webhook-timestamp"] for r in hooks}) >= 1, True)
        for r in hooks:
            self.assertTrue(verify_webhook(SECRET, r["headers"], r["body"]))
        # Full jitter: attempt n+1 waits a random time up to min(first_delay * 2^(n-1), max_delay).
        gaps = [b["at"] - a["at"] for a, b in zip(hooks, hooks[1:])]
        for n, gap in enumerate(gaps, start=1):
            self.assertLessEqual(gap, min(0.2 * 2 ** (n - 1), 1.0) + 0.35, gaps)
        self.wait_acked([svc], 1)
        self.assertEqual(len(self.http.on("/hook")), 4)
        self.assertEqual(len(self.http.on("/slack")), 1)  # slack succeeded once, never repeated
        self.assertEqual(dead_letters(svc), [])

    def test_429_with_retry_after_is_honoured(self):
        self.http.script("/hook", [(429, {"Retry-After": "2"})])
        svc = self.service(alerts_yaml(self.http, alert_at="[100]", quota=5))
        spend(svc, "alice", 5, workers=1)
        first, second = self.http.wait_for("/hook", 2, timeout=10)
        self.assertGreaterEqual(second["at"] - first["at"], 1.9)

    def test_410_stops_delivery_to_that_endpoint(self):
        self.http.script("/hook", [410])
        svc = self.service(alerts_yaml(self.http, alert_at="[50, 100]", quota=4))
        spend(svc, "alice", 2, workers=1)  # 50%
        self.http.wait_for("/hook", 1)
        self.wait_acked([svc], 1)
        spend(svc, "alice", 2, workers=1)  # 100%
        self.wait_acked([svc], 2)
        self.assertEqual(len(self.http.on("/hook")), 1)
        self.assertEqual(len(self.http.on("/slack")), 2)

    def test_a_permanent_400_goes_to_the_dead_letter_list(self):
        self.http.script("/hook", [400])
        svc = self.service(alerts_yaml(self.http, alert_at="[100]", quota=5))
        spend(svc, "alice", 5, workers=1)
        self.wait_acked([svc], 1)
        letters = dead_letters(svc)
        self.assertEqual(len(letters), 1, letters)
        self.assertEqual(letters[0]["sink"], "webhook")
        self.assertEqual(letters[0]["attempts"], 1)
        self.assertIn("400", letters[0]["reason"])
        self.assertEqual(letters[0]["event"]["threshold"], 100)
        self.assertEqual(len(self.http.on("/hook")), 1)
        self.assertEqual(metric(svc, "sluice_alert_dead_letters"), 1)
        status, _, _ = svc.request("GET", "/v1/alerts/dead", admin=True)
        self.assertEqual(status, 401)

    def test_exhausted_attempts_go_to_the_dead_letter_list(self):
        self.http.script("/hook", [503] * 10)
        svc = self.service(alerts_yaml(
            self.http, alert_at="[100]", quota=5,
            retry="{ max_attempts: 3, first_delay: 100ms, max_delay: 200ms }"))
        spend(svc, "alice", 5, workers=1)
        self.wait_acked([svc], 1)
        letters = dead_letters(svc)
        self.assertEqual([(l["sink"], l["attempts"]) for l in letters], [("webhook", 3)])
        self.assertEqual(len(self.http.on("/hook")), 3)

    def test_a_new_window_rearms_the_thresholds(self):
        svc = self.service(alerts_yaml(self.http, alert_at="[50]", quota=4, window="2s"))

        def next_window():
            """Returns just after a 2 s window starts (fixed windows are aligned to the Unix
            epoch), so the two checks that follow land in one window."""
            time.sleep(2 - time.time() % 2 + 0.02)

        next_window()
        spend(svc, "alice", 2, workers=1)
        self.http.wait_for("/hook", 1)
        next_window()
        spend(svc, "alice", 2, workers=1)
        hooks = self.http.wait_for("/hook", 2)
        starts = [event_of(r)["window_start"] for r in hooks]
        self.assertEqual(len(set(starts)), 2, starts)
        self.assertEqual(len({event_of(r)["id"] for r in hooks}), 2)

    def test_a_reload_that_raises_the_quota_re_arms_a_threshold_once(self):
        # A threshold fires once per quota in force: a raised quota is an upgrade for everyone, so
        # 50% fires again at 50% of the new quota (flipping back is the conformance suite's).
        svc = self.service(alerts_yaml(self.http, alert_at="[50]", quota=10))
        spend(svc, "alice", 5, workers=1)  # 50% of 10
        self.wait_acked([svc], 1)
        self.reload(svc, alerts_yaml(self.http, alert_at="[50]", quota=20))
        body = svc.check({"subject": "alice", "plan": "free", "cost": 0})[2]
        self.assertEqual((body["limits"][0]["quota"], body["limits"][0]["used"]), (20, 5))
        spend(svc, "alice", 4, workers=1)  # 9 of 20: below 50% of the new quota
        self.assertEqual(metric(svc, "sluice_alert_events_recorded_total"), 1)
        spend(svc, "alice", 1, workers=1)  # 10 of 20: 50% of the new quota
        self.wait_acked([svc], 2)
        events = [event_of(r) for r in self.http.on("/hook")]
        self.assertEqual([(e["threshold"], e["quota"], e["used"]) for e in events],
                         [(50, 10, 5), (50, 20, 10)])
        self.assertNotEqual(events[0]["id"], events[1]["id"])

    def test_a_reload_that_adds_a_percentage_sends_only_the_new_one(self):
        svc = self.service(alerts_yaml(self.http, alert_at="[80, 100]", quota=10))
        spend(svc, "alice", 8, workers=1)  # 80% of 10
        self.wait_acked([svc], 1)
        self.reload(svc, alerts_yaml(self.http, alert_at="[50, 80, 100]", quota=10))
        spend(svc, "alice", 1, workers=1)  # 9 of 10: 50% is new and reached; 80% was sent
        spend(svc, "alice", 1, workers=1)  # 10 of 10: 100%
        self.wait_acked([svc], 3)
        self.assertEqual(sorted(event_of(r)["threshold"] for r in self.http.on("/hook")),
                         [50, 80, 100])
        self.assertEqual(metric(svc, "sluice_alert_events_recorded_total"), 3)

    def test_a_hung_receiver_does_not_slow_decisions(self):
        def p99_of_checks(svc, prefix, n=1500):
            conn = http.client.HTTPConnection("127.0.0.1", svc.port, timeout=10)
            latencies = []
            for i in range(n):
                body = json.dumps({"subject": f"{prefix}{i // 3}", "plan": "free"})
                start = time.perf_counter()
                conn.request("POST", "/v1/check", body, {"Content-Type": "application/json"})
                conn.getresponse().read()
                latencies.append(time.perf_counter() - start)
            conn.close()
            return statistics.quantiles(latencies, n=100)[98]

        # Every third request reaches 100% of a quota of 3: 500 alerts per round.
        retry = "{ max_attempts: 100, first_delay: 100ms, max_delay: 1s }"
        body = alerts_yaml(self.http, alert_at="[100]", quota=3, retry=retry)
        healthy_svc = self.service(body)
        hung = HttpReceiver()
        self.addCleanup(hung.stop)
        hung.script("/hook", ["hang"] * 10000)
        hung.script("/slack", ["hang"] * 10000)
        hung.script("/subject", ["hang"] * 10000)
        hung_svc = self.service(alerts_yaml(hung, alert_at="[100]", quota=3, retry=retry))
        healthy, stalled = [], []
        for round_ in range(3):  # alternate, so machine noise hits both alike
            healthy.append(p99_of_checks(healthy_svc, f"h{round_}-"))
            stalled.append(p99_of_checks(hung_svc, f"s{round_}-"))
        ratio = statistics.median(stalled) / statistics.median(healthy)
        print(f"\np99 healthy {[f'{x * 1e3:.2f}' for x in healthy]} ms, "
              f"hung {[f'{x * 1e3:.2f}' for x in stalled]} ms, ratio {ratio:.3f}")
        self.assertLessEqual(ratio, 1.10)
        # Once the receiver answers again, everything is delivered.
        hung.script("/hook", [])
        hung.script("/slack", [])
        hung.script("/subject", [])
        hung.unhang()
        self.wait_acked([hung_svc], 3 * 500, timeout=90)

    def test_kill_9_before_delivery_then_the_restarted_instance_delivers_from_the_snapshot(self):
        d = tempfile.TemporaryDirectory(prefix="sluice-it-")
        self.addCleanup(d.cleanup)
        snapshot = os.path.join(d.name, "state.snap")
        store = (f'store:\n  type: memory\n  memory: {{ snapshot_path: "{snapshot}", '
                 'snapshot_interval: 1s }\n')
        self.http.script("/hook", [503] * 1000)
        body = alerts_yaml(self.http, alert_at="[100]", quota=5,
                           retry="{ max_attempts: 100, first_delay: 100ms, max_delay: 200ms }")
        svc = harness.Service(store + body, d.name)
        svc.__enter__()
        try:
            spend(svc, "alice", 5, workers=1)
            self.http.wait_for("/hook", 1)
            recorded = time.time()
            # The event must be in a snapshot written after it was recorded.
            deadline = time.monotonic() + 10
            while not (os.path.exists(snapshot) and os.path.getmtime(snapshot) > recorded + 0.01):
                self.assertLess(time.monotonic(), deadline, "no snapshot after the alert")
                time.sleep(0.05)  # polling the file, bounded by the deadline above
            svc.server.proc.send_signal(signal.SIGKILL)
            svc.server.proc.wait()
        finally:
            svc.__exit__()
        self.http.script("/hook", [])
        before = len(self.http.on("/hook"))
        restarted = harness.Service(store + body, d.name)
        restarted.__enter__()
        self.addCleanup(restarted.__exit__)
        hooks = self.http.wait_for("/hook", before + 1)
        self.assertEqual(event_of(hooks[-1])["threshold"], 100)
        self.wait_acked([restarted], 1)


class RedisStoreAlertsTest(Fixture):
    def setUp(self):
        super().setUp()
        self.redis = RedisServer().start()
        self.addCleanup(self.redis.close)

    def redis_service(self, body):
        svc = self.service(body, redis_yaml(self.redis.port, timeout="500ms"))
        deadline = time.monotonic() + 5
        while svc.check({"subject": "warm", "plan": "free", "cost": 0})[2]["degraded"]:
            self.assertLess(time.monotonic(), deadline, "sluice never connected to redis")
        return svc

    def test_two_instances_300_requests_one_event_per_threshold_per_sink(self):
        body = alerts_yaml(self.http, self.smtp)
        a, b = self.redis_service(body), self.redis_service(body)

        def one(i):
            return (a if i % 2 else b).check({"subject": "alice", "plan": "free"})[2]["allowed"]

        with concurrent.futures.ThreadPoolExecutor(max_workers=32) as pool:
            results = list(pool.map(one, range(300)))
        self.assertEqual(results.count(True), 100)
        self.wait_acked([a, b], 2)
        self.assert_one_event_per_threshold_and_sink(100)
        self.assertEqual(sum(metric(s, "sluice_alert_events_recorded_total") for s in (a, b)), 2)
        client = self.redis.client()
        for key in client.call("KEYS", "sl:*:outbox"):
            self.assertEqual(client.call("XLEN", key), 0, key)  # acked and deleted

    def test_kill_9_of_the_recording_instance_the_other_one_delivers(self):
        self.http.script("/hook", [503] * 1000)
        body = alerts_yaml(self.http, alert_at="[100]", quota=5,
                           retry="{ max_attempts: 100, first_delay: 100ms, max_delay: 200ms }",
                           extra_alerts="  lease: 2s\n")
        a = self.redis_service(body)
        spend(a, "alice", 5, workers=1)
        self.http.wait_for("/hook", 1)
        a.server.proc.send_signal(signal.SIGKILL)
        a.server.proc.wait()
        # Whoever held the event is gone (or B held it all along); B delivers it.
        self.http.script("/hook", [])
        b = self.redis_service(body)
        before = len(self.http.on("/hook"))
        hooks = self.http.wait_for("/hook", before + 1, timeout=20)
        self.assertEqual(event_of(hooks[-1])["threshold"], 100)
        self.wait_acked([b], 1, timeout=20)


if __name__ == "__main__":
    unittest.main()
