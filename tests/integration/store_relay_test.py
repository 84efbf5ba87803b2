"""The store relay in every agent (issue 44; agent/launch/store_relay.hpp, store/relay.hpp) with real agents on three
namespaced hosts (tests/common/netns.py), four torch ranks each, c10d rendezvous at host a:

  three_hosts_torch113  torch 1.13 workers (workers/relay_worker.py): gloo DDP, a new_group, a barrier, one rank
                        sending garbage to its relay, all through the relays; the workers' store on group rank 0's host
                        holds exactly one established connection per node (its relay) while the 12 ranks live, and
                        MASTER_ADDR still names that host
  three_hosts_torch26   the same on torch 2.6 (the chroot of tests/torch2), plus DeviceMesh, DTensor and DCP to
                        ctrun_torch.checkpoint.MemoryWriter
  relay_off             --store-relay off: every rank connects to the store itself (at least one connection a rank)
  store_lost            every rank blocked in a store wait; kill -9 of group rank 0's agent (its store dies with it):
                        each rank on the other hosts sees its store connection close within a second
  torch_store_api       every Python-visible op of torch 1.13's TCPStore (tests/store/torch/torch_client_ops.py) and
                        torch 2.6's (tests/torch2/ops26.py, transcript compared with ctstore's direct) through a relay
                        (store_relay_child) in front of a ctstore; no namespaces

Run one case: store_relay_test.py CASE (ctest: integration.store_relay.CASE). Exit 77 = skipped (no root, no
namespaces, no torch, no torch 2.6 chroot), with the reason. Everything made (namespaces, processes, temp dir) is
removed by name or PID at the end; KEEP_DIR=1 keeps the logs.
"""
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
WORKER = os.path.join(HERE, "workers", "relay_worker.py")
CTRUN = os.environ.get("CTRUN_BIN", "ctrun")
PYTHON = os.environ.get("CTRUN_TORCH_PYTHON") or "/usr/bin/python3"
NODES, NPROC = 3, 4
RDZV_PORT = 29400  # on host a's own address: only the test's hosts reach it
JOB_TIMEOUT = 240
SKIP = 77

sys.path.insert(0, os.path.join(REPO, "tests", "common"))
from netns import Lan  # noqa: E402
from processes import have_torch, kill_session  # noqa: E402


def log(msg):
    print(msg, flush=True)


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


