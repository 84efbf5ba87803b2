"""The stall of one ck.save in the worker against copying the same bytes, and ck.load's time (docs/benchmarks.md,
"In-memory checkpoints"). Run under ctrun, one rank or several (every rank runs each phase at the same time, as
the ranks of a job save together; the slowest rank's median is printed):

    PYTHON_EXEC=/usr/bin/python3 ctrun --standalone --nproc-per-node 4 apps/bench/checkpoint_bench/save_stall.py [MiB] [reps]

Floors, each on the same tensor and with as many processes copying at once: "memcpy, warm destination" copies into
a buffer already touched (the bandwidth of the copy itself: the floor the save stall is held to, at most 2x);
"memcpy, fresh mmap of /dev/shm" copies into a new tmpfs file mapped (the copy plus the first touch of every page,
which a new snapshot would pay). "with its digest": the same save as a worker of a multi-node job makes it (the
snapshot's digest computed and appended). ck.load reads into new tensors, ck.load(into=) into tensors the caller
already has. Each figure is the median of `reps` runs."""

import mmap
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist

import ctrun_torch.checkpoint as ck

MiB = 1 << 20
size = int(sys.argv[1]) if len(sys.argv) > 1 else 128
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 7
torch.set_num_threads(1)
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
src = torch.rand(size * MiB // 4)
nbytes = src.numel() * 4
src_bytes = src.view(torch.uint8)


def median(fn, setup=None):
    """Every rank runs fn reps times, each time together (a barrier before each, setup before that, untimed); the
    slowest rank's median."""
    times = []
    for _ in range(reps):
        if setup is not None:
            setup()
        dist.barrier()
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    got = [None] * world
    dist.all_gather_object(got, statistics.median(times))
    return max(got)


warm = torch.empty_like(src_bytes)
warm.copy_(src_bytes)
floor_warm = median(lambda: warm.copy_(src_bytes))


def fresh_shm_copy():
    with tempfile.NamedTemporaryFile(dir="/dev/shm") as f:
        os.posix_fallocate(f.fileno(), 0, nbytes)
        with mmap.mmap(f.fileno(), nbytes) as m:
            view = torch.frombuffer(m, dtype=torch.uint8, count=nbytes)
            view.copy_(src_bytes)
            del view


floor_fresh = median(fresh_shm_copy)
step = [0]


def save():
    ck.save({"state": src}, step[0])
    step[0] += 1


stall = median(save)
# As on several nodes: each snapshot ends with its digest (CRC-32 per chunk, docs/checkpoint.md "Digests").
ck._state().setting.digest = True
stall_digest = median(save)
ck._state().setting.digest = False
# Before each load, as in a restarted job: the two newest steps and the spare held (a load takes the older step's
# pages for its new tensors).
load = median(ck.load, setup=lambda: (save(), save(), save()))
target = {"state": torch.empty_like(src)}
target["state"].zero_()  # the caller's tensors exist and are touched, as a built model's are
load_into = median(lambda: ck.load(into=target))
assert torch.equal(target["state"], src)


def rate(seconds):
    return f"{nbytes / seconds / 1e9:6.2f} GB/s  ({seconds * 1e3:7.1f} ms)"


if rank == 0:
    print(f"{size} MiB per save, {world} rank(s) at once (the slowest rank's median of {reps}), torch "
          f"{torch.__version__}, {torch.get_num_threads()} threads, load average {os.getloadavg()[0]:.1f}")
    print(f"memcpy, warm destination        {rate(floor_warm)}   (the copy floor)")
    print(f"memcpy, fresh mmap of /dev/shm  {rate(floor_fresh)}")
    print(f"ck.save stall                   {rate(stall)}   {stall / floor_warm:.2f}x the copy floor (target <= 2), "
          f"{stall / floor_fresh:.2f}x fresh")
    print(f"ck.save stall with its digest   {rate(stall_digest)}   +{(stall_digest - stall) * 1e3:.1f} ms "
          "(several nodes)")
    print(f"ck.load                         {rate(load)}")
    print(f"ck.load(into=)                  {rate(load_into)}")
dist.destroy_process_group()
