"""Reservations, leases and work in flight end to end on the embedded store and on Redis
(docs/semantics.md, Reservations and Concurrency; docs/http.md; docs/redis.md, Reservations): the
real binary, over HTTP. A plan holds an estimate at POST /v1/reserve, charges the real cost at
settle (in full past the quota, counting the overshoot), releases on DELETE, ends unsettled
reservations at their expiry exactly once, and caps requests in flight with a concurrent limit,
also through /v1/authorize's Sluice-Reserve and Sluice-Lease headers. On Redis, two instances
share every hold: a concurrent limit stays exact across them, and the reservations of an instance
killed with SIGKILL end once, at their expiry, through the other."""
import concurrent.futures
import json
import os
import signal
import tempfile
import threading
import time
import unittest

import harness
from test_redis import RedisServer, metric, redis_yaml

PLANS = (
    "plans:\n"
    "  llm:\n"
    "    limits:\n"
    "      - { name: tokens, quota: 1000, window: 1h }\n"
    "      - { name: inflight, quota: 10, window: concurrent }\n"
    "  short:\n"
    "    on_reservation_expiry: release\n"
    "    limits:\n"
    "      - { name: tokens, quota: 1000, window: 1h }\n"
    "keys:\n"
    "  - { key: k-alice, subject: alice, plan: llm }\n")


def post(svc, path, payload=None):
    body = json.dumps(payload) if payload is not None else None
    status, headers, raw = svc.request("POST", path, body, {"Content-Type": "application/json"})
    return status, headers, json.loads(raw) if raw else None


def limit_of(answer, name):
    return next(l for l in answer["limits"] if l["name"] == name)


