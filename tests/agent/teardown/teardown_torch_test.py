#!/usr/bin/env python3
"""A finished program is a finished job, with real torch (issue 42): the program of the issue (workers/fp16_ddp.py:
DDP with the fp16 compression hook on torch's own gloo, 3 ranks, a result file never closed) run again and again
under ctrun: every run must exit 0 with every rank's work done and its file complete, and every rank that aborted in
teardown ("terminate called without an active exception") must be said so, in ctrun's log (a warning quoting that
line) and in the event log (teardown_crash). Then the same program made to abort in every run (its `callback` mode)
proves the count on a run that surely aborts.

  teardown_torch_test.py torch113 [RUNS]                     torch 1.13 (CTRUN_TORCH_PYTHON), RUNS runs (20)
  teardown_torch_test.py torch26 [RUNS] --ctrun BIN           torch 2.6, the chroot of tests/torch2 (root)
Env: CTRUN_BIN (torch113), CTRUN_TORCH_PYTHON. Exit 0 pass, 1 fail, 77 skip (no torch; no chroot: the reason).

torch 2.6 runs in the chroot with the worker process being the chroot's python3 itself (workers/chroot_exec_python.sh
execs it: a record counts only when the worker process wrote it), while a `torch2_chroot.sh run` held by this test
keeps the chroot's mounts; the exit records are in a folder the chroot sees (CTRUN_EXIT_RECORD_ROOT), as its
/dev/shm is not the host's."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "workers", "fp16_ddp.py")
JOB_TIMEOUT = 240
SKIP = 77


def say(text):
    print(text, flush=True)


def one_job(ctrun, env, world, mode, tmp, runner):
    """One ctrun job; returns (ok, ranks that aborted in teardown, what went wrong). runner: what goes before the
    program on ctrun's command line (torch 2.6: no_libuv26.py, which runs it)."""
    d = tempfile.mkdtemp(dir=tmp)
    out, events = os.path.join(d, "out"), os.path.join(d, "events.jsonl")
    os.makedirs(out)
    cmd = [ctrun, "--standalone", f"--nproc-per-node={world}", "--tee", "3", "--log-dir", os.path.join(d, "logs"),
           "--event-log", events] + runner + [WORKER, out] + ([mode] if mode != "train" else [])
    try:
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=JOB_TIMEOUT)
    except subprocess.TimeoutExpired as e:
        return False, [], f"no end within {JOB_TIMEOUT} s\n{e.stdout}\n{e.stderr}"
    text = r.stdout + r.stderr
    crashed = []
    with open(events) as f:
        for line in f:
            e = json.loads(line)
            if e["event"] == "teardown_crash":
                crashed.append(e["rank"])
    # Ranks whose tee'd stderr says torch aborted ("[default<R>]:terminate called ...").
    aborted = sorted({int(line.split("]")[0].replace("[default", "")) for line in r.stderr.splitlines()
                      if line.startswith("[default") and "terminate called" in line})
    problems = []
    if r.returncode != 0:
        problems.append(f"exit {r.returncode}")
    if r.stdout.count(": done") != world:
        problems.append(f"{r.stdout.count(': done')}/{world} ranks did their work")
    for rank in range(world):
        path = os.path.join(out, f"result-{rank}.txt")
        content = open(path).read() if os.path.exists(path) else ""
        if not content.endswith("\nend\n"):
            problems.append(f"rank {rank}'s result is incomplete ({len(content)} bytes)")
    if "ChildFailedError" in text:
        problems.append("a failure summary")
    if not set(aborted) <= set(crashed):
        problems.append(f"ranks {aborted} aborted, teardown_crash events for {sorted(crashed)}")
    warned = r.stderr.count("then aborted in native teardown: SIGABRT, 'terminate called without an active exception'")
    if warned != len([c for c in crashed if c in aborted]):
        problems.append(f"{warned} warnings quote torch's line, {len(aborted)} ranks aborted")
    if problems:
        return False, crashed, "; ".join(problems) + "\n" + text[-6000:]
    return True, sorted(crashed), ""


