"""The command line: check-config, --version, --help, and serve's start/stop lifecycle."""
import json
import os
import signal
import subprocess
import unittest

import harness

VALID = """
plans:
  free:
    limits:
      - { name: per_minute, quota: 60, window: 1m }
"""


class CheckConfigTest(unittest.TestCase):
    def setUp(self):
        self.dir = harness.tempdir()
        self.addCleanup(self.dir.cleanup)

    def test_example_config_is_valid(self):
        result = harness.run("check-config", "-c", os.path.join(harness.SOURCE_DIR, "examples", "sluice.yaml"))
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("OK (3 plans", result.stdout)

    def test_bad_window_exits_78_naming_file_and_key_path(self):
        path = harness.write_config(self.dir.name, VALID.replace("window: 1m", "window: 5x"))
        result = harness.run("check-config", "-c", path)
        self.assertEqual(result.returncode, 78)
        self.assertEqual(result.stderr.strip(),
                         f'{path}: plans.free.limits[0].window: bad window "5x" '
                         "(want Ns, Nm, Nh, day, week, month, year, concurrent or credit)")

    def test_a_credit_limit_may_start_at_zero_and_no_other_limit_may(self):
        credit = VALID + "      - { name: credits, quota: 0, window: credit, alert_at: [80] }\n"
        path = harness.write_config(self.dir.name, credit)
        result = harness.run("check-config", "-c", path)
        self.assertEqual(result.returncode, 0, result.stderr)
        path = harness.write_config(self.dir.name, VALID.replace("quota: 60", "quota: 0"))
        result = harness.run("check-config", "-c", path)
        self.assertEqual(result.returncode, 78)
        self.assertEqual(result.stderr.strip(),
                         f"{path}: plans.free.limits[0].quota: must be at least 1 "
                         "(0 only for a limit with window: credit)")

    def test_bad_ratelimit_file_exits_78_naming_it(self):
        rl = os.path.join(self.dir.name, "rl")
        os.mkdir(rl)
        with open(os.path.join(rl, "a.yaml"), "w") as f:
            f.write("domain: edge\ndescriptors:\n  - key: remote_address\n"
                    "    rate_limit: { unit: second, requests_per_unit: 10 }\n")
        path = harness.write_config(self.dir.name, VALID + f"envoy: {{ ratelimit_config: {rl} }}\n")
        result = harness.run("check-config", "-c", path)
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(os.path.join(rl, "b.yml"), "w") as f:
            f.write("domain: other\ndescriptors:\n  - value: v\n")
        result = harness.run("check-config", "-c", path)
        self.assertEqual(result.returncode, 78)
        self.assertEqual(result.stderr.strip(),
                         f"{path}: envoy.ratelimit_config: {rl}/b.yml: descriptors[0].key: "
                         "missing required key")

    def test_missing_file_exits_78(self):
        result = harness.run("check-config", "-c", os.path.join(self.dir.name, "nope.yaml"))
        self.assertEqual(result.returncode, 78)
        self.assertIn("nope.yaml", result.stderr)

    def check_78(self, path, message):
        result = harness.run("check-config", "-c", path, timeout=20)
        self.assertEqual(result.returncode, 78, result.stderr)
        self.assertEqual(result.stderr.strip(), f"{path}: {message}")

    def test_dev_zero_is_not_a_regular_file(self):
        self.check_78("/dev/zero", "not a regular file (a character device)")

    def test_directory_is_not_a_regular_file(self):
        self.check_78(self.dir.name, "not a regular file (a directory)")

    def test_fifo_is_refused_without_waiting_for_a_writer(self):
        path = os.path.join(self.dir.name, "fifo.yaml")
        os.mkfifo(path)
        self.check_78(path, "not a regular file (a FIFO)")

    def test_file_over_16_mib_is_refused(self):
        path = os.path.join(self.dir.name, "big.yaml")
        with open(path, "wb") as f:
            f.write(b"#" * (17 << 20))
        self.check_78(path, f"too large: {17 << 20} bytes (at most 16 MiB)")

    def test_deep_nesting_is_nested_too_deep(self):
        path = harness.write_config(self.dir.name, "plans: " + "[" * 100_000)
        result = harness.run("check-config", "-c", path)
        self.assertEqual(result.returncode, 78)
        self.assertIn("nested too deep", result.stderr)

    def test_alias_bomb_is_refused_quickly(self):
        # 10,000 plans sharing one alias of 1,000 limits: ten million limits once expanded.
        limits = ", ".join(f"{{ name: l{i}, quota: 1, window: 1m }}" for i in range(1000))
        text = f"plans:\n  p0: {{ limits: &l [{limits}] }}\n"
        text += "".join(f"  p{i}: {{ limits: *l }}\n" for i in range(1, 10_000))
        result = harness.run("check-config", "-c", harness.write_config(self.dir.name, text),
                             timeout=20)
        self.assertEqual(result.returncode, 78)
        self.assertIn("too many values (more than 4000000 with aliases expanded)", result.stderr)

    def test_huge_redis_timeout_is_refused(self):
        path = harness.write_config(self.dir.name, VALID + "store:\n  redis: { timeout: 3000000h }\n")
        self.check_78(path, "store.redis.timeout: must be at most 10s, got 3000000h")

    def test_anonymous_prefix_beyond_its_familys_bits_is_refused(self):
        for key, value, message in (
                ("anonymous_ipv6_prefix", 129, "must be between 1 and 128, got 129"),
                ("anonymous_ipv4_prefix", 0, "must be between 1 and 32, got 0")):
            with self.subTest(key=key):
                path = harness.write_config(self.dir.name, f"server:\n  {key}: {value}\n" + VALID)
                self.check_78(path, f"server.{key}: {message}")

    def test_a_grpc_timeout_out_of_bounds_is_refused_naming_the_key(self):
        path = harness.write_config(self.dir.name,
                                    "server:\n  grpc_idle_timeout: 500ms\n" + VALID)
        self.check_78(path, "server.grpc_idle_timeout: must be at least 1s, got 500ms")
        served = harness.run("serve", "-c", path, timeout=20)
        self.assertEqual(served.returncode, 78, served.stderr)
        self.assertIn("server.grpc_idle_timeout: must be at least 1s", served.stderr)

    def test_bad_redis_percent_escape_fails_check_config_as_serve_does(self):
        path = harness.write_config(self.dir.name, VALID + """
store:
  type: redis
  redis: { url: "redis://app:hunter%zz2@127.0.0.1:6379/0" }
""")
        message = (f"{path}: store.redis.url: redis URL credentials: bad percent-encoding "
                   "(write a literal % as %25)")
        checked = harness.run("check-config", "-c", path)
        self.assertEqual(checked.returncode, 78)
        self.assertEqual(checked.stderr.strip(), message)
        self.assertNotIn("hunter", checked.stderr)
        served = harness.run("serve", "-c", path)
        self.assertEqual(served.returncode, 78)
        line = json.loads(served.stderr.strip().splitlines()[-1])
        self.assertEqual(line["error"], message)
        self.assertNotIn("hunter", served.stderr)

    def test_snapshot_in_a_missing_directory_is_refused_by_both(self):
        snapshot = os.path.join(self.dir.name, "missing", "state.snap")
        path = harness.write_config(self.dir.name, VALID + f"""
store:
  memory: {{ snapshot_path: "{snapshot}" }}
""")
        message = (f"{path}: store.memory.snapshot_path: directory "
                   f"{os.path.dirname(snapshot)} does not exist")
        checked = harness.run("check-config", "-c", path)
        self.assertEqual(checked.returncode, 78)
        self.assertEqual(checked.stderr.strip(), message)
        served = harness.run("serve", "-c", path)
        self.assertEqual(served.returncode, 78)
        self.assertEqual(json.loads(served.stderr.strip().splitlines()[-1])["error"], message)

    def test_snapshot_path_that_is_a_fifo_is_refused_without_blocking(self):
        snapshot = os.path.join(self.dir.name, "state.snap")
        os.mkfifo(snapshot)
        path = harness.write_config(self.dir.name, VALID + f"""
store:
  memory: {{ snapshot_path: "{snapshot}" }}
""")
        for command in ("check-config", "serve"):
            result = harness.run(command, "-c", path, timeout=20)
            self.assertEqual(result.returncode, 78, command)
            self.assertIn(f"{path}: store.memory.snapshot_path: is not a regular file", result.stderr)

    def test_duplicate_key_message_never_shows_the_key(self):
        text = VALID + """
keys:
  - { key: sk_live_very_secret, subject: a, plan: free }
  - { key: sk_live_very_secret, subject: b, plan: free }
"""
        result = harness.run("check-config", "-c", harness.write_config(self.dir.name, text))
        self.assertEqual(result.returncode, 78)
        self.assertIn("keys[1]", result.stderr)
        self.assertNotIn("sk_live_very_secret", result.stderr)