class ReservationCase:
    """The scenarios, run against the store `store_yaml()` configures."""

    def store_yaml(self):
        return ""

    def setUp(self):
        # Every case counts in one 1-hour window: none may straddle its end.
        harness.clear_of_window_end(3600, 60)
        d = tempfile.TemporaryDirectory(prefix="sluice-it-")
        self.addCleanup(d.cleanup)
        self.svc = harness.Service(self.store_yaml() + PLANS, d.name)
        self.svc.__enter__()
        self.addCleanup(self.svc.__exit__)

    def post(self, path, payload=None):
        return post(self.svc, path, payload)

    def reserve(self, subject, estimate, plan="llm", ttl=None):
        payload = {"subject": subject, "plan": plan, "cost": estimate}
        if ttl is not None:
            payload["ttl"] = ttl
        return self.post("/v1/reserve", payload)

    def limit(self, answer, name):
        return limit_of(answer, name)

    def used(self, subject, plan="llm"):
        status, _, answer = self.svc.check({"subject": subject, "plan": plan, "cost": 0})
        self.assertEqual(status, 200)
        return self.limit(answer, "tokens")

    def admin_usage(self, subject, plan="llm"):
        """GET /v1/usage/{subject} on the admin plane: {limit: {used, held, remaining}}."""
        status, _, body = self.svc.request(
            "GET", f"/v1/usage/{subject}?plan={plan}", admin=True,
            headers={"Authorization": f"Bearer {self.svc.admin_token}"})
        self.assertEqual(status, 200, body)
        return {l["name"]: {k: l[k] for k in ("used", "held", "remaining")}
                for l in json.loads(body)["limits"]}

    def wait_released(self, subject, plan="llm"):
        """Waits (at most 10 s) until nothing is held for `subject`: its reservations expired."""
        deadline = time.monotonic() + 10
        while self.used(subject, plan=plan)["held"] != 0:
            self.assertLess(time.monotonic(), deadline, f"{subject}'s reservation did not expire")
            time.sleep(0.1)  # polling, bounded by the deadline above

    def test_a_reservation_holds_its_estimate_until_it_is_settled_with_the_real_cost(self):
        status, headers, r = self.reserve("bob", 600)
        self.assertEqual(status, 200, r)
        self.assertTrue(r["allowed"])
        self.assertTrue(r["reservation"].startswith("rsv_"))
        self.assertIn("expires_at", r)
        self.assertEqual(self.limit(r, "tokens"), {
            "name": "tokens", "quota": 1000, "used": 0, "held": 600, "remaining": 400,
            "reset_after": self.limit(r, "tokens")["reset_after"], "window": "1h"})
        self.assertEqual(self.limit(r, "inflight")["held"], 1)
        # The hold counts as used in the headers too.
        items = harness.parse_rate_limit_items(headers["ratelimit"])
        self.assertEqual(items["tokens"]["r"], 400)
        # And in the admin plane's usage.
        self.assertEqual(self.admin_usage("bob")["tokens"],
                         {"used": 0, "held": 600, "remaining": 400})
        self.assertEqual(self.admin_usage("bob")["inflight"]["held"], 1)

        # 600 held: 401 more does not fit, and the denial consumes nothing.
        status, _, denied = self.svc.check({"subject": "bob", "plan": "llm", "cost": 401})
        self.assertFalse(denied["allowed"])
        self.assertEqual(denied["violated"], ["tokens"])

        status, _, s = self.post(f"/v1/reservations/{r['reservation']}/settle", {"cost": 250})
        self.assertEqual(status, 200, s)
        self.assertEqual(s["settled"], {"how": "settled", "charged": 250})
        self.assertEqual(self.limit(s, "tokens")["used"], 250)
        self.assertEqual(self.limit(s, "tokens")["held"], 0)
        self.assertEqual(self.limit(s, "inflight")["held"], 0)
        self.assertEqual(self.used("bob")["used"], 250)
        self.assertEqual(self.admin_usage("bob")["tokens"],
                         {"used": 250, "held": 0, "remaining": 750})

        # The same settle again answers the same; another cost is a conflict; nothing is charged.
        status, _, again = self.post(f"/v1/reservations/{r['reservation']}/settle", {"cost": 250})
        self.assertEqual(status, 200)
        self.assertEqual(again["settled"], {"how": "settled", "charged": 250})
        status, headers, problem = self.post(f"/v1/reservations/{r['reservation']}/settle",
                                             {"cost": 300})
        self.assertEqual(status, 409)
        self.assertEqual(headers["content-type"], "application/problem+json")
        self.assertIn("settled with cost 250", problem["detail"])
        self.assertEqual(self.used("bob")["used"], 250)

    def test_a_settle_past_the_quota_is_charged_in_full_counted_and_denies_the_next(self):
        _, _, r = self.reserve("carol", 100)
        status, _, s = self.post(f"/v1/reservations/{r['reservation']}/settle", {"cost": 1300})
        self.assertEqual(status, 200, s)
        tokens = self.limit(s, "tokens")
        self.assertEqual((tokens["used"], tokens["overshoot"], tokens["remaining"]), (1300, 300, 0))
        status, _, denied = self.svc.check({"subject": "carol", "plan": "llm", "cost": 1})
        self.assertFalse(denied["allowed"])
        self.assertEqual(metric(self.svc, "sluice_overshoot_total"), 300)

    def test_delete_releases_without_charge_and_unknown_ids_are_404(self):
        _, _, r = self.reserve("dave", 900)
        status, _, _ = self.svc.request("DELETE", f"/v1/reservations/{r['reservation']}")
        self.assertEqual(status, 204)
        status, _, _ = self.svc.request("DELETE", f"/v1/reservations/{r['reservation']}")
        self.assertEqual(status, 204)  # released already: the same answer
        self.assertEqual(self.used("dave")["used"], 0)
        self.assertEqual(self.used("dave")["held"], 0)
        status, _, problem = self.post(f"/v1/reservations/{r['reservation']}/settle", {"cost": 5})
        self.assertEqual(status, 404, problem)  # released: nothing left to settle
        self.assertIn("released", problem["detail"])
        for bad in ("rsv_nope", r["reservation"][:-2], "x" * 300):
            status, _, _ = self.post(f"/v1/reservations/{bad}/settle", {"cost": 1})
            self.assertEqual(status, 404, bad)
        status, _, _ = self.post(f"/v1/reservations/{r['reservation']}/cancel", {})
        self.assertEqual(status, 404)
        status, headers, _ = self.svc.request("GET", f"/v1/reservations/{r['reservation']}")
        self.assertEqual(status, 405)
        self.assertEqual(headers["allow"], "DELETE")

    def test_bad_input_is_a_400_naming_the_field(self):
        for payload, field in (({"subject": "e", "plan": "llm", "cost": 1, "ttl": "2h"}, "ttl"),
                               ({"subject": "e", "plan": "llm", "cost": 1, "ttl": 60}, "ttl"),
                               ({"subject": "e", "plan": "llm", "cost": -1}, "cost"),
                               ({"subject": "e", "plan": "llm", "tll": "1s"}, "tll")):
            status, _, problem = self.post("/v1/reserve", payload)
            self.assertEqual(status, 400, payload)
            self.assertTrue(problem["detail"].startswith(field + ":"), problem)
        _, _, r = self.reserve("e", 1)
        status, _, problem = self.post(f"/v1/reservations/{r['reservation']}/settle", {})
        self.assertEqual(status, 400)
        self.assertTrue(problem["detail"].startswith("cost:"), problem)

    def test_an_unsettled_reservation_is_charged_its_estimate_at_expiry_once(self):
        _, _, r = self.reserve("frank", 70, ttl="1s")
        self.assertTrue(r["allowed"])
        self.wait_released("frank")
        self.assertEqual(self.used("frank")["used"], 70)
        self.assertEqual(metric(self.svc, 'sluice_reservations_ended_total{how="expired"}'), 1)
        # Expired: a late settle finds nothing to settle and charges nothing more.
        status, _, _ = self.post(f"/v1/reservations/{r['reservation']}/settle", {"cost": 5})
        self.assertEqual(status, 404)
        self.assertEqual(self.used("frank")["used"], 70)

    def test_a_plan_may_release_unsettled_reservations_at_expiry(self):
        _, _, r = self.reserve("gina", 70, plan="short", ttl="1s")
        self.assertTrue(r["allowed"])
        self.wait_released("gina", plan="short")
        self.assertEqual(self.used("gina", plan="short")["used"], 0)

    def test_extend_keeps_a_reservation_past_its_first_expiry(self):
        _, _, r = self.reserve("hal", 50, ttl="1s")
        status, _, e = self.post(f"/v1/reservations/{r['reservation']}/extend", {"ttl": "1h"})
        self.assertEqual(status, 200, e)
        self.assertEqual(e["reservation"], r["reservation"])
        self.assertGreater(e["expires_at"], r["expires_at"])
        # A witness reserved now for 1 s: once the expirer has ended it, it has also passed the
        # first expiry of the extended one.
        _, _, witness = self.reserve("hal-witness", 1, ttl="1s")
        self.assertTrue(witness["allowed"])
        self.wait_released("hal-witness")
        self.assertEqual(self.used("hal")["held"], 50)
        self.assertEqual(self.used("hal")["used"], 0)

    def test_at_most_ten_in_flight_under_400_concurrent_reservations(self):
        # 400 clients reserve at once; those admitted hold their slot a moment, then release it.
        in_flight = 0
        peak = 0
        lock = threading.Lock()

        def one(i):
            nonlocal in_flight, peak
            status, _, r = self.reserve("ivy", 0)
            if status != 200 or not r["allowed"]:
                return 0
            with lock:
                in_flight += 1
                peak = max(peak, in_flight)
            held = self.limit(r, "inflight")["held"]
            time.sleep(0.02)
            with lock:
                in_flight -= 1
            status, _, _ = self.svc.request("DELETE", f"/v1/reservations/{r['reservation']}")
            self.assertEqual(status, 204)
            return held

        with concurrent.futures.ThreadPoolExecutor(max_workers=64) as pool:
            held = list(pool.map(one, range(400)))
        admitted = [h for h in held if h]
        self.assertGreater(len(admitted), 0)
        self.assertLessEqual(max(admitted), 10)  # what the store held, as each answer said
        self.assertLessEqual(peak, 10)
        self.assertEqual(self.limit(self.svc.check(
            {"subject": "ivy", "plan": "llm", "cost": 0})[2], "inflight")["held"], 0)

    def test_authorize_reserves_or_leases_and_answers_the_id(self):
        status, headers, _ = self.svc.request(
            "GET", "/v1/authorize", headers={"X-API-Key": "k-alice", "Sluice-Reserve": "300"})
        self.assertEqual(status, 200)
        rid = headers["sluice-reservation"]
        self.assertEqual(self.used("alice")["held"], 300)
        status, _, s = self.post(f"/v1/reservations/{rid}/settle", {"cost": 120})
        self.assertEqual(status, 200, s)
        self.assertEqual(self.used("alice")["used"], 120)

        # A lease charges the request's cost now and holds a slot until released.
        leases = []
        for _ in range(10):
            status, headers, _ = self.svc.request(
                "GET", "/v1/authorize", headers={"X-API-Key": "k-alice", "Sluice-Lease": "1"})
            self.assertEqual(status, 200)
            leases.append(headers["sluice-reservation"])
        self.assertEqual(self.used("alice")["used"], 130)
        status, headers, _ = self.svc.request(
            "GET", "/v1/authorize", headers={"X-API-Key": "k-alice", "Sluice-Lease": "1"})
        self.assertEqual(status, 429)
        self.assertNotIn("sluice-reservation", headers)
        self.svc.request("DELETE", f"/v1/reservations/{leases[0]}")
        status, _, _ = self.svc.request(
            "GET", "/v1/authorize", headers={"X-API-Key": "k-alice", "Sluice-Lease": "1"})
        self.assertEqual(status, 200)
        for value in ("2", "yes"):
            status, _, _ = self.svc.request(
                "GET", "/v1/authorize", headers={"X-API-Key": "k-alice", "Sluice-Lease": value})
            self.assertEqual(status, 400)


