"""In-memory checkpoints (agent/checkpoint/, ctrun_torch.checkpoint) under the real ctrun with torch 1.13 workers.
Usage: checkpoint_test.py CASE. Environment: CTRUN_BIN, CTRUN_TORCH_PYTHON (runs the workers; this script runs
under it too, to compare tensors), CTRUN_PYTHON_DIR (<build>/python), CTRUN_SOURCE_DIR. Exit 77 (skip) without
torch."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
WORKERS = os.path.join(HERE, "workers")
CTRUN = os.environ["CTRUN_BIN"]
PYTHON = os.environ["CTRUN_TORCH_PYTHON"]
STEPS, KILL_AFTER, RANKS = 6, 3, 4

try:
    import torch
except ImportError:
    print("skipped: no torch in", sys.executable)
    sys.exit(77)

from final_params import assert_same_final  # noqa: E402  (beside this script)


def ctrun(args, out_dir, timeout=150):
    """Runs ctrun to its end; returns (exit code, stderr), and leaves the event log in out_dir/events.jsonl."""
    env = dict(os.environ, PYTHON_EXEC=PYTHON)
    cmd = [CTRUN, "--standalone", "--event-log", os.path.join(out_dir, "events.jsonl")] + args
    global LAST_CTRUN_PID
    with subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as p:
        LAST_CTRUN_PID = p.pid
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            sys.stderr.write(err[-6000:])
            raise
    sys.stdout.write(out[-3000:])
    sys.stderr.write(err[-6000:])
    return p.returncode, err


LAST_CTRUN_PID = None  # the pid of the ctrun that ctrun() ran last: its checkpoint directory is named for it


def events(out_dir, name):
    with open(os.path.join(out_dir, "events.jsonl")) as f:
        return [e for e in map(json.loads, f) if e["event"] == name]


def loaded(out_dir, attempt):
    return [open(os.path.join(out_dir, f"loaded-{attempt}-{r}")).read() for r in range(RANKS)]


def train(out_dir, extra_args, ctrun_args=()):
    code, err = ctrun(list(ctrun_args) + ["--nproc-per-node", str(RANKS), "--max-restarts", "1",
                                          os.path.join(WORKERS, "train.py"), out_dir, str(STEPS)] + extra_args,
                      out_dir)
    assert code == 0, f"ctrun exited {code}"
    return err




def no_directory_left(out_dir):
    start = events(out_dir, "agent_start")
    assert start, "no agent_start event"
    held = events(out_dir, "checkpoint_held")
    assert held, "no checkpoint_held event"
    # The job's directory went with its agent. Only this job's is checked: a copy of the suite running beside this
    # one may have just SIGKILLed a ctrun of its own, whose directory waits for the next ctrun's sweep.
    mine = f"/dev/shm/ctrun-checkpoint-{LAST_CTRUN_PID}"
    assert not os.path.exists(mine), f"{mine} outlived its ctrun"


def kill_resume(ctrun_args=()):
    with tempfile.TemporaryDirectory() as ref, tempfile.TemporaryDirectory() as out:
        train(ref, [], ctrun_args)
        err = train(out, ["--kill-rank", "2", "--kill-after", str(KILL_AFTER)], ctrun_args)
        assert loaded(out, 0) == ["none"] * RANKS, loaded(out, 0)
        assert loaded(out, 1) == [str(KILL_AFTER)] * RANKS, f"attempt 1 loaded {loaded(out, 1)}, not {KILL_AFTER}"
        assert f"the next attempt can resume from step {KILL_AFTER}" in err, "no resume line"
        commits = events(out, "checkpoint_commit")
        # Attempt 0: steps 0..KILL_AFTER by every rank (the killed one too: it dies after its save); attempt 1 the rest.
        assert len(commits) == RANKS * (KILL_AFTER + 1) + RANKS * (STEPS - KILL_AFTER - 1), len(commits)
        loads = [e["step"] for e in events(out, "checkpoint_load")]
        assert loads == [None] * RANKS + [KILL_AFTER] * RANKS, loads
        assert_same_final(ref, out, RANKS)
        no_directory_left(out)
        print("ok: attempt 1 loaded step", KILL_AFTER, "and the parameters equal the uninterrupted run's")


def test_kill_resume():
    kill_resume()


def test_kill_resume_preload():
    kill_resume(["--preload", "torch"])


def test_torn_save():
    with tempfile.TemporaryDirectory() as ref, tempfile.TemporaryDirectory() as out:
        train(ref, [])
        train(out, ["--kill-rank", "1", "--kill-after", str(KILL_AFTER), "--torn-save"])
        # Rank 1 died half-way through its save of KILL_AFTER: the step every rank completed is the one before.
        assert loaded(out, 1) == [str(KILL_AFTER - 1)] * RANKS, loaded(out, 1)
        torn = [e["torn_saves_removed"] for e in events(out, "checkpoint_held")]
        assert torn == [0, 1], f"the torn save was not removed before attempt 1: {torn}"
        assert_same_final(ref, out, RANKS)
        print("ok: every rank loaded step", KILL_AFTER - 1, "after a save torn by SIGKILL")


def test_failure_summary():
    """No restarts left: the summary names the step every rank held (it goes with the run in phase 1)."""
    with tempfile.TemporaryDirectory() as out:
        code, err = ctrun(["--nproc-per-node", str(RANKS), os.path.join(WORKERS, "train.py"), out, str(STEPS),
                           "--kill-rank", "2", "--kill-after", str(KILL_AFTER)], out)
        assert code == 1, f"ctrun exited {code}"
        assert f"checkpoint: every rank of this node held step {KILL_AFTER} in memory" in err, "no resume step"
        no_directory_left(out)
        print("ok: the failure summary names step", KILL_AFTER)


def wait_for(what, fn, timeout=60):
    deadline = time.monotonic() + timeout
    while True:
        got = fn()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.1)


def metric(text, name):
    """The unlabelled sample `name` of an exposition, or None."""
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == name:
            return float(parts[1])
    return None


def test_visible():
    """A running job holding steps 2 and 3 (2 ranks, 8 MiB extra each): `ctrun --status` (text and JSON) and /metrics
    show the newest and oldest held step, the bytes held and the limit; /metrics passes promtool when it is there."""
    ranks, pause = 2, 3
    with tempfile.TemporaryDirectory() as out:
        logs = os.path.join(out, "logs")
        env = dict(os.environ, PYTHON_EXEC=PYTHON)
        cmd = [CTRUN, "--standalone", "--event-log", os.path.join(out, "events.jsonl"), "--log-dir", logs,
               "--metrics-port", "0", "--checkpoint-memory", "1G", "--nproc-per-node", str(ranks),
               os.path.join(WORKERS, "train.py"), out, str(STEPS), "--pause-after", str(pause)]
        with subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) as p:
            try:
                wait_for("every rank paused after its save",
                         lambda: all(os.path.exists(os.path.join(out, f"ready-{r}")) for r in range(ranks)), 120)

                def status(*flags):
                    r = subprocess.run([CTRUN, "--status", *flags, logs], capture_output=True, text=True, timeout=30)
                    return r.stdout if r.returncode == 0 else ""

                def held_json():
                    text = status("--json")
                    c = json.loads(text).get("checkpoints") if text else None
                    return c if c and c["newest_step"] == pause else None

                c = wait_for("--status --json to show the held step", held_json)
                assert c["oldest_step"] == pause - 1, c  # two steps kept per rank
                assert c["limit_bytes"] == 1 << 30, c
                # Each rank holds two snapshots of at least its 8 MiB extra tensor.
                assert c["bytes"] >= ranks * 2 * 8 << 20, c
                assert c["replicas"] == 0 and c["on"], c
                text = status()
                assert f"newest step every local rank holds {pause}, oldest held {pause - 1}" in text, text
                assert "(--checkpoint-memory)" in text and "1.0 GiB" in text, text

                url = wait_for("the metrics event", lambda: [e["url"] for e in events(out, "metrics")])[0]

                def scrape():
                    with urllib.request.urlopen(url, timeout=10) as r:
                        body = r.read().decode()
                    return body if metric(body, "ctrun_checkpoint_newest_step") == pause else None

                body = wait_for("/metrics to show the held step", scrape)
                assert metric(body, "ctrun_checkpoint_oldest_step") == pause - 1, body
                assert metric(body, "ctrun_checkpoint_bytes") >= ranks * 2 * 8 << 20, body
                assert metric(body, "ctrun_checkpoint_limit_bytes") == 1 << 30, body
                assert metric(body, "ctrun_checkpoint_replication_lag_steps") is None, "no replicas on one node"
                if shutil.which("promtool"):
                    r = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True, text=True,
                                       timeout=60)
                    assert r.returncode == 0, f"promtool check metrics failed:\n{r.stdout}{r.stderr}"
                else:
                    print("note: no promtool here; the exposition was not checked by it")
                open(os.path.join(out, "release"), "w").close()
                _, err = p.communicate(timeout=120)
            except BaseException:
                p.kill()
                _, err = p.communicate()
                sys.stderr.write(err[-6000:])
                raise
        assert p.returncode == 0, f"ctrun exited {p.returncode}:\n{err[-6000:]}"
        commits = events(out, "checkpoint_commit")
        assert len(commits) == ranks * STEPS, f"{len(commits)} commit events, not one per rank and step"
        print("ok: --status and /metrics showed steps", pause - 1, "to", pause, "and", c["bytes"], "bytes held")


def test_bad_input():
    with tempfile.TemporaryDirectory() as out:
        code, _ = ctrun(["--nproc-per-node", "1", "--checkpoint-memory", "2.5M", os.path.join(WORKERS, "misuse.py")],
                        out)
        assert code == 0, f"misuse.py failed ({code})"
        refused = events(out, "checkpoint_refused")
        assert len(refused) == 3, refused  # two over the limit, one unpicklable
    with tempfile.TemporaryDirectory() as out:
        code, err = ctrun(["--nproc-per-node", "1", "--checkpoint-memory", "0", os.path.join(WORKERS, "misuse.py")],
                          out)
        assert code != 0 and "--checkpoint-memory 0" in err, "checkpoints off without saying why"
    # Outside ctrun: plain python.
    env = dict(os.environ, PYTHONPATH=os.environ["CTRUN_PYTHON_DIR"])
    for k in list(env):
        if k.startswith("CTRUN_CHECKPOINT"):
            del env[k]
    p = subprocess.run([PYTHON, "-c", "import ctrun_torch.checkpoint as ck; ck.save({}, 0)"], env=env,
                       stderr=subprocess.PIPE, text=True, timeout=60)
    assert p.returncode != 0 and "needs workers started by ctrun" in p.stderr, p.stderr
    print("ok: outside ctrun:", p.stderr.strip().splitlines()[-1])
    # A worker in another mount namespace with a /dev/shm of its own (a container of its own) sees no checkpoint
    # directory: its first save says so (not a FileNotFoundError deep inside, "cannot pickle code objects" under DCP).
    if os.geteuid() == 0 and shutil.which("unshare"):
        save = f"import sys; sys.path.insert(0, {os.environ['CTRUN_PYTHON_DIR']!r}); import torch; " \
               "import ctrun_torch.checkpoint as ck; ck.save({'x': torch.zeros(1)}, 0)"
        worker = ["unshare", "-m", "--propagation", "private", "sh", "-c",
                  'mount -t tmpfs ctrun-test-own-shm /dev/shm && exec "$@"', "sh", PYTHON, "-c", save]
        with tempfile.TemporaryDirectory() as out:
            code, err = ctrun(["--nproc-per-node", "1", "--no-python"] + worker, out)
            assert code != 0 and "cannot see its agent's checkpoint directory" in err, err
            assert "FileNotFoundError" not in err, err
        print("ok: a worker in another mount namespace is told so")


def test_load_into():
    """ck.load() and ck.load(into=obj): bit for bit, tensors the caller owns, a different layout refused."""
    with tempfile.TemporaryDirectory() as out:
        code, _ = ctrun(["--nproc-per-node", "1", os.path.join(WORKERS, "load_into.py")], out)
        assert code == 0, f"load_into.py failed ({code})"
        loads = events(out, "checkpoint_load")
        assert len(loads) == 5 and all(e["step"] in (5, 6) for e in loads), loads
        print("ok: load and load(into=)")


def test_load_pages():
    """ck.load() into new tensors over a file the rank no longer needs (workers/load_pages.py)."""
    with tempfile.TemporaryDirectory() as out:
        code, _ = ctrun(["--nproc-per-node", "1", os.path.join(WORKERS, "load_pages.py")], out)
        assert code == 0, f"load_pages.py failed ({code})"
        print("ok: load into taken pages")


def test_doc_example():
    """docs/checkpoint.md's example as written (workers/doc_example.py reads it from the doc) under the command the
    doc gives: rank 2 SIGKILLed from outside once it saved step 50; every rank of the next attempt loads the same
    step, and the final parameters and optimizer state equal an uninterrupted run's bit for bit."""
    import signal
    import threading

    doc = os.path.join(os.environ["CTRUN_SOURCE_DIR"], "docs", "checkpoint.md")
    args = ["--nproc-per-node", str(RANKS), "--max-restarts", "3", os.path.join(WORKERS, "doc_example.py"), doc]
    with tempfile.TemporaryDirectory() as ref, tempfile.TemporaryDirectory() as out:
        code, _ = ctrun(args + [ref], ref)
        assert code == 0, f"the uninterrupted run exited {code}"
        killed = []

        def kill_rank_2():  # once rank 2's commit of step 50 or later is in the event log
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and not killed:
                try:
                    log = [json.loads(line) for line in open(os.path.join(out, "events.jsonl")) if line.strip()]
                except (FileNotFoundError, json.JSONDecodeError):
                    log = []
                pid = [e["pid"] for e in log if e["event"] == "worker_start" and e["rank"] == 2
                       and e["restart_count"] == 0]
                if pid and any(e["event"] == "checkpoint_commit" and e["rank"] == 2 and e["step"] >= 50 for e in log):
                    os.kill(pid[0], signal.SIGKILL)
                    killed.append(pid[0])
                time.sleep(0.005)

        killer = threading.Thread(target=kill_rank_2)
        killer.start()
        code, _ = ctrun(args + [out], out)
        killer.join()
        assert killed, "rank 2 was not killed: the job ended (or did not save step 50) first"
        assert code == 0, f"ctrun exited {code} after one failure with --max-restarts 3"
        assert len(events(out, "restart")) == 1, events(out, "restart")
        loads = [e for e in events(out, "checkpoint_load") if e["step"] is not None]
        assert len(loads) == RANKS and len({e["step"] for e in loads}) == 1 and loads[0]["step"] >= 49, loads
        for r in range(RANKS):
            a, b = (torch.load(os.path.join(d, f"final-{r}.pt")) for d in (ref, out))
            for k, v in a["model"].items():
                assert torch.equal(v.view(torch.int32), b["model"][k].view(torch.int32)), f"rank {r}: {k} differs"
            for i, st in a["optimizer"]["state"].items():
                for k, v in st.items():
                    assert torch.equal(v, b["optimizer"]["state"][i][k]), f"rank {r}: optimizer {i}.{k} differs"
        print(f"ok: the doc's example resumed from step {loads[0]['step']} on every rank; final state bit for bit")


