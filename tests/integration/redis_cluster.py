"""A throwaway Redis Cluster on loopback ports for integration tests: six redis-server processes
(three masters, one replica each) made into a cluster by `redis-cli --cluster create`, and the
operations the tests perform on it (resharding, failover, killing a master, scanning every key)."""
import os
import subprocess
import tempfile
import time

import harness
from test_redis_script import Resp, RedisError


def cluster_port():
    """A free port P whose cluster bus port P + 10000 is free too (and exists)."""
    import socket
    for _ in range(200):
        port = harness.free_port()
        if port + 10000 > 65535:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port
    raise AssertionError("no port with a free cluster bus port")


class RedisCluster:
    """With `pki` (test_redis_tls.Pki), every node listens only for TLS (`--tls-cluster yes`: the
    cluster bus and replication too) and requires a client certificate; the test's own clients,
    redis-cli and the YAML this builds present the PKI's client certificate."""

    def __init__(self, nodes=6, replicas=1, node_timeout_ms=1000, pki=None):
        self.ports = [cluster_port() for _ in range(nodes)]
        self.replicas = replicas
        self.node_timeout_ms = node_timeout_ms
        self.pki = pki
        self.dir = tempfile.TemporaryDirectory(prefix="sluice-cluster-")
        self.procs = {}

    # --- life cycle ---

    def start(self):
        try:
            return self._start()
        except BaseException:
            self.close()
            raise

    def _start(self):
        for port in self.ports:
            self._start_node(port)
        for port in self.ports:
            self._wait_answers(port)
        addresses = [f"127.0.0.1:{p}" for p in self.ports]
        out = subprocess.run(
            ["redis-cli", *self._cli_tls(), "--cluster", "create", *addresses, "--cluster-replicas",
             str(self.replicas), "--cluster-yes"],
            capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            raise AssertionError(f"redis-cli --cluster create failed: {out.stdout}{out.stderr}")
        self.wait_ok()
        return self

    def _cli_tls(self):
        if self.pki is None:
            return []
        cert, key = self.pki.client
        return ["--tls", "--cacert", self.pki.ca, "--cert", cert, "--key", key]

    def _listen(self, port):
        if self.pki is None:
            return ["--port", str(port)]
        cert, key = self.pki.server
        client_cert, client_key = self.pki.client  # a node dialling another is a TLS client
        return ["--port", "0", "--tls-port", str(port), "--tls-cluster", "yes",
                "--tls-replication", "yes", "--tls-cert-file", cert, "--tls-key-file", key,
                "--tls-client-cert-file", client_cert, "--tls-client-key-file", client_key,
                "--tls-ca-cert-file", self.pki.ca, "--tls-auth-clients", "yes"]

    def connect(self, port):
        if self.pki is None:
            return Resp(port)
        from test_redis_tls import TlsResp
        return TlsResp(port, self.pki)

    def _start_node(self, port):
        node_dir = os.path.join(self.dir.name, str(port))
        os.makedirs(node_dir, exist_ok=True)
        self.procs[port] = subprocess.Popen(
            ["redis-server", *self._listen(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
             "--cluster-config-file", os.path.join(node_dir, "nodes.conf"),
             "--cluster-node-timeout", str(self.node_timeout_ms),
             # A replica may always be promoted (the default refuses one whose link to its master
             # has been quiet for 10 node timeouts, which a loaded test machine can cause).
             "--cluster-replica-validity-factor", "0", "--appendonly", "no",
             "--save", "", "--dir", node_dir],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def _wait_answers(self, port, timeout=10):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                self.connect(port).close()
                return
            except OSError:
                time.sleep(0.02)  # polling a starting child process, bounded by the deadline
        raise AssertionError(f"redis-server on {port} did not start")

    def close(self):
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        self.dir.cleanup()

    # --- state ---

    def alive(self):
        return [p for p in self.ports if self.procs[p].poll() is None]

    def call(self, port, *args):
        c = self.connect(port)
        try:
            return c.call(*args)
        finally:
            c.close()

    def info(self, port, section):
        text = self.call(port, "INFO", section)
        text = text.decode() if isinstance(text, bytes) else text
        return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)

    def cluster_info(self, port):
        text = self.call(port, "CLUSTER", "INFO")
        text = text.decode() if isinstance(text, bytes) else text
        return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)

    def wait_ok(self, timeout=30):
        """Until every live node says cluster_state:ok and agrees on the masters."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                states = [self.cluster_info(p).get("cluster_state") for p in self.alive()]
                if all(s == "ok" for s in states) and self._agree():
                    return
            except (OSError, RedisError):
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"cluster not ok within {timeout}s")
            time.sleep(0.05)  # polling the cluster's own convergence, bounded by the deadline

    def _agree(self):
        views = set()
        for p in self.alive():
            views.add(tuple(sorted(self.masters_from(p))))
        return len(views) == 1

    def nodes(self, port=None):
        """CLUSTER NODES as a list of dicts (id, port, flags, master_id, slots)."""
        port = port or self.alive()[0]
        text = self.call(port, "CLUSTER", "NODES")
        text = text.decode() if isinstance(text, bytes) else text
        out = []
        for line in text.splitlines():
            parts = line.split()
            address = parts[1].split("@")[0]
            out.append({"id": parts[0], "port": int(address.rsplit(":", 1)[1]),
                        "flags": parts[2].split(","), "master_id": parts[3],
                        "slots": parts[8:]})
        return out

    def masters_from(self, port):
        return [n["port"] for n in self.nodes(port)
                if "master" in n["flags"] and "fail" not in n["flags"] and n["slots"]]

    def masters(self):
        return self.masters_from(self.alive()[0])

    def node_id(self, port):
        return self.call(port, "CLUSTER", "MYID").decode()

    def owner_of(self, key):
        """The port of the master serving `key`'s slot."""
        slot = self.call(self.alive()[0], "CLUSTER", "KEYSLOT", key)
        for n in self.nodes():
            if "master" not in n["flags"] or "fail" in n["flags"]:
                continue
            for spec in n["slots"]:
                if spec.startswith("["):
                    continue  # a migration in progress
                lo, _, hi = spec.partition("-")
                if int(lo) <= slot <= int(hi or lo):
                    return n["port"]
        return None

    def replica_of(self, master_port):
        master_id = self.node_id(master_port)
        for n in self.nodes():
            if n["master_id"] == master_id and "fail" not in n["flags"]:
                return n["port"]
        return None

    # --- operations ---

    def reshard(self, from_port, to_port, slots):
        """Moves `slots` slots from one master to another with redis-cli (keys migrated live)."""
        out = subprocess.run(
            ["redis-cli", *self._cli_tls(), "--cluster", "reshard", f"127.0.0.1:{self.alive()[0]}",
             "--cluster-from", self.node_id(from_port), "--cluster-to", self.node_id(to_port),
             "--cluster-slots", str(slots), "--cluster-yes"],
            capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise AssertionError(f"reshard failed: {out.stdout[-2000:]}{out.stderr}")
        return out.stdout

    def failover(self, replica_port):
        """CLUSTER FAILOVER on a replica (a coordinated switch, no data lost)."""
        self.call(replica_port, "CLUSTER", "FAILOVER")

    def kill(self, port):
        self.procs[port].kill()
        self.procs[port].wait()

    def keys(self, pattern="*"):
        """Every key on every live master: {port: [key, ...]}."""
        out = {}
        for p in self.masters():
            found, cursor = [], b"0"
            while True:
                cursor, batch = self.call(p, "SCAN", cursor, "MATCH", pattern, "COUNT", 1000)
                found.extend(batch)
                if cursor in (b"0", 0, "0"):
                    break
            out[p] = found
        return out

    def counters(self, prefix):
        """Every counter on every live master: {port: [(hash key, subject), ...]}. A counter is a
        field (the subject) of a counter hash `<prefix>:{bucket}:h:<limit>:…` (docs/redis.md);
        the field "#<subject>" of the same hash holds the subject's alert flags."""
        out = {}
        for port, keys in self.keys(f"{prefix}:*:h:*").items():
            out[port] = [(key, field.decode()) for key in keys
                         for field in self.call(port, "HKEYS", key)
                         if not field.startswith(b"#")]
        return out

    def yaml(self, timeout="200ms", policy="allow", seeds=2, ca_file=None):
        """The store section for this cluster; with a PKI, TLS with the client certificate and
        `ca_file` (default: the PKI's CA)."""
        nodes = ", ".join(f'"127.0.0.1:{p}"' for p in self.ports[:seeds])
        tls = ""
        if self.pki is not None:
            cert, key = self.pki.client
            tls = (f', tls: {{ ca_file: "{ca_file or self.pki.ca}", cert_file: "{cert}", '
                   f'key_file: "{key}" }}')
        return (f"store:\n  type: redis\n  redis: {{ cluster_nodes: [{nodes}], timeout: {timeout}{tls} }}\n"
                f"on_store_error: {policy}\n")