class MemoryReservationTest(ReservationCase, unittest.TestCase):
    pass


class RedisReservationTest(ReservationCase, unittest.TestCase):
    def setUp(self):
        self.redis = RedisServer().start()
        self.addCleanup(self.redis.close)
        super().setUp()

    def store_yaml(self):
        # Generous: a degraded answer would carry no reservation (an ASan build under 400 clients).
        return redis_yaml(self.redis.port, timeout="2s")


class RedisTwoInstancesTest(unittest.TestCase):
    """Two sluice instances on one Redis: every hold is seen by both."""

    def setUp(self):
        harness.clear_of_window_end(3600, 60)
        self.redis = RedisServer().start()
        self.addCleanup(self.redis.close)
        self.instances = []
        for _ in range(2):
            self.instances.append(
                harness.started_service(self, redis_yaml(self.redis.port, timeout="2s") + PLANS))

    def usage(self, svc, subject):
        status, _, answer = svc.check({"subject": subject, "plan": "llm", "cost": 0})
        self.assertEqual(status, 200, answer)
        return limit_of(answer, "tokens"), limit_of(answer, "inflight")

    def test_at_most_ten_in_flight_across_two_instances_under_400_concurrent_reservations(self):
        # 400 clients reserve at once, alternately on either instance, hold their slot a moment
        # and release it through the other instance. What Redis holds is sampled meanwhile.
        in_flight = 0
        peak = 0
        lock = threading.Lock()
        stop = threading.Event()
        sampled = []

        def sample():
            while not stop.is_set():
                sampled.append(self.usage(self.instances[len(sampled) % 2], "ivy")[1]["held"])

        def one(i):
            nonlocal in_flight, peak
            mine, other = self.instances[i % 2], self.instances[(i + 1) % 2]
            status, _, r = post(mine, "/v1/reserve", {"subject": "ivy", "plan": "llm", "cost": 0})
            self.assertEqual(status, 200, r)
            self.assertFalse(r.get("degraded", False), r)
            if not r["allowed"]:
                self.assertNotIn("reservation", r)
                return 0
            with lock:
                in_flight += 1
                peak = max(peak, in_flight)
            held = limit_of(r, "inflight")["held"]
            time.sleep(0.02)  # the work the slot is held for
            with lock:
                in_flight -= 1
            status, _, _ = other.request("DELETE", f"/v1/reservations/{r['reservation']}")
            self.assertEqual(status, 204)
            return held

        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            with concurrent.futures.ThreadPoolExecutor(max_workers=64) as pool:
                held = list(pool.map(one, range(400)))
        finally:
            stop.set()
            sampler.join()
        admitted = [h for h in held if h]
        self.assertGreater(len(admitted), 10)  # slots came back and were taken again
        self.assertLessEqual(max(admitted), 10)  # what Redis held, as each answer said
        self.assertLessEqual(peak, 10)
        self.assertGreater(len(sampled), 0)
        self.assertLessEqual(max(sampled), 10)
        for svc in self.instances:  # every slot came back
            self.assertEqual(self.usage(svc, "ivy")[1]["held"], 0)

    def test_the_reservations_of_a_killed_instance_end_once_at_expiry_through_the_other(self):
        first, second = self.instances
        ids = []
        for _ in range(10):
            status, _, r = post(first, "/v1/reserve",
                                {"subject": "kim", "plan": "llm", "cost": 40, "ttl": "2s"})
            self.assertEqual(status, 200, r)
            self.assertTrue(r["allowed"], r)
            ids.append(r["reservation"])
        first.server.kill()  # SIGKILL: it ends nothing

        # The survivor sees every hold: no slot is free, and 400 held leave 600 of the tokens.
        tokens, inflight = self.usage(second, "kim")
        self.assertEqual((tokens["held"], inflight["held"]), (400, 10))
        status, _, denied = post(second, "/v1/reserve", {"subject": "kim", "plan": "llm", "cost": 0})
        self.assertFalse(denied["allowed"])
        status, _, denied = second.check({"subject": "kim", "plan": "llm", "cost": 1})
        self.assertFalse(denied["allowed"])
        self.assertEqual(denied["violated"], ["inflight"])

        # Its expirer ends them at their expiry, each once, charging the estimate.
        deadline = time.monotonic() + 15
        while self.usage(second, "kim")[1]["held"] != 0:
            self.assertLess(time.monotonic(), deadline, "the reservations did not expire")
            time.sleep(0.1)  # polling, bounded by the deadline above
        tokens, inflight = self.usage(second, "kim")
        self.assertEqual((tokens["used"], tokens["held"]), (400, 0))
        self.assertEqual(metric(second, 'sluice_reservations_ended_total{how="expired"}'), 10)
        for rid in ids:  # expired: a late settle finds nothing to settle and charges nothing
            status, _, _ = post(second, f"/v1/reservations/{rid}/settle", {"cost": 1})
            self.assertEqual(status, 404)
        self.assertEqual(self.usage(second, "kim")[0]["used"], 400)
        # Nothing is left to expire: every bucket's due set is empty.
        client = self.redis.client()
        self.addCleanup(client.close)
        for key in client.call("KEYS", "*:rsvdue"):
            self.assertEqual(client.call("ZCARD", key), 0, key)


