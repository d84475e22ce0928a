"""envoyproxy/ratelimit's own configuration files (envoy.ratelimit_config, docs/gateways.md) served
by sluice's Rate Limit Service, against a real gRPC client: domains, nested descriptors, key-only
and wildcard values, units, unlimited, shadow_mode, replaces, per-descriptor limit overrides and
hits_addend, every descriptor of a request decided all-or-nothing; on the memory store and on
Redis (two instances, store failures)."""
import json
import os
import signal
import subprocess
import time
import unittest

import harness
import test_redis
from test_grpc import OK, OVER_LIMIT, Client, grpc, headers, rls

from google.protobuf import json_format  # found where test_grpc found grpc

Unit = rls.RateLimitResponse.RateLimit

# Written in envoyproxy/ratelimit's format, as its users have them.
EDGE = """
domain: edge
descriptors:
  - key: remote_address
    rate_limit:
      unit: minute
      requests_per_unit: 3
  - key: path
    value: /login
    rate_limit:
      name: login
      unit: minute
      requests_per_unit: 2
  - key: path
    value: /api/*
    rate_limit:
      unit: hour
      requests_per_unit: 4
  - key: path
    value: /health
    rate_limit:
      unlimited: true
  - key: path
    value: /beta
    shadow_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 1
  - key: tenant
    descriptors:
      - key: tier
        value: gold
        rate_limit:
          unit: day
          requests_per_unit: 5
      - key: tier
        rate_limit:
          unit: year
          requests_per_unit: 7
"""

REPLACING = """
domain: billing
descriptors:
  - key: account
    rate_limit:
      name: per_account
      unit: second
      requests_per_unit: 100
  - key: account
    value: big
    rate_limit:
      name: big_account
      unit: minute
      requests_per_unit: 2
      replaces:
        - name: per_account
"""

# A star anywhere in a value, as envoyproxy/ratelimit matches it.
WILD = """
domain: wild
descriptors:
  - key: path
    value: /api/*/action
    rate_limit:
      unit: minute
      requests_per_unit: 2
  - key: path
    value: "*.pdf"
    rate_limit:
      unit: minute
      requests_per_unit: 1
  - key: route
    value: foo*bar*baz
    share_threshold: true
    rate_limit:
      unit: minute
      requests_per_unit: 1
"""

# Two quota buckets a call may take from, and an ordinary rule beside them.
QUOTAS = """
domain: quotas
descriptors:
  - key: bucket
    value: small
    quota_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 1
    metadata:
      bucket:
        name: small
      small_only: yes
  - key: bucket
    value: large
    quota_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 2
    metadata:
      bucket:
        name: large
        size: 2
  - key: client
    rate_limit:
      unit: minute
      requests_per_unit: 5
"""

PLANS = """
plans:
  free:
    limits:
      - { name: per_minute, quota: 3, window: 1m }
keys:
  - { key: key-free, subject: user-1, plan: free }
"""


def request(domain, *descriptors, hits_addend=0):
    """A RateLimitRequest of `domain`; each descriptor a list of (key, value), or a dict
    {"entries": [...], "addend": n, "limit": (requests_per_unit, unit)}."""
    req = rls.RateLimitRequest(domain=domain, hits_addend=hits_addend)
    for d in descriptors:
        spec = d if isinstance(d, dict) else {"entries": d}
        desc = req.descriptors.add()
        for key, value in spec["entries"]:
            desc.entries.add(key=key, value=value)
        if "addend" in spec:
            desc.hits_addend.SetInParent()
            desc.hits_addend.value = spec["addend"]
        if "limit" in spec:
            desc.limit.requests_per_unit, desc.limit.unit = spec["limit"]
    return req


def write_rules(directory, files):
    rules = os.path.join(directory, "ratelimit")
    os.makedirs(rules, exist_ok=True)
    for name, text in files.items():
        with open(os.path.join(rules, name), "w") as f:
            f.write(text)
    return rules


def envoy_yaml(rules, dynamic_metadata=False):
    text = f"envoy:\n  ratelimit_config: {json.dumps(rules)}\n"
    if dynamic_metadata:
        text += "  response_dynamic_metadata: true\n"
    return text


BUCKETS = ([("bucket", "small")], [("bucket", "large")])


