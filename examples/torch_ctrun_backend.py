"""PyTorch on backend "ctrun": a small DistributedDataParallel regression, gradients all-reduced by ctrun's comm.

  ctrun --standalone --nproc-per-node=4 examples/torch_ctrun_backend.py
ctrun puts the ctrun_torch module on the workers' PYTHONPATH; `import ctrun_torch` registers the backend.
"""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import ctrun_torch  # noqa: F401  registers backend "ctrun" with torch.distributed

dist.init_process_group("ctrun")  # env:// from ctrun's RANK, WORLD_SIZE, MASTER_ADDR/PORT
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = DDP(nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
true_w = torch.arange(8.0) / 8
gen = torch.Generator().manual_seed(rank)
for step in range(30):
    x = torch.randn(32, 8, generator=gen)
    loss = nn.functional.mse_loss(model(x), (x @ true_w).unsqueeze(1))
    opt.zero_grad()
    loss.backward()  # DDP all-reduces the gradients on backend "ctrun"
    opt.step()
    avg = loss.detach().clone()
    dist.all_reduce(avg, op=dist.ReduceOp.AVG)  # AVG: ctrun has it on CPU, gloo does not
    if rank == 0 and step % 10 == 9:
        print(f"step {step + 1}: mean loss over {world} ranks {avg.item():.4f} (backend {dist.get_backend()})")
dist.destroy_process_group()
