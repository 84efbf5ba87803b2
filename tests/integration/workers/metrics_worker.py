# A torch 1.13 worker for the metrics test (tests/integration/metrics_test.py), on backend "ctrun" (ctrun_torch:
# comm writes the progress records the hang watch reads). STEPS all_reduces; in attempt 0 rank 1 then fails (one
# restart); in attempt 1 rank 1 waits for STOP_FILE before the last all_reduce, which rank 0 has entered: a hang
# with rank 1 as its culprit, reported after --hang-report-after, resolved when the test creates the file.
import os
import sys
import time

import torch
import torch.distributed as dist
import ctrun_torch  # noqa: F401  (registers backend "ctrun")

dist.init_process_group("ctrun")
rank = dist.get_rank()
t = torch.ones(4)
for _ in range(int(os.environ.get("STEPS", "5"))):
    dist.all_reduce(t)
attempt = os.environ["TORCHELASTIC_RESTART_COUNT"]
if attempt == "0":
    if rank == 1:
        sys.exit(3)
    time.sleep(120)  # stopped by ctrun when rank 1 fails
deadline = time.time() + 120
if rank == 1:
    while not os.path.exists(os.environ["STOP_FILE"]) and time.time() < deadline:
        time.sleep(0.1)
dist.all_reduce(t)
print("rank %d done" % rank, flush=True)