def spilled_steps(directory):
    return sorted(int(n.split("-")[1]) for n in os.listdir(directory)
                  if n.startswith("step-") and os.path.exists(os.path.join(directory, n, "ctrun-step.json")))


def test_spill_resume():
    """--checkpoint-dir: a job's committed steps reach storage in the background; a new ctrun (the first one's
    memory gone with it) resumes from there, and ends at an uninterrupted run's parameters."""
    with tempfile.TemporaryDirectory() as ref, tempfile.TemporaryDirectory() as first, \
            tempfile.TemporaryDirectory() as second, tempfile.TemporaryDirectory() as spill:
        train(ref, [])
        dir_args = ["--checkpoint-dir", spill, "--checkpoint-dir-every", "1"]
        code, _ = ctrun(dir_args + ["--nproc-per-node", str(RANKS), os.path.join(WORKERS, "train.py"), first,
                                    str(KILL_AFTER + 1), "--wait-spill", spill], first)
        assert code == 0, f"the first job exited {code}"
        assert KILL_AFTER in spilled_steps(spill), f"step {KILL_AFTER} not in --checkpoint-dir: {spilled_steps(spill)}"
        assert len(spilled_steps(spill)) <= 2, f"more than two steps kept: {spilled_steps(spill)}"
        assert not [n for n in os.listdir(spill) if n.startswith(".tmp-")], os.listdir(spill)
        # The last copy may end with the job (the agent ends a spill still running then), but one was reported done.
        assert [e for e in events(first, "checkpoint_spilled") if e["ok"]], events(first, "checkpoint_spilled")
        # The files open without ctrun: plain torch.load.
        state = torch.load(os.path.join(spill, f"step-{KILL_AFTER}", "rank-2.pt"))
        assert set(state) == {"model", "optimizer", "extra"}, set(state)
        code, _ = ctrun(dir_args + ["--nproc-per-node", str(RANKS), os.path.join(WORKERS, "train.py"), second,
                                    str(STEPS)], second)
        assert code == 0, f"the second job exited {code}"
        assert loaded(second, 0) == [str(KILL_AFTER)] * RANKS, f"the new job loaded {loaded(second, 0)}"
        loads = events(second, "checkpoint_load")
        assert [e.get("source") for e in loads] == ["checkpoint-dir"] * RANKS, loads
        assert_same_final(ref, second, RANKS)
        print("ok: a new ctrun resumed from --checkpoint-dir's step", KILL_AFTER, "to the uninterrupted parameters")