class RatelimitConfigTest(unittest.TestCase):
    def setUp(self):
        # A few requests a minute: stay clear of the minute's end.
        harness.clear_of_window_end(60, 15)
        d = harness.tempdir()
        self.addCleanup(d.cleanup)
        self.rules = write_rules(d.name, {"edge.yaml": EDGE, "billing.yml": REPLACING,
                                          "wild.yaml": WILD, "quotas.yaml": QUOTAS})
        self.grpc_port = harness.free_port()
        self.svc = harness.Service(PLANS + envoy_yaml(self.rules), d.name,
                                   extra_server=f'  grpc_listen: "127.0.0.1:{self.grpc_port}"\n')
        self.svc.__enter__()
        self.addCleanup(self.svc.__exit__)
        self.client = Client(self.grpc_port)
        self.addCleanup(self.client.close)

    def call(self, *args, **kwargs):
        return self.client.call(request(*args, **kwargs), timeout=10)

    def test_a_key_only_rule_counts_each_value_apart(self):
        for remaining in (2, 1, 0):
            res = self.call("edge", [("remote_address", "10.0.0.1")])
            self.assertEqual(res.overall_code, OK)
            (s,) = res.statuses
            self.assertEqual((s.code, s.limit_remaining), (OK, remaining))
            self.assertEqual(s.current_limit.requests_per_unit, 3)
            self.assertEqual(s.current_limit.unit, Unit.MINUTE)
            self.assertTrue(0 < s.duration_until_reset.seconds <= 60)
        res = self.call("edge", [("remote_address", "10.0.0.1")])
        self.assertEqual((res.overall_code, res.statuses[0].code), (OVER_LIMIT, OVER_LIMIT))
        h = headers(res)
        self.assertTrue(1 <= int(h["Retry-After"]) <= 60)
        body = json.loads(res.raw_body)
        self.assertEqual(body["status"], 429)
        # Another address has a counter of its own.
        res = self.call("edge", [("remote_address", "10.0.0.2")])
        self.assertEqual((res.overall_code, res.statuses[0].limit_remaining), (OK, 2))

    def test_an_exact_value_and_a_wildcard_value(self):
        for _ in range(2):
            self.assertEqual(self.call("edge", [("path", "/login")]).overall_code, OK)
        res = self.call("edge", [("path", "/login")])
        self.assertEqual(res.overall_code, OVER_LIMIT)
        self.assertEqual(res.statuses[0].current_limit.name, "login")
        self.assertEqual(json.loads(res.raw_body)["violated-policies"], ["login"])
        self.assertIn('"login";q=2;w=60', headers(res)["RateLimit-Policy"])
        # /api/* : 4 an hour, per path (the request's value is the counter's).
        for remaining in (3, 2, 1, 0):
            res = self.call("edge", [("path", "/api/orders")])
            self.assertEqual(res.statuses[0].limit_remaining, remaining)
            self.assertEqual(res.statuses[0].current_limit.unit, Unit.HOUR)
        self.assertEqual(self.call("edge", [("path", "/api/orders")]).overall_code, OVER_LIMIT)
        self.assertEqual(self.call("edge", [("path", "/api/users")]).overall_code, OK)
        # A value no rule names, and a key no rule names: no limit.
        for entries in ([("path", "/other")], [("user_agent", "curl")]):
            res = self.call("edge", entries)
            self.assertEqual(res.overall_code, OK)
            self.assertFalse(res.statuses[0].HasField("current_limit"))

    def test_unlimited_is_never_counted(self):
        for _ in range(10):
            res = self.call("edge", [("path", "/health")])
            self.assertEqual((res.overall_code, res.statuses[0].code), (OK, OK))
            self.assertFalse(res.statuses[0].HasField("current_limit"))

    def test_shadow_mode_counts_and_reports_but_never_denies(self):
        res = self.call("edge", [("path", "/beta")])
        self.assertNotIn("Sluice-Shadow-Denied", headers(res))
        for _ in range(3):
            res = self.call("edge", [("path", "/beta")])
            self.assertEqual((res.overall_code, res.statuses[0].code), (OK, OK))
            self.assertEqual(headers(res)["Sluice-Shadow-Denied"], "edge.path_/beta")
        lines = test_redis.metric_lines(self.svc, "sluice_shadow_denials_total{")
        self.assertEqual([line.rsplit(" ", 1)[1] for line in lines], ["3"])
        rule = 'domain="edge",rule="edge.path_/beta"'
        lines = test_redis.metric_lines(self.svc, "sluice_ratelimit_rule_hits_total{")
        self.assertIn(f'sluice_ratelimit_rule_hits_total{{{rule},result="ok"}} 1', lines)
        self.assertIn(f'sluice_ratelimit_rule_hits_total{{{rule},result="shadow_over_limit"}} 3',
                      lines)

    def test_nested_descriptors_and_calendar_units(self):
        res = self.call("edge", [("tenant", "acme"), ("tier", "gold")])
        s = res.statuses[0]
        self.assertEqual((s.current_limit.unit, s.current_limit.requests_per_unit), (Unit.DAY, 5))
        self.assertEqual(s.limit_remaining, 4)
        # A calendar day in UTC: it resets at the next midnight UTC.
        midnight = (int(time.time()) // 86400 + 1) * 86400
        self.assertAlmostEqual(s.duration_until_reset.seconds, midnight - time.time(), delta=5)
        res = self.call("edge", [("tenant", "acme"), ("tier", "silver")])
        s = res.statuses[0]
        self.assertEqual((s.current_limit.unit, s.current_limit.requests_per_unit), (Unit.YEAR, 7))
        # Only the tenant: the tree has no rule at that depth.
        res = self.call("edge", [("tenant", "acme")])
        self.assertFalse(res.statuses[0].HasField("current_limit"))

    def test_descriptors_of_one_request_are_decided_all_or_nothing(self):
        both = ([("remote_address", "10.9.9.9")], [("path", "/login")])
        for _ in range(2):
            res = self.call("edge", *both)
            self.assertEqual([s.code for s in res.statuses], [OK, OK])
        res = self.call("edge", *both)
        self.assertEqual(res.overall_code, OVER_LIMIT)
        self.assertEqual([s.code for s in res.statuses], [OK, OVER_LIMIT])
        # The address's counter took nothing from the denied request: 3 - 2 = 1 left.
        self.assertEqual(res.statuses[0].limit_remaining, 1)
        res = self.call("edge", [("remote_address", "10.9.9.9")])
        self.assertEqual((res.overall_code, res.statuses[0].limit_remaining), (OK, 0))

    def test_a_repeated_descriptor_counts_twice(self):
        res = self.call("edge", [("remote_address", "10.7.7.7")], [("remote_address", "10.7.7.7")])
        self.assertEqual([s.limit_remaining for s in res.statuses], [1, 1])
        res = self.call("edge", [("remote_address", "10.7.7.7")], [("remote_address", "10.7.7.7")])
        self.assertEqual(res.overall_code, OVER_LIMIT)

    def test_hits_addend_request_and_descriptor_and_zero_peeks(self):
        res = self.call("edge", [("remote_address", "10.1.1.1")], hits_addend=2)
        self.assertEqual(res.statuses[0].limit_remaining, 1)
        for _ in range(3):
            res = self.call("edge", {"entries": [("remote_address", "10.1.1.1")], "addend": 0})
            self.assertEqual((res.overall_code, res.statuses[0].limit_remaining), (OK, 1))
        res = self.call("edge", {"entries": [("remote_address", "10.1.1.1")], "addend": 2})
        self.assertEqual(res.overall_code, OVER_LIMIT)
        # Per descriptor: one of cost 1 fits beside a peek.
        res = self.call("edge", {"entries": [("remote_address", "10.1.1.1")], "addend": 1},
                        {"entries": [("path", "/login")], "addend": 0})
        self.assertEqual(res.overall_code, OK)
        self.assertEqual([s.limit_remaining for s in res.statuses], [0, 2])

    def test_a_descriptor_limit_overrides_the_configured_one(self):
        override = {"entries": [("remote_address", "10.3.3.3")], "limit": (1, Unit.MINUTE)}
        res = self.call("edge", override)
        self.assertEqual(res.overall_code, OK)
        self.assertEqual(res.statuses[0].current_limit.requests_per_unit, 1)
        self.assertEqual(self.call("edge", override).overall_code, OVER_LIMIT)
        # Also where no rule matches.
        free = {"entries": [("user_agent", "bot")], "limit": (1, Unit.HOUR)}
        self.assertEqual(self.call("edge", free).overall_code, OK)
        self.assertEqual(self.call("edge", free).overall_code, OVER_LIMIT)

    def test_replaces_drops_the_replaced_limit_from_the_whole_request(self):
        # Alone, a small account is limited by per_account.
        res = self.call("billing", [("account", "small")])
        self.assertEqual(res.statuses[0].current_limit.name, "per_account")
        self.assertEqual(res.statuses[0].limit_remaining, 99)
        # Beside a rule that replaces it, per_account is not decided (nor counted).
        res = self.call("billing", [("account", "big")], [("account", "small")])
        self.assertEqual(res.statuses[0].current_limit.name, "big_account")
        self.assertFalse(res.statuses[1].HasField("current_limit"))
        self.assertEqual(self.call("billing", [("account", "big")]).overall_code, OK)
        self.assertEqual(self.call("billing", [("account", "big")]).overall_code, OVER_LIMIT)

    def test_a_star_anywhere_in_a_value_matches_any_run(self):
        for remaining in (1, 0):
            res = self.call("wild", [("path", "/api/v1/action")])
            self.assertEqual((res.overall_code, res.statuses[0].limit_remaining), (OK, remaining))
        self.assertEqual(self.call("wild", [("path", "/api/v1/action")]).overall_code, OVER_LIMIT)
        # Each value its own counter; a value the pattern does not match has no limit.
        self.assertEqual(self.call("wild", [("path", "/api/v2/action")]).overall_code, OK)
        res = self.call("wild", [("path", "/api/v2/other")])
        self.assertFalse(res.statuses[0].HasField("current_limit"))
        # A leading star.
        self.assertEqual(self.call("wild", [("path", "/docs/a.pdf")]).overall_code, OK)
        self.assertEqual(self.call("wild", [("path", "/docs/a.pdf")]).overall_code, OVER_LIMIT)
        # Several stars, in order, with share_threshold: one counter for every value matched.
        res = self.call("wild", [("route", "foo-1-bar-1-baz")])
        self.assertEqual((res.overall_code, res.statuses[0].current_limit.requests_per_unit),
                         (OK, 1))
        self.assertEqual(self.call("wild", [("route", "foo2bar2baz")]).overall_code, OVER_LIMIT)
        res = self.call("wild", [("route", "foo-baz-bar")])
        self.assertFalse(res.statuses[0].HasField("current_limit"))

    def test_an_over_limit_status_has_nothing_remaining(self):
        # 3 a minute and a call of 5: OVER_LIMIT with 0 left, though nothing is used. The other
        # descriptor took nothing from the denied call: its status says what it still has.
        res = self.call("edge", {"entries": [("remote_address", "10.6.6.6")], "addend": 5},
                        [("path", "/login")])
        self.assertEqual(res.overall_code, OVER_LIMIT)
        self.assertEqual([(s.code, s.limit_remaining) for s in res.statuses],
                         [(OVER_LIMIT, 0), (OK, 2)])

    def test_a_descriptor_without_entries_is_answered_ok(self):
        res = self.call("edge", [])
        self.assertEqual((res.overall_code, res.statuses[0].code), (OK, OK))
        self.assertFalse(res.statuses[0].HasField("current_limit"))
        res = self.call("edge", [], [("remote_address", "10.5.5.5")])
        self.assertEqual([s.code for s in res.statuses], [OK, OK])
        self.assertEqual(res.statuses[1].limit_remaining, 2)

    def test_quota_mode_denies_only_when_every_bucket_is_spent(self):
        call = (*BUCKETS, [("client", "c1")])
        res = self.call("quotas", *call)
        self.assertEqual(res.overall_code, OK)
        self.assertEqual([(s.code, s.limit_remaining) for s in res.statuses],
                         [(OK, 0), (OK, 1), (OK, 4)])
        # The small bucket is spent, the large one admits the call; both are counted.
        res = self.call("quotas", *call)
        self.assertEqual(res.overall_code, OK)
        self.assertEqual([(s.code, s.limit_remaining) for s in res.statuses],
                         [(OVER_LIMIT, 0), (OK, 0), (OK, 3)])
        self.assertNotIn("Sluice-Shadow-Denied", headers(res))
        # Both spent: denied, and nothing counted (the client's counter stays at 2 used).
        res = self.call("quotas", *call)
        self.assertEqual(res.overall_code, OVER_LIMIT)
        self.assertEqual([(s.code, s.limit_remaining) for s in res.statuses],
                         [(OVER_LIMIT, 0), (OVER_LIMIT, 0), (OK, 3)])
        self.assertEqual(self.call("quotas", [("client", "c1")]).statuses[0].limit_remaining, 2)
        rule = 'domain="quotas",rule="quotas.bucket_small"'
        lines = test_redis.metric_lines(self.svc, "sluice_ratelimit_rule_hits_total{")
        self.assertIn(f'sluice_ratelimit_rule_hits_total{{{rule},result="over_limit"}} 2', lines)
        # Four calls, four decisions, though the second was decided twice.
        self.assertEqual(test_redis.metric_lines(self.svc, "sluice_decision_duration_seconds_count"),
                         ["sluice_decision_duration_seconds_count 4"])
        lines = test_redis.metric_lines(self.svc, "sluice_decisions_total{")
        self.assertEqual(sum(int(line.rsplit(" ", 1)[1]) for line in lines), 4)
        # Without dynamic metadata asked for, none is sent.
        self.assertFalse(res.HasField("dynamic_metadata"))

    def test_quota_mode_does_not_save_a_call_another_rule_denies(self):
        res = self.call("quotas", *BUCKETS,
                        {"entries": [("client", "c2")], "addend": 0},
                        {"entries": [("client", "c3")], "limit": (0, Unit.MINUTE)})
        self.assertEqual(res.overall_code, OVER_LIMIT)
        self.assertEqual([s.code for s in res.statuses], [OK, OK, OK, OVER_LIMIT])
        # The buckets took nothing from the denied call.
        res = self.call("quotas", BUCKETS[0])
        self.assertEqual((res.overall_code, res.statuses[0].limit_remaining), (OK, 0))

    def test_rule_subjects_are_reserved(self):
        status, _, body = self.svc.check({"subject": "rl:edge/remote_address=10.0.0.1",
                                          "plan": "free"})
        self.assertEqual(status, 400)
        self.assertIn("reserved", body["detail"])

    def test_a_domain_without_rules_is_read_by_sluice_mapping(self):
        res = self.call("other", [("api_key", "key-free")])
        self.assertEqual(res.overall_code, OK)
        self.assertEqual(headers(res)["Sluice-Subject"], "user-1")
        with self.assertRaises(grpc.RpcError) as caught:
            self.call("other", [("remote_address", "10.0.0.1")])
        self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)

    def test_a_reload_applies_changed_rules_and_refuses_broken_ones(self):
        write_rules(os.path.dirname(self.rules), {"edge.yaml": EDGE.replace(
            "requests_per_unit: 3", "requests_per_unit: 30")})
        self.svc.server.proc.send_signal(signal.SIGHUP)
        self.svc.server.wait_for_line("configuration reloaded")
        res = self.call("edge", [("remote_address", "10.4.4.4")])
        self.assertEqual(res.statuses[0].current_limit.requests_per_unit, 30)
        write_rules(os.path.dirname(self.rules), {"edge.yaml": EDGE + "bogus: 1\n"})
        self.svc.server.proc.send_signal(signal.SIGHUP)
        self.svc.server.wait_for_line("reload refused")
        res = self.call("edge", [("remote_address", "10.4.4.4")])
        self.assertEqual(res.statuses[0].current_limit.requests_per_unit, 30)


