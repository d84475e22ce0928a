"""Sliding and gcra limits against the real binary (docs/semantics.md, Limit algorithms): what
answers and headers say, what check-config refuses, and exactness with two instances on one Redis
under hundreds of concurrent requests — gcra admits exactly its burst at once and then one unit per
interval, sliding never exceeds its documented bound in any stretch of its window's length (checked
from the admitted requests' send and receive times)."""
import concurrent.futures
import threading
import time
import unittest

import harness
from test_redis import RedisServer

PLANS = """
plans:
  gcra:
    limits:
      - { name: rate, quota: 60, window: 1m, algorithm: gcra, burst: 10 }
  sliding:
    limits:
      - { name: per_2s, quota: 50, window: 2s, algorithm: sliding }
"""


def limit_of(answer):
    return answer["limits"][0]


class AnswersTest(unittest.TestCase):
    """The embedded store: one instance, what a client sees."""

    def setUp(self):
        self.svc = harness.started_service(self, PLANS)

    def test_a_gcra_limit_answers_its_burst_and_an_exact_retry(self):
        subject = f"g-{time.time_ns()}"
        status, headers, first = self.svc.check({"subject": subject, "plan": "gcra"})
        self.assertEqual(status, 200)
        self.assertTrue(first["allowed"])
        self.assertEqual(limit_of(first)["algorithm"], "gcra")
        self.assertEqual(limit_of(first)["burst"], 10)
        self.assertEqual(limit_of(first)["remaining"], 9)
        self.assertEqual(headers["ratelimit-policy"], '"rate";q=60;w=60;sluice-burst=10')
        self.assertEqual(headers["x-ratelimit-limit"], "10")
        items = harness.parse_rate_limit_items(headers["ratelimit"])
        self.assertEqual((items["rate"]["r"], items["rate"]["t"]), (9, 1))
        _, _, nine = self.svc.check({"subject": subject, "plan": "gcra", "cost": 9})
        self.assertTrue(nine["allowed"])
        self.assertEqual(limit_of(nine)["remaining"], 0)
        status, headers, denied = self.svc.check({"subject": subject, "plan": "gcra"})
        self.assertFalse(denied["allowed"])
        self.assertEqual(denied["violated"], ["rate"])
        self.assertEqual(denied["retry_after"], 1)  # one unit a second
        # A cost above the burst is never admitted, and consumes nothing.
        _, _, big = self.svc.check({"subject": f"{subject}-b", "plan": "gcra", "cost": 11})
        self.assertFalse(big["allowed"])
        self.assertEqual(limit_of(big)["remaining"], 10)

    def test_a_sliding_limit_answers_its_weighted_count(self):
        harness.clear_of_window_end(2, 1.5)
        subject = f"s-{time.time_ns()}"
        _, headers, answer = self.svc.check({"subject": subject, "plan": "sliding", "cost": 50})
        self.assertTrue(answer["allowed"])
        self.assertEqual(limit_of(answer)["algorithm"], "sliding")
        self.assertNotIn("burst", limit_of(answer))
        self.assertEqual(limit_of(answer)["used"], 50)
        self.assertEqual(headers["ratelimit-policy"], '"per_2s";q=50;w=2')
        _, _, denied = self.svc.check({"subject": subject, "plan": "sliding"})
        self.assertFalse(denied["allowed"])
        # The 50 weigh on into the next window: nothing fits before it starts.
        self.assertGreaterEqual(denied["retry_after"], 1)


class CheckConfigTest(unittest.TestCase):
    def test_calendar_credit_and_alerting_gcra_limits_are_refused_with_the_reason(self):
        d = harness.tempdir()
        self.addCleanup(d.cleanup)
        cases = {
            "{ name: a, quota: 5, window: day, algorithm: sliding }":
                "plans.p.limits[0].algorithm: a day window is a calendar quota and stays fixed "
                "(sliding and gcra need a window of Ns, Nm or Nh)",
            "{ name: a, quota: 5, window: credit, algorithm: gcra }":
                "plans.p.limits[0].algorithm: a credit limit never resets and stays fixed "
                "(sliding and gcra need a window of Ns, Nm or Nh)",
            "{ name: a, quota: 5, window: 1m, algorithm: gcra, alert_at: [80] }":
                "plans.p.limits[0].alert_at: a gcra limit has no alerts (a rate has no quota to "
                "reach)",
            "{ name: a, quota: 5, window: 1m, burst: 2 }":
                "plans.p.limits[0].burst: only a gcra limit has a burst (set algorithm: gcra, or "
                "leave burst out)",
        }
        for limit, message in cases.items():
            path = harness.write_config(d.name, f"plans:\n  p:\n    limits:\n      - {limit}\n")
            result = harness.run("check-config", "-c", path)
            self.assertEqual(result.returncode, 78, limit)
            self.assertEqual(result.stderr.strip(), f"{path}: {message}")
        path = harness.write_config(d.name, PLANS)
        result = harness.run("check-config", "-c", path)
        self.assertEqual(result.returncode, 0, result.stderr)


