"""A worker of tests/pkg/pip_venv_test.sh: backend "ctrun" from the ctrun_torch that `pip install .` put in the
environment, one all_reduce. Prints which python and which ctrun_torch it used, for the test to check."""
import os
import sys

import torch
import torch.distributed as dist

import ctrun_torch  # noqa: F401  registers backend "ctrun"

dist.init_process_group("ctrun")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
ok = t.item() == world * (world + 1) / 2
sys.stdout.write(f"rank {rank}/{world}: all_reduce {'ok' if ok else 'WRONG'} ({t.item():g}) python {sys.executable} "
                 f"module {ctrun_torch.__file__} PYTHON_EXEC={os.environ.get('PYTHON_EXEC')}\n")
dist.destroy_process_group()
sys.exit(0 if ok else 1)
