#!/usr/bin/env python3
"""PyTorch 2.6's own distributed_test.py on backend "ctrun": tests/comm/torch/run_dist_suite.py (the same driver
as for torch 1.13) run by the torch 2.6 chroot's python3, with the ctrun_torch module that `make test` built
against torch 2.6 (build-torch2/python).

usage: run_dist_suite26.py [--timeout S] [--build-dir DIR] [run_dist_suite.py ARGS...]
  e.g. run_dist_suite26.py --backend ctrun --subset p2p_collectives --shard 1/4
       run_dist_suite26.py --gloo-gated --subset gloo_gated
       run_dist_suite26.py --backend gloo --subset p2p_collectives --json build/x.json   (reference run)
A --json path is written by the chroot's python: it must lie inside the repository (bind-mounted at its own path).
Runs on the host (any python3, no torch). Exit: run_dist_suite.py's (0 all passed or skipped, 1 a failure),
1 also when the module is missing or stale or the suite ran past --timeout, 77 when the chroot cannot be made
here (the reason is printed).
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run_torch2_tests as t2  # noqa: E402  (skip rules, module check, chroot environment)

SUITE = os.path.join(t2.REPO, "tests", "comm", "torch", "run_dist_suite.py")


def main(argv):
    timeout, build_dir = 1400.0, os.path.join(t2.REPO, "build-torch2")
    while argv and argv[0] in ("--timeout", "--build-dir"):
        if argv[0] == "--timeout":
            timeout = float(argv[1])
        else:
            build_dir = os.path.abspath(argv[1])
        argv = argv[2:]
    reason = t2.skip_reason()
    if reason:
        print(f"SKIP: {reason}", flush=True)
        return t2.SKIP
    problem = t2.module_problem(build_dir)
    if problem:
        print(f"FAIL: {problem}", flush=True)
        return 1
    # TEMP_DIR (the suite's barrier files and FileStores) inside the repository, which the chroot sees, and
    # per run: several shards and clones run at once.
    os.makedirs(os.path.join(build_dir, "tmp"), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="dist_suite-", dir=os.path.join(build_dir, "tmp"))
    env = t2.chroot_env({"PYTHONPATH": os.path.join(build_dir, "python"), "TEMP_DIR": tmp, "USE_LIBUV": "0",
                         "GLOO_SOCKET_IFNAME": "lo", "PYTHONWARNINGS": "ignore"})
    env.pop("BACKEND", None)  # run_dist_suite.py's default ("ctrun") or its --backend
    t0 = time.time()
    # its own session: on timeout or a signal the whole tree (torch2-env.sh, chroot, python3, the spawned ranks)
    # is stopped, and torch2-env.sh then undoes its mounts
    p = subprocess.Popen([t2.CHROOT_PY, SUITE] + argv, env=env, start_new_session=True)

    def stop(signum=None, _frame=None):
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        if signum is not None:
            shutil.rmtree(tmp, ignore_errors=True)
            sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        rc = p.wait(timeout)
    except subprocess.TimeoutExpired:
        print(f"FAIL: the suite ran past {timeout:.0f} s; stopped", flush=True)
        stop()
        rc = 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        t2.reclaim_leaked_mounts()
    if rc == t2.SKIP:  # torch or the module did not import inside: with a module checked above, a failure
        print("FAIL: run_dist_suite.py skipped inside the chroot (torch or ctrun_torch did not import)", flush=True)
        rc = 1
    print(f"torch 2.6 dist suite {' '.join(argv)}: exit {rc} in {time.time() - t0:.0f} s", flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
