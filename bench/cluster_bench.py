"""bench/run cluster: sluice on a Redis Cluster of 3 masters beside the same sluice on one Redis,
and a hot subject on the cluster with the over-limit cache answering its denials and with it
defeated, in alternating rounds.

Four variants, one wrk run each per round, in this order:

- `single`: GET /v1/authorize over 10,000 API keys (the bench plan of bench/run's sluice_config),
  sluice on one redis-server;
- `cluster`: the same requests, a second sluice (same configuration but for `cluster_nodes`) on a
  cluster of 3 masters without replicas (`redis-cli --cluster create` on loopback ports whose bus
  port, + 10000, is free);
- `hot_cached`: on the cluster sluice, load.lua's "hot" mode: 90 % of the requests on one subject
  whose daily quota (HOT_QUOTA) is spent, so it is denied, the rest round-robin over the 10,000
  keys. The hot subject has HOT_KEYS API keys, used in turn, all on plan `hot`: after the first
  denial the over-limit cache answers its requests without Redis;
- `hot_uncached`: the same mix and the same sluice, but the hot subject's keys are on HOT_KEYS
  plans `hot_0` … that differ only in name. The cache keeps one entry per subject, valid only
  under the plan it was learnt under, and the entry a request finds is from at most 32 hot
  requests back (32 connections in flight, the subject's replies in order on its one master), so
  no lookup matches: every request goes to Redis, as it would with the cache off. (sluice has no
  setting that turns the cache off.) Each run checks the cache's hits in /metrics.

Redis CPU is INFO cpu (used_cpu_user + used_cpu_sys) of every master, the delta over the run, over
the requests wrk had answered (denials included); EVALSHA calls per master from INFO commandstats
after CONFIG RESETSTAT. A run fails on socket errors, on a non-2xx answer where every request
should be admitted (but for degraded ones) and on a hot mix whose non-2xx answers are not the hot
subject's share. Store errors (sluice_store_errors_total: Redis silent for the 20 ms timeout, which
a busy machine can cause) are answered per on_store_error and counted, by reason. What the rest of the machine used meanwhile (busy CPU
from /proc/stat less wrk, sluice and Redis) is kept as `others`: how noisy the run was. Before the
rounds, the servers' CPU at rest (sluice connected, no requests) is measured once.
"""
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request

import benchlib as bl
from benchlib import median

TOKEN = "bench-admin-token-0123456789"  # the admin plane's /metrics (loopback only, this run only)
MASTERS = 3
KEYS = 10000
CONNECTIONS = 32
HOT_SUBJECT = "hot-user"
HOT_PERCENT = 90
HOT_QUOTA = 100   # the hot subject's daily quota: spent by the warm-up
HOT_PER_MINUTE = 100_000_000  # its per-minute quota, as the bench plan's: never reached
HOT_KEYS = 64     # > CONNECTIONS: see hot_uncached above
HOT_LIMIT = "hot_daily"  # a limit name only the hot subject has: its counter hash tells its master
ORDER = ("single", "cluster", "hot_cached", "hot_uncached")
WHAT = {
    "single": "one Redis, 10,000 keys",
    "cluster": f"Redis Cluster, {MASTERS} masters, 10,000 keys",
    "hot_cached": f"cluster, {HOT_PERCENT} % on one denied subject, over-limit cache answering",
    "hot_uncached": f"cluster, {HOT_PERCENT} % on one denied subject, over-limit cache defeated",
}


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] [cluster] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Redis: one server, and a cluster of masters

def bus_free_port():
    """A free loopback port P whose cluster bus port P + 10000 is free too."""
    for _ in range(200):
        port = bl.free_port()
        if port + 10000 > 65535:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port whose cluster bus port is free")


def start_redis_node(ch, tmp, port, cluster):
    d = os.path.join(tmp, f"redis-{port}")
    os.makedirs(d)
    cmd = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
           "--appendonly", "no", "--dir", d, "--logfile", os.path.join(tmp, f"redis-{port}.log")]
    if cluster:
        cmd += ["--cluster-enabled", "yes", "--cluster-config-file", os.path.join(d, "nodes.conf"),
                "--cluster-node-timeout", "5000"]
    p = ch.start(cmd)
    bl.wait_listening(port, p)
    return p


