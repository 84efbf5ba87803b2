"""End-to-end multi-node tests: several real ctrun agents on one machine, each on its own loopback address
(127.0.0.2, 127.0.0.3, ...) as --local-addr, running real worker processes (torch 1.13 gloo where PyTorch is
installed). Every wait is bounded; every process started here is killed at the end.

Run one case: multinode_test.py CASE (ctest runs each as integration.CASE). Exit 77 = skipped.
"""
import glob
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

CTRUN = os.environ.get("CTRUN_BIN", "ctrun")
CTSTORE = os.environ.get("CTSTORE_BIN", "ctstore")
TORCH_PYTHON = os.environ.get("CTRUN_TORCH_PYTHON", "/usr/bin/python3")
JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workers", "job.py")
# Debian's torch 1.13 torchrun, patched only to run on Python 3.11 (shared/interop/torchrun_py311.py).
TORCHRUN_PY = os.environ.get("TORCHRUN_PY", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                                         "..", "shared", "interop", "torchrun_py311.py"))
SKIP = 77


# tests/common/ports.py: ports reserved, never picked and released (found from here wherever this file lives).
_up = os.path.dirname(os.path.abspath(__file__))
while not os.path.isfile(os.path.join(_up, "tests", "common", "ports.py")) and _up != os.path.dirname(_up):
    _up = os.path.dirname(_up)
sys.path.insert(0, os.path.join(_up, "tests", "common"))
from ports import reserve_port  # noqa: E402
from processes import alive, have_torch  # noqa: E402


