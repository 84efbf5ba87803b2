"""In-memory checkpoints on two nodes (agent/checkpoint/: exchange, replication, load from a replica) with real ctrun
agents and torch 1.13 workers. Each "node" is a host of its own: a network namespace with its own address on a
bridge the test makes (tests/common/netns.py), and in it a mount namespace with a private tmpfs on /dev/shm, so its
snapshots are its own memory and its agent reaches the others only over the network. When the test SIGKILLs node
B's agent and workers, B's mount namespace and its memory go with them. A spare agent on a third host then takes
B's place, and the ranks B ran load their state from the replica A received; the final parameters equal an
uninterrupted run's bit for bit (case spare_loads_replica, on c10d). Case static_nodes: the same hosts on the
static backend; group rank 0's `ctrun --status` names the other node's held steps, and a rank killed after a save
makes both nodes restart and every rank resume from that step. Environment as checkpoint_test.py. Exit 77 (skip)
without torch or without network and mount namespaces. Everything made (namespaces, veths, tmpfs, processes, temp
dirs) is removed by name or PID at the end.
"""

import contextlib
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
TRAIN = os.path.join(HERE, "workers", "train.py")
CTRUN = os.environ["CTRUN_BIN"]
PYTHON = os.environ["CTRUN_TORCH_PYTHON"]
STEPS, HOLD_AFTER, NPROC = 6, 3, 2
KILL_RANK, KILL_AFTER = 2, 3  # static_nodes: a rank of node B, once every rank saved this step
PAUSE_AFTER = 3  # static_nodes: the uninterrupted run waits after this step while the test reads --status
SKIP = 77
# The rendezvous port on node A's own address: only the test's hosts can reach it, and nothing else binds there.
RDZV_PORT = 29400

sys.path.insert(0, os.path.join(os.environ["CTRUN_SOURCE_DIR"], "tests", "common"))
from netns import Lan  # noqa: E402

try:
    import torch  # noqa: F401  (a skip, not an error, without torch)
except ImportError:
    print("skipped: no torch in", sys.executable)
    sys.exit(SKIP)

from final_params import assert_same_final  # noqa: E402  (beside this script)

# A node's private /dev/shm: a new mount namespace (mounts private to it) with a tmpfs there, then the agent.
NODE = 'mount -t tmpfs -o size=1g,mode=1777 ctrun-test-shm /dev/shm && exec "$@"'


def why_no_nodes():
    """Why this machine cannot make the nodes (network namespaces, then a mount namespace with its own /dev/shm
    inside one), or None."""
    why = Lan.why_not()
    if why:
        return why
    if not shutil.which("unshare"):
        return "no unshare (util-linux)"
    lan = Lan("ctckp")
    try:
        ns, _ = lan.add_host("probe")
        p = subprocess.run(["ip", "netns", "exec", ns, "unshare", "-m", "--propagation", "private", "sh", "-c",
                            NODE, "sh", "true"], capture_output=True, text=True, timeout=30)
        return None if p.returncode == 0 else "cannot make a mount namespace with its own /dev/shm: " + p.stderr
    except subprocess.CalledProcessError as e:
        return f"cannot make a namespaced host: {e.cmd}: {e.stderr.strip()}"
    finally:
        lan.close()


