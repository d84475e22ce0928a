"""Helpers for bench/run: child processes that are always cleaned up, free loopback ports, CPU
accounting, wrk and redis-benchmark runners and their parsers, a tiny Redis client (redis-cli).

Python 3 standard library only.
"""
import json
import os
import re
import statistics
import signal
import socket
import subprocess
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")


class Interrupted(Exception):
    """Raised from the SIGINT/SIGTERM handler so every `finally` runs."""


def median(xs):
    """The median of the values that are not None, or None when there are none."""
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def install_signal_handlers():
    def handler(signum, _frame):
        # Ignore further signals while cleaning up, then unwind.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Interrupted(signal.Signals(signum).name)
    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)


class Children:
    """Every process bench/run starts, each in its own process group, stopped on close()."""

    def __init__(self):
        self.procs = []

    def start(self, cmd, *, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=None):
        p = subprocess.Popen(cmd, stdout=stdout, stderr=stderr, env=env, start_new_session=True,
                             text=True)
        self.procs.append(p)
        return p

    def stop(self, p, grace=10.0):
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                p.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
        if p in self.procs:
            self.procs.remove(p)

    def close(self):
        for p in list(reversed(self.procs)):
            self.stop(p, grace=5.0)


def run_bounded(children, cmd, timeout, env=None):
    """Runs `cmd` to completion (killed after `timeout` s); returns (stdout, cpu_seconds)."""
    p = children.start(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        children.stop(p)
        raise RuntimeError(f"timed out after {timeout}s: {' '.join(cmd)}")
    # communicate() reaped it; its CPU time is in our children's rusage (delta taken by caller).
    children.procs.remove(p)
    if p.returncode != 0:
        raise RuntimeError(f"exit {p.returncode}: {' '.join(cmd)}\n{out[-2000:]}")
    return out


def children_cpu():
    r = os.times()
    return r.children_user + r.children_system


def proc_cpu(pid):
    """CPU seconds (user + system) used so far by a process and its threads."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def tree_cpu(pid):
    """CPU seconds of a process and its direct children (nginx's master and its worker)."""
    total = proc_cpu(pid)
    try:
        kids = []
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                kids += f.read().split()
        total += sum(proc_cpu(int(k)) for k in kids)
    except OSError:
        pass
    return total


_handed_out = set()


def free_port():
    """A free loopback port not handed out before by this process (the kernel may offer the same
    free port to two calls in a row)."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port
    raise RuntimeError("no fresh free port in 100 tries")


def wait_listening(port, proc=None, deadline_s=15):
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited ({proc.returncode}) before listening on {port}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listening on 127.0.0.1:{port}")


# ---------------------------------------------------------------------------------------------
# wrk

WRK_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "wrk", "load.lua")


def run_wrk(children, url, duration, connections, *, keys=10000, mode="authorize", rate=0,
            plan="bench", watch=(), offset=0, extra_env=None):
    """One wrk run (1 thread). Returns a dict: rps, p50/p90/p99/p999 (ms), requests, errors,
    schedule lateness, and the CPU % of wrk and of each pid in `watch` during the run. `offset`:
    where the round-robin over the keys starts; `extra_env`: more SLUICE_BENCH_* settings of
    load.lua (the "hot" mode's)."""
    env = dict(os.environ, SLUICE_BENCH_KEYS=str(keys), SLUICE_BENCH_MODE=mode,
               SLUICE_BENCH_RATE=str(int(rate)), SLUICE_BENCH_PLAN=plan,
               SLUICE_BENCH_OFFSET=str(int(offset)), **(extra_env or {}))
    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{duration}s", "--timeout", "5s", "-s", WRK_SCRIPT,
           url]
    before = {pid: tree_cpu(pid) for pid in watch}
    c0, t0 = children_cpu(), time.monotonic()
    out = run_bounded(children, cmd, timeout=duration + 30, env=env)
    wall = time.monotonic() - t0
    cpu = {"wrk": 100.0 * (children_cpu() - c0) / wall}
    for pid, v in before.items():
        cpu[pid] = 100.0 * (tree_cpu(pid) - v) / wall
    m = re.search(r"^SLUICE_JSON (\{.*\})$", out, re.M)
    if not m:
        raise RuntimeError(f"wrk printed no summary:\n{out[-2000:]}")
    j = json.loads(m.group(1))
    secs = j["duration_us"] / 1e6
    return {
        "rps": j["requests"] / secs,
        "requests": j["requests"],
        "p50_ms": j["p50_us"] / 1000, "p90_ms": j["p90_us"] / 1000,
        "p99_ms": j["p99_us"] / 1000, "p999_ms": j["p999_us"] / 1000, "max_ms": j["max_us"] / 1000,
        "non2xx": j["status_errors"], "socket_errors": j["socket_errors"],
        "late": j["late"], "max_lag_ms": j["max_lag_ms"],
        "offered_rps": rate or None,
        "cpu_pct": cpu,
    }


# ---------------------------------------------------------------------------------------------
# Redis

class Redis:
    """Just enough of a client for bench/run, through redis-cli."""

    def __init__(self, port):
        self.port = port

    def cmd(self, *args, stdin=None):
        out = subprocess.run(["redis-cli", "-p", str(self.port)] + list(args), input=stdin,
                             capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            raise RuntimeError(f"redis-cli {' '.join(args)}: {out.stderr}")
        return out.stdout

    def info(self, section):
        d = {}
        for line in self.cmd("INFO", section).splitlines():
            if ":" in line and not line.startswith("#"):
                k, v = line.split(":", 1)
                d[k] = v.strip()
        return d

    def cpu_seconds(self):
        i = self.info("cpu")
        return float(i["used_cpu_user"]) + float(i["used_cpu_sys"])

    def reads_processed(self):
        """Read events Redis handled since the last CONFIG RESETSTAT: a client's pipelined batch
        is one read, so decisions per read is the pipeline depth Redis actually saw."""
        return int(self.info("stats").get("total_reads_processed", 0))

    def commandstats(self):
        stats = {}
        for k, v in self.info("commandstats").items():
            if k.startswith("cmdstat_"):
                fields = dict(kv.split("=") for kv in v.split(","))
                stats[k[len("cmdstat_"):]] = {"calls": int(fields["calls"]),
                                              "usec": int(fields["usec"])}
        return stats


# Commands a client sends (the rest in commandstats are run by scripts, or are bench/run's own).
CLIENT_COMMANDS = ("evalsha", "eval", "incr", "expire")
OWN_COMMANDS = ("info", "config", "dbsize", "flushall", "script", "ping", "client")


def redis_costs(stats, decisions, reads=0):
    """Commands and Redis CPU per decision from INFO commandstats (after CONFIG RESETSTAT), and
    decisions per read event when `reads` (total_reads_processed) is given."""
    stats = {c: s for c, s in stats.items() if c.split("|")[0] not in OWN_COMMANDS}
    sent = sum(s["calls"] for c, s in stats.items() if c in CLIENT_COMMANDS)
    executed = sum(s["calls"] for s in stats.values())
    usec = sum(s["usec"] for c, s in stats.items() if c in CLIENT_COMMANDS)
    return {
        "sent_commands_per_decision": sent / decisions if decisions else None,
        "executed_commands_per_decision": executed / decisions if decisions else None,
        "cmd_usec_per_decision": usec / decisions if decisions else None,
        "decisions_per_read": decisions / reads if reads else None,
        "commandstats": stats,
    }


def parse_redis_benchmark_csv(out):
    # "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms",
    # "p99_latency_ms","max_latency_ms"
    rows = [line for line in out.splitlines() if line.startswith('"') and not line.startswith('"test"')]
    if not rows:
        raise RuntimeError(f"redis-benchmark printed no CSV row:\n{out[-2000:]}")
    vals = [v.strip('"') for v in rows[-1].split('","')]
    return {"rps": float(vals[1]), "p50_ms": float(vals[4]), "p99_ms": float(vals[6]),
            "max_ms": float(vals[7])}
