"""DistributedDataParallel on CPU: backend "ctrun" trains a small model to the same parameters as gloo.

Worker of `ctrun --standalone --nproc-per-node=4`. The default group is "ctrun" (or argv[1]: "cpu:ctrun" on torch
2.x, "gloo" for the reference run, tests/torch2); a gloo group over the same
ranks trains an identical copy (same seed, same data). With no hook, the allreduce hook and the fp16 compress
hook, both copies must end with the same parameters (fp32 sums may be ordered differently: 1e-5 relative;
fp16: comm sums in fp32 where gloo sums in fp16, so 1e-3).
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

import ctrun_torch  # noqa: F401

# One write(2) per printed line: the ranks share one pipe, and under `python -u` (as ctrun and torchrun start them)
# print() writes the text and its newline separately, so another rank's line could land in between (seen once:
# "...okrank 3: ..."). Line buffering over the unbuffered binary layer writes each short line whole.
sys.stdout.reconfigure(line_buffering=True, write_through=False)


def train(group, hook, rank):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    ddp = DDP(model, process_group=group, bucket_cap_mb=0.001)  # several buckets: several async all_reduces
    if hook is not None:
        ddp.register_comm_hook(group, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(100 + rank)  # each rank its own shard
    for _ in range(20):
        x = torch.randn(8, 16, generator=gen)
        y = torch.randn(8, 4, generator=gen)
        opt.zero_grad()
        nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def main():
    backend = sys.argv[1] if len(sys.argv) > 1 else "ctrun"
    dist.init_process_group(backend)
    assert dist.get_backend() == backend, dist.get_backend()
    rank = dist.get_rank()
    ctrun_group = dist.group.WORLD
    gloo = dist.new_group(list(range(dist.get_world_size())), backend="gloo")
    hooks = {"none": None, "allreduce": default_hooks.allreduce_hook,
             "fp16_compress": default_hooks.fp16_compress_hook}
    for name, hook in hooks.items():
        ours, theirs = train(ctrun_group, hook, rank), train(gloo, hook, rank)
        for a, b in zip(ours, theirs):
            # comm sums float16 in float32 (gloo in float16): the fp16 hook's results differ in the last bits.
            tol = dict(rtol=1e-3, atol=1e-4) if name == "fp16_compress" else dict(rtol=1e-5, atol=1e-6)
            if not torch.allclose(a, b, **tol):
                print(f"rank {rank}: DDP hook={name}: parameters differ by {(a - b).abs().max().item()}", flush=True)
                sys.exit(1)
        # And every rank holds the same model (DDP's promise).
        flat = torch.cat([p.reshape(-1) for p in ours])
        everyone = [torch.zeros_like(flat) for _ in range(dist.get_world_size())]
        dist.all_gather(everyone, flat)
        assert all(torch.equal(e, flat) for e in everyone), f"hook={name}: ranks diverged"
        print(f"rank {rank}: {backend}: DDP hook={name}: same parameters as gloo", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
