"""A torch 2.x gloo worker in agent-store mode, the way torchrun (and ctrun) starts one.

usage: python3 gloo_worker26.py [--fail-on-attempt-0]
env:   RANK WORLD_SIZE MASTER_ADDR MASTER_PORT TORCHELASTIC_USE_AGENT_STORE=True TORCHELASTIC_RESTART_COUNT
       (set by ctrun, or by run_torch2_tests.py for the direct runs); TORCH_DIST_INIT_BARRIER=1 optional.

init_process_group("gloo"), all_reduce, new_group (all ranks) + all_reduce, new_group of ranks {0,1} +
all_reduce, barrier. Prints "rank R/N attempt A ok sums=[...]" and exits 0 only when every sum is right.
With --fail-on-attempt-0 every rank of attempt 0 leaves a key and exits 1 after the barrier; attempt 1
first checks, with a raw client, that no key of attempt 0 survived (torch 2.x workers use no
/worker/attempt_N prefix, so only a fresh keyspace keeps them apart), then runs the job.
"""
import datetime
import functools
import os
import sys

import torch
import torch.distributed as dist

# Debian's 2.6 has no libuv; the agent-store path builds its TCPStore in torch.distributed.rendezvous.
# In agent-store mode 2.6 creates it with the default use_libuv=True whatever USE_LIBUV says, so patch it.
rdv = sys.modules["torch.distributed.rendezvous"]
rdv.TCPStore = functools.partial(dist.TCPStore, use_libuv=False)

def say(line):
    """One write(2) per line: the workers share one pipe, and print() under PYTHONUNBUFFERED=1 writes the text
    and its newline separately, so another rank's line could land in between."""
    os.write(1, (line + "\n").encode())


attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
fail_first = "--fail-on-attempt-0" in sys.argv[1:]
rank_env = int(os.environ["RANK"])
stale = None
if fail_first:
    raw = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), None, False,
                        datetime.timedelta(seconds=30), use_libuv=False)
    if attempt > 0:
        stale = raw.check([f"from_attempt_0_rank_{rank_env}", "attempt0_done"])

dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=30))
rank, world = dist.get_rank(), dist.get_world_size()
expected = world * (world + 1) / 2
sums = []
t = torch.ones(4) * (rank + 1)
dist.all_reduce(t)
sums.append(t[0].item())
g = dist.new_group(list(range(world)))
t = torch.ones(4) * (rank + 1)
dist.all_reduce(t, group=g)
sums.append(t[0].item())
pair = dist.new_group([0, 1])  # every rank calls new_group, as torch requires
if rank in (0, 1):
    t = torch.ones(2) * (rank + 1)
    dist.all_reduce(t, group=pair)
    sums.append(t[0].item())
dist.barrier()

if fail_first and attempt == 0:
    raw.set(f"from_attempt_0_rank_{rank}", b"x")
    raw.set("attempt0_done", b"1")
    dist.barrier()
    say(f"rank {rank}/{world} attempt 0 failing on purpose")
    sys.exit(1)

want = [expected, expected] + ([3.0] if rank in (0, 1) else [])
good = sums == want and stale is not True
extra = "" if stale is None else f" stale_keys_seen={stale}"
say(f"rank {rank}/{world} attempt {attempt} {'ok' if good else 'WRONG'} sums={sums} expected={want}{extra}")
dist.destroy_process_group()
sys.exit(0 if good else 1)
