"""Prepaid credits, black-box: grants on the admin plane raise the quota of `window: credit`
limits, a retried grant is never applied twice, a plan mixing credits with fixed windows admits
all-or-nothing, alerts re-arm on a top-up, and grants and usage survive a restart — on the
embedded store and on Redis with two instances. Every admin answer on the embedded store is
checked against docs/openapi.yaml."""
import json
import signal
import tempfile
import time
import unittest

import harness
import openapi_check
from receivers import HttpReceiver, event_of
from test_redis import RedisServer, redis_yaml

READER_TOKEN = "reader-token-0123456789"
TOKENS = f"""  admin_tokens:
    - {{ name: dashboards, token: "{READER_TOKEN}", access: read }}
"""

PLANS = """
plans:
  prepaid:
    limits:
      - { name: credits, quota: 0, window: credit }
      - { name: per_minute, quota: 5, window: 1m }
      - { name: daily, quota: 50, window: day }
  metered:
    limits:
      - { name: credits, quota: 0, window: credit, alert_at: [80] }
keys:
  - { key: static-key-1, subject: static-user, plan: prepaid }
"""

CREDITS = "/v1/subjects/{id}/credits"
PROPAGATION = 1.0  # a registry change is seen on every instance within 1 s


class Admin:
    """Admin requests to one instance; with `check_openapi` each answer is validated."""

    def __init__(self, test, svc, check_openapi=True):
        self.test, self.svc, self.check_openapi = test, svc, check_openapi

    def __call__(self, method, path, template, body=None, token=None, headers=None):
        h = {"Authorization": f"Bearer {token or self.svc.admin_token}"}
        h.update(headers or {})
        data = None if body is None else (body if isinstance(body, str) else json.dumps(body))
        if data is not None:
            h["Content-Type"] = "application/json"
        status, headers_out, raw = self.svc.request(method, path, data, h, admin=True)
        if self.check_openapi:
            openapi_check.validate_response(method, template, status, headers_out, raw)
        return status, headers_out, json.loads(raw) if raw else None

    def put_subject(self, sid, plan):
        status, _, body = self(
            "PUT", f"/v1/subjects/{sid}", "/v1/subjects/{id}", {"plan": plan})
        self.test.assertIn(status, (200, 201), body)

    def grant(self, sid, add, key, reason="invoice", **kw):
        headers = {} if key is None else {"Idempotency-Key": key}
        body = {"add": add, "reason": reason} if reason is not None else {"add": add}
        return self("POST", f"/v1/subjects/{sid}/credits", CREDITS, body, headers=headers, **kw)

    def ledger(self, sid, query="", **kw):
        return self("GET", f"/v1/subjects/{sid}/credits{query}", CREDITS, **kw)

    def usage(self, sid):
        status, _, subject = self("GET", f"/v1/subjects/{sid}", "/v1/subjects/{id}")
        self.test.assertEqual(status, 200, subject)
        return {l["name"]: l for l in subject["usage"]["limits"]}


def check(svc, sid, cost=1):
    status, headers, body = svc.check({"subject": sid, "cost": cost})
    assert status in (200, 429), (status, body)
    return body, headers


