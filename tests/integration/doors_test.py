"""Closed doors (docs/security.md) with real ctrun agents on hosts of their own (network namespaces on a bridge the
test makes, each with a private /dev/shm, as tests/agent/checkpoint/two_nodes_test.py), torch 1.13 workers and the
job's secret in a file.

  strangers: while a two-node c10d job with a secret holds step 3, a process on a third host (no part of the job)
    dials every port of the job: the replication endpoints in their own frames (GET of every rank's step, a PUT of a
    forged step 10**9 with its commit), the rendezvous store with torch's own TCPStore client, and with a replay of a
    recorded genuine handshake, the workers' stores (the nodes' relays prove the secret for the workers); then a ctrun agent with another secret and one without
    any try to join the rendezvous. None gets a byte of state, a key or a place in the round: each is refused at its
    first bytes, both sides name the cause, and the job finishes with every rank's parameters bitwise equal to an
    undisturbed run's.
  corrupted_replica: the same job replicating every step; bytes of node A's replica of a rank of node B are flipped
    in A's memory; B is killed and a spare takes its place: the spare refuses the corrupted copy (its digest), every
    node learns it, and every rank resumes from the step before, which the agents say; the final parameters equal an
    undisturbed run's.

Exit 77 (skip) without torch or without network and mount namespaces. Everything made is removed by name or PID.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.environ["CTRUN_SOURCE_DIR"]
sys.path.insert(0, os.path.join(SOURCE, "tests", "agent", "checkpoint"))
sys.path.insert(0, os.path.join(SOURCE, "tests", "common"))
import two_nodes_test as tn  # noqa: E402  (Nodes, job_hosts, wait_for, newest_loaded; skips without torch)
from final_params import assert_same_final  # noqa: E402

STRANGER = os.path.join(SOURCE, "tests", "common", "stranger.py")
CTRUN, PYTHON = tn.CTRUN, tn.PYTHON
PAUSE, RANKS = 3, 2 * tn.NPROC


def secret_file(directory, name, text):
    path = os.path.join(directory, name)
    with open(path, "w") as f:
        f.write(text + "\n")
    os.chmod(path, 0o600)
    return path


def stranger(hosts, *args):
    """stranger.py run on host S: its JSON answer."""
    r = subprocess.run(["ip", "netns", "exec", hosts["S"][0], PYTHON, STRANGER, *args], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, f"stranger.py {args}: {r.stdout}\n{r.stderr}"
    return json.loads(r.stdout.strip().splitlines()[-1])


def outsider_agent(hosts, port, secret, out, name):
    """A ctrun agent on host S joining the job's rendezvous with `secret` (a file, or None): (exit code, output)."""
    cmd = ["ip", "netns", "exec", hosts["S"][0], CTRUN, "--local-addr", hosts["S"][1], "--nnodes", "2:3",
           "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{hosts['A'][1]}:{port}", "--rdzv-id", "ckrep",
           "--nproc-per-node", "1", "--no-python"]
    cmd += ["--secret-file", secret] if secret else []
    env = {k: v for k, v in os.environ.items() if k != "CTRUN_SECRET"}
    with open(os.path.join(out, f"outsider.{name}.log"), "w") as log:
        p = subprocess.run(cmd + ["true"], stdout=log, stderr=subprocess.STDOUT, env=env, timeout=120)
    with open(os.path.join(out, f"outsider.{name}.log")) as f:
        return p.returncode, f.read()


def reference_run(ref_nodes, secret):
    """The undisturbed run both cases compare with: nodes A and B with the secret, to the end."""
    for tag in ("A", "B"):
        ref_nodes.start(tag, [], secret)
    for tag in ("A", "B"):
        assert ref_nodes.wait(tag, 240) == 0, ref_nodes.logs()


def agent_log(nodes, tag):
    with open(os.path.join(nodes.out, f"agent.{tag}.log")) as f:
        return f.read()


