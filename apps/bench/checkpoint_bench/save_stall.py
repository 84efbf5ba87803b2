"""The stall of one ck.save in the worker against memcpy of the same bytes, and ck.load's time (docs/benchmarks.md,
"In-memory checkpoints"). Run under ctrun, one rank:

    PYTHON_EXEC=/usr/bin/python3 ctrun --standalone --nproc-per-node 1 apps/bench/checkpoint_bench/save_stall.py [MiB] [reps]

Floors, each on the same tensor: "memcpy, warm destination" copies into a buffer already touched (the bandwidth of
the copy itself); "memcpy, fresh mmap of /dev/shm" copies into a new tmpfs file mapped as ck.save does (the copy
plus the first touch of every page, which any new snapshot pays). "with its digest": the same save as a worker of a
multi-node job makes it (the snapshot's digest computed and appended). ck.load reads into new tensors,
ck.load(into=) into tensors the caller already has. Each figure is the median of `reps` runs."""

import mmap
import os
import statistics
import sys
import tempfile
import time

import torch

import ctrun_torch.checkpoint as ck

MiB = 1 << 20
size = int(sys.argv[1]) if len(sys.argv) > 1 else 128
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 7
src = torch.rand(size * MiB // 4)
nbytes = src.numel() * 4
src_bytes = src.view(torch.uint8)


def median(fn):
    times = []
    for _ in range(reps):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


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
load = median(ck.load)
target = {"state": torch.empty_like(src)}
target["state"].zero_()  # the caller's tensors exist and are touched, as a built model's are
load_into = median(lambda: ck.load(into=target))
assert torch.equal(target["state"], src)


def rate(seconds):
    return f"{nbytes / seconds / 1e9:6.2f} GB/s  ({seconds * 1e3:7.1f} ms)"


print(f"{size} MiB per save, median of {reps}, torch {torch.__version__}, {torch.get_num_threads()} threads")
print(f"memcpy, warm destination        {rate(floor_warm)}")
print(f"memcpy, fresh mmap of /dev/shm  {rate(floor_fresh)}")
print(f"ck.save stall                   {rate(stall)}   {stall / floor_warm:.2f}x warm, {stall / floor_fresh:.2f}x fresh")
print(f"ck.save stall with its digest    {rate(stall_digest)}   +{(stall_digest - stall) * 1e3:.1f} ms (several nodes)")
print(f"ck.load                         {rate(load)}")
print(f"ck.load(into=)                  {rate(load_into)}")
