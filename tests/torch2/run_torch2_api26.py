#!/usr/bin/env python3
"""The torch 2.x API surface of backend "ctrun" on a real torch 2.6 (ctest `torch2.api`): builds ctrun_torch in the
chroot (build_ctrun_torch26.sh, seconds when nothing changed), then runs torch2_api26.py with 4 ranks under
`ctrun --standalone --nproc-per-node=4 --no-python chroot_python.sh`, backend "cpu:ctrun": the fused *_coalesced
ops and the coalescing manager, funcol, DTensor on a CPU DeviceMesh (1-D and 2-D), new_subgroups,
new_group(use_local_synchronization=True), batch_isend_irecv, get_future + collect_all, and what 2.6 refuses
(split_group, dist.monitored_barrier), each against gloo in the same job where gloo can.

usage: run_torch2_api26.py --ctrun BIN [--build-dir DIR] [--world N]
Runs on the host (any python3, no torch). Exit: 0 passed, 1 failed, 77 skipped (no chroot, not root, chroot without
the build dependencies, CI without CTRUN_TORCH2_TESTS=1), with the reason.
"""
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run_ctrun_backend26 as rb  # noqa: E402  (the module's build, the ctrun job and its verdict)
import run_torch2_tests as t2  # noqa: E402  (skip rules, chroot environment, mount-leak repair)

WORKER = os.path.join(HERE, "torch2_api26.py")


def main():
    a = rb.parse_driver_args(__doc__.split("\n")[0], lambda p: p.add_argument("--world", type=int, default=4))
    t0 = time.time()
    env = rb.ready_env(a)
    if not isinstance(env, dict):
        return env
    try:
        ok = rb.under_ctrun(a, a.world, "cpu:ctrun", env, worker=WORKER)
    finally:
        t2.reclaim_leaked_mounts()
    print(f"torch 2.x API on backend ctrun: {'passed' if ok else 'FAILED'} in {time.time() - t0:.1f} s", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
