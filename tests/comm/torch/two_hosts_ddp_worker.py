"""DDP over two hosts: the worker of two_hosts_ddp_test.py (two ctrun agents, each on a namespaced host).

The default group is "ctrun"; a gloo group over the same ranks trains an identical copy of ddp_worker.py's model
(same seed, each rank its own data). Each rank saves both copies' final parameters to OUT/<backend>-<rank>.pt; the
test compares them. comm logs at debug level here: its group creation says how the ranks split into hosts
("rank R/4 in two levels: 2 hosts x 2-2 ranks ..."), which is how the test knows the ctrun run used two levels.

  two_hosts_ddp_worker.py OUT
"""
import os
import sys

# Before comm's first logger exists (ctrun_torch, imported by ddp_worker, creates it with the group).
os.environ["CTRUN_LOG_LEVEL"] = "debug"

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from ddp_worker import train  # noqa: E402  (beside this script; imports ctrun_torch)


def main():
    out = sys.argv[1]
    dist.init_process_group("ctrun")
    rank, size = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(list(range(size)), backend="gloo")
    for name, group in (("ctrun", dist.group.WORLD), ("gloo", gloo)):
        torch.save(train(group, None, rank), os.path.join(out, f"{name}-{rank}.pt"))
    dist.destroy_process_group()
    print(f"rank {rank}: trained over ctrun and gloo", flush=True)


if __name__ == "__main__":
    main()
