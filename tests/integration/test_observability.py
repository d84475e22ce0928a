"""What an operator sees: debug lines (--log-level debug) and the access log of decisions
(server.access_log), against the real binary."""
import json
import os
import re
import signal
import time
import unittest

import harness

API_KEY = "obs-config-key-0123456789"
ADMIN_TOKEN = "obs-admin-token-0123456789"

PLANS = f"""
plans:
  free:
    limits:
      - {{ name: per_minute, quota: 2, window: 1m }}
      - {{ name: daily, quota: 100, window: day }}
  roomy:
    limits:
      - {{ name: per_minute, quota: 100000, window: 1m }}
keys:
  - {{ key: {API_KEY}, subject: alice, plan: free }}
  - {{ key: roomy-key-0123456789, subject: bob, plan: roomy }}
"""


def json_lines(server):
    """Every stderr line of `server` that is a JSON object."""
    out = []
    for line in list(server.lines):
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def wait_until(predicate, timeout=10.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


class ObservabilityCase(unittest.TestCase):
    def start(self, extra_server="", body=PLANS, args=(), store=""):
        tmp = harness.tempdir()
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name
        svc = harness.Service(body + store, tmp.name, admin_token=ADMIN_TOKEN,
                              extra_server=extra_server, args=args)
        svc.__enter__()
        self.addCleanup(svc.__exit__)
        self.svc = svc
        return svc

    def authorize(self, key=API_KEY, headers=None):
        h = {"X-API-Key": key}
        h.update(headers or {})
        return self.svc.request("GET", "/v1/authorize", headers=h)[0]

    def admin(self, method, path, body=None):
        h = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        data = None if body is None else json.dumps(body)
        if data is not None:
            h["Content-Type"] = "application/json"
        status, _, raw = self.svc.request(method, path, data, h, admin=True)
        return status, raw

    def metric(self, name):
        status, raw = self.admin("GET", "/metrics")
        self.assertEqual(status, 200)
        m = re.search(rf"^{re.escape(name)} (\S+)$", raw.decode(), re.M)
        self.assertIsNotNone(m, f"{name} not in /metrics")
        return float(m.group(1))

    def barrier(self):
        """Returns once every line written before now has been read: a reload's log line comes
        after them on the same pipe."""
        before = sum(1 for line in self.svc.server.lines if "configuration reloaded" in line)
        self.svc.server.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: sum(1 for line in self.svc.server.lines
                               if "configuration reloaded" in line) > before,
                   what="the reload's log line")

    def access_lines(self):
        return [j for j in json_lines(self.svc.server) if j.get("msg") == "access"]


class DebugLines(ObservabilityCase):
    def start_debug(self, level="debug"):
        tmp = harness.tempdir()
        self.addCleanup(tmp.cleanup)
        store = ("store:\n  type: memory\n  memory:\n"
                 f"    snapshot_path: \"{tmp.name}/counters.snap\"\n"
                 "    snapshot_interval: 1s\n"
                 f"    registry_path: \"{tmp.name}/registry.db\"\n")
        self.snapshot = f"{tmp.name}/counters.snap"
        svc = harness.Service(PLANS + store, tmp.name, admin_token=ADMIN_TOKEN,
                              args=("--log-level", level))
        svc.__enter__()
        self.addCleanup(svc.__exit__)
        self.svc = svc
        return svc

    def exercise(self):
        """Decisions with the file's key and a registry key, admin calls, a reload; returns the
        registry key's plaintext."""
        self.assertEqual(self.authorize(), 200)
        self.assertEqual(self.admin("PUT", "/v1/subjects/acme", {"plan": "roomy"})[0], 201)
        status, raw = self.admin("POST", "/v1/subjects/acme/keys", {"name": "ci"})
        self.assertEqual(status, 201)
        registry_key = json.loads(raw)["key"]
        self.assertEqual(self.authorize(registry_key), 200)
        self.assertEqual(self.admin("GET", "/metrics")[0], 200)
        self.barrier()
        return registry_key

    def test_debug_shows_the_configuration_summary_snapshot_saves_and_registry_writes(self):
        svc = self.start_debug()
        self.exercise()
        svc.server.wait_for_line('"msg":"snapshot saved"')
        lines = json_lines(svc.server)
        summaries = [j for j in lines if j["msg"] == "configuration summary"]
        self.assertEqual([s["event"] for s in summaries], ["start", "reload"])
        summary = summaries[0]
        self.assertEqual(summary["level"], "debug")
        self.assertEqual(summary["store"], "memory")
        self.assertEqual(summary["plans"], 2)
        self.assertEqual(summary["keys"], 2)
        self.assertEqual(summary["admin_tokens"], "admin")
        self.assertEqual(summary["access_log"], "off")
        self.assertTrue(summary["snapshot_path"].endswith("counters.snap"))
        plans = {j["plan"]: j for j in lines if j["msg"] == "plan" and j["event"] == "start"}
        self.assertEqual(plans["free"]["limits"], "per_minute=2/1m; daily=100/day")
        saved = next(j for j in lines if j["msg"] == "snapshot saved")
        self.assertEqual(saved["level"], "debug")
        for field in ("subjects", "bytes", "ms", "pending_alerts"):
            self.assertIn(field, saved)
        self.assertGreater(saved["bytes"], 0)
        writes = [j for j in lines if j["msg"] == "registry write"]
        self.assertEqual([w["change"] for w in writes], ["put_subject", "add_key"])
        self.assertRegex(writes[1]["key_id"], r"^key_[0-9a-f]{16}$")
        self.assertTrue(all(w["ok"] for w in writes))

    def test_no_debug_line_carries_a_secret(self):
        svc = self.start_debug()
        registry_key = self.exercise()
        svc.server.wait_for_line('"msg":"snapshot saved"')
        debug = [line for line in svc.server.lines if '"level":"debug"' in line]
        self.assertGreater(len(debug), 3)
        for line in debug:
            for secret in (ADMIN_TOKEN, API_KEY, registry_key, registry_key[:12]):
                self.assertNotIn(secret, line)

    def test_info_shows_no_debug_line(self):
        svc = self.start_debug(level="info")
        wait_until(lambda: os.path.exists(self.snapshot), what="a first snapshot")
        first = os.stat(self.snapshot).st_mtime_ns
        self.exercise()
        # A later save, which debug would have logged.
        wait_until(lambda: os.stat(self.snapshot).st_mtime_ns != first, what="another snapshot")
        self.barrier()
        self.assertTrue(any('"msg":"configuration reloaded"' in line for line in svc.server.lines))
        self.assertFalse([line for line in svc.server.lines if '"level":"debug"' in line])


