"""The Redis store on a real Redis Cluster (three masters, three replicas on loopback ports):
exactness across two sluice processes, decisions spread over every master, alerts delivered once,
resharding and failover under load, and no key left without a TTL after a crash."""
import concurrent.futures
import json
import os
import tempfile
import threading
import time
import unittest
from unittest import mock

import harness
from receivers import HttpReceiver, event_of
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
  llm:
    limits:
      - { name: tokens, quota: 1000, window: 1h }
      - { name: inflight, quota: 2, window: concurrent }
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
        counters = self.cluster.counters(self.prefix)
        self.assertEqual(len(counters), 3)
        for port, fields in counters.items():
            self.assertGreater(len(fields), 0, f"no counter on master {port}")
        self.assertEqual(sorted(s for f in counters.values() for _, s in f),
                         sorted(f"spread-{i}" for i in range(300)))
        # Each counter is on the master of its slot (the cluster would refuse any other).
        for port, fields in counters.items():
            for key, _ in fields[:20]:
                self.assertEqual(self.cluster.owner_of(key), port)
        self.assert_no_crossslot(svc)

    def test_the_registry_is_shared_through_the_cluster(self):
        a, b = self.service(), self.service()

        def admin(svc, method, path, body=None):
            h = {"Authorization": f"Bearer {svc.admin_token}", "Content-Type": "application/json"}
            status, _, raw = svc.request(method, path, None if body is None else json.dumps(body),
                                         h, admin=True)
            return status, json.loads(raw) if raw else None

        def authorize(svc, key):
            return svc.request("GET", "/v1/authorize", headers={"X-API-Key": key})[0]

        self.assertIn(admin(a, "PUT", "/v1/subjects/acme", {"plan": "free"})[0], (200, 201))
        status, key = admin(a, "POST", "/v1/subjects/acme/keys", {})
        self.assertEqual(status, 201, key)
        self.assertEqual(authorize(a, key["key"]), 200)
        deadline = time.monotonic() + 3  # the registry's promise: within 1 s, plus ASan's share
        while authorize(b, key["key"]) != 200:
            self.assertLess(time.monotonic(), deadline, "the key never reached the other instance")
            time.sleep(0.02)  # polling the other instance, bounded by the deadline
        # Every registry key is on one master: the registry's slot's.
        found = {p: keys for p, keys in self.cluster.keys(f"{self.prefix}:{{registry}}*").items()
                 if keys}
        self.assertEqual(len(found), 1, found)
        self.assert_no_crossslot(a, b)

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


class ClusterReservationTest(ClusterCase):
    def post(self, svc, path, payload):
        status, _, raw = svc.request("POST", path, json.dumps(payload),
                                     {"Content-Type": "application/json"})
        return status, json.loads(raw) if raw else None

    def test_reservations_on_every_master_end_through_any_instance_or_at_expiry(self):
        # Subjects spread over every master: each reservation is one script call on its
        # subject's master, ended by the other instance, or by the expirer, which reads the due
        # reservations of every bucket on every master.
        harness.clear_of_window_end(3600, 60)
        a, b = self.service(), self.service()
        ids = []
        for i in range(60):
            status, r = self.post(a, "/v1/reserve",
                                  {"subject": f"rsv-{i}", "plan": "llm", "cost": 10, "ttl": "2s"})
            self.assertEqual(status, 200, r)
            self.assertTrue(r["allowed"] and not r["degraded"], r)
            ids.append(r["reservation"])
        for port in self.cluster.masters():
            records = self.cluster.call(port, "KEYS", f"{self.prefix}:*:rsv:*")
            self.assertGreater(len(records), 0, f"no reservation on master {port}")
        for i in range(0, 60, 2):  # half settled through the other instance
            status, s = self.post(b, f"/v1/reservations/{ids[i]}/settle", {"cost": 3})
            self.assertEqual(status, 200, s)
            self.assertEqual(s["settled"], {"how": "settled", "charged": 3})
        deadline = time.monotonic() + 15
        for i in range(1, 60, 2):  # the rest expire, charged their estimate once
            while True:
                body = b.check({"subject": f"rsv-{i}", "plan": "llm", "cost": 0})[2]
                if body["limits"][1]["held"] == 0:
                    break
                self.assertLess(time.monotonic(), deadline, f"rsv-{i} did not expire")
                time.sleep(0.1)  # polling, bounded by the deadline above
        for i in range(60):
            body = a.check({"subject": f"rsv-{i}", "plan": "llm", "cost": 0})[2]
            self.assertEqual((body["limits"][0]["used"], body["limits"][0]["held"]),
                             (3 if i % 2 == 0 else 10, 0), i)
        self.assertEqual(metric(a, "sluice_reservations_ended_total") +
                         metric(b, "sluice_reservations_ended_total"), 60)
        # Two slots each: a third reservation of one subject is denied on either instance.
        for svc in (a, b):
            status, r = self.post(svc, "/v1/reserve", {"subject": "slots", "plan": "llm", "cost": 0})
            self.assertTrue(r["allowed"], r)
        status, r = self.post(b, "/v1/reserve", {"subject": "slots", "plan": "llm", "cost": 0})
        self.assertFalse(r["allowed"])
        self.assertEqual(r["violated"], ["inflight"])
        self.assert_no_crossslot(a, b)


