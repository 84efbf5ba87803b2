#!/usr/bin/env python3
"""The torch.distributed backend "ctrun" (comm/torch) on a real torch 2.6: built by build_ctrun_torch26.sh in the
Debian trixie chroot, then ctrun_backend26.py checks every op against gloo in the same job.

usage: run_ctrun_backend26.py --ctrun BIN [--build-dir DIR]
  1. the module built by `make test` (build_ctrun_torch26.sh DIR, default build-torch2/) must be there and not
     older than its sources
  2. 4 ranks under `ctrun --standalone --nproc-per-node=4 --no-python chroot_python.sh`, backend "cpu:ctrun"
     (the device string; agent-store mode, the agent's TCPStore)
  3. 2 ranks with no launcher, backend "ctrun", init_method file:// (torch's FileStore)
  4. the same, rank 1 leaving after init: rank 0's all_reduce must raise RuntimeError within the 10 s timeout
Runs on the host (any python3, no torch). Exit: 0 passed, 1 failed (or no up-to-date module), 77 skipped (the chroot
cannot be made here: no root, no mirror, ...), with the reason.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run_torch2_tests as t2  # noqa: E402  (skip rules, chroot environment, mount-leak repair)

WORKER = os.path.join(HERE, "ctrun_backend26.py")
JOB_TIMEOUT = 240


def log(msg):
    print(msg, flush=True)


def verdict(label, out, err, code, world, backend, secs):
    ok_ranks = [r for r in range(world) if re.search(rf"^rank {r}/{world} backend={re.escape(backend)} ok checks=\d+$",
                                                     out, re.M)]
    good = code == 0 and len(ok_ranks) == world
    checks = re.findall(rf"^rank 0/{world} backend=\S+ ok checks=(\d+)$", out, re.M)
    log(f"{'ok  ' if good else 'FAIL'} {label}: exit {code}, ranks ok {ok_ranks}, "
        f"{checks[0] if checks else '?'} checks a rank, {secs:.1f} s")
    for line in out.splitlines():
        if line.startswith(("rank 0/", "note:", "FAIL")):
            log(f"    {line}")
    if not good:
        log(f"--- stdout\n{out[-4000:]}\n--- stderr\n{err[-6000:]}")
    return good


def under_ctrun(a, world, backend, env, worker=WORKER):
    t0 = time.time()
    try:
        r = subprocess.run([a.ctrun, "--standalone", f"--nproc-per-node={world}", "--no-python", t2.CHROOT_PY,
                            worker, backend], env=env, capture_output=True, text=True, timeout=JOB_TIMEOUT)
    except subprocess.TimeoutExpired as e:
        return verdict(f"ctrun {world} ranks {backend}", e.stdout or "", f"timed out after {JOB_TIMEOUT} s", -1,
                       world, backend, time.time() - t0)
    return verdict(f"ctrun --nproc-per-node={world}, backend {backend!r}", r.stdout, r.stderr, r.returncode, world,
                   backend, time.time() - t0)


def no_launcher(a, world, backend, env, mode=None):
    # The FileStore's file must be visible inside the chroot: under the bind-mounted build directory.
    tmp = tempfile.mkdtemp(prefix="init-", dir=a.build_dir)
    init = f"file://{tmp}/store"
    t0 = time.time()
    procs = []
    outs = []
    try:
        for rank in range(world):
            e = dict(env, RANK=str(rank), WORLD_SIZE=str(world), INIT_METHOD=init)
            procs.append(subprocess.Popen([t2.CHROOT_PY, WORKER, backend] + ([mode] if mode else []), env=e, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True, start_new_session=True))
        deadline = time.time() + JOB_TIMEOUT
        codes = []
        for p in procs:
            try:
                o, err = p.communicate(timeout=max(1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, 9)
                o, err = p.communicate()
                err += f"\n(killed after {JOB_TIMEOUT} s)"
            outs.append((o, err))
            codes.append(p.returncode)
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
        for f in os.listdir(tmp):
            os.unlink(os.path.join(tmp, f))
        os.rmdir(tmp)
    out = "".join(o for o, _ in outs)
    err = "".join(e for _, e in outs)
    code = next((c for c in codes if c != 0), 0)
    return verdict(f"no launcher, {world} ranks, init_method file://, backend {backend!r}" +
                   (f", {mode}" if mode else ""), out, err, code, world, backend, time.time() - t0)


def module_env(a):
    """The workers' environment with the ctrun_torch module `make test` built against torch 2.6
    (build_ctrun_torch26.sh into a.build_dir), or an exit code: 1 when the module is missing or older than its
    sources. The tests do not build it themselves: several of them run at once."""
    problem = t2.module_problem(a.build_dir)
    if problem:
        log(f"FAIL: {problem}")
        return 1
    # the module first on the path; the agent prepends the host build's python/ too, whose cpython-311 module
    # python 3.13 does not load
    return t2.chroot_env({"PYTHONPATH": os.path.join(a.build_dir, "python"), "GLOO_SOCKET_IFNAME": "lo",
                          "PYTHONWARNINGS": "ignore::FutureWarning"})


def parse_driver_args(description, add=lambda p: None):
    """--ctrun and --build-dir, which every driver of jobs on the 2.6 module takes, plus its own (`add`)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--ctrun", required=True)
    p.add_argument("--build-dir", default=os.path.join(t2.REPO, "build-torch2"))
    add(p)
    a = p.parse_args()
    a.build_dir = os.path.abspath(a.build_dir)
    return a


def ready_env(a):
    """The workers' environment (module_env), or the exit code to return: SKIP, with the reason, where the chroot
    cannot be used; 1 when the module is missing or stale."""
    reason = t2.skip_reason()
    if reason:
        log(f"SKIP: {reason}")
        return t2.SKIP
    return module_env(a)


def main():
    a = parse_driver_args(__doc__.split("\n")[0])
    t0 = time.time()
    env = ready_env(a)
    if not isinstance(env, dict):
        return env
    results = []
    try:
        results.append(under_ctrun(a, 4, "cpu:ctrun", env))
        results.append(no_launcher(a, 2, "ctrun", env))
        results.append(no_launcher(a, 2, "ctrun", env, "dead-peer"))
    finally:
        t2.reclaim_leaked_mounts()
    log(f"ctrun backend on torch 2.6: {sum(results)}/{len(results)} jobs passed in {time.time() - t0:.1f} s")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
