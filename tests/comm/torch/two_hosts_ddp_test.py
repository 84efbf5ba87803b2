"""DDP on backend "ctrun" across two hosts under two ctrun agents (c10d rendezvous) ends with gloo's parameters.

Each host is a network namespace on a bridge the test makes (tests/common/netns.py) and, in it, a mount namespace
with a private tmpfs on /dev/shm, so its ranks share memory with each other only. One agent per host
(`--nnodes 2 --nproc-per-node 2`, the rendezvous on host A's address): 4 ranks, and comm's group spans two hosts,
so it runs in two levels (shm inside each host, tcp between). The workers (two_hosts_ddp_worker.py) train the same
model on "ctrun" and on gloo in one job and save both; the test checks
  - that comm built two levels: every rank's group-creation log line says "2 hosts x 2-2 ranks" and transport
    shm+tcp, and each agent's log holds the lines of its own two ranks (ranks 0-1 on A, 2-3 on B);
  - that every rank ends with the same parameters, on each backend;
  - that ctrun's equal gloo's within 1e-5 relative: not bit for bit, because the two sum gradients in different
    orders (comm: inside each host, then between the hosts; gloo: its ring over all four ranks), and float
    addition is not associative.
Exit 77 (skip) without torch, without the ctrun_torch module, or without network and mount namespaces. What it made
(namespaces, veths, tmpfs, processes, the temp dir) is removed by name or PID at the end.
  two_hosts_ddp_test.py    env: CTRUN_BIN, CTRUN_TORCH_PYTHON, CTRUN_SOURCE_DIR; KEEP_DIR=1 keeps the logs
"""
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "two_hosts_ddp_worker.py")
CTRUN = os.environ["CTRUN_BIN"]
PYTHON = os.environ.get("CTRUN_TORCH_PYTHON") or "/usr/bin/python3"
NPROC, NNODES = 2, 2
JOB_TIMEOUT = 200  # both agents, within ctest's 300 s (about 15 s on this 2-core VM)
SKIP = 77
# On host A's own address: only the test's hosts can reach it, and nothing else binds there.
RDZV_PORT = 29400
# A host's private /dev/shm: a new mount namespace (mounts private to it) with a tmpfs there, then the agent.
HOST = 'mount -t tmpfs -o size=1g,mode=1777 ctrun-test-shm /dev/shm && exec "$@"'

sys.path.insert(0, os.path.join(os.environ["CTRUN_SOURCE_DIR"], "tests", "common"))
from netns import Lan  # noqa: E402
from processes import have_torch, kill_session  # noqa: E402


def why_not():
    """Why this machine cannot run the test, or None."""
    if not have_torch(PYTHON):
        return f"{PYTHON} has no torch.distributed (apt-get install python3-torch)"
    if importlib.util.find_spec("torch") is None:  # this script compares the saved parameters itself
        return f"{sys.executable} (running this test) has no torch"
    pydir = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(CTRUN))), "python")
    if not os.path.isdir(pydir) or not any(f.startswith("ctrun_torch") for f in os.listdir(pydir)):
        return f"no ctrun_torch module in {pydir} (built only with libtorch-dev, pybind11-dev, python3-dev)"
    if not shutil.which("unshare"):
        return "no unshare (util-linux)"
    return Lan.why_not()


def start_agent(ns, addr, endpoint, out, tag):
    log = open(os.path.join(out, f"agent.{tag}.log"), "w")
    cmd = ["ip", "netns", "exec", ns, "unshare", "-m", "--propagation", "private", "sh", "-c", HOST, "sh", CTRUN,
           "--local-addr", addr, "--nnodes", str(NNODES), "--nproc-per-node", str(NPROC), "--rdzv-backend", "c10d",
           "--rdzv-endpoint", endpoint, "--rdzv-id", "ddp2h", "--rdzv-conf", "join_timeout=60",
           "--monitor-interval", "0.2", WORKER, out]
    env = dict(os.environ, PYTHON_EXEC=PYTHON, GLOO_SOCKET_IFNAME="eth0", OMP_NUM_THREADS="1")
    # `ip netns exec`, unshare and sh exec in turn: the pid is the agent's, and its session holds its workers.
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def read(path):
    with open(path) as f:
        return f.read()


def check_two_levels(out):
    """Each agent's log has its own ranks' group-creation lines, each naming two hosts of two ranks."""
    for tag, ranks in (("a", (0, 1)), ("b", (2, 3))):
        text = read(os.path.join(out, f"agent.{tag}.log"))
        for r in ranks:
            assert re.search(rf"comm cpu: rank {r}/4 in two levels: 2 hosts x 2-2 ranks", text), \
                f"rank {r} did not report two levels (2 hosts x 2 ranks) on host {tag}:\n{text[-4000:]}"
            assert re.search(rf"comm cpu: rank {r}/4 transport shm\+tcp", text), \
                f"rank {r} did not run over shm+tcp on host {tag}:\n{text[-4000:]}"
        other = (2, 3) if tag == "a" else (0, 1)
        assert not any(re.search(rf"comm cpu: rank {r}/4 ", text) for r in other), \
            f"host {tag}'s agent ran a rank of the other host:\n{text[-4000:]}"


def check_parameters(out):
    import torch
    final = {}
    for backend in ("ctrun", "gloo"):
        ranks = [torch.load(os.path.join(out, f"{backend}-{r}.pt")) for r in range(NNODES * NPROC)]
        for r, params in enumerate(ranks):
            assert all(torch.equal(a, b) for a, b in zip(params, ranks[0])), \
                f"{backend}: rank {r}'s parameters differ from rank 0's (DDP keeps every replica equal)"
        final[backend] = ranks[0]
    for i, (a, b) in enumerate(zip(final["ctrun"], final["gloo"])):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6), \
            f"parameter {i}: ctrun differs from gloo by {(a - b).abs().max().item()}"
    # Training moved the parameters: equal results are not two untouched copies of the seed's model.
    torch.manual_seed(0)
    initial = torch.nn.Linear(16, 32).weight
    assert not torch.allclose(final["ctrun"][0], initial), "the parameters did not change"


def main():
    why = why_not()
    if why:
        print("skipped:", why, flush=True)
        sys.exit(SKIP)
    out = tempfile.mkdtemp(prefix="ddp2h-")
    lan = Lan("ctddp")
    agents = []
    try:
        hosts = {tag: lan.add_host(tag) for tag in ("a", "b")}
        endpoint = f"{hosts['a'][1]}:{RDZV_PORT}"
        agents = [start_agent(ns, addr, endpoint, out, tag) for tag, (ns, addr) in hosts.items()]
        deadline = time.monotonic() + JOB_TIMEOUT
        for tag, agent in zip(hosts, agents):
            try:
                code = agent.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                code = f"nothing: the job did not end within {JOB_TIMEOUT} s"
            assert code == 0, f"agent {tag} exited {code}\n" + "\n".join(
                f"--- {t}\n{read(os.path.join(out, f'agent.{t}.log'))[-5000:]}" for t in hosts)
        check_two_levels(out)
        check_parameters(out)
        print("ok: DDP over two hosts (two levels) on ctrun ends with gloo's parameters", flush=True)
    finally:
        for agent in agents:
            kill_session(agent)
        lan.close()
        if os.environ.get("KEEP_DIR"):
            print("kept", out)
        else:
            shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
