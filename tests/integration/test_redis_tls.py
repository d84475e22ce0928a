"""The Redis store over TLS (rediss://, docs/redis.md, TLS), black-box: a real redis-server with
--tls-port and certificates this test makes with the openssl command. A verified connection
decides, delivers alerts through the outbox and serves the registry; a certificate that does not
verify (another CA, expired, another name), a client certificate the server requires and does not
get, and plaintext to a TLS port each fail the connection with the reason in the log, and
decisions are answered degraded per on_store_error — never over plaintext."""
import json
import os
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import unittest

import harness
from receivers import HttpReceiver, event_of
from test_redis_script import Resp

PKI_CONFIG = """
[req]
distinguished_name = dn
prompt = no
[dn]
CN = placeholder
[v3_ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[server_ip]
basicConstraints = CA:FALSE
subjectAltName = IP:127.0.0.1,DNS:localhost
extendedKeyUsage = serverAuth
[server_dns]
basicConstraints = CA:FALSE
subjectAltName = DNS:redis.test
extendedKeyUsage = serverAuth
[client]
basicConstraints = CA:FALSE
extendedKeyUsage = clientAuth
[ca]
default_ca = test_ca
[test_ca]
database = index.txt
new_certs_dir = .
serial = serial
default_md = sha256
policy = anything
unique_subject = no
[anything]
commonName = supplied
"""


class Pki:
    """A CA, certificates it signs (a server for 127.0.0.1 and localhost, a server for the DNS name
    redis.test only, an expired server, a client), and a second CA that signed none of them."""

    def __init__(self, directory):
        self.dir = directory
        with open(self.path("pki.cnf"), "w") as f:
            f.write(PKI_CONFIG)
        self.ca = self.make_ca("ca", "sluice test CA")
        self.wrong_ca = self.make_ca("wrong-ca", "another CA")
        self.server = self.sign("server", "127.0.0.1", "server_ip")
        self.server_dns = self.sign("server-dns", "redis.test", "server_dns")
        self.client = self.sign("client", "sluice client", "client")
        self.expired = self.expired_server()

    def path(self, name):
        return os.path.join(self.dir, name)

    def openssl(self, *args):
        result = subprocess.run(["openssl", *args], cwd=self.dir, capture_output=True, text=True)
        if result.returncode != 0:
            raise AssertionError(f"openssl {' '.join(args)}: {result.stderr}")

    def new_key_and_request(self, name, cn):
        self.openssl("req", "-config", "pki.cnf", "-new", "-newkey", "ec", "-pkeyopt",
                     "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", f"{name}.key",
                     "-out", f"{name}.csr", "-subj", f"/CN={cn}")

    def make_ca(self, name, cn):
        self.openssl("req", "-config", "pki.cnf", "-x509", "-new", "-newkey", "ec", "-pkeyopt",
                     "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", f"{name}.key",
                     "-out", f"{name}.crt", "-days", "3", "-subj", f"/CN={cn}",
                     "-extensions", "v3_ca")
        return self.path(f"{name}.crt")

    def sign(self, name, cn, extensions):
        self.new_key_and_request(name, cn)
        self.openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                     "-CAcreateserial", "-days", "3", "-extfile", "pki.cnf", "-extensions",
                     extensions, "-out", f"{name}.crt")
        return (self.path(f"{name}.crt"), self.path(f"{name}.key"))

    def expired_server(self):
        # `x509 -req -days` cannot date a certificate in the past; `openssl ca` takes both ends.
        self.new_key_and_request("expired", "127.0.0.1")
        open(self.path("index.txt"), "w").close()
        with open(self.path("serial"), "w") as f:
            f.write("1000\n")
        self.openssl("ca", "-config", "pki.cnf", "-batch", "-notext", "-cert", "ca.crt",
                     "-keyfile", "ca.key", "-in", "expired.csr", "-out", "expired.crt",
                     "-startdate", "20200101000000Z", "-enddate", "20200102000000Z",
                     "-extfile", "pki.cnf", "-extensions", "server_ip")
        return (self.path("expired.crt"), self.path("expired.key"))


