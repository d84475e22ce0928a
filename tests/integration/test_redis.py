"""The Redis store through the real binary: exactness across two sluice processes on one Redis,
one Redis command per decision, and the failure policy when Redis goes away."""
import concurrent.futures
import datetime
import json
import os
import signal
import subprocess
import tempfile
import time
import unittest

import harness
from test_redis_script import Resp

PLANS = """
plans:
  free:
    limits:
      - { name: per_minute, quota: 60, window: 1h, alert_at: [80, 100] }
keys:
  - { key: redis-test-key, subject: keyed, plan: free }
"""


class RedisServer:
    """A throwaway redis-server on a free loopback port."""

    def __init__(self):
        self.port = harness.free_port()
        self.dir = tempfile.TemporaryDirectory(prefix="sluice-redis-")
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.dir.name],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                Resp(self.port).close()
                return self
            except OSError:
                time.sleep(0.02)  # polling a starting child process
        raise AssertionError("redis-server did not start")

    def client(self):
        return Resp(self.port)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def close(self):
        self.stop()
        self.dir.cleanup()


def redis_yaml(port, policy="allow", timeout="20ms"):
    return (f'store:\n  type: redis\n  redis: {{ url: "redis://127.0.0.1:{port}/0", timeout: {timeout} }}\n'
            f"on_store_error: {policy}\n")


def metric(svc, name):
    """Sum of every series of metric `name` (labels ignored) on `svc`'s /metrics."""
    status, _, body = svc.request("GET", "/metrics",
                                  headers={"Authorization": "Bearer test-admin-token"}, admin=True)
    assert status == 200, status
    text = body.decode() if isinstance(body, bytes) else body
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def metric_lines(svc, name):
    status, _, body = svc.request("GET", "/metrics",
                                  headers={"Authorization": "Bearer test-admin-token"}, admin=True)
    text = body.decode() if isinstance(body, bytes) else body
    return [line for line in text.splitlines() if line.startswith(name)]


def commandstat(client, name):
    info = client.call("INFO", "commandstats").decode()
    for line in info.splitlines():
        if line.startswith(f"cmdstat_{name}:"):
            return int(line.split("calls=")[1].split(",")[0])
    return 0


class RedisCase(unittest.TestCase):
    """A fresh redis-server per test, and sluice services on it."""

    def setUp(self):
        # The plan's limits have 1h windows: no test may straddle an hour boundary.
        harness.clear_of_window_end(3600, 30)
        self.redis = RedisServer().start()
        self.addCleanup(self.redis.close)
        self.dirs = []

    def service(self, policy="allow", timeout="20ms"):
        d = tempfile.TemporaryDirectory(prefix="sluice-it-")
        self.addCleanup(d.cleanup)
        svc = harness.Service(redis_yaml(self.redis.port, policy, timeout) + PLANS, d.name)
        svc.__enter__()
        self.addCleanup(svc.__exit__)
        if policy == "allow":
            self.warm(svc)
        return svc

    def warm(self, svc):
        """Waits until `svc` answers from Redis. Until its connections are up, sluice answers
        degraded (allowed); the first real decision also loads the script (NOSCRIPT, SCRIPT LOAD,
        retry)."""
        deadline = time.monotonic() + 5
        streak = 0
        while streak < 8:
            degraded = svc.check({"subject": "warm", "plan": "free", "cost": 0})[2]["degraded"]
            streak = 0 if degraded else streak + 1
            self.assertLess(time.monotonic(), deadline, "sluice never connected to redis")