class RatelimitConfigErrorsTest(unittest.TestCase):
    def check_config(self, files):
        d = harness.tempdir()
        self.addCleanup(d.cleanup)
        rules = write_rules(d.name, files)
        path = harness.write_config(d.name, PLANS + envoy_yaml(rules))
        return subprocess.run([harness.SLUICE_BIN, "check-config", "-c", path],
                              capture_output=True, text=True, timeout=30)

    def test_check_config_accepts_the_files_and_names_a_broken_one(self):
        self.assertEqual(self.check_config({"edge.yaml": EDGE}).returncode, 0)
        cases = {
            "unknown key": EDGE + "extra: 1\n",
            "unknown unit": EDGE.replace("unit: hour", "unit: fortnight"),
            "no domain": "descriptors: []\n",
        }
        for what, text in cases.items():
            with self.subTest(what):
                done = self.check_config({"ok.yaml": REPLACING, "bad.yaml": text})
                self.assertNotEqual(done.returncode, 0)
                self.assertIn("bad.yaml", done.stderr + done.stdout)

    def test_check_config_accepts_quota_mode_metadata_and_stars_anywhere(self):
        done = self.check_config({"quotas.yaml": QUOTAS, "wild.yaml": WILD})
        self.assertEqual(done.returncode, 0, done.stderr + done.stdout)
        done = self.check_config({"bad.yaml": WILD.replace("value: foo*bar*baz", "value: foo")})
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("share_threshold", done.stderr + done.stdout)

    def test_two_files_of_one_domain_are_refused(self):
        done = self.check_config({"a.yaml": EDGE, "b.yaml": EDGE})
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("edge", done.stderr + done.stdout)


