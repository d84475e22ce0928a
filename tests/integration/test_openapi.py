"""docs/openapi.yaml: the document is a valid OpenAPI 3.1 description, and every answer the real
binary gives to the endpoints that exist is the answer the document describes (openapi_check)."""
import copy
import json
import re
import signal
import socket
import time
import unittest

import jsonschema

import harness
import openapi_check
from receivers import HttpReceiver

PLANS = """
plans:
  free:
    limits:
      - { name: per_minute, quota: 60, window: 1m }
      - { name: daily, quota: 5000, window: day, alert_at: [80, 100] }
  tiny:
    limits:
      - { name: per_minute, quota: 2, window: 1m }
keys:
  - { key: key-free, subject: user-1, plan: free }
  - { key: key-tiny, subject: user-2, plan: tiny }
"""

ADMIN = {"Authorization": "Bearer test-admin-token"}
REF = re.compile(r"^#/")


def walk(node, path=()):
    """Every (path, dict) in a YAML tree, depth first."""
    if isinstance(node, dict):
        yield path, node
        for k, v in node.items():
            yield from walk(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from walk(v, path + (i,))


def schemas_of(doc):
    """(where, schema) for every schema the document holds: components/schemas, parameter, header
    and media-type schemas (each checked whole, so the schemas inside them are checked too)."""
    for name, schema in doc["components"]["schemas"].items():
        yield f"components/schemas/{name}", schema
    for path, node in walk(doc):
        if "schema" in node and path[:2] != ("components", "schemas"):
            if not (len(path) >= 1 and path[-1] == "properties"):
                yield "/".join(map(str, path)) + "/schema", node["schema"]


def raw_exchange(port, data, timeout=5):
    """Sends `data` on a fresh connection; returns (status, headers (lower-case), body) of the first
    answer, read by its Content-Length."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
        head, _, body = buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        while len(body) < length:
            try:
                chunk = s.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not chunk:
                break
            body += chunk
        return status, headers, body[:length]


class DocumentTest(unittest.TestCase):
    """The document on its own, no binary."""

    @classmethod
    def setUpClass(cls):
        cls.spec = openapi_check.spec()
        cls.doc = cls.spec.doc

    def operations(self):
        for template, item in self.doc["paths"].items():
            for method in openapi_check.METHODS:
                if method in item:
                    yield template, method, item, item[method]

    def test_is_openapi_3_1_with_both_planes_and_the_three_tags(self):
        self.assertEqual(self.doc["openapi"], "3.1.0")
        self.assertEqual(self.doc["jsonSchemaDialect"],
                         "https://json-schema.org/draft/2020-12/schema")
        self.assertEqual([s["url"] for s in self.doc["servers"]],
                         ["http://127.0.0.1:8080", "http://127.0.0.1:9090"])
        self.assertEqual({t["name"] for t in self.doc["tags"]},
                         {"data plane", "admin plane", "registry"})
        for name in ("title", "version"):
            self.assertIn(name, self.doc["info"])

    def test_every_ref_resolves(self):
        count = 0
        for path, node in walk(self.doc):
            if "$ref" in node and isinstance(node["$ref"], str):
                count += 1
                self.assertRegex(node["$ref"], REF, path)
                self.spec.pointer(node["$ref"])  # raises if it does not resolve
        self.assertGreater(count, 50)

    def test_every_schema_is_a_valid_draft_2020_12_schema(self):
        for where, schema in schemas_of(self.doc):
            with self.subTest(where):
                jsonschema.Draft202012Validator.check_schema(schema)

    def test_every_schema_example_validates_against_its_schema(self):
        for path, node in walk(self.doc):
            if path[:2] != ("components", "schemas") or "examples" not in node:
                continue
            if not isinstance(node["examples"], list):
                continue
            for i, example in enumerate(node["examples"]):
                with self.subTest("/".join(map(str, path)), example=i):
                    errors = list(self.spec.validator(node).iter_errors(example))
                    self.assertEqual(errors, [])

    def test_every_operation_has_a_unique_id_tags_security_and_described_responses(self):
        ids = []
        tags = {t["name"] for t in self.doc["tags"]}
        schemes = set(self.doc["components"]["securitySchemes"])
        for template, method, _, op in self.operations():
            where = f"{method.upper()} {template}"
            self.assertIn("operationId", op, where)
            ids.append(op["operationId"])
            self.assertTrue(op.get("responses"), where)
            self.assertTrue(set(op.get("tags", [])) <= tags and op.get("tags"), where)
            self.assertIn("security", op, where)
            for requirement in op["security"]:
                self.assertTrue(set(requirement) <= schemes, where)
            for code, response in op["responses"].items():
                self.assertRegex(code, r"^([1-5][0-9][0-9]|[1-5]XX|default)$", where)
                self.assertIn("description", self.spec.resolve(response), f"{where} {code}")
        self.assertEqual(len(ids), len(set(ids)), ids)

    def test_every_path_parameter_is_declared_and_every_declared_one_is_in_the_path(self):
        for template, method, item, op in self.operations():
            in_template = set(re.findall(r"\{([^}]+)\}", template))
            declared = {}
            for p in item.get("parameters", []) + op.get("parameters", []):
                p = self.spec.resolve(p)
                if p["in"] == "path":
                    declared[p["name"]] = p
            where = f"{method.upper()} {template}"
            self.assertEqual(set(declared), in_template, where)
            for p in declared.values():
                self.assertIs(p.get("required"), True, where)

    def test_every_path_names_its_plane_and_answers_other_methods_with_405(self):
        data = {"/v1/check", "/v1/authorize", "/v1/reserve", "/v1/reservations/{id}",
                "/v1/reservations/{id}/settle", "/v1/reservations/{id}/extend"}
        for template, item in self.doc["paths"].items():
            urls = [s["url"] for s in item["servers"]]
            self.assertEqual(urls, ["http://127.0.0.1:8080" if template in data
                                    else "http://127.0.0.1:9090"], template)
            self.assertIn("405", item["x-sluice-other-methods"]["responses"], template)

    def test_errors_are_problem_json_and_bodiless_answers_have_no_content(self):
        """Errors are problem+json (the probes' 503 bodies are their JSON state); 204 and the
        allowed /v1/authorize carry no body."""
        for template, method, _, op in self.operations():
            for code, response in op["responses"].items():
                response = self.spec.resolve(response)
                content = response.get("content", {})
                if code == "204" or (template == "/v1/authorize" and code == "200"):
                    self.assertEqual(content, {}, f"{method} {template} {code}")
                elif code.startswith(("4", "5")) and template not in ("/healthz", "/readyz"):
                    self.assertEqual(list(content), ["application/problem+json"],
                                     f"{method} {template} {code}")


class SelfTest(unittest.TestCase):
    """validate_response can fail: each kind of drift is caught."""

    DECISION = {"allowed": True, "subject": "u", "plan": "free", "degraded": False,
                "retry_after": 0, "violated": [],
                "limits": [{"name": "per_minute", "quota": 60, "used": 1, "held": 0,
                            "remaining": 59, "reset_after": 42, "window": "1m"}]}
    HEADERS = {"Content-Type": "application/json",
               "RateLimit-Policy": '"per_minute";q=60;w=60',
               "RateLimit": '"per_minute";r=59;t=42',
               "X-RateLimit-Limit": "60", "X-RateLimit-Remaining": "59", "X-RateLimit-Reset": "42"}

    def check(self, body=None, headers=None, status=200):
        return openapi_check.validate_response(
            "POST", "/v1/check", status, headers or self.HEADERS,
            json.dumps(self.DECISION if body is None else body).encode())

    def assertFails(self, pattern, **kw):
        with self.assertRaisesRegex(AssertionError, pattern):
            self.check(**kw)

    def test_a_documented_answer_passes(self):
        self.assertEqual(self.check(), self.DECISION)

    def test_an_undocumented_field_fails(self):
        body = dict(self.DECISION, colour="blue")
        self.assertFails(r"colour", body=body)

    def test_an_undocumented_field_in_a_nested_object_fails(self):
        body = copy.deepcopy(self.DECISION)
        body["limits"][0]["window_start"] = "2026-12-01T00:00:00Z"
        self.assertFails(r"limits/0.*window_start", body=body)

    def test_a_missing_field_and_a_wrong_type_fail(self):
        body = dict(self.DECISION)
        del body["degraded"]
        self.assertFails(r"degraded", body=body)
        self.assertFails(r"retry_after", body=dict(self.DECISION, retry_after="0"))

    def test_an_undocumented_status_fails(self):
        self.assertFails(r"status not documented", status=418)

    def test_a_missing_required_header_fails(self):
        headers = {k: v for k, v in self.HEADERS.items() if k != "RateLimit"}
        self.assertFails(r"header RateLimit missing", headers=headers)

    def test_a_malformed_header_fails(self):
        self.assertFails(r"X-RateLimit-Remaining", headers=dict(self.HEADERS, **{
            "X-RateLimit-Remaining": "-1"}))

    def test_a_wrong_content_type_fails(self):
        self.assertFails(r"Content-Type", headers=dict(self.HEADERS, **{
            "Content-Type": "text/html"}))

    def test_a_body_where_none_is_documented_fails(self):
        with self.assertRaisesRegex(AssertionError, "no body documented"):
            openapi_check.validate_response(
                "GET", "/v1/authorize", 200,
                dict(self.HEADERS, **{"Sluice-Subject": "u", "Sluice-Plan": "free"}), b"{}")

    def test_a_problem_whose_status_differs_from_the_http_status_fails(self):
        problem = {"type": "about:blank", "title": "Bad Request", "status": 404, "detail": "x"}
        with self.assertRaisesRegex(AssertionError, "problem status"):
            openapi_check.validate_response("POST", "/v1/check", 400,
                                            {"Content-Type": "application/problem+json"},
                                            json.dumps(problem).encode())

    def test_an_allow_header_that_differs_from_the_paths_methods_fails(self):
        problem = {"type": "about:blank", "title": "Method Not Allowed", "status": 405,
                   "detail": "use GET"}
        with self.assertRaisesRegex(AssertionError, "Allow"):
            openapi_check.validate_response(
                "PUT", "/v1/usage/{subject}", 405,
                {"Content-Type": "application/problem+json", "Allow": "GET"},
                json.dumps(problem).encode())

    def test_a_bad_date_time_fails(self):
        usage = {"subject": "u", "plan": "free", "limits": [{
            "name": "daily", "quota": 5, "used": 0, "remaining": 5, "reset_after": 1,
            "window": "day", "window_start": "yesterday", "window_end": "2026-12-02T00:00:00Z",
            "alerts_fired": []}]}
        with self.assertRaisesRegex(AssertionError, "date-time"):
            openapi_check.validate_response("GET", "/v1/usage/{subject}", 200,
                                            {"Content-Type": "application/json"},
                                            json.dumps(usage).encode())


class LiveTestCase(unittest.TestCase):
    """A real `sluice serve`; every answer is checked against the document."""

    plans = PLANS
    extra_server = ""

    def setUp(self):
        self.dir = harness.tempdir()
        self.addCleanup(self.dir.cleanup)
        self.svc = harness.Service(self.plans, self.dir.name, extra_server=self.extra_server)
        self.svc.__enter__()
        self.addCleanup(self.svc.__exit__)

    def documented(self, method, template, answer):
        """Asserts `answer` (status, headers, body) is documented; returns it."""
        status, headers, body = answer
        openapi_check.validate_response(method, template, status, headers, body)
        return answer

    def data(self, method, path, template, body=None, headers=None):
        return self.documented(method, template,
                               self.svc.request(method, path, body=body, headers=headers))

    def admin(self, method, path, template, token=True, headers=None):
        h = dict(ADMIN if token else {}, **(headers or {}))
        return self.documented(method, template,
                               self.svc.request(method, path, headers=h, admin=True))

    def check(self, payload):
        return self.data("POST", "/v1/check", "/v1/check", json.dumps(payload),
                         {"Content-Type": "application/json"})

    def authorize(self, headers=None):
        return self.data("GET", "/v1/authorize", "/v1/authorize", headers=headers)


class DataPlaneTest(LiveTestCase):
    def setUp(self):
        super().setUp()
        harness.clear_of_window_end(60, 5)  # the 1m limits are counted below

    def test_check_allowed_and_denied(self):
        status, headers, body = self.check({"subject": "user-42", "plan": "free", "cost": 1})
        self.assertEqual((status, json.loads(body)["allowed"]), (200, True))
        self.check({"subject": "t", "plan": "tiny", "cost": 2})
        status, _, body = self.check({"subject": "t", "plan": "tiny"})
        self.assertEqual((status, json.loads(body)["violated"]), (200, ["per_minute"]))

    def test_reservations_settle_extend_release_and_their_refusals(self):
        json_type = {"Content-Type": "application/json"}

        def reserve(payload):
            return self.data("POST", "/v1/reserve", "/v1/reserve", json.dumps(payload), json_type)

        status, _, body = reserve({"subject": "r-1", "plan": "free", "cost": 5, "ttl": "30s"})
        rid = json.loads(body)["reservation"]
        self.assertEqual(status, 200)
        denied = json.loads(reserve({"subject": "t", "plan": "tiny", "cost": 3})[2])
        self.assertNotIn("reservation", denied)
        self.assertEqual(reserve({"subject": "r-1", "plan": "free", "ttl": "2h"})[0], 400)
        settle, extend = f"/v1/reservations/{rid}/settle", f"/v1/reservations/{rid}/extend"
        self.assertEqual(self.data("POST", extend, "/v1/reservations/{id}/extend",
                                   json.dumps({"ttl": "1m"}), json_type)[0], 200)
        self.assertEqual(self.data("POST", settle, "/v1/reservations/{id}/settle",
                                   json.dumps({"cost": 4}), json_type)[0], 200)
        self.assertEqual(self.data("POST", settle, "/v1/reservations/{id}/settle",
                                   json.dumps({"cost": 5}), json_type)[0], 409)
        self.assertEqual(self.data("POST", settle, "/v1/reservations/{id}/settle",
                                   json.dumps({}), json_type)[0], 400)
        self.assertEqual(self.data("POST", extend, "/v1/reservations/{id}/extend")[0], 404)
        self.assertEqual(self.data("DELETE", f"/v1/reservations/{rid}",
                                   "/v1/reservations/{id}")[0], 409)
        self.assertEqual(self.data("DELETE", "/v1/reservations/rsv_none",
                                   "/v1/reservations/{id}")[0], 404)
        self.assertEqual(self.data("GET", f"/v1/reservations/{rid}",
                                   "/v1/reservations/{id}")[0], 405)
        other = json.loads(reserve({"subject": "r-2", "plan": "free", "cost": 1})[2])
        self.assertEqual(self.data("DELETE", f"/v1/reservations/{other['reservation']}",
                                   "/v1/reservations/{id}")[0], 204)

    def test_check_by_api_key_and_peek(self):
        self.assertEqual(self.check({"api_key": "key-free", "cost": 0})[0], 200)
        self.assertEqual(self.check({"api_key": "nope"})[0], 401)

    def test_check_by_subject_alone(self):
        # The plan comes from the registry; a subject with no plan anywhere is refused.
        self.assertIn(self.check({"subject": "user-42"})[0], (200, 400))

    def test_check_refuses_malformed_input(self):
        for payload in ("{not json", "[]", json.dumps({"subject": "a", "plan": "free", "x": 1}),
                        json.dumps({"subject": "a b", "plan": "free"}),
                        json.dumps({"subject": "a", "plan": "gold"}),
                        json.dumps({"subject": "a", "plan": "free", "cost": 1.5}),
                        json.dumps({"api_key": "key-free", "subject": "a"})):
            with self.subTest(payload):
                self.assertEqual(self.data("POST", "/v1/check", "/v1/check", payload)[0], 400)

    def test_authorize_allowed_denied_and_refused(self):
        self.assertEqual(self.authorize({"X-API-Key": "key-free"})[0], 200)
        self.assertEqual(self.authorize({"Authorization": "Bearer key-free"})[0], 200)
        self.assertEqual(self.authorize({"X-API-Key": "key-tiny", "Sluice-Cost": "2"})[0], 200)
        self.assertEqual(self.authorize({"X-API-Key": "key-tiny"})[0], 429)
        self.assertEqual(self.authorize({"X-API-Key": "nope"})[0], 401)
        self.assertEqual(self.authorize()[0], 401)
        self.assertEqual(self.authorize({"Authorization": "Basic dTpw"})[0], 401)
        self.assertEqual(self.authorize({"X-API-Key": "key-free", "Sluice-Cost": "0"})[0], 400)
        self.assertEqual(self.authorize({"X-API-Key": "key-free", "Sluice-Cost": "x"})[0], 400)

    def test_wrong_method_and_unknown_path(self):
        self.assertEqual(self.data("GET", "/v1/check", "/v1/check")[0], 405)
        self.assertEqual(self.data("TRACE", "/v1/authorize", "/v1/authorize")[0], 405)
        self.assertEqual(self.data("GET", "/v2/nothing", None)[0], 404)
        self.assertEqual(self.data("GET", "/metrics", None)[0], 404)  # an admin path

    def test_http_layer_refusals(self):
        port = self.svc.port
        big = b"{" + b" " * 70000 + b"}"
        cases = [
            ("POST", "/v1/check", 413,
             b"POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(big) + big),
            ("GET", "/v1/authorize", 431,
             b"GET /v1/authorize HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n"),
            ("GET", None, 400, b"\x00\x01garbage\r\n\r\n"),
            ("POST", "/v1/check", 400,
             b"POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
             b"Transfer-Encoding: chunked\r\n\r\n"),
            ("FOO", None, 501, b"FOO /v1/check HTTP/1.1\r\nHost: x\r\n\r\n"),
            ("GET", "/v1/authorize", 505, b"GET /v1/authorize HTTP/1.2\r\nHost: x\r\n\r\n"),
            ("POST", "/v1/check", 417,
             b"POST /v1/check HTTP/1.1\r\nHost: x\r\nExpect: later\r\nContent-Length: 2\r\n\r\n{}"),
        ]
        for method, template, status, data in cases:
            with self.subTest(status=status, data=data[:40]):
                answer = raw_exchange(port, data)
                self.assertEqual(answer[0], status)
                self.documented(method, template, answer)


class AnonymousAndDenyStatusTest(LiveTestCase):
    extra_server = "  anonymous_plan: tiny\n  deny_status: 403\n"

    def test_anonymous_requests_and_a_403_denial(self):
        harness.clear_of_window_end(60, 5)
        statuses = [self.authorize()[0] for _ in range(3)]
        self.assertEqual(statuses, [200, 200, 403])


class AdminPlaneTest(LiveTestCase):
    def test_probes(self):
        self.assertEqual(self.admin("GET", "/healthz", "/healthz", token=False)[0], 200)
        self.assertEqual(self.admin("GET", "/readyz", "/readyz", token=False)[0], 200)
        self.assertEqual(self.admin("POST", "/healthz", "/healthz", token=False)[0], 405)
        self.assertEqual(self.admin("DELETE", "/readyz", "/readyz", token=False)[0], 405)

    def test_metrics(self):
        self.assertEqual(self.admin("GET", "/metrics", "/metrics")[0], 200)
        self.assertEqual(self.admin("GET", "/metrics", "/metrics", token=False)[0], 401)
        self.assertEqual(self.admin("GET", "/metrics", "/metrics",
                                    headers={"Authorization": "Bearer wrong"})[0], 401)
        self.assertEqual(self.admin("POST", "/metrics", "/metrics")[0], 405)
        self.assertEqual(self.admin("POST", "/metrics", "/metrics", token=False)[0], 401)

    def test_usage_read_and_reset(self):
        self.check({"subject": "team/42", "plan": "free", "cost": 3})
        t = "/v1/usage/{subject}"
        status, _, body = self.admin("GET", "/v1/usage/team%2F42?plan=free", t)
        self.assertEqual((status, json.loads(body)["limits"][0]["used"]), (200, 3))
        self.assertEqual(self.admin("DELETE", "/v1/usage/team%2F42?plan=free&limit=daily", t)[0],
                         200)
        self.assertEqual(self.admin("DELETE", "/v1/usage/team%2F42?plan=free", t)[0], 200)
        self.assertEqual(self.admin("GET", "/v1/usage/u", t)[0], 400)
        self.assertEqual(self.admin("GET", "/v1/usage/u?plan=gold", t)[0], 400)
        self.assertEqual(self.admin("DELETE", "/v1/usage/u?plan=free&limit=nope", t)[0], 400)
        self.assertEqual(self.admin("GET", "/v1/usage/a%zz?plan=free", t)[0], 400)
        self.assertEqual(self.admin("GET", "/v1/usage/u?plan=free", t, token=False)[0], 401)
        self.assertEqual(self.admin("PUT", "/v1/usage/u?plan=free", t)[0], 405)

    def test_a_real_answer_fails_against_a_document_that_lacks_one_of_its_fields(self):
        status, headers, body = self.admin("GET", "/v1/usage/u?plan=free", "/v1/usage/{subject}")
        doc = copy.deepcopy(openapi_check.spec().doc)
        del doc["components"]["schemas"]["UsageLimit"]["properties"]["window_end"]
        with self.assertRaisesRegex(AssertionError, "window_end"):
            openapi_check.validate_response("GET", "/v1/usage/{subject}", status, headers, body,
                                            document=doc)

    def test_dead_letters_empty_and_refused_without_the_token(self):
        self.assertEqual(self.admin("GET", "/v1/alerts/dead", "/v1/alerts/dead")[0], 200)
        self.assertEqual(self.admin("GET", "/v1/alerts/dead", "/v1/alerts/dead",
                                    token=False)[0], 401)
        self.assertEqual(self.admin("DELETE", "/v1/alerts/dead", "/v1/alerts/dead")[0], 405)

    def test_unknown_path_and_a_data_plane_path(self):
        self.assertEqual(self.admin("GET", "/nothing", None)[0], 404)
        self.assertEqual(self.admin("POST", "/v1/check", None)[0], 404)

    def test_a_repeated_authorization_is_400(self):
        answer = raw_exchange(self.svc.admin_port,
                              b"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer a\r\n"
                              b"Authorization: Bearer b\r\n\r\n")
        self.assertEqual(answer[0], 400)
        self.documented("GET", "/metrics", answer)


class DeadLetterTest(unittest.TestCase):
    def test_a_dead_letter_is_documented(self):
        receiver = HttpReceiver()
        self.addCleanup(receiver.stop)
        receiver.script("/hook", [400])
        plans = (
            "plans:\n  free:\n    limits:\n"
            "      - { name: daily, quota: 1, window: day, alert_at: [100] }\n"
            "alerts:\n  sinks:\n"
            f'    - {{ type: webhook, url: "{receiver.url("/hook")}" }}\n')
        with harness.tempdir() as d, harness.Service(plans, d) as svc:
            svc.check({"subject": "alice", "plan": "free"})
            deadline = time.monotonic() + 15
            while True:
                status, headers, body = svc.request("GET", "/v1/alerts/dead", headers=ADMIN,
                                                    admin=True)
                letters = openapi_check.validate_response("GET", "/v1/alerts/dead", status,
                                                          headers, body)
                if letters["dead_letters"]:
                    break
                self.assertLess(time.monotonic(), deadline, "no dead letter within 15 s")
                time.sleep(0.05)  # polling the list, bounded by the deadline above
            self.assertEqual(letters["dead_letters"][0]["sink"], "webhook")


class FailingStoreTest(unittest.TestCase):
    """A Redis store nobody listens on: degraded decisions, readiness per on_store_error."""

    def service(self, policy):
        d = harness.tempdir()
        self.addCleanup(d.cleanup)
        url = f"redis://127.0.0.1:{harness.free_port()}/0"  # nothing listens there
        store = (f'store:\n  type: redis\n  redis: {{ url: "{url}", timeout: 20ms }}\n'
                 f"on_store_error: {policy}\n")
        svc = harness.Service(store + PLANS, d.name)
        svc.__enter__()
        self.addCleanup(svc.__exit__)
        return svc

    def answer(self, svc, method, path, template, admin=False, headers=None, body=None):
        status, h, b = svc.request(method, path, body=body, headers=headers, admin=admin)
        openapi_check.validate_response(method, template, status, h, b)
        return status, h, b

    def test_under_allow(self):
        svc = self.service("allow")
        status, headers, body = self.answer(svc, "POST", "/v1/check", "/v1/check",
                                            body=json.dumps({"subject": "a", "plan": "free"}))
        self.assertEqual((status, json.loads(body)["degraded"], headers.get("sluice-degraded")),
                         (200, True, "1"))
        status, headers, _ = self.answer(svc, "GET", "/v1/authorize", "/v1/authorize",
                                         headers={"X-API-Key": "key-free"})
        self.assertEqual((status, headers.get("sluice-degraded")), (200, "1"))
        status, _, body = self.answer(svc, "GET", "/readyz", "/readyz", admin=True)
        self.assertEqual((status, json.loads(body)["store"]), (200, "failing"))

    def test_under_deny(self):
        svc = self.service("deny")
        status, _, body = self.answer(svc, "POST", "/v1/check", "/v1/check",
                                      body=json.dumps({"subject": "a", "plan": "free"}))
        self.assertEqual((status, json.loads(body)["allowed"]), (200, False))
        self.assertEqual(self.answer(svc, "GET", "/v1/authorize", "/v1/authorize",
                                     headers={"X-API-Key": "key-free"})[0], 503)
        status, _, body = self.answer(svc, "GET", "/readyz", "/readyz", admin=True)
        self.assertEqual((status, json.loads(body)["status"]), (503, "unready"))
        self.assertEqual(self.answer(svc, "GET", "/v1/usage/a?plan=free", "/v1/usage/{subject}",
                                     admin=True, headers=ADMIN)[0], 503)


class StoppingTest(LiveTestCase):
    extra_server = "  shutdown_delay: 5s\n"

    def test_readyz_after_sigterm(self):
        self.svc.server.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 5
        while True:
            status, _, body = self.admin("GET", "/readyz", "/readyz", token=False)
            if status == 503:
                break
            self.assertLess(time.monotonic(), deadline, "/readyz never answered 503")
            time.sleep(0.02)  # the signal is handled asynchronously; bounded by the deadline
        self.assertEqual(json.loads(body), {"status": "stopping"})


if __name__ == "__main__":
    unittest.main()