def test_spill_killed():
    """A spill process killed in the middle of its copy loses nothing held in memory: the next due step is copied,
    and a worker failure after it still resumes from memory."""
    with tempfile.TemporaryDirectory() as ref, tempfile.TemporaryDirectory() as out, \
            tempfile.TemporaryDirectory() as spill:
        train(ref, [])
        err = train(out, ["--kill-spill-at", "0", "--kill-rank", "2", "--kill-after", str(KILL_AFTER),
                          "--wait-spill", spill], ["--checkpoint-dir", spill, "--checkpoint-dir-every", "1"])
        assert os.path.exists(os.path.join(out, "spill-killed")), "no spill process was killed"
        spilled = events(out, "checkpoint_spilled")
        assert spilled and not spilled[0]["ok"] and spilled[0]["exit"] == 128 + 9, spilled
        assert any(e["ok"] for e in spilled[1:]), f"no later step was copied: {spilled}"
        assert "the spill process of step 0 failed (killed by signal 9)" in err, "the failed spill was not reported"
        assert loaded(out, 1) == [str(KILL_AFTER)] * RANKS, f"attempt 1 loaded {loaded(out, 1)}"
        assert STEPS - 1 in spilled_steps(spill), spilled_steps(spill)
        assert_same_final(ref, out, RANKS)
        print("ok: the killed spill lost nothing; later steps were copied and attempt 1 resumed from memory")


