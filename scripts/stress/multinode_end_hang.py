#!/usr/bin/env python3
"""Repeated: two c10d agents on one machine (127.0.0.2 hosts the rendezvous store, 127.0.0.3),
--max-restarts 1, the DDP-tutorial-style snapshot trainer (tests/integration/workers/snapshot_train.py); node B's
worker SIGKILLs itself mid-training, both groups restart and resume from the snapshot, training ends. Every run must
end with both agents exiting 0 within --timeout seconds. On a hang: gdb backtraces of every thread of the stuck
agent, its threads' wchan and its descriptors, into the run's directory (kept).

    scripts/stress/multinode_end_hang.py BUILD_DIR [--runs 20] [--timeout 120]

Prints one line per run and a count at the end; exits 1 if any run hung or failed.
"""
import argparse
import glob
import random
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
WORKER = os.path.join(ROOT, "tests", "integration", "workers", "snapshot_train.py")
sys.path.insert(0, os.path.join(ROOT, "tests", "common"))
from ports import reserve_port  # noqa: E402


def dump(pid, path):
    with open(path, "w") as f:
        for t in sorted(glob.glob(f"/proc/{pid}/task/*")):
            try:
                f.write(f"{t}: {open(t + '/comm').read().strip()} wchan={open(t + '/wchan').read()}\n")
            except OSError:
                pass
        f.write(subprocess.run(["ls", "-l", f"/proc/{pid}/fd"], capture_output=True, text=True).stdout)
        f.write(subprocess.run(["ss", "-tanp"], capture_output=True, text=True).stdout)
        f.write(subprocess.run(["gdb", "-batch", "-p", str(pid), "-ex", "thread apply all bt"], capture_output=True,
                               text=True, timeout=120).stdout)


def kill_b_worker(d, delay):
    """SIGKILLs node b's local rank 0 once it finished epoch 1 of its first attempt, `delay` s later."""
    deadline = time.monotonic() + 60
    while not glob.glob(os.path.join(d, "epoch.b.0.rc0.1")):
        if time.monotonic() > deadline:
            return
        time.sleep(0.02)
    time.sleep(delay)
    for pid in [int(p.rsplit(".", 1)[1]) for p in glob.glob(os.path.join(d, "pid.b.0.*"))]:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def one(build, n, timeout, python, keep, same_host, external):
    d = tempfile.mkdtemp(prefix=f"ctrun-endhang-{n}-")
    port = reserve_port()
    host = "127.0.0.1" if same_host else "127.0.0.2"
    common = ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"{host}:{port}", "--rdzv-id", f"endhang{n}",
              "--nnodes", "2", "--rdzv-conf", "join_timeout=60", "--max-restarts", "1", "--nproc-per-node", "2",
              "--monitor-interval", "0.2"]
    agents = {}
    for tag, addr in (("a", "127.0.0.2"), ("b", "127.0.0.3")):
        env = dict(os.environ, OUT_DIR=d, NODE_TAG=tag, PYTHON_EXEC=python, GLOO_SOCKET_IFNAME="lo",
                   CTRUN_LOG_LEVEL="debug")
        log = open(os.path.join(d, f"agent.{tag}.log"), "w")
        where = [] if same_host else ["--local-addr", addr]
        agents[tag] = subprocess.Popen([os.path.join(build, "bin", "ctrun"), *where, *common, WORKER,
                                        *([] if external else ["--die-on-tag", "b"])], stdout=log, stderr=subprocess.STDOUT, env=env,
                                       start_new_session=True)
    t0 = time.monotonic()
    if external:
        kill_b_worker(d, random.uniform(0, 0.4))
    codes, hung = {}, []
    for tag, p in agents.items():
        try:
            codes[tag] = p.wait(timeout=max(1, timeout - (time.monotonic() - t0)))
        except subprocess.TimeoutExpired:
            hung.append(tag)
    for tag in hung:
        dump(agents[tag].pid, os.path.join(d, f"hang.{tag}.txt"))
    for p in agents.values():
        if p.poll() is None:
            p.kill()
            p.wait()
    took = time.monotonic() - t0
    done = len(glob.glob(os.path.join(d, "done.*")))
    ok = not hung and codes == {"a": 0, "b": 0} and done == 4
    print(f"run {n}: {'ok' if ok else 'FAIL'} {took:.1f} s codes={codes} hung={hung} done={done}"
          + ("" if ok else f" dir={d}"), flush=True)
    if ok and not keep:
        subprocess.run(["rm", "-rf", d])
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--python", default=os.environ.get("CTRUN_TORCH_PYTHON", "/usr/bin/python3"))
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--external-kill", action="store_true", help="this script SIGKILLs node b's worker at a random "
                    "moment of its epoch 2 (default: the worker kills itself after epoch 2's barrier)")
    ap.add_argument("--same-host", action="store_true", help="no --local-addr: both agents are this host, the "
                    "endpoint 127.0.0.1 (the first agent to bind it hosts the store), as two torchrun commands")
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    good = sum(one(os.path.abspath(a.build), n, a.timeout, a.python, a.keep, a.same_host, a.external_kill) for n in range(1, a.runs + 1))
    print(f"{good}/{a.runs} runs clean")
    return 0 if good == a.runs else 1


if __name__ == "__main__":
    sys.exit(main())
