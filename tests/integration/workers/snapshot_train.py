"""PyTorch's DDP tutorial (ddp-tutorial-series/multinode.py) in small: a DDP model trained over gloo, a snapshot
saved by global rank 0 every epoch, resumed from it on a restart. Run by ctrun on every node.

--epochs N (default 6); --die-on-tag T --die-at-epoch E: on restart count 0, the worker of node T with local rank
0 SIGKILLs itself after epoch E (a worker killed mid-training). Writes $OUT_DIR/done.<NODE_TAG>.<LOCAL_RANK> with
the epoch it resumed from and the one it finished at.
"""
import argparse
import os
import signal
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--die-on-tag", default="")
    ap.add_argument("--die-at-epoch", type=int, default=2)
    ap.add_argument("--step-sleep", type=float, default=0.02)
    a = ap.parse_args()
    env = os.environ
    out, tag, local_rank = env["OUT_DIR"], env["NODE_TAG"], int(env["LOCAL_RANK"])
    open(f"{out}/pid.{tag}.{local_rank}.{os.getpid()}", "w").close()
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    snapshot = f"{out}/snapshot.pt"
    first = 0
    if os.path.exists(snapshot):
        snap = torch.load(snapshot)
        model.module.load_state_dict(snap["model"])
        first = snap["epochs_run"]
        print(f"[rank {rank}] resuming training from snapshot at epoch {first}", flush=True)
    data = torch.randn(64, 16)
    target = torch.randn(64, 1)
    for epoch in range(first, a.epochs):
        for i in range(0, 64, 8):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(data[i:i + 8]), target[i:i + 8])
            loss.backward()
            opt.step()
            time.sleep(a.step_sleep)
        if rank == 0:
            tmp = snapshot + ".tmp"
            torch.save({"model": model.module.state_dict(), "epochs_run": epoch + 1}, tmp)
            os.rename(tmp, snapshot)
        dist.barrier()  # every rank: the snapshot of this epoch is written
        print(f"[rank {rank}] epoch {epoch} done", flush=True)
        open(f"{out}/epoch.{tag}.{local_rank}.rc{env['TORCHELASTIC_RESTART_COUNT']}.{epoch}", "w").close()
        if (tag == a.die_on_tag and local_rank == 0 and epoch == a.die_at_epoch
                and env["TORCHELASTIC_RESTART_COUNT"] == "0"):
            os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()
    dist.destroy_process_group()
    with open(f"{out}/done.{tag}.{local_rank}", "w") as f:
        f.write(f"{first} {a.epochs}\n")


if __name__ == "__main__":
    main()