class TlsResp(Resp):
    """Resp over TLS, verifying the server against the test CA and presenting the client
    certificate."""

    def __init__(self, port, pki):
        context = ssl.create_default_context(cafile=pki.ca)
        context.load_cert_chain(*pki.client)
        raw = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock = context.wrap_socket(raw, server_hostname="127.0.0.1")
        self.file = self.sock.makefile("rb")


class TlsRedis:
    """A throwaway redis-server that listens only for TLS, on a free loopback port."""

    def __init__(self, pki, cert=None, auth_clients="no"):
        cert, key = cert or pki.server
        self.pki = pki
        self.port = harness.free_port()
        self.dir = tempfile.TemporaryDirectory(prefix="sluice-redis-")
        self.proc = subprocess.Popen(
            ["redis-server", "--port", "0", "--tls-port", str(self.port), "--bind", "127.0.0.1",
             "--tls-cert-file", cert, "--tls-key-file", key, "--tls-ca-cert-file", pki.ca,
             "--tls-auth-clients", auth_clients, "--save", "", "--appendonly", "no",
             "--dir", self.dir.name],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise AssertionError("redis-server with TLS did not start")
                time.sleep(0.02)  # polling a starting child process

    def client(self):
        return TlsResp(self.port, self.pki)

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.dir.cleanup()


PLANS = """
plans:
  free:
    limits:
      - { name: daily, quota: 3, window: day, alert_at: [100] }
"""


def tls_yaml(port, policy="deny", scheme="rediss", **tls):
    fields = ", ".join(f'{k}: "{v}"' for k, v in tls.items())
    tls_line = f"    tls: {{ {fields} }}\n" if tls else ""
    return ("store:\n  type: redis\n  redis:\n"
            f'    url: "{scheme}://127.0.0.1:{port}/0"\n'
            "    timeout: 500ms\n" + tls_line +
            f"on_store_error: {policy}\n")


class TlsCase(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pki_dir = tempfile.TemporaryDirectory(prefix="sluice-pki-")
        cls.pki = Pki(cls.pki_dir.name)

    @classmethod
    def tearDownClass(cls):
        cls.pki_dir.cleanup()

    def setUp(self):
        # The plan's quota is daily (UTC): no test may straddle midnight.
        harness.clear_of_window_end(86400, 60)

    def redis(self, **kwargs):
        r = TlsRedis(self.pki, **kwargs)
        self.addCleanup(r.close)
        return r

    def service(self, store_yaml, body=PLANS):
        d = harness.tempdir()
        self.addCleanup(d.cleanup)
        svc = harness.Service(store_yaml + body, d.name)
        svc.__enter__()
        self.addCleanup(svc.__exit__)
        return svc

    def wait_decided_by_redis(self, svc, timeout=10):
        """Waits until a peek is answered from Redis, not degraded."""
        deadline = time.monotonic() + timeout
        while svc.check({"subject": "warm", "plan": "free", "cost": 0})[2]["degraded"]:
            self.assertLess(time.monotonic(), deadline, "sluice never reached redis over TLS")
            time.sleep(0.02)  # polling a connection being made

    def assert_refused(self, svc, reason, policy="deny"):
        """The connection fails with `reason` in the log, and decisions are degraded per
        `policy`, each answered within the store timeout (plus this client's overhead)."""
        line = json.loads(svc.server.wait_for_line(reason))
        self.assertEqual(line["msg"], "redis connection failed", line)
        for _ in range(3):
            start = time.monotonic()
            status, headers, body = svc.check({"subject": "alice", "plan": "free"})
            self.assertLess(time.monotonic() - start, 2.0)
            self.assertEqual((status, body["degraded"], body["allowed"]),
                             (200, True, policy == "allow"))
            self.assertEqual(headers["sluice-degraded"], "1")


class VerifiedTest(TlsCase):
    def test_decisions_alerts_and_the_registry_work_over_a_verified_connection(self):
        redis = self.redis()
        hooks = HttpReceiver()
        self.addCleanup(hooks.stop)
        alerts = ("alerts:\n  sinks:\n"
                  f'    - {{ type: webhook, url: "{hooks.url("/hook")}" }}\n'
                  "  retry: { max_attempts: 3, first_delay: 200ms, max_delay: 1s }\n")
        svc = self.service(tls_yaml(redis.port, ca_file=self.pki.ca), PLANS + alerts)
        self.wait_decided_by_redis(svc)

        answers = [svc.check({"subject": "alice", "plan": "free"})[2] for _ in range(4)]
        self.assertEqual([(a["allowed"], a["degraded"]) for a in answers],
                         [(True, False)] * 3 + [(False, False)])
        self.assertEqual([a["limits"][0]["used"] for a in answers], [1, 2, 3, 3])
        # The counter is in this Redis, read back over a TLS connection of the test's own.
        client = redis.client()
        self.addCleanup(client.close)
        keys = [k.decode() for k in client.call("KEYS", "sl:*")]
        counters = [k for k in keys if ":h:" in k and client.call("HEXISTS", k, "alice") == 1]
        self.assertEqual(len(counters), 1, keys)
        self.assertEqual(client.call("HGET", counters[0], "alice"), b"3")

        # The 100% alert went through the outbox (its own connection) to the webhook.
        (hook,) = hooks.wait_for("/hook", 1)
        event = event_of(hook)
        self.assertEqual((event["subject"], event["limit"], event["threshold"]),
                         ("alice", "daily", 100))

        # The registry (its own connection too): a subject and a key made through the admin API
        # are in Redis and the key is accepted.
        token = {"Authorization": f"Bearer {svc.admin_token}", "Content-Type": "application/json"}
        status, _, _ = svc.request("PUT", "/v1/subjects/bob", json.dumps({"plan": "free"}), token,
                                   admin=True)
        self.assertEqual(status, 201)
        status, _, raw = svc.request("POST", "/v1/subjects/bob/keys", "{}", token, admin=True)
        self.assertEqual(status, 201, raw)
        key = json.loads(raw)["key"]
        self.assertTrue(any("bob" in k.decode() for k in client.call("KEYS", "sl:*")))
        status, headers, _ = svc.request("GET", "/v1/authorize", headers={"X-API-Key": key})
        self.assertEqual((status, headers["sluice-subject"]), (200, "bob"))

    def test_server_name_override_verifies_a_dns_name_while_connecting_to_an_address(self):
        redis = self.redis(cert=self.pki.server_dns)
        svc = self.service(tls_yaml(redis.port, ca_file=self.pki.ca, server_name="redis.test"))
        self.wait_decided_by_redis(svc)
        self.assertFalse(svc.check({"subject": "alice", "plan": "free"})[2]["degraded"])

    def test_client_certificate_is_presented_when_the_server_requires_one(self):
        redis = self.redis(auth_clients="yes")
        cert, key = self.pki.client
        svc = self.service(tls_yaml(redis.port, ca_file=self.pki.ca, cert_file=cert,
                                    key_file=key))
        self.wait_decided_by_redis(svc)
        self.assertFalse(svc.check({"subject": "alice", "plan": "free"})[2]["degraded"])


class RefusedTest(TlsCase):
    def test_certificate_of_another_ca_is_refused(self):
        redis = self.redis()
        svc = self.service(tls_yaml(redis.port, ca_file=self.pki.wrong_ca))
        self.assert_refused(svc, "redis: TLS: certificate verify failed: ")
        # redis-server sends its CA along with its certificate (OpenSSL builds the chain from the
        # CA file it was given), so the chain ends in a root sluice does not trust; a server that
        # sends its certificate alone gets "unable to get local issuer certificate".
        line = json.loads(svc.server.wait_for_line("certificate verify failed"))
        self.assertIn(line["error"].split("certificate verify failed: ")[1],
                      ("self-signed certificate in certificate chain",
                       "unable to get local issuer certificate"))

    def test_expired_certificate_is_refused(self):
        redis = self.redis(cert=self.pki.expired)
        svc = self.service(tls_yaml(redis.port, policy="allow", ca_file=self.pki.ca))
        self.assert_refused(svc, "certificate verify failed: certificate has expired", "allow")

    def test_server_name_the_certificate_does_not_carry_is_refused(self):
        redis = self.redis()
        svc = self.service(tls_yaml(redis.port, ca_file=self.pki.ca, server_name="other.test"))
        self.assert_refused(svc, "certificate verify failed: hostname mismatch")

    def test_address_the_certificate_does_not_carry_is_refused(self):
        # The certificate names redis.test only; without server_name the URL's 127.0.0.1 must be
        # one of its IP addresses.
        redis = self.redis(cert=self.pki.server_dns)
        svc = self.service(tls_yaml(redis.port, ca_file=self.pki.ca))
        self.assert_refused(svc, "certificate verify failed: IP address mismatch")

    def test_missing_client_certificate_is_refused_when_the_server_requires_one(self):
        redis = self.redis(auth_clients="yes")
        svc = self.service(tls_yaml(redis.port, ca_file=self.pki.ca))
        self.assert_refused(svc, "redis connection failed")
        # TLS 1.3: the server refuses after the client's handshake is done, with an alert that
        # sluice reads, or a reset that arrives before it (then the log says what it may mean).
        for line in svc.server.lines:
            if "redis connection failed" in line:
                error = json.loads(line)["error"]
                self.assertTrue("alert certificate required" in error or
                                "does the server require a client certificate" in error, error)

    def test_plaintext_to_a_tls_port_fails_and_does_not_hang(self):
        redis = self.redis()
        svc = self.service(tls_yaml(redis.port, scheme="redis"))
        self.assert_refused(svc, "is it a TLS port")

    def test_tls_to_a_plaintext_port_fails(self):
        port = harness.free_port()
        d = tempfile.TemporaryDirectory(prefix="sluice-redis-")
        self.addCleanup(d.cleanup)
        proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                                 "--save", "", "--appendonly", "no", "--dir", d.name],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.addCleanup(lambda: (proc.kill(), proc.wait()))
        svc = self.service(tls_yaml(port, ca_file=self.pki.ca))
        self.assert_refused(svc, "redis: TLS handshake: ")
        line = json.loads(svc.server.wait_for_line("redis: TLS handshake: "))
        # Redis reads the ClientHello as the start of a command and waits for the rest.
        self.assertTrue(line["error"] == "redis: TLS handshake: no answer within 1000 ms (is it "
                        "a TLS port?)" or "wrong version number" in line["error"], line)


CLUSTER_PLANS = """
plans:
  free:
    limits:
      - { name: per_minute, quota: 60, window: 1m }
"""


class ClusterTest(TlsCase):
    """TLS to every node of a Redis Cluster that listens only for TLS (its bus and replication
    too) and requires client certificates: `cluster_nodes` with `tls`."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        from redis_cluster import RedisCluster
        try:
            cls.cluster = RedisCluster(pki=cls.pki).start()
        except BaseException:
            super().tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.cluster.close()
        super().tearDownClass()

    def setUp(self):
        harness.clear_of_window_end(60, 20)
        self.prefix = f"t{int(time.time() * 1000) % 10**9}"

    def cluster_service(self, **kwargs):
        store = self.cluster.yaml(timeout="500ms", policy="deny", **kwargs).replace(
            "timeout:", f"key_prefix: {self.prefix}, timeout:")
        return self.service(store, CLUSTER_PLANS)

    def warm(self, svc):
        """Until many peeks in a row, on subjects spread over the masters (and the service's
        threads, each with its own links), are answered from the cluster, not degraded."""
        deadline = time.monotonic() + 15
        streak, i = 0, 0
        while streak < 16:
            body = svc.check({"subject": f"warm{i}", "plan": "free", "cost": 0})[2]
            streak, i = (0 if body["degraded"] else streak + 1), i + 1
            self.assertLess(time.monotonic(), deadline, "sluice never reached the TLS cluster")

    def test_decisions_are_exact_and_reach_every_master_over_tls(self):
        svc = self.cluster_service()
        self.warm(svc)
        results = [svc.check({"subject": "hot", "plan": "free"})[2] for _ in range(70)]
        self.assertEqual([r for r in results if r["degraded"]], [])
        self.assertEqual(sum(1 for r in results if r["allowed"]), 60)
        for i in range(60):
            body = svc.check({"subject": f"spread-{i}", "plan": "free"})[2]
            self.assertEqual((body["allowed"], body["degraded"]), (True, False), i)
        # Read back over the test's own TLS connections: every master holds counters, each of
        # its slot, and "hot" stopped at the quota.
        counters = self.cluster.counters(self.prefix)
        self.assertEqual(len(counters), 3)
        for port, fields in counters.items():
            self.assertGreater(len(fields), 0, f"no counter on master {port}")
        self.assertEqual(sorted(s for f in counters.values() for _, s in f),
                         sorted(["hot"] + [f"spread-{i}" for i in range(60)]))
        (hot,) = [(port, key) for port, f in counters.items() for key, s in f if s == "hot"]
        self.assertEqual(self.cluster.owner_of(hot[1]), hot[0])
        self.assertEqual(self.cluster.call(hot[0], "HGET", hot[1], "hot"), b"60")

    def test_nodes_of_another_ca_are_refused_and_decisions_degraded(self):
        svc = self.cluster_service(ca_file=self.pki.wrong_ca)
        line = json.loads(svc.server.wait_for_line("redis connection failed"))
        self.assertIn("certificate verify failed", line["error"])
        for _ in range(3):
            status, headers, body = svc.check({"subject": "alice", "plan": "free"})
            self.assertEqual((status, body["degraded"], body["allowed"]), (200, True, False))
            self.assertEqual(headers["sluice-degraded"], "1")
        self.assertEqual(self.cluster.counters(self.prefix), {p: [] for p in
                                                              self.cluster.masters()})


class ConfigurationTest(TlsCase):
    """What check-config and a start refuse (exit 78), naming the field."""

    def check_config(self, store_yaml):
        d = harness.tempdir()
        self.addCleanup(d.cleanup)
        path = harness.write_config(d.name, store_yaml + PLANS)
        return path, harness.run("check-config", "-c", path)

    def test_valid_tls_configuration_passes(self):
        cert, key = self.pki.client
        _, result = self.check_config(tls_yaml(6379, ca_file=self.pki.ca, cert_file=cert,
                                               key_file=key))
        self.assertEqual(result.returncode, 0, result.stderr)

    def test_missing_ca_file_is_named(self):
        missing = os.path.join(self.pki.dir, "missing.pem")
        path, result = self.check_config(tls_yaml(6379, ca_file=missing))
        self.assertEqual(result.returncode, 78)
        self.assertEqual(result.stderr.strip(),
                         f"{path}: store.redis.tls.ca_file: {missing}: No such file or directory")

    def test_key_of_another_certificate_is_named(self):
        cert, _ = self.pki.client
        _, other_key = self.pki.server
        _, result = self.check_config(tls_yaml(6379, ca_file=self.pki.ca, cert_file=cert,
                                               key_file=other_key))
        self.assertEqual(result.returncode, 78)
        self.assertIn(f"store.redis.tls.key_file: {other_key}: does not match the certificate",
                      result.stderr)
        with open(other_key) as f:
            key_text = f.read()
        body = key_text.split("-----")[2].strip().splitlines()[0]
        self.assertNotIn(body, result.stderr)

    def test_tls_settings_with_a_plaintext_url_are_refused(self):
        _, result = self.check_config(tls_yaml(6379, scheme="redis", ca_file=self.pki.ca))
        self.assertEqual(result.returncode, 78)
        self.assertIn("store.redis.tls: set, but store.redis.url is not a rediss:// URL",
                      result.stderr)

    def test_serve_refuses_an_unreadable_file_with_exit_78(self):
        missing = os.path.join(self.pki.dir, "missing.pem")
        d = harness.tempdir()
        self.addCleanup(d.cleanup)
        svc = harness.Service(tls_yaml(6379, ca_file=missing) + PLANS, d.name)
        server = harness.Server(svc.config_path)
        self.addCleanup(server.kill)
        self.assertEqual(server.proc.wait(timeout=30), 78)
        server.wait_for_line(f"store.redis.tls.ca_file: {missing}: No such file or directory")


if __name__ == "__main__":
    unittest.main()
