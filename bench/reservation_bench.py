"""bench/run reservations: reserve + settle pairs beside GET /v1/authorize, one sluice on the
memory store, then one on a local Redis, alternating modes in each round (wrk,
bench/wrk/load.lua's "authorize", "reserve", "authreserve" and "check" modes).

Two kinds of pair, each two HTTP requests and two store steps:
  - "pairs": POST /v1/reserve (cost 1 held) then POST /v1/reservations/{id}/settle {"cost":1}
    (an application that reserves with a JSON body);
  - "gateway pairs": GET /v1/authorize with Sluice-Reserve: 1 then the same settle (a gateway that
    reserves with a header, the application or the gateway settling after the answer).
The measure is sluice's CPU per operation (its process CPU over the run divided by authorizations,
or by pairs), which does not depend on how fast wrk, on the same 2 cores, manages to drive it;
on Redis also Redis's CPU per operation. Throughput is reported beside it. Target: a pair costs at
most 2.2 authorizations.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import benchlib as bl  # noqa: E402
from benchlib import median  # noqa: E402

# mode name in the results -> (wrk mode, path, operations per request)
MODES = {
    "authorize": ("authorize", "/v1/authorize", 1.0),
    "gateway_pairs": ("authreserve", "/", 0.5),
    "pairs": ("reserve", "/", 0.5),
    "check": ("check", "/v1/check", 1.0),
}
STORES = ("memory", "redis")


def log(msg):
    print(f"[reservations] {msg}", file=sys.stderr, flush=True)


def run_one(ch, base, mode, duration, sluice_pid, rds=None):
    wrk_mode, path, per_request = MODES[mode]
    if rds:
        rds.cmd("CONFIG", "RESETSTAT")
        redis_cpu0 = rds.cpu_seconds()
    r = bl.run_wrk(ch, base + path, duration, 32, keys=10000, mode=wrk_mode, watch=(sluice_pid,))
    r["cpu_pct"]["sluice"] = r["cpu_pct"].pop(sluice_pid)
    if r["non2xx"] or r["socket_errors"]:
        raise RuntimeError(f"HTTP errors in a measured run ({mode}): {r}")
    ops = r["rps"] * per_request
    r["ops_per_s"] = ops
    # sluice's CPU microseconds per operation (per authorization, or per pair).
    r["cpu_us_per_op"] = r["cpu_pct"]["sluice"] / 100.0 / ops * 1e6 if ops else None
    if rds:
        r["redis_cpu_us_per_op"] = ((rds.cpu_seconds() - redis_cpu0) * 1e6 /
                                    max(r["requests"] * per_request, 1))
        r["redis_calls_per_op"] = (sum(c["calls"] for c in rds.commandstats().values()) /
                                   max(r["requests"] * per_request, 1))
    return r


def run_store(args, ch, sluice_config, start_redis, store):
    rds = None
    target = "memory"
    if store == "redis":
        _, rport = start_redis(ch, args.tmp)
        rds = bl.Redis(rport)
        target = rport
    port, admin = bl.free_port(), bl.free_port()
    cfg = os.path.join(args.tmp, f"sluice-reservations-{store}.yaml")
    with open(cfg, "w") as f:
        f.write(sluice_config(port, admin, target))
    logf = open(os.path.join(args.tmp, f"sluice-reservations-{store}.log"), "w")
    sp = ch.start([args.sluice, "serve", "-c", cfg, "--log-level", "warn"], stderr=logf)
    bl.wait_listening(port, sp)
    base = f"http://127.0.0.1:{port}"
    R = {m: [] for m in MODES}
    for m in MODES:
        run_one(ch, base, m, args.warmup, sp.pid, rds)
    for rnd in range(args.rounds):
        got = {m: run_one(ch, base, m, args.duration, sp.pid, rds) for m in MODES}
        for m in MODES:
            R[m].append(got[m])
        log(f"{store} round {rnd + 1}: " + " | ".join(
            f"{m} {got[m]['ops_per_s']:,.0f}/s {got[m]['cpu_us_per_op']:.1f} us" +
            (f" (redis {got[m]['redis_cpu_us_per_op']:.1f} us)" if rds else "") for m in MODES))
    ch.stop(sp)
    return R


def run_reservations(args, ch, sluice_config, start_redis):
    return {store: run_store(args, ch, sluice_config, start_redis, store) for store in STORES}


def rows(R, row):
    for store in STORES:
        S = R[store]
        section = f"reservations ({store})"

        def med(mode, field):
            return median([x.get(field) for x in S[mode]])

        def ratio(mode, field="cpu_us_per_op"):
            # Per round (the rounds alternate modes), then the median.
            return median([p[field] / a[field] for a, p in zip(S["authorize"], S[mode])
                           if a.get(field)])

        a_cpu = med("authorize", "cpu_us_per_op")
        for mode, what in (("gateway_pairs", "gateway pair (authorize with Sluice-Reserve, settle)"),
                           ("pairs", "pair (POST /v1/reserve, settle)")):
            rt = ratio(mode)
            row(section, f"sluice CPU per {what}", med(mode, "cpu_us_per_op"),
                "one GET /v1/authorize", a_cpu, "µs CPU", rt, "≤ 2.2 ×",
                "met" if rt is not None and rt <= 2.2 else "not met")
        c_cpu = med("check", "cpu_us_per_op")
        row(section, "sluice CPU per pair (POST /v1/reserve, settle)", med("pairs", "cpu_us_per_op"),
            "two POST /v1/check (the same two JSON requests, no reservation)",
            2 * c_cpu if c_cpu else None, "µs CPU")
        if store == "redis":
            a_r = med("authorize", "redis_cpu_us_per_op")
            for mode, what in (("gateway_pairs", "gateway pair"), ("pairs", "pair")):
                row(section, f"Redis CPU per {what}", med(mode, "redis_cpu_us_per_op"),
                    "per GET /v1/authorize", a_r, "µs CPU", ratio(mode, "redis_cpu_us_per_op"))
            row(section, "Redis commands per pair", med("pairs", "redis_calls_per_op"),
                "per GET /v1/authorize", med("authorize", "redis_calls_per_op"), "calls")
        a_rps = med("authorize", "ops_per_s")
        for mode, what in (("gateway_pairs", "gateway pairs"), ("pairs", "pairs")):
            row(section, f"{what} per second", med(mode, "ops_per_s"),
                "GET /v1/authorize per second", a_rps, "/s")
        row(section, "p99 of one request of a pair (POST /v1/reserve, settle)",
            med("pairs", "p99_ms"), "p99 of /v1/authorize", med("authorize", "p99_ms"), "ms")
