"""`bench/run registry`: the registry of subjects and API keys (docs/registry.md), side by side.

  1. registry_benchmark (Google Benchmark), when built: Index::FindByDigest with 10 and with
     1,000,000 keys, 1 and 2 threads, and an unknown digest;
  2. start-up of `sluice serve` (memory store) with an empty SQLite registry and with 1,000,000
     keys, alternating: time from exec to the "sluice started" log line, the "registry loaded"
     line's ms, and VmRSS right after; bytes per key = ΔVmRSS / keys;
  3. GET /v1/authorize with registry keys (no `keys:` in the configuration), the same wrk load
     against sluice with registries of different sizes, all running at once and alternated round
     by round: 10 hot keys on a 10-key vs a 1,000,000-key registry, and 10,000 keys on a
     10,000-key vs a 1,000,000-key registry;
  4. admin writes on the embedded registry (SQLite, synchronous=FULL): PUT /v1/subjects/{id} (new
     subjects) and POST /v1/subjects/{id}/keys from WRITE_CONNECTIONS closed-loop connections:
     writes/s, p50/p99; then decisions alone vs decisions while writes run at half that peak;
  5. the Redis registry: 1,000,000 subjects with a key each written straight into Redis
     (redis-cli --pipe, the layout of docs/redis.md "The registry"), then sluice started on it
     alternately with an empty prefix: "redis registry loaded" ms, start time, VmRSS; admin writes
     and decisions with and without them, as in 4.

The registry files are filled directly with sqlite3 (executemany, one transaction) in a copy of
an empty database that sluice itself created, so the schema is sluice's own. Key plaintexts are
"bench-key-<i>" (what bench/wrk/load.lua sends), stored as their SHA-256 digests like imported keys;
subject i is "user-<i>" on plan "bench".
"""
import hashlib
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import threading
import time

import benchlib as bl
from benchlib import median

BIG = 1_000_000
WRITE_CONNECTIONS = 8   # closed-loop admin clients
TOKEN = "bench-admin-token-0123456789"
T0_US = 1_700_000_000_000_000  # created_at/updated_at of every filled record
LINE = re.compile(r"^\{.*\}$")


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def plan_lines(per_minute, daily):
    return ["plans:", "  bench:", "    limits:",
            f"      - {{ name: per_minute, quota: {per_minute}, window: 1m }}",
            f"      - {{ name: daily, quota: {daily}, window: day, alert_at: [80, 100] }}"]