def test_strangers():
    with tn.job_hosts("ctdor", ("A", "B", "S")) as (hosts, ref, out, runs):
        key = secret_file(out, "job.key", os.urandom(24).hex())
        wrong = secret_file(out, "other.key", os.urandom(24).hex())
        secret = ["--secret-file", key]
        ref_nodes, nodes = tn.Nodes(ref, hosts, tn.RDZV_PORT), tn.Nodes(out, hosts, tn.RDZV_PORT + 1)
        runs.extend([ref_nodes, nodes])
        reference_run(ref_nodes, secret)

        for tag in ("A", "B"):
            nodes.start(tag, ["--pause-after", str(PAUSE)], secret + ["--metrics-port", "0"])
        ready = lambda: all(os.path.exists(os.path.join(out, f"ready-{r}")) for r in range(RANKS))  # noqa: E731
        tn.wait_for(f"every rank to save step {PAUSE} and have it replicated", ready, 180, nodes)
        endpoints = {t: {x for e in nodes.events(t, "checkpoint_replicated") for x in e["to"]} for t in ("A", "B")}
        replication = sorted(endpoints["A"] | endpoints["B"])  # A's copies go to B's endpoint and B's to A's
        assert len(replication) == 2, endpoints

        seen = {}
        for endpoint in replication:
            for rank in range(RANKS):
                got = stranger(hosts, "frames", endpoint, str(rank), str(PAUSE))
                seen[f"{endpoint} rank {rank}"] = got
                assert not got["get_data"] and got["get_bytes"] <= 8, f"a stranger fetched: {got}"
                assert not got["put_ok"] and got["put_bytes"] <= 8, f"a stranger's push was taken: {got}"
        rdzv = (hosts["A"][1], str(tn.RDZV_PORT + 1))
        # torch 1.13's client reads no reply to a SET, and takes the 8-byte refusal for NUM_KEYS' answer: what it got
        # is that refusal and nothing else; the store kept nothing of it (listed by an agent's own client below).
        torch_client = stranger(hosts, "torch", *rdzv)
        refusal = int.from_bytes(b"CTRA\x01\x04\x01\x00", "little")
        assert torch_client.get("num_keys", refusal) == refusal, torch_client
        probe = stranger(hosts, "probe", *rdzv)
        assert probe["secret_required"] and probe["bytes"] == 8, probe
        # The workers' stores too (each agent's; group rank 0's is the job's): the nodes' store relays prove the
        # secret for their workers, so a client that dials MASTER_ADDR:MASTER_PORT itself is refused the same way.
        for tag in ("A", "B"):
            start = nodes.events(tag, "agent_start")[0]
            workers_store = (start["master_addr"], str(start["master_port"]))
            got = stranger(hosts, "torch", *workers_store)
            assert got.get("num_keys", refusal) == refusal, (tag, got)
            probe = stranger(hosts, "probe", *workers_store)
            assert probe["secret_required"] and probe["bytes"] == 8, (tag, probe)
        replay = stranger(hosts, "replay", *rdzv, key)
        assert replay["server_proved"] and replay["genuine_accepted"], replay  # the recording was genuine
        assert replay["new_server_nonce"] and not replay["replay_accepted"], replay
        assert replay["replay_bytes_after_verdict"] == 0, replay

        # HTTP: --metrics-port (on the node's address) serves metrics only; the live view, its stacks and the job's
        # page listen on the node's 127.0.0.1, which no other host reaches.
        metrics = nodes.events("A", "metrics")[0]
        paths = stranger(hosts, "http", hosts["A"][1], str(metrics["port"]), "/metrics", "/", "/stacks",
                         "/status.json", "/job")
        assert paths == {"/metrics": 200, "/": 404, "/stacks": 404, "/status.json": 404, "/job": 404}, paths
        listening = subprocess.run(["ip", "netns", "exec", hosts["A"][0], "ss", "-ltnpH"], capture_output=True,
                                   text=True, timeout=30).stdout
        agent_pid = f"pid={nodes.agents['A'].pid},"
        bound = [line.split()[3] for line in listening.splitlines() if agent_pid in line]
        assert any(b.startswith("127.0.0.1:") for b in bound), listening  # the live view
        assert all(b.startswith(("127.0.0.1:", hosts["A"][1] + ":")) for b in bound), bound

        listed = subprocess.run(["ip", "netns", "exec", hosts["A"][0], os.path.join(os.path.dirname(CTRUN), "ctstore"),
                                 "list", "--secret-file", key, "--endpoint", ":".join(rdzv)], capture_output=True,
                                text=True, timeout=60)
        assert listed.returncode == 0 and listed.stdout.strip(), listed.stdout + listed.stderr  # the job's keys
        assert "stranger" not in listed.stdout, listed.stdout

        code, text = outsider_agent(hosts, tn.RDZV_PORT + 1, wrong, out, "wrong")
        assert code != 0 and "does not hold this job's secret" in text, text
        code, text = outsider_agent(hosts, tn.RDZV_PORT + 1, None, out, "none")
        assert code != 0 and "requires the job's secret and this agent has none" in text, text

        open(os.path.join(out, "release"), "w").close()
        for tag in ("A", "B"):
            assert nodes.wait(tag, 240) == 0, nodes.logs()
        a, b = agent_log(nodes, "A"), agent_log(nodes, "B")
        s = hosts["S"][1]
        for tag, log in (("A", a), ("B", b)):
            assert f"refused the replication connection from {s}:" in log, f"node {tag} did not name {s}\n{log}"
        assert f"refused {s}:" in a and "another secret" in a and "sent no handshake" in a, a
        # Nothing the stranger sent was kept: every node's held steps stayed the job's own.
        for tag in ("A", "B"):
            for e in nodes.events(tag, "checkpoint_held"):
                steps = [s for per_rank in list(e["held"].values()) + list(e.get("replicas", {}).values())
                         for s in per_rank]
                assert all(s < tn.STEPS for s in steps), e
        assert_same_final(ref, out, RANKS)
        print("ok: strangers got nothing and changed nothing;", json.dumps(seen[replication[0] + " rank 0"]))