def run_with_env(*args, env, timeout=30):
    """harness.run with `env` on top of this process's environment less its SLUICE_* variables."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    full_env.update(env)
    return subprocess.run([harness.SLUICE_BIN, *args], capture_output=True, text=True,
                          timeout=timeout, env=full_env)


class EnvironmentTest(unittest.TestCase):
    """SLUICE_CONFIG, SLUICE_REDIS_URL and SLUICE_REDIS_PASSWORD_FILE (docs/configuration.md)."""

    def setUp(self):
        self.dir = harness.tempdir()
        self.addCleanup(self.dir.cleanup)
        self.path = harness.write_config(self.dir.name, VALID)

    def test_sluice_config_stands_in_for_a_missing_c(self):
        result = run_with_env("check-config", env={"SLUICE_CONFIG": self.path})
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn(f"{self.path}: OK", result.stdout)

    def test_c_wins_over_sluice_config(self):
        missing = os.path.join(self.dir.name, "nope.yaml")
        result = run_with_env("check-config", "-c", self.path, env={"SLUICE_CONFIG": missing})
        self.assertEqual(result.returncode, 0, result.stderr)

    def test_neither_c_nor_sluice_config_exits_64(self):
        for env in ({}, {"SLUICE_CONFIG": ""}):
            for command in ("serve", "check-config"):
                result = run_with_env(command, env=env)
                self.assertEqual(result.returncode, 64, (command, env))
                self.assertIn("--config is required", result.stderr)

    def test_help_names_sluice_config(self):
        result = run_with_env("check-config", "--help", env={})
        self.assertIn("SLUICE_CONFIG", result.stdout)

    def test_invalid_redis_url_exits_78_naming_the_variable_not_the_url(self):
        result = run_with_env("check-config", "-c", self.path,
                             env={"SLUICE_REDIS_URL": "http://app:hunter2@10.0.0.1:6379"})
        self.assertEqual(result.returncode, 78)
        self.assertEqual(result.stderr.strip(),
                         "SLUICE_REDIS_URL: must be a redis:// or rediss:// (TLS) URL, "
                         "e.g. redis://127.0.0.1:6379/0")
        self.assertNotIn("hunter2", result.stderr)

    def test_valid_redis_url_is_accepted(self):
        result = run_with_env("check-config", "-c", self.path,
                             env={"SLUICE_REDIS_URL": "redis://10.0.0.1:6379/1"})
        self.assertEqual(result.returncode, 0, result.stderr)

    def test_missing_password_file_exits_78_naming_variable_and_path(self):
        missing = os.path.join(self.dir.name, "redis-password")
        result = run_with_env("check-config", "-c", self.path,
                             env={"SLUICE_REDIS_PASSWORD_FILE": missing})
        self.assertEqual(result.returncode, 78)
        self.assertEqual(result.stderr.strip(),
                         f"SLUICE_REDIS_PASSWORD_FILE: {missing}: cannot open: No such file or directory")

    def test_bad_password_file_never_shows_its_content(self):
        path = os.path.join(self.dir.name, "redis-password")
        with open(path, "w") as f:
            f.write("hunter2-" + "x" * 5000)
        for command in ("check-config", "serve"):
            result = run_with_env(command, "-c", self.path,
                                 env={"SLUICE_REDIS_PASSWORD_FILE": path})
            self.assertEqual(result.returncode, 78, command)
            self.assertIn(f"SLUICE_REDIS_PASSWORD_FILE: {path}: too large", result.stderr)
            self.assertNotIn("hunter2", result.stderr)

    def test_password_file_is_accepted(self):
        path = os.path.join(self.dir.name, "redis-password")
        with open(path, "w") as f:
            f.write("hunter2\n")
        result = run_with_env("check-config", "-c", self.path,
                             env={"SLUICE_REDIS_PASSWORD_FILE": path})
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertNotIn("hunter2", result.stdout + result.stderr)


class CommandLineTest(unittest.TestCase):
    def test_version(self):
        result = harness.run("--version")
        self.assertEqual(result.returncode, 0)
        self.assertRegex(result.stdout, r"^sluice \d+\.\d+\.\d+")

    def test_help_lists_commands(self):
        result = harness.run("--help")
        self.assertEqual(result.returncode, 0)
        for word in ("serve", "check-config", "--version"):
            self.assertIn(word, result.stdout)

    def test_no_arguments_print_usage_to_stderr_and_exit_64(self):
        result = harness.run()
        self.assertEqual(result.returncode, 64)
        self.assertIn("Usage:", result.stderr)
        self.assertEqual(result.stdout, "")

    def test_unknown_command_exits_64_naming_it(self):
        result = harness.run("frobnicate")
        self.assertEqual(result.returncode, 64)
        self.assertIn('unknown command "frobnicate"', result.stderr)

    def test_unknown_option_exits_64(self):
        result = harness.run("check-config", "-c", "x.yaml", "--frobnicate")
        self.assertEqual(result.returncode, 64)
        self.assertIn("--frobnicate", result.stderr)

    def test_missing_config_option_exits_64(self):
        for command in ("serve", "check-config"):
            result = harness.run(command)
            self.assertEqual(result.returncode, 64, command)
            self.assertIn("--config is required", result.stderr)

    def test_bad_log_level_exits_64(self):
        self.assertEqual(harness.run("--log-level", "loud", "check-config", "-c", "x").returncode, 64)

    def test_help_lists_every_exit_code(self):
        for args in (["--help"], ["serve", "--help"], ["check-config", "-h"]):
            result = harness.run(*args)
            self.assertEqual(result.returncode, 0, args)
            for line in ("0   ok", "1   runtime failure", "64  usage error",
                         "78  configuration error"):
                self.assertIn(line, result.stdout, args)


def harness_request(port, path, payload):
    """POSTs `payload` as JSON to 127.0.0.1:`port`; returns (status, headers, body)."""
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("POST", path, json.dumps(payload), {"Content-Type": "application/json"})
        res = conn.getresponse()
        return res.status, dict(res.getheaders()), res.read()
    finally:
        conn.close()


class ServeLifecycleTest(unittest.TestCase):
    def setUp(self):
        self.dir = harness.tempdir()
        self.addCleanup(self.dir.cleanup)
        self.snapshot = os.path.join(self.dir.name, "state.snap")
        self.config = harness.write_config(self.dir.name, VALID + f"""
