"""End-to-end tests of the etcd rendezvous backend: real ctrun agents on distinct loopback addresses, real workers
(torch 1.13 gloo where noted), and a real etcd cluster of 1 or 3 members that each test starts on 127.0.0.1 with
free ports and a temporary data dir, and stops by PID. Every wait is bounded; everything started is killed.

Run one case: etcd_test.py CASE (ctest runs each as integration.etcd.CASE). Exit 77 = skipped.
"""
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from multinode_test import (SKIP, TORCH_PYTHON, Cluster, assert_no_orphans, have_torch,  # noqa: E402
                            reserve_port)

ETCD = shutil.which("etcd") or "/usr/bin/etcd"
OPENSSL = shutil.which("openssl")


class Etcd:
    """An etcd cluster of n members on 127.0.0.1 (client and peer ports reserved for the test, see
    tests/common/ports.py), data in a temp dir."""

    def __init__(self, n, tls=None):
        self.dir = tempfile.mkdtemp(prefix="ctrun-etcd-")
        self.tls = tls  # (cert, key) for the client URLs
        self.scheme = "https" if tls else "http"
        self.clients = [reserve_port() for _ in range(n)]
        self.peers = [reserve_port() for _ in range(n)]
        self.initial = ",".join(f"m{i}=http://127.0.0.1:{p}" for i, p in enumerate(self.peers))
        self.procs = [None] * n
        for i in range(n):
            self.start(i)
        self.wait_ready()

    def endpoint(self, i):
        return f"127.0.0.1:{self.clients[i]}"

    def endpoints(self):
        return ",".join(self.endpoint(i) for i in range(len(self.clients)))

    def start(self, i):
        client = f"{self.scheme}://127.0.0.1:{self.clients[i]}"
        peer = f"http://127.0.0.1:{self.peers[i]}"
        cmd = [ETCD, "--name", f"m{i}", "--data-dir", os.path.join(self.dir, f"m{i}"), "--listen-client-urls", client,
               "--advertise-client-urls", client, "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
               "--initial-cluster", self.initial, "--initial-cluster-state", "new", "--heartbeat-interval", "100",
               "--election-timeout", "1000", "--log-level", "error"]
        if self.tls:
            cmd += ["--cert-file", self.tls[0], "--key-file", self.tls[1]]
        log = open(os.path.join(self.dir, f"m{i}.log"), "w")
        self.procs[i] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self, timeout=30, members=None):
        ctx = ssl._create_unverified_context() if self.tls else None
        deadline = time.monotonic() + timeout
        for i in members if members is not None else range(len(self.clients)):
            while True:
                try:  # a linearizable read answers once the cluster has a leader
                    req = urllib.request.Request(f"{self.scheme}://{self.endpoint(i)}/v3/kv/range", data=b'{"key":"eA=="}')
                    with urllib.request.urlopen(req, timeout=2, context=ctx) as r:
                        if r.status == 200:
                            break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise AssertionError(f"etcd member {i} did not become ready")
                time.sleep(0.1)

    def kill(self, i):
        p = self.procs[i]
        if p and p.poll() is None:
            p.send_signal(signal.SIGKILL)
            p.wait(timeout=10)

    def close(self):
        for i in range(len(self.procs)):
            self.kill(i)
        if not os.environ.get("KEEP_DIR"):
            shutil.rmtree(self.dir, ignore_errors=True)


def etcd_flags(endpoints, run_id, nnodes, conf=""):
    conf = "lease_ttl=20,read_timeout=8" + ("," + conf if conf else "")
    return ["--rdzv-backend", "etcd", "--rdzv-endpoint", endpoints, "--rdzv-id", run_id, "--nnodes", nnodes,
            "--rdzv-conf", conf]


