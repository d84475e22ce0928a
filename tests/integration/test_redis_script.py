"""src/sluice/store/redis/decide.lua against a real redis-server (docs/semantics.md, docs/redis.md).

Mirrors src/sluice/limiter/store_conformance.cc where it applies. Starts its own redis-server on a
free loopback port and speaks RESP over a plain socket (standard library only)."""
import os
import shutil
import socket
import subprocess
import tempfile
import time
import unittest

SOURCE_DIR = os.environ.get("SLUICE_SOURCE_DIR",
                            os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SCRIPT_PATH = os.path.join(SOURCE_DIR, "src", "sluice", "store", "redis", "decide.lua")
REFUND_PATH = os.path.join(SOURCE_DIR, "src", "sluice", "store", "redis", "refund.lua")

PREFIX = "sl"
GRACE = 60


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisError(Exception):
    pass


class Resp:
    """A minimal RESP2 client: one command at a time, replies as int / bytes / None / list."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.file = self.sock.makefile("rb")

    def close(self):
        self.file.close()
        self.sock.close()

    def call(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for arg in args:
            data = arg if isinstance(arg, bytes) else str(arg).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(data), data))
        self.sock.sendall(b"".join(out))
        reply = self._read()
        if isinstance(reply, RedisError):
            raise reply
        return reply

    def _read(self):
        line = self.file.readline()
        if not line.endswith(b"\r\n"):
            raise ConnectionError("connection closed")
        kind, body = line[:1], line[1:-2]
        if kind == b"+":
            return body.decode()
        if kind == b"-":
            return RedisError(body.decode())
        if kind == b":":
            return int(body)
        if kind == b"$":
            size = int(body)
            if size < 0:
                return None
            data = self.file.read(size + 2)
            return data[:-2]
        if kind == b"*":
            size = int(body)
            return None if size < 0 else [self._read() for _ in range(size)]
        raise ValueError(f"unexpected RESP line {line!r}")


def limit(name, quota, thresholds=(), window_id=1000, window_len=3600):
    return {"name": name, "quota": quota, "thresholds": list(thresholds),
            "window_id": window_id, "window_len": window_len}


def keys_for(subject, limits, bucket=7, slot=3):
    """The keys RedisStore builds: no plan in them (usage follows the subject); the window is
    named by its length in seconds (these limits are all fixed windows). The counters are fields
    (the subject) of the slot's counter hash: every subject here is in slot 3, so the tests also
    see subjects sharing a hash. The subject's flags are the field "#<subject>" of the same hash;
    the second list is the flag hashes flags had before they moved there (read, never written)."""
    tag = f"{PREFIX}:{{{bucket}}}"
    part = [f"{l['name']}:{l['window_len']}s:{l['window_id']}" for l in limits]
    return ([f"{tag}:h:{p}:{slot}" for p in part], [f"{tag}:a:{p}:{subject}" for p in part],
            f"{tag}:outbox")


def hold_key(subject, bucket=7):
    """The subject's hold hash (what its open reservations hold): one key per part."""
    return f"{PREFIX}:{{{bucket}}}:hold:{subject}"


class RedisScriptTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if shutil.which("redis-server") is None:
            raise unittest.SkipTest("redis-server not installed")
        with open(SCRIPT_PATH) as f:
            cls.script = f.read()
        cls.dir = tempfile.TemporaryDirectory(prefix="sluice-redis-")
        cls.addClassCleanup(cls.dir.cleanup)
        cls.port = free_port()
        cls.proc = subprocess.Popen(
            ["redis-server", "--port", str(cls.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", cls.dir.name],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        cls.addClassCleanup(cls._stop_server)
        deadline = time.monotonic() + 10
        while True:
            ping = subprocess.run(["redis-cli", "-p", str(cls.port), "ping"],
                                  capture_output=True, text=True)
            if ping.stdout.strip() == "PONG":
                break
            if cls.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not answer on port {cls.port}")
            time.sleep(0.02)  # polling interval, bounded by the deadline above
        cls.redis = Resp(cls.port)
        cls.addClassCleanup(cls.redis.close)

    @classmethod
    def _stop_server(cls):
        cls.proc.terminate()
        try:
            cls.proc.wait(10)
        except subprocess.TimeoutExpired:
            cls.proc.kill()
            cls.proc.wait()

    def setUp(self):
        self.redis.call("FLUSHALL")
        self.now = int(time.time())

    # --- helpers -------------------------------------------------------------------------------

    def raw(self, limits, cost=1, subject="user-42", plan="free", outbox_max=1000, deadline_us=0):
        """EVALs the script; returns the raw reply list."""
        counters, _, outbox = keys_for(subject, limits)
        argv = [deadline_us, f"{self.now * 1000 + 123} {outbox_max}", cost, len(limits), subject,
                plan, ""]
        for l in limits:
            start = self.now - self.now % l["window_len"]
            end = start + l["window_len"]
            counts = [(p, -(-l["quota"] * p // 100)) for p in sorted(l["thresholds"])]
            static = " ".join([str(end + GRACE), str(start), str(end), l["name"]] +
                              [f"{p} {c}" for p, c in counts])
            kind = l.get("kind", 1 if l.get("shadow") else 0)
            argv += [l["quota"], kind, counts[0][1] if counts else "", static]
        keys = counters + [hold_key(subject), outbox]
        return self.redis.call("EVAL", self.script, len(keys), *keys, *argv)

    def counter(self, key, subject="user-42"):
        """A counter field as stored (bytes), or None."""
        return self.redis.call("HGET", key, subject)

    def flags(self, key, subject="user-42"):
        """The subject's fired flags in counter hash `key`, in the order they fired."""
        value = self.redis.call("HGET", key, f"#{subject}")
        return [] if value is None else value.decode().split(" ")

    def decide(self, limits, cost=1, **kw):
        """Returns (allowed, [used...], fired, refused)."""
        r = self.raw(limits, cost, **kw)
        n = len(limits)
        return bool(r[0]), r[1:n + 1], r[n + 1], r[n + 2]

    def outbox(self, subject="user-42", plan="free", limits=()):
        _, _, key = keys_for(subject, list(limits))
        return [
            {entry[1][i].decode(): entry[1][i + 1].decode() for i in range(0, len(entry[1]), 2)}
            for entry in self.redis.call("XRANGE", key, "-", "+")
        ]

    def fired_thresholds(self):
        return [int(e["threshold"]) for e in self.outbox()]

    def all_keys(self):
        return [k.decode() for k in self.redis.call("KEYS", "*")]

    # --- admission -----------------------------------------------------------------------------

    def test_a_decision_past_its_deadline_changes_nothing(self):
        # The caller gave up (and answered degraded) before Redis ran the script.
        reply = self.raw([limit("m", 10, [100])], cost=10, deadline_us=(self.now - 5) * 10**6)
        self.assertEqual(reply, [-1])
        self.assertEqual(self.all_keys(), [])
        future = (int(time.time()) + 60) * 10**6
        self.assertEqual(self.decide([limit("m", 10)], deadline_us=future)[0], True)

    def test_the_deadline_is_in_microseconds_and_exclusive(self):
        # A deadline 1 ms from Redis's own TIME is still ahead; one at TIME itself has passed.
        sec, usec = (int(x) for x in self.redis.call("TIME"))
        now_us = sec * 10**6 + usec
        self.assertEqual(self.raw([limit("m", 10)], deadline_us=now_us), [-1])
        self.assertEqual(self.decide([limit("m", 10)], deadline_us=now_us + 10**6)[0], True)

    # --- counters that no admission could have written -----------------------------------------

    def test_a_counter_holding_no_valid_counter_is_exhausted_and_left_alone(self):
        lim = [limit("m", 10, [80, 100])]
        key = keys_for("user-42", lim)[0][0]
        for bad in ["-5", "garbage", "007", "1e3", "0x10", "9223372036854775807",
                    "9007199254740993", "1000000000000001", " 1", ""]:
            with self.subTest(bad=bad):
                self.redis.call("HSET", key, "user-42", bad)
                for cost in (0, 1, 5):
                    self.assertEqual(self.decide(lim, cost=cost), (False, [-1], 0, 0))
                self.assertEqual(self.counter(key), bad.encode())
        self.assertEqual(self.outbox(limits=lim), [])

    def test_a_counter_key_of_another_type_is_exhausted_instead_of_failing_the_script(self):
        lim = [limit("m", 10), limit("h", 10)]
        counters = keys_for("user-42", lim)[0]
        self.redis.call("SET", counters[1], "1")
        self.assertEqual(self.decide(lim), (False, [0, -1], 0, 0))
        self.assertIsNone(self.counter(counters[0]))  # the first limit's increment taken back
        self.assertEqual(self.redis.call("EXISTS", counters[0]), 0)

    def test_an_earlier_flag_hash_or_outbox_of_another_type_does_not_fail_an_admission(self):
        lim = [limit("m", 2, [50, 100])]
        counters, flags, outbox = keys_for("user-42", lim)
        self.redis.call("SET", flags[0], "x")
        self.assertEqual(self.decide(lim), (True, [1], 0, 0))  # 50% read as already fired...
        self.assertEqual(self.flags(counters[0]), ["50:2"])  # ...and kept so beside the counter
        self.redis.call("DEL", flags[0])
        self.redis.call("SET", outbox, "x")
        self.assertEqual(self.decide(lim), (True, [2], 0, 1))  # 100%: read as full, armed
        self.assertEqual(self.counter(counters[0]), b"2")

    def test_a_refused_write_fails_the_call_instead_of_reading_as_an_unusable_counter(self):
        # Out of memory (or a read-only replica), Redis refuses the first increment: the call is
        # an error, so sluice answers per on_store_error instead of denying.
        self.redis.call("CONFIG", "SET", "maxmemory", "1")
        try:
            with self.assertRaises(RedisError) as refused:
                self.raw([limit("m", 10), limit("h", 10)])
            self.assertTrue(str(refused.exception).startswith("OOM"), refused.exception)
        finally:
            self.redis.call("CONFIG", "SET", "maxmemory", "0")
        self.assertEqual(self.all_keys(), [])
        self.assertEqual(self.decide([limit("m", 10)])[:2], (True, [1]))

    def changes(self):
        """Redis's count of writes since the last save: a call that wrote nothing leaves it."""
        info = self.redis.call("INFO", "persistence").decode()
        return int(next(line.split(":")[1] for line in info.splitlines()
                        if line.startswith("rdb_changes_since_last_save:")))

    def test_a_refused_write_still_denies_an_exhausted_subject(self):
        # Out of memory, the first increment is refused; the subject is at its quota, so the
        # call is decided by reading: a denial (as before the optimistic increment), not an error
        # that on_store_error could turn into an admission. The 100% alert cannot be written: it
        # is counted as refused and stays armed.
        lim = [limit("m", 10), limit("h", 5, [100])]
        counters, flags, _ = keys_for("user-42", lim)
        self.redis.call("HSET", counters[1], "user-42", "5")
        self.redis.call("CONFIG", "SET", "maxmemory", "1")
        try:
            before = self.changes()
            self.assertEqual(self.decide(lim), (False, [0, 5], 0, 1))
            self.assertEqual(self.decide(lim, cost=0)[:2], (True, [0, 5]))  # a peek reads
            self.assertEqual(self.changes(), before)
            # Under the quota everywhere, the refusal is the answer.
            with self.assertRaises(RedisError) as refused:
                self.raw([limit("m", 10), limit("h", 6)])
            self.assertTrue(str(refused.exception).startswith("OOM"), refused.exception)
        finally:
            self.redis.call("CONFIG", "SET", "maxmemory", "0")
        self.assertEqual(self.flags(counters[1]), [])
        self.assertEqual(self.decide(lim), (False, [0, 5], 1, 0))  # armed: fires once writable
        self.assertEqual(self.flags(counters[1]), ["100:5"])

    def test_a_cost_beyond_the_quota_is_denied_without_a_write(self):
        lim = [limit("m", 0), limit("h", 3)]
        before = self.changes()
        self.assertEqual(self.decide(lim), (False, [0, 0], 0, 0))
        self.assertEqual(self.decide([limit("h", 3)], cost=4), (False, [0], 0, 0))
        self.assertEqual(self.changes(), before)
        self.assertEqual(self.all_keys(), [])

    def test_a_flag_lives_in_its_counter_hash_whatever_the_keys_shape(self):
        # Nothing is derived from a counter key but a flag hash written before flags moved
        # into the counter hash: a key without that shape has no such hash, and fires as any.
        _, _, outbox = keys_for("user-42", [limit("m", 10)])
        for key in ["sl:{7}:h:m:3600s:1000:3", "sl:{7}:x:m:3600s:1000:3", "nocolon",
                    "sl:{7}:h:m3600s1000"]:
            with self.subTest(key=key):
                keys = ["sl:{7}:h:ok:3600s:1000:3", key, hold_key("user-42"), outbox]
                argv = [0, "1 10", 1, 2, "user-42", "free", "",
                        5, 0, "1", f"{self.now + 999} 0 1 ok 20 1",
                        5, 0, "1", f"{self.now + 999} 0 1 m 20 1"]
                self.assertEqual(self.redis.call("EVAL", self.script, 4, *keys, *argv),
                                 [1, 1, 1, 2, 0])
                self.assertEqual([self.flags(k) for k in keys[:2]], [["20:5"], ["20:5"]])
                self.assertEqual(sorted(self.all_keys()), sorted(keys[:2] + [outbox]))
                self.redis.call("FLUSHALL")

    def test_a_flag_moves_with_its_counter(self):
        lim = [limit("daily", 10, [80])]
        counters, _, outbox = keys_for("user-42", lim)
        self.assertEqual(self.decide(lim, cost=8)[2], 1)
        # What MIGRATE does to a key in a Redis Cluster reshard: the counter hash goes whole to
        # another server (here another database), and the next decision runs there.
        self.assertEqual(self.redis.call("MOVE", counters[0], 1), 1)
        self.redis.call("SELECT", 1)
        try:
            self.assertEqual(self.decide(lim)[:3], (True, [9], 0))  # 80% not again
            self.assertEqual(self.redis.call("XLEN", outbox), 0)
        finally:
            self.redis.call("FLUSHDB")
            self.redis.call("SELECT", 0)

    def test_a_flag_fired_before_flags_moved_into_the_counter_hash_does_not_fire_again(self):
        lim = [limit("daily", 10, [50, 80])]
        counters, earlier, _ = keys_for("user-42", lim)
        self.redis.call("HSET", earlier[0], "50:10", "1")
        self.redis.call("EXPIRE", earlier[0], "3600")
        self.assertEqual(self.decide(lim, cost=8)[2], 1)  # 80% only
        # The earlier flag is copied beside the counter, where it is read from then on.
        self.assertEqual(self.flags(counters[0]), ["50:10", "80:10"])
        self.assertEqual([e["threshold"] for e in self.outbox()], ["80"])
        self.assertEqual(self.redis.call("HKEYS", earlier[0]), [b"50:10"])  # never written
        self.redis.call("DEL", earlier[0])
        self.assertEqual(self.decide(lim)[2], 0)

    def test_a_bad_part_after_a_paying_part_is_the_scripts_error_and_takes_back(self):
        counters, _, outbox = keys_for("user-42", [limit("m", 5), limit("h", 5)])
        static = f"{self.now + 999} 0 1 m"
        for bad_part in (["x", 1, "user-43", "free", "", 5, 0, "", static],
                         [1, "x", "user-43", "free", "", 5, 0, "", static],
                         [1, 1, "user-43", "free", "x", 5, 0, "", static],
                         [1, 1, "user-43", "free", "", "x", 0, "", static]):
            with self.subTest(bad_part=bad_part):
                with self.assertRaises(RedisError) as bad:
                    self.redis.call("EVAL", self.script, 5, counters[0], hold_key("user-42"),
                                    counters[1], hold_key("user-43"), outbox, 0, "1 10",
                                    1, 1, "user-42", "free", "", 5, 0, "", static, *bad_part)
                self.assertTrue(str(bad.exception).startswith("ERR sluice decide: "),
                                bad.exception)
                self.assertEqual(self.redis.call("DBSIZE"), 0)

    def as_user_without(self, command):
        """A connection of an ACL user refused `command`: Redis refuses it inside the script too,
        as an older Redis refuses EXPIREAT NX or a Cluster node a key whose slot is moving."""
        self.redis.call("ACL", "SETUSER", "limited", "reset", "on", "nopass", "~*", "&*",
                        "+@all", f"-{command}")
        self.addCleanup(self.redis.call, "ACL", "DELUSER", "limited")
        conn = Resp(self.port)
        self.addCleanup(conn.close)
        conn.call("AUTH", "limited", "x")
        return conn

    def test_a_refused_expiry_takes_every_increment_back_and_is_the_reply(self):
        lim = [limit("m", 10), limit("h", 10)]
        counters, _, _ = keys_for("user-42", lim)
        self.redis.call("HSET", counters[0], "other", "3")  # the first hash exists, the second not
        self.redis.call("EXPIREAT", counters[0], self.now + 3600)
        main = self.redis
        self.redis = self.as_user_without("expireat")
        try:
            with self.assertRaises(RedisError) as refused:
                self.raw(lim)
            self.assertIn("can't run this command", str(refused.exception))
            with self.assertRaises(RedisError):  # a shadow limit's new field too
                self.raw([limit("m", 10), dict(limit("s", 10), shadow=True)])
        finally:
            self.redis = main
        self.assertEqual(sorted(self.all_keys()), [counters[0]])
        self.assertEqual(self.redis.call("HGETALL", counters[0]), [b"other", b"3"])

    def test_a_flag_that_cannot_be_read_is_refused_and_stays_armed(self):
        lim = [limit("m", 2, [50])]
        main = self.redis
        self.redis = self.as_user_without("hexists")
        try:
            self.assertEqual(self.decide(lim), (True, [1], 0, 1))
        finally:
            self.redis = main
        self.assertEqual(self.decide(lim), (True, [2], 1, 0))
        self.assertEqual(self.fired_thresholds(), [50])

    def test_what_the_hold_hash_holds_counts_as_used_and_is_reported(self):
        lim = [limit("m", 10, [100]), limit("d", 100)]
        # Held by open reservations (reservation.lua's field: the limit and window, no window id).
        self.redis.call("HSET", hold_key("user-42"), "m:3600s", 6)
        self.assertEqual(self.raw(lim, cost=4), [1, 4, 4, 0, 0, 6, 0])
        # 4 used + 6 held + 1 > 10: denied, nothing written, and the 100% threshold fires.
        self.assertEqual(self.raw(lim, cost=1), [0, 4, 4, 1, 0, 6, 0])
        self.assertEqual(self.counter(keys_for("user-42", lim)[0][0]), b"4")
        self.assertEqual(self.fired_thresholds(), [100])

    def test_without_a_hold_hash_the_reply_has_no_holds(self):
        self.assertEqual(self.raw([limit("m", 10)], cost=4), [1, 4, 0, 0])

    def test_a_concurrent_limit_has_no_counter_and_needs_a_free_slot(self):
        lim = [limit("m", 10), dict(limit("inflight", 2), kind=3)]
        self.assertEqual(self.raw(lim, cost=1), [1, 1, 0, 0, 0])
        self.assertEqual(self.redis.call("HGETALL", keys_for("user-42", lim)[0][1]), [])
        self.redis.call("HSET", hold_key("user-42"), "inflight:3600s", 2)
        self.assertEqual(self.raw(lim, cost=1), [0, 1, 0, 0, 0, 0, 2])
        self.assertEqual(self.raw(lim, cost=0), [1, 1, 0, 0, 0, 0, 2])  # a peek needs no slot
        # Shadow (4): it never denies.
        lim[1]["kind"] = 4
        self.assertEqual(self.raw(lim, cost=1), [1, 2, 0, 0, 0, 0, 2])

    def test_a_denial_after_a_concurrent_limit_takes_back_only_the_counters(self):
        lim = [dict(limit("inflight", 2), kind=3), limit("m", 10), limit("d", 1)]
        self.assertEqual(self.raw(lim, cost=2), [0, 0, 0, 0, 0, 0])
        self.assertEqual(self.all_keys(), [])  # nothing written, nothing left negative

    def test_a_counter_at_the_largest_quota_admits_the_largest_cost_exactly(self):
        top = 10**15
        lim = [limit("m", top)]
        key = keys_for("user-42", lim)[0][0]
        self.redis.call("HSET", key, "user-42", top - 10**6)
        self.assertEqual(self.decide(lim, cost=10**6)[:2], (True, [top]))
        self.assertEqual(self.decide(lim, cost=1)[:2], (False, [top]))
        self.assertEqual(self.decide(lim, cost=0)[:2], (True, [top]))

    # --- refund.lua: an admission whose reply came after the caller answered degraded ----------

    def refund(self, keys, cost, subject="user-42"):
        with open(REFUND_PATH) as f:
            return self.redis.call("EVAL", f.read(), len(keys), *keys, cost, subject)

    def test_a_refund_takes_back_exactly_the_cost_and_keeps_the_expiry(self):
        lim = [limit("m", 10), limit("h", 100)]
        counters = keys_for("user-42", lim)[0]
        self.assertEqual(self.decide(lim, cost=3)[:2], (True, [3, 3]))
        self.assertEqual(self.decide(lim, cost=4)[:2], (True, [7, 7]))
        self.assertEqual(self.refund(counters, 4), 2)
        self.assertEqual([self.counter(k) for k in counters], [b"3", b"3"])
        self.assertTrue(all(self.redis.call("TTL", k) > 0 for k in counters))
        # Taken back to 0, a field goes (a missing field is 0), and with it an emptied hash.
        self.assertEqual(self.refund(counters, 3), 2)
        self.assertEqual(self.redis.call("EXISTS", *counters), 0)

    def test_a_refund_leaves_missing_smaller_or_unusable_counters_alone(self):
        keys = ["sl:{7}:h:a:60s:1:0", "sl:{7}:h:b:60s:1:0", "sl:{7}:h:c:60s:1:0"]
        self.redis.call("HSET", keys[1], "x", "2")
        self.redis.call("HSET", keys[2], "x", "garbage")
        self.assertEqual(self.refund(keys, 3, subject="x"), 0)
        self.assertEqual(self.redis.call("EXISTS", keys[0]), 0)  # no negative key without a TTL
        self.assertEqual(self.counter(keys[1], "x"), b"2")
        self.assertEqual(self.counter(keys[2], "x"), b"garbage")

    def test_a_quota_or_cost_beyond_the_bounds_is_refused_before_anything_is_written(self):
        with self.assertRaises(RedisError):
            self.raw([limit("m", 10**15 + 1)])
        with self.assertRaises(RedisError):
            self.raw([limit("m", 10)], cost=10**6 + 1)
        self.assertEqual(self.all_keys(), [])

    def test_a_cost_that_is_no_canonical_integer_is_refused_and_takes_back(self):
        # Lua's tonumber reads these as 1; Redis's HINCRBY does not: a bad cost, never a denial.
        counters, _, outbox = keys_for("user-42", [limit("m", 5)])
        static = f"{self.now + 999} 0 1 m"
        other, _, _ = keys_for("user-43", [limit("m", 5)])
        for cost in ("1.0", "0x1", "1e0", "01", " 1"):
            with self.subTest(cost=cost):
                with self.assertRaises(RedisError) as bad:
                    self.redis.call("EVAL", self.script, 5, counters[0], hold_key("user-42"),
                                    other[0], hold_key("user-43"), outbox, 0,
                                    "1 10", 1, 1, "user-42", "free", "", 5, 0, "", static,
                                    cost, 1, "user-43", "free", "", 5, 0, "", static)
                self.assertIn("sluice decide: bad cost", str(bad.exception))
                self.assertEqual(self.all_keys(), [])  # the first part's increment taken back
        # The same on the paths without an increment: a peek, a cost beyond the quota, a part
        # whose only limit is a shadow one.
        shadow = [5, 1, "", static]
        for cost, limit_values in (("-0", [5, 0, "", static]), ("00", [5, 0, "", static]),
                                   ("9.0", [5, 0, "", static]), ("1.0", shadow)):
            with self.subTest(cost=cost, shadow=limit_values[1]):
                with self.assertRaises(RedisError) as bad:
                    self.redis.call("EVAL", self.script, 5, counters[0], hold_key("user-42"),
                                    other[0], hold_key("user-43"), outbox, 0,
                                    "1 10", 1, 1, "user-42", "free", "", 5, 0, "", static,
                                    cost, 1, "user-43", "free", "", *limit_values)
                self.assertIn("sluice decide: bad cost", str(bad.exception))
                self.assertEqual(self.all_keys(), [])

    def test_admits_up_to_the_quota_then_denies(self):
        lim = [limit("per_minute", 3)]
        self.assertEqual([self.decide(lim)[:2] for _ in range(4)],
                         [(True, [1]), (True, [2]), (True, [3]), (False, [3])])

    def test_cost_is_added_whole(self):
        lim = [limit("daily", 10)]
        self.assertEqual(self.decide(lim, cost=4)[:2], (True, [4]))
        self.assertEqual(self.decide(lim, cost=6)[:2], (True, [10]))

    def test_denied_request_consumes_nothing(self):
        lim = [limit("daily", 10)]
        self.decide(lim, cost=8)
        self.assertEqual(self.decide(lim, cost=3)[:2], (False, [8]))
        self.assertEqual(self.decide(lim, cost=2)[:2], (True, [10]))

    def test_hammering_while_blocked_does_not_grow_usage(self):
        lim = [limit("daily", 2)]
        self.decide(lim, cost=2)
        for _ in range(20):
            self.assertEqual(self.decide(lim)[:2], (False, [2]))

    def test_admission_is_all_or_nothing_across_limits(self):
        lim = [limit("per_minute", 2, window_len=60), limit("daily", 100, window_len=86400)]
        self.decide(lim, cost=2)
        self.assertEqual(self.decide(lim)[:2], (False, [2, 2]))
        counters, _, _ = keys_for("user-42", lim)
        self.assertEqual(self.counter(counters[1]), b"2")

    def test_subjects_are_counted_separately(self):
        lim = [limit("daily", 1)]
        self.assertTrue(self.decide(lim, subject="a:b")[0])
        self.assertTrue(self.decide(lim, subject="a")[0])
        self.assertFalse(self.decide(lim, subject="a:b")[0])
        # Fields of one counter hash (same slot here), each its own counter.
        counters, _, _ = keys_for("a", lim)
        self.assertEqual(sorted(self.redis.call("HKEYS", counters[0])), [b"a", b"a:b"])

    def test_a_denial_that_created_a_field_leaves_none(self):
        # The optimistic increment of a request that cannot fit (cost above the quota, or a
        # quota of 0) creates the field, and the denial deletes it again.
        self.assertEqual(self.decide([limit("daily", 0)])[:2], (False, [0]))
        self.assertEqual(self.decide([limit("daily", 2)], cost=3)[:2], (False, [0]))
        self.assertEqual(self.all_keys(), [])
        lim = [limit("per_minute", 5, window_len=60), limit("daily", 2)]
        self.decide(lim, subject="other")  # the hashes exist, with another subject's fields
        self.assertEqual(self.decide(lim, cost=3)[:2], (False, [0, 0]))
        counters, _, _ = keys_for("user-42", lim)
        self.assertEqual([self.redis.call("HKEYS", k) for k in counters], [[b"other"], [b"other"]])

    # --- peeks ---------------------------------------------------------------------------------

    def test_cost_zero_writes_nothing(self):
        lim = [limit("daily", 5, thresholds=[80, 100])]
        self.assertEqual(self.decide(lim, cost=0), (True, [0], 0, 0))
        self.assertEqual(self.redis.call("DBSIZE"), 0)

    def test_cost_zero_on_an_exhausted_limit_is_allowed_and_fires_nothing(self):
        lim = [limit("daily", 5, thresholds=[100]), limit("per_minute", 5, window_len=60)]
        self.decide([lim[1]], cost=5)  # exhaust only per_minute, no alert there
        before = sorted(self.all_keys())
        self.assertEqual(self.decide(lim, cost=0), (True, [0, 5], 0, 0))
        self.assertEqual(sorted(self.all_keys()), before)

    # --- expiry --------------------------------------------------------------------------------

    def assert_every_key_expires(self):
        keys = self.all_keys()
        self.assertTrue(keys)
        for key in keys:
            if key.endswith(":outbox"):
                continue  # long-lived per bucket, bounded by outbox_max (docs/redis.md)
            ttl = self.redis.call("TTL", key)
            self.assertGreater(ttl, 0, key)
            self.assertLessEqual(ttl, 3600 + GRACE, key)

    def test_every_key_has_a_ttl_after_admissions(self):
        lim = [limit("per_minute", 10, [50, 100], window_len=60), limit("daily", 10, [80])]
        for _ in range(10):
            self.decide(lim)
        counters, _, outbox = keys_for("user-42", lim)
        # The flags are in the counter hashes: the call's KEYS are every key it wrote.
        self.assertEqual(sorted(self.all_keys()), sorted(counters + [outbox]))
        self.assertEqual([self.flags(k) for k in counters], [["50:10", "100:10"], ["80:10"]])
        self.assert_every_key_expires()

    def test_a_shadow_limit_is_counted_past_its_quota_and_keeps_its_ttl(self):
        trial = dict(limit("trial", 3, [100]), shadow=True)
        lim = [limit("per_minute", 5), trial]
        for i in range(1, 6):
            allowed, used, _, _ = self.decide(lim)
            self.assertTrue(allowed, i)
            self.assertEqual(used, [i, i])
        allowed, used, fired, _ = self.decide(lim)
        self.assertFalse(allowed)  # the enforced limit denies; the shadow one never does
        self.assertEqual(used, [5, 5])
        self.assertEqual(fired, 0)  # trial's 100% fired once, at 3
        self.assertEqual(self.fired_thresholds(), [100])
        self.assert_every_key_expires()

    def test_a_shadow_counter_stops_at_the_largest_counter_and_keeps_its_ttl(self):
        trial = dict(limit("trial", 3), shadow=True)
        counters, _, _ = keys_for("user-42", [trial])
        self.redis.call("HSET", counters[0], "user-42", str(10**15 - 1))
        self.redis.call("EXPIRE", counters[0], "3600")
        allowed, used, _, _ = self.decide([trial], cost=5)
        self.assertTrue(allowed)
        self.assertEqual(used, [10**15])
        self.assertEqual(self.counter(counters[0]), str(10**15).encode())
        self.assertGreater(self.redis.call("TTL", counters[0]), 0)

    def test_every_key_has_a_ttl_after_a_first_denial_that_fired_100(self):
        lim = [limit("daily", 5, [100])]
        self.assertEqual(self.decide(lim, cost=6), (False, [0], 1, 0))
        counters, _, _ = keys_for("user-42", lim)
        self.assertIsNone(self.counter(counters[0]))  # a denial writes no counter...
        self.assertEqual(self.flags(counters[0]), ["100:5"])  # ...but its flag made the hash
        self.assert_every_key_expires()

    # --- alerts --------------------------------------------------------------------------------

    def test_threshold_fires_once_at_the_first_request_that_reaches_it(self):
        lim = [limit("daily", 10, [80])]
        fired = [self.decide(lim)[2] for _ in range(10)]
        self.assertEqual(fired, [0] * 7 + [1, 0, 0])
        self.assertEqual(self.redis.call("XLEN", keys_for("user-42", lim)[2]), 1)
        self.assertEqual(self.outbox()[0]["used"], "8")

    def test_alert_event_carries_the_decisions_facts(self):
        lim = [limit("daily", 10, [80], window_len=86400)]
        self.decide(lim, cost=9)
        start = self.now - self.now % 86400
        self.assertEqual(self.outbox(), [{
            "type": "quota.threshold_reached", "subject": "user-42", "plan": "free",
            "limit": "daily", "threshold": "80", "used": "9", "quota": "10",
            "window_start": str(start), "window_end": str(start + 86400),
            "occurred_at_ms": str(self.now * 1000 + 123)}])

    def test_threshold_count_is_the_precomputed_rounded_up_count(self):
        lim = [limit("daily", 3, [50])]  # ceil(1.5) = 2
        self.assertEqual(self.decide(lim)[2], 0)
        self.assertEqual(self.decide(lim)[2], 1)

    def test_one_request_can_cross_several_thresholds(self):
        lim = [limit("daily", 10, [80, 100])]
        self.assertEqual(self.decide(lim, cost=10)[2], 2)
        self.assertEqual(self.fired_thresholds(), [80, 100])

    def test_hundred_percent_fires_at_the_first_denial_of_that_limit_and_not_again(self):
        lim = [limit("daily", 10, [80, 100])]
        self.decide(lim, cost=9)
        self.assertEqual(self.fired_thresholds(), [80])
        self.assertEqual(self.decide(lim, cost=2), (False, [9], 1, 0))
        self.assertEqual(self.decide(lim, cost=2), (False, [9], 0, 0))
        self.assertEqual(self.decide(lim, cost=1)[:3], (True, [10], 0))
        self.assertEqual(self.fired_thresholds(), [80, 100])
        self.assertEqual(self.outbox()[1]["used"], "9")

    def test_denial_by_another_limit_fires_nothing_here(self):
        lim = [limit("per_minute", 1, window_len=60), limit("daily", 2, [50, 100])]
        self.assertEqual(self.decide(lim)[2], 1)  # daily 50%
        self.assertEqual(self.decide(lim), (False, [1, 1], 0, 0))
        self.assertEqual(self.fired_thresholds(), [50])

    def test_thresholds_rearm_in_the_next_window(self):
        self.decide([limit("daily", 2, [100], window_id=1000)], cost=2)
        self.assertEqual(self.decide([limit("daily", 2, [100], window_id=1001)], cost=2)[2], 1)
        self.assertEqual(self.fired_thresholds(), [100, 100])

    def test_a_flag_names_the_percent_and_the_quota_it_fired_under(self):
        free, pro = [limit("daily", 100, [10])], [limit("daily", 50, [10])]
        self.assertEqual(self.decide(free, cost=10)[2], 1)  # 10% of 100
        counters = keys_for("user-42", free)[0]
        self.assertEqual(self.flags(counters[0]), ["10:100"])
        # The same limit under another quota (another plan, or an override) has its own flag.
        self.assertEqual(self.decide(pro, cost=1, plan="pro")[2], 1)  # 11 >= 10% of 50
        # Back under 100: already sent in this window, however often the plan changes.
        for _ in range(3):
            self.assertEqual(self.decide(free, cost=1)[2], 0)
            self.assertEqual(self.decide(pro, cost=1, plan="pro")[2], 0)
        self.assertEqual(self.flags(counters[0]), ["10:100", "10:50"])
        self.assertEqual([(e["plan"], e["quota"]) for e in self.outbox()],
                         [("free", "100"), ("pro", "50")])

    def test_the_counter_follows_the_subject_from_plan_to_plan(self):
        self.decide([limit("daily", 10)], cost=4, plan="free")
        self.assertEqual(self.decide([limit("daily", 100)], cost=1, plan="pro")[:2], (True, [5]))

    def test_events_carry_used_and_quota_as_exact_integers(self):
        top = 10**15
        lim = [limit("m", top, [100])]
        self.redis.call("HSET", keys_for("user-42", lim)[0][0], "user-42", top - 3)
        self.decide(lim, cost=3)
        event = self.outbox()[0]
        self.assertEqual((event["used"], event["quota"]), (str(top), str(top)))

    def test_full_outbox_refuses_the_event_and_leaves_the_threshold_armed(self):
        lim = [limit("daily", 10, [10])]
        for subject in ("s1", "s2"):
            self.assertEqual(self.decide(lim, subject=subject, outbox_max=2)[2:], (1, 0))
        self.assertEqual(self.decide(lim, subject="s3", outbox_max=2)[2:], (0, 1))
        self.assertEqual(self.redis.call("XLEN", keys_for("x", lim)[2]), 2)
        # The dispatcher delivers one event (XACK + XDEL): s3's threshold fires at its next request.
        first = self.redis.call("XRANGE", keys_for("x", lim)[2], "-", "+", "COUNT", 1)
        self.redis.call("XDEL", keys_for("x", lim)[2], first[0][0])
        self.assertEqual(self.decide(lim, subject="s3", outbox_max=2), (True, [2], 1, 0))
        self.assertEqual([e["subject"] for e in self.outbox()], ["s2", "s3"])

    def test_outbox_never_exceeds_its_bound(self):
        lim = [limit("daily", 1, [100])]
        for i in range(50):
            self.decide(lim, subject=f"s{i}", outbox_max=20)
        self.assertEqual(self.redis.call("XLEN", keys_for("x", lim)[2]), 20)

    # --- contract ------------------------------------------------------------------------------

    def test_reply_is_integers_only(self):
        lim = [limit("per_minute", 5, [100], window_len=60), limit("daily", 7, [80, 100])]
        for cost in (0, 3, 3, 5):
            reply = self.raw(lim, cost=cost)
            self.assertEqual(len(reply), 1 + len(lim) + 2)
            for value in reply:
                self.assertIs(type(value), int, reply)

    def test_mismatched_arguments_are_an_error(self):
        counters, _, outbox = keys_for("user-42", [limit("daily", 5)])
        with self.assertRaises(RedisError):  # N = 2, one limit given
            self.redis.call("EVAL", self.script, 3, *counters, hold_key("user-42"), outbox,
                            0, "1 10", 1, 2, "user-42", "free", "", 5, 0, "",
                            "9999999999 0 1 daily")
        with self.assertRaises(RedisError):  # two limits, but one key
            self.redis.call("EVAL", self.script, 3, *counters, hold_key("user-42"), outbox,
                            0, "1 10", 1, 2, "user-42", "free", "", 5, 0, "",
                            "9999999999 0 1 daily", 5, 0, "", "9999999999 0 1 other")
        self.assertEqual(self.redis.call("DBSIZE"), 0)


if __name__ == "__main__":
    unittest.main()