def run_series(ctrun, env, runs, tmp, label, runner=()):
    t0 = time.time()
    failed = 0
    with_crash = 0
    crashes = 0
    for i in range(runs):
        ok, crashed, why = one_job(ctrun, env, 3, "train", tmp, list(runner))
        crashes += len(crashed)
        with_crash += bool(crashed)
        say(f"{label} run {i + 1}/{runs}: {'exit 0' if ok else 'FAILED'}"
            f"{', aborted in teardown (counted as exit 0): ranks ' + str(crashed) if crashed else ''}")
        if not ok:
            failed += 1
            say(why)
    ok, crashed, why = one_job(ctrun, env, 2, "callback", tmp, list(runner))
    say(f"{label} callback job (aborts in teardown every time): {'exit 0' if ok else 'FAILED'}, ranks aborted in "
        f"teardown and counted as exit 0: {crashed}")
    callback_failed = not ok or not crashed
    if callback_failed:
        say(why or "no rank aborted in teardown: the job that must abort did not")
    say(f"{label}: {runs - failed} of {runs} fp16-hook runs exit 0; {with_crash} of them had ranks abort in teardown "
        f"({crashes} rank(s), each said so and counted as exit 0); the callback job "
        f"{'FAILED' if callback_failed else 'passed'}; {time.time() - t0:.0f} s")
    return 1 if failed or callback_failed else 0


def torch113(runs):
    ctrun = os.environ["CTRUN_BIN"]
    python = os.environ.get("CTRUN_TORCH_PYTHON", "/usr/bin/python3")
    if subprocess.run([python, "-c", "import torch"], capture_output=True).returncode != 0:
        say(f"SKIP: {python} has no torch (apt-get install python3-torch)")
        return SKIP
    env = dict(os.environ, PYTHON_EXEC=python, GLOO_SOCKET_IFNAME="lo")
    env.pop("PYTHONPATH", None)
    tmp = tempfile.mkdtemp(prefix="teardown_torch113_")
    try:
        return run_series(ctrun, env, runs, tmp, "torch 1.13")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def torch26(runs, ctrun):
    sys.path.insert(0, os.path.join(HERE, "..", "..", "torch2"))
    import run_torch2_tests as t2

    reason = t2.skip_reason()
    if reason:
        say(f"SKIP: {reason}")
        return SKIP
    build = os.path.dirname(os.path.dirname(os.path.abspath(ctrun)))
    if not (build + "/").startswith(t2.REPO + "/"):
        say(f"SKIP: ctrun's build directory {build} is not under the repository, which the chroot sees")
        return SKIP
    tmp = tempfile.mkdtemp(prefix="teardown_torch26_", dir=build)  # the chroot sees it at the same path
    os.makedirs(os.path.join(tmp, "records"))
    # The chroot's mounts (/proc, /dev, the repository) held for the whole series by one run of the chroot's lock
    # wrapper; it ends when this test closes its stdin (or dies).
    holder = subprocess.Popen([t2.CHROOT_SH, "run", "/bin/sh", "-c", "echo ready; exec cat >/dev/null"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=t2.chroot_env())
    try:
        if holder.stdout.readline().strip() != "ready":
            say("FAIL: the chroot's mounts could not be held (torch2_chroot.sh run)")
            return 1
        env = dict(os.environ, PYTHON_EXEC=os.path.join(HERE, "workers", "chroot_exec_python.sh"),
                   CHROOT_DIR=t2.CHROOT_DIR, GLOO_SOCKET_IFNAME="lo",
                   CTRUN_EXIT_RECORD_ROOT=os.path.join(tmp, "records"))
        env.pop("PYTHONPATH", None)
        # Debian's 2.6 has no libuv: its TCPStores need use_libuv=False, which no_libuv26.py makes the default.
        return run_series(ctrun, env, runs, tmp, "torch 2.6", [os.path.join(t2.HERE, "no_libuv26.py")])
    finally:
        holder.stdin.close()
        try:
            holder.wait(timeout=60)
        except subprocess.TimeoutExpired:
            holder.kill()
        shutil.rmtree(tmp, ignore_errors=True)
        t2.reclaim_leaked_mounts()


def main():
    args = sys.argv[1:]
    which = args.pop(0)
    ctrun = None
    if "--ctrun" in args:
        i = args.index("--ctrun")
        ctrun = args[i + 1]
        del args[i:i + 2]
    runs = int(args[0]) if args else 20
    if which == "torch113":
        return torch113(runs)
    return torch26(runs, ctrun)


if __name__ == "__main__":
    sys.exit(main())
