"""The worker of preload_bench.py: one all_reduce, then (attempt 0) the last rank fails.

Writes "<event> <attempt> <epoch seconds> [values]" lines to $BENCH_OUT (one O_APPEND write each):
  allreduce  rank 0, when the first all_reduce of the attempt has returned
  pss        rank 0: the sum of the workers' proportional set sizes (kB) and that of their parent when it is
             ctrun's warm process (kB, 0 otherwise), read while every worker is alive
  fail       the last rank, just before it exits 1 (attempt 0 only); the others wait to be stopped
"""
import os
import sys
import time

import torch
import torch.distributed as dist


def record(*fields):
    line = " ".join(str(f) for f in fields) + "\n"
    fd = os.open(os.environ["BENCH_OUT"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, line.encode())
    os.close(fd)


def pss_kb(pid):
    try:
        with open("/proc/%s/smaps_rollup" % pid) as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def is_warm_process(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return b"ctrun_warm.py" in f.read()
    except OSError:
        return False


def main():
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group(os.environ.get("BENCH_BACKEND", "gloo"))
    dist.all_reduce(torch.ones(1))
    if rank == 0:
        record("allreduce", attempt, time.time())
    dist.barrier()
    warm = pss_kb(os.getppid()) if rank == 0 and is_warm_process(os.getppid()) else 0
    total = torch.tensor([pss_kb("self")], dtype=torch.float64)
    dist.all_reduce(total)
    if rank == 0:
        record("pss", attempt, time.time(), int(total.item()), warm)
    dist.barrier()
    if attempt == 0:
        if rank == world - 1:
            record("fail", attempt, time.time())
            sys.stdout.flush()
            os._exit(1)
        time.sleep(600)  # stopped by the launcher
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
