"""systemd integration: sd_notify readiness, reload, stop and watchdog messages on a NOTIFY_SOCKET
the test listens on; the admin token from SLUICE_ADMIN_TOKEN_FILE (LoadCredential=); and the unit
file in packaging/systemd/ passing `systemd-analyze verify`."""
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import unittest
import urllib.request

import harness

PLANS = """
plans:
  free:
    limits:
      - { name: per_minute, quota: 60, window: 1m }
"""


def base_env():
    """The test's environment without anything sd_notify or the admin token would read."""
    env = dict(os.environ)
    for name in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "SLUICE_ADMIN_TOKEN",
                 "SLUICE_ADMIN_TOKEN_FILE"):
        env.pop(name, None)
    return env


class NotifySocket:
    """An AF_UNIX datagram socket standing in for systemd's notification socket."""

    def __init__(self, directory):
        self.path = os.path.join(directory, "notify.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.received = []  # every message, as a dict of its assignments

    def close(self):
        self.sock.close()

    def wait_for(self, key, value=None, timeout=10.0):
        """Returns the first message not yet returned whose `key` is set (to `value`, if given);
        raises once `timeout` seconds have passed without one."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {key}={value or '*'} within {timeout}s; got {self.received}")
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(4096)
            except socket.timeout:
                continue
            message = dict(line.split("=", 1) for line in data.decode().split("\n") if line)
            self.received.append(message)
            if key in message and (value is None or message[key] == value):
                return message


def accepts(port):
    with socket.create_connection(("127.0.0.1", port), timeout=2):
        return True


class NotifyTest(unittest.TestCase):
    def setUp(self):
        self.dir = harness.tempdir()
        self.addCleanup(self.dir.cleanup)
        self.notify = NotifySocket(self.dir.name)
        self.addCleanup(self.notify.close)
        self.port = harness.free_port()
        self.admin_port = harness.free_port()

    def server_yaml(self, shutdown_delay="0s"):
        return ("server:\n"
                f'  listen: "127.0.0.1:{self.port}"\n'
                f'  admin_listen: "127.0.0.1:{self.admin_port}"\n'
                '  admin_token: "t"\n'
                "  threads: 2\n"
                f"  shutdown_delay: {shutdown_delay}\n")

    def start(self, shutdown_delay="0s", watchdog_usec=None):
        self.config = harness.write_config(self.dir.name, self.server_yaml(shutdown_delay) + PLANS)
        env = base_env()
        env["NOTIFY_SOCKET"] = self.notify.path
        if watchdog_usec is not None:
            # systemd also sets WATCHDOG_PID; without it the watchdog is for whoever reads it.
            env["WATCHDOG_USEC"] = str(watchdog_usec)
        self.server = harness.Server(self.config, env=env)
        self.addCleanup(self.server.kill)

    def test_ready_once_both_planes_accept(self):
        self.start()
        ready = self.notify.wait_for("READY", "1")
        self.assertTrue(accepts(self.port))
        self.assertTrue(accepts(self.admin_port))
        self.assertEqual(ready.get("STATUS"), "serving")

    def test_sighup_sends_reloading_with_monotonic_usec_then_ready(self):
        self.start()
        self.notify.wait_for("READY", "1")
        before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        self.server.proc.send_signal(signal.SIGHUP)
        reloading = self.notify.wait_for("RELOADING", "1")
        after = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        self.assertLessEqual(before, int(reloading["MONOTONIC_USEC"]))
        self.assertLessEqual(int(reloading["MONOTONIC_USEC"]), after)
        ready = self.notify.wait_for("READY", "1")
        self.assertEqual(ready["STATUS"], "serving; configuration reloaded")

    def test_refused_reload_is_ready_again_saying_so(self):
        self.start()
        self.notify.wait_for("READY", "1")
        harness.write_config(self.dir.name, self.server_yaml() + PLANS.replace("1m", "5x"))
        self.server.proc.send_signal(signal.SIGHUP)
        self.notify.wait_for("RELOADING", "1")
        ready = self.notify.wait_for("READY", "1")
        self.assertIn("reload refused", ready["STATUS"])
        self.assertTrue(accepts(self.port))

    def test_sigterm_sends_stopping_at_once(self):
        self.start(shutdown_delay="2s")
        self.notify.wait_for("READY", "1")
        self.server.proc.send_signal(signal.SIGTERM)
        stopping = self.notify.wait_for("STOPPING", "1", timeout=1.5)
        self.assertEqual(stopping["STATUS"], "stopping on SIGTERM")
        # Sent when the stop begins, not when it ends (the delay is still running).
        self.assertIsNone(self.server.proc.poll())
        self.assertEqual(self.server.proc.wait(timeout=15), 0)

    def test_watchdog_pings_repeatedly_at_half_the_interval(self):
        self.start(watchdog_usec=400_000)
        self.notify.wait_for("READY", "1")
        first = time.monotonic()
        for _ in range(4):
            self.notify.wait_for("WATCHDOG", "1", timeout=2)
        # Four pings at ~200 ms: well under four whole intervals.
        self.assertLess(time.monotonic() - first, 1.6)

    def test_no_watchdog_pings_without_watchdog_usec(self):
        self.start()
        self.notify.wait_for("READY", "1")
        self.server.proc.send_signal(signal.SIGTERM)
        self.notify.wait_for("STOPPING", "1")
        self.assertEqual(self.server.proc.wait(timeout=15), 0)
        self.assertFalse([m for m in self.notify.received if "WATCHDOG" in m])

    def test_watchdog_for_another_pid_is_not_pinged(self):
        self.config = harness.write_config(self.dir.name, self.server_yaml() + PLANS)
        env = base_env()
        env.update(NOTIFY_SOCKET=self.notify.path, WATCHDOG_USEC="200000", WATCHDOG_PID="1")
        self.server = harness.Server(self.config, env=env)
        self.addCleanup(self.server.kill)
        self.notify.wait_for("READY", "1")
        self.server.proc.send_signal(signal.SIGTERM)
        self.notify.wait_for("STOPPING", "1")
        self.assertEqual(self.server.proc.wait(timeout=15), 0)
        self.assertFalse([m for m in self.notify.received if "WATCHDOG" in m])


class AdminTokenFileTest(unittest.TestCase):
    def setUp(self):
        self.dir = harness.tempdir()
        self.addCleanup(self.dir.cleanup)
        self.port = harness.free_port()
        self.admin_port = harness.free_port()

    def config(self, admin_token=None):
        text = ("server:\n"
                f'  listen: "127.0.0.1:{self.port}"\n'
                f'  admin_listen: "127.0.0.1:{self.admin_port}"\n'
                "  threads: 1\n")
        if admin_token:
            text += f'  admin_token: "{admin_token}"\n'
        return harness.write_config(self.dir.name, text + PLANS)

    def token_file(self, contents, name="admin-token"):
        path = os.path.join(self.dir.name, name)
        with open(path, "w") as f:
            f.write(contents)
        return path

    def serve(self, config, token_file, **extra_env):
        env = base_env()
        env["SLUICE_ADMIN_TOKEN_FILE"] = token_file
        env.update(extra_env)
        server = harness.Server(config, env=env)
        self.addCleanup(server.kill)
        server.wait_for_line("sluice started")
        return server

    def metrics_status(self, token):
        req = urllib.request.Request(f"http://127.0.0.1:{self.admin_port}/metrics",
                                     headers={"Authorization": f"Bearer {token}"})
        try:
            with urllib.request.urlopen(req, timeout=5) as res:
                return res.status
        except urllib.error.HTTPError as e:
            return e.code

    def refused_start(self, token_file):
        env = base_env()
        env["SLUICE_ADMIN_TOKEN_FILE"] = token_file
        return subprocess.run([harness.SLUICE_BIN, "serve", "-c", self.config()], env=env,
                              capture_output=True, text=True, timeout=30)

    def test_token_is_read_from_the_file_without_its_trailing_newline(self):
        self.serve(self.config(), self.token_file("from-credential\n"))
        self.assertEqual(self.metrics_status("from-credential"), 200)
        self.assertEqual(self.metrics_status("from-credentialx"), 401)

    def test_the_config_files_token_wins_and_the_file_is_then_not_read(self):
        self.serve(self.config(admin_token="from-config"), os.path.join(self.dir.name, "missing"))
        self.assertEqual(self.metrics_status("from-config"), 200)

    def test_the_debug_summary_names_the_admin_token_from_the_environment(self):
        env = base_env()
        env["SLUICE_ADMIN_TOKEN_FILE"] = self.token_file("from-credential\n")
        server = harness.Server(self.config(), "--log-level", "debug", env=env)
        self.addCleanup(server.kill)
        summary = json.loads(server.wait_for_line('"msg":"configuration summary"'))
        self.assertEqual(summary["admin_tokens"], "admin")
        self.assertEqual(summary["env"], "SLUICE_ADMIN_TOKEN_FILE")

    def test_sluice_admin_token_wins_over_the_file(self):
        self.serve(self.config(), self.token_file("from-file\n"), SLUICE_ADMIN_TOKEN="from-env")
        self.assertEqual(self.metrics_status("from-env"), 200)
        self.assertEqual(self.metrics_status("from-file"), 401)

    def test_missing_file_exits_78_naming_the_variable(self):
        missing = os.path.join(self.dir.name, "missing")
        result = self.refused_start(missing)
        self.assertEqual(result.returncode, 78, result.stderr)
        self.assertIn(f"SLUICE_ADMIN_TOKEN_FILE: {missing}: cannot open: No such file", result.stderr)

    def test_oversized_file_exits_78_without_printing_its_contents(self):
        secret = "s3cret-" + "x" * 5000
        result = self.refused_start(self.token_file(secret))
        self.assertEqual(result.returncode, 78, result.stderr)
        self.assertIn("SLUICE_ADMIN_TOKEN_FILE: ", result.stderr)
        self.assertIn("larger than 4096 bytes", result.stderr)
        self.assertNotIn("s3cret", result.stderr)

    def test_token_with_a_space_exits_78_without_printing_it(self):
        result = self.refused_start(self.token_file("s3cret with space\n"))
        self.assertEqual(result.returncode, 78, result.stderr)
        self.assertIn("must be printable ASCII without spaces", result.stderr)
        self.assertNotIn("s3cret", result.stderr)

    def test_sluice_admin_token_with_a_space_or_a_control_byte_exits_78_without_printing_it(self):
        for token in ("s3cret with space", "s3cret\x01ctl"):
            env = base_env()
            env["SLUICE_ADMIN_TOKEN"] = token
            result = subprocess.run([harness.SLUICE_BIN, "serve", "-c", self.config()], env=env,
                                    capture_output=True, text=True, timeout=30)
            self.assertEqual(result.returncode, 78, result.stderr)
            self.assertIn("SLUICE_ADMIN_TOKEN: must be printable ASCII without spaces", result.stderr)
            self.assertNotIn("s3cret", result.stderr)

    def test_a_read_token_that_is_also_the_read_write_token_exits_78(self):
        import hashlib
        digest = hashlib.sha256(b"shared-token").hexdigest()
        config = harness.write_config(
            self.dir.name,
            "server:\n"
            f'  listen: "127.0.0.1:{self.port}"\n'
            f'  admin_listen: "127.0.0.1:{self.admin_port}"\n'
            f"  admin_tokens: [{{ name: dash, token_sha256: {digest}, access: read }}]\n" + PLANS)
        env = base_env()
        env["SLUICE_ADMIN_TOKEN"] = "shared-token"
        result = subprocess.run([harness.SLUICE_BIN, "serve", "-c", config], env=env,
                                capture_output=True, text=True, timeout=30)
        self.assertEqual(result.returncode, 78, result.stderr)
        self.assertIn("server.admin_tokens[0]: the same token as SLUICE_ADMIN_TOKEN", result.stderr)
        self.assertNotIn("shared-token", result.stderr)
        # check-config, run with the service's environment, says the same.
        check = subprocess.run([harness.SLUICE_BIN, "check-config", "-c", config], env=env,
                               capture_output=True, text=True, timeout=30)
        self.assertEqual(check.returncode, 78, check.stderr)
        self.assertIn("server.admin_tokens[0]: the same token as SLUICE_ADMIN_TOKEN", check.stderr)

    def test_empty_file_exits_78(self):
        result = self.refused_start(self.token_file("\n"))
        self.assertEqual(result.returncode, 78, result.stderr)
        self.assertIn(": empty", result.stderr)

    def test_directory_exits_78(self):
        result = self.refused_start(self.dir.name)
        self.assertEqual(result.returncode, 78, result.stderr)
        self.assertIn(f"SLUICE_ADMIN_TOKEN_FILE: {self.dir.name}: not a regular file", result.stderr)


class UnitFileTest(unittest.TestCase):
    UNIT = os.path.join(harness.SOURCE_DIR, "packaging", "systemd", "sluice.service")

    def setUp(self):
        if shutil.which("systemd-analyze") is None:
            self.fail("systemd-analyze not found (Debian 12's systemd package provides it)")
        self.dir = harness.tempdir()
        self.addCleanup(self.dir.cleanup)

    def verify(self, path):
        return subprocess.run(["systemd-analyze", "verify", path], capture_output=True, text=True,
                              timeout=60)

    def test_unit_verifies_with_execstart_pointing_at_the_built_binary(self):
        # The unit names /usr/bin/sluice, which a build tree does not install: verify a copy that
        # runs the binary under test instead (systemd-analyze needs no running systemd for this).
        with open(self.UNIT) as f:
            text = f.read()
        self.assertIn("ExecStart=/usr/bin/sluice serve -c /etc/sluice/sluice.yaml\n", text)
        copy = os.path.join(self.dir.name, "sluice.service")
        with open(copy, "w") as f:
            f.write(text.replace("/usr/bin/sluice ", os.path.abspath(harness.SLUICE_BIN) + " "))
        result = self.verify(copy)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stderr.strip(), "")

    def test_the_installed_unit_fails_verify_only_for_want_of_the_binary(self):
        result = self.verify(self.UNIT)
        if os.access("/usr/bin/sluice", os.X_OK):
            self.assertEqual(result.returncode, 0, result.stderr)
        else:
            self.assertEqual(result.stderr.strip(),
                             "sluice.service: Command /usr/bin/sluice is not executable: "
                             "No such file or directory")

    def test_unit_is_type_notify_with_watchdog_and_credential(self):
        with open(self.UNIT) as f:
            lines = set(f.read().splitlines())
        for line in ("Type=notify", "WatchdogSec=30s", "ExecReload=/bin/kill -HUP $MAINPID",
                     "LoadCredential=admin-token:/etc/sluice/admin-token",
                     "Environment=SLUICE_ADMIN_TOKEN_FILE=%d/admin-token",
                     "RestartPreventExitStatus=64 78"):
            self.assertIn(line, lines)


if __name__ == "__main__":
    unittest.main()