def test_spill_bad_dir():
    """An unusable --checkpoint-dir is a usage error at start (exit 2), saying why."""
    with tempfile.TemporaryDirectory() as out:
        afile = os.path.join(out, "a-file")
        open(afile, "w").close()
        for bad in (afile, os.path.join(afile, "below"), "/proc/ctrun-no-such-dir"):
            code, err = ctrun(["--nproc-per-node", "1", "--checkpoint-dir", bad, "--", "-c", "pass"], out)
            assert code == 2, f"--checkpoint-dir {bad}: exit {code}"
            assert "--checkpoint-dir" in err and bad in err, err
    env = dict(os.environ, PYTHONPATH=os.environ["CTRUN_PYTHON_DIR"])
    p = subprocess.run([PYTHON, "-c", "import ctrun_torch.checkpoint as ck; ck.MemoryWriter()"], env=env,
                       stderr=subprocess.PIPE, text=True, timeout=60)
    has_dcp = subprocess.run([PYTHON, "-c", "import torch.distributed.checkpoint"], capture_output=True).returncode == 0
    if not has_dcp:
        assert p.returncode != 0 and "needs torch.distributed.checkpoint" in p.stderr, p.stderr
        print("ok: on this torch, ck.MemoryWriter() says:", p.stderr.strip().splitlines()[-1])
    print("ok: bad --checkpoint-dir values exit 2")


