"""Gloo job that fails on attempt 0 and succeeds on attempt 1 (run with --max-restarts 1).

Both attempts rendezvous through the agent's store. Attempt 0 also leaves a key in the store with a raw
client; attempt 1 checks that the key is gone (the agent gives every attempt a fresh keyspace).
"""
import datetime
import os
import sys

import torch
import torch.distributed as dist

attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
raw = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), None, False,
                    datetime.timedelta(seconds=30))
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
rank, world = dist.get_rank(), dist.get_world_size()
if attempt == 0:
    raw.set(f"stale_from_attempt_0_rank_{rank}", "x")
    dist.barrier()
    print(f"attempt 0 rank {rank}: failing on purpose", flush=True)
    sys.exit(1)
# compare_set on a missing key creates it and returns the new value; a stale key returns its old value.
stale = raw.compare_set(f"stale_from_attempt_0_rank_{rank}", "", "probe") == b"x"
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
expected = world * (world + 1) / 2
print(f"attempt {attempt} rank {rank}: sum={t.item():g} expected={expected:g} stale_key_seen={stale}", flush=True)
dist.destroy_process_group()
sys.exit(0 if t.item() == expected and not stale else 1)
