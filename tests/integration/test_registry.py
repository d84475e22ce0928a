"""The registry API on the embedded store, black-box: subjects and keys at runtime, durability,
read-only tokens, the audit log, bad input, and every answer checked against docs/openapi.yaml."""
import datetime
import json
import os
import signal
import subprocess
import time
import unittest

import harness
import openapi_check

READER_TOKEN = "reader-token-0123456789"

PLANS = """
plans:
  free:
    limits:
      - { name: per_minute, quota: 100, window: 1m }
      - { name: daily, quota: 10, window: day, alert_at: [80, 100] }
  pro:
    limits:
      - { name: per_minute, quota: 1000, window: 1m }
      - { name: daily, quota: 1000, window: day, alert_at: [80, 100] }
keys:
  - { key: static-key-1, subject: static-user, plan: free }
"""

TOKENS = f"""  admin_tokens:
    - {{ name: dashboards, token: "{READER_TOKEN}", access: read }}
"""


def iso(t):
    return t.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def wait_until(predicate, timeout=10.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"{what} not reached within {timeout}s")


class RegistryTestCase(unittest.TestCase):
    def setUp(self):
        self.dir = harness.tempdir()
        self.addCleanup(self.dir.cleanup)
        self.db = os.path.join(self.dir.name, "registry.db")
        self.svc = self.start()
        harness.clear_of_window_end(60, 5)

    def start(self, body=None, store=None):
        if store is None:
            store = f"store:\n  memory:\n    registry_path: {self.db}\n"
        svc = harness.Service(store + (body or PLANS), self.dir.name, extra_server=TOKENS)
        svc.__enter__()
        self.addCleanup(svc.__exit__)
        return svc

    # One admin request; the answer is checked against the OpenAPI document.
    def admin(self, method, path, template, body=None, token=None, headers=None):
        h = {"Authorization": f"Bearer {token or self.svc.admin_token}"}
        h.update(headers or {})
        data = None if body is None else (body if isinstance(body, (bytes, str))
                                          else json.dumps(body))
        if data is not None:
            h["Content-Type"] = "application/json"
        status, headers_out, raw = self.svc.request(method, path, data, h, admin=True)
        openapi_check.validate_response(method, template, status, headers_out, raw)
        return status, headers_out, json.loads(raw) if raw else None

    def put_subject(self, sid, body, **kw):
        return self.admin("PUT", f"/v1/subjects/{sid}", "/v1/subjects/{id}", body, **kw)

    def new_key(self, sid, body=None, **kw):
        return self.admin("POST", f"/v1/subjects/{sid}/keys", "/v1/subjects/{id}/keys",
                          body if body is not None else {}, **kw)

    def authorize(self, key):
        status, headers, raw = self.svc.request("GET", "/v1/authorize",
                                                headers={"X-API-Key": key})
        openapi_check.validate_response("GET", "/v1/authorize", status, headers, raw)
        return status, headers

    def assert_problem(self, answer, status, field):
        self.assertEqual(answer[0], status, answer)
        self.assertEqual(answer[1]["content-type"], "application/problem+json")
        self.assertEqual(answer[2].get("field"), field, answer[2])