class EmbeddedStore(unittest.TestCase):
    def setUp(self):
        # Counts within one minute and one UTC day: none may straddle their end.
        harness.clear_of_window_end(60, 20)
        self.dir = harness.tempdir()
        self.addCleanup(self.dir.cleanup)
        self.store = (f"store:\n  memory:\n    registry_path: {self.dir.name}/registry.db\n"
                      f"    snapshot_path: {self.dir.name}/state.snap\n")
        self.svc = self.start()

    def start(self, extra=""):
        svc = harness.Service(self.store + PLANS + extra, self.dir.name, extra_server=TOKENS)
        svc.__enter__()
        self.addCleanup(svc.__exit__)
        self.admin = Admin(self, svc)
        return svc

    def test_a_grant_raises_the_credit_quota_and_a_retry_grants_nothing(self):
        self.admin.put_subject("acme", "prepaid")
        denied, _ = check(self.svc, "acme")
        self.assertFalse(denied["allowed"])  # nothing granted yet
        self.assertEqual(denied["violated"], ["credits"])

        status, headers, granted = self.admin.grant("acme", 10, "grant-1")
        self.assertEqual(status, 201, granted)
        self.assertNotIn("idempotent-replayed", headers)
        self.assertEqual(headers["cache-control"], "no-store")
        self.assertEqual((granted["grant"]["amount"], granted["grant"]["balance"]), (10, 10))
        self.assertEqual(granted["grant"]["actor"], "admin")
        self.assertEqual(granted["credits"], {
            "granted": 10,
            "limits": [{"name": "credits", "quota": 10, "used": 0, "held": 0,
                        "remaining": 10}]})

        decision, headers = check(self.svc, "acme", cost=3)
        self.assertTrue(decision["allowed"])
        credits = decision["limits"][0]
        self.assertEqual((credits["window"], credits["quota"], credits["used"],
                          credits["reset_after"]), ("credit", 10, 3, 0))
        # A credit never resets: no window length, no time to a reset.
        self.assertIn('"credits";q=10,', headers["ratelimit-policy"])
        self.assertIn('"credits";r=7,', headers["ratelimit"])

        status, headers, again = self.admin.grant("acme", 10, "grant-1")
        self.assertEqual(status, 201, again)
        self.assertEqual(headers["idempotent-replayed"], "true")
        self.assertEqual(again["grant"], granted["grant"])
        self.assertEqual(again["credits"]["granted"], 10)
        self.assertEqual(self.admin.usage("acme")["credits"]["quota"], 10)

        status, _, problem = self.admin.grant("acme", 11, "grant-1")
        self.assertEqual((status, problem["field"]), (422, "Idempotency-Key"))
        self.assertEqual(self.admin.usage("acme")["credits"]["quota"], 10)

    def test_bad_grants_are_refused_naming_what_is_wrong(self):
        self.admin.put_subject("acme", "prepaid")
        status, _, problem = self.admin.grant("acme", 10, None)
        self.assertEqual((status, problem["field"]), (400, "Idempotency-Key"))
        for body, field in (({"add": 0}, "add"), ({"add": "10"}, "add"), ({}, "add"),
                            ({"add": 1, "reason": "x" * 257}, "reason"),
                            ({"add": 1, "limit": "credits"}, "limit"),
                            ({"add": 10 ** 15 + 1}, "add")):
            status, _, problem = self.admin("POST", "/v1/subjects/acme/credits", CREDITS, body,
                                            headers={"Idempotency-Key": f"k-{field}-{len(body)}"})
            self.assertEqual((status, problem["field"]), (422, field), body)
        status, _, problem = self.admin.grant("nobody", 10, "k1")
        self.assertEqual(status, 404, problem)
        self.assertEqual(self.admin.ledger("nobody")[0], 404)
        status, _, _ = self.admin.grant("acme", 10, "k1", token=READER_TOKEN)
        self.assertEqual(status, 403)
        self.assertEqual(self.admin.grant("static-user", 10, "k1")[0], 409)
        self.assertEqual(self.admin.ledger("acme", token=READER_TOKEN)[0], 200)
        # The total is bounded: a grant past the largest quota is refused and grants nothing.
        self.assertEqual(self.admin.grant("acme", 10 ** 15, "k-max")[0], 201)
        status, _, problem = self.admin.grant("acme", 1, "k-past")
        self.assertEqual((status, problem["field"]), (422, "add"))
        self.assertEqual(self.admin.ledger("acme")[2]["credits"]["granted"], 10 ** 15)

    def test_the_ledger_lists_grants_newest_first_in_pages(self):
        self.admin.put_subject("acme", "prepaid")
        for i, add in enumerate((100, 20, 3), start=1):
            self.assertEqual(self.admin.grant("acme", add, f"g{i}", reason=f"top-up {i}")[0], 201)
        status, _, page = self.admin.ledger("acme", "?limit=2")
        self.assertEqual(status, 200, page)
        self.assertEqual([(g["seq"], g["amount"], g["balance"], g["reason"], g["actor"])
                          for g in page["grants"]],
                         [(3, 3, 123, "top-up 3", "admin"), (2, 20, 120, "top-up 2", "admin")])
        self.assertEqual(page["credits"]["granted"], 123)
        status, _, last = self.admin.ledger("acme", f"?limit=2&cursor={page['next_cursor']}")
        self.assertEqual(status, 200, last)
        self.assertEqual([g["seq"] for g in last["grants"]], [1])
        self.assertIsNone(last["next_cursor"])
        self.assertEqual(self.admin.ledger("acme", "?cursor=abc")[0], 400)

    def test_a_plan_mixing_credit_minute_and_day_admits_all_or_nothing(self):
        self.admin.put_subject("acme", "prepaid")
        self.admin.grant("acme", 2, "g1")
        self.assertTrue(check(self.svc, "acme", cost=2)[0]["allowed"])
        denied, _ = check(self.svc, "acme", cost=1)  # the credits are spent
        self.assertEqual(denied["violated"], ["credits"])
        usage = self.admin.usage("acme")
        self.assertEqual((usage["per_minute"]["used"], usage["daily"]["used"]), (2, 2))

        self.admin.grant("acme", 10, "g2")
        self.assertTrue(check(self.svc, "acme", cost=3)[0]["allowed"])  # the minute is full
        denied, _ = check(self.svc, "acme", cost=1)
        self.assertEqual(denied["violated"], ["per_minute"])
        usage = self.admin.usage("acme")
        self.assertEqual((usage["credits"]["used"], usage["credits"]["quota"]), (5, 12))
        self.assertEqual(usage["daily"]["used"], 5)

    def test_grants_and_usage_survive_a_restart(self):
        self.admin.put_subject("acme", "prepaid")
        self.admin.grant("acme", 10, "g1")
        self.assertTrue(check(self.svc, "acme", cost=3)[0]["allowed"])
        self.assertEqual(self.svc.server.stop(signal.SIGTERM), 0)

        self.svc = self.start()
        credits = self.admin.usage("acme")["credits"]
        self.assertEqual((credits["quota"], credits["used"]), (10, 3))
        status, headers, again = self.admin.grant("acme", 10, "g1")
        self.assertEqual((status, headers.get("idempotent-replayed")), (201, "true"))
        self.assertEqual(again["credits"]["granted"], 10)
        self.assertEqual(len(self.admin.ledger("acme")[2]["grants"]), 1)