class ClusterBurstTest(ClusterCase):
    """Hundreds of requests for one subject at once, on a cluster just made (no script loaded on
    any master: the first commands find none and share one load), with the default timeout."""

    def rounds(self, services, rounds=3, n=400):
        for r in range(rounds):
            harness.clear_of_window_end(60, 10)
            if r == 0:
                for port in self.cluster.masters():
                    self.cluster.call(port, "SCRIPT", "FLUSH")
            bodies = harness.burst([s.port for s in services], n, "/v1/check",
                                   {"subject": f"burst-{r}-{time.time_ns()}", "plan": "free"})
            allowed = sum(1 for b in bodies if b["allowed"])
            degraded = sum(1 for b in bodies if b["degraded"])
            self.assertEqual((allowed, degraded), (60, 0), f"round {r}: (allowed, degraded)")

    def test_one_instance_decides_a_burst_exactly(self):
        self.rounds([self.service(timeout="20ms")])

    def test_two_instances_decide_a_burst_exactly(self):
        self.rounds([self.service(timeout="20ms"), self.service(timeout="20ms")])


class Load:
    """Clients sending decisions to `services` (round robin) for `subjects` until stop(); every
    answer is kept as (monotonic time, subject, status, allowed, degraded, seconds taken)."""

    def __init__(self, services, subjects, workers=8):
        self.services, self.subjects = services, subjects
        self.results, self._lock = [], threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(w,), daemon=True)
                         for w in range(workers)]
        for t in self._threads:
            t.start()

    def _run(self, worker):
        i = worker
        while not self._stop.is_set():
            svc = self.services[i % len(self.services)]
            subject = self.subjects[i % len(self.subjects)]
            i += 7
            start = time.monotonic()
            try:
                status, _, body = svc.check({"subject": subject, "plan": plan_of(subject)})
                row = (start, subject, status, body["allowed"], body["degraded"],
                       time.monotonic() - start)
            except Exception as e:  # an error reaching the client is a result too
                row = (start, subject, repr(e), False, True, time.monotonic() - start)
            with self._lock:
                self.results.append(row)

    def stop(self):
        self._stop.set()
        for t in self._threads:
            t.join(30)
        return list(self.results)

    def count(self):
        with self._lock:
            return len(self.results)


def admitted(results, subject):
    return sum(1 for r in results if r[1] == subject and r[3] and not r[4])


def subject_slot_index(cluster, prefix, subjects):
    """For each subject (one decision made on it already): (its slot's position among its
    master's slots, the master's port, the slot). redis-cli reshard moves a master's lowest
    slots first, so a subject with a small position is moved by a small reshard."""
    owners = {}
    for port, fields in cluster.counters(prefix).items():
        for key, subject in fields:
            if subject in subjects:
                slot = cluster.call(port, "CLUSTER", "KEYSLOT", key)
                owners[subject] = (port, slot)
    out = {}
    for subject, (port, slot) in owners.items():
        ranges = [n["slots"] for n in cluster.nodes() if n["port"] == port][0]
        owned = []
        for spec in ranges:
            if spec.startswith("["):
                continue
            lo, _, hi = spec.partition("-")
            owned.extend(range(int(lo), int(hi or lo) + 1))
        owned.sort()
        out[subject] = (owned.index(slot), port, slot)
    return out