class SubjectsAndKeys(RegistryTestCase):
    def test_create_issue_use_and_revoke_a_key(self):
        status, headers, subject = self.put_subject("acme", {"plan": "free",
                                                             "email": "ops@acme.test"})
        self.assertEqual(status, 201)
        self.assertEqual(headers["location"], "/v1/subjects/acme")
        self.assertEqual(subject["plan"], "free")
        self.assertEqual(subject["source"], "registry")
        status, headers, key = self.new_key("acme", {"name": "ci"})
        self.assertEqual(status, 201)
        self.assertTrue(key["key"].startswith("sk_"))
        self.assertTrue(key["key"].startswith(key["prefix"]))
        self.assertRegex(key["id"], r"^key_[0-9a-f]{16}$")
        self.assertEqual(headers.get("cache-control"), "no-store")

        status, headers = self.authorize(key["key"])
        self.assertEqual(status, 200)
        self.assertEqual(headers["sluice-subject"], "acme")
        self.assertEqual(headers["sluice-plan"], "free")

        # Listing never shows the plaintext.
        status, _, keys = self.admin("GET", "/v1/subjects/acme/keys", "/v1/subjects/{id}/keys")
        self.assertEqual(status, 200)
        self.assertEqual([k["id"] for k in keys["keys"]], [key["id"]])
        self.assertNotIn("key", keys["keys"][0])

        status, _, _ = self.admin("DELETE", f"/v1/keys/{key['id']}", "/v1/keys/{key_id}")
        self.assertEqual(status, 204)
        self.assertEqual(self.authorize(key["key"])[0], 401)
        # Revoking it again: it is gone.
        self.assert_problem(self.admin("DELETE", f"/v1/keys/{key['id']}", "/v1/keys/{key_id}"),
                            404, "key_id")

    def test_head_reads_like_get_without_a_body(self):
        self.put_subject("acme", {"plan": "free"})
        self.new_key("acme")
        auth = {"Authorization": f"Bearer {self.svc.admin_token}"}
        for path in ("/v1/subjects", "/v1/subjects/acme", "/v1/subjects/acme/keys"):
            get = self.svc.request("GET", path, headers=auth, admin=True)
            head = self.svc.request("HEAD", path, headers=auth, admin=True)
            self.assertEqual((head[0], head[2]), (get[0], b""), path)
            self.assertEqual(int(head[1]["content-length"]), len(get[2]), path)
        status, headers, _ = self.svc.request("PATCH", "/v1/subjects/acme", headers=auth,
                                              admin=True)
        self.assertEqual((status, headers["allow"]), (405, "GET, HEAD, PUT, DELETE"))

    def test_replacing_a_subject_answers_200_and_keeps_its_keys(self):
        self.put_subject("acme", {"plan": "free"})
        key = self.new_key("acme")[2]["key"]
        status, _, subject = self.put_subject("acme", {"plan": "pro"})
        self.assertEqual(status, 200)
        self.assertEqual(subject["plan"], "pro")
        self.assertEqual(self.authorize(key)[1]["sluice-plan"], "pro")

    def test_deleting_a_subject_revokes_its_keys(self):
        self.put_subject("acme", {"plan": "free"})
        key = self.new_key("acme")[2]["key"]
        self.assertEqual(self.admin("DELETE", "/v1/subjects/acme", "/v1/subjects/{id}")[0], 204)
        self.assertEqual(self.authorize(key)[0], 401)
        self.assert_problem(self.admin("GET", "/v1/subjects/acme", "/v1/subjects/{id}"), 404, "id")

    def test_a_disabled_subject_is_forbidden(self):
        self.put_subject("acme", {"plan": "free", "disabled": True})
        key = self.new_key("acme")[2]["key"]
        self.assertEqual(self.authorize(key)[0], 403)

    def test_a_disabled_subject_is_refused_under_any_plan_named(self):
        self.put_subject("acme", {"plan": "free", "disabled": True})
        for body in ({"subject": "acme"}, {"subject": "acme", "plan": "free"},
                     {"subject": "acme", "plan": "pro"}):
            self.assertEqual(self.svc.check(body)[0], 403, body)

    def test_a_read_token_sees_webhook_urls_cut_to_their_host(self):
        self.put_subject("acme", {"plan": "free", "webhook": "https://hooks.test/T000/B000/secret"})
        _, _, subject = self.admin("GET", "/v1/subjects/acme", "/v1/subjects/{id}",
                                   token=READER_TOKEN)
        self.assertEqual(subject["webhook"], "https://hooks.test/…")
        _, _, page = self.admin("GET", "/v1/subjects", "/v1/subjects", token=READER_TOKEN)
        self.assertNotIn("B000", json.dumps(page))
        _, _, subject = self.admin("GET", "/v1/subjects/acme", "/v1/subjects/{id}")
        self.assertEqual(subject["webhook"], "https://hooks.test/T000/B000/secret")

    def test_a_cursor_may_look_like_a_parameter(self):
        self.put_subject("plan=x", {"plan": "free"})
        self.put_subject("plan=y", {"plan": "free"})
        status, _, page = self.admin("GET", "/v1/subjects?limit=1&cursor=plan=x", "/v1/subjects")
        self.assertEqual(status, 200)
        self.assertEqual(page["subjects"][0]["id"], "plan=y")

    def test_an_expired_key_is_refused_by_itself(self):
        self.put_subject("acme", {"plan": "free"})
        until = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=2)
        key = self.new_key("acme", {"expires_at": iso(until)})[2]
        self.assertEqual(self.authorize(key["key"])[0], 200)
        wait_until(lambda: self.authorize(key["key"])[0] == 401, what="expiry")

    def test_import_a_digest_and_refuse_a_duplicate(self):
        import hashlib
        digest = hashlib.sha256(b"legacy-key-42").hexdigest()
        self.put_subject("acme", {"plan": "free"})
        status, _, key = self.new_key("acme", {"key_sha256": digest})
        self.assertEqual(status, 201)
        self.assertNotIn("key", key)
        self.assertTrue(key["imported"])
        self.assertEqual(self.authorize("legacy-key-42")[0], 200)
        self.put_subject("other", {"plan": "free"})
        self.assert_problem(self.new_key("other", {"key_sha256": digest}), 409, "key_sha256")
        # A static key's digest cannot be imported either.
        static = hashlib.sha256(b"static-key-1").hexdigest()
        self.assert_problem(self.new_key("other", {"key_sha256": static}), 409, "key_sha256")

    def test_check_with_a_subject_alone_uses_its_registry_plan(self):
        self.put_subject("acme", {"plan": "pro"})
        status, _, body = self.svc.check({"subject": "acme"})
        self.assertEqual(status, 200)
        self.assertEqual(body["plan"], "pro")
        status, _, body = self.svc.check({"subject": "nobody"})
        self.assertEqual(status, 400)
        self.assertIn("plan", body["detail"])

    def test_list_pages_with_a_cursor_and_a_plan_filter(self):
        for i in range(5):
            self.put_subject(f"s{i}", {"plan": "free" if i % 2 == 0 else "pro"})
        seen, cursor = [], None
        while True:
            q = "/v1/subjects?limit=2" + (f"&cursor={cursor}" if cursor else "")
            status, _, page = self.admin("GET", q, "/v1/subjects")
            self.assertEqual(status, 200)
            self.assertLessEqual(len(page["subjects"]), 2)
            seen += [s["id"] for s in page["subjects"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        # The config file's subject is listed too, read-only.
        self.assertEqual(seen, ["s0", "s1", "s2", "s3", "s4", "static-user"])
        _, _, page = self.admin("GET", "/v1/subjects?plan=pro", "/v1/subjects")
        self.assertEqual([s["id"] for s in page["subjects"]], ["s1", "s3"])
        self.assert_problem(self.admin("GET", "/v1/subjects?limit=0", "/v1/subjects"), 400,
                            "limit")
        # A parameter given twice says two things: refused, not read by one of them.
        self.assert_problem(self.admin("GET", "/v1/subjects?plan=pro&limit=1&plan=free",
                                       "/v1/subjects"), 400, "plan")
        status, _, problem = self.admin(
            "DELETE", "/v1/usage/s1?plan=pro&limit=daily&limit=per_minute", "/v1/usage/{subject}")
        self.assertEqual((status, problem["detail"]), (400, "limit: given more than once"))

    def test_config_subjects_are_read_only(self):
        status, _, subject = self.admin("GET", "/v1/subjects/static-user", "/v1/subjects/{id}")
        self.assertEqual(status, 200)
        self.assertEqual(subject["source"], "config")
        self.assert_problem(self.put_subject("static-user", {"plan": "pro"}), 409, "id")
        self.assert_problem(self.admin("DELETE", "/v1/subjects/static-user", "/v1/subjects/{id}"),
                            409, "id")
        self.assert_problem(self.new_key("static-user"), 409, "id")


class UsageFollowsTheSubject(RegistryTestCase):
    def usage(self, sid):
        status, _, subject = self.admin("GET", f"/v1/subjects/{sid}", "/v1/subjects/{id}")
        self.assertEqual(status, 200)
        return {l["name"]: l for l in subject["usage"]["limits"]}

    def test_a_plan_change_keeps_usage(self):
        self.put_subject("acme", {"plan": "free"})
        for _ in range(3):
            self.assertEqual(self.svc.check({"subject": "acme"})[0], 200)
        self.put_subject("acme", {"plan": "pro"})
        daily = self.usage("acme")["daily"]
        self.assertEqual(daily["used"], 3)
        self.assertEqual(daily["quota"], 1000)
        self.put_subject("acme", {"plan": "free"})
        self.assertEqual(self.usage("acme")["daily"]["remaining"], 7)

    def test_an_override_applies_and_ends_by_itself(self):
        until = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=2)
        status, _, subject = self.put_subject(
            "acme", {"plan": "free", "overrides": {"daily": {"quota": 12, "until": iso(until)}}})
        self.assertEqual(status, 201)
        self.assertEqual(subject["overrides"]["daily"]["quota"], 12)
        self.assertEqual(self.usage("acme")["daily"]["quota"], 12)
        for _ in range(11):
            self.assertTrue(self.svc.check({"subject": "acme"})[2]["allowed"])
        # Past the plan's 10 but within the override; once it ends the plan's quota is back.
        wait_until(lambda: self.usage("acme")["daily"]["quota"] == 10, what="override end")
        self.assertFalse(self.svc.check({"subject": "acme"})[2]["allowed"])


class BadInput(RegistryTestCase):
    def test_an_instant_outside_rfc_3339_is_refused_naming_its_field(self):
        # An offset without its colon is ISO 8601's basic format, not RFC 3339's.
        for until in ("2030-01-01T00:00:00+0530", "2030-01-01 00:00:00Z", "2030-01-01T00:00:00"):
            self.assert_problem(self.put_subject("acme", {"plan": "free", "overrides": {
                "daily": {"quota": 12, "until": until}}}), 422, "overrides.daily.until")
        self.assert_problem(self.admin("GET", "/v1/subjects/acme", "/v1/subjects/{id}"), 404, "id")
        self.assertEqual(self.put_subject("acme", {"plan": "free"})[0], 201)
        for expires_at in ("2030-01-01T00:00:00+0530", "2030-01-01T00:00:00+05"):
            self.assert_problem(self.new_key("acme", {"expires_at": expires_at}), 422,
                                "expires_at")
        _, _, keys = self.admin("GET", "/v1/subjects/acme/keys", "/v1/subjects/{id}/keys")
        self.assertEqual(keys["keys"], [])
        status, _, key = self.new_key("acme", {"expires_at": "2030-01-01T05:30:00+05:30"})
        self.assertEqual((status, key["expires_at"]), (201, "2030-01-01T00:00:00.000Z"))

    def test_each_bad_field_is_named(self):
        self.assert_problem(self.put_subject("acme", {"plan": "gold"}), 422, "plan")
        self.assert_problem(self.put_subject("acme", {}), 422, "plan")
        self.assert_problem(self.put_subject("bad%20id", {"plan": "free"}), 422, "id")
        self.assert_problem(self.put_subject("acme", {"plan": "free", "metadata": {
            "x": "y" * 5000}}), 422, "metadata")
        self.assert_problem(self.put_subject("acme", {"plan": "free", "frobnicate": 1}), 422,
                            "frobnicate")
        self.assert_problem(self.put_subject("acme", b'{"plan": "free"'), 400, "body")
        self.assert_problem(
            self.put_subject("acme", {"plan": "free", "overrides": {"nope": {"quota": 5}}}), 422,
            "overrides.nope")
        # Nothing was created by any of them.
        self.assert_problem(self.admin("GET", "/v1/subjects/acme", "/v1/subjects/{id}"), 404, "id")

    def test_a_number_beyond_any_double_is_400_naming_its_member(self):
        # nlohmann refuses such a number mid-parse; the body is JSON all the same.
        for number in ("1e400", "-1e400", "9" * 60_000):
            for body, field in (
                    ('{"plan":"free","overrides":{"daily":{"quota":%s}}}', "overrides.daily.quota"),
                    ('{"plan":"free","metadata":{"tier":{"n":%s}}}', "metadata.tier.n"),
                    ('{"plan":%s}', "plan"),
                    ('{"plan":"free","disabled":%s}', "disabled")):
                with self.subTest(body=body, number=number[:8]):
                    answer = self.put_subject("acme", (body % number).encode())
                    self.assert_problem(answer, 400, field)
                    self.assertEqual(answer[2]["detail"], f"{field}: number out of range")
        self.put_subject("acme", {"plan": "free"})
        for field in ("name", "expires_at", "key_sha256"):
            answer = self.new_key("acme", f'{{"{field}":1e400}}'.encode())
            self.assert_problem(answer, 400, field)
            self.assertEqual(answer[2]["detail"], f"{field}: number out of range")
        # Nothing was changed by any of them.
        _, _, subject = self.admin("GET", "/v1/subjects/acme", "/v1/subjects/{id}")
        self.assertEqual((subject["metadata"], subject["overrides"]), ({}, {}))
        _, _, keys = self.admin("GET", "/v1/subjects/acme/keys", "/v1/subjects/{id}/keys")
        self.assertEqual(keys["keys"], [])

    def test_a_key_for_a_missing_subject_creates_nothing(self):
        self.assert_problem(self.new_key("ghost"), 404, "id")
        self.put_subject("ghost", {"plan": "free"})
        _, _, keys = self.admin("GET", "/v1/subjects/ghost/keys", "/v1/subjects/{id}/keys")
        self.assertEqual(keys["keys"], [])

    def test_tokens(self):
        h = {"Authorization": "Bearer wrong-token"}
        status, _, _ = self.svc.request("GET", "/v1/subjects", headers=h, admin=True)
        self.assertEqual(status, 401)
        # A read-only token reads but never writes.
        self.assertEqual(self.admin("GET", "/v1/subjects", "/v1/subjects",
                                    token=READER_TOKEN)[0], 200)
        self.assertEqual(self.put_subject("acme", {"plan": "free"}, token=READER_TOKEN)[0], 403)
        status, _, _ = self.svc.request("GET", "/metrics", admin=True,
                                        headers={"Authorization": f"Bearer {READER_TOKEN}"})
        self.assertEqual(status, 200)
        self.assertEqual(self.admin("DELETE", "/v1/usage/u?plan=free", "/v1/usage/{subject}",
                                    token=READER_TOKEN)[0], 403)
        self.assertEqual(self.admin("DELETE", "/v1/usage/u?plan=free", "/v1/usage/{subject}")[0],
                         200)

    def test_idempotency_key(self):
        self.put_subject("acme", {"plan": "free"})
        h = {"Idempotency-Key": "create-ci-key-1"}
        first = self.new_key("acme", {"name": "ci"}, headers=h)
        again = self.new_key("acme", {"name": "ci"}, headers=h)
        self.assertEqual(first[0], 201)
        self.assertEqual(again[0], 201)
        self.assertEqual(again[1].get("idempotent-replayed"), "true")
        self.assertEqual(again[2]["id"], first[2]["id"])
        self.assertEqual(again[2].get("key"), first[2]["key"])
        _, _, keys = self.admin("GET", "/v1/subjects/acme/keys", "/v1/subjects/{id}/keys")
        self.assertEqual(len(keys["keys"]), 1)
        self.assert_problem(self.new_key("acme", {"name": "other"}, headers=h), 422,
                            "Idempotency-Key")


class DurabilityAndAudit(RegistryTestCase):
    def test_kill_9_right_after_201_loses_nothing(self):
        self.put_subject("acme", {"plan": "free"})
        key = self.new_key("acme")[2]["key"]
        self.svc.server.proc.send_signal(signal.SIGKILL)
        self.svc.server.proc.wait()
        self.svc = self.start()
        self.assertEqual(self.authorize(key)[0], 200)

    def test_a_registry_file_it_cannot_write_refuses_the_start(self):
        # SQLite would open it read-only without a word, and every change would fail while the
        # server looked ready. The file is made unwritable for the user sluice runs as: as root,
        # sluice runs as nobody (the directory stays writable for its lock file).
        import subprocess
        self.put_subject("acme", {"plan": "free"})
        self.svc.server.kill()
        os.chmod(self.dir.name, 0o777)
        for name in os.listdir(self.dir.name):
            path = os.path.join(self.dir.name, name)
            if name == "registry.db.lock":
                os.chmod(path, 0o666)
            else:  # the database (with its -wal and -shm, if any) and the config
                os.chmod(path, 0o444)
        command = [harness.SLUICE_BIN, "serve", "-c", self.svc.config_path]
        if os.geteuid() == 0:
            command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] + command
        result = subprocess.run(command, capture_output=True, text=True, timeout=30)
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertIn("is not writable by this process", result.stderr)
        self.assertNotIn("sluice started", result.stderr)

    def test_check_config_refuses_dropping_a_plan_registry_subjects_are_on_as_serve_does(self):
        import subprocess
        self.put_subject("acme", {"plan": "pro"})
        without_pro = PLANS.replace("  pro:\n    limits:\n      - { name: per_minute, quota: 1000, "
                                    "window: 1m }\n      - { name: daily, quota: 1000, window: "
                                    "day, alert_at: [80, 100] }\n", "")
        self.assertNotIn("pro:", without_pro)
        path = harness.write_config(
            self.dir.name, self.svc.server_yaml + f"store:\n  memory:\n    registry_path: "
            f"{self.db}\n" + without_pro, name="without-pro.yaml")
        # While the server runs on the file (and holds its lock), and after it stopped.
        for _ in range(2):
            check = subprocess.run([harness.SLUICE_BIN, "check-config", "-c", path],
                                   capture_output=True, text=True, timeout=30)
            self.assertEqual(check.returncode, 78, check.stdout + check.stderr)
            self.assertIn('acme (plan "pro")', check.stderr)
            self.svc.server.kill()
        serve = subprocess.run([harness.SLUICE_BIN, "serve", "-c", path], capture_output=True,
                               text=True, timeout=30)
        self.assertEqual(serve.returncode, 78, serve.stderr)
        self.assertIn('acme (plan \\"pro\\")', serve.stderr)  # in a JSON log line
        # The file as it was passes.
        check = subprocess.run([harness.SLUICE_BIN, "check-config", "-c", self.svc.config_path],
                               capture_output=True, text=True, timeout=30)
        self.assertEqual(check.returncode, 0, check.stderr)
        self.assertEqual(check.stderr, "")
        # A registry file it cannot read is serve's to refuse; check-config says it did not check.
        garbage = os.path.join(self.dir.name, "garbage.db")
        with open(garbage, "wb") as f:
            f.write(b"not a database" * 100)
        path = harness.write_config(
            self.dir.name, self.svc.server_yaml + f"store:\n  memory:\n    registry_path: "
            f"{garbage}\n" + PLANS, name="garbage.yaml")
        check = subprocess.run([harness.SLUICE_BIN, "check-config", "-c", path],
                               capture_output=True, text=True, timeout=30)
        self.assertEqual(check.returncode, 0, check.stderr)
        self.assertIn(f"note: registry {garbage} is not an SQLite database: the plans its "
                      "subjects are on were not checked", check.stderr)

    def test_a_new_registry_file_is_private(self):
        self.put_subject("acme", {"plan": "free"})
        self.assertEqual(os.stat(self.db).st_mode & 0o777, 0o600)

    def test_every_change_writes_one_audit_line_without_secrets(self):
        self.put_subject("acme", {"plan": "free", "webhook": "https://h.test/x",
                                  "webhook_secret": "whsec_c2VjcmV0c2VjcmV0c2VjcmV0"})
        key = self.new_key("acme", {"name": "ci"})[2]
        self.admin("DELETE", f"/v1/keys/{key['id']}", "/v1/keys/{key_id}")
        line = self.svc.server.wait_for_line('"action":"key.revoke"')
        record = json.loads(line)
        self.assertEqual(record["token"], "admin")
        self.assertEqual(record["client"], "127.0.0.1")
        self.assertEqual(record["key_id"], key["id"])
        self.svc.server.wait_for_line('"action":"subject.create"')
        self.svc.server.wait_for_line('"action":"key.create"')
        log = "".join(self.svc.server.lines)
        self.assertNotIn(key["key"], log)
        self.assertNotIn("c2VjcmV0c2VjcmV0", log)

    def test_a_reload_giving_a_registry_subject_a_static_key_is_refused(self):
        self.put_subject("acme", {"plan": "free"})
        self.svc.rewrite(PLANS + "  - { key: conflict-key, subject: acme, plan: pro }\n")
        self.svc.server.proc.send_signal(signal.SIGHUP)
        line = self.svc.server.wait_for_line("reload refused")
        self.assertIn("keys[1].subject", line)
        self.assertEqual(self.authorize("conflict-key")[0], 401)

    def test_a_reload_that_drops_a_plan_in_use_is_refused(self):
        self.put_subject("acme", {"plan": "pro"})
        self.svc.rewrite(PLANS.replace("  pro:\n", "  gone:\n"))
        self.svc.server.proc.send_signal(signal.SIGHUP)
        line = self.svc.server.wait_for_line("reload refused")
        self.assertIn("acme", line)
        self.assertEqual(self.svc.check({"subject": "acme"})[2]["plan"], "pro")
        status, _, body = self.svc.request(
            "GET", "/metrics", admin=True,
            headers={"Authorization": f"Bearer {self.svc.admin_token}"})
        text = body.decode()
        self.assertIn('sluice_config_reloads_total{result="refused"} 1', text)
        self.assertIn("sluice_config_last_reload_successful 0", text)
        self.assertIn("process_open_fds ", text)