class EtcdBackend(unittest.TestCase):
    needs_torch = {"test_three_nodes_torch_member_killed", "test_tls"}

    def setUp(self):
        self.c = Cluster()
        self.etcd = None

    def tearDown(self):
        self.c.close()
        if self.etcd:
            self.etcd.close()

    def assert_no_orphans(self, within=3.0):
        assert_no_orphans(self, self.c, within)

    def check_torch(self, world, tags_nproc):
        res = self.c.results()
        self.assertEqual(len(res), world, self.c.logs())
        self.assertEqual(sorted(int(r["RANK"]) for r in res.values()), list(range(world)))
        for name, r in res.items():
            self.assertEqual(int(r["WORLD_SIZE"]), world, name)
            self.assertEqual(r["sum"], world * (world + 1) / 2, name)
            self.assertEqual(r["torch_rank"], int(r["RANK"]), name)
            self.assertEqual(int(r["LOCAL_WORLD_SIZE"]), tags_nproc[r["NODE_TAG"]], name)
            self.assertEqual(int(r["GROUP_WORLD_SIZE"]), len(tags_nproc), name)
        masters = {(r["MASTER_ADDR"], r["MASTER_PORT"]) for r in res.values()}
        self.assertEqual(len(masters), 1)
        self.assertEqual(masters.pop()[0], "127.0.0.2")  # group rank 0's agent hosts the workers' store
        return res

    def test_three_nodes_torch_member_killed(self):
        """3 agents x 2 torch gloo workers through a 3-member cluster. The workers of group rank 1 fail on the
        first attempt; as soon as that attempt's workers exist, etcd member 0 is SIGKILLed, so the restart round
        runs on the 2 survivors. Once the second attempt's workers exist, member 0 is restarted (it rejoins from its
        data dir) and member 1 is SIGKILLed: the job finishes (exit barrier, close) on members 0 and 2."""
        self.etcd = Etcd(3)
        nproc = {"n2": 2, "n3": 2, "n4": 2}
        for tag in nproc:
            self.c.start(tag, "127.0.0." + tag[1:], etcd_flags(self.etcd.endpoints(), "e3", "3", "join_timeout=60") +
                         ["--max-restarts", "1"], job_args=["--fail-group-rank", "1"], nproc=2)
        self.c.wait_for("the first attempt", lambda: len(self.c.rounds("*.rc0")) >= 1, 90)
        self.etcd.kill(0)
        self.c.wait_for("the restart round", lambda: len(self.c.rounds("*.rc1")) >= 1, 90)
        self.etcd.start(0)
        self.etcd.wait_ready(members=[0])
        self.etcd.kill(1)
        deadline = time.monotonic() + 150
        for tag in nproc:
            self.assertEqual(self.c.wait(tag, max(1, deadline - time.monotonic())), 0, self.c.logs())
        res = self.check_torch(6, nproc)
        self.assertEqual({r["TORCHELASTIC_RESTART_COUNT"] for r in res.values()}, {"1"})
        self.assertEqual([res[k]["GROUP_RANK"] for k in ("n2.0", "n3.0", "n4.0")], ["0", "1", "2"])
        self.assertEqual(self.etcd.procs[1].poll(), -signal.SIGKILL)

    def test_kill_agent_survivors_reform(self):
        self.etcd = Etcd(3)
        flags = etcd_flags(self.etcd.endpoints(), "ek", "2:3", "join_timeout=60,last_call_timeout=0.5,"
                                                              "keep_alive_interval=0.5,keep_alive_max_attempt=3")
        for tag in ("n2", "n3", "n4"):
            self.c.start(tag, "127.0.0." + tag[1:], flags, job_args=["--target-world", "2", "--grandchild",
                                                                      "--no-torch"])
        self.c.wait_for("a 3-node round", lambda: len(self.c.rounds("*.ws3.*")) == 3, 60)
        start = time.monotonic()
        self.c.agents["n4"].send_signal(signal.SIGKILL)
        for tag in ("n2", "n3"):
            self.assertEqual(self.c.wait(tag, 60), 0, self.c.logs())
        # Detection within keep_alive_interval x max_attempt (1.5 s), plus a round and process start-up.
        self.assertLess(time.monotonic() - start, 30)
        res = self.c.results()
        self.assertEqual(sorted(res), ["n2.0", "n3.0"], self.c.logs())
        self.assertEqual({r["WORLD_SIZE"] for r in res.values()}, {"2"})
        # The heartbeat (1.25 s here) or the killed agent's member lease (2 s), whichever came first.
        logs = self.c.log("n2") + self.c.log("n3")
        self.assertTrue("heartbeat" in logs or "its etcd lease expired" in logs, logs)
        self.assert_no_orphans()

    def test_kill9_active_agent_spare_takes_over(self):
        """Two active agents and a spare; heartbeats slow (15 s to notice). kill -9 of an active agent's process
        group: its member lease (member_ttl=2) expires, its watcher declares it dead, and the survivor and the spare
        run the next round."""
        self.etcd = Etcd(1)
        flags = etcd_flags(self.etcd.endpoints(), "es", "2", "join_timeout=30,last_call_timeout=0.5,member_ttl=2,"
                                                             "keep_alive_interval=5,keep_alive_max_attempt=3")
        took = self.c.kill9_member_spare_takes_over(flags, settle_s=0.5)  # the members' keys written and seen
        # member_ttl (2 s) + etcd's expiry check (0.5 s) + a poll, well before the heartbeat's 15 s; generous for a
        # loaded machine.
        self.assertLess(took, 9.0, self.c.logs())
        self.assertIn("its etcd lease expired", self.c.log("n2"))
        self.assertIn("127.0.0.3", self.c.log("n2"))
        self.assertEqual(sorted(self.c.results()), ["n2.0", "n4.0"])
        self.assert_no_orphans()

    def test_late_joiner_scales_up(self):
        self.etcd = Etcd(1)
        flags = etcd_flags(self.etcd.endpoints(), "ej", "2:3", "join_timeout=60,last_call_timeout=0.5")
        for tag in ("n2", "n3"):
            self.c.start(tag, "127.0.0." + tag[1:], flags, job_args=["--target-world", "3", "--no-torch"])
        self.c.wait_for("a 2-node round", lambda: len(self.c.rounds("*.ws2.*")) == 2, 60)
        self.c.start("n4", "127.0.0.4", flags, job_args=["--target-world", "3", "--no-torch"])
        for tag in ("n2", "n3", "n4"):
            self.assertEqual(self.c.wait(tag, 60), 0, self.c.logs())
        res = self.c.results()
        self.assertEqual(sorted(res), ["n2.0", "n3.0", "n4.0"], self.c.logs())
        self.assertEqual({r["WORLD_SIZE"] for r in res.values()}, {"3"})
        self.assertEqual({r["TORCHELASTIC_RESTART_COUNT"] for r in res.values()}, {"0"})  # not a failure
        # The run id is closed now: reusing it is a clear error.
        p = self.c.start("again", "127.0.0.2", etcd_flags(self.etcd.endpoints(), "ej", "1", "join_timeout=10"),
                         job_args=["--no-torch"])
        self.assertEqual(p.wait(timeout=30), 1)
        self.assertIn("is closed", self.c.log("again"))

    def test_all_members_stopped(self):
        self.etcd = Etcd(3)
        flags = etcd_flags(self.etcd.endpoints(), "ed", "2", "join_timeout=60,keep_alive_interval=0.5,read_timeout=4")
        for tag in ("n2", "n3"):
            self.c.start(tag, "127.0.0." + tag[1:], flags, job_args=["--target-world", "99", "--grandchild",
                                                                      "--no-torch"])
        self.c.wait_for("a 2-node round", lambda: len(self.c.rounds("*.ws2.*")) == 2, 60)
        start = time.monotonic()
        for i in range(3):
            self.etcd.kill(i)
        for tag in ("n2", "n3"):  # read_timeout=4: the poll fails, then the next round's join
            self.assertEqual(self.c.wait(tag, 60), 1, self.c.logs())
        took = time.monotonic() - start
        print(f"agents exited {took:.1f} s after the last etcd member was killed", flush=True)
        # The first request to find the cluster gone gives up after read_timeout (4 s) of refused connections; every
        # later one (the next round's join, the close on the way out, the run lease's keep-alive) inherits that
        # outage and gives up after one try of each member (endpoint_failover.hpp). It took 4.1 s here, 29-53 s when
        # each request waited read_timeout in turn; a hang would wait join_timeout (60 s).
        self.assertLess(took, 20)
        for tag in ("n2", "n3"):
            log = self.c.log(tag)
            self.assertIn("no member of the etcd cluster", log)
            self.assertIn(self.etcd.endpoint(0), log)
        self.assert_no_orphans()

    def test_tls(self):
        """etcd serving https with a certificate made here (openssl); agents verify it with cacert=."""
        if not OPENSSL:
            self.skipTest("openssl not installed")
        d = tempfile.mkdtemp(prefix="ctrun-tls-", dir=self.c.dir)
        ca_key, ca, key, csr, cert = (os.path.join(d, n) for n in ("ca.key", "ca.pem", "srv.key", "srv.csr", "srv.pem"))
        run = lambda *a: subprocess.run([OPENSSL, *a], check=True, capture_output=True, timeout=60)  # noqa: E731
        run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca_key, "-out", ca, "-days", "1", "-subj",
            "/CN=ctrun test CA")
        run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr, "-subj", "/CN=127.0.0.1")
        ext = os.path.join(d, "ext.cnf")
        with open(ext, "w") as f:
            f.write("subjectAltName=IP:127.0.0.1\n")
        run("x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-out", cert, "-days", "1",
            "-extfile", ext)
        self.etcd = Etcd(1, tls=(cert, key))
        nproc = {"n2": 1, "n3": 1}
        for tag in nproc:
            self.c.start(tag, "127.0.0." + tag[1:],
                         etcd_flags(self.etcd.endpoints(), "et", "2", f"protocol=https,cacert={ca},join_timeout=60"))
        for tag in nproc:
            self.assertEqual(self.c.wait(tag, 90), 0, self.c.logs())
        self.check_torch(2, nproc)
        # Without the CA the server's certificate is refused: a clear error, not a hang.
        p = self.c.start("noca", "127.0.0.5", etcd_flags(self.etcd.endpoints(), "et2", "1", "protocol=https"),
                         job_args=["--no-torch"])
        self.assertEqual(p.wait(timeout=60), 1, self.c.log("noca"))
        self.assertIn("certificate verify failed", self.c.log("noca"))


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    case = sys.argv[1]
    if not os.access(ETCD, os.X_OK):
        print(f"SKIP {case}: etcd is not installed (Debian package etcd-server)")
        return SKIP
    if case in EtcdBackend.needs_torch and not have_torch(TORCH_PYTHON):
        print(f"SKIP {case}: PyTorch with torch.distributed is not installed")
        return SKIP
    result = unittest.TextTestRunner(verbosity=2).run(unittest.defaultTestLoader.loadTestsFromName(
        f"EtcdBackend.{case}", sys.modules[__name__]))
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