class ClusterReshardTest(ClusterCase):
    def test_resharding_under_load_is_invisible_and_exact(self):
        harness.clear_of_window_end(60, 45)
        http = HttpReceiver()
        self.addCleanup(http.stop)
        alerts = ("alerts:\n  sinks:\n"
                  f'    - {{ type: webhook, url: "{http.url("/hook")}", secret: "whsec_c2VjcmV0c2VjcmV0c2VjcmV0" }}\n'
                  "  retry: { max_attempts: 4, first_delay: 200ms, max_delay: 1s }\n")
        a, b = self.service(extra=alerts), self.service(extra=alerts)
        # Two subjects in the slot a small reshard moves: `busy` (never exhausted: its decisions
        # reach the cluster before, during and after the move) and `hot` (exactly its quota).
        candidates = [f"big-c{i}" for i in range(40)] + [f"hot-{i}" for i in range(150)]
        for c in candidates:
            body = a.check({"subject": c, "plan": plan_of(c)})[2]
            self.assertTrue(body["allowed"] and not body["degraded"], body)
        positions = subject_slot_index(self.cluster, self.prefix, set(candidates))
        by_slot = {}
        for c, (pos, port, slot) in positions.items():
            by_slot.setdefault((pos, port, slot), []).append(c)
        position, source, slot = min(k for k, cs in by_slot.items()
                                     if any(c.startswith("big-") for c in cs)
                                     and any(c.startswith("hot-") for c in cs))
        busy = next(c for c in by_slot[(position, source, slot)] if c.startswith("big-"))
        hot = next(c for c in by_slot[(position, source, slot)] if c.startswith("hot-"))
        target = next(p for p in self.cluster.masters() if p != source)
        limited = [hot] + [f"load-{i}" for i in range(10)]
        # The limited subjects are soon answered from the over-limit cache; the big ones keep
        # every decision going to the cluster.
        subjects = limited + [busy] + [f"big-{i}" for i in range(10)]
        redirects = sum(metric(s, "sluice_redis_cluster_moved_total") +
                        metric(s, "sluice_redis_cluster_ask_total") for s in (a, b))

        load = Load([a, b], subjects)
        deadline = time.monotonic() + 10
        while load.count() < 200:  # the load is under way before the reshard starts
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.01)  # waiting on the load threads, bounded by the deadline
        self.cluster.reshard(source, target, position + 1)
        moved_at = load.count()
        while load.count() < moved_at + 200:  # and goes on after it
            self.assertLess(time.monotonic(), deadline + 60)
            time.sleep(0.01)
        results = load.stop()

        # The hot slot did move, with its keys.
        key = next(k for fields in self.cluster.counters(self.prefix).values()
                   for k, s in fields if s == hot)
        self.assertEqual(self.cluster.owner_of(key), target)
        bad = [r for r in results if r[2] != 200 or r[4]]
        self.assertEqual(bad, [], "errors or degraded answers reached clients")
        # The move was seen by the clients (and followed), not only learnt from a refresh.
        self.assertGreater(sum(metric(s, "sluice_redis_cluster_moved_total") +
                               metric(s, "sluice_redis_cluster_ask_total") for s in (a, b)),
                           redirects)
        # Exactly the quota (the hot subject had one admission before the load), never more.
        counts = {s: admitted(results, s) + (1 if s == hot else 0) for s in limited}
        for s, n in counts.items():
            requests = sum(1 for r in results if r[1] == s) + (1 if s == hot else 0)
            self.assertEqual(n, min(60, requests), s)
        self.assert_no_crossslot(a, b)

        # Every alert once: 80% at the 48th admission, 100% at the 60th (the admission after
        # which used >= quota: a subject with exactly 60 requests hears it too, without a denial).
        expected = set()
        for s in limited:
            if counts[s] >= 48:
                expected.add((s, 80))
            if counts[s] >= 60:
                expected.add((s, 100))
        hooks = http.wait_for("/hook", len(expected), timeout=30)
        deadline = time.monotonic() + 15
        while True:  # until both dispatchers have acknowledged everything they recorded
            recorded = sum(metric(s, "sluice_alert_events_recorded_total") for s in (a, b))
            acked = sum(metric(s, "sluice_alert_events_acked_total") for s in (a, b))
            if acked >= recorded:
                break
            self.assertLess(time.monotonic(), deadline, f"acked {acked} of {recorded}")
            time.sleep(0.05)  # polling /metrics, bounded by the deadline
        hooks = http.on("/hook")
        got = [(event_of(h)["subject"], event_of(h)["threshold"]) for h in hooks
               if event_of(h)["subject"] in subjects]
        self.assertEqual(sorted(got), sorted(expected))
        ids = [h["headers"]["webhook-id"] for h in hooks]
        self.assertEqual(len(ids), len(set(ids)))