class Nodes:
    """Agents of one job, each started on one of the LAN's hosts (`hosts`: tag -> (namespace, address)); the
    rendezvous is at host A. `static`: torchrun's default backend, --nnodes 2 with --node-rank (A 0, B 1) and node A
    serving the one store at --master-addr; else c10d, elastic."""

    def __init__(self, out, hosts, rdzv_port, static=False):
        self.out = out
        self.hosts = hosts
        self.agents = {}
        self.port = rdzv_port
        self.static = static

    def rendezvous(self, tag):
        master = self.hosts["A"][1]
        if self.static:
            return ["--nnodes", "2", "--node-rank", str("AB".index(tag)), "--master-addr", master,
                    "--master-port", str(self.port)]
        return ["--nnodes", "2:2", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{master}:{self.port}",
                "--rdzv-id", "ckrep",
                # B's death is seen within 1.5 s; fewer missed heartbeats took a live agent, late on a loaded
                # machine, for dead.
                "--rdzv-conf", "join_timeout=90,last_call_timeout=0.5,keep_alive_interval=0.3,keep_alive_max_attempt=5"]

    def start(self, tag, extra, ctrun_args=()):
        ns, addr = self.hosts[tag]
        log = open(os.path.join(self.out, f"agent.{tag}.log"), "w")
        cmd = ["ip", "netns", "exec", ns, "unshare", "-m", "--propagation", "private", "sh", "-c", NODE, "sh", CTRUN,
               "--local-addr", addr, "--nproc-per-node", str(NPROC), "--max-restarts", "2"] + self.rendezvous(tag) + \
              list(ctrun_args) + [
               "--monitor-interval", "0.2", "--event-log", os.path.join(self.out, f"events.{tag}.jsonl"),
               TRAIN, self.out, str(STEPS), "--extra-mib", "4"] + extra
        env = dict(os.environ, PYTHON_EXEC=PYTHON, GLOO_SOCKET_IFNAME="eth0")
        # `ip netns exec`, unshare and sh exec in turn: the pid is the agent's, and its session holds its workers.
        self.agents[tag] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                            start_new_session=True)

    def wait(self, tag, timeout):
        try:
            return self.agents[tag].wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"agent {tag} did not end within {timeout} s\n{self.logs()}")

    def kill(self, tag):
        """SIGKILL to the node's agent and every process of its session (its workers)."""
        try:
            os.killpg(self.agents[tag].pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.agents[tag].wait(timeout=30)

    def logs(self):
        out = []
        for tag in self.agents:
            with open(os.path.join(self.out, f"agent.{tag}.log")) as f:
                out.append(f"--- {tag}\n{f.read()[-5000:]}")
        return "\n".join(out)

    def events(self, tag, name):
        path = os.path.join(self.out, f"events.{tag}.jsonl")
        if not os.path.exists(path):
            return []
        with open(path) as f:
            return [e for e in map(json.loads, f) if e["event"] == name]

    def close(self):
        for tag in self.agents:
            if self.agents[tag].poll() is None:
                self.kill(tag)


def wait_for(what, predicate, timeout, nodes):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}\n{nodes.logs()}")




@contextlib.contextmanager
def job_hosts(prefix, tags):
    """Skips (exit 77) when this machine cannot make the hosts. Else yields (hosts, ref, out, runs): the LAN's hosts
    by tag, the uninterrupted run's and the test run's directories, and a list the test puts its Nodes in; at the
    end every agent of those is killed, the LAN removed, and the directories too (unless KEEP_DIR is set)."""
    why = why_no_nodes()
    if why:
        print("skipped:", why)
        sys.exit(SKIP)
    ref, out = tempfile.mkdtemp(prefix=f"{prefix}-ref-"), tempfile.mkdtemp(prefix=f"{prefix}-run-")
    lan = Lan(prefix)
    runs = []
    try:
        yield {tag: lan.add_host(tag.lower()) for tag in tags}, ref, out, runs
    finally:
        for n in runs:
            n.close()
        lan.close()
        if not os.environ.get("KEEP_DIR"):
            shutil.rmtree(ref, ignore_errors=True)
            shutil.rmtree(out, ignore_errors=True)


