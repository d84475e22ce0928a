"""The Envoy Rate Limit Service v3 front end (server.grpc_listen, docs/gateways.md) against a real
gRPC client: python3-grpcio, with the message classes protoc generates from the project's own
proto/ files at test time."""
import concurrent.futures
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

try:
    import grpc
except ImportError:
    # python3-grpcio and python3-protobuf install into Debian's dist-packages, which a python3 of
    # another origin (pyenv, a virtualenv) does not search; same minor version, same ABI.
    sys.path.append("/usr/lib/python3/dist-packages")
    import grpc

import harness
import test_redis

METHOD = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
PROTOS = ["envoy/config/core/v3/base.proto",
          "envoy/extensions/common/ratelimit/v3/ratelimit.proto",
          "envoy/service/ratelimit/v3/rls.proto",
          "envoy/type/v3/ratelimit_unit.proto"]


def _generate_messages():
    """protoc --python_out of proto/ into a temporary directory; returns the rls_pb2 module."""
    out = tempfile.mkdtemp(prefix="sluice-pb-")
    proto_dir = os.path.join(harness.SOURCE_DIR, "proto")
    subprocess.run(["protoc", "-I", proto_dir, f"--python_out={out}",
                    *[os.path.join(proto_dir, p) for p in PROTOS]], check=True)
    sys.path.insert(0, out)
    from envoy.service.ratelimit.v3 import rls_pb2
    return rls_pb2


rls = _generate_messages()
OK = rls.RateLimitResponse.OK
OVER_LIMIT = rls.RateLimitResponse.OVER_LIMIT

PLANS = """
plans:
  free:
    limits:
      - { name: per_minute, quota: 3, window: 1m }
      - { name: daily, quota: 1000, window: day }
  wide:
    limits:
      - { name: per_minute, quota: 60, window: 1m }
keys:
  - { key: key-free, subject: user-1, plan: free }
"""


class Client:
    """A channel to one sluice and its ShouldRateLimit stub (the small hand-written client)."""

    def __init__(self, port):
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self.call = self.channel.unary_unary(
            METHOD, request_serializer=rls.RateLimitRequest.SerializeToString,
            response_deserializer=rls.RateLimitResponse.FromString)
        # Raw bytes, for requests that are not a valid message.
        self.raw = self.channel.unary_unary(METHOD, request_serializer=None,
                                            response_deserializer=rls.RateLimitResponse.FromString)

    def close(self):
        self.channel.close()


def request(*descriptors, hits_addend=0, domain="edge"):
    """A RateLimitRequest of descriptors given as lists of (key, value), or as (entries, addend)
    pairs for a descriptor-level hits_addend."""
    req = rls.RateLimitRequest(domain=domain, hits_addend=hits_addend)
    for d in descriptors:
        addend = None
        if isinstance(d, tuple):
            d, addend = d
        desc = req.descriptors.add()
        for key, value in d:
            desc.entries.add(key=key, value=value)
        if addend is not None:
            desc.hits_addend.SetInParent()  # present even when the value is 0
            desc.hits_addend.value = addend
    return req


def headers(res):
    return {h.key: h.value for h in res.response_headers_to_add}


class GrpcCase(unittest.TestCase):
    def start(self, body=PLANS, extra_server=""):
        d = harness.tempdir()
        self.addCleanup(d.cleanup)
        self.grpc_port = harness.free_port()
        svc = harness.Service(body, d.name,
                              extra_server=f'  grpc_listen: "127.0.0.1:{self.grpc_port}"\n' +
                              extra_server)
        svc.__enter__()
        self.addCleanup(svc.__exit__)
        client = Client(self.grpc_port)
        self.addCleanup(client.close)
        return svc, client


