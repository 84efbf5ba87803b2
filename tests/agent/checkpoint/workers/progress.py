"""A job that fails every attempt, for --stop-without-progress: each attempt records itself in
OUT/attempt-<restart count>-<rank>, then (progress) every rank saves a step newer than the one it resumed from, or
(stuck) only the first attempt saves step 0 and every later one fails before saving anything newer. Once every
rank is past its save, rank 0 exits 1. collectives-N: no checkpoints; every attempt runs N all_reduces on backend
"ctrun" (whose progress records ctrun reads), then rank 0 exits 1.

collectives-N-destroyed: the same, and every rank destroys its group 1.5 s before rank 0 exits 1.

Arguments: OUT progress|stuck|collectives-N[-destroyed]
"""

import os
import sys
import time

import torch
import torch.distributed as dist

import ctrun_torch.checkpoint as ck

out, mode = sys.argv[1], sys.argv[2]
rank = int(os.environ["RANK"])
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
torch.set_num_threads(1)
if mode.startswith("collectives-"):
    import ctrun_torch  # noqa: F401  (registers backend "ctrun")

    dist.init_process_group("ctrun")
    with open(os.path.join(out, f"attempt-{attempt}-{rank}"), "w") as f:
        f.write("none")
    t = torch.ones(4)
    for _ in range(int(mode.split("-")[1])):
        dist.all_reduce(t)
    dist.barrier()
    if mode.endswith("-destroyed"):
        # The group goes (its progress slot freed) well before the failure: the agent's count must keep it.
        dist.destroy_process_group()
        time.sleep(1.5)
        if rank == 0:
            sys.exit(1)
        time.sleep(120)  # the others wait to be stopped by the agent
    if rank == 0:
        sys.exit(1)
    dist.barrier()  # the others wait to be stopped by the agent
    sys.exit(0)
dist.init_process_group("gloo")

resumed = ck.load()
step = 0 if resumed is None else resumed[0] + 1
with open(os.path.join(out, f"attempt-{attempt}-{rank}"), "w") as f:
    f.write("none" if resumed is None else str(resumed[0]))
if mode == "progress" or resumed is None:
    ck.save({"w": torch.full((4,), float(step))}, step)
dist.barrier()  # every rank's save is complete before the failure stops the group
if rank == 0:
    sys.exit(1)
dist.barrier()  # the others wait to be stopped by the agent