def test_corrupted_replica():
    with tn.job_hosts("ctdoc", ("A", "B", "C")) as (hosts, ref, out, runs):
        key = secret_file(out, "job.key", os.urandom(24).hex())
        secret = ["--secret-file", key]
        ref_nodes, nodes = tn.Nodes(ref, hosts, tn.RDZV_PORT), tn.Nodes(out, hosts, tn.RDZV_PORT + 1)
        runs.extend([ref_nodes, nodes])
        reference_run(ref_nodes, secret)

        held = ["--hold-after", str(tn.HOLD_AFTER), "--wait-each"]
        for tag in ("A", "B"):
            nodes.start(tag, held, secret)
        ready = lambda: all(os.path.exists(os.path.join(out, f"ready-{r}")) for r in range(RANKS))  # noqa: E731
        tn.wait_for("every rank's steps to be saved and replicated", ready, 180, nodes)
        # Node A's copy of rank 2 (a rank of node B) at the step every rank holds, changed in A's memory.
        rank, step = tn.NPROC, tn.HOLD_AFTER
        agent = nodes.agents["A"].pid
        replica = f"/dev/shm/ctrun-checkpoint-{agent}/replica-rank-{rank}/step-{step}.ckpt"
        flip = ("import os,sys; f=os.open(sys.argv[1], os.O_RDWR); n=os.fstat(f).st_size; "
                "b=bytearray(os.pread(f, 16, n//2)); b=bytes(x ^ 0xff for x in b); os.pwrite(f, b, n//2)")
        r = subprocess.run(["nsenter", "-t", str(agent), "-m", PYTHON, "-c", flip, replica], capture_output=True,
                           text=True, timeout=30)
        assert r.returncode == 0, f"cannot flip {replica}: {r.stderr}\n{nodes.logs()}"
        nodes.kill("B")
        nodes.start("C", held, secret)
        for tag in ("A", "C"):
            assert nodes.wait(tag, 240) == 0, nodes.logs()
        loaded = {rk: text for rk, (_, text) in tn.newest_loaded(out).items()}
        assert loaded == {r: str(step - 1) for r in range(RANKS)}, f"loaded after the kill: {loaded}\n{nodes.logs()}"
        c = agent_log(nodes, "C")
        assert "failed its check" in c and f"no intact copy of step {step} of rank {rank}" in c, c
        assert f"no intact copy of step {step} of rank {rank}" in agent_log(nodes, "A"), agent_log(nodes, "A")
        assert_same_final(ref, out, RANKS)
        print(f"ok: the corrupted copy of rank {rank} step {step} was refused; every rank resumed from {step - 1}")


if __name__ == "__main__":
    globals()["test_" + sys.argv[1]]()
