"""A degraded answer is never charged (docs/redis.md, Deadlines): while many decisions are in
flight, Redis stalls — DEBUG SLEEP (it executes the commands it has read, then sleeps before writing
their replies) or SIGSTOP (frozen at any point) — and afterwards every counter equals exactly the
number of answers that were allowed and not degraded.

Each stall leaves some admissions executed by Redis whose replies arrive after sluice has answered
them as degraded; sluice takes them back (refund.lua) once those replies arrive, so the test waits,
with a deadline, for the counters to settle."""
import http.client
import json
import os
import signal
import subprocess
import tempfile
import threading
import time
import unittest

import harness
import test_redis
from test_redis_script import Resp

PLANS = """
plans:
  free:
    limits:
      - { name: per_hour, quota: 1000000, window: 1h, alert_at: [100] }
"""

SUBJECTS = 8
LOAD_THREADS = 12


class DebugRedis:
    """A throwaway redis-server that accepts DEBUG (off by default since Redis 7)."""

    def __init__(self):
        self.port = harness.free_port()
        self.dir = tempfile.TemporaryDirectory(prefix="sluice-redis-")
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.dir.name, "--enable-debug-command", "yes"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                Resp(self.port).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)  # polling a starting child process

    def close(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()
        self.dir.cleanup()


class DegradedAnswersAreNotChargedTest(unittest.TestCase):
    def setUp(self):
        self.redis = DebugRedis()
        self.addCleanup(self.redis.close)
        d = harness.tempdir()
        self.addCleanup(d.cleanup)
        self.svc = harness.Service(test_redis.redis_yaml(self.redis.port) + PLANS, d.name)
        self.svc.__enter__()
        self.addCleanup(self.svc.__exit__)
        test_redis.RedisStoreTest.warm(self, self.svc)
        # Counters live in 1 h windows: stay clear of the hour's end.
        harness.clear_of_window_end(3600, 60)

    def load_through(self, stall):
        """Runs decisions from LOAD_THREADS keep-alive clients while `stall()` runs (plus 0.3 s
        before and 0.5 s after). Returns {subject: allowed and not degraded}, and the number of
        degraded answers."""
        stop = threading.Event()
        counted = [dict() for _ in range(LOAD_THREADS)]
        degraded = [0] * LOAD_THREADS

        errors = []

        def load(worker):
            try:
                run(worker)
            except Exception as e:  # reported by the test thread below
                errors.append(repr(e))
                stop.set()

        def run(worker):
            conn = http.client.HTTPConnection("127.0.0.1", self.svc.port, timeout=10)
            i = worker
            while not stop.is_set():
                subject = f"s{i % SUBJECTS}"
                i += 1
                conn.request("POST", "/v1/check",
                             json.dumps({"subject": subject, "plan": "free"}),
                             {"Content-Type": "application/json"})
                res = conn.getresponse()
                body = json.loads(res.read())
                if res.status != 200:
                    raise AssertionError(f"status {res.status}: {body}")
                if body["degraded"]:
                    degraded[worker] += 1
                elif body["allowed"]:
                    counted[worker][subject] = counted[worker].get(subject, 0) + 1
            conn.close()

        threads = [threading.Thread(target=load, args=(w,)) for w in range(LOAD_THREADS)]
        for t in threads:
            t.start()
        try:
            time.sleep(0.3)  # load before the stall: the condition under test, not a wait
            stall()
            time.sleep(0.5)  # and after it, while the stalled replies arrive
        finally:
            stop.set()
            for t in threads:
                t.join(15)
        self.assertEqual(errors, [])
        total = {}
        for c in counted:
            for subject, n in c.items():
                total[subject] = total.get(subject, 0) + n
        return total, sum(degraded)

    def counters(self):
        client = Resp(self.redis.port)
        try:
            out = {}
            # Counter hashes (docs/redis.md): field = subject, value = its counter; a field
            # "#<subject>" holds the subject's alert flags.
            for key in client.call("KEYS", "sl:*:h:*"):
                fields = client.call("HGETALL", key)
                for subject, n in zip(fields[::2], fields[1::2]):
                    if not subject.startswith(b"#"):
                        out[subject.decode()] = out.get(subject.decode(), 0) + int(n)
            return out
        finally:
            client.close()

    def assert_counters_settle_at(self, expected, degraded):
        self.assertGreater(degraded, 0, "the stall produced no degraded answer")
        deadline = time.monotonic() + 5
        while True:
            got = self.counters()
            if got == expected:
                break
            if time.monotonic() > deadline:
                extra = {s: got.get(s, 0) - expected.get(s, 0) for s in set(got) | set(expected)}
                self.fail(f"counters minus non-degraded admissions: {extra} "
                          f"({degraded} degraded answers)")
            time.sleep(0.05)  # refunds follow the stalled replies; bounded by the deadline
        print(f"\n{sum(expected.values())} charged answers, {degraded} degraded, none charged")

    def test_debug_sleep_under_load_charges_no_degraded_answer(self):
        client = Resp(self.redis.port)
        self.addCleanup(client.close)

        def stall():
            # Many short sleeps (each longer than the 20 ms timeout): each may catch admissions
            # that Redis has executed but not answered yet (without refunds, this left about five
            # degraded answers charged per run), then one long sleep.
            for _ in range(40):
                client.call("DEBUG", "SLEEP", "0.03")
                time.sleep(0.03)  # load between the stalls
            client.call("DEBUG", "SLEEP", "1")

        expected, degraded = self.load_through(stall)
        self.assert_counters_settle_at(expected, degraded)

    def test_sigstop_under_load_charges_no_degraded_answer(self):
        def stall():
            for seconds in [0.04] * 30 + [2.0]:
                os.kill(self.redis.proc.pid, signal.SIGSTOP)
                try:
                    time.sleep(seconds)  # the length of the freeze is the condition under test
                finally:
                    os.kill(self.redis.proc.pid, signal.SIGCONT)
                time.sleep(0.04)  # load between the stalls

        expected, degraded = self.load_through(stall)
        self.assert_counters_settle_at(expected, degraded)


if __name__ == "__main__":
    unittest.main()