def test_spare_loads_replica():
    with job_hosts("ctckn", ("A", "B", "C")) as (hosts, ref, out, runs):
        ref_nodes, nodes = Nodes(ref, hosts, RDZV_PORT), Nodes(out, hosts, RDZV_PORT + 1)
        runs.extend([ref_nodes, nodes])
        # The uninterrupted run: two nodes, four ranks.
        ref_nodes.start("A", [])
        ref_nodes.start("B", [])
        for tag in ("A", "B"):
            assert ref_nodes.wait(tag, 180) == 0, ref_nodes.logs()

        nodes.start("A", ["--hold-after", str(HOLD_AFTER)])
        nodes.start("B", ["--hold-after", str(HOLD_AFTER)])
        ready = lambda: all(os.path.exists(os.path.join(out, f"ready-{r}")) for r in range(2 * NPROC))  # noqa: E731
        wait_for("every rank's step to be saved and replicated", ready, 150, nodes)
        replicated = {t: [e["step"] for e in nodes.events(t, "checkpoint_replicated")] for t in ("A", "B")}
        assert all(HOLD_AFTER in s for s in replicated.values()), replicated
        to = {t: [x for e in nodes.events(t, "checkpoint_replicated") for x in e["to"]] for t in ("A", "B")}
        assert all(x.startswith(hosts["B" if t == "A" else "A"][1] + ":") for t in to for x in to[t]), \
            f"a replica did not go to the other host's address: {to}"
        nodes.kill("B")  # its workers and its /dev/shm (the mount namespace's tmpfs) go with it
        nodes.start("C", ["--hold-after", str(HOLD_AFTER)])
        for tag in ("A", "C"):
            assert nodes.wait(tag, 180) == 0, nodes.logs()

        # Every rank of the new attempt resumed from the step held before the kill, B's ranks from A's replica. The
        # new round's restart count depends on how A saw B go: 0 when as a membership change (its workers rewrite
        # the first round's loaded-0-<rank> files, which said "none"), 1 when A's workers failed first (their
        # barrier broke). Each rank's newest attempt counts.
        loaded = {rank: text for rank, (_, text) in newest_loaded(out).items()}
        assert loaded == {r: str(HOLD_AFTER) for r in range(2 * NPROC)}, \
            f"loaded after the kill: {loaded} ({sorted(os.listdir(out))})"
        fetched = nodes.events("C", "checkpoint_fetched")
        assert fetched and all("error" not in f and f["from"].startswith(hosts["A"][1] + ":") for f in fetched), \
            fetched
        assert all(f["step"] == HOLD_AFTER for f in fetched), fetched
        assert_same_final(ref, out, 2 * NPROC)
        print("ok: the spare loaded B's state from A's replica:", fetched)


def newest_loaded(out):
    """rank -> (attempt, what ck.load() returned) of each rank's newest attempt (workers' loaded-<attempt>-<rank>)."""
    newest = {}
    for path in glob.glob(os.path.join(out, "loaded-*-*")):
        attempt, rank = (int(x) for x in os.path.basename(path).split("-")[1:3])
        if attempt >= newest.get(rank, (-1, ""))[0]:
            with open(path) as f:
                newest[rank] = (attempt, f.read())
    return newest


def status_of(nodes, tag, logs, *flags):
    """`ctrun --status [flags] LOGS` run on the node's host (its live view listens on that host's 127.0.0.1)."""
    r = subprocess.run(["ip", "netns", "exec", nodes.hosts[tag][0], CTRUN, "--status", *flags, logs],
                       capture_output=True, text=True, timeout=30)
    return r.stdout if r.returncode == 0 else ""


def check_every_node_in_status(nodes, logs):
    """While every rank of the uninterrupted run waits after its save of PAUSE_AFTER: group rank 0's `ctrun --status`
    (node A's) names node B with B's held steps and B's copy of its newest step to A, in JSON and in text."""
    ready = lambda: all(os.path.exists(os.path.join(nodes.out, f"ready-{r}")) for r in range(2 * NPROC))  # noqa
    wait_for("every rank to save step %d" % PAUSE_AFTER, ready, 150, nodes)

    def b_published():
        text = status_of(nodes, "A", logs, "--json")
        c = json.loads(text).get("checkpoints") if text else None
        b = [n for n in (c or {}).get("nodes", []) if n["group_rank"] == 1]
        done = b and b[0].get("newest_step") == PAUSE_AFTER and b[0].get("replicated_step") == PAUSE_AFTER
        return c, b[0] if done else None

    wait_for("node A's --status --json to show node B's step, copied to A", lambda: b_published()[1], 60, nodes)
    own, b = b_published()
    assert own["newest_step"] == PAUSE_AFTER and [n["group_rank"] for n in own["nodes"]] == [1], own
    assert b["published"] and b["on"] and b["oldest_step"] == PAUSE_AFTER - 1, b
    assert b["bytes"] >= NPROC * 2 * (4 << 20) and b["limit_bytes"] > 0 and b["replicas"] == 1, b
    text = status_of(nodes, "A", logs)
    line = next((x for x in text.splitlines() if x.strip().startswith("node 1:")), "")
    assert f"newest step every local rank holds {PAUSE_AFTER}, oldest held {PAUSE_AFTER - 1}" in line, text
    assert f"replicated step {PAUSE_AFTER}, 0 step(s) behind" in line, text
    assert "checkpoints on this node: newest step every local rank holds %d" % PAUSE_AFTER in text, text
    # Node B's own view names only its own node.
    b_view = status_of(nodes, "B", logs + ".B", "--json")
    assert b_view and "nodes" not in json.loads(b_view)["checkpoints"], b_view
    open(os.path.join(nodes.out, "release"), "w").close()
    print("ok: node A's --status:", line.strip())