server:
  listen: "127.0.0.1:{harness.free_port()}"
  admin_listen: "127.0.0.1:{harness.free_port()}"
store:
  type: memory
  memory: {{ snapshot_path: "{self.snapshot}", snapshot_interval: 1s }}
""")

    def start(self, config=None):
        server = harness.Server(config or self.config)
        self.addCleanup(server.kill)
        return server

    def config_on_other_ports(self):
        """The same snapshot_path, other listen ports."""
        return harness.write_config(self.dir.name, VALID + f"""
server:
  listen: "127.0.0.1:{harness.free_port()}"
  admin_listen: "127.0.0.1:{harness.free_port()}"
store:
  type: memory
  memory: {{ snapshot_path: "{self.snapshot}", snapshot_interval: 1s }}
""", "second.yaml")

    def test_second_instance_on_the_same_snapshot_refuses_to_start(self):
        first = self.start()
        started = json.loads(first.wait_for_line("sluice started"))
        second = self.start(self.config_on_other_ports())
        line = json.loads(second.wait_for_line("cannot lock snapshot"))
        self.assertEqual(second.proc.wait(timeout=10), 1)
        self.assertIn(f"snapshot {self.snapshot} is in use by another process", line["error"])
        self.assertIn(f"pid {first.proc.pid}", line["error"])
        # The first is unharmed: it still answers and still saves its snapshot on the way out.
        status, _, _ = harness_request(started["port"], "/v1/check",
                                       {"subject": "a", "plan": "free"})
        self.assertEqual(status, 200)
        self.assertIsNone(first.proc.poll())
        if os.path.exists(self.snapshot):
            os.unlink(self.snapshot)
        self.assertEqual(first.stop(signal.SIGTERM), 0)
        self.assertTrue(os.path.exists(self.snapshot))

    def test_snapshot_lock_is_free_once_the_holder_stopped(self):
        first = self.start()
        first.wait_for_line("sluice started")
        self.assertEqual(first.stop(signal.SIGTERM), 0)
        again = self.start(self.config_on_other_ports())
        again.wait_for_line("sluice started")
        self.assertEqual(again.stop(signal.SIGTERM), 0)

    def test_stale_temp_snapshot_files_are_removed_at_start(self):
        stale = [self.snapshot + ".tmp.4242", self.snapshot + ".tmp.1"]
        keep = [self.snapshot + ".bak", os.path.join(self.dir.name, "other.snap.tmp.4242")]
        for path in stale + keep:
            with open(path, "wb") as f:
                f.write(b"half a snapshot")
        server = self.start()
        line = json.loads(server.wait_for_line("removed stale snapshot temporary files"))
        self.assertEqual(line["files"], 2)
        server.wait_for_line("sluice started")
        for path in stale:
            self.assertFalse(os.path.exists(path), path)
        for path in keep:
            self.assertTrue(os.path.exists(path), path)
        self.assertEqual(server.stop(signal.SIGTERM), 0)

    def test_sigterm_saves_a_snapshot_and_exits_zero(self):
        server = self.start()
        started = json.loads(server.wait_for_line("sluice started"))
        self.assertEqual(started["level"], "info")
        self.assertEqual(server.stop(signal.SIGTERM), 0)
        self.assertTrue(os.path.exists(self.snapshot))
        # The saved snapshot is picked up by the next start.
        again = self.start()
        again.wait_for_line("snapshot loaded")
        self.assertEqual(again.stop(signal.SIGINT), 0)

    def test_damaged_snapshot_stops_startup_with_a_clear_error(self):
        with open(self.snapshot, "wb") as f:
            f.write(b"SLUICESN\x01\x00\x00\x00garbage")
        server = self.start()
        line = json.loads(server.wait_for_line("cannot load snapshot"))
        self.assertIn("is damaged", line["error"])
        self.assertEqual(server.proc.wait(timeout=10), 1)

    def test_invalid_config_stops_startup_with_78(self):
        path = harness.write_config(self.dir.name, "plans: {}\n", "bad.yaml")
        server = harness.Server(path)
        self.addCleanup(server.kill)
        server.wait_for_line("invalid configuration")
        self.assertEqual(server.proc.wait(timeout=10), 78)


if __name__ == "__main__":
    unittest.main()
