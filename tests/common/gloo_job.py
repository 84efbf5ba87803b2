"""What the torch workers of the multi-node tests share (tests/agent/multihost/workers/mh_job.py, the cluster
launchers' worker, and tests/integration/workers/job.py, the multi-node agents'): the real gloo all_reduce that
proves the ranks of a job found each other through the env:// the launcher set, and a result file written whole
(found by the workers beside ports.py, through their own path)."""
import os
from datetime import timedelta


def gloo_all_reduce(result):
    """init_process_group("gloo") from the environment, all_reduce of rank + 1, a barrier; adds to result the sum and
    the rank and world size torch saw, and returns it."""
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    result["sum"] = t.item()
    result["torch_rank"] = dist.get_rank()
    result["torch_world"] = dist.get_world_size()
    dist.barrier()
    return result


def write_atomic(path, text):
    """path appears with all of text or not at all (the test polls for it)."""
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.rename(path + ".tmp", path)
