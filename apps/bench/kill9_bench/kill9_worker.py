"""The worker of kill9_bench.py: torch 2.6 (the chroot's python3), gloo, one rank per node, all_reduce in a loop.

After the first all_reduce of its life (so of its round) it writes OUT_DIR/first.<NODE_TAG>.<pid> holding the wall
clock time, in one write, then renames it into place, so the benchmark never reads half a file. It also leaves
OUT_DIR/pid.<NODE_TAG>.<pid> holding its start time, before importing torch, so the benchmark can kill a node's
workers with its agent and tell the launcher's part (until the worker runs) from torch's (import, init, collective).
"""
import os
import time

out, tag, pid = os.environ["OUT_DIR"], os.environ["NODE_TAG"], os.getpid()
with open(os.path.join(out, f"pid.{tag}.{pid}"), "w") as f:
    f.write(f"{time.time():.6f}\n")

import functools  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

# Debian's 2.6 has no libuv; the agent-store path builds its TCPStore with the default use_libuv=True.
rdv = sys.modules["torch.distributed.rendezvous"]
rdv.TCPStore = functools.partial(dist.TCPStore, use_libuv=False)

dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
now = time.time()
tmp = os.path.join(out, f".first.{tag}.{pid}")
with open(tmp, "w") as f:
    f.write(f"{now:.6f} {os.environ.get('TORCHELASTIC_RESTART_COUNT', '?')} {dist.get_world_size()}\n")
os.rename(tmp, os.path.join(out, f"first.{tag}.{pid}"))
while True:  # until the agent stops it (or a peer's death fails the collective)
    time.sleep(0.05)
    dist.all_reduce(t)
