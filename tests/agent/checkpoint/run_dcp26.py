#!/usr/bin/env python3
"""ctrun_torch.checkpoint's DCP interface and --checkpoint-dir on a real torch 2.6 (the chroot of tests/torch2):

  1. 4 ranks under `ctrun --checkpoint-dir DIR --checkpoint-dir-every 1` run workers/dcp26.py: dcp.save/load with
     ck.MemoryWriter/MemoryReader, the same world size and 2 of the 4 ranks (resharding), then plain dcp.load of
     the step the spill process wrote to DIR;
  2. after ctrun ended (its memory gone), a plain python of the chroot, no ctrun, no process group, loads DIR's
     newest step with torch.distributed.checkpoint.load into whole tensors and checks every value;
  3. ck.save / ck.load / ck.load(into=) on torch 2.6 (workers/load_into.py, one rank).

usage: run_dcp26.py --ctrun BIN [--build-dir DIR]
Runs on the host (any python3, no torch). Exit 0 passed, 1 failed, 77 skipped (no chroot or not root: the reason).
The job's snapshot directory (CTRUN_CHECKPOINT_ROOT) and DIR are under the build directory, which the chroot
sees at the same path (its /dev/shm is not the host's)."""

import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "torch2"))
import run_ctrun_backend26 as rb  # noqa: E402  (driver arguments, the 2.6 module's environment)
import run_torch2_tests as t2  # noqa: E402  (skip rules, chroot environment, mount-leak repair)

WORKER = os.path.join(HERE, "workers", "dcp26.py")
LOAD_INTO = os.path.join(HERE, "workers", "load_into.py")
JOB_TIMEOUT = 240

PLAIN_LOAD = r"""
import sys, torch, torch.distributed as dist, torch.distributed.checkpoint as dcp
path = sys.argv[1]
sd = {"sharded": torch.zeros(16, 6), "replicated": torch.zeros(5), "own.3": torch.zeros(3),
      "meta": {"step": -1, "name": ""}}
dcp.load(sd, checkpoint_id=path)   # no process group: torch reads every shard itself
assert not dist.is_initialized()
assert torch.equal(sd["sharded"], torch.arange(96, dtype=torch.float32).reshape(16, 6) * 8), sd["sharded"]
assert torch.equal(sd["replicated"], torch.full((5,), 7.0)), sd["replicated"]
assert torch.equal(sd["own.3"], torch.full((3,), 703.0)), sd["own.3"]
assert sd["meta"] == {"step": 7, "name": "dcp26"}, sd["meta"]
print("plain dcp.load ok", flush=True)
"""


def main():
    a = rb.parse_driver_args(__doc__.split("\n")[0])
    env = rb.ready_env(a)
    if not isinstance(env, dict):
        return env
    tmp = tempfile.mkdtemp(prefix="ckdcp-", dir=os.path.join(a.build_dir))
    try:
        root, out = os.path.join(tmp, "root"), os.path.join(tmp, "dir")
        os.makedirs(root)
        env = dict(env, PYTHON_EXEC=t2.CHROOT_PY, CTRUN_CHECKPOINT_ROOT=root)
        cmd = [a.ctrun, "--standalone", "--nproc-per-node", "4", "--event-log", os.path.join(tmp, "events.jsonl"),
               "--checkpoint-dir", out, "--checkpoint-dir-every", "1", WORKER, "--spill-dir", out]
        t0 = time.time()
        try:
            r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=JOB_TIMEOUT)
        except subprocess.TimeoutExpired as e:
            text = lambda b: (b or b"").decode(errors="replace") if isinstance(b, bytes) else (b or "")  # noqa: E731
            print(f"FAIL: the job did not end within {JOB_TIMEOUT} s\n--- stdout\n{text(e.stdout)[-4000:]}\n"
                  f"--- stderr\n{text(e.stderr)[-6000:]}")
            return 1
        oks = [line for line in r.stdout.splitlines() if " dcp ok checks=" in line]
        print(f"ctrun job: exit {r.returncode}, {len(oks)}/4 ranks ok, {time.time() - t0:.1f} s", flush=True)
        for line in oks:
            print("   ", line)
        if r.returncode != 0 or len(oks) != 4:
            print(f"--- stdout\n{r.stdout[-4000:]}\n--- stderr\n{r.stderr[-6000:]}")
            return 1
        if os.listdir(root):
            print(f"FAIL: the job's snapshot directory outlived ctrun: {os.listdir(root)}")
            return 1
        p = subprocess.run([t2.CHROOT_PY, "-c", PLAIN_LOAD, os.path.join(out, "step-7")], env=env,
                           capture_output=True, text=True, timeout=120)
        print(p.stdout.strip(), p.stderr[-3000:] if p.returncode else "", flush=True)
        if p.returncode != 0:
            print("FAIL: torch's own dcp.load could not read --checkpoint-dir's step-7")
            return 1
        r = subprocess.run([a.ctrun, "--standalone", "--nproc-per-node", "1", LOAD_INTO], env=env,
                           capture_output=True, text=True, timeout=JOB_TIMEOUT)
        if r.returncode != 0 or "load_into ok rank 0" not in r.stdout:
            print(f"FAIL: load_into.py on torch 2.6: exit {r.returncode}\n--- stdout\n{r.stdout[-4000:]}\n"
                  f"--- stderr\n{r.stderr[-6000:]}")
            return 1
        print("ck.load and ck.load(into=) on torch 2.6: ok", flush=True)
        print("DCP on ctrun's memory and --checkpoint-dir: passed", flush=True)
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        t2.reclaim_leaked_mounts()


if __name__ == "__main__":
    sys.exit(main())