class RatelimitDynamicMetadataTest(unittest.TestCase):
    """envoy.response_dynamic_metadata: true, as envoyproxy/ratelimit's
    RESPONSE_DYNAMIC_METADATA=true."""

    def setUp(self):
        harness.clear_of_window_end(60, 15)
        d = harness.tempdir()
        self.addCleanup(d.cleanup)
        rules = write_rules(d.name, {"quotas.yaml": QUOTAS})
        grpc_port = harness.free_port()
        self.svc = harness.Service(PLANS + envoy_yaml(rules, dynamic_metadata=True), d.name,
                                   extra_server=f'  grpc_listen: "127.0.0.1:{grpc_port}"\n')
        self.svc.__enter__()
        self.addCleanup(self.svc.__exit__)
        self.client = Client(grpc_port)
        self.addCleanup(self.client.close)

    def call(self, *args, **kwargs):
        return self.client.call(request(*args, **kwargs), timeout=10)

    def test_the_request_and_the_metadata_of_the_rules_that_let_it_pass(self):
        res = self.call("quotas", *BUCKETS, [("client", "c1"), ("tier", "x")], hits_addend=1)
        meta = json_format.MessageToDict(res.dynamic_metadata)
        self.assertEqual(meta["domain"], "quotas")
        self.assertEqual(meta["hitsAddend"], 1)
        self.assertEqual([d["entries"] for d in meta["descriptors"]],
                         [["bucket=small"], ["bucket=large"], ["client=c1", "tier=x"]])
        # Both buckets passed: merged in request order, the first value of a key kept.
        self.assertEqual(meta["metadata"], {"bucket": {"name": "small", "size": 2},
                                             "small_only": True})
        # The small bucket is spent: only the large one's metadata is sent.
        res = self.call("quotas", *BUCKETS)
        self.assertEqual(res.overall_code, OK)
        meta = json_format.MessageToDict(res.dynamic_metadata)
        self.assertEqual(meta["metadata"], {"bucket": {"name": "large", "size": 2}})
        self.assertNotIn("hitsAddend", meta)
        # Both spent: the request is described, no rule passed.
        res = self.call("quotas", *BUCKETS)
        self.assertEqual(res.overall_code, OVER_LIMIT)
        meta = json_format.MessageToDict(res.dynamic_metadata)
        self.assertEqual(meta["domain"], "quotas")
        self.assertNotIn("metadata", meta)

    def test_an_override_and_a_descriptor_hits_addend_are_described(self):
        res = self.call("quotas", {"entries": [("client", "c9")], "limit": (7, Unit.HOUR),
                                   "addend": 2})
        meta = json_format.MessageToDict(res.dynamic_metadata)
        (d,) = meta["descriptors"]
        self.assertEqual(d, {"entries": ["client=c9"], "limit": "requests_per_unit:7 unit:HOUR",
                             "hitsAddend": 2})