class Cluster:
    """The agents of one test and the files their workers write."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="ctrun-mn-")
        self.agents = {}  # tag -> Popen
        self.others = []
        self.groups = []  # process groups to SIGKILL at the end (agents without our guardian: real torchrun)

    def start(self, tag, addr, flags, job_args=(), nproc=1, env=None, wrap=()):
        """An agent on `addr`; `wrap`: what runs it (["ip", "netns", "exec", NS], which execs it: the pid is its)."""
        e = dict(os.environ, OUT_DIR=self.dir, NODE_TAG=tag, PYTHON_EXEC=TORCH_PYTHON, GLOO_SOCKET_IFNAME="lo",
                 LOGLEVEL="INFO")
        e.update(env or {})
        log = open(os.path.join(self.dir, f"agent.{tag}.log"), "w")
        cmd = [*wrap, CTRUN, "--local-addr", addr, "--nproc-per-node", str(nproc), "--monitor-interval", "0.2",
               "--shutdown-timeout", "5", *flags, JOB, *job_args]
        self.agents[tag] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=e, start_new_session=True)
        return self.agents[tag]

    def start_torchrun(self, tag, flags, job_args=()):
        """A real torch 1.13 torchrun agent (its own process group, which holds its workers) running job.py."""
        e = dict(os.environ, OUT_DIR=self.dir, NODE_TAG=tag, GLOO_SOCKET_IFNAME="lo", LOGLEVEL="INFO")
        log = open(os.path.join(self.dir, f"agent.{tag}.log"), "w")
        cmd = [TORCH_PYTHON, TORCHRUN_PY, "--monitor_interval", "0.1", *flags, JOB, *job_args]
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=e, start_new_session=True)
        self.agents[tag] = p
        self.groups.append(p.pid)
        return p

    def wait(self, tag, timeout):
        return self.agents[tag].wait(timeout=timeout)

    def log(self, tag):
        with open(os.path.join(self.dir, f"agent.{tag}.log")) as f:
            return f.read()

    def logs(self):
        return "\n".join(f"--- {t}\n{self.log(t)[-4000:]}" for t in self.agents)

    def results(self):
        out = {}
        for path in glob.glob(os.path.join(self.dir, "result.*.json")):
            with open(path) as f:
                out[os.path.basename(path)[len("result."):-len(".json")]] = json.load(f)
        return out

    def rounds(self, pattern="*"):
        return glob.glob(os.path.join(self.dir, f"round.{pattern}"))

    def worker_pids(self, tag="*"):
        return [int(p.rsplit(".", 1)[1]) for p in glob.glob(os.path.join(self.dir, f"pid.{tag}.*"))]

    def wait_for(self, what, predicate, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what}\n{self.logs()}")

    def ctstore(self):
        """A ctstore on 127.0.0.1, a free port (read back), stopped with the cluster: returns its port."""
        store = subprocess.Popen([CTSTORE, "--host", "127.0.0.1", "--port", "0"], stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, text=True)
        self.others.append(store)
        return int(store.stdout.readline().rsplit(":", 1)[-1])

    def kill9_member_spare_takes_over(self, flags, settle_s=0.0):
        """Two active agents (n2, n3) and a spare (n4) of a job held until released; kill -9 of n3's process group
        (the agent and its workers). Returns the seconds from the kill to the next round's workers on the survivor
        and the spare; the job is then released and must end with exit 0 on both."""
        job = ["--no-torch", "--hold-until", "release"]
        for tag in ("n2", "n3"):
            self.start(tag, "127.0.0." + tag[1:], flags, job_args=job)
        self.wait_for("a 2-node round", lambda: len(self.rounds("*.ws2.*")) == 2, 60)
        self.start("n4", "127.0.0.4", flags, job_args=job)  # a spare: the round is full
        self.wait_for("the spare waiting", lambda: "spare" in self.log("n4") or "waiting" in self.log("n4"), 30)
        time.sleep(settle_s)
        killed = time.monotonic()
        os.killpg(self.agents["n3"].pid, signal.SIGKILL)
        self.wait_for("the next round on the survivor and the spare",
                      lambda: self.worker_pids("n4") and len(self.worker_pids("n2")) == 2, 30)
        took = time.monotonic() - killed
        print(f"kill -9 to the next round's workers on the survivor and the spare: {took:.2f} s", flush=True)
        open(os.path.join(self.dir, "release"), "w").close()
        for tag in ("n2", "n4"):
            code = self.wait(tag, 60)
            if code != 0:
                raise AssertionError(f"{tag} exited {code}\n{self.logs()}")
        return took

    def close(self):
        for pgid in self.groups:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except OSError:
                pass
        for p in self.agents.values():  # SIGKILL the agent only: its guardian then kills its workers' groups
            if p.poll() is None:
                p.kill()
        for p in list(self.agents.values()) + self.others:
            try:
                p.kill()
                p.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass
        time.sleep(0.3)
        for pid in self.worker_pids():  # never leave anything behind, even when a test failed
            if alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        if not os.environ.get("KEEP_DIR"):
            shutil.rmtree(self.dir, ignore_errors=True)


def c10d(endpoint, run_id, nnodes, conf=""):
    flags = ["--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", run_id, "--nnodes", nnodes]
    return flags + (["--rdzv-conf", conf] if conf else [])


def assert_no_orphans(test, cluster, within):
    """Fails `test` unless every worker of `cluster` is gone `within` seconds from now (none outlives its agent)."""
    pids = cluster.worker_pids()
    test.assertTrue(pids, "the workers recorded no pids")
    deadline = time.monotonic() + within
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.05)
    test.assertEqual([p for p in pids if alive(p)], [], "processes outlived their agent\n" + cluster.logs())


class MultiNode(unittest.TestCase):
    needs_torch = {"test_static_two_nodes_torch", "test_c10d_three_nodes_torch", "test_worker_failure_restarts_all",
                   "test_join_mid_run", "test_kill_agent_survivors_finish", "test_torchrun_agents_on_ctstore"}

    def setUp(self):
        self.c = Cluster()

    def tearDown(self):
        self.c.close()

    def assert_no_orphans(self, within=2.0):
        assert_no_orphans(self, self.c, within)

    def check_torch_results(self, expected_world, tags_nproc):
        res = self.c.results()
        self.assertEqual(len(res), expected_world, self.c.logs())
        ranks = sorted(int(r["RANK"]) for r in res.values())
        self.assertEqual(ranks, list(range(expected_world)))
        for name, r in res.items():
            self.assertEqual(int(r["WORLD_SIZE"]), expected_world, name)
            self.assertEqual(r["sum"], expected_world * (expected_world + 1) / 2, name)
            self.assertEqual(r["torch_rank"], int(r["RANK"]), name)
            self.assertEqual(int(r["LOCAL_WORLD_SIZE"]), tags_nproc[r["NODE_TAG"]], name)
            self.assertEqual(int(r["GROUP_WORLD_SIZE"]), len(tags_nproc), name)
            self.assertEqual(r["ROLE_RANK"], r["RANK"], name)
            self.assertEqual(r["TORCHELASTIC_USE_AGENT_STORE"], "True")
        return res

    # --- static backend -------------------------------------------------------------------------------------
    def test_static_two_nodes_torch(self):
        port = reserve_port()
        flags = ["--nnodes", "2", "--master-addr", "127.0.0.2", "--master-port", str(port)]
        self.c.start("b", "127.0.0.3", flags + ["--node-rank", "1"], nproc=1)  # before the master: it waits
        self.c.start("a", "127.0.0.2", flags + ["--node-rank", "0"], nproc=2)
        self.assertEqual(self.c.wait("a", 90), 0, self.c.logs())
        self.assertEqual(self.c.wait("b", 30), 0, self.c.logs())
        res = self.check_torch_results(3, {"a": 2, "b": 1})
        for r in res.values():
            self.assertEqual((r["MASTER_ADDR"], int(r["MASTER_PORT"])), ("127.0.0.2", port))
        self.assertEqual(res["b.0"]["RANK"], "2")
        self.assertEqual(res["b.0"]["GROUP_RANK"], "1")
        self.assertEqual(res["a.1"]["GROUP_RANK"], "0")

    # --- c10d backend ---------------------------------------------------------------------------------------
    def test_c10d_three_nodes_torch(self):
        ep = f"127.0.0.2:{reserve_port()}"
        nproc = {"n2": 1, "n3": 2, "n4": 1}
        for tag in ("n2", "n3", "n4"):
            self.c.start(tag, "127.0.0." + tag[1:], c10d(ep, "c3", "3", "join_timeout=60"), nproc=nproc[tag])
        for tag in nproc:
            self.assertEqual(self.c.wait(tag, 90), 0, self.c.logs())
        res = self.check_torch_results(4, nproc)
        # Group ranks in address order, RANK = sum of the lower nodes' nproc + LOCAL_RANK.
        self.assertEqual([res[k]["RANK"] for k in ("n2.0", "n3.0", "n3.1", "n4.0")], ["0", "1", "2", "3"])
        self.assertEqual([res[k]["GROUP_RANK"] for k in ("n2.0", "n3.1", "n4.0")], ["0", "1", "2"])
        masters = {(r["MASTER_ADDR"], r["MASTER_PORT"]) for r in res.values()}
        self.assertEqual(len(masters), 1)
        self.assertEqual(masters.pop()[0], "127.0.0.2")  # group rank 0's agent hosts the workers' store

    def test_natural_order_and_closed_run_id(self):
        port = self.c.ctstore()
        ep = f"127.0.0.1:{port}"
        addrs = {"n10": "127.0.0.10", "n9": "127.0.0.9", "n2": "127.0.0.2"}
        for tag, addr in addrs.items():  # 10 starts first: arrival order must not matter
            self.c.start(tag, addr, c10d(ep, "nat", "3", "join_timeout=30"), job_args=["--no-torch"])
        for tag in addrs:
            self.assertEqual(self.c.wait(tag, 60), 0, self.c.logs())
        res = self.c.results()
        self.assertEqual({t: res[t + ".0"]["GROUP_RANK"] for t in addrs}, {"n2": "0", "n9": "1", "n10": "2"})
        # The run id is closed now: reusing it is a clear error, not a hang.
        p = self.c.start("again", "127.0.0.2", c10d(ep, "nat", "1", "join_timeout=10"), job_args=["--no-torch"])
        self.assertEqual(p.wait(timeout=30), 1)
        self.assertIn("is closed", self.c.log("again"))
        self.assertIn("new --rdzv-id", self.c.log("again"))

    def test_worker_failure_restarts_all(self):
        ep = f"127.0.0.2:{reserve_port()}"
        for tag in ("n2", "n3"):
            self.c.start(tag, "127.0.0." + tag[1:], c10d(ep, "fail", "2", "join_timeout=60") + ["--max-restarts", "1"],
                         job_args=["--fail-group-rank", "1"])
        for tag in ("n2", "n3"):
            self.assertEqual(self.c.wait(tag, 120), 0, self.c.logs())
        res = self.check_torch_results(2, {"n2": 1, "n3": 1})
        # Both nodes' workers ran the second attempt with one restart count (torch 1.13 scopes its keys by it).
        self.assertEqual({r["TORCHELASTIC_RESTART_COUNT"] for r in res.values()}, {"1"})
        self.assertTrue(self.c.rounds("n2.0.ws2.rc0"), "node 2's first attempt never started")

    def test_torchrun_agents_on_ctstore(self):
        """Two real torch 1.13 torchrun agents (c10d backend: compare_set, get, set, wait) rendezvous on our
        ctstore (legacy dialect) and run a gloo all_reduce over 2 x 2 workers."""
        store = subprocess.Popen([CTSTORE, "--host", "127.0.0.1", "--port", "0"], stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, text=True)
        self.c.others.append(store)
        port = int(store.stdout.readline().rsplit(":", 1)[-1])
        # No is_host in --rdzv_conf: as users run it, each agent first tries to host the store on the endpoint
        # (127.0.0.1 is this machine), finds the port taken by ctstore and becomes its client.
        flags = ["--nnodes", "2", "--nproc_per_node", "2", "--rdzv_backend", "c10d", "--rdzv_endpoint",
                 f"127.0.0.1:{port}", "--rdzv_id", "trun", "--max_restarts", "0"]
        for tag in ("t1", "t2"):
            self.c.start_torchrun(tag, flags)
        deadline = time.monotonic() + 120  # both agents within one bound, well inside ctest's TIMEOUT
        for tag in ("t1", "t2"):
            self.assertEqual(self.c.wait(tag, max(1.0, deadline - time.monotonic())), 0, self.c.logs())
        res = self.c.results()
        self.assertEqual(sorted(res), ["t1.0", "t1.1", "t2.0", "t2.1"], self.c.logs())
        self.assertEqual(sorted(int(r["RANK"]) for r in res.values()), [0, 1, 2, 3])
        for name, r in res.items():
            self.assertEqual((r["WORLD_SIZE"], r["LOCAL_WORLD_SIZE"], r["GROUP_WORLD_SIZE"]), ("4", "2", "2"), name)
            self.assertEqual(r["sum"], 10.0, name)  # 1 + 2 + 3 + 4
            self.assertEqual(r["torch_rank"], int(r["RANK"]), name)
            self.assertEqual(int(r["RANK"]), 2 * int(r["GROUP_RANK"]) + int(r["LOCAL_RANK"]), name)
            self.assertEqual(r["TORCHELASTIC_RUN_ID"], "trun", name)
        # The rendezvous really went through ctstore: its counters show the c10d backend's compare_set traffic.
        store.send_signal(signal.SIGUSR1)
        self.assertTrue(select.select([store.stdout], [], [], 10)[0], "ctstore printed no stats on SIGUSR1")
        stats = json.loads(store.stdout.readline())
        self.assertGreater(stats["ops"].get("COMPARE_SET", 0), 0, stats)
        self.assertGreaterEqual(stats["connections_accepted"], 2, stats)
        self.assertEqual(store.poll(), None, "ctstore died")

    # --- elasticity -----------------------------------------------------------------------------------------
    def test_join_mid_run(self):
        ep = f"127.0.0.2:{reserve_port()}"
        flags = c10d(ep, "join", "2:3", "join_timeout=60,last_call_timeout=0.5")
        for tag in ("n2", "n3"):
            self.c.start(tag, "127.0.0." + tag[1:], flags, job_args=["--target-world", "3"])
        self.c.wait_for("a 2-node round", lambda: len(self.c.rounds("*.ws2.*")) == 2, 60)
        self.c.start("n4", "127.0.0.4", flags, job_args=["--target-world", "3"])
        for tag in ("n2", "n3", "n4"):
            self.assertEqual(self.c.wait(tag, 90), 0, self.c.logs())
        res = self.check_torch_results(3, {"n2": 1, "n3": 1, "n4": 1})
        # A membership change is not a failure: no restart was consumed.
        self.assertEqual({r["TORCHELASTIC_RESTART_COUNT"] for r in res.values()}, {"0"})

    def test_kill_agent_survivors_finish(self):
        ep = f"127.0.0.2:{reserve_port()}"
        flags = c10d(ep, "kill", "2:3", "join_timeout=60,last_call_timeout=0.5,keep_alive_interval=0.3,"
                                       "keep_alive_max_attempt=2")
        for tag in ("n2", "n3", "n4"):
            self.c.start(tag, "127.0.0." + tag[1:], flags, job_args=["--target-world", "2", "--grandchild"])
        self.c.wait_for("a 3-node round", lambda: len(self.c.rounds("*.ws3.*")) == 3, 60)
        self.c.agents["n4"].send_signal(signal.SIGKILL)
        for tag in ("n2", "n3"):
            self.assertEqual(self.c.wait(tag, 90), 0, self.c.logs())
        self.check_torch_results(2, {"n2": 1, "n3": 1})
        # The store is ctrun's: the killed agent's closed connection, or its heartbeats, whichever came first.
        logs = self.c.log("n2") + self.c.log("n3")
        self.assertTrue("heartbeat" in logs or "closed its connection" in logs, logs)
        self.assert_no_orphans()

    def test_kill9_active_agent_spare_takes_over(self):
        # Two active agents and a spare on a ctstore; heartbeats slow (15 s to notice). kill -9 of an active agent's
        # process group: its closed store connection ends the round, and the survivor and the spare run the next.
        port = self.c.ctstore()
        flags = c10d(f"127.0.0.1:{port}", "spare", "2", "join_timeout=30,last_call_timeout=0.5,is_host=0,"
                                                         "keep_alive_interval=5,keep_alive_max_attempt=3")
        took = self.c.kill9_member_spare_takes_over(flags)
        self.assertLess(took, 5.0, self.c.logs())  # ~1 s alone; generous for a loaded machine
        self.assertIn("closed its connection", self.c.log("n2"))
        self.assertEqual(sorted(self.c.results()), ["n2.0", "n4.0"])

    def test_sigstop_agent_detected_by_heartbeat(self):
        # Two active agents and a spare on a ctstore, short heartbeats. SIGSTOP of an active agent's process (its
        # workers run on): its connections stay open, so only its silence tells, and the survivor and the spare run
        # the next round within the heartbeat bound. SIGCONT after that: the resumed agent finds its round over and
        # stops its workers, and must not break the running round.
        port = self.c.ctstore()
        interval, attempts = 1.0, 3
        bound = interval * attempts  # docs/rendezvous.md: detected within interval x max_attempt of the last heartbeat
        conf = ("join_timeout=30,last_call_timeout=0.5,is_host=0,"
                f"keep_alive_interval={interval},keep_alive_max_attempt={attempts}")
        flags = c10d(f"127.0.0.1:{port}", "stop", "2", conf)
        job = ["--no-torch", "--hold-until", "release"]
        for tag in ("n2", "n3"):
            self.c.start(tag, "127.0.0." + tag[1:], flags, job_args=job)
        self.c.wait_for("a 2-node round", lambda: len(self.c.rounds("*.ws2.*")) == 2, 60)
        self.c.start("n4", "127.0.0.4", flags, job_args=job)  # a spare: the round is full
        self.c.wait_for("the spare waiting", lambda: "waiting" in self.c.log("n4"), 30)
        stopped_workers = self.c.worker_pids("n3")
        self.assertEqual(len(stopped_workers), 1, self.c.logs())
        agent = self.c.agents["n3"]
        stopped = time.monotonic()
        os.kill(agent.pid, signal.SIGSTOP)  # the agent only: its workers keep running
        try:
            self.c.wait_for("the next round on the survivor and the spare",
                            lambda: self.c.worker_pids("n4") and len(self.c.worker_pids("n2")) == 2, 30)
            took = time.monotonic() - stopped
            print(f"SIGSTOP to the next round's workers on the survivor and the spare: {took:.2f} s "
                  f"(heartbeat bound {bound:.1f} s)", flush=True)
            # The bound, plus the next round's last call and its workers' start on a loaded machine.
            self.assertLess(took, bound + 4.0, f"not within the heartbeat bound {bound:.1f} s (+4 s to form the next "
                                               f"round and start its workers)\n{self.c.logs()}")
            self.assertTrue(alive(stopped_workers[0]), "the stopped agent's worker should still run")
        finally:
            os.kill(agent.pid, signal.SIGCONT)
        survivor = self.c.log("n2")
        self.assertIn("lost heartbeat", survivor)
        self.assertNotIn("closed its connection", survivor)  # a stopped process closes nothing
        # Resumed, the agent learns that its round is over without it (declared dead): it stops its workers and
        # rejoins as a spare of the full running round; when that round ends the job, the spare exits 1 saying so.
        self.c.wait_for("the resumed agent to stop its workers", lambda: not alive(stopped_workers[0]), 30)
        time.sleep(2.0)  # room for a resumed agent to do harm, were it to
        self.assertIsNone(agent.poll(), "the resumed agent should wait as a spare\n" + self.c.logs())
        self.assertEqual(len(self.c.worker_pids("n2")), 2, "the running round was restarted\n" + self.c.logs())
        self.assertEqual(len(self.c.worker_pids("n4")), 1, "the running round was restarted\n" + self.c.logs())
        open(os.path.join(self.c.dir, "release"), "w").close()
        for tag in ("n2", "n4"):
            self.assertEqual(self.c.wait(tag, 60), 0, self.c.logs())
        self.assertEqual(sorted(self.c.results()), ["n2.0", "n4.0"], self.c.logs())
        self.assertEqual(len(self.c.worker_pids("n3")), 1, "the resumed agent started workers\n" + self.c.logs())
        # The spare's job ended without it: it says so and exits 1 (it ran nothing to completion).
        self.assertEqual(self.c.wait("n3", 30), 1, self.c.logs())
        resumed = self.c.log("n3")
        self.assertIn("Membership changed (dead: node 127.0.0.3", resumed)
        self.assertIn("lost heartbeat", resumed)
        self.assertIn("rendezvous 'stop' is closed", resumed)

    def test_health_check_keeps_node_out(self):
        # Three agents for 2 nodes on a ctstore; n3's --health-check fails: it stays out of every round (its output
        # logged, retried with backoff) and gives up after its join_timeout with exit 4, while n2 and the spare n4
        # run the job.
        port = self.c.ctstore()
        conf = "last_call_timeout=0.5,is_host=0,join_timeout="
        ok = ["--health-check", "test -d /", "--health-check-timeout", "20"]
        bad = ["--health-check", "echo no GPU on $(hostname) >&2; exit 1", "--health-check-timeout", "20"]
        self.c.start("n3", "127.0.0.3", c10d(f"127.0.0.1:{port}", "hc", "2", conf + "4") + bad, job_args=["--no-torch"])
        for tag in ("n2", "n4"):
            self.c.start(tag, "127.0.0." + tag[1:], c10d(f"127.0.0.1:{port}", "hc", "2", conf + "60") + ok,
                         job_args=["--no-torch"])
        for tag in ("n2", "n4"):
            self.assertEqual(self.c.wait(tag, 90), 0, self.c.logs())
        self.assertEqual(sorted(self.c.results()), ["n2.0", "n4.0"], self.c.logs())
        self.assertEqual(self.c.wait("n3", 60), 4, self.c.logs())
        log = self.c.log("n3")
        self.assertIn("health check failed (exit 1", log)
        self.assertIn("no GPU on", log)  # the command's output
        self.assertIn("retrying in 1 s", log)
        self.assertIn("kept this node out of the job", log)
        self.assertNotIn("health check failed", self.c.log("n2") + self.c.log("n4"))

    def _events(self, tag):
        path = os.path.join(self.c.dir, f"events.{tag}.jsonl")
        if not os.path.exists(path):
            return []
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]

    def _start_logged(self, tags, flags, job):
        """Agents with an event log each (events.<tag>.jsonl, read by _events)."""
        for tag in tags:
            self.c.start(tag, "127.0.0." + tag[1:],
                         flags + ["--event-log", os.path.join(self.c.dir, f"events.{tag}.jsonl")], job_args=job)

    def _stepout_job(self, run_id, nnodes, max_restarts, max_failures, cooldown):
        """(flags, job args) of a held job on a fresh ctstore whose node n3's workers fail every attempt."""
        port = self.c.ctstore()
        flags = c10d(f"127.0.0.1:{port}", run_id, nnodes, "join_timeout=60,last_call_timeout=0.5,is_host=0") + [
            "--max-restarts", str(max_restarts), "--max-node-failures", str(max_failures), "--node-cooldown", cooldown]
        return flags, ["--no-torch", "--hold-until", "release", "--fail-node", "n3"]

    def test_failing_node_steps_out_spare_takes_over(self):
        # Three agents for 2 nodes on a ctstore: n2 and n3 run, n4 waits as a spare. n3's workers fail every
        # attempt, first in their round: after 3 such failures (--max-node-failures 3, restarts left) it steps out
        # for its cooldown, and the job runs on n2 and the spare. Back after the cooldown, n3 waits as a spare; the
        # job ends and n3 exits 1 saying it had stepped out.
        flags, job = self._stepout_job("stepout", "2", max_restarts=5, max_failures=3, cooldown="1:8")
        self._start_logged(("n2", "n3"), flags, job)
        self.c.wait_for("a 2-node round", lambda: len(self.c.rounds("n2.*.ws2.*")) >= 1, 60)
        self._start_logged(("n4",), flags, job)
        self.c.wait_for("n3 stepping out", lambda: any(e["event"] == "node_stepped_out" for e in self._events("n3")), 90)
        self.c.wait_for("n3 back after its cooldown",
                        lambda: any(e["event"] == "node_returned" for e in self._events("n3")), 30)
        self.c.wait_for("a round of n2 and the spare n4",
                        lambda: self.c.rounds("n2.*.ws2.*") and self.c.rounds("n4.*.ws2.*"), 60)
        open(os.path.join(self.c.dir, "release"), "w").close()
        for tag in ("n2", "n4"):
            self.assertEqual(self.c.wait(tag, 60), 0, self.c.logs())
        self.assertEqual(sorted(self.c.results()), ["n2.0", "n4.0"], self.c.logs())
        self.assertEqual(self.c.wait("n3", 60), 1, self.c.logs())
        log = self.c.log("n3")
        self.assertIn("node 127.0.0.3 stepped out: its workers failed first in their round 3 time(s)", log)
        self.assertIn("had stepped out of the job 1 time(s)", log)
        out = [e for e in self._events("n3") if e["event"] == "node_stepped_out"]
        self.assertEqual([(e["failures"], e["cooldown_s"], e["step_outs"]) for e in out], [(3, 1.0, 1)])
        # The others' failures were never n3's to count against them, and a step-out cost them no restart.
        for tag in ("n2", "n4"):
            self.assertFalse([e for e in self._events(tag) if e["event"] == "node_stepped_out"], self.c.logs())
            self.assertEqual([e for e in self._events(tag) if e["event"] == "restart"], [], self.c.logs())
        self.assertIn("stepped_out: node 127.0.0.3 stepped out", self.c.log("n2") + self.c.log("n4"))

    def test_stepped_out_node_returns_and_steps_out_again(self):
        # Three agents for 2:3 nodes, all in the first round. n3 fails first 2 times (--max-node-failures 2) and
        # steps out for 1 s; the others go on as two. Back, it joins (the round has room): its next failure steps
        # it out again at once, for twice as long. The job then completes on n2 and n4.
        flags, job = self._stepout_job("again", "2:3", max_restarts=9, max_failures=2, cooldown="1:30")
        self._start_logged(("n2", "n3", "n4"), flags, job)
        self.c.wait_for("n3 stepping out twice",
                        lambda: len([e for e in self._events("n3") if e["event"] == "node_stepped_out"]) >= 2, 120)
        # n3 would come back again after 2 s and join the next round, which may end under workers that are done;
        # the test stops it in its cooldown (a signal there exits at once) and lets n2 and n4 finish as two.
        signalled = time.monotonic()
        os.kill(self.c.agents["n3"].pid, signal.SIGTERM)
        self.assertNotEqual(self.c.wait("n3", 10), 0, self.c.logs())
        took = time.monotonic() - signalled
        self.assertLess(took, 2.0, f"SIGTERM in a cooldown took {took:.2f} s (at most a second wanted)\n{self.c.logs()}")
        self.c.wait_for("a second round of n2 and n4",
                        lambda: all(self.c.log(t).count("formed: 2 node(s)") >= 2 for t in ("n2", "n4")), 60)
        open(os.path.join(self.c.dir, "release"), "w").close()
        for tag in ("n2", "n4"):
            self.assertEqual(self.c.wait(tag, 60), 0, self.c.logs())
        out = [e for e in self._events("n3") if e["event"] == "node_stepped_out"]
        self.assertEqual([(e["failures"], e["cooldown_s"]) for e in out][:2], [(2, 1.0), (1, 2.0)], self.c.logs())
        self.assertTrue(any(e["event"] == "node_returned" for e in self._events("n3")))
        self.assertIn("stepped out again", self.c.log("n3"))

    def test_sigterm_agent_others_reform(self):
        ep = f"127.0.0.2:{reserve_port()}"
        # keep_alive_interval is long: the survivors must learn of the leave from leave(), not from lost heartbeats.
        flags = c10d(ep, "term", "2:3", "join_timeout=30,last_call_timeout=0.5,keep_alive_interval=30")
        for tag in ("n2", "n3", "n4"):
            self.c.start(tag, "127.0.0." + tag[1:], flags, job_args=["--target-world", "2", "--no-torch"])
        self.c.wait_for("a 3-node round", lambda: len(self.c.rounds("*.ws3.*")) == 3, 60)
        start = time.monotonic()
        self.c.agents["n4"].send_signal(signal.SIGTERM)
        self.assertEqual(self.c.wait("n4", 30), 1, self.c.logs())
        for tag in ("n2", "n3"):
            self.assertEqual(self.c.wait(tag, 30), 0, self.c.logs())
        self.assertLess(time.monotonic() - start, 15)
        self.assertIn("left", self.c.log("n2"))
        res = self.c.results()
        self.assertEqual(sorted(res), ["n2.0", "n3.0"])
        self.assertEqual({r["WORLD_SIZE"] for r in res.values()}, {"2"})
        self.assert_no_orphans()

    def test_kill_below_min(self):
        ep = f"127.0.0.2:{reserve_port()}"
        flags = c10d(ep, "below", "2:3", "join_timeout=3,last_call_timeout=0.5,keep_alive_interval=0.3,"
                                        "keep_alive_max_attempt=2")
        for tag in ("n2", "n3"):
            self.c.start(tag, "127.0.0." + tag[1:], flags, job_args=["--target-world", "99", "--grandchild",
                                                                      "--no-torch"])
        self.c.wait_for("a 2-node round", lambda: len(self.c.rounds("*.ws2.*")) == 2, 60)
        self.c.agents["n3"].send_signal(signal.SIGKILL)
        self.assertEqual(self.c.wait("n2", 60), 1, self.c.logs())
        log = self.c.log("n2")
        self.assertIn("timed out", log)
        self.assertIn("of min 2", log)
        failure = [l for l in log.splitlines() if "rendezvous failed" in l]
        self.assertTrue(failure, log)
        self.assertIn("127.0.0.3", failure[0])  # who is missing: the node whose heartbeat stopped
        self.assert_no_orphans()

    # --- the orphan guardian --------------------------------------------------------------------------------
    def test_kill9_agent_leaves_no_grandchild(self):
        p = self.c.start("solo", "127.0.0.2", ["--standalone"], nproc=2,
                         job_args=["--target-world", "99", "--grandchild", "--no-torch"])
        self.c.wait_for("workers and grandchildren", lambda: len(self.c.worker_pids()) == 4, 30)
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=10)
        self.assert_no_orphans(within=1.0)


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    case = sys.argv[1]
    if case in MultiNode.needs_torch and not have_torch(TORCH_PYTHON):
        print(f"SKIP {case}: PyTorch with torch.distributed is not installed for {TORCH_PYTHON}")
        return SKIP
    if case == "test_torchrun_agents_on_ctstore" and not os.path.exists(TORCHRUN_PY):
        print(f"SKIP {case}: {TORCHRUN_PY} (torch 1.13's torchrun for Python 3.11) not found")
        return SKIP
    result = unittest.TextTestRunner(verbosity=2).run(unittest.defaultTestLoader.loadTestsFromName(
        f"MultiNode.{case}", sys.modules[__name__]))
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
