"""bench/run reservations: reserve + settle pairs beside GET /v1/authorize, one sluice on the
memory store, alternating rounds (wrk, bench/wrk/load.lua's "reserve" and "authorize" modes).

A pair is POST /v1/reserve (cost 1 held) then POST /v1/reservations/{id}/settle {"cost":1}: two
HTTP requests and two store steps. The measure is sluice's CPU per operation (its process CPU over
the run divided by authorizations, or by pairs), which does not depend on how fast wrk, on the same
2 cores, manages to drive it; throughput is reported beside it. Target: a pair costs at most 2.2
authorizations. The memory store only, for now.
"""
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import benchlib as bl  # noqa: E402

ORDER = ("authorize", "pairs")


def log(msg):
    print(f"[reservations] {msg}", file=sys.stderr, flush=True)


def run_one(ch, url, mode, duration, keys, sluice_pid):
    r = bl.run_wrk(ch, url, duration, 32, keys=keys, mode=mode, watch=(sluice_pid,))
    r["cpu_pct"]["sluice"] = r["cpu_pct"].pop(sluice_pid)
    if r["non2xx"] or r["socket_errors"]:
        raise RuntimeError(f"HTTP errors in a measured run ({mode}): {r}")
    ops = r["rps"] / 2 if mode == "reserve" else r["rps"]
    r["ops_per_s"] = ops
    # sluice's CPU microseconds per operation (per authorization, or per pair).
    r["cpu_us_per_op"] = r["cpu_pct"]["sluice"] / 100.0 / ops * 1e6 if ops else None
    return r


def run_reservations(args, ch, sluice_config):
    port, admin = bl.free_port(), bl.free_port()
    cfg = os.path.join(args.tmp, "sluice-reservations.yaml")
    with open(cfg, "w") as f:
        f.write(sluice_config(port, admin, "memory"))
    logf = open(os.path.join(args.tmp, "sluice-reservations.log"), "w")
    sp = ch.start([args.sluice, "serve", "-c", cfg, "--log-level", "warn"], stderr=logf)
    bl.wait_listening(port, sp)
    base = f"http://127.0.0.1:{port}"
    R = {"authorize": [], "pairs": [], "check": []}
    run_one(ch, base + "/v1/authorize", "authorize", args.warmup, 10000, sp.pid)
    run_one(ch, base + "/", "reserve", args.warmup, 10000, sp.pid)
    for r in range(args.rounds):
        a = run_one(ch, base + "/v1/authorize", "authorize", args.duration, 10000, sp.pid)
        p = run_one(ch, base + "/", "reserve", args.duration, 10000, sp.pid)
        c = run_one(ch, base + "/v1/check", "check", args.duration, 10000, sp.pid)
        R["authorize"].append(a)
        R["pairs"].append(p)
        R["check"].append(c)
        log(f"round {r + 1}: authorize {a['ops_per_s']:,.0f}/s {a['cpu_us_per_op']:.1f} us CPU | "
            f"pairs {p['ops_per_s']:,.0f}/s {p['cpu_us_per_op']:.1f} us CPU | "
            f"check {c['ops_per_s']:,.0f}/s {c['cpu_us_per_op']:.1f} us CPU")
    ch.stop(sp)
    return R


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def rows(R, row):
    a_cpu = median([x["cpu_us_per_op"] for x in R["authorize"]])
    p_cpu = median([x["cpu_us_per_op"] for x in R["pairs"]])
    ratios = [p["cpu_us_per_op"] / a["cpu_us_per_op"]
              for a, p in zip(R["authorize"], R["pairs"]) if a["cpu_us_per_op"]]
    ratio = median(ratios)
    row("reservations (memory)", "sluice CPU per reserve+settle pair", p_cpu,
        "one GET /v1/authorize", a_cpu, "µs CPU", ratio, "≤ 2.2 ×",
        "met" if ratio is not None and ratio <= 2.2 else "not met")
    c_cpu = median([x["cpu_us_per_op"] for x in R["check"]])
    row("reservations (memory)", "sluice CPU per reserve+settle pair", p_cpu,
        "two POST /v1/check (the same two JSON requests, no reservation)",
        2 * c_cpu if c_cpu else None, "µs CPU")
    a_rps = median([x["ops_per_s"] for x in R["authorize"]])
    p_rps = median([x["ops_per_s"] for x in R["pairs"]])
    row("reservations (memory)", "reserve+settle pairs per second", p_rps,
        "GET /v1/authorize per second", a_rps, "/s")
    row("reservations (memory)", "p99 of one reserve or settle request",
        median([x["p99_ms"] for x in R["pairs"]]), "p99 of /v1/authorize",
        median([x["p99_ms"] for x in R["authorize"]]), "ms")