class Alerts(unittest.TestCase):
    def setUp(self):
        harness.clear_of_window_end(60, 20)
        self.http = HttpReceiver()
        self.addCleanup(self.http.stop)
        self.dir = harness.tempdir()
        self.addCleanup(self.dir.cleanup)
        alerts = ("alerts:\n  sinks:\n"
                  f'    - {{ type: webhook, url: "{self.http.url("/hook")}", '
                  'secret: "whsec_c2x1aWNlLWludGVncmF0aW9uLXRlc3Qtc2VjcmV0ISE=" }\n')
        self.svc = harness.Service(
            f"store:\n  memory:\n    registry_path: {self.dir.name}/registry.db\n" + PLANS +
            alerts, self.dir.name)
        self.svc.__enter__()
        self.addCleanup(self.svc.__exit__)
        self.admin = Admin(self, self.svc)

    def test_the_80_percent_alert_fires_and_a_top_up_rearms_it(self):
        self.admin.put_subject("acme", "metered")
        self.admin.grant("acme", 10, "g1")
        self.assertTrue(check(self.svc, "acme", cost=8)[0]["allowed"])
        first = event_of(self.http.wait_for("/hook", 1)[0])
        self.assertEqual((first["limit"], first["threshold"], first["quota"], first["used"]),
                         ("credits", 80, 10, 8))

        self.admin.grant("acme", 10, "g2")  # 8 of 20: the 80% threshold is armed again
        self.assertTrue(check(self.svc, "acme", cost=8)[0]["allowed"])
        second = event_of(self.http.wait_for("/hook", 2)[1])
        self.assertEqual((second["threshold"], second["quota"], second["used"]), (80, 20, 16))