class TwoInstancesOnRedisTest(unittest.TestCase):
    def setUp(self):
        self.redis = RedisServer().start()
        self.addCleanup(self.redis.close)
        yaml = (f'store:\n  type: redis\n  redis: {{ url: "redis://127.0.0.1:{self.redis.port}/0",'
                " timeout: 500ms }\n" + PLANS)
        self.instances = [harness.started_service(self, yaml, warm_plan="gcra") for _ in range(2)]
        self.ports = [svc.port for svc in self.instances]

    def test_gcra_admits_exactly_its_burst_at_once_then_one_a_second(self):
        subject = f"g-{time.time_ns()}"
        bodies = harness.burst(self.ports, 400, "/v1/check", {"subject": subject, "plan": "gcra"})
        self.assertEqual(sum(1 for b in bodies if b["degraded"]), 0)
        self.assertEqual(sum(1 for b in bodies if b["allowed"]), 10)
        denied = [b for b in bodies if not b["allowed"]]
        self.assertTrue(all(b["retry_after"] == 1 for b in denied))
        # Then 5 s of bursts every 50 ms on both instances: one admission a second.
        admitted = []
        start = time.monotonic()
        while time.monotonic() - start < 5.0:
            bodies = harness.burst(self.ports, 16, "/v1/check", {"subject": subject, "plan": "gcra"})
            self.assertEqual(sum(1 for b in bodies if b["degraded"]), 0)
            now = time.monotonic()
            admitted += [now] * sum(1 for b in bodies if b["allowed"])
            time.sleep(0.05)
        elapsed = time.monotonic() - start
        # At most one a second (a burst's answers arrive within its own few milliseconds), and
        # none lost: about elapsed seconds' worth.
        self.assertLessEqual(len(admitted), int(elapsed) + 1)
        self.assertGreaterEqual(len(admitted), int(elapsed) - 1)
        gaps = [b - a for a, b in zip(admitted, admitted[1:])]
        self.assertTrue(all(g > 0.8 for g in gaps), gaps)

    def test_sliding_stays_within_its_bound_in_every_stretch_of_its_window(self):
        q, window = 50, 2.0
        subject = f"s-{time.time_ns()}"
        records = []  # (sent, received) of each admitted request
        lock = threading.Lock()
        stop = time.monotonic() + 8.0

        def client(i):
            svc = self.instances[i % 2]
            while time.monotonic() < stop:
                sent = time.time()
                _, _, body = svc.check({"subject": subject, "plan": "sliding"})
                received = time.time()
                self.assertFalse(body["degraded"], body)
                if body["allowed"]:
                    with lock:
                        records.append((sent, received))
                else:
                    time.sleep(0.01)

        with concurrent.futures.ThreadPoolExecutor(max_workers=64) as pool:
            list(pool.map(client, range(64)))
        # A decision happened between its request's send and receive times: the admissions
        # certainly inside a stretch [a, a + W) are those whose whole interval is; there can be
        # no more of them than the bound (2q - 1 in a stretch of the window's length).
        records.sort()
        worst = 0
        for a, _ in records:
            inside = sum(1 for s, r in records if s >= a and r < a + window)
            worst = max(worst, inside)
        self.assertLessEqual(worst, 2 * q - 1)
        # And the limit is used: at least a quota in every window but the first and last.
        self.assertGreaterEqual(len(records), (8.0 / window - 2) * q)

    def test_sliding_stops_the_boundary_burst(self):
        q, window = 50, 2.0
        subject = f"b-{time.time_ns()}"
        # 400 requests 150 ms before a 2 s window ends, 400 more 100 ms after it began. A fixed
        # window would admit 2 q; sliding admits q, and after the boundary only what the full
        # window's weight has let go of by then: q * y / W, y how far into the new window the
        # last decision could have been (a slow build may spill the first burst over too).
        left = window - time.time() % window
        if left < 0.4:
            time.sleep(left + 0.05)
            left = window - time.time() % window
        boundary = time.time() + left
        time.sleep(left - 0.15)
        before = harness.burst(self.ports, 400, "/v1/check", {"subject": subject, "plan": "sliding"})
        time.sleep(max(boundary + 0.1 - time.time(), 0))
        after = harness.burst(self.ports, 400, "/v1/check", {"subject": subject, "plan": "sliding"})
        y = time.time() - boundary
        admitted = sum(1 for b in before + after if b["allowed"])
        self.assertGreaterEqual(admitted, q)
        self.assertLessEqual(admitted, q + int(q * y / window) + 1, f"{y:.3f} s into the window")
        self.assertLess(sum(1 for b in after if b["allowed"]), q)
        self.assertEqual(sum(1 for b in before + after if b["degraded"]), 0)

if __name__ == "__main__":
    unittest.main()