def test_contract_names():
    """The Python side repeats the agent's names (common/worker_env.hpp, agent/checkpoint/layout.hpp)."""
    src = os.environ["CTRUN_SOURCE_DIR"]
    sys.path.insert(0, os.path.join(src, "agent", "checkpoint", "python"))
    import checkpoint._contract as c  # noqa: E402  (the source tree's copy)

    env_hpp = open(os.path.join(src, "common", "worker_env.hpp")).read()
    layout_hpp = open(os.path.join(src, "agent", "checkpoint", "layout.hpp")).read()
    for cpp, py in [("kCheckpointDir", c.ENV_DIR), ("kCheckpointMemory", c.ENV_MEMORY),
                    ("kCheckpointStore", c.ENV_STORE), ("kCheckpointKeys", c.ENV_KEYS), ("kCheckpointListed", c.ENV_LISTED), ("kCheckpointOff", c.ENV_OFF),
                    ("kCheckpointSpillDir", c.ENV_SPILL),
                    ("kCheckpointReplicas", c.ENV_REPLICAS)]:
        assert f'{cpp} = "{py}"' in env_hpp, f"{cpp} != {py}"
    for cpp, py in [("kLockFile", c.LOCK_FILE), ("kNoticeSocket", c.NOTICE_SOCKET), ("kRankPrefix", c.RANK_PREFIX),
                    ("kStepPrefix", c.STEP_PREFIX), ("kStepSuffix", c.STEP_SUFFIX),
                    ("kPartialPrefix", c.PARTIAL_PREFIX), ("kSpareFile", c.SPARE_FILE),
                    ("kSpillPrefix", c.SPILL_PREFIX),
                    ("kReplicatedFile", c.REPLICATED_FILE), ("kReplicaPrefix", c.REPLICA_PREFIX)]:
        assert f'{cpp} = "{py}"' in layout_hpp, f"{cpp} != {py}"
    assert f"kKeptSteps = {c.KEPT_STEPS};" in layout_hpp
    # The digest trailer (agent/checkpoint/snapshot_digest.hpp, written by _snapshot.py).
    import checkpoint._snapshot as snap  # noqa: E402
    digest_hpp = open(os.path.join(src, "agent", "checkpoint", "snapshot_digest.hpp")).read()
    digest_cpp = open(os.path.join(src, "agent", "checkpoint", "snapshot_digest.cpp")).read()
    assert f"kTrailerBytes = {snap.TRAILER_BYTES};" in digest_hpp
    assert snap.DIGEST_CHUNK == 16 << 20 and "kDigestChunk = 16 << 20;" in digest_hpp
    assert "{" + ", ".join(f"'{ch}'" for ch in snap.TRAILER_MAGIC.decode()) + "}" in digest_cpp
    print("ok: names agree")


