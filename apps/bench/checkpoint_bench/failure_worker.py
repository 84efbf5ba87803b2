"""A worker of failure_cost.py: a training loop of fixed-length steps over a large per-rank state, saved to local
disk with torch.save every EVERY steps (mode "disk", the two newest kept) or with ck.save every step (mode "ck":
ck.load() into new tensors; mode "ck-into": ck.load(into=) the state the worker built, as a training script has
its model before it loads; mode "doc": docs/checkpoint.md's example as written, a small MLP and Adam beside the
state, `ck.load()` then `model.load_state_dict` and `optimizer.load_state_dict`); in attempt 0 one rank
SIGKILLs itself once every rank has finished step KILL_AFTER. Each rank appends "what step unix-time [seconds]"
lines to OUT/attempt-<A>-rank-<R>.txt, each line in one write: "started" (torch imported), "joined" (the process
group formed), "loaded" (with the load's seconds), "applied" (the state is in the model and optimizer), "done" per
step, "killed".

usage: failure_worker.py MODE OUT [--steps 25] [--kill-after 23] [--kill-rank 1] [--mib 128] [--step-s 0.3]
                         [--every 5]
"""

import argparse
import os
import signal
import time

import torch
import torch.distributed as dist

p = argparse.ArgumentParser()
p.add_argument("mode", choices=["disk", "ck", "ck-into", "doc"])
p.add_argument("out")
p.add_argument("--steps", type=int, default=25)
p.add_argument("--kill-after", type=int, default=23)
p.add_argument("--kill-rank", type=int, default=1)
p.add_argument("--mib", type=int, default=128)
p.add_argument("--step-s", type=float, default=0.3)
p.add_argument("--every", type=int, default=5)
args = p.parse_args()

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
log = os.open(os.path.join(args.out, f"attempt-{attempt}-rank-{rank}.txt"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)


def note(what, step, extra=""):
    os.write(log, f"{what} {step} {time.time():.6f} {extra}\n".encode())  # one write per line


note("started", -1)  # torch imported: where the restart's own cost ends
torch.set_num_threads(1)
dist.init_process_group("gloo")
note("joined", -1)


state = torch.zeros(args.mib << 18)  # float32: MiB of state
start = 0
disk = os.path.join(args.out, "ckpt")
if args.mode == "doc":
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8))
    optimizer = torch.optim.Adam(model.parameters())
    data, target = torch.randn(32, 64), torch.randn(32, 8)
began = time.perf_counter()
if args.mode == "doc":
    import ctrun_torch.checkpoint as ck

    resumed = ck.load()  # docs/checkpoint.md's example, as written
    note("loaded", -1 if resumed is None else resumed[0], f"{time.perf_counter() - began:.6f}")
    if resumed is not None:
        step, saved = resumed
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        state = saved["state"]
        start = step + 1
    note("applied", start - 1, f"{time.perf_counter() - began:.6f}")
elif args.mode != "disk":
    import ctrun_torch.checkpoint as ck

    resumed = ck.load(into={"state": state}) if args.mode == "ck-into" else ck.load()
    if resumed is not None:
        start, state = resumed[0] + 1, resumed[1]["state"]
else:
    done = sorted(int(n.split("-")[1]) for n in os.listdir(disk) if os.path.exists(os.path.join(disk, n, "done"))) \
        if os.path.isdir(disk) else []
    if done:
        state = torch.load(os.path.join(disk, f"step-{done[-1]}", f"rank-{rank}.pt"))
        start = done[-1] + 1
if args.mode != "doc":
    note("loaded", start - 1, f"{time.perf_counter() - began:.6f}")
    note("applied", start - 1, f"{time.perf_counter() - began:.6f}")

for step in range(start, args.steps):
    t0 = time.perf_counter()
    state.add_(1.0)
    if args.mode == "doc":
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(data), target).backward()
        optimizer.step()
    flag = torch.ones(1)
    dist.all_reduce(flag)  # lockstep, as a gradient all-reduce keeps ranks
    time.sleep(max(0.0, args.step_s - (time.perf_counter() - t0)))
    if args.mode == "doc":
        ck.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "state": state}, step)
    elif args.mode != "disk":
        ck.save({"state": state}, step)
    elif step % args.every == 0:
        path = os.path.join(disk, f"step-{step}")
        os.makedirs(path, exist_ok=True)
        torch.save(state, os.path.join(path, f"rank-{rank}.pt"))
        dist.barrier()
        if rank == 0:
            open(os.path.join(path, "done"), "w").close()
        old = os.path.join(disk, f"step-{step - 2 * args.every}", f"rank-{rank}.pt")
        if os.path.exists(old):
            os.unlink(old)  # the two newest saves are kept, as ck keeps two steps (1 GiB per rank adds up)
    note("done", step)
    if attempt == 0 and step == args.kill_after:
        dist.barrier()  # every rank's step (and save) is complete
        if rank == args.kill_rank:
            note("killed", step)
            os.kill(os.getpid(), signal.SIGKILL)
dist.barrier()
dist.destroy_process_group()
