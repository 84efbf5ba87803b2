#!/usr/bin/env python3
"""Real programs on torch 2.6 (ctest `torch2.programs`): tests/comm/torch's PyTorch tutorial programs
(tutorial_worker.py) and DDP (ddp_worker.py), unchanged, with 4 ranks in the torch 2.6 chroot:

  1. under ctrun, default group "gloo" (the reference run: the same programs on torch's own backend)
  2. under ctrun, default group "cpu:ctrun" (each program also compared with a gloo group of the same job)
  2b. under ctrun, default group "cpu:ctrun": any_source_sparse_worker.py (dist.recv without src, sparse
     all_reduce; each against gloo in the same job)
  3. under torch 2.6's own torchrun (torchrun26.py --standalone), tutorial_worker.py on backend "ctrun"
Each worker runs through no_libuv26.py (Debian's 2.6 has no libuv). A job passes when it exits 0 and every rank
printed its verdict line.

usage: run_programs26.py --ctrun BIN [--build-dir DIR] [--only gloo|cpu:ctrun|torchrun]
Runs on the host (any python3, no torch). Exit: 0 passed, 1 failed (or no up-to-date module), 77 skipped (the chroot
cannot be made here), with the reason.
"""
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run_ctrun_backend26 as rb  # noqa: E402  (the module's environment)
import run_torch2_tests as t2  # noqa: E402  (skip rules, chroot environment)

COMM_TORCH = os.path.join(t2.REPO, "tests", "comm", "torch")
NO_LIBUV = os.path.join(HERE, "no_libuv26.py")
WORLD = 4
JOB_TIMEOUT = 400  # 4 ranks importing torch in the chroot: ~20-60 s idle, minutes on a loaded 2-core machine
# what each worker prints per rank when it passed
VERDICT = {"tutorial_worker.py": r"^rank {r}: {b}: \d+ programs and \d+/\d+ all_reduce dtype x op equal to gloo",
           "ddp_worker.py": r"^rank {r}: {b}: DDP hook=fp16_compress: same parameters as gloo$",
           "any_source_sparse_worker.py": r"^rank {r}: any-source recv and sparse all_reduce ok$"}


def job(label, argv, env, worker, backend):
    t0 = time.time()
    # own session: on a timeout the whole tree (torch2-env.sh, chroot, python3 ranks) is stopped
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=JOB_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 15)
        try:
            out, err = p.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, 9)
            out, err = p.communicate()
        err += f"\n(stopped after {JOB_TIMEOUT} s)"
    pattern = VERDICT[worker]
    ok_ranks = [r for r in range(WORLD)
                if re.search(pattern.format(r=r, b=re.escape(backend)), out + err, re.M)]
    good = p.returncode == 0 and len(ok_ranks) == WORLD
    print(f"{'ok  ' if good else 'FAIL'} {label}: exit {p.returncode}, ranks with a verdict {ok_ranks}, "
          f"{time.time() - t0:.1f} s", flush=True)
    if not good:
        print(f"--- stdout\n{out[-4000:]}\n--- stderr\n{err[-6000:]}", flush=True)
    return good


def main():
    a = rb.parse_driver_args(__doc__.split("\n")[0],
                             lambda p: p.add_argument("--only", choices=["gloo", "cpu:ctrun", "torchrun"]))
    env = rb.ready_env(a)
    if not isinstance(env, dict):
        return env
    t0 = time.time()
    results = []
    try:
        for backend in ("gloo", "cpu:ctrun"):
            if a.only not in (None, backend):
                continue
            workers = ["tutorial_worker.py", "ddp_worker.py"]
            if backend == "cpu:ctrun":
                workers.append("any_source_sparse_worker.py")  # checks against gloo itself: no reference run
            for worker in workers:
                results.append(job(f"ctrun --nproc-per-node={WORLD}, {worker} on {backend!r}",
                                   [a.ctrun, "--standalone", f"--nproc-per-node={WORLD}", "--no-python",
                                    t2.CHROOT_PY, NO_LIBUV, os.path.join(COMM_TORCH, worker), backend],
                                   env, worker, backend))
        if a.only in (None, "torchrun"):
            # --local-addr: torchrun otherwise publishes socket.getfqdn(), which stalls in the chroot
            results.append(job(f"torch 2.6's torchrun --standalone --nproc-per-node={WORLD}, tutorial_worker.py "
                               f"on 'ctrun'",
                               [t2.CHROOT_PY, os.path.join(HERE, "torchrun26.py"), "--standalone",
                                f"--nproc-per-node={WORLD}", "--local-addr", "127.0.0.1", NO_LIBUV,
                                os.path.join(COMM_TORCH, "tutorial_worker.py"), "ctrun"],
                               env, "tutorial_worker.py", "ctrun"))
    finally:
        t2.reclaim_leaked_mounts()
    print(f"torch 2.6 programs: {sum(results)}/{len(results)} jobs passed in {time.time() - t0:.1f} s", flush=True)
    return 0 if results and all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