class ClusterFailoverTest(ClusterCase):
    def wait_promoted(self, replica, within):
        """The monotonic time at which `replica` was seen a master (polled, failing after `within` s)."""
        deadline = time.monotonic() + within
        while replica not in self.cluster.masters():
            self.assertLess(time.monotonic(), deadline, "the replica was not promoted")
            time.sleep(0.02)  # polling the cluster's state, bounded by the deadline
        return time.monotonic()

    def subject_on(self, svc, port, name):
        """A subject `name`-… whose keys are on master `port` (one admission made on it)."""
        for i in range(200):
            subject = f"{name}-{port}-{i}"
            body = svc.check({"subject": subject, "plan": plan_of(subject)})[2]
            self.assertTrue(body["allowed"] and not body["degraded"], body)
            if any(s == subject for _, s in self.cluster.counters(self.prefix).get(port, [])):
                return subject
        self.fail(f"no subject on {port}")

    def test_a_coordinated_failover_recovers_within_2_seconds(self):
        harness.clear_of_window_end(60, 30)
        a, b = self.service(timeout="100ms"), self.service(timeout="100ms")
        master = self.cluster.masters()[0]
        replica = self.cluster.replica_of(master)
        hot = self.subject_on(a, master, "hot")
        busy = self.subject_on(a, master, "big")
        load = Load([a, b], [hot, busy, "big-other-1", "big-other-2"])
        time.sleep(0.3)  # some load before the switch
        self.cluster.failover(replica)
        promoted = self.wait_promoted(replica, 20)
        time.sleep(2.5)  # service must be normal from promotion + 2 s on; measured below
        results = load.stop()
        late = [(round(r[0] - promoted, 3), r[1], round(r[5], 3)) for r in results
                if r[4] and r[0] > promoted + 2]
        self.assertEqual(late, [], "degraded answers more than 2 s after the promotion")
        self.assertTrue(any(not r[4] for r in results if r[0] > promoted + 2))
        self.assertLessEqual(admitted(results, hot) + 1, 60)
        self.assertEqual([r for r in results if r[2] != 200], [])
        self.cluster.wait_ok()

    def test_a_killed_master_answers_degraded_in_time_then_recovers(self):
        harness.clear_of_window_end(60, 40)
        timeout = 0.1
        a, b = self.service(timeout="100ms"), self.service(timeout="100ms")
        master = self.cluster.masters()[-1]
        replica = self.cluster.replica_of(master)
        hot = self.subject_on(a, master, "hot")
        busy = self.subject_on(a, master, "big")
        load = Load([a, b], [hot, busy])
        time.sleep(0.3)  # some load before the crash
        killed = time.monotonic()
        self.cluster.kill(master)
        promoted = self.wait_promoted(replica, 30)
        time.sleep(2.5)  # service must be normal from promotion + 2 s on; measured below
        results = load.stop()
        during = [r for r in results if killed + 0.05 < r[0] < promoted - 0.05 and r[1] == busy]
        self.assertTrue(during, "no request while the slot had no master")
        degraded = [r for r in during if r[4]]
        self.assertTrue(degraded, "no degraded answer while the master was down")
        # Within the store timeout plus a margin (ASan, two cores shared with the cluster).
        self.assertLessEqual(max(r[5] for r in degraded), timeout + 0.25)
        late = [(round(r[0] - promoted, 3), r[1], round(r[5], 3)) for r in results
                if r[4] and r[0] > promoted + 2]
        self.assertEqual(late, [], "degraded answers more than 2 s after the promotion")
        self.assertTrue(any(not r[4] for r in results if r[0] > promoted + 2))
        self.assertEqual([r for r in results if r[2] != 200], [])
        # Never more than the quota admitted (degraded answers were allowed uncounted).
        self.assertLessEqual(admitted(results, hot) + 1, 60)


