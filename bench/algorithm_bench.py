"""bench/run algorithms: what a sliding or gcra limit costs Redis beside a fixed one.

One Redis and three sluice instances on it (one event loop each), identical but for the
algorithm of the plan's first limit: `per_minute` fixed, sliding or gcra (6,000,000 a minute: a
gcra interval of exactly 10 µs, below the sliding bound; never reached by the load), beside the
same fixed `daily` limit. In each round wrk drives GET /v1/authorize (10,000 API keys) on each
instance in turn; the measure is Redis's CPU per decision (its process CPU over the run divided by
the decisions), with the commands Redis executed per decision (inside the script included) and
sluice's own CPU per decision beside it. Then, for each variant on an emptied Redis, 100,000
subjects make one request each (POST /v1/check) and Redis's used_memory grows by the bytes per
subject. Target: a sliding or gcra limit costs no more Redis CPU per decision, nor memory per
subject, than a fixed one.
"""
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import benchlib as bl  # noqa: E402
from benchlib import median  # noqa: E402

VARIANTS = ("fixed", "sliding", "gcra")
QUOTA = 6_000_000
SUBJECTS = 100_000


def log(msg):
    print(f"[algorithms] {msg}", file=sys.stderr, flush=True)


def config(port, admin, redis_port, variant, keys):
    algorithm = "" if variant == "fixed" else f", algorithm: {variant}"
    lines = ["server:", f'  listen: "127.0.0.1:{port}"', f'  admin_listen: "127.0.0.1:{admin}"',
             "  threads: 1", "store:", "  type: redis",
             f'  redis: {{ url: "redis://127.0.0.1:{redis_port}/0", timeout: 20ms }}',
             "plans:", "  bench:", "    limits:",
             f"      - {{ name: per_minute, quota: {QUOTA}, window: 1m{algorithm} }}",
             "      - { name: daily, quota: 1000000000, window: day }",
             "keys:"]
    lines += [f"  - {{ key: bench-key-{i}, subject: user-{i}, plan: bench }}" for i in range(keys)]
    return "\n".join(lines) + "\n"


def run_algorithms(args, ch, start_redis):
    _, rport = start_redis(ch, args.tmp)
    rds = bl.Redis(rport)
    instances = {}
    for v in VARIANTS:
        port, admin = bl.free_port(), bl.free_port()
        cfg = os.path.join(args.tmp, f"sluice-{v}.yaml")
        with open(cfg, "w") as f:
            f.write(config(port, admin, rport, v, 10000))
        logf = open(os.path.join(args.tmp, f"sluice-{v}.log"), "w")
        p = ch.start([args.sluice, "serve", "-c", cfg, "--log-level", "warn"], stderr=logf)
        bl.wait_listening(port, p)
        instances[v] = (p, f"http://127.0.0.1:{port}")
    R = {"cpu": {v: [] for v in VARIANTS}, "memory": {}}

    def measure(v, duration):
        p, base = instances[v]
        rds.cmd("CONFIG", "RESETSTAT")
        cpu0 = rds.cpu_seconds()
        r = bl.run_wrk(ch, base + "/v1/authorize", duration, 32, keys=10000, watch=(p.pid,))
        if r["non2xx"] or r["socket_errors"]:
            raise RuntimeError(f"HTTP errors in a measured run ({v}): {r}")
        decisions = max(r["requests"], 1)
        r["redis_cpu_us"] = (rds.cpu_seconds() - cpu0) * 1e6 / decisions
        r["sluice_cpu_us"] = r["cpu_pct"].pop(p.pid) / 100.0 / r["rps"] * 1e6
        r.update(bl.redis_costs(rds.commandstats(), decisions, rds.reads_processed()))
        return r

    for v in VARIANTS:
        measure(v, args.warmup)
    for rnd in range(args.rounds):
        got = {v: measure(v, args.duration) for v in VARIANTS}
        for v in VARIANTS:
            R["cpu"][v].append(got[v])
        log(f"round {rnd + 1}: " + " | ".join(
            f"{v} {got[v]['rps']:,.0f}/s redis {got[v]['redis_cpu_us']:.2f} us "
            f"({got[v]['executed_commands_per_decision']:.2f} cmds) sluice "
            f"{got[v]['sluice_cpu_us']:.1f} us" for v in VARIANTS))
    # Memory per subject: each variant alone on an emptied Redis, every subject once.
    for v in VARIANTS:
        p, base = instances[v]
        # Within one minute: a fill across its end would leave two windows' state behind.
        left = 60 - time.time() % 60
        if left < args.fill + 5:
            time.sleep(left + 0.5)
        rds.cmd("FLUSHALL")
        before = int(rds.info("memory")["used_memory"])
        r = bl.run_wrk(ch, base + "/v1/check", args.fill, 32, keys=SUBJECTS, mode="check",
                       plan="bench")
        if r["non2xx"] or r["socket_errors"] or r["requests"] < SUBJECTS:
            raise RuntimeError(f"the fill of {v} did not reach every subject once: {r}")
        after = int(rds.info("memory")["used_memory"])
        R["memory"][v] = {"bytes_per_subject": (after - before) / SUBJECTS,
                          "requests": r["requests"], "keys": int(rds.cmd("DBSIZE").strip())}
        log(f"{v}: {(after - before) / SUBJECTS:.1f} B per subject ({r['requests']:,} requests)")
    for v in VARIANTS:
        ch.stop(instances[v][0])
    return R


def rows(R, row):
    cpu = R["cpu"]

    def med(v, field):
        return median([x.get(field) for x in cpu[v]])

    def ratio(v, field):
        return median([b[field] / a[field] for a, b in zip(cpu["fixed"], cpu[v]) if a.get(field)])

    for v in ("sliding", "gcra"):
        rt = ratio(v, "redis_cpu_us")
        row("algorithms (Redis)", f"Redis CPU per decision, per_minute {v}", med(v, "redis_cpu_us"),
            "the same plan, per_minute fixed", med("fixed", "redis_cpu_us"), "µs CPU", rt,
            "≤ 1 ×", "met" if rt is not None and rt <= 1.0 else "not met")
        row("algorithms (Redis)", f"commands Redis executes per decision, {v}",
            med(v, "executed_commands_per_decision"), "fixed",
            med("fixed", "executed_commands_per_decision"), "commands")
        row("algorithms (Redis)", f"sluice CPU per decision, {v}", med(v, "sluice_cpu_us"),
            "fixed", med("fixed", "sluice_cpu_us"), "µs CPU", ratio(v, "sluice_cpu_us"))
        mem, ref = R["memory"][v]["bytes_per_subject"], R["memory"]["fixed"]["bytes_per_subject"]
        row("algorithms (Redis)", f"Redis memory per subject, {v} (+ the fixed daily limit)", mem,
            "fixed (+ the same daily limit)", ref, "B", None, "≤ 1 ×",
            "met" if mem <= ref else "not met")