class RateLimitServiceTest(GrpcCase):
    def setUp(self):
        # Three requests a minute: stay clear of the minute's end.
        harness.clear_of_window_end(60, 15)
        self.svc, self.client = self.start()

    def test_allowed_until_the_quota_then_over_limit_with_a_status_per_descriptor(self):
        req = request([("generic_key", "edge"), ("api_key", "key-free")], [("path", "/orders")])
        for remaining in (2, 1, 0):
            res = self.client.call(req, timeout=10)
            self.assertEqual(res.overall_code, OK)
            self.assertEqual(len(res.statuses), 2)
            for s in res.statuses:
                self.assertEqual(s.code, OK)
                self.assertEqual(s.current_limit.name, "per_minute")
                self.assertEqual(s.current_limit.requests_per_unit, 3)
                self.assertEqual(s.current_limit.unit, rls.RateLimitResponse.RateLimit.MINUTE)
                self.assertEqual(s.limit_remaining, remaining)
                self.assertTrue(0 < s.duration_until_reset.seconds <= 60)
            h = headers(res)
            self.assertEqual(h["Sluice-Subject"], "user-1")
            self.assertEqual(h["Sluice-Plan"], "free")
            self.assertIn('"per_minute";q=3;w=60', h["RateLimit-Policy"])
            self.assertIn(f'"per_minute";r={remaining}', h["RateLimit"])
            self.assertNotIn("Retry-After", h)
            self.assertEqual(res.raw_body, b"")
        res = self.client.call(req, timeout=10)
        self.assertEqual(res.overall_code, OVER_LIMIT)
        self.assertEqual([s.code for s in res.statuses], [OVER_LIMIT, OVER_LIMIT])
        self.assertEqual(res.statuses[0].limit_remaining, 0)
        h = headers(res)
        self.assertTrue(1 <= int(h["Retry-After"]) <= 60)
        self.assertEqual(h["Content-Type"], "application/problem+json")
        body = json.loads(res.raw_body)
        self.assertEqual(body["status"], 429)
        self.assertEqual(body["violated-policies"], ["per_minute"])
        # The same counters as the HTTP plane's.
        status, _, checked = self.svc.check({"api_key": "key-free", "cost": 0})
        self.assertEqual((status, checked["limits"][0]["remaining"]), (200, 0))

    def test_hits_addend_is_the_cost_and_a_descriptors_overrides_the_requests(self):
        res = self.client.call(request([("api_key", "key-free")], hits_addend=2), timeout=10)
        self.assertEqual(res.statuses[0].limit_remaining, 1)
        res = self.client.call(request(([("api_key", "key-free")], 1), hits_addend=2), timeout=10)
        self.assertEqual(res.statuses[0].limit_remaining, 0)
        res = self.client.call(request([("api_key", "key-free")], hits_addend=0), timeout=10)
        self.assertEqual(res.overall_code, OVER_LIMIT)  # the request's 0 is unset: 1

    def test_a_descriptor_hits_addend_of_zero_peeks(self):
        self.client.call(request([("api_key", "key-free")]), timeout=10)
        for _ in range(3):
            res = self.client.call(request(([("api_key", "key-free")], 0)), timeout=10)
            self.assertEqual((res.overall_code, res.statuses[0].limit_remaining), (OK, 2))

    def test_a_cost_entry_of_zero_peeks(self):
        self.client.call(request([("api_key", "key-free")]), timeout=10)
        for _ in range(3):
            res = self.client.call(request([("api_key", "key-free"), ("cost", "0")]), timeout=10)
            self.assertEqual((res.overall_code, res.statuses[0].limit_remaining), (OK, 2))

    def test_a_subject_and_plan_are_decided_without_a_key(self):
        res = self.client.call(request([("subject", "svc-9"), ("plan", "wide")]), timeout=10)
        self.assertEqual(res.overall_code, OK)
        self.assertEqual(res.statuses[0].limit_remaining, 59)
        self.assertEqual(headers(res)["Sluice-Subject"], "svc-9")
        # A subject alone takes its plan from the config file's keys.
        res = self.client.call(request([("subject", "user-1")]), timeout=10)
        self.assertEqual((res.overall_code, headers(res)["Sluice-Plan"]), (OK, "free"))

    def test_an_unknown_key_is_over_limit_with_a_401_problem(self):
        res = self.client.call(request([("api_key", "nope")]), timeout=10)
        self.assertEqual(res.overall_code, OVER_LIMIT)
        self.assertEqual([s.code for s in res.statuses], [OVER_LIMIT])
        body = json.loads(res.raw_body)
        self.assertEqual((body["status"], body["detail"]), (401, "unknown API key"))
        self.assertEqual(headers(res)["WWW-Authenticate"], "Bearer")

    def test_malformed_requests_are_invalid_argument_naming_the_problem(self):
        cases = [
            (request(), "descriptors: at least one is required"),
            (request([("generic_key", "x")]), 'no entry "api_key" or "subject"'),
            (request([("api_key", "key-free"), ("cost", "many")]), 'entry "cost"'),
            (request(*[[("api_key", "key-free")]] * 65), "descriptors: at most 64"),
            (request([("api_key", "key-free")], [("api_key", "other")]), "different value"),
            (request([("subject", "user-1"), ("plan", "nosuch")]), "plan"),
        ]
        for req, message in cases:
            with self.assertRaises(grpc.RpcError) as caught:
                self.client.call(req, timeout=10)
            self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT, message)
            self.assertIn(message, caught.exception.details())
        # Bytes that are no message at all.
        with self.assertRaises(grpc.RpcError) as caught:
            self.client.raw(b"\xff\xff\xff\xff", timeout=10)
        self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("not a valid envoy.service.ratelimit.v3.RateLimitRequest",
                      caught.exception.details())
        # A message over the size bound is refused by gRPC.
        with self.assertRaises(grpc.RpcError) as caught:
            self.client.call(request([("api_key", "k" * 100_000)]), timeout=10)
        self.assertEqual(caught.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        # And the service goes on answering.
        res = self.client.call(request([("api_key", "key-free")]), timeout=10)
        self.assertEqual(res.overall_code, OK)

    def test_another_method_is_unimplemented(self):
        other = self.client.channel.unary_unary(
            "/envoy.service.ratelimit.v2.RateLimitService/ShouldRateLimit",
            request_serializer=rls.RateLimitRequest.SerializeToString,
            response_deserializer=rls.RateLimitResponse.FromString)
        with self.assertRaises(grpc.RpcError) as caught:
            other(request([("api_key", "key-free")]), timeout=10)
        self.assertEqual(caught.exception.code(), grpc.StatusCode.UNIMPLEMENTED)

    def test_a_reload_applies_new_descriptor_keys(self):
        self.svc.rewrite(PLANS + "envoy:\n  descriptor_keys: { api_key: x-api-key }\n")
        self.svc.server.proc.send_signal(signal.SIGHUP)
        self.svc.server.wait_for_line("configuration reloaded")
        res = self.client.call(request([("x-api-key", "key-free")]), timeout=10)
        self.assertEqual((res.overall_code, headers(res)["Sluice-Subject"]), (OK, "user-1"))
        with self.assertRaises(grpc.RpcError) as caught:
            self.client.call(request([("api_key", "key-free")]), timeout=10)
        self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)

    def test_calls_are_counted_by_outcome(self):
        self.client.call(request([("api_key", "key-free")]), timeout=10)
        self.client.call(request([("api_key", "nope")]), timeout=10)
        with self.assertRaises(grpc.RpcError):
            self.client.call(request(), timeout=10)
        lines = test_redis.metric_lines(self.svc, "sluice_grpc_requests_total{")
        self.assertIn('sluice_grpc_requests_total{code="ok"} 1', lines)
        self.assertIn('sluice_grpc_requests_total{code="over_limit"} 1', lines)
        self.assertIn('sluice_grpc_requests_total{code="invalid_argument"} 1', lines)

    def test_a_call_cancelled_before_its_request_is_counted_cancelled(self):
        stream = self.client.channel.stream_unary(
            METHOD, request_serializer=rls.RateLimitRequest.SerializeToString,
            response_deserializer=rls.RateLimitResponse.FromString)
        release = threading.Event()

        def no_request():
            release.wait(30)
            yield from ()

        pending = stream.future(no_request(), timeout=30)
        self.addCleanup(release.set)
        # HTTP/2 frames are read in order: once a later call on the same connection is answered,
        # sluice has the first call, still waiting for its request. The client then resets it.
        peek = request([("api_key", "key-free"), ("cost", "0")])
        self.assertEqual(self.client.call(peek, timeout=10).overall_code, OK)
        self.assertTrue(pending.cancel())
        release.set()

        def counts():
            lines = test_redis.metric_lines(self.svc, "sluice_grpc_requests_total{")
            return {line.split('"')[1]: float(line.split()[-1]) for line in lines}

        deadline = time.monotonic() + 10
        while counts().get("cancelled", 0) == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertEqual(counts().get("cancelled"), 1)
        self.assertEqual(counts().get("invalid_argument", 0), 0)
        # A call the client closes without sending its request is the client's error.
        with self.assertRaises(grpc.RpcError) as caught:
            stream(iter([]), timeout=10)
        self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("request: no message", caught.exception.details())
        self.assertEqual((counts().get("invalid_argument"), counts().get("cancelled")), (1, 1))


