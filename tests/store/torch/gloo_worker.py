#!/usr/bin/python3
"""One torch 1.13 gloo worker in torchelastic agent-store mode, against the TCPStore at MASTER_ADDR:MASTER_PORT.

The test sets TORCHELASTIC_USE_AGENT_STORE=True, TORCHELASTIC_RESTART_COUNT=0, RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT and GLOO_SOCKET_IFNAME=lo. Runs all_reduce on the default group, new_group + all_reduce on it,
barrier; prints "RESULT rank=R world=R_sum sub=S_sum" and exits 0 only if every result is right."""
import datetime
import os
import sys

import torch
import torch.distributed as dist

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=60))
assert dist.get_rank() == rank and dist.get_world_size() == world

t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
expected_world = world * (world + 1) / 2
ok = t.item() == expected_world

# A sub-group of the even ranks; every rank must call new_group, only members use it.
members = list(range(0, world, 2))
sub = dist.new_group(members)
sub_sum = -1.0
if rank in members:
    u = torch.tensor([float(10 * (rank + 1))])
    dist.all_reduce(u, group=sub)
    sub_sum = u.item()
    ok = ok and sub_sum == sum(10 * (r + 1) for r in members)

dist.barrier()
print(f"RESULT rank={rank} world={t.item():g} sub={sub_sum:g}", flush=True)
dist.destroy_process_group()
sys.exit(0 if ok else 3)