class RedisDebugLines(unittest.TestCase):
    def test_redis_lifecycle_and_environment_without_secrets(self):
        import subprocess
        from test_redis_script import Resp
        password = "obs-redis-password-0123"
        port = harness.free_port()
        tmp = harness.tempdir()
        self.addCleanup(tmp.cleanup)
        redis = subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", tmp.name, "--requirepass", password],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.addCleanup(lambda: (redis.kill(), redis.wait()))

        def answers():
            try:
                Resp(port).close()
                return True
            except OSError:
                return False
        wait_until(answers, what="redis-server")
        password_file = harness.write_config(tmp.name, password + "\n", name="redis-password")
        sluice_port, admin_port = harness.free_port(), harness.free_port()
        path = harness.write_config(tmp.name, (
            "server:\n"
            f'  listen: "127.0.0.1:{sluice_port}"\n'
            f'  admin_listen: "127.0.0.1:{admin_port}"\n'
            "  threads: 1\n"
            f'store:\n  type: redis\n  redis: {{ url: "redis://127.0.0.1:{port}/0", '
            "timeout: 200ms }\n" + PLANS))
        env = dict(os.environ, SLUICE_REDIS_PASSWORD_FILE=password_file,
                   SLUICE_ADMIN_TOKEN=ADMIN_TOKEN)
        server = harness.Server(path, "--log-level", "debug", env=env)
        self.addCleanup(server.kill)
        server.wait_for_line("sluice started")
        server.wait_for_line('"msg":"redis connection ready"')
        summary = json.loads(server.wait_for_line('"msg":"configuration summary"'))
        self.assertEqual(summary["store"], "redis")
        self.assertEqual(summary["redis_host"], "127.0.0.1")
        self.assertEqual(summary["env"], "SLUICE_REDIS_PASSWORD_FILE,SLUICE_ADMIN_TOKEN")
        ready = json.loads(server.wait_for_line('"msg":"redis connection ready"'))
        self.assertIs(ready["auth"], True)
        self.assertEqual(ready["port"], port)
        import http.client
        conn = http.client.HTTPConnection("127.0.0.1", sluice_port, timeout=10)
        conn.request("GET", "/v1/authorize", headers={"X-API-Key": API_KEY})
        self.assertEqual(conn.getresponse().status, 200)
        conn.close()
        for line in server.lines:
            self.assertNotIn(password, line)
            self.assertNotIn(ADMIN_TOKEN, line)
            self.assertNotIn(API_KEY, line)


