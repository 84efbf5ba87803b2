# A torch worker on backend "ctrun": three all_reduces, then rank HANG_RANK sleeps before the fourth (#3) while
# the others enter it (only in attempt HANG_ATTEMPT when set). SLOW_RANK sleeps SLOW_S before each of STEPS
# all_reduces. HANG_GROUP_RANK=N: the hanging rank is local rank 1 of group rank N's node instead. P2P_WAIT=S: rank
# 1 then receives from rank 0, which sends after S s. Rendezvous: file:// at HANG_STORE_FILE if set, else env://.
import os
import sys
import time

import torch
import torch.distributed as dist
import ctrun_torch  # noqa: F401  (registers backend "ctrun")

rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
if "HANG_STORE_FILE" in os.environ:
    dist.init_process_group("ctrun", init_method="file://" + os.environ["HANG_STORE_FILE"], rank=rank, world_size=world)
else:
    dist.init_process_group("ctrun")
hang_rank = int(os.environ.get("HANG_RANK", "-1"))
attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
if "HANG_GROUP_RANK" in os.environ:  # several nodes: the rank on that node's LOCAL_RANK 1
    hang_rank = rank if (os.environ["GROUP_RANK"], os.environ["LOCAL_RANK"]) == (os.environ["HANG_GROUP_RANK"], "1") else -1
if os.environ.get("HANG_ATTEMPT", attempt) != attempt:
    hang_rank = -1
steps = int(os.environ.get("STEPS", "3"))
t = torch.ones(4)
for step in range(steps):
    if rank == int(os.environ.get("SLOW_RANK", "-1")):
        time.sleep(float(os.environ.get("SLOW_S", "0")))
    dist.all_reduce(t)
if rank == hang_rank:
    time.sleep(120)  # the sleeping line
if float(os.environ.get("P2P_WAIT", "0")) > 0:  # rank 1 waits in a recv while rank 0 sends late
    if rank == 0:
        time.sleep(float(os.environ["P2P_WAIT"]))
        dist.send(t, 1)
    elif rank == 1:
        dist.recv(t, 0)
    time.sleep(2)  # alive past the agent's next ticks (0.5 s apart), which see the recv finished
dist.all_reduce(t)
print("rank %d done" % rank, flush=True)
if rank == int(os.environ.get("FAIL_AT_END", "-1")):
    os._exit(1)  # the job fails: its summary ends with the stragglers seen