class GrpcShutdownTest(GrpcCase):
    def test_sigterm_keeps_answering_through_shutdown_delay_then_stops(self):
        svc, client = self.start(extra_server="  shutdown_delay: 1s\n")
        req = request([("api_key", "key-free"), ("cost", "0")])
        self.assertEqual(client.call(req, timeout=10).overall_code, OK)
        svc.server.proc.send_signal(signal.SIGTERM)
        svc.server.wait_for_line("readiness now fails")
        # Decisions go on until load balancers have noticed.
        self.assertEqual(client.call(req, timeout=10).overall_code, OK)
        self.assertEqual(svc.server.proc.wait(timeout=15), 0)
        with self.assertRaises(grpc.RpcError) as caught:
            client.call(req, timeout=2)
        self.assertEqual(caught.exception.code(), grpc.StatusCode.UNAVAILABLE)


class GrpcPortTest(GrpcCase):
    def test_a_second_instance_on_the_same_grpc_address_refuses_to_start(self):
        self.start()
        d = harness.tempdir()
        self.addCleanup(d.cleanup)
        second = harness.Service(PLANS, d.name,
                                 extra_server=f'  grpc_listen: "127.0.0.1:{self.grpc_port}"\n')
        server = harness.Server(second.config_path)
        self.addCleanup(server.kill)
        server.wait_for_line("cannot start the gRPC rate limit service")
        self.assertEqual(server.proc.wait(timeout=10), 1)


