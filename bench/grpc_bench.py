"""bench/run grpc (and a section of the full run): the Envoy Rate Limit Service front end
(server.grpc_listen, envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) driven by h2load,
beside GET /v1/authorize driven by wrk, against one sluice process on the memory store, in
alternating rounds.

The client is one h2load process with one thread, as the HTTP reference is one wrk process with
one thread: several client processes on a 2-core machine cost the server their wake-ups (measured:
8 h2load processes of 4 connections held one stream per connection at 0.64 × HTTP with sluice 78 %
busy, one process of 32 connections at 0.9 × with sluice saturated). h2load sends one request body
to every stream (-d takes one file), so every gRPC call asks about one API key; the HTTP reference
runs at 10,000 keys (as bench/run does) and, as a control for the spread, at one key. See
BENCHMARKS.md.

Before measuring, one call through python3-grpcio must answer grpc-status 0 with overall_code OK
for the key asked about; during each run h2load's non-2xx, failed, errored and timed-out requests
must be 0, and sluice_grpc_requests_total must count no outcome but `ok` — else the run fails.

Python 3 standard library, plus python3-grpcio and python3-protobuf for the message classes
(generated with protoc --python_out from proto/, as tests/integration/test_grpc.py does) and the
check call.
"""
import os
import re
import shutil
import struct
import subprocess
import sys
import time
import urllib.request

import benchlib as bl
from benchlib import median

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
METHOD = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
PROTOS = ["envoy/config/core/v3/base.proto",
          "envoy/extensions/common/ratelimit/v3/ratelimit.proto",
          "envoy/service/ratelimit/v3/rls.proto",
          "envoy/type/v3/ratelimit_unit.proto"]
TOKEN = "bench-admin-token-0123456789"  # the admin plane's /metrics (loopback only, this run only)

# name: h2load processes (one: as wrk), connections, streams per connection; and the wrk reference
# of each row. In flight = processes × connections × streams.
GRPC_VARIANTS = {
    "c32_m1": {"procs": 1, "c": 32, "m": 1,
               "what": "h2load 32 conns × 1 stream: 32 in flight, 1 key"},
    "c4_m8": {"procs": 1, "c": 4, "m": 8,
              "what": "h2load 4 conns × 8 streams: 32 in flight, 1 key"},
    "c32_m8": {"procs": 1, "c": 32, "m": 8,
               "what": "h2load 32 conns × 8 streams: 256 in flight, 1 key"},
}
HTTP_VARIANTS = {
    "c32": {"keys": 10000, "what": "wrk 32 conns (32 in flight), 10,000 keys"},
    "c32_k1": {"keys": 1, "what": "wrk 32 conns (32 in flight), 1 key"},
}
ORDER = [("grpc", "c32_m1"), ("http", "c32"), ("grpc", "c4_m8"), ("http", "c32_k1"),
         ("grpc", "c32_m8")]
TARGET = 0.8  # gRPC decisions/s ≥ 0.8 × HTTP's, at equal requests in flight


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def messages(tmp):
    """protoc --python_out of proto/ into tmp/pb; returns the rls_pb2 module."""
    try:
        import google.protobuf  # noqa: F401
    except ImportError:
        # Debian's python3-protobuf and python3-grpcio are in dist-packages, which a python3 of
        # another origin does not search (same minor version, same ABI).
        sys.path.append("/usr/lib/python3/dist-packages")
    out = os.path.join(tmp, "pb")
    os.makedirs(out, exist_ok=True)
    proto_dir = os.path.join(ROOT, "proto")
    subprocess.run(["protoc", "-I", proto_dir, f"--python_out={out}",
                    *[os.path.join(proto_dir, p) for p in PROTOS]], check=True, timeout=60)
    sys.path.insert(0, out)
    from envoy.service.ratelimit.v3 import rls_pb2
    return rls_pb2


def request(rls, key):
    """The RateLimitRequest Envoy's filter sends for one `request_headers` action on X-API-Key."""
    req = rls.RateLimitRequest(domain="edge")
    req.descriptors.add().entries.add(key="api_key", value=key)
    return req


def write_body(rls, tmp, i):
    """A gRPC message frame (flag 0: not compressed, 4-byte big-endian length, the message) of the
    request for bench-key-<i>, as h2load's -d file."""
    msg = request(rls, f"bench-key-{i}").SerializeToString()
    path = os.path.join(tmp, f"grpc-body-{i}.bin")
    with open(path, "wb") as f:
        f.write(b"\0" + struct.pack(">I", len(msg)) + msg)
    return path