class Sluice:
    """One `sluice serve` with a registry; its log (JSON lines, info level) in tmp/<name>.log."""

    def __init__(self, ch, tmp, name, *, registry_path=None, redis_port=None, key_prefix="sl",
                 quotas=(100_000_000, 1_000_000_000)):
        self.port, self.admin = bl.free_port(), bl.free_port()
        lines = ["server:", f'  listen: "127.0.0.1:{self.port}"',
                 f'  admin_listen: "127.0.0.1:{self.admin}"', "  threads: 1",
                 "  shutdown_delay: 0s",  # stop at once: a start-up round is not a drain test
                 f'  admin_token: "{TOKEN}"', "store:"]
        if redis_port:
            lines += ["  type: redis", f'  redis: {{ url: "redis://127.0.0.1:{redis_port}/0", '
                      f'timeout: 20ms, key_prefix: {key_prefix} }}']
        else:
            lines += ["  type: memory", f'  memory: {{ registry_path: "{registry_path}" }}']
        lines += plan_lines(*quotas)
        self.cfg = os.path.join(tmp, f"{name}.yaml")
        with open(self.cfg, "w") as f:
            f.write("\n".join(lines) + "\n")
        self.logpath = os.path.join(tmp, f"{name}.log")
        self.ch = ch
        self.logf = open(self.logpath, "w")
        self.t0 = time.monotonic()
        self.p = ch.start([bl_sluice(), "serve", "-c", self.cfg, "--log-level", "info"],
                          stderr=self.logf)
        self.url = f"http://127.0.0.1:{self.port}/v1/authorize"
        self.admin_url = f"http://127.0.0.1:{self.admin}"

    def wait_line(self, msg, deadline_s=120):
        """The first log line with "msg": msg, and the seconds from exec to when it was seen."""
        deadline = time.monotonic() + deadline_s
        while time.monotonic() < deadline:
            with open(self.logpath) as f:
                for line in f:
                    if f'"msg":"{msg}"' in line and LINE.match(line.strip()):
                        return json.loads(line), time.monotonic() - self.t0
            if self.p.poll() is not None:
                raise RuntimeError(f"sluice exited ({self.p.returncode}) before logging {msg!r}:\n"
                                   + open(self.logpath).read()[-2000:])
            time.sleep(0.005)
        raise RuntimeError(f"sluice did not log {msg!r} within {deadline_s} s")

    def started(self):
        _, secs = self.wait_line("sluice started")
        bl.wait_listening(self.port, self.p)
        return secs

    def rss_bytes(self):
        with open(f"/proc/{self.p.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return None

    def stop(self):
        self.ch.stop(self.p)
        self.logf.close()


_SLUICE = [None]


def bl_sluice():
    return _SLUICE[0]


# ---------------------------------------------------------------------------------------------
# filling registries directly

def subject_id(i):
    return f"user-{i}"


def plaintext(i):
    return f"bench-key-{i}"


def empty_registry(ch, tmp):
    """An empty registry database created by sluice itself (its schema and user_version)."""
    path = os.path.join(tmp, "empty.db")
    s = Sluice(ch, tmp, "sluice-schema", registry_path=path)
    s.started()
    s.stop()
    for suffix in ("-wal", "-shm"):
        if os.path.exists(path + suffix) and os.path.getsize(path + suffix):
            raise RuntimeError(f"{path}{suffix} is not empty after sluice stopped")
    return path


FILL_VERSION = "1"  # bump when what fill_sqlite or fill_redis writes changes


def schema_tag(empty):
    """What a filled file depends on: sluice's schema (as its empty database holds it)."""
    con = sqlite3.connect(empty)
    text = repr(con.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall())
    text += repr(con.execute("PRAGMA user_version").fetchall())
    con.close()
    return hashlib.sha256((FILL_VERSION + text).encode()).hexdigest()[:12]


def cached_fill(cache, empty, path, n):
    """fill_sqlite, or a copy of the file it made for the same schema in an earlier run (a
    million rows take 20-90 s on this machine). Returns whether it came from the cache."""
    os.makedirs(cache, exist_ok=True)
    cached = os.path.join(cache, f"registry-{n}-{schema_tag(empty)}.db")
    if not os.path.exists(cached):
        fill_sqlite(empty, cached + ".tmp", n)
        os.replace(cached + ".tmp", cached)
        shutil.copyfile(cached, path)
        return False
    shutil.copyfile(cached, path)
    return True


def fill_sqlite(empty, path, n):
    """A copy of `empty` with n subjects user-<i>, each with the key bench-key-<i>."""
    shutil.copyfile(empty, path)
    t = time.monotonic()
    con = sqlite3.connect(path)
    # A scratch copy: no journal, no fsync, and a page cache that holds the whole file (the
    # indexes on subjects.id and keys.digest take their rows in random order).
    con.execute("PRAGMA journal_mode = OFF")
    con.execute("PRAGMA synchronous = OFF")
    con.execute("PRAGMA cache_size = -1000000")
    with con:
        con.executemany(
            "INSERT INTO subjects (id, plan, email, webhook, webhook_secret, metadata, disabled, "
            "overrides, created_at, updated_at) VALUES (?, 'bench', '', '', '', '{}', 0, '[]', ?, ?)",
            ((subject_id(i), T0_US, T0_US) for i in range(n)))
        con.executemany(
            "INSERT INTO keys (id, digest, subject, prefix, name, expires_at, created_at) "
            "VALUES (?, ?, ?, ?, '', NULL, ?)",
            ((i + 1, hashlib.sha256(plaintext(i).encode()).digest(), subject_id(i),
              plaintext(i)[:8], T0_US) for i in range(n)))
    con.execute("PRAGMA journal_mode = WAL")  # as sluice keeps it
    con.close()
    log(f"  {os.path.basename(path)}: {n:,} keys in {time.monotonic() - t:.1f} s, "
        f"{os.path.getsize(path) / 2**20:.0f} MiB")
    return path


def resp(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


def fill_redis(port, prefix, n, batch=1000):
    """n subjects with a key each under <prefix>:{registry}, as registry_write.lua leaves them
    (docs/redis.md, "The registry"): records as JSON strings, the id sorted sets, the per-subject
    key sets, the digest index, version and epoch. Streamed into redis-cli --pipe."""
    base = f"{prefix}:{{registry}}"
    t = time.monotonic()
    p = subprocess.Popen(["redis-cli", "-p", str(port), "--pipe"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    subject_rec = json.dumps({"plan": "bench", "email": "", "webhook": "", "webhook_secret": "",
                              "metadata": "{}", "disabled": False, "overrides": [],
                              "created_at": T0_US, "updated_at": T0_US}, separators=(",", ":"))
    for first in range(0, n, batch):
        ids = range(first, min(n, first + batch))
        subj, keys, sets = [], [], []
        zs, zk = [], []
        for i in ids:
            sid, kid = subject_id(i), f"{i + 1:016x}"
            digest = hashlib.sha256(plaintext(i).encode()).hexdigest()
            subj += [f"{base}:subject:{sid}", subject_rec]
            keys += [f"{base}:key:{kid}",
                     json.dumps({"subject": sid, "digest": digest, "prefix": plaintext(i)[:8],
                                 "name": "", "expires_at": None, "created_at": T0_US},
                                separators=(",", ":")),
                     f"{base}:digest:{digest}", kid]
            zs += ["0", sid]
            zk += ["0", kid]
            sets.append(resp("SADD", f"{base}:keys:{sid}", kid))
        p.stdin.write(resp("MSET", *subj) + resp("MSET", *keys) +
                      resp("ZADD", f"{base}:subjects", *zs) + resp("ZADD", f"{base}:keys", *zk) +
                      b"".join(sets))
    p.stdin.write(resp("SET", f"{base}:version", "1") + resp("SET", f"{base}:epoch", "benchfill"))
    out, _ = p.communicate(timeout=600)
    if p.returncode != 0 or b"errors: 0" not in out:
        raise RuntimeError(f"redis-cli --pipe: {out.decode()[-500:]}")
    log(f"  Redis {base}: {n:,} subjects and keys written in {time.monotonic() - t:.1f} s")


# ---------------------------------------------------------------------------------------------
# the measurements

def run_gbench(args):
    exe = os.path.join(args.bin_dir, "bench", "registry_benchmark")
    if not os.path.exists(exe):
        log("registry_benchmark not built: in-process lookups skipped")
        return None
    out = os.path.join(args.tmp, "registry_gbench.json")
    cmd = [exe, "--benchmark_filter=BM_FindByDigest", f"--benchmark_out={out}",
           "--benchmark_out_format=json", f"--benchmark_repetitions={args.gb_reps}",
           "--benchmark_report_aggregates_only=true", f"--benchmark_min_time={args.gb_min_time}"]
    log(f"registry_benchmark --benchmark_filter=BM_FindByDigest ({args.gb_reps} repetitions)")
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, timeout=600)
    with open(out) as f:
        data = json.load(f)
    ns = {}
    for b in data["benchmarks"]:
        if b.get("aggregate_name") not in (None, "median"):
            continue
        if b.get("aggregate_name") is None and b["run_name"] in ns:
            continue
        ns[b["run_name"]] = 1e9 / b["items_per_second"] if b.get("items_per_second") else \
            b["real_time"] if b.get("time_unit") == "ns" else None
    return {"command": " ".join(cmd[:2] + cmd[4:]), "ns": ns}


def startup(args, ch, paths, name, make):
    """Alternating starts of each (label, factory) pair: exec → "sluice started", the registry's
    own load ms, VmRSS right after the start line."""
    res = {label: [] for label in paths}
    for r in range(args.rounds):
        for label in paths:
            s = make(label, f"{name}-{label}-{r}")
            secs = s.started()
            rss = s.rss_bytes()
            loaded, _ = s.wait_line("registry loaded")
            redis_loaded = None
            if "redis" in name:
                # The Redis registry serves before its full load ends (start_timeout 2 s): its
                # memory is measured once the load is in.
                redis_loaded, _ = s.wait_line("redis registry loaded")
                rss = s.rss_bytes()
            s.stop()
            row = {"start_s": secs, "rss_bytes": rss, "registry_ms": loaded.get("ms"),
                   "keys": loaded.get("keys"),
                   "redis_load_ms": redis_loaded.get("ms") if redis_loaded else None,
                   "redis_keys": redis_loaded.get("keys") if redis_loaded else None}
            res[label].append(row)
            log(f"  round {r + 1} {label}: started in {secs:.2f} s, registry {row['registry_ms']} ms"
                + (f" (redis load {row['redis_load_ms']} ms, {row['redis_keys']:,} keys)"
                   if redis_loaded else "") + f", VmRSS {rss / 2**20:.1f} MiB")
    return res


def write_runs(args, ch, s, label, keys_for_add):
    """Admin writes at full speed from WRITE_CONNECTIONS connections: one run per kind."""
    out = {}
    for mode in ("put_subject", "add_key"):
        os.environ["SLUICE_BENCH_RUN"] = f"{label}{time.monotonic_ns()}"
        w = bl.run_wrk(ch, s.admin_url + "/", args.write_duration, WRITE_CONNECTIONS,
                       keys=keys_for_add, mode=mode, watch=(s.p.pid,))
        w["cpu_pct"]["sluice"] = w["cpu_pct"].pop(s.p.pid)
        out[mode] = w
        log(f"  {label} {mode}: {w['rps']:,.0f} writes/s, p50 {w['p50_ms']:.2f} ms, "
            f"p99 {w['p99_ms']:.2f} ms, {w['non2xx']} non-2xx, sluice CPU {w['cpu_pct']['sluice']:.0f} %")
    return out


def decisions_with_writes(args, ch, s, label, write_rate, keys_for_add):
    """Decisions (10,000 keys, closed loop) alone and while PUT /v1/subjects runs at write_rate,
    alternating; the writer is a second wrk on the admin port."""
    res = {"alone": [], "with_writes": [], "writes": [], "write_rate": write_rate}
    for r in range(args.rounds):
        a = bl.run_wrk(ch, s.url, args.duration, 32, keys=10_000, watch=(s.p.pid,))
        a["cpu_pct"]["sluice"] = a["cpu_pct"].pop(s.p.pid)
        res["alone"].append(a)
        box = {}
        os.environ["SLUICE_BENCH_RUN"] = f"{label}{time.monotonic_ns()}"

        def writer():
            box["w"] = bl.run_wrk(ch, s.admin_url + "/", args.duration + 2, WRITE_CONNECTIONS,
                                  keys=keys_for_add, mode="put_subject", rate=write_rate)
        t = threading.Thread(target=writer)
        t.start()
        time.sleep(1.0)  # the writer's connections are up and paced
        b = bl.run_wrk(ch, s.url, args.duration, 32, keys=10_000, watch=(s.p.pid,))
        b["cpu_pct"]["sluice"] = b["cpu_pct"].pop(s.p.pid)
        t.join()
        res["with_writes"].append(b)
        res["writes"].append(box.get("w"))
        w = box.get("w") or {}
        log(f"  round {r + 1} {label}: decisions alone {a['rps']:,.0f}/s p99 {a['p99_ms']:.2f} ms | "
            f"with writes {b['rps']:,.0f}/s p99 {b['p99_ms']:.2f} ms "
            f"(writes {w.get('rps', 0):,.0f}/s, p99 {w.get('p99_ms', 0):.2f} ms)")
    return res


def run_registry(args, ch):
    _SLUICE[0] = args.sluice
    R = {"phases": {}}
    t_all = time.monotonic()
    R["gbench"] = run_gbench(args)

    log("registry files (sqlite3, executemany, one transaction each)")
    empty = empty_registry(ch, args.tmp)
    files = {"empty": empty}
    R["fill_cached"] = {}
    for label, n in (("10", 10), ("10k", 10_000), ("1M", BIG)):
        files[label] = os.path.join(args.tmp, f"reg{label}.db")
        R["fill_cached"][label] = cached_fill(args.cache, empty, files[label], n)

    log("start-up, memory store: empty registry vs 1,000,000 keys, alternating")

    def make_mem(label, name):
        src = files[label]
        path = os.path.join(args.tmp, f"{name}.db")
        shutil.copyfile(src, path)  # each start its own file: no lock left behind, no warm WAL
        return Sluice(ch, args.tmp, name, registry_path=path)
    R["startup_memory"] = startup(args, ch, ["empty", "1M"], "start-mem", make_mem)

    log("GET /v1/authorize with registry keys: registries of 10, 10,000 and 1,000,000 keys, "
        "all up at once")
    procs = {label: Sluice(ch, args.tmp, f"sluice-reg{label}", registry_path=files[label])
             for label in ("10", "10k", "1M")}
    for s in procs.values():
        s.started()
    pairs = [("10 keys on a 10-key registry", "10", "1M", 10),
             ("10,000 keys on a 10,000-key registry", "10k", "1M", 10_000)]
    for _, a, b, k in pairs:
        bl.run_wrk(ch, procs[a].url, args.warmup, 32, keys=k)
        bl.run_wrk(ch, procs[b].url, args.warmup, 32, keys=k)
    dec = {f"{a}/{b}/{k}": {"a": [], "b": [], "what": what, "keys": k}
           for what, a, b, k in pairs}
    for r in range(args.rounds):
        line = []
        for what, a, b, k in pairs:
            d = dec[f"{a}/{b}/{k}"]
            for side, label in (("a", a), ("b", b)):
                w = bl.run_wrk(ch, procs[label].url, args.duration, 32, keys=k,
                               watch=(procs[label].p.pid,))
                w["cpu_pct"]["sluice"] = w["cpu_pct"].pop(procs[label].p.pid)
                d[side].append(w)
            line.append(f"{k:,} keys: {d['a'][-1]['rps']:,.0f} ({a}) vs {d['b'][-1]['rps']:,.0f} ({b})")
        log(f"  round {r + 1}: " + " | ".join(line))
    R["decisions_memory"] = dec
    R["rss_after_decisions"] = {label: s.rss_bytes() for label, s in procs.items()}
    for label in ("10", "1M"):
        procs[label].stop()

    log("admin writes, embedded registry (SQLite, synchronous=FULL), on the 10,000-key registry")
    s = procs["10k"]
    R["writes_memory"] = write_runs(args, ch, s, "mem", 10_000)
    peak = R["writes_memory"]["put_subject"]["rps"]
    R["decisions_writes_memory"] = decisions_with_writes(args, ch, s, "mem", max(peak / 2, 1), 10_000)
    s.stop()

    log("Redis registry: 1,000,000 subjects and keys written straight into Redis")
    rport = bl.free_port()
    rdb = os.path.join(args.cache, f"registry-redis-{FILL_VERSION}.rdb")
    have_rdb = os.path.exists(rdb)
    if have_rdb:  # what an earlier run's fill_redis wrote, saved by Redis itself
        shutil.copyfile(rdb, os.path.join(args.tmp, "dump.rdb"))
    rp = ch.start(["redis-server", "--port", str(rport), "--bind", "127.0.0.1", "--save", "",
                   "--appendonly", "no", "--dir", args.tmp, "--dbfilename", "dump.rdb",
                   "--logfile", os.path.join(args.tmp, "redis.log")])
    bl.wait_listening(rport, rp, deadline_s=120)
    rds = bl.Redis(rport)
    while rds.info("persistence").get("loading") == "1":
        time.sleep(0.1)
    R["fill_cached"]["redis"] = have_rdb
    if not have_rdb:
        fill_redis(rport, "big", BIG)
        fill_redis(rport, "small", 10_000)
        rds.cmd("SAVE")
        shutil.copyfile(os.path.join(args.tmp, "dump.rdb"), rdb + ".tmp")
        os.replace(rdb + ".tmp", rdb)
    R["redis_dbsize"] = int(rds.cmd("DBSIZE").strip())
    R["redis_used_memory"] = int(rds.info("memory")["used_memory"])
    log("start-up, Redis store: empty prefix vs 1,000,000 keys, alternating")
    prefixes = {"empty": "none", "1M": "big"}
    R["startup_redis"] = startup(
        args, ch, ["empty", "1M"], "start-redis",
        lambda label, name: Sluice(ch, args.tmp, name, redis_port=rport, key_prefix=prefixes[label]))

    log("admin writes, Redis registry (10,000-key registry)")
    s = Sluice(ch, args.tmp, "sluice-redis-small", redis_port=rport, key_prefix="small")
    s.started()
    s.wait_line("redis registry loaded")
    bl.run_wrk(ch, s.url, args.warmup, 32, keys=10_000)
    R["writes_redis"] = write_runs(args, ch, s, "redis", 10_000)
    peak = R["writes_redis"]["put_subject"]["rps"]
    R["decisions_writes_redis"] = decisions_with_writes(args, ch, s, "redis", max(peak / 2, 1), 10_000)
    s.stop()
    ch.stop(rp)
    R["seconds"] = round(time.monotonic() - t_all)
    return R


# ---------------------------------------------------------------------------------------------
# the table

def summarize(R):
    rows = []

    def row(section, measure, value, ref_name, ref, unit, ratio=None, target="", verdict=""):
        if ratio is None and value is not None and ref:
            ratio = value / ref
        rows.append({"section": section, "measure": measure, "sluice": value, "reference": ref_name,
                     "reference_value": ref, "unit": unit, "ratio": ratio, "target": target,
                     "verdict": verdict})

    def ok(b):
        return "met" if b else "MISSED"

    gb = R.get("gbench")
    if gb:
        sec = "in-process: Index::FindByDigest (registry_benchmark)"
        ns = gb["ns"]

        def find(prefix, threads):
            for k, v in ns.items():
                if k.startswith(prefix) and k.endswith(f"threads:{threads}"):
                    return v
            return None
        for t in (1, 2):
            small, big = find("BM_FindByDigest/10/", t), find("BM_FindByDigest/1000000/", t)
            row(sec, f"lookup, 1,000,000 keys, {t} thread{'s' if t > 1 else ''}", big,
                f"10 keys, {t} thread{'s' if t > 1 else ''}", small, "ns")
        unknown = next((v for k, v in ns.items() if k.startswith("BM_FindByDigestUnknown")), None)
        row(sec, "unknown digest, 1,000,000 keys", unknown, "known, 10 keys, 1 thread",
            find("BM_FindByDigest/10/", 1), "ns")

    sec = "decisions: GET /v1/authorize with registry keys, memory store"
    for d in R["decisions_memory"].values():
        ratio = median(b["rps"] / a["rps"] for a, b in zip(d["a"], d["b"]))
        tgt = d["keys"] == 10
        row(sec, f"req/s, 1,000,000-key registry, wrk over {d['keys']:,} keys",
            median(x["rps"] for x in d["b"]), d["what"], median(x["rps"] for x in d["a"]), "req/s",
            ratio=ratio, target="within 10 %" if tgt else "",
            verdict=ok(ratio >= 0.9) if tgt else "")
        row(sec, f"p99, 1,000,000-key registry, wrk over {d['keys']:,} keys",
            median(x["p99_ms"] for x in d["b"]), d["what"], median(x["p99_ms"] for x in d["a"]), "ms")
        row(sec, f"non-2xx answers, all rounds, wrk over {d['keys']:,} keys",
            sum(x["non2xx"] for x in d["a"] + d["b"]), "requests",
            sum(x["requests"] for x in d["a"] + d["b"]), "n", ratio=False)

    for store, key in (("memory store (SQLite)", "startup_memory"), ("Redis store", "startup_redis")):
        st = R[key]
        sec = f"start-up with 1,000,000 keys, {store}"
        s_big, s_empty = median(x["start_s"] for x in st["1M"]), median(x["start_s"] for x in st["empty"])
        row(sec, "exec → \"sluice started\"", s_big, "empty registry", s_empty, "s",
            target="≤ 5 s" if key == "startup_memory" else "",
            verdict=ok(s_big <= 5) if key == "startup_memory" else "")
        row(sec, "\"registry loaded\" ms (what start waited for)",
            median(x["registry_ms"] for x in st["1M"]), "empty registry",
            median(x["registry_ms"] for x in st["empty"]), "ms_int")
        if key == "startup_redis":
            row(sec, "\"redis registry loaded\" ms (the full load)",
                median(x["redis_load_ms"] for x in st["1M"]), "empty registry",
                median(x["redis_load_ms"] for x in st["empty"]), "ms_int")
        r_big, r_empty = median(x["rss_bytes"] for x in st["1M"]), median(x["rss_bytes"] for x in st["empty"])
        row(sec, "VmRSS after start" if key == "startup_memory" else "VmRSS after the full load",
            r_big, "empty registry", r_empty, "MiB")
        per_key = (r_big - r_empty) / BIG
        row(sec, "ΔVmRSS per key (one subject per key)", per_key, "target", 200, "B",
            target="≤ 200 B", verdict=ok(per_key <= 200))

    for store, wk, dk in (("embedded (SQLite, synchronous=FULL)", "writes_memory", "decisions_writes_memory"),
                          ("Redis", "writes_redis", "decisions_writes_redis")):
        sec = f"admin writes, {store}"
        for mode, what in (("put_subject", "PUT /v1/subjects/{id} (new subject)"),
                           ("add_key", "POST /v1/subjects/{id}/keys (new key)")):
            w = R[wk][mode]
            row(sec, f"{what}, {WRITE_CONNECTIONS} connections: writes/s", w["rps"], "", None, "req/s")
            row(sec, f"{what}: p50 / p99", w["p50_ms"], "p99", w["p99_ms"], "ms", ratio=False)
            row(sec, f"{what}: non-2xx", w["non2xx"], "requests", w["requests"], "n", ratio=False)
        d = R[dk]
        ratio = median(b["rps"] / a["rps"] for a, b in zip(d["alone"], d["with_writes"]))
        row(sec, f"decisions/s while PUTs run at {d['write_rate']:,.0f}/s (half the peak)",
            median(x["rps"] for x in d["with_writes"]), "decisions alone",
            median(x["rps"] for x in d["alone"]), "req/s", ratio=ratio)
        row(sec, "decision p99 while PUTs run", median(x["p99_ms"] for x in d["with_writes"]),
            "decisions alone", median(x["p99_ms"] for x in d["alone"]), "ms")
        row(sec, "PUTs achieved meanwhile (writes/s, p99 ms)",
            median((x or {}).get("rps") for x in d["writes"]), "p99",
            median((x or {}).get("p99_ms") for x in d["writes"]), "req/s", ratio=False)
    return rows


def fmt(v, unit):
    if v is None:
        return "—"
    if unit in ("req/s", "n", "ms_int"):
        return f"{v:,.0f}" + (" ms" if unit == "ms_int" else "")
    if unit in ("ns", "B"):
        return f"{v:,.0f} {unit}"
    if unit == "ms":
        return f"{v:.3f} ms"
    if unit == "s":
        return f"{v:.2f} s"
    if unit == "MiB":
        return f"{v / 2**20:,.1f} MiB"
    return f"{v:g}"


def table_markdown(rows):
    out = ["| measure | value | reference | reference value | ratio | target |",
           "| --- | --- | --- | --- | --- | --- |"]
    section = None
    for r in rows:
        if r["section"] != section:
            section = r["section"]
            out.append(f"| **{section}** | | | | | |")
        ratio = f"{r['ratio']:.2f}" if r["ratio"] not in (None, False) else "—"
        tgt = f"{r['target']} — **{r['verdict']}**" if r["target"] else ""
        ref_unit = "ms" if r["unit"] == "ms" and r["reference"] == "p99" else r["unit"]
        out.append(f"| {r['measure']} | {fmt(r['sluice'], r['unit'])} | {r['reference']} | "
                   f"{fmt(r['reference_value'], ref_unit)} | {ratio} | {tgt} |")
    return "\n".join(out)


def report(R, out_dir):
    rows = summarize(R)
    R["table"] = rows
    md = table_markdown(rows)
    with open(os.path.join(out_dir, "registry.json"), "w") as f:
        json.dump(R, f, indent=1)
    m = R["meta"]
    head = (f"`{m['command']}` — {m['date']}, {m['nproc']} × {m['cpu']}, commit {m['commit']}, "
            f"{m['rounds']} alternating rounds of {m['duration_s']} s, {m['seconds_total']} s in all")
    with open(os.path.join(out_dir, "registry.md"), "w") as f:
        f.write(head + "\n\n" + md + "\n")
    print(head + "\n\n" + md)
    print(f"\nwrote {os.path.relpath(out_dir)}/registry.json, registry.md ({m['seconds_total']} s)")