def run_progress_job(out, mode, max_restarts, without_progress):
    """progress.py on 2 ranks: (exit code, stderr, restart counts that ran on every rank)."""
    code, err = ctrun(["--nproc-per-node", "2", "--max-restarts", str(max_restarts), "--stop-without-progress",
                       str(without_progress), os.path.join(WORKERS, "progress.py"), out, mode], out, timeout=240)
    ran = sorted({int(n.split("-")[1]) for n in os.listdir(out) if n.startswith("attempt-")})
    return code, err, ran


def test_no_progress_stops():
    """Every attempt fails before committing a step newer than the first attempt's: with restarts left, ctrun
    stops after the first attempt (which made step 0: progress) and 2 restarts without progress, exit 3."""
    with tempfile.TemporaryDirectory() as out:
        code, err, ran = run_progress_job(out, "stuck", max_restarts=10, without_progress=2)
        assert code == 3, f"ctrun exited {code}, not 3"
        # Attempt 0 made step 0 (progress); attempts 1, 2, 3 made none: the third failure without progress stops.
        assert ran == [0, 1, 2, 3], ran
        assert "stopping instead of restarting: 3 failed attempt(s) in a row (2 restart(s)) made no progress " \
               "(no checkpoint step newer than 0" in err, "no reason given"
        assert "Root Cause" in err, "no failure summary"
        stop = events(out, "no_progress")
        assert stop == [dict(stop[0], restarts_without_progress=2, resume_step=0, exit_code=3)], stop
        restarts = [e["attempts_without_progress"] for e in events(out, "restart")]
        assert restarts == [0, 1, 2], restarts
        assert events(out, "shutdown")[-1]["exit_code"] == 3
        print("ok: stopped after", len(ran), "attempts, exit 3")