class WhereTheRegistryLives(RegistryTestCase):
    """Which file keeps the registry without registry_path, and the files sluice will not take
    for one."""

    def setUp(self):
        self.dir = harness.tempdir()
        self.addCleanup(self.dir.cleanup)
        self.db = os.path.join(self.dir.name, "registry.db")
        self.snapshot = os.path.join(self.dir.name, "state.snap")

    # A configuration on free ports with `store` under store.memory; nothing is started.
    def config(self, store):
        body = f"store:\n  memory:\n{store}" + PLANS
        return harness.Service(body, self.dir.name, extra_server=TOKENS).config_path

    def test_with_only_a_snapshot_the_registry_is_kept_beside_it_across_a_restart(self):
        store = f"store:\n  memory:\n    snapshot_path: {self.snapshot}\n"
        self.svc = self.start(store=store)
        self.assertEqual(self.put_subject("acme", {"plan": "pro"})[0], 201)
        key = self.new_key("acme", {"name": "ci"})[2]["key"]
        self.assertEqual(self.authorize(key)[0], 200)
        self.assertEqual(self.svc.server.stop(signal.SIGTERM), 0)

        self.svc = self.start(store=store)
        status, headers = self.authorize(key)
        self.assertEqual((status, headers["sluice-plan"]), (200, "pro"))
        beside = self.snapshot + ".registry.db"
        self.assertEqual(os.stat(beside).st_mode & 0o777, 0o600)
        self.assertIn(f'"path":"{beside}"', self.svc.server.wait_for_line('"registry loaded"'))
        self.assertNotIn("lost at exit", "".join(self.svc.server.lines))
        # check-config reads that file too, and says where the registry lives.
        check = harness.run("check-config", "-c", self.svc.config_path)
        self.assertEqual(check.returncode, 0, check.stderr)
        self.assertIn(f"registry: {beside} (beside the snapshot; store.memory.registry_path is "
                      "not set)\n", check.stdout)

    def test_with_nothing_persisted_the_registry_is_in_memory_and_said_so(self):
        self.svc = self.start(store="")
        self.assertEqual(self.put_subject("acme", {"plan": "free"})[0], 201)
        self.svc.server.wait_for_line("are kept in memory and lost at exit, as counters are")
        self.assertEqual(os.listdir(self.dir.name), ["sluice.yaml"])
        check = harness.run("check-config", "-c", self.svc.config_path)
        self.assertEqual(check.returncode, 0, check.stderr)
        self.assertIn("registry: in memory only, lost at exit", check.stdout)

    def test_a_file_that_is_no_registry_refuses_the_start_and_is_left_alone(self):
        import sqlite3
        foreign = os.path.join(self.dir.name, "orders.db")
        with sqlite3.connect(foreign) as db:
            db.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, total INTEGER)")
            db.execute("INSERT INTO orders VALUES (1, 100)")
        db.close()
        text = os.path.join(self.dir.name, "notes.txt")
        with open(text, "w") as f:
            f.write("registry goes here\n" * 100)
        empty = os.path.join(self.dir.name, "empty.db")
        open(empty, "w").close()
        for path, why in ((empty, "is empty (0 bytes), not a registry"),
                          (foreign, "is an SQLite database without sluice's registry in it"),
                          (text, "is not an SQLite database")):
            with open(path, "rb") as f:
                before = f.read()
            config = self.config(f"    registry_path: {path}\n")
            serve = subprocess.run([harness.SLUICE_BIN, "serve", "-c", config],
                                   capture_output=True, text=True, timeout=30)
            self.assertEqual(serve.returncode, 1, serve.stderr)
            self.assertIn(f"registry {path} {why}", serve.stderr)
            self.assertNotIn("sluice started", serve.stderr)
            with open(path, "rb") as f:
                self.assertEqual(f.read(), before, path)
            # check-config reads it as serve would, and says so.
            check = harness.run("check-config", "-c", config)
            self.assertIn(f"note: registry {path} {why}", check.stderr)
        # A file beside the snapshot is held to the same rule.
        open(self.snapshot + ".registry.db", "w").close()
        config = self.config(f"    snapshot_path: {self.snapshot}\n")
        serve = subprocess.run([harness.SLUICE_BIN, "serve", "-c", config], capture_output=True,
                               text=True, timeout=30)
        self.assertEqual(serve.returncode, 1, serve.stderr)
        self.assertIn(f"registry {self.snapshot}.registry.db is empty (0 bytes)", serve.stderr)

    def test_a_missing_registry_file_is_created(self):
        self.svc = self.start()
        self.assertEqual(self.put_subject("acme", {"plan": "free"})[0], 201)
        self.assertEqual(os.stat(self.db).st_mode & 0o777, 0o600)
        self.assertFalse(os.path.exists(self.db + ".new"))


if __name__ == "__main__":
    unittest.main()
