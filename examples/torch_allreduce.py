#!/usr/bin/python3
"""Each rank contributes rank+1; after a gloo all_reduce every rank holds 1+2+...+WORLD_SIZE."""
import os
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
expected = world * (world + 1) / 2
status = "ok" if t.item() == expected else f"WRONG (expected {expected})"
store = f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
served_by = "the launcher's agent store" if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True" else "rank 0"
# One write per line: with `python -u`, print() writes the text and the newline separately, and the 4 ranks
# share the terminal, so their lines could interleave.
sys.stdout.write(f"rank {rank}/{world} (local_rank {os.environ['LOCAL_RANK']}): all_reduce sum = {t.item():g}"
                 f" {status} (store {store}, served by {served_by})\n")
sys.stdout.flush()
dist.destroy_process_group()
raise SystemExit(0 if t.item() == expected else 1)