class AccessLog(ObservabilityCase):
    def test_off_by_default_logs_no_decision(self):
        self.start()
        for _ in range(4):
            self.authorize()  # 2 allowed, 2 denied
        self.barrier()
        self.assertEqual(self.access_lines(), [])

    def test_denied_logs_each_denial_with_its_limit(self):
        harness.clear_of_window_end(60, 10)
        self.start(extra_server="  access_log: { mode: denied }\n")
        statuses = [self.authorize(headers={"X-Forwarded-For": "203.0.113.9"})
                    for _ in range(4)]
        self.assertEqual(statuses, [200, 200, 429, 429])
        self.barrier()
        lines = self.access_lines()
        self.assertEqual(len(lines), 2, lines)
        line = lines[0]
        self.assertEqual(line["level"], "info")
        self.assertEqual(line["route"], "/v1/authorize")
        self.assertEqual(line["status"], 429)
        self.assertEqual(line["subject"], "alice")
        self.assertEqual(line["plan"], "free")
        self.assertEqual(line["cost"], 1)
        self.assertIs(line["allowed"], False)
        self.assertIs(line["degraded"], False)
        self.assertEqual(line["limit"], "per_minute")
        self.assertEqual(line["window"], "1m")
        self.assertEqual(line["used"], 2)
        self.assertEqual(line["quota"], 2)
        self.assertGreaterEqual(line["retry_after"], 1)
        # No trusted proxy is configured: the peer's own address.
        self.assertEqual(line["client"], "127.0.0.1")
        self.assertGreaterEqual(line["latency_us"], 0)
        self.assertNotIn("key_id", line)  # the config file's key has no id
        for raw in self.svc.server.lines:
            self.assertNotIn(API_KEY, raw)

    def test_denied_covers_check_too(self):
        harness.clear_of_window_end(60, 10)
        self.start(extra_server="  access_log: { mode: denied }\n")
        answers = [self.svc.check({"subject": "carol", "plan": "free", "cost": 1})[0]
                   for _ in range(3)]
        self.assertEqual(answers, [200, 200, 200])  # /v1/check answers 200 with allowed: false
        self.barrier()
        lines = self.access_lines()
        self.assertEqual(len(lines), 1, lines)
        self.assertEqual(lines[0]["route"], "/v1/check")
        self.assertEqual(lines[0]["subject"], "carol")
        self.assertIs(lines[0]["allowed"], False)

    def test_all_logs_allowed_decisions_too_and_names_registry_keys_by_id(self):
        self.start(extra_server="  access_log: { mode: all }\n")
        self.assertEqual(self.admin("PUT", "/v1/subjects/acme", {"plan": "roomy"})[0], 201)
        status, raw = self.admin("POST", "/v1/subjects/acme/keys", {})
        self.assertEqual(status, 201)
        created = json.loads(raw)
        for _ in range(3):
            self.assertEqual(self.authorize(created["key"]), 200)
        self.barrier()
        lines = self.access_lines()
        self.assertEqual(len(lines), 3, lines)
        for line in lines:
            self.assertIs(line["allowed"], True)
            self.assertEqual(line["status"], 200)
            self.assertEqual(line["subject"], "acme")
            self.assertEqual(line["key_id"], created["id"])
            self.assertNotIn("limit", line)
        for raw_line in self.svc.server.lines:
            self.assertNotIn(created["key"], raw_line)

    def test_sample_zero_keeps_only_denials(self):
        harness.clear_of_window_end(60, 10)
        self.start(extra_server="  access_log: { mode: all, sample: 0 }\n")
        for _ in range(3):
            self.assertEqual(self.authorize("roomy-key-0123456789"), 200)
        self.assertEqual([self.authorize() for _ in range(3)], [200, 200, 429])
        self.barrier()
        lines = self.access_lines()
        self.assertEqual([(j["subject"], j["allowed"]) for j in lines], [("alice", False)])

    def test_lines_over_the_cap_are_dropped_and_counted(self):
        self.start(extra_server="  access_log: { mode: all, max_per_second: 3 }\n")
        decisions = 20
        for _ in range(decisions):
            self.assertEqual(self.authorize("roomy-key-0123456789"), 200)
        self.barrier()
        logged = len(self.access_lines())
        dropped = self.metric("sluice_access_log_dropped_total")
        self.assertEqual(logged + dropped, decisions)
        # 3 a second: the requests may straddle a second or two, never more.
        self.assertGreaterEqual(logged, 3)
        self.assertLessEqual(logged, 9)

    def test_a_reload_turns_the_access_log_on(self):
        harness.clear_of_window_end(60, 10)
        self.start()
        self.assertEqual([self.authorize() for _ in range(3)], [200, 200, 429])
        self.svc.rewrite(PLANS, extra_server="  access_log: { mode: denied }\n")
        self.barrier()
        self.assertEqual(self.access_lines(), [])
        self.assertEqual(self.authorize(), 429)
        self.barrier()
        self.assertEqual(len(self.access_lines()), 1)

    def test_a_bad_access_log_setting_is_refused_naming_the_field(self):
        with harness.tempdir() as d:
            path = harness.write_config(
                d, "server:\n  access_log: { mode: loud }\n" + PLANS)
            result = harness.run("check-config", "-c", path)
        self.assertEqual(result.returncode, 78, result)
        self.assertIn("server.access_log.mode", result.stderr + result.stdout)


if __name__ == "__main__":
    unittest.main()
