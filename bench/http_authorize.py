#!/usr/bin/env python3
"""GET /v1/authorize on the memory store versus nginx's static `return 200`, side by side.

Starts a release sluice (1 worker thread, 10,000 API keys over two plans with quotas high enough
that every request is allowed) and nginx (1 worker, `return 200`) on free loopback ports, then runs
wrk against each in turn, alternating, ROUNDS times, and prints the medians and ratios. wrk and the
server under test share the machine's cores; both servers get the same treatment.

  python3 bench/http_authorize.py [--sluice build/release/src/sluice/sluice] [--rounds 3] [--duration 10]
"""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port, deadline_s=10):
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listening on {port}")


def sluice_config(port, admin_port, keys):
    lines = [
        "server:",
        f'  listen: "127.0.0.1:{port}"',
        f'  admin_listen: "127.0.0.1:{admin_port}"',
        "  threads: 1",
        "plans:",
        "  bench:",
        "    limits:",
        "      - { name: per_minute, quota: 100000000, window: 1m }",
        "      - { name: daily, quota: 1000000000, window: day, alert_at: [80, 100] }",
        "keys:",
    ]
    lines += [f"  - {{ key: bench-key-{i}, subject: user-{i}, plan: bench }}" for i in range(keys)]
    return "\n".join(lines) + "\n"


def nginx_config(port, prefix):
    return f"""
worker_processes 1;
daemon off;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {prefix}/body;
  proxy_temp_path {prefix}/proxy;
  fastcgi_temp_path {prefix}/fastcgi;
  uwsgi_temp_path {prefix}/uwsgi;
  scgi_temp_path {prefix}/scgi;
  keepalive_requests 1000000;
  server {{
    listen 127.0.0.1:{port};
    location / {{ return 200; }}
  }}
}}
"""


def parse_wrk(text):
    def dur(v, unit):
        v = float(v)
        return v * {"us": 1e-3, "ms": 1.0, "s": 1000.0}[unit]
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
    lat = {}
    for pct in ("50", "99"):
        m = re.search(rf"^\s+{pct}(?:\.000)?%\s+([\d.]+)(us|ms|s)", text, re.M)
        lat[pct] = dur(*m.groups())
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    return {"rps": rps, "p50_ms": lat["50"], "p99_ms": lat["99"],
            "non2xx": int(non2xx.group(1)) if non2xx else 0}


def run_wrk(port, duration, connections, script=None):
    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{duration}s", "--latency"]
    if script:
        cmd += ["-s", script]
    cmd.append(f"http://127.0.0.1:{port}/v1/authorize")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 30,
                         env=dict(os.environ, SLUICE_BENCH_KEYS="10000"))
    return parse_wrk(out.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sluice", default=os.path.join(HERE, "..", "build", "release", "src", "sluice", "sluice"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    for tool in ("wrk", "nginx"):
        if not shutil.which(tool) and not os.path.exists("/usr/sbin/nginx"):
            sys.exit(f"{tool} not found: run scripts/install-deps")

    procs = []
    with tempfile.TemporaryDirectory(prefix="sluice-bench-") as tmp:
        try:
            sp, ap_ = free_port(), free_port()
            cfg = os.path.join(tmp, "sluice.yaml")
            with open(cfg, "w") as f:
                f.write(sluice_config(sp, ap_, 10000))
            procs.append(subprocess.Popen([args.sluice, "serve", "-c", cfg, "--log-level", "warn"],
                                          stderr=subprocess.DEVNULL))
            np_ = free_port()
            ncfg = os.path.join(tmp, "nginx.conf")
            with open(ncfg, "w") as f:
                f.write(nginx_config(np_, tmp))
            procs.append(subprocess.Popen(["/usr/sbin/nginx", "-p", tmp, "-c", ncfg],
                                          stderr=subprocess.DEVNULL))
            wait_listening(sp)
            wait_listening(np_)
            script = os.path.join(HERE, "wrk", "keys.lua")
            # Warm up both (first-touch of the store's entries, nginx's caches).
            run_wrk(sp, 2, args.connections, script)
            run_wrk(np_, 2, args.connections, script)
            results = {"sluice": [], "nginx": []}
            for r in range(args.rounds):
                results["sluice"].append(run_wrk(sp, args.duration, args.connections, script))
                results["nginx"].append(run_wrk(np_, args.duration, args.connections, script))
                print(f"round {r + 1}: sluice {results['sluice'][-1]}  nginx {results['nginx'][-1]}",
                      file=sys.stderr)
        finally:
            for p in procs:
                p.send_signal(signal.SIGTERM)
            for p in procs:
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()

    med = {name: {k: statistics.median(r[k] for r in runs) for k in ("rps", "p50_ms", "p99_ms")}
           for name, runs in results.items()}
    ratio = med["sluice"]["rps"] / med["nginx"]["rps"]
    print(f"{'server':<8} {'req/s':>10} {'p50 ms':>8} {'p99 ms':>8}")
    for name in ("sluice", "nginx"):
        m = med[name]
        print(f"{name:<8} {m['rps']:>10.0f} {m['p50_ms']:>8.3f} {m['p99_ms']:>8.3f}")
    print(f"sluice/nginx throughput ratio: {ratio:.2f}")
    non2xx = sum(r["non2xx"] for r in results["sluice"])
    print(f"sluice non-2xx responses: {non2xx}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"medians": med, "ratio": ratio, "runs": results}, f, indent=2)


if __name__ == "__main__":
    main()