def test_static_nodes():
    """The static backend (torchrun's default: --nnodes 2, --node-rank, node A's agent serving the one store at
    --master-addr), two hosts as in test_spare_loads_replica.
    - The uninterrupted run pauses after step PAUSE_AFTER: group rank 0's `ctrun --status` (text and JSON) has a
      line for node B with its held steps, bytes and replication.
    - Kill and resume: rank KILL_RANK (on node B) SIGKILLs itself once every rank saved step KILL_AFTER; B's agent
      restarts its workers, A's when theirs fail on the broken collective, the nodes agree again on what they hold
      through the same store (the static round never changes), and every rank of attempt 1 loads step KILL_AFTER
      from its own node's memory. The final parameters equal the uninterrupted run's bit for bit."""
    with job_hosts("ctcks", ("A", "B")) as (hosts, ref, out, runs):
        logs = os.path.join(ref, "logs")
        ref_nodes = Nodes(ref, hosts, RDZV_PORT, static=True)
        runs.append(ref_nodes)
        for tag in ("A", "B"):
            ref_nodes.start(tag, ["--pause-after", str(PAUSE_AFTER)],
                            ["--log-dir", logs if tag == "A" else logs + ".B"])
        check_every_node_in_status(ref_nodes, logs)
        for tag in ("A", "B"):
            assert ref_nodes.wait(tag, 180) == 0, ref_nodes.logs()

        nodes = Nodes(out, hosts, RDZV_PORT + 1, static=True)
        runs.append(nodes)
        # No replicas: each node's record of this attempt is then the only one that says what its ranks hold, so an
        # agent that read the other node's record of attempt 0 (nothing held yet) would resume from no step at all.
        for tag in ("A", "B"):
            nodes.start(tag, ["--kill-rank", str(KILL_RANK), "--kill-after", str(KILL_AFTER)],
                        ["--checkpoint-replicas", "0"])
        for tag in ("A", "B"):
            assert nodes.wait(tag, 180) == 0, nodes.logs()
        loaded = newest_loaded(out)
        assert loaded == {r: (1, str(KILL_AFTER)) for r in range(2 * NPROC)}, \
            f"(attempt, step) each rank loaded last: {loaded}, not (1, {KILL_AFTER})\n{nodes.logs()}"
        first = {r: open(os.path.join(out, f"loaded-0-{r}")).read() for r in range(2 * NPROC)}
        assert first == {r: "none" for r in range(2 * NPROC)}, first
        for tag in ("A", "B"):
            held = {e["restart_count"]: e["resume_step"] for e in nodes.events(tag, "checkpoint_held")}
            assert held == {0: None, 1: KILL_AFTER}, f"node {tag}'s checkpoint_held: {held}\n{nodes.logs()}"
        assert_same_final(ref, out, 2 * NPROC)
        print("ok: static backend, both nodes restarted, every rank loaded step", KILL_AFTER,
              "and the parameters equal the uninterrupted run's")


if __name__ == "__main__":
    globals()["test_" + sys.argv[1]]()