def test_progress_keeps_restarting():
    """Every attempt commits a newer step before it fails: ctrun uses up --max-restarts as usual (exit 1)."""
    with tempfile.TemporaryDirectory() as out:
        code, err, ran = run_progress_job(out, "progress", max_restarts=3, without_progress=1)
        assert code == 1, f"ctrun exited {code}, not 1"
        assert ran == [0, 1, 2, 3], ran
        steps = [open(os.path.join(out, f"attempt-{a}-0")).read() for a in ran]
        assert steps == ["none", "0", "1", "2"], steps
        assert not events(out, "no_progress"), "stopped for no progress although every attempt made some"
        assert "stopping instead of restarting" not in err
        print("ok: restarted", len(ran) - 1, "times with progress, then the usual failure")


def test_collectives_are_progress():
    """A job without checkpoints: progress is an attempt whose ranks got past the start-up (10 collectives of one
    group, backend "ctrun"). 30 all_reduces an attempt: it keeps restarting as usual (exit 1), also when the group
    was destroyed before the failure (its records gone); 2 an attempt: the
    first attempt and one restart without progress, and the next failure stops it (exit 3)."""
    with tempfile.TemporaryDirectory() as out:
        code, err, ran = run_progress_job(out, "collectives-30", max_restarts=2, without_progress=1)
        assert code == 1, f"ctrun exited {code}, not 1"
        assert ran == [0, 1, 2], ran
        assert not events(out, "no_progress"), "stopped for no progress although every attempt ran 30 collectives"
    with tempfile.TemporaryDirectory() as out:
        # The groups went (their progress slots freed) long before the failure, and the agent still counts them.
        code, err, ran = run_progress_job(out, "collectives-30-destroyed", max_restarts=1, without_progress=1)
        assert code == 1, f"ctrun exited {code}, not 1: {err[-2000:]}"
        assert ran == [0, 1], ran
        assert not events(out, "no_progress"), "the collectives of a destroyed group were not counted"
    with tempfile.TemporaryDirectory() as out:
        code, err, ran = run_progress_job(out, "collectives-2", max_restarts=10, without_progress=1)
        assert code == 3, f"ctrun exited {code}, not 3"
        assert ran == [0, 1], ran
        assert "collective(s) completed where 10 would count" in err, "no reason given"
        print("ok: collectives counted as progress; a job stuck in its start-up stopped after", len(ran), "attempts")


if __name__ == "__main__":
    globals()["test_" + sys.argv[1]]()