class ReservationRestartTest(unittest.TestCase):
    """With a snapshot, reservations outlive a restart: what they hold, and how they ended."""

    def test_an_open_reservation_is_kept_across_a_restart_and_ends_once(self):
        harness.clear_of_window_end(3600, 30)
        d = tempfile.TemporaryDirectory(prefix="sluice-it-")
        self.addCleanup(d.cleanup)
        snapshot = os.path.join(d.name, "state.snap")
        body = (f'store:\n  type: memory\n  memory: {{ snapshot_path: "{snapshot}" }}\n' + PLANS)
        svc = harness.Service(body, d.name)
        with svc:
            status, _, raw = svc.request("POST", "/v1/reserve",
                                         json.dumps({"subject": "kim", "plan": "llm", "cost": 400}))
            rid = json.loads(raw)["reservation"]
            status, _, raw = svc.request("POST", "/v1/reserve",
                                         json.dumps({"subject": "kim", "plan": "llm", "cost": 100}))
            settled = json.loads(raw)["reservation"]
            status, _, _ = svc.request("POST", f"/v1/reservations/{settled}/settle",
                                       json.dumps({"cost": 90}))
            self.assertEqual(status, 200)
            self.assertEqual(svc.server.stop(signal.SIGTERM), 0)  # the final snapshot
            svc.server = None
            svc.__enter__()
            status, _, raw = svc.check({"subject": "kim", "plan": "llm", "cost": 0})
            tokens = next(l for l in raw["limits"] if l["name"] == "tokens")
            self.assertEqual((tokens["used"], tokens["held"]), (90, 400))
            status, _, raw = svc.request("POST", f"/v1/reservations/{settled}/settle",
                                         json.dumps({"cost": 90}))
            self.assertEqual(status, 200)  # the same settle again: the same answer
            status, _, raw = svc.request("POST", f"/v1/reservations/{rid}/settle",
                                         json.dumps({"cost": 380}))
            self.assertEqual(status, 200, raw)
            tokens = next(l for l in json.loads(raw)["limits"] if l["name"] == "tokens")
            self.assertEqual((tokens["used"], tokens["held"]), (470, 0))


if __name__ == "__main__":
    unittest.main()
