#!/usr/bin/python3
"""Each rank contributes rank+1; after a gloo all_reduce every rank holds 1+2+...+WORLD_SIZE."""
import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
expected = world * (world + 1) / 2
status = "ok" if t.item() == expected else f"WRONG (expected {expected})"
print(f"rank {rank}/{world} (local_rank {os.environ['LOCAL_RANK']}): all_reduce sum = {t.item():g} {status}",
      flush=True)
dist.destroy_process_group()
raise SystemExit(0 if t.item() == expected else 1)
