"""Helpers shared by the integration tests: locate the binary, run it, wait on its output."""
import os
import select
import subprocess
import tempfile
import time

SLUICE_BIN = os.environ.get("SLUICE_BIN", "sluice")
SOURCE_DIR = os.environ.get("SLUICE_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))


def run(*args, timeout=30):
    """Runs sluice to completion and returns the CompletedProcess (text mode)."""
    return subprocess.run([SLUICE_BIN, *args], capture_output=True, text=True, timeout=timeout)


def write_config(directory, text, name="sluice.yaml"):
    path = os.path.join(directory, name)
    with open(path, "w") as f:
        f.write(text)
    return path


class Server:
    """A `sluice serve` process whose stderr log lines can be awaited."""

    def __init__(self, config_path, *extra):
        self.proc = subprocess.Popen([SLUICE_BIN, "serve", "-c", config_path, *extra],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.lines = []

    def wait_for_line(self, needle, timeout=10.0):
        """Returns the first stderr line containing `needle`; raises after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        for line in self.lines:
            if needle in line:
                return line
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stderr], [], [], deadline - time.monotonic())
            if not ready:
                break
            line = self.proc.stderr.readline()
            if not line:
                break
            self.lines.append(line)
            if needle in line:
                return line
        raise AssertionError(f"no log line with {needle!r} within {timeout}s; got {self.lines}")

    def stop(self, sig, timeout=10.0):
        """Sends `sig` and returns the exit code."""
        self.proc.send_signal(sig)
        code = self.proc.wait(timeout=timeout)
        self.lines.extend(self.proc.stderr.read().splitlines(keepends=True))
        return code

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc.stderr.close()


def tempdir():
    return tempfile.TemporaryDirectory(prefix="sluice-it-")