class ClusterCrashTest(ClusterCase):
    def test_no_key_without_ttl_after_sluice_is_killed_under_load(self):
        harness.clear_of_window_end(60, 20)
        for round_ in range(3):
            svc = self.service(timeout="200ms")
            load = Load([svc], [f"crash-{i}" for i in range(30)], workers=6)
            deadline = time.monotonic() + 10
            while load.count() < 150:
                self.assertLess(time.monotonic(), deadline)
                time.sleep(0.01)  # waiting on the load threads, bounded by the deadline
            svc.server.proc.kill()
            load.stop()
            svc.server.kill()
        without_ttl = []
        total = 0
        for port, keys in self.cluster.keys(f"{self.prefix}:*").items():
            for key in keys:
                total += 1
                name = key.decode()
                if name.endswith(":outbox") or ":{registry}" in name:
                    continue  # the documented exceptions: outbox streams, the registry
                if self.cluster.call(port, "TTL", key) < 0:
                    without_ttl.append(name)
        self.assertGreater(total, 30)
        self.assertEqual(without_ttl, [])


class ClusterAclTest(unittest.TestCase):
    """store.redis.username: every node's link authenticates as that ACL user (managed clusters
    such as ElastiCache with RBAC have no usable default user). Three masters, no replicas."""

    @classmethod
    def setUpClass(cls):
        cls.cluster = RedisCluster(nodes=3, replicas=0).start()
        for port in cls.cluster.ports:
            cls.cluster.call(port, "ACL", "SETUSER", "sluice-app", "on", ">app-secret", "~*",
                             "&*", "+@all")

    @classmethod
    def tearDownClass(cls):
        cls.cluster.close()

    def service(self, password):
        d = tempfile.TemporaryDirectory(prefix="sluice-it-")
        self.addCleanup(d.cleanup)
        secret = os.path.join(d.name, "redis-password")
        with open(secret, "w") as f:
            f.write(password + "\n")
        body = self.cluster.yaml(seeds=1).replace("timeout:", "username: sluice-app, timeout:")
        svc = harness.Service(body + PLANS, d.name)
        with mock.patch.dict(os.environ, {"SLUICE_REDIS_PASSWORD_FILE": secret}):
            svc.__enter__()
        self.addCleanup(svc.__exit__)
        return svc

    def test_every_master_is_reached_as_the_acl_user(self):
        svc = self.service("app-secret")
        ClusterCase.warm(self, svc)
        # Subjects on every master: each node's link must be up, as the user.
        for i in range(30):
            status, _, body = svc.check({"subject": f"acl-{i}", "plan": "free"})
            self.assertEqual((status, body["allowed"], body["degraded"]), (200, True, False), i)
        for port in self.cluster.ports:
            clients = self.cluster.call(port, "CLIENT", "LIST").decode()
            self.assertIn("user=sluice-app", clients, port)

    def test_a_wrong_password_is_refused_and_never_logged(self):
        svc = self.service("wrong-secret")
        line = json.loads(svc.server.wait_for_line("redis connection failed"))
        self.assertIn("WRONGPASS", line["error"])
        self.assertTrue(svc.check({"subject": "acl", "plan": "free"})[2]["degraded"])
        self.assertFalse([l for l in svc.server.lines if "wrong-secret" in l])


if __name__ == "__main__":
    unittest.main()