class RedisStoreTest(RedisCase):
    def test_two_processes_admit_exactly_the_quota_and_record_each_alert_once(self):
        # A generous store timeout: this test is about exactness, and a decision answered degraded
        # (allowed uncounted, under on_store_error: allow) on a loaded 2-core machine would blur it.
        a, b = self.service(timeout="500ms"), self.service(timeout="500ms")

        def one(i):
            svc = a if i % 2 else b
            body = svc.check({"subject": "hot", "plan": "free"})[2]
            return body["allowed"], body["degraded"]

        with concurrent.futures.ThreadPoolExecutor(max_workers=64) as pool:
            results = list(pool.map(one, range(400)))
        self.assertEqual([r for r in results if r[1]], [], "degraded decisions")
        self.assertEqual(results.count((True, False)), 60)
        # Each threshold was recorded once: the two dispatchers (sharing the consumer group) fetch
        # and ack exactly two events between them, and the streams end empty. (The events' fields
        # are checked at the receivers in test_alerts.py.)
        deadline = time.monotonic() + 10
        while True:
            acked = sum(metric(s, "sluice_alert_events_acked_total") for s in (a, b))
            if acked >= 2:
                break
            self.assertLess(time.monotonic(), deadline, f"acked {acked} of 2")
            time.sleep(0.05)  # polling /metrics, bounded by the deadline above
        # Read after the acks: an event is fetched before it is acked.
        fetched = sum(metric(s, "sluice_alert_events_fetched_total") for s in (a, b))
        self.assertEqual((fetched, acked), (2, 2))
        client = self.redis.client()
        for key in client.call("KEYS", "sl:*:outbox"):
            self.assertEqual(client.call("XLEN", key), 0, key)

    def test_one_redis_command_per_decision(self):
        svc = self.service()
        client = self.redis.client()
        before = {c: commandstat(client, c) for c in ("evalsha", "eval", "script|load")}
        total_before = sum(before.values())
        for i in range(50):
            svc.check({"subject": f"s{i}", "plan": "free"})
        after = {c: commandstat(client, c) for c in ("evalsha", "eval", "script|load")}
        self.assertEqual(after["evalsha"] - before["evalsha"], 50)
        self.assertEqual(sum(after.values()) - total_before, 50)

    def test_a_denied_subject_costs_no_redis_command_until_its_window_resets(self):
        svc = self.service()
        for _ in range(60):
            self.assertTrue(svc.check({"subject": "spent", "plan": "free"})[2]["allowed"])
        status, _, body = svc.check({"subject": "spent", "plan": "free"})
        self.assertEqual((status, body["allowed"]), (200, False))
        client = self.redis.client()
        before = commandstat(client, "evalsha")
        hits_before = metric(svc, "sluice_overlimit_cache_hits_total")
        for _ in range(50):
            status, headers, body = svc.check({"subject": "spent", "plan": "free"})
            self.assertEqual((body["allowed"], body["degraded"]), (False, False))
            self.assertEqual(body["limits"][0]["used"], 60)
            until_hour_end = 3600 - time.time() % 3600  # the 1h window is aligned to the epoch
            self.assertAlmostEqual(body["retry_after"], until_hour_end, delta=2)
        self.assertEqual(commandstat(client, "evalsha"), before)
        # Each of the 50 was answered from the cache (both service threads share it).
        self.assertEqual(metric(svc, "sluice_overlimit_cache_hits_total") - hits_before, 50)
        # Another subject still reaches Redis.
        self.assertTrue(svc.check({"subject": "fresh", "plan": "free"})[2]["allowed"])
        self.assertEqual(commandstat(client, "evalsha"), before + 1)
        # An admin reset forgets the cached denial.
        status, _, _ = svc.request("DELETE", "/v1/usage/spent?plan=free",
                                   headers={"Authorization": "Bearer test-admin-token"}, admin=True)
        self.assertIn(status, (200, 204))
        self.assertTrue(svc.check({"subject": "spent", "plan": "free"})[2]["allowed"])

    def test_redis_restart_under_load_reaches_no_client_as_an_error(self):
        svc = self.service()
        stop = time.monotonic() + 4
        failures = []

        def hammer(worker):
            n = ok = 0
            while time.monotonic() < stop:
                try:
                    status, _, body = svc.check({"subject": f"r{worker}-{n % 20}", "plan": "free"})
                    if status != 200:
                        failures.append(status)
                    ok += 1
                except Exception as e:  # a broken connection or a timeout is a failure
                    failures.append(repr(e))
                n += 1
            return ok

        with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
            futures = [pool.submit(hammer, w) for w in range(8)]
            time.sleep(1)  # let the load run before the restart; the load itself is time-bounded
            self.redis.stop()
            time.sleep(0.5)  # Redis stays down for half a second
            self.redis.start()
            answered = sum(f.result() for f in futures)
        self.assertEqual(failures, [])
        self.assertGreater(answered, 100)
        # Decisions during the outage were degraded and counted by reason.
        reasons = metric_lines(svc, "sluice_store_errors_total{")
        self.assertTrue(any('reason="connection"' in line for line in reasons), reasons)
        # Back to normal within 2 s of the restart (the load ran for > 2 s after it).
        self.assertFalse(svc.check({"subject": "after", "plan": "free"})[2]["degraded"])

    def test_a_stalled_redis_opens_the_breaker_and_closes_it_when_it_resumes(self):
        svc = self.service()
        self.redis.proc.send_signal(signal.SIGSTOP)
        self.addCleanup(lambda: self.redis.proc.send_signal(signal.SIGCONT))
        latencies = []
        for i in range(30):
            start = time.monotonic()
            status, _, body = svc.check({"subject": f"st{i}", "plan": "free"})
            latencies.append(time.monotonic() - start)
            self.assertEqual((status, body["degraded"]), (200, True))
        reasons = metric_lines(svc, "sluice_store_errors_total{")
        self.assertTrue(any('reason="timeout"' in line for line in reasons), reasons)
        self.assertTrue(any('reason="circuit_open"' in line for line in reasons), reasons)
        # With the breaker open nothing waits for the 20 ms timeout: most answers are immediate.
        latencies.sort()
        self.assertLess(latencies[len(latencies) // 2], 0.015, latencies)
        self.redis.proc.send_signal(signal.SIGCONT)
        deadline = time.monotonic() + 2
        while svc.check({"subject": "resumed", "plan": "free", "cost": 0})[2]["degraded"]:
            self.assertLess(time.monotonic(), deadline, "breaker still open 2 s after resume")
            time.sleep(0.02)  # polling for recovery, bounded by the deadline above

    def test_the_clock_offset_to_redis_is_measured_at_start(self):
        svc = self.service()
        line = json.loads(svc.server.wait_for_line("redis clock offset measured"))
        # Same host: the clocks agree to within the round trip.
        self.assertLess(abs(line["offset_us"]), 50_000)

    def test_a_reload_warns_that_a_changed_store_needs_a_restart_and_keeps_the_store(self):
        svc = self.service()
        client = self.redis.client()
        for change in ("key_prefix: other", "timeout: 30ms"):
            with self.subTest(change=change):
                svc.rewrite(redis_yaml(self.redis.port).replace("timeout: 20ms", change) + PLANS)
                before = len(svc.server.lines)
                svc.server.proc.send_signal(signal.SIGHUP)
                deadline = time.monotonic() + 10
                while not any("configuration reloaded" in line
                              for line in svc.server.lines[before:]):
                    self.assertLess(time.monotonic(), deadline, "no reload")
                    time.sleep(0.02)
                warned = [line for line in svc.server.lines[before:]
                          if "reload ignores a changed setting" in line]
                self.assertEqual(len(warned), 1, svc.server.lines[before:])
                self.assertEqual(json.loads(warned[0])["field"], "store")
                self.assertEqual(svc.check({"subject": "user-1", "plan": "free"})[0], 200)
                self.assertEqual(client.call("KEYS", "other:*"), [])  # the prefix in force stays
                self.assertNotEqual(client.call("KEYS", "sl:*:h:*"), [])

    def test_every_key_but_the_outbox_has_a_ttl(self):
        svc = self.service()
        for i in range(70):
            svc.check({"subject": "ttl", "plan": "free"})
        client = self.redis.client()
        keys = client.call("KEYS", "*")
        self.assertGreater(len(keys), 1)
        for key in keys:
            if key.endswith(b":outbox"):
                continue
            self.assertGreater(client.call("TTL", key), 0, key)

    def test_script_flush_is_invisible_to_clients(self):
        svc = self.service()
        self.assertTrue(svc.check({"subject": "f", "plan": "free"})[2]["allowed"])
        self.redis.client().call("SCRIPT", "FLUSH")
        status, headers, body = svc.check({"subject": "f", "plan": "free"})
        self.assertEqual((status, body["degraded"], body["limits"][0]["used"]), (200, False, 2))

    def test_redis_down_answers_degraded_per_policy_and_recovers(self):
        allow, deny = self.service("allow"), self.service("deny")
        self.assertFalse(allow.check({"subject": "d", "plan": "free"})[2]["degraded"])
        self.redis.stop()
        for _ in range(20):
            start = time.monotonic()
            status, headers, body = allow.check({"subject": "d", "plan": "free"})
            elapsed = time.monotonic() - start
            self.assertEqual((status, body["allowed"], body["degraded"]), (200, True, True))
            self.assertEqual(headers["sluice-degraded"], "1")
            # 20 ms store timeout; the rest is this Python client's own overhead.
            self.assertLess(elapsed, 0.2)
        status, headers, _ = deny.request("GET", "/v1/authorize", headers={"X-API-Key": "none"})
        self.assertEqual(status, 401)  # no key: answered before the store
        status, headers, body = deny.check({"subject": "d", "plan": "free"})
        self.assertEqual((body["allowed"], body["degraded"]), (False, True))
        # deny: the data plane answers 503 problem+json, not a 429 (nothing was counted).
        status, headers, body = deny.request("GET", "/v1/authorize",
                                             headers={"X-API-Key": "redis-test-key"})
        self.assertEqual(status, 503)
        self.assertEqual(headers["content-type"], "application/problem+json")
        self.assertEqual(headers.get("sluice-degraded"), "1")
        self.assertEqual(json.loads(body)["status"], 503)
        self.assertNotIn("retry-after", headers)
        # Redis back (same port): normal decisions resume within 2 s.
        self.redis.start()
        deadline = time.monotonic() + 2
        while True:
            _, _, body = allow.check({"subject": "d", "plan": "free"})
            if not body["degraded"]:
                break
            self.assertLess(time.monotonic(), deadline, "no normal decision within 2 s")
            time.sleep(0.05)  # polling for recovery, bounded by the deadline above
        self.assertTrue(body["allowed"])


class RedisAuthTest(RedisCase):
    def test_a_refused_password_is_logged_without_the_password(self):
        client = self.redis.client()
        self.addCleanup(client.close)
        client.call("CONFIG", "SET", "requirepass", "right-secret")
        d = tempfile.TemporaryDirectory(prefix="sluice-it-")
        self.addCleanup(d.cleanup)
        yaml = redis_yaml(self.redis.port).replace(
            f"redis://127.0.0.1:{self.redis.port}/0", f"redis://:wrong-secret@127.0.0.1:{self.redis.port}/0")
        svc = harness.Service(yaml + PLANS, d.name)
        svc.__enter__()
        self.addCleanup(svc.__exit__)
        line = json.loads(svc.server.wait_for_line("redis connection failed"))
        self.assertIn("WRONGPASS", line["error"])
        self.assertFalse(any("wrong-secret" in l for l in svc.server.lines))
        # The start waited for Redis once, 2 s in all (the registry's first load and the clock's
        # first sample wait together; they took 2 s each, one after the other).
        started = json.loads(svc.server.wait_for_line('"msg":"sluice started"'))
        first = json.loads(svc.server.lines[0])
        waited = (datetime.datetime.fromisoformat(started["ts"].replace("Z", "+00:00")) -
                  datetime.datetime.fromisoformat(first["ts"].replace("Z", "+00:00")))
        self.assertLess(waited.total_seconds(), 3.5)


class RedisDatabaseTest(RedisCase):
    def test_a_database_the_server_does_not_have_is_said_plainly_at_start(self):
        d = tempfile.TemporaryDirectory(prefix="sluice-it-")
        self.addCleanup(d.cleanup)
        yaml = redis_yaml(self.redis.port).replace(f"{self.redis.port}/0", f"{self.redis.port}/20")
        path = harness.write_config(d.name, "server:\n  admin_token: t0ken-t0ken\n" + yaml + PLANS)
        # check-config connects to nothing, and says what only the server can tell.
        check = harness.run("check-config", "-c", path)
        self.assertEqual(check.returncode, 0, check.stderr)
        self.assertIn("note: store.redis.url selects database 20", check.stderr)
        self.assertIn("redis.conf `databases`, 16 by default", check.stderr)
        svc = harness.Service(yaml + PLANS, d.name)
        svc.__enter__()
        self.addCleanup(svc.__exit__)
        line = json.loads(svc.server.wait_for_line("redis connection failed"))
        self.assertEqual(line["level"], "error")
        self.assertIn("SELECT 20 refused", line["error"])
        self.assertIn("the server has no database 20", line["error"])


class ReadinessTest(RedisCase):
    """/readyz against each way Redis can fail: under allow it stays 200 and says the store is
    failing (all replicas unready at once would turn fail-open into an outage); under deny it is
    503 while the store fails. The probe takes the decision's write path, so a Redis that answers
    but refuses writes (OOM, READONLY) counts as failing."""

    def readiness(self, svc):
        status, _, body = svc.request("GET", "/readyz", admin=True)
        return status, json.loads(body)

    def assert_failing(self, allow, deny, reason):
        status, body = self.readiness(allow)
        self.assertEqual((status, body["store"], body["store_error"]), (200, "failing", reason), body)
        self.assertEqual(metric(allow, "sluice_store_up"), 0)
        status, body = self.readiness(deny)
        self.assertEqual((status, body["status"], body["store_error"]), (503, "unready", reason), body)

    def assert_ready_again(self, *services):
        for svc in services:
            deadline = time.monotonic() + 3
            while self.readiness(svc) != (200, {"status": "ready", "store": "ok"}):
                self.assertLess(time.monotonic(), deadline, "not ready again within 3 s")
                time.sleep(0.05)  # polling for recovery, bounded by the deadline above
            self.assertEqual(metric(svc, "sluice_store_up"), 1)

    def test_readiness_under_out_of_memory(self):
        allow, deny = self.service("allow"), self.service("deny")
        self.warm(deny)
        self.assert_ready_again(allow, deny)
        client = self.redis.client()
        self.addCleanup(client.close)
        client.call("CONFIG", "SET", "maxmemory-policy", "noeviction")
        client.call("CONFIG", "SET", "maxmemory", "1")
        self.assert_failing(allow, deny, "oom")
        client.call("CONFIG", "SET", "maxmemory", "0")
        self.assert_ready_again(allow, deny)

    def test_readiness_under_read_only_replica(self):
        allow, deny = self.service("allow"), self.service("deny")
        self.warm(deny)
        client = self.redis.client()
        self.addCleanup(client.close)
        client.call("REPLICAOF", "127.0.0.1", str(harness.free_port()))
        self.assert_failing(allow, deny, "readonly")
        client.call("REPLICAOF", "NO", "ONE")
        self.assert_ready_again(allow, deny)

    def test_readiness_with_redis_frozen(self):
        allow, deny = self.service("allow"), self.service("deny")
        self.warm(deny)
        self.redis.proc.send_signal(signal.SIGSTOP)
        try:
            status, body = self.readiness(allow)
            self.assertEqual((status, body["store"]), (200, "failing"), body)
            self.assertIn(body["store_error"], ("timeout", "circuit_open"))
            self.assertEqual(self.readiness(deny)[0], 503)
        finally:
            self.redis.proc.send_signal(signal.SIGCONT)
        self.assert_ready_again(allow, deny)

    def test_readiness_with_redis_down_and_back(self):
        allow, deny = self.service("allow"), self.service("deny")
        self.warm(deny)
        self.redis.stop()
        status, body = self.readiness(allow)
        self.assertEqual((status, body["store"]), (200, "failing"), body)
        self.assertIn(body["store_error"], ("connection", "timeout", "circuit_open"))
        self.assertEqual(self.readiness(deny)[0], 503)
        self.redis.start()
        self.assert_ready_again(allow, deny)


if __name__ == "__main__":
    unittest.main()
