"""The command line: check-config, --version, --help, and serve's start/stop lifecycle."""
import json
import os
import signal
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
                         "(want Ns, Nm, Nh, day or month)")

    def test_missing_file_exits_78(self):
        result = harness.run("check-config", "-c", os.path.join(self.dir.name, "nope.yaml"))
        self.assertEqual(result.returncode, 78)
        self.assertIn("nope.yaml", result.stderr)

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

    def test_no_command_is_a_usage_error(self):
        self.assertNotEqual(harness.run().returncode, 0)


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

    def start(self):
        server = harness.Server(self.config)
        self.addCleanup(server.kill)
        return server

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