def start_cluster(ch, tmp):
    """MASTERS redis-server --cluster-enabled made one cluster, no replicas. Returns the ports."""
    ports = [bus_free_port() for _ in range(MASTERS)]
    for port in ports:
        start_redis_node(ch, tmp, port, cluster=True)
    out = subprocess.run(["redis-cli", "--cluster", "create", *[f"127.0.0.1:{p}" for p in ports],
                          "--cluster-replicas", "0", "--cluster-yes"],
                         capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError(f"redis-cli --cluster create failed:\n{out.stdout[-2000:]}{out.stderr}")
    deadline = time.monotonic() + 30
    while True:  # until every node sees every slot served and every node known
        infos = [bl.Redis(p).cmd("CLUSTER", "INFO") for p in ports]
        if all("cluster_state:ok" in i and "cluster_slots_ok:16384" in i and
               f"cluster_known_nodes:{MASTERS}" in i for i in infos):
            return ports
        if time.monotonic() > deadline:
            raise RuntimeError(f"cluster not ok within 30 s: {infos}")
        time.sleep(0.1)  # the nodes' gossip converging, bounded by the deadline


def owner_of_hot_subject(ports):
    """The port of the master holding the hot subject's counter (its HOT_LIMIT hash)."""
    found = []
    for p in ports:
        out = subprocess.run(["redis-cli", "-p", str(p), "--scan", "--pattern", f"*:h:{HOT_LIMIT}:*"],
                             capture_output=True, text=True, timeout=60).stdout.split()
        if out:
            found.append(p)
    if len(found) != 1:
        raise RuntimeError(f"the hot subject's counter is on {found}, not on one master")
    return found[0]


# ---------------------------------------------------------------------------------------------
# sluice

def hot_lines():
    """The hot subject's plans and keys: HOT_KEYS keys on plan `hot` (hot-cached-<i>) and HOT_KEYS
    keys each on its own plan `hot_<i>` (hot-uncached-<i>), every plan the same two limits."""
    limits = [f"      - {{ name: per_minute, quota: {HOT_PER_MINUTE}, window: 1m }}",
                 f"      - {{ name: {HOT_LIMIT}, quota: {HOT_QUOTA}, window: day }}"]
    plans, keys = [], []
    for name in ["hot"] + [f"hot_{i}" for i in range(HOT_KEYS)]:
        plans += [f"  {name}:", "    limits:"] + limits
    for i in range(HOT_KEYS):
        keys.append(f"  - {{ key: hot-cached-{i}, subject: {HOT_SUBJECT}, plan: hot }}")
        keys.append(f"  - {{ key: hot-uncached-{i}, subject: {HOT_SUBJECT}, plan: hot_{i} }}")
    return plans, keys


def start_sluice(ch, args, sluice_config, name, store):
    port, admin = bl.free_port(), bl.free_port()
    plans, keys = hot_lines()
    text = sluice_config(port, admin, store, extra_plans=plans, extra_keys=keys).replace(
        "  threads: 1\n", f'  threads: 1\n  admin_token: "{TOKEN}"\n', 1)
    cfg = os.path.join(args.tmp, f"{name}.yaml")
    with open(cfg, "w") as f:
        f.write(text)
    logf = open(os.path.join(args.tmp, f"{name}.log"), "w")
    p = ch.start([args.sluice, "serve", "-c", cfg, "--log-level", "warn"], stderr=logf)
    bl.wait_listening(port, p)
    return {"proc": p, "url": f"http://127.0.0.1:{port}/v1/authorize", "admin": admin}


def machine_busy():
    """CPU seconds the whole machine has been busy (every core, every process), from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v[:8]) - v[3] - v[4]) / bl.CLK_TCK  # all but idle and iowait; guest is in user


def metrics(admin_port):
    """The counters this section checks, from the admin plane's /metrics."""
    req = urllib.request.Request(f"http://127.0.0.1:{admin_port}/metrics",
                                 headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(req, timeout=10) as r:
        text = r.read().decode()

    hits = re.search(r"^sluice_overlimit_cache_hits_total ([0-9.e+]+)$", text, re.M)
    errors = {}
    for m in re.finditer(r'^sluice_store_errors_total\{.*reason="([a-z_]+)"\} ([0-9.e+]+)$', text, re.M):
        errors[m.group(1)] = errors.get(m.group(1), 0) + float(m.group(2))
    return {"cache_hits": float(hits.group(1)) if hits else 0.0, "store_errors": errors}


# ---------------------------------------------------------------------------------------------
# one run

def run_one(ch, sluice, ports, variant, duration, hot_port=None):
    nodes = [bl.Redis(p) for p in ports]
    extra = None
    if variant.startswith("hot"):
        extra = {"SLUICE_BENCH_HOT_PERCENT": str(HOT_PERCENT), "SLUICE_BENCH_HOT_KEYS": str(HOT_KEYS),
                 "SLUICE_BENCH_HOT_KEY": "hot-cached" if variant == "hot_cached" else "hot-uncached"}
    for n in nodes:
        n.cmd("CONFIG", "RESETSTAT")
    m0 = metrics(sluice["admin"])
    cpu0 = {n.port: n.cpu_seconds() for n in nodes}
    busy0, t0 = machine_busy(), time.monotonic()
    r = bl.run_wrk(ch, sluice["url"], duration, CONNECTIONS, keys=KEYS,
                   mode="hot" if extra else "authorize", watch=(sluice["proc"].pid,), extra_env=extra)
    wall, busy = time.monotonic() - t0, machine_busy() - busy0
    cpu = {n.port: n.cpu_seconds() - cpu0[n.port] for n in nodes}
    stats = {n.port: n.commandstats() for n in nodes}
    reads = {n.port: n.reads_processed() for n in nodes}
    m1 = metrics(sluice["admin"])
    r["cpu_pct"]["sluice"] = r["cpu_pct"].pop(sluice["proc"].pid)
    decisions = max(r["requests"], 1)
    evalsha = {str(p): s.get("evalsha", {}).get("calls", 0) for p, s in stats.items()}
    r.update({
        "variant": variant,
        "redis_cpu_s": {str(p): c for p, c in cpu.items()},
        "redis_cpu_usec_per_decision": sum(cpu.values()) * 1e6 / decisions,
        "redis_cpu_pct": {str(p): 100 * c / wall for p, c in cpu.items()},
        "evalsha_per_decision": {p: c / decisions for p, c in evalsha.items()},
        "commands_per_decision": sum(v["calls"] for s in stats.values() for k, v in s.items()
                                     if k.split("|")[0] not in bl.OWN_COMMANDS) / decisions,
        "reads_per_decision": sum(reads.values()) / decisions,
        "commandstats": {str(p): s for p, s in stats.items()},
        "reads": {str(p): c for p, c in reads.items()},
        "cache_hits_per_decision": (m1["cache_hits"] - m0["cache_hits"]) / decisions,
        "store_errors": {k: v - m0["store_errors"].get(k, 0) for k, v in m1["store_errors"].items()
                         if v - m0["store_errors"].get(k, 0)},
        "denied_share": r["non2xx"] / decisions,
    })
    # Whatever else ran on the machine meanwhile (other sessions' builds and benchmarks): the noise.
    r["cpu_pct"]["others"] = max(100 * busy / wall - r["cpu_pct"]["sluice"] - r["cpu_pct"]["wrk"] -
                                 sum(r["redis_cpu_pct"].values()), 0)
    if hot_port is not None:
        r["hot_master"] = str(hot_port)
        r["hot_master_cpu_pct"] = r["redis_cpu_pct"][str(hot_port)]
        r["hot_master_cpu_usec_per_decision"] = cpu[hot_port] * 1e6 / decisions
    # Store errors (Redis silent for store.redis.timeout, 20 ms, on this busy machine) are answered
    # per on_store_error (deny: 503): counted and reported, not a failed run.
    degraded = sum(r["store_errors"].values())
    if r["socket_errors"]:
        raise RuntimeError(f"{variant}: socket errors in a measured run: {r}")
    if not extra and r["non2xx"] > degraded:
        raise RuntimeError(f"{variant}: {r['non2xx']} non-2xx answers where all are admitted")
    if extra and duration >= 2 and abs(100 * r["denied_share"] - HOT_PERCENT) > 1:
        # Only the hot subject is denied, every time once the warm-up has spent its quota.
        raise RuntimeError(f"{variant}: {100 * r['denied_share']:.1f} % denied, not {HOT_PERCENT} %")
    return r


def run_cluster(args, ch, sluice_config):
    """The section: one Redis and a cluster, a sluice on each, every variant of ORDER in each of
    args.rounds rounds."""
    single_port = bl.free_port()
    start_redis_node(ch, args.tmp, single_port, cluster=False)
    ports = start_cluster(ch, args.tmp)
    log(f"one Redis on {single_port}; cluster of {MASTERS} masters on {', '.join(map(str, ports))}")
    s_single = start_sluice(ch, args, sluice_config, "sluice-single", single_port)
    s_cluster = start_sluice(ch, args, sluice_config, "sluice-cluster", ports)
    # Warm-up: connections, the script loaded on every master, the hot subject's quota spent.
    run_one(ch, s_single, [single_port], "single", args.warmup)
    run_one(ch, s_cluster, ports, "cluster", args.warmup)
    run_one(ch, s_cluster, ports, "hot_uncached", args.warmup)
    hot_port = owner_of_hot_subject(ports)
    run_one(ch, s_cluster, ports, "hot_cached", args.warmup)
    log(f"the hot subject is on the master on {hot_port}")
    # What the servers cost with no requests (cluster bus, cron, sluice's own background commands).
    idle = [bl.Redis(p) for p in [single_port] + ports]
    cpu0 = [n.cpu_seconds() for n in idle]
    time.sleep(args.duration)
    used = [n.cpu_seconds() - c for n, c in zip(idle, cpu0)]
    idle_pct = {"seconds": args.duration, "single_pct": 100 * used[0] / args.duration,
                "cluster_pct": 100 * sum(used[1:]) / args.duration}
    log(f"at rest: one Redis {idle_pct['single_pct']:.1f} % of a core, the cluster's masters "
        f"{idle_pct['cluster_pct']:.1f} %")
    R = {"single_port": str(single_port), "masters": [str(p) for p in ports],
         "hot_master": str(hot_port), "what": WHAT,
         "hot": {"percent": HOT_PERCENT, "quota": HOT_QUOTA, "keys": HOT_KEYS}, "idle": idle_pct,
         **{v: [] for v in ORDER}}
    for r in range(args.rounds):
        line = []
        for v in ORDER:
            if v == "single":
                x = run_one(ch, s_single, [single_port], v, args.duration)
            else:
                x = run_one(ch, s_cluster, ports, v, args.duration, hot_port=hot_port)
            R[v].append(x)
            line.append(f"{v} {x['rps']:,.0f}/s Redis {x['redis_cpu_usec_per_decision']:.1f} us/dec "
                        f"(others {x['cpu_pct']['others']:.0f} %)")
        log(f"round {r + 1}: " + " | ".join(line))
    ch.stop(s_single["proc"])
    ch.stop(s_cluster["proc"])
    return R


# ---------------------------------------------------------------------------------------------
# the table


def rows(R, row):
    """The section's rows of bench/run's table, through its `row` function."""
    single, cluster, cached, uncached = (R[v] for v in ORDER)
    w = R["what"]

    def ratio(a, b, key):
        return median(x[key] / y[key] for x, y in zip(a, b) if y[key])

    def degraded(runs):
        return sum(sum(x["store_errors"].values()) for x in runs)

    sec = "Redis Cluster (3 masters) beside one Redis, GET /v1/authorize, 10,000 keys"
    row(sec, "decisions/s (ratio = median of per-round ratios)", median(x["rps"] for x in cluster),
        w["single"], median(x["rps"] for x in single), "req/s", ratio=ratio(cluster, single, "rps"))
    row(sec, "Redis CPU per decision, every master summed", median(x["redis_cpu_usec_per_decision"] for x in cluster),
        w["single"], median(x["redis_cpu_usec_per_decision"] for x in single), "µs",
        ratio=ratio(cluster, single, "redis_cpu_usec_per_decision"))
    row(sec, "Redis commands executed per decision (incl. inside the script), all masters",
        median(x["commands_per_decision"] for x in cluster), w["single"],
        median(x["commands_per_decision"] for x in single), "cmd")
    for i, p in enumerate(R["masters"]):
        row(sec, f"EVALSHA per decision on master {i + 1} (port {p})",
            median(x["evalsha_per_decision"][p] for x in cluster), w["single"],
            median(x["evalsha_per_decision"][R["single_port"]] for x in single), "cmd")
    row(sec, "Redis read events per decision, all masters (1 / the pipeline depth Redis sees)",
        median(x["reads_per_decision"] for x in cluster), w["single"],
        median(x["reads_per_decision"] for x in single), "cmd")
    row(sec, "Redis CPU at rest (sluice connected, no requests), % of one core, all masters",
        R["idle"]["cluster_pct"], "one Redis at rest", R["idle"]["single_pct"], "%")
    row(sec, "p99", median(x["p99_ms"] for x in cluster), w["single"], median(x["p99_ms"] for x in single), "ms")
    row(sec, "answers degraded (store errors), all rounds", degraded(cluster), w["single"], degraded(single),
        "n", ratio=False)
    row(sec, "sluice CPU, % of one core", median(x["cpu_pct"]["sluice"] for x in cluster), w["single"],
        median(x["cpu_pct"]["sluice"] for x in single), "%")

    sec = (f"hot subject on the cluster: {R['hot']['percent']} % of requests on one denied subject, "
           "the rest over 10,000 keys")
    row(sec, "decisions/s (ratio = median of per-round ratios)", median(x["rps"] for x in cached),
        w["hot_uncached"], median(x["rps"] for x in uncached), "req/s", ratio=ratio(cached, uncached, "rps"))
    row(sec, "Redis CPU per decision, every master summed",
        median(x["redis_cpu_usec_per_decision"] for x in cached), w["hot_uncached"],
        median(x["redis_cpu_usec_per_decision"] for x in uncached), "µs",
        ratio=ratio(cached, uncached, "redis_cpu_usec_per_decision"))
    row(sec, "CPU of the hot subject's master, % of one core", median(x["hot_master_cpu_pct"] for x in cached),
        w["hot_uncached"], median(x["hot_master_cpu_pct"] for x in uncached), "%",
        ratio=ratio(cached, uncached, "hot_master_cpu_pct"))
    row(sec, "CPU of the hot subject's master per decision", median(x["hot_master_cpu_usec_per_decision"] for x in cached),
        w["hot_uncached"], median(x["hot_master_cpu_usec_per_decision"] for x in uncached), "µs",
        ratio=ratio(cached, uncached, "hot_master_cpu_usec_per_decision"))
    for i, p in enumerate(R["masters"]):
        mark = " (the hot subject's)" if p == R["hot_master"] else ""
        row(sec, f"EVALSHA per decision on master {i + 1}{mark}",
            median(x["evalsha_per_decision"][p] for x in cached), w["hot_uncached"],
            median(x["evalsha_per_decision"][p] for x in uncached), "cmd")
    row(sec, "answered from the over-limit cache, per decision", median(x["cache_hits_per_decision"] for x in cached),
        w["hot_uncached"], median(x["cache_hits_per_decision"] for x in uncached), "share", ratio=False)
    row(sec, "non-2xx per decision (the hot subject's 429, any degraded 503)",
        median(x["denied_share"] for x in cached), w["hot_uncached"],
        median(x["denied_share"] for x in uncached), "share", ratio=False)
    row(sec, "answers degraded (store errors), all rounds", degraded(cached), w["hot_uncached"],
        degraded(uncached), "n", ratio=False)
    row(sec, "p99", median(x["p99_ms"] for x in cached), w["hot_uncached"],
        median(x["p99_ms"] for x in uncached), "ms")
    row(sec, "sluice CPU, % of one core", median(x["cpu_pct"]["sluice"] for x in cached), w["hot_uncached"],
        median(x["cpu_pct"]["sluice"] for x in uncached), "%")


def cpu_split(R):
    out = {}
    for v in ORDER:
        out[v] = {"sluice": median(x["cpu_pct"]["sluice"] for x in R[v]),
                  "wrk": median(x["cpu_pct"]["wrk"] for x in R[v]),
                  "redis (all masters)": median(sum(x["redis_cpu_pct"].values()) for x in R[v]),
                  "other processes": median(x["cpu_pct"].get("others") for x in R[v])}
    return out
