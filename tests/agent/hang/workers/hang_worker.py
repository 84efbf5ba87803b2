# A torch worker on backend "ctrun": three all_reduces, then rank HANG_RANK sleeps before the fourth (#3) while
# the others enter it. With HANG_RANK=-1 every rank steps SLOW_S seconds (rank SLOW_RANK only) per all_reduce.
import os
import sys
import time

import torch
import torch.distributed as dist
import ctrun_torch  # noqa: F401  (registers backend "ctrun")

rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
dist.init_process_group("ctrun", init_method="file://" + os.environ["HANG_STORE_FILE"], rank=rank, world_size=world)
hang_rank = int(os.environ.get("HANG_RANK", "-1"))
steps = int(os.environ.get("STEPS", "3"))
t = torch.ones(4)
for step in range(steps):
    if rank == int(os.environ.get("SLOW_RANK", "-1")):
        time.sleep(float(os.environ.get("SLOW_S", "0")))
    dist.all_reduce(t)
if rank == hang_rank:
    time.sleep(120)  # the sleeping line
dist.all_reduce(t)
print("rank %d done" % rank, flush=True)