class Job:
    """Three hosts, one agent each; the workers' files in self.out."""

    def __init__(self, prefix):
        self.out = tempfile.mkdtemp(prefix="relay-", dir=os.environ.get("RELAY_TMP"))
        self.lan = Lan(prefix)
        self.hosts = {tag: self.lan.add_host(tag) for tag in ("a", "b", "c")}
        self.agents = {}
        self.killed = set()  # tags of agents the test killed on purpose: their exit is no failure of the job

    def start(self, worker_cmd, extra_flags=(), env=None):
        endpoint = f"{self.hosts['a'][1]}:{RDZV_PORT}"
        worker_cmd = [self.out if arg == "OUT" else arg for arg in worker_cmd]
        for tag, (ns, addr) in self.hosts.items():
            cmd = ["ip", "netns", "exec", ns, CTRUN, "--local-addr", addr, "--nnodes", str(NODES), "--nproc-per-node",
                   str(NPROC), "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", "relay3",
                   "--rdzv-conf", "join_timeout=90", "--monitor-interval", "0.2", *extra_flags, *worker_cmd]
            e = dict(env or os.environ, GLOO_SOCKET_IFNAME="eth0", OMP_NUM_THREADS="1")
            f = open(os.path.join(self.out, f"agent.{tag}.log"), "w")
            self.agents[tag] = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=e,
                                                start_new_session=True)

    def logs(self):
        return "\n".join(f"--- agent {t}\n{read(os.path.join(self.out, f'agent.{t}.log'))[-4000:]}"
                         for t in self.hosts)

    def wait_files(self, name, count, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(glob.glob(os.path.join(self.out, f"{name}.*"))) >= count:
                return True
            if any(a.poll() not in (None, 0) for t, a in self.agents.items() if t not in self.killed):
                return False
            time.sleep(0.1)
        return False

    def worker_env(self, rank=0):
        return json.loads(read(os.path.join(self.out, f"env.{rank}")))

    def store_host(self):
        """(namespace, address, port) of the workers' store: group rank 0's host, as MASTER_ADDR/PORT say."""
        env = self.worker_env()
        for tag, (ns, addr) in self.hosts.items():
            if addr == env["MASTER_ADDR"]:
                return tag, ns, int(env["MASTER_PORT"])
        raise AssertionError(f"MASTER_ADDR {env['MASTER_ADDR']} is none of the hosts' addresses {self.hosts}")

    def established(self, ns, port):
        """Established TCP connections whose server side is `port` in namespace ns (one line per connection)."""
        r = subprocess.run(["ip", "netns", "exec", ns, "ss", "-Htn", "state", "established", f"( sport = :{port} )"],
                           capture_output=True, text=True, timeout=30)
        return [line for line in r.stdout.splitlines() if line.strip()]

    def finish(self):
        open(os.path.join(self.out, "counted"), "w").close()
        deadline = time.monotonic() + JOB_TIMEOUT
        codes = {}
        for tag, agent in self.agents.items():
            try:
                codes[tag] = agent.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                codes[tag] = "nothing: still running"
        return codes

    def close(self):
        for agent in self.agents.values():
            kill_session(agent)
        self.lan.close()
        if os.environ.get("KEEP_DIR"):
            log(f"kept {self.out}")
        else:
            shutil.rmtree(self.out, ignore_errors=True)


def why_not_hosts():
    if not shutil.which("ss"):
        return "no ss (iproute2)"
    return Lan.why_not()


def run_job(prefix, worker_cmd, extra_flags=(), env=None, relay=True, dcp=False):
    job = Job(prefix)
    try:
        job.start(worker_cmd, extra_flags, env)
        assert job.wait_files("ready", NODES * NPROC, JOB_TIMEOUT), \
            f"not every rank got through init, DDP and new_group:\n{job.logs()}"
        tag, ns, port = job.store_host()
        conns = job.established(ns, port)
        rdzv = job.established(job.hosts["a"][0], RDZV_PORT)
        for rank in range(NODES * NPROC):
            env_seen = job.worker_env(rank)
            assert env_seen["MASTER_ADDR"] == job.hosts[tag][1], f"rank {rank}: MASTER_ADDR {env_seen}"
            if relay:
                assert env_seen["CTRUN_STORE_RELAY"] and env_seen["CTRUN_STORE_RELAY"].startswith("127.0.0.1:"), \
                    f"rank {rank} was not told where its relay is: {env_seen}"
            else:
                assert not env_seen["CTRUN_STORE_RELAY"], f"rank {rank} got a relay with --store-relay off"
        log(f"{len(conns)} established connection(s) at the workers' store (host {tag}, port {port}); "
            f"{len(rdzv)} at the rendezvous store (the agents' own)")
        # The agents' own connections to the rendezvous store: one to three each (heartbeats, loss watch and round
        # share one connection once the rendezvous client is made one-connection-per-agent, issue 44).
        assert NODES <= len(rdzv) <= 3 * NODES, f"{len(rdzv)} agents' connections at the rendezvous store"
        if relay:
            assert len(conns) == NODES, \
                f"the workers' store holds {len(conns)} connections, not one per node's relay:\n" + "\n".join(conns)
        else:
            assert len(conns) >= NODES * NPROC, f"only {len(conns)} connections without the relay:\n" + "\n".join(conns)
        codes = job.finish()
        assert all(c == 0 for c in codes.values()), f"agents exited {codes}\n{job.logs()}"
        text = "".join(read(os.path.join(job.out, f"agent.{t}.log")) for t in job.hosts)
        oks = [line for line in text.splitlines() if " relay ok: " in line]
        assert len(oks) == NODES * NPROC, f"{len(oks)} ranks reported ok:\n{job.logs()}"
        if dcp:
            assert all("dcp" in line for line in oks), oks
        if "--garbage" in worker_cmd:
            assert sum(line.endswith(" garbage") for line in oks) == 1, f"no rank checked the garbage: {oks}"
        log(f"ok: {NODES} hosts x {NPROC} ranks, {oks[0].split(': ', 1)[1]}")
    finally:
        job.close()


def case_three_hosts_torch113():
    if why_not_hosts():
        return why_not_hosts()
    if not have_torch(PYTHON):
        return f"{PYTHON} has no torch.distributed"
    run_job("ctrla", [WORKER, "OUT", "--garbage", "5"], env=dict(os.environ, PYTHON_EXEC=PYTHON))


def case_relay_off():
    if why_not_hosts():
        return why_not_hosts()
    if not have_torch(PYTHON):
        return f"{PYTHON} has no torch.distributed"
    run_job("ctrlo", [WORKER, "OUT"], extra_flags=("--store-relay", "off"), env=dict(os.environ, PYTHON_EXEC=PYTHON),
            relay=False)


def case_three_hosts_torch26():
    sys.path.insert(0, os.path.join(REPO, "tests", "torch2"))
    import run_ctrun_backend26 as rb
    import run_torch2_tests as t2

    reason = why_not_hosts() or t2.skip_reason()
    if reason:
        return reason
    build_dir = os.environ.get("CTRUN_TORCH2_BUILD", os.path.join(REPO, "build-torch2"))
    problem = t2.module_problem(build_dir)
    if problem:
        raise AssertionError(problem)
    env = rb.module_env(type("A", (), {"build_dir": build_dir})())
    # The checkpoints' directories and the workers' files where the chroot sees them (the repository is bind-mounted).
    os.environ["RELAY_TMP"] = build_dir
    root = tempfile.mkdtemp(prefix="relay-ck-", dir=build_dir)
    env = dict(env, CTRUN_CHECKPOINT_ROOT=root)
    try:
        run_job("ctrlt", ["--no-python", t2.CHROOT_PY, WORKER, "OUT", "--dcp", "--garbage", "6"], env=env, dcp=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        t2.reclaim_leaked_mounts()


def case_store_lost():
    if why_not_hosts():
        return why_not_hosts()
    if not have_torch(PYTHON):
        return f"{PYTHON} has no torch.distributed"
    job = Job("ctrll")
    try:
        job.start([WORKER, "OUT", "--wait-store"], env=dict(os.environ, PYTHON_EXEC=PYTHON))
        assert job.wait_files("env", NODES * NPROC, JOB_TIMEOUT), f"the ranks did not start:\n{job.logs()}"
        assert job.wait_files("waiting", NODES * NPROC, JOB_TIMEOUT), f"the ranks did not get to their wait:\n{job.logs()}"
        tag, ns, port = job.store_host()
        assert len(job.established(ns, port)) == NODES, job.established(ns, port)
        time.sleep(0.5)  # the last rank's WAIT on its way to the store
        killed_at = time.time()
        job.killed.add(tag)
        os.killpg(job.agents[tag].pid, signal.SIGKILL)  # the agent and the workers' store it hosts
        others = [r for r in range(NODES * NPROC) if int(job.worker_env(r)["GROUP_RANK"]) != 0]
        assert job.wait_files("lost", len(others), 30), f"not every rank saw the store go:\n{job.logs()}"
        late = {}
        for r in others:
            lost = json.loads(read(os.path.join(job.out, f"lost.{r}")))
            late[r] = lost["at"] - killed_at
        log("store connection closed after kill -9 of the store's agent: " +
            ", ".join(f"rank {r} {s * 1000:.0f} ms" for r, s in sorted(late.items())))
        assert all(s < 1.0 for s in late.values()), f"a rank waited a second or more: {late}"
    finally:
        job.close()


def daemon(argv, env=None):
    """A child that prints '... listening on HOST:PORT' first: (process, port)."""
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env=env, start_new_session=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = p.stdout.readline()
        if "listening on" in line:
            return p, int(line.rsplit(":", 1)[1])
        if not line:
            break
    kill_session(p)
    raise AssertionError(f"{argv[0]} did not say where it listens")


def case_torch_store_api():
    ctstore, relay_bin = os.environ["CTSTORE_BIN"], os.environ["RELAY_BIN"]
    ran = []
    if have_torch(PYTHON):
        store, port = daemon([ctstore, "--host", "127.0.0.1", "--port", "0"])
        relay, relay_port = daemon([relay_bin, "127.0.0.1", str(port)])
        try:
            r = subprocess.run([PYTHON, os.path.join(REPO, "tests", "store", "torch", "torch_client_ops.py"),
                                "127.0.0.1", str(relay_port)], capture_output=True, text=True, timeout=120)
            assert r.returncode == 0 and "ALL OK" in r.stdout, \
                f"torch 1.13's client through the relay:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
            ran.append("torch 1.13: every op of its TCPStore")
        finally:
            kill_session(relay)
            kill_session(store)
    sys.path.insert(0, os.path.join(REPO, "tests", "torch2"))
    import run_torch2_tests as t2

    if not t2.skip_reason():
        ops = os.path.join(REPO, "tests", "torch2", "ops26.py")
        transcripts = {}
        for via_relay in (False, True):
            store, port = daemon([ctstore, "--host", "127.0.0.1", "--port", "0"])
            relay, relay_port = daemon([relay_bin, "127.0.0.1", str(port)]) if via_relay else (None, port)
            try:
                r = t2.run_chroot_python([ops, "127.0.0.1", str(relay_port)], timeout=180)
            finally:
                if relay:
                    kill_session(relay)
                kill_session(store)
            lines = t2.strip_noise(r.stdout)
            assert r.returncode == 0 and any(line.startswith("done: 0 failed") for line in lines), \
                f"torch 2.6's ops {'through the relay' if via_relay else 'on ctstore'}:\n{r.stdout[-3000:]}{r.stderr[-3000:]}"
            transcripts[via_relay] = lines
        if transcripts[True] != transcripts[False]:
            import difflib
            raise AssertionError("torch 2.6's transcript through the relay differs from ctstore's direct:\n" +
                                 "\n".join(difflib.unified_diff(transcripts[False], transcripts[True], lineterm="")))
        ran.append(f"torch 2.6: every op of its TCPStore, transcript identical to ctstore direct "
                   f"({len(transcripts[True])} lines)")
        t2.reclaim_leaked_mounts()
    if not ran:
        return f"{PYTHON} has no torch.distributed and the torch 2.6 chroot is not there ({t2.skip_reason()})"
    for line in ran:
        log(f"ok: {line}")


CASES = {"three_hosts_torch113": case_three_hosts_torch113, "three_hosts_torch26": case_three_hosts_torch26,
         "relay_off": case_relay_off, "store_lost": case_store_lost, "torch_store_api": case_torch_store_api}


def main():
    if len(sys.argv) != 2 or sys.argv[1] not in CASES:
        print(f"usage: {sys.argv[0]} {{{','.join(CASES)}}}", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    why = CASES[sys.argv[1]]()
    if why:
        log(f"skipped: {why}")
        return SKIP
    log(f"passed in {time.monotonic() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
