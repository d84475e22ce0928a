"""The Redis store on a real Redis Cluster (three masters, three replicas on loopback ports):
exactness across two sluice processes, decisions spread over every master, alerts delivered once,
resharding and failover under load, and no key left without a TTL after a crash."""
import concurrent.futures
import tempfile
import time
import unittest

import harness
from redis_cluster import RedisCluster
from test_redis import metric

PLANS = """
plans:
  free:
    limits:
      - { name: per_minute, quota: 60, window: 1m, alert_at: [80, 100] }
  big:
    limits:
      - { name: big_minute, quota: 100000000, window: 1m }
"""


def plan_of(subject):
    """Subjects named big-… are on the plan no load exhausts (their decisions always reach Redis:
    a denied subject would be answered from the over-limit cache)."""
    return "big" if subject.startswith("big-") else "free"


class ClusterCase(unittest.TestCase):
    """A fresh cluster per test class, sluice services on it per test."""

    @classmethod
    def setUpClass(cls):
        cls.cluster = RedisCluster().start()

    @classmethod
    def tearDownClass(cls):
        cls.cluster.close()

    def setUp(self):
        self.prefix = f"t{int(time.time() * 1000) % 10**9}"

    def service(self, timeout="500ms", extra="", seeds=2):
        d = tempfile.TemporaryDirectory(prefix="sluice-it-")
        self.addCleanup(d.cleanup)
        body = self.cluster.yaml(timeout=timeout, seeds=seeds).replace(
            "timeout:", f"key_prefix: {self.prefix}, timeout:") + PLANS + extra
        svc = harness.Service(body, d.name)
        svc.__enter__()
        self.addCleanup(svc.__exit__)
        self.warm(svc)
        return svc

    def warm(self, svc):
        """Waits until `svc` answers from the cluster (not degraded) several times in a row."""
        deadline = time.monotonic() + 10
        streak = 0
        while streak < 8:
            body = svc.check({"subject": f"warm{streak}", "plan": "free", "cost": 0})[2]
            streak = 0 if body["degraded"] else streak + 1
            self.assertLess(time.monotonic(), deadline, "sluice never reached the cluster")

    def assert_no_crossslot(self, *services):
        for svc in services:
            self.assertFalse([l for l in svc.server.lines if "CROSSSLOT" in l])


class ClusterStoreTest(ClusterCase):
    def test_two_processes_admit_exactly_the_quota(self):
        harness.clear_of_window_end(60, 20)
        a, b = self.service(), self.service()

        def one(i):
            svc = a if i % 2 else b
            status, _, body = svc.check({"subject": "hot", "plan": "free"})
            return status, body["allowed"], body["degraded"]

        with concurrent.futures.ThreadPoolExecutor(max_workers=64) as pool:
            results = list(pool.map(one, range(400)))
        self.assertEqual([r for r in results if r[0] != 200 or r[2]], [], "errors or degraded")
        self.assertEqual(sum(1 for r in results if r[1]), 60)
        self.assert_no_crossslot(a, b)

    def test_decisions_on_many_subjects_reach_every_master(self):
        harness.clear_of_window_end(60, 20)
        svc = self.service()
        for i in range(300):
            status, _, body = svc.check({"subject": f"spread-{i}", "plan": "free"})
            self.assertEqual((status, body["allowed"], body["degraded"]), (200, True, False), i)
            self.assertEqual(body["limits"][0]["used"], 1)
        counters = self.cluster.keys(f"{self.prefix}:*:c:*")
        self.assertEqual(len(counters), 3)
        for port, keys in counters.items():
            self.assertGreater(len(keys), 0, f"no counter on master {port}")
        self.assertEqual(sum(len(k) for k in counters.values()), 300)
        # Each counter is on the master of its slot (the cluster would refuse any other).
        for port, keys in counters.items():
            for key in keys[:20]:
                self.assertEqual(self.cluster.owner_of(key), port)
        self.assert_no_crossslot(svc)

    def test_a_refused_combination_is_explained(self):
        d = tempfile.TemporaryDirectory(prefix="sluice-it-")
        self.addCleanup(d.cleanup)
        path = harness.write_config(
            d.name,
            'store:\n  type: redis\n  redis: { url: "redis://127.0.0.1:6379/0", '
            'cluster_nodes: ["127.0.0.1:7000"] }\n' + PLANS)
        out = harness.run("check-config", "-c", path)
        self.assertEqual(out.returncode, 78, out.stderr)
        self.assertIn("store.redis.cluster_nodes", out.stderr)
        self.assertIn("cannot be set together with store.redis.url", out.stderr)



if __name__ == "__main__":
    unittest.main()