def check_call(rls, port, i):
    """One call through a real gRPC client: grpc-status 0, overall_code OK, the key's subject."""
    import grpc
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_unary(METHOD, request_serializer=rls.RateLimitRequest.SerializeToString,
                                   response_deserializer=rls.RateLimitResponse.FromString)
        res, c = call.with_call(request(rls, f"bench-key-{i}"), timeout=10)
    headers = {h.key: h.value for h in res.response_headers_to_add}
    if c.code() != grpc.StatusCode.OK or res.overall_code != rls.RateLimitResponse.OK or \
            headers.get("Sluice-Subject") != f"user-{i}":
        raise RuntimeError(f"check call: {c.code()} overall_code {res.overall_code}, headers {headers}")
    return {"grpc_status": 0, "overall_code": "OK", "response_bytes": len(res.SerializeToString())}


def grpc_counts(admin_port):
    """sluice_grpc_requests_total by code, from the admin plane's /metrics."""
    req = urllib.request.Request(f"http://127.0.0.1:{admin_port}/metrics",
                                 headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(req, timeout=10) as r:
        text = r.read().decode()
    return {m.group(1): float(m.group(2)) for m in
            re.finditer(r'^sluice_grpc_requests_total\{code="([a-z_]+)"\} ([0-9.e+]+)$', text, re.M)}


def parse_h2load(out):
    m = re.search(r"^finished in ([0-9.]+)(us|ms|s), ([0-9.]+) req/s", out, re.M)
    r = re.search(r"^requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, "
                  r"(\d+) errored, (\d+) timeout", out, re.M)
    s = re.search(r"^status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", out, re.M)
    if not (m and r and s):
        raise RuntimeError(f"h2load printed no summary:\n{out[-2000:]}")
    scale = {"us": 1e-6, "ms": 1e-3, "s": 1.0}[m.group(2)]
    return {"seconds": float(m.group(1)) * scale, "rps": float(m.group(3)), "done": int(r.group(3)),
            "succeeded": int(r.group(4)), "failed": int(r.group(5)), "errored": int(r.group(6)),
            "timeout": int(r.group(7)), "status_2xx": int(s.group(1)),
            "non2xx": int(s.group(2)) + int(s.group(3)) + int(s.group(4))}


def percentile(sorted_xs, q):
    if not sorted_xs:
        return None
    return sorted_xs[min(len(sorted_xs) - 1, int(q * len(sorted_xs)))]


def run_h2load(ch, tmp, port, bodies, variant, duration, sluice_pid, admin_port, rate_guess=None):
    """The variant's h2load processes at once, each with its own body: for `duration` seconds
    (-D) without `rate_guess` (a warm-up, whose calls cut off at the end are not checked), else
    rate_guess × duration requests in all (-n), every one of which must be answered `ok`."""
    url = f"http://127.0.0.1:{port}{METHOD}"
    per_proc = None
    if rate_guess:
        per_proc = max(int(rate_guess * duration / variant["procs"]), 100 * variant["c"] * variant["m"])
    before = grpc_counts(admin_port)
    cpu_s0, c0, t0 = bl.tree_cpu(sluice_pid), bl.children_cpu(), time.monotonic()
    procs = []
    for i in range(variant["procs"]):
        logf = os.path.join(tmp, f"h2load-{i}.log")
        cmd = ["h2load", "-c", str(variant["c"]), "-m", str(variant["m"]), "-t", "1",
               *(["-n", str(per_proc)] if per_proc else ["-D", str(duration)]), "-d", bodies[i], "-H", "content-type: application/grpc",
               "-H", "te: trailers", f"--log-file={logf}", url]
        procs.append((ch.start(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT), logf, cmd))
    outs = []
    for p, logf, cmd in procs:
        try:
            out, _ = p.communicate(timeout=duration * 4 + 30)
        except subprocess.TimeoutExpired:
            ch.stop(p)
            raise RuntimeError(f"timed out: {' '.join(cmd)}")
        ch.procs.remove(p)
        if p.returncode != 0:
            raise RuntimeError(f"exit {p.returncode}: {' '.join(cmd)}\n{out[-2000:]}")
        outs.append((parse_h2load(out), logf))
    wall = time.monotonic() - t0
    cpu = {"h2load": 100 * (bl.children_cpu() - c0) / wall,
           "sluice": 100 * (bl.tree_cpu(sluice_pid) - cpu_s0) / wall}
    after = grpc_counts(admin_port)
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    lat = []
    for _, logf in outs:
        with open(logf) as f:  # start (µs since the epoch), HTTP status, µs to the end of the answer
            lat += [int(line.split("\t")[2]) for line in f if line.count("\t") >= 2]
        os.remove(logf)
    lat.sort()
    # With -n the processes end at slightly different times: all requests over the longest.
    rps = (sum(o["succeeded"] for o, _ in outs) / max(o["seconds"] for o, _ in outs) if per_proc
           else sum(o["rps"] for o, _ in outs))
    res = {"rps": rps, "seconds": max(o["seconds"] for o, _ in outs),
           "requests": sum(o["succeeded"] for o, _ in outs),
           "non2xx": sum(o["non2xx"] for o, _ in outs),
           "h2load_errors": sum(o["failed"] + o["errored"] + o["timeout"] for o, _ in outs),
           "grpc_codes": delta,
           "grpc_errors": sum(v for k, v in delta.items() if k != "ok"),
           "p50_ms": percentile(lat, 0.50) / 1000, "p90_ms": percentile(lat, 0.90) / 1000,
           "p99_ms": percentile(lat, 0.99) / 1000, "p999_ms": percentile(lat, 0.999) / 1000,
           "max_ms": lat[-1] / 1000, "cpu_pct": cpu}
    # h2load -D resets the streams in flight when the time is up: sluice counts those calls
    # (cancelled before or after their message). A warm-up is therefore not checked; a measured run (-n)
    # ends no stream early, and every request must be one `ok` decision.
    if per_proc and (res["non2xx"] or res["h2load_errors"] or res["grpc_errors"] or
                     delta.get("ok", 0) != res["requests"] or
                     res["requests"] != per_proc * variant["procs"]):
        raise RuntimeError(f"gRPC errors in a measured run: {res}")
    return res


def run_http(ch, url, duration, keys, sluice_pid, connections=32):
    r = bl.run_wrk(ch, url, duration, connections, keys=keys, watch=(sluice_pid,))
    r["cpu_pct"]["sluice"] = r["cpu_pct"].pop(sluice_pid)
    if r["non2xx"] or r["socket_errors"]:
        raise RuntimeError(f"HTTP errors in a measured run: {r}")
    return r


def run_grpc(args, ch, sluice_config):
    """The section: one sluice (memory store, `sluice_config(port, admin, "memory")` plus
    grpc_listen and an admin token), every variant of ORDER in each of args.rounds rounds."""
    for tool in ("h2load", "protoc"):
        if not shutil.which(tool):
            sys.exit(f"bench/run: {tool} not found: run scripts/install-deps")
    rls = messages(args.tmp)
    port, admin, gport = bl.free_port(), bl.free_port(), bl.free_port()
    cfg_text = sluice_config(port, admin, "memory").replace(
        "  threads: 1\n", f'  threads: 1\n  grpc_listen: "127.0.0.1:{gport}"\n'
                          f'  admin_token: "{TOKEN}"\n', 1)
    cfg = os.path.join(args.tmp, "sluice-grpc.yaml")
    with open(cfg, "w") as f:
        f.write(cfg_text)
    logf = open(os.path.join(args.tmp, "sluice-grpc.log"), "w")
    sp = ch.start([args.sluice, "serve", "-c", cfg, "--log-level", "warn"], stderr=logf)
    bl.wait_listening(port, sp)
    bl.wait_listening(gport, sp)
    surl = f"http://127.0.0.1:{port}/v1/authorize"
    nbodies = max(v["procs"] for v in GRPC_VARIANTS.values())
    bodies = [write_body(rls, args.tmp, i) for i in range(nbodies)]
    G = {"check": check_call(rls, gport, 0), "variants_grpc": GRPC_VARIANTS,
         "variants_http": HTTP_VARIANTS, "order": ORDER,
         "grpc": {k: [] for k in GRPC_VARIANTS}, "http": {k: [] for k in HTTP_VARIANTS}}
    log(f"gRPC ShouldRateLimit vs HTTP /v1/authorize, one sluice (check call: grpc-status 0, "
        f"overall_code OK, {G['check']['response_bytes']} B answer)")
    guess = {}  # decisions/s of each gRPC variant so far: sizes the next run's -n
    for name, v in GRPC_VARIANTS.items():
        guess[name] = run_h2load(ch, args.tmp, gport, bodies, v, args.warmup, sp.pid, admin)["rps"]
    run_http(ch, surl, args.warmup, 10000, sp.pid)
    for r in range(args.rounds):
        line = []
        for kind, name in ORDER:
            if kind == "grpc":
                x = run_h2load(ch, args.tmp, gport, bodies, GRPC_VARIANTS[name], args.duration,
                               sp.pid, admin, rate_guess=guess[name])
                guess[name] = x["rps"]
            else:
                x = run_http(ch, surl, args.duration, HTTP_VARIANTS[name]["keys"], sp.pid)
            G[kind][name].append(x)
            line.append(f"{kind} {name} {x['rps']:,.0f}/s p99 {x['p99_ms']:.2f}")
        log(f"  round {r + 1}: " + " | ".join(line))
    ch.stop(sp)
    return G


def rows(G, row):
    """The section's rows of bench/run's table, through its `row` function."""
    sec = "gRPC ShouldRateLimit vs HTTP /v1/authorize, memory store, one sluice"
    http = G["http"]["c32"]
    for k, v in G["variants_grpc"].items():
        g = G["grpc"][k]
        ratio = median(a["rps"] / b["rps"] for a, b in zip(g, http))
        tgt = k == "c32_m1"
        row(sec, f"decisions/s, {v['what']}", median(x["rps"] for x in g), HTTP_VARIANTS["c32"]["what"],
            median(x["rps"] for x in http), "req/s", ratio=ratio,
            target=f"≥ {TARGET} × HTTP" if tgt else "", verdict=("met" if ratio >= TARGET else "MISSED")
            if tgt else "")
    g = G["grpc"]["c32_m1"]
    # The key-spread control: one key now; 8 in results written before the single client process.
    ck = "c32_k1" if "c32_k1" in G["http"] else "c32_k8"
    control = G["http"][ck]
    control_what = G.get("variants_http", HTTP_VARIANTS).get(ck, {}).get("what", ck)
    row(sec, f"decisions/s, {G['variants_grpc']['c32_m1']['what']} (key-spread control)",
        median(x["rps"] for x in g), control_what, median(x["rps"] for x in control),
        "req/s", ratio=median(a["rps"] / b["rps"] for a, b in zip(g, control)))
    row(sec, f"HTTP decisions/s, {control_what} (control)", median(x["rps"] for x in control),
        HTTP_VARIANTS["c32"]["what"], median(x["rps"] for x in http), "req/s",
        ratio=median(a["rps"] / b["rps"] for a, b in zip(control, http)))
    for k, v in G["variants_grpc"].items():
        for q in ("p50_ms", "p99_ms"):
            row(sec, f"{q[:3]}, {v['what']}", median(x[q] for x in G["grpc"][k]),
                HTTP_VARIANTS["c32"]["what"], median(x[q] for x in http), "ms")
    # CPU time per decision holds better than decisions/s on a shared machine: a starved run is
    # slower, but costs about the same CPU per call.
    def cpu_us(x):
        return x["cpu_pct"]["sluice"] / 100 / x["rps"] * 1e6 if x["rps"] else None
    for k, v in G["variants_grpc"].items():
        row(sec, f"sluice CPU per decision (all threads), {v['what']}", median(cpu_us(x) for x in G["grpc"][k]),
            HTTP_VARIANTS["c32"]["what"], median(cpu_us(x) for x in http), "µs")
    row(sec, "gRPC calls answered other than ok, and h2load non-2xx/failed, all runs",
        sum(x["grpc_errors"] + x["non2xx"] + x["h2load_errors"] for g in G["grpc"].values() for x in g),
        "calls", sum(x["requests"] for g in G["grpc"].values() for x in g), "n", ratio=False)


def cpu_split(G):
    out = {}
    for k in G["variants_grpc"]:
        out[f"grpc.{k}"] = {w: median(x["cpu_pct"].get(w) for x in G["grpc"][k]) for w in ("sluice", "h2load")}
    for k in G["variants_http"]:
        out[f"http.{k}"] = {w: median(x["cpu_pct"].get(w) for x in G["http"][k]) for w in ("sluice", "wrk")}
    return out