class RatelimitConfigRedisTest(unittest.TestCase):
    """Through Redis: exact across two instances, and store failures under on_store_error."""

    def service(self, port, rules, policy="allow", timeout="20ms"):
        d = harness.tempdir()
        self.addCleanup(d.cleanup)
        grpc_port = harness.free_port()
        body = test_redis.redis_yaml(port, policy, timeout) + PLANS + envoy_yaml(rules)
        svc = harness.Service(body, d.name,
                              extra_server=f'  grpc_listen: "127.0.0.1:{grpc_port}"\n')
        svc.__enter__()
        self.addCleanup(svc.__exit__)
        client = Client(grpc_port)
        self.addCleanup(client.close)
        return svc, client

    def rules(self, text):
        d = harness.tempdir()
        self.addCleanup(d.cleanup)
        return write_rules(d.name, {"r.yaml": text})

    def test_two_instances_on_one_redis_admit_exactly_the_quota(self):
        redis = test_redis.RedisServer().start()
        self.addCleanup(redis.close)
        rules = self.rules("domain: hot\ndescriptors:\n  - key: route\n    rate_limit:\n"
                           "      unit: minute\n      requests_per_unit: 60\n")
        (a, ca), (b, cb) = (self.service(redis.port, rules, timeout="500ms"),
                            self.service(redis.port, rules, timeout="500ms"))
        for svc in (a, b):
            test_redis.RedisStoreTest.warm(self, svc)
        harness.clear_of_window_end(60, 20)
        req = request("hot", [("route", "/search")], [("client", "c1")])
        futures = [(ca if i % 2 else cb).call.future(req, timeout=30) for i in range(400)]
        results = [f.result() for f in futures]
        allowed = sum(1 for r in results if r.overall_code == OK)
        self.assertEqual(allowed, 60)
        self.assertEqual(400 - allowed, sum(1 for r in results if r.overall_code == OVER_LIMIT))
        self.assertFalse(any("Sluice-Degraded" in headers(r) for r in results))

    def test_a_rule_of_zero_refuses_without_degrading_and_consumes_nothing(self):
        redis = test_redis.RedisServer().start()
        self.addCleanup(redis.close)
        rules = self.rules("domain: z\ndescriptors:\n  - key: ip\n    value: 6.6.6.6\n"
                           "    rate_limit: { unit: second, requests_per_unit: 0 }\n"
                           "  - key: route\n    rate_limit: { unit: hour, requests_per_unit: 5 }\n")
        svc, client = self.service(redis.port, rules, timeout="500ms")
        test_redis.RedisStoreTest.warm(self, svc)
        res = client.call(request("z", [("ip", "6.6.6.6")], [("route", "/r")]), timeout=10)
        self.assertEqual(res.overall_code, OVER_LIMIT)
        self.assertEqual([s.code for s in res.statuses], [OVER_LIMIT, OK])
        self.assertNotIn("Sluice-Degraded", headers(res))
        res = client.call(request("z", [("route", "/r")]), timeout=10)
        self.assertEqual((res.overall_code, res.statuses[0].limit_remaining), (OK, 4))

    def test_quota_mode_on_redis_decides_again_without_the_spent_bucket(self):
        redis = test_redis.RedisServer().start()
        self.addCleanup(redis.close)
        svc, client = self.service(redis.port, self.rules(QUOTAS), timeout="500ms")
        test_redis.RedisStoreTest.warm(self, svc)
        harness.clear_of_window_end(60, 15)
        codes = []
        for _ in range(4):
            res = client.call(request("quotas", *BUCKETS), timeout=10)
            codes.append((res.overall_code, [s.code for s in res.statuses]))
        self.assertEqual(codes, [(OK, [OK, OK]), (OK, [OVER_LIMIT, OK]),
                                 (OVER_LIMIT, [OVER_LIMIT, OVER_LIMIT]),
                                 (OVER_LIMIT, [OVER_LIMIT, OVER_LIMIT])])
        self.assertNotIn("Sluice-Degraded", headers(res))

    def test_a_failing_store_follows_on_store_error(self):
        redis = test_redis.RedisServer().start()
        redis.close()  # nothing listens there now: every decision fails
        rules = self.rules(EDGE)
        for policy, want in (("allow", OK), ("deny", OVER_LIMIT)):
            with self.subTest(policy):
                _, client = self.service(redis.port, rules, policy)
                for i in range(5):
                    start = time.monotonic()
                    res = client.call(request("edge", [("remote_address", f"10.8.0.{i}")]),
                                      timeout=10)
                    # 20 ms store timeout, plus a margin for an ASan build on a loaded machine.
                    self.assertLess(time.monotonic() - start, 0.020 + 0.300)
                    self.assertEqual(res.overall_code, want)
                    # Each descriptor's code says the same as the overall one.
                    self.assertEqual([st.code for st in res.statuses], [want])
                    self.assertEqual(headers(res)["Sluice-Degraded"], "1")
                if want == OVER_LIMIT:
                    self.assertEqual(json.loads(res.raw_body)["status"], 503)
                # A call of shadow rules alone never denies, not even degraded under deny.
                res = client.call(request("edge", [("path", "/beta")]), timeout=10)
                self.assertEqual(res.overall_code, OK)
                self.assertEqual(headers(res)["Sluice-Degraded"], "1")


if __name__ == "__main__":
    unittest.main()
