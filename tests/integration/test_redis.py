"""The Redis store through the real binary: exactness across two sluice processes on one Redis,
one Redis command per decision, and the failure policy when Redis goes away."""
import concurrent.futures
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


def redis_yaml(port, policy="allow"):
    return (f'store:\n  type: redis\n  redis: {{ url: "redis://127.0.0.1:{port}/0", timeout: 20ms }}\n'
            f"on_store_error: {policy}\n")


def commandstat(client, name):
    info = client.call("INFO", "commandstats").decode()
    for line in info.splitlines():
        if line.startswith(f"cmdstat_{name}:"):
            return int(line.split("calls=")[1].split(",")[0])
    return 0


class RedisStoreTest(unittest.TestCase):
    def setUp(self):
        self.redis = RedisServer().start()
        self.addCleanup(self.redis.close)
        self.dirs = []

    def service(self, policy="allow"):
        d = tempfile.TemporaryDirectory(prefix="sluice-it-")
        self.addCleanup(d.cleanup)
        svc = harness.Service(redis_yaml(self.redis.port, policy) + PLANS, d.name)
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

    def test_two_processes_admit_exactly_the_quota_and_record_each_alert_once(self):
        a, b = self.service(), self.service()

        def one(i):
            svc = a if i % 2 else b
            return svc.check({"subject": "hot", "plan": "free"})[2]["allowed"]

        with concurrent.futures.ThreadPoolExecutor(max_workers=64) as pool:
            results = list(pool.map(one, range(400)))
        self.assertEqual(results.count(True), 60)
        client = self.redis.client()
        events = []
        for key in client.call("KEYS", "sl:*:outbox"):
            for _id, fields in client.call("XRANGE", key, "-", "+"):
                f = dict(zip(fields[::2], fields[1::2]))
                events.append((f[b"threshold"], f[b"used"]))
        self.assertEqual(sorted(events), [(b"100", b"60"), (b"80", b"48")])

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


if __name__ == "__main__":
    unittest.main()