class RedisTwoInstances(unittest.TestCase):
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

    def within(self, seconds, predicate, what):
        """Polls `predicate` until it holds; fails if that takes longer than `seconds`."""
        start = time.monotonic()
        while not predicate():
            elapsed = time.monotonic() - start
            self.assertLess(elapsed, seconds + 2, f"{what}: never happened")
            time.sleep(0.02)
        elapsed = time.monotonic() - start
        self.assertLessEqual(elapsed, seconds, f"{what}: took {elapsed:.2f}s")

    @staticmethod
    def credit_quota(svc, sid):
        """The credit limit's quota in a peek on `svc` (consumes nothing); None while `svc` does
        not know the subject."""
        status, _, body = svc.check({"subject": sid, "cost": 0})
        return body["limits"][0]["quota"] if status == 200 else None

    def test_a_grant_on_a_is_decided_on_b_within_one_second(self):
        admin_a = Admin(self, self.a, check_openapi=False)
        admin_a.put_subject("acme", "prepaid")
        self.within(PROPAGATION, lambda: self.credit_quota(self.b, "acme") == 0,
                    "the subject on B")
        self.assertEqual(admin_a.grant("acme", 4, "g1")[0], 201)

        self.within(PROPAGATION, lambda: self.credit_quota(self.b, "acme") == 4,
                    "the new quota on B")
        self.assertTrue(check(self.b, "acme", cost=4)[0]["allowed"])
        denied, _ = check(self.a, "acme", cost=1)
        self.assertEqual(denied["violated"], ["credits"])  # one counter for both instances

    def test_a_grant_retried_on_b_is_not_granted_twice(self):
        admin_a = Admin(self, self.a, check_openapi=False)
        admin_b = Admin(self, self.b, check_openapi=False)
        admin_a.put_subject("acme", "prepaid")
        self.assertEqual(admin_a.grant("acme", 4, "g1")[0], 201)
        self.within(PROPAGATION, lambda: self.credit_quota(self.b, "acme") == 4, "the grant on B")
        status, headers, again = admin_b.grant("acme", 4, "g1")
        self.assertEqual((status, headers.get("idempotent-replayed")), (201, "true"))
        self.assertEqual(again["grant"]["seq"], 1)
        status, _, ledger = admin_b.ledger("acme")
        self.assertEqual(status, 200)
        self.assertEqual((len(ledger["grants"]), ledger["credits"]["granted"]), (1, 4))
        self.assertEqual(admin_b.grant("acme", 5, "g1")[0], 422)

    def test_a_mixed_plan_admits_all_or_nothing_across_instances(self):
        admin_a = Admin(self, self.a, check_openapi=False)
        admin_a.put_subject("acme", "prepaid")
        admin_a.grant("acme", 100, "g1")
        self.within(PROPAGATION, lambda: self.credit_quota(self.b, "acme") == 100,
                    "the grant on B")
        self.assertTrue(check(self.a, "acme", cost=3)[0]["allowed"])
        denied, _ = check(self.b, "acme", cost=3)  # 6 > 5 per minute
        self.assertEqual(denied["violated"], ["per_minute"])
        credits = admin_a.usage("acme")["credits"]
        self.assertEqual((credits["used"], credits["quota"]), (3, 100))

    def test_grants_and_usage_survive_a_restart_of_the_instances(self):
        admin_a = Admin(self, self.a, check_openapi=False)
        admin_a.put_subject("acme", "prepaid")
        admin_a.grant("acme", 10, "g1")
        self.assertTrue(check(self.a, "acme", cost=3)[0]["allowed"])
        self.a.server.kill()
        self.b.server.kill()
        fresh = Admin(self, self.service(), check_openapi=False)
        credits = fresh.usage("acme")["credits"]
        self.assertEqual((credits["quota"], credits["used"]), (10, 3))
        self.assertEqual(fresh.grant("acme", 10, "g1")[1].get("idempotent-replayed"), "true")


if __name__ == "__main__":
    unittest.main()
