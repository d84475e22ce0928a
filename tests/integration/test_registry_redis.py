"""The registry on the Redis store, black-box: two sluice instances sharing one Redis see each
other's changes within 1 s — also after Redis restarts and after a follower's connection is
killed — and a plan change keeps usage."""
import json
import tempfile
import time
import unittest

import harness
from test_redis import RedisServer, redis_yaml

PLANS = """
plans:
  free:
    limits:
      - { name: daily, quota: 100, window: day, alert_at: [80, 100] }
  pro:
    limits:
      - { name: daily, quota: 1000, window: day, alert_at: [80, 100] }
"""

PROPAGATION = 1.0  # the contract: a change is seen on every instance within 1 s


class TwoInstances(unittest.TestCase):
    def setUp(self):
        harness.clear_of_window_end(60, 20)
        self.redis = RedisServer().start()
        self.addCleanup(self.redis.close)
        self.a = self.service()
        self.b = self.service()

    def service(self):
        d = tempfile.TemporaryDirectory(prefix="sluice-it-")
        self.addCleanup(d.cleanup)
        svc = harness.Service(redis_yaml(self.redis.port) + PLANS, d.name)
        svc.__enter__()
        self.addCleanup(svc.__exit__)
        return svc

    def admin(self, svc, method, path, body=None):
        h = {"Authorization": f"Bearer {svc.admin_token}", "Content-Type": "application/json"}
        status, _, raw = svc.request(method, path, None if body is None else json.dumps(body), h,
                                     admin=True)
        return status, json.loads(raw) if raw else None

    def authorize(self, svc, key):
        return svc.request("GET", "/v1/authorize", headers={"X-API-Key": key})[0]

    def within(self, seconds, predicate, what):
        """Polls `predicate` until it holds; fails if that takes longer than `seconds`."""
        start = time.monotonic()
        while not predicate():
            elapsed = time.monotonic() - start
            self.assertLess(elapsed, seconds + 2, f"{what}: never happened")
            time.sleep(0.02)
        elapsed = time.monotonic() - start
        self.assertLessEqual(elapsed, seconds, f"{what}: took {elapsed:.2f}s")
        return elapsed

    def create(self, svc, sid, plan="free"):
        status, _ = self.admin(svc, "PUT", f"/v1/subjects/{sid}", {"plan": plan})
        self.assertIn(status, (200, 201))
        status, key = self.admin(svc, "POST", f"/v1/subjects/{sid}/keys", {})
        self.assertEqual(status, 201, key)
        return key

    def test_a_key_made_on_a_works_on_b_and_a_revocation_on_b_reaches_a(self):
        key = self.create(self.a, "acme")
        self.assertEqual(self.authorize(self.a, key["key"]), 200)  # read-your-writes on A
        self.within(PROPAGATION, lambda: self.authorize(self.b, key["key"]) == 200, "key on B")
        status, _ = self.admin(self.b, "DELETE", f"/v1/keys/{key['id']}")
        self.assertEqual(status, 204)
        self.assertEqual(self.authorize(self.b, key["key"]), 401)
        self.within(PROPAGATION, lambda: self.authorize(self.a, key["key"]) == 401,
                    "revocation on A")

    def test_after_redis_restarts(self):
        key = self.create(self.a, "acme")
        self.within(PROPAGATION, lambda: self.authorize(self.b, key["key"]) == 200, "key on B")
        # Redis loses everything (no persistence in this test server) and comes back empty; the
        # instances notice the registry went away and reload it.
        self.redis.stop()
        self.redis.start()
        self.within(PROPAGATION + 2, lambda: self.authorize(self.b, key["key"]) == 401,
                    "B drops what Redis no longer has")
        key2 = self.create(self.a, "acme2")
        self.within(PROPAGATION, lambda: self.authorize(self.b, key2["key"]) == 200,
                    "a new key on B after the restart")

    def test_after_the_followers_connections_are_killed(self):
        client = self.redis.client()
        self.addCleanup(client.close)
        key = self.create(self.a, "acme")
        self.within(PROPAGATION, lambda: self.authorize(self.b, key["key"]) == 200, "key on B")
        # Kill every client connection but this one: the followers included. A change made
        # meanwhile must still arrive.
        client.call("CLIENT", "KILL", "SKIPME", "yes")
        self.within(PROPAGATION + 1, lambda: self.admin(self.a, "DELETE",
                                                        f"/v1/keys/{key['id']}")[0] == 204,
                    "revoke after reconnect")
        self.within(PROPAGATION, lambda: self.authorize(self.b, key["key"]) == 401,
                    "revocation reaches B")

    def test_a_plan_change_on_b_keeps_usage_counted_on_a(self):
        key = self.create(self.a, "acme")
        for _ in range(5):
            self.assertEqual(self.authorize(self.a, key["key"]), 200)
        self.within(PROPAGATION, lambda: self.authorize(self.b, key["key"]) == 200, "key on B")
        status, _ = self.admin(self.b, "PUT", "/v1/subjects/acme", {"plan": "pro"})
        self.assertEqual(status, 200)

        def usage():
            status, subject = self.admin(self.a, "GET", "/v1/subjects/acme")
            return subject if status == 200 and subject["plan"] == "pro" else None
        self.within(PROPAGATION, lambda: usage() is not None, "plan change on A")
        daily = usage()["usage"]["limits"][0]
        self.assertEqual((daily["quota"], daily["used"]), (1000, 6))


class RedisDownAtStart(unittest.TestCase):
    def test_keys_are_unavailable_not_unknown_until_the_registry_has_loaded(self):
        redis = RedisServer()  # not started yet
        self.addCleanup(redis.close)
        d = tempfile.TemporaryDirectory(prefix="sluice-it-")
        self.addCleanup(d.cleanup)
        svc = harness.Service(redis_yaml(redis.port) + PLANS, d.name)
        svc.__enter__()
        self.addCleanup(svc.__exit__)
        status, headers, _ = svc.request("GET", "/v1/authorize", headers={"X-API-Key": "k"})
        self.assertEqual(status, 503)
        self.assertEqual(headers.get("retry-after"), "1")
        status, _, body = svc.request("GET", "/readyz", admin=True)
        self.assertEqual((status, json.loads(body)["registry"]), (200, "loading"))
        # Nor is a subject unknown: the registry's own routes, usage by subject and a check by
        # subject wait for it too (an empty list or a 404 would be a wrong answer).
        auth = {"Authorization": "Bearer " + svc.admin_token}
        for method, path in (("GET", "/v1/subjects"), ("GET", "/v1/subjects/acme"),
                             ("GET", "/v1/subjects/acme/keys"), ("PUT", "/v1/subjects/acme"),
                             ("GET", "/v1/usage/acme")):
            status, headers, _ = svc.request(method, path, '{"plan":"free"}' if method == "PUT"
                                             else None, auth, admin=True)
            self.assertEqual((status, headers.get("retry-after")), (503, "1"), (method, path))
        status, headers, _ = svc.request("POST", "/v1/check", '{"subject":"acme"}',
                                         {"Content-Type": "application/json"})
        self.assertEqual((status, headers.get("retry-after")), (503, "1"))
        redis.start()
        deadline = time.monotonic() + 10
        while svc.request("GET", "/v1/authorize", headers={"X-API-Key": "k"})[0] != 401:
            self.assertLess(time.monotonic(), deadline, "the registry never loaded")
            time.sleep(0.05)
        status, _, body = svc.request("GET", "/readyz", admin=True)
        self.assertNotIn("registry", json.loads(body))


if __name__ == "__main__":
    unittest.main()