class GrpcOffTest(unittest.TestCase):
    def test_without_grpc_listen_nothing_listens(self):
        d = harness.tempdir()
        self.addCleanup(d.cleanup)
        svc = harness.Service(PLANS, d.name)
        svc.__enter__()
        self.addCleanup(svc.__exit__)
        started = json.loads(svc.server.wait_for_line("sluice started"))
        self.assertEqual((started["grpc_listen"], started["grpc_port"]), ("", 0))
        client = Client(harness.free_port())
        self.addCleanup(client.close)
        with self.assertRaises(grpc.RpcError) as caught:
            client.call(request([("api_key", "key-free")]), timeout=2)
        self.assertEqual(caught.exception.code(), grpc.StatusCode.UNAVAILABLE)


class GrpcRedisTest(unittest.TestCase):
    """Decisions through Redis: store failures within the store timeout, and exactness across
    instances."""

    def service(self, port, policy="allow", timeout="20ms"):
        d = harness.tempdir()
        self.addCleanup(d.cleanup)
        grpc_port = harness.free_port()
        svc = harness.Service(test_redis.redis_yaml(port, policy, timeout) + PLANS, d.name,
                              extra_server=f'  grpc_listen: "127.0.0.1:{grpc_port}"\n')
        svc.__enter__()
        self.addCleanup(svc.__exit__)
        client = Client(grpc_port)
        self.addCleanup(client.close)
        return svc, client

    def assert_answers_within_the_timeout(self, client, want_code):
        # Redis on a free port that nothing listens on (started and stopped): every decision fails.
        # 20 ms store timeout, plus a margin for an ASan build on a loaded 2-core machine.
        bound = 0.020 + 0.300
        for i in range(10):
            start = time.monotonic()
            res = client.call(request([("subject", f"down-{i}"), ("plan", "free")]), timeout=10)
            elapsed = time.monotonic() - start
            self.assertLess(elapsed, bound)
            self.assertEqual(res.overall_code, want_code)
            self.assertEqual(headers(res)["Sluice-Degraded"], "1")
        return res

    def stopped_redis(self):
        redis = test_redis.RedisServer().start()
        redis.close()
        return redis.port

    def test_a_failing_store_under_allow_is_ok_and_degraded(self):
        _, client = self.service(self.stopped_redis(), "allow")
        res = self.assert_answers_within_the_timeout(client, OK)
        self.assertEqual(res.raw_body, b"")

    def test_a_failing_store_under_deny_is_over_limit_and_degraded(self):
        _, client = self.service(self.stopped_redis(), "deny")
        res = self.assert_answers_within_the_timeout(client, OVER_LIMIT)
        self.assertEqual(json.loads(res.raw_body)["status"], 503)

    def test_two_instances_on_one_redis_admit_exactly_the_quota(self):
        redis = test_redis.RedisServer().start()
        self.addCleanup(redis.close)
        # A generous timeout: this is about exactness, not latency (a degraded answer would blur it).
        (a, ca), (b, cb) = self.service(redis.port, timeout="500ms"), self.service(
            redis.port, timeout="500ms")
        for svc in (a, b):
            test_redis.RedisStoreTest.warm(self, svc)
        harness.clear_of_window_end(60, 20)
        req = request([("subject", "hot"), ("plan", "wide")])
        futures = [(ca if i % 2 else cb).call.future(req, timeout=30) for i in range(400)]
        results = [f.result() for f in futures]
        allowed = [r for r in results if r.overall_code == OK]
        self.assertEqual(len(allowed), 60)
        self.assertEqual(len(results) - len(allowed),
                         sum(1 for r in results if r.overall_code == OVER_LIMIT))
        self.assertFalse(any("Sluice-Degraded" in headers(r) for r in results))


if __name__ == "__main__":
    unittest.main()
