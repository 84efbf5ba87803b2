"""A small deterministic training job for the checkpoint tests: an MLP + Adam + an extra tensor per rank, gradients
averaged per parameter by all_reduce (not DDP: its bucket rebuild after each attempt's first step changes the
summation order on 3+ ranks), ck.save every step, ck.load at the start.

Arguments: OUT STEPS [--kill-rank R --kill-after K] [--torn-save] [--extra-mib N] [--kill-spill-at S]
          [--wait-spill DIR]
  --kill-rank/--kill-after: in attempt 0, rank R SIGKILLs itself once every rank saved step K (--torn-save: in the
  middle of its own save of step K instead, after half of the snapshot's bytes are in shared memory).
  --kill-spill-at: rank 0 SIGKILLs the --checkpoint-dir spill process running after its save of step S (waits for
  one to start, bounded), and writes OUT/spill-killed.
  --wait-spill: at the end, every rank waits (bounded) until DIR holds the last step (the spill runs in the
  background; the job ending kills it).
  --hold-after K: in attempt 0 of a run that did not resume, every rank saves step K, waits until it is replicated to another node (ck.wait()),
  writes OUT/ready-<rank>, then waits in barriers until the test kills a node (the survivors' barrier then fails).
  --pause-after K: in attempt 0, every rank saves step K, waits until it is replicated (ck.wait(); at once without
  copies), writes OUT/ready-<rank> and waits (bounded) for the file OUT/release, so that the test reads the live view
  and /metrics of a job holding step K (or dials its ports as a stranger would).
  --wait-each: every save waits until it is replicated (ck.wait()), so that every step reaches the other node.
Writes OUT/loaded-<attempt>-<rank> (the step ck.load() returned, or "none") and, at the end, OUT/final-<rank>.pt.
"""

import argparse
import os
import signal
import time

import torch
import torch.distributed as dist

import ctrun_torch.checkpoint as ck

p = argparse.ArgumentParser()
p.add_argument("out")
p.add_argument("steps", type=int)
p.add_argument("--kill-rank", type=int, default=-1)
p.add_argument("--kill-after", type=int, default=-1)
p.add_argument("--torn-save", action="store_true")
p.add_argument("--extra-mib", type=int, default=8)
p.add_argument("--kill-spill-at", type=int, default=-1)
p.add_argument("--wait-spill")
p.add_argument("--hold-after", type=int, default=-1)
p.add_argument("--pause-after", type=int, default=-1)  # writes ready-RANK, then waits for the file "release"
p.add_argument("--wait-each", action="store_true")
args = p.parse_args()

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
torch.set_num_threads(1)
dist.init_process_group("gloo")

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 4))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
extra = torch.zeros(args.extra_mib << 18)  # float32: N MiB

resumed = ck.load()
with open(os.path.join(args.out, f"loaded-{attempt}-{rank}"), "w") as f:
    f.write("none" if resumed is None else str(resumed[0]))
start = 0
if resumed is not None:
    step, state = resumed
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    extra = state["extra"]
    start = step + 1



def kill_spill():
    """SIGKILLs the spill process the agent (this worker's parent) runs, once one runs (at most 30 s)."""
    import time

    agent = os.getppid()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmdline = f.read()
            except (OSError, ValueError, IndexError):
                continue
            if ppid == agent and b"ctrun_torch.checkpoint.spill" in cmdline:
                os.kill(int(pid), signal.SIGKILL)
                with open(os.path.join(args.out, "spill-killed"), "w") as f:
                    f.write(pid)
                return
        time.sleep(0.01)
    raise SystemExit("no spill process started within 30 s")


dying = attempt == 0 and rank == args.kill_rank
if dying and args.torn_save:
    # The seam: the write of the snapshot, stopped half-way by SIGKILL (the partial file stays, unpublished).
    from ctrun_torch.checkpoint import _snapshot

    whole = _snapshot.Plan.write

    def half_then_die(plan, mapped):
        if plan.layout["step"] == args.kill_after:
            mapped[: plan.size // 2] = b"\x01" * (plan.size // 2)
            os.kill(os.getpid(), signal.SIGKILL)
        whole(plan, mapped)

    _snapshot.Plan.write = half_then_die

for step in range(start, args.steps):
    g = torch.Generator().manual_seed(1000 * step + rank)
    x, y = torch.randn(16, 32, generator=g), torch.randn(16, 4, generator=g)
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    for param in model.parameters():
        dist.all_reduce(param.grad)
        param.grad /= world
    optimizer.step()
    extra.add_(float(step + 1) * (rank + 1))
    ck.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "extra": extra}, step)
    if args.wait_each:
        ck.wait()
    if attempt == 0 and rank == 0 and step == args.kill_spill_at:
        kill_spill()
    if attempt == 0 and step == args.pause_after:
        ck.wait()
        with open(os.path.join(args.out, f"ready-{rank}"), "w") as f:
            f.write(str(step))
        deadline = time.monotonic() + 120
        while not os.path.exists(os.path.join(args.out, "release")):
            assert time.monotonic() < deadline, "the test never released the paused job"
            time.sleep(0.05)
        dist.barrier()
    if attempt == 0 and start == 0 and step == args.hold_after:  # not again in a round that resumed before it
        ck.wait()
        assert step in ck.status()["replicated"], ck.status()
        with open(os.path.join(args.out, f"ready-{rank}"), "w") as f:
            f.write(str(step))
        while True:
            dist.barrier()
            time.sleep(0.05)
    if attempt == 0 and step == args.kill_after and not args.torn_save:
        # Every rank's save of this step is complete before the kill (else a slower rank, stopped by the agent in
        # the middle of its save, would make the step before the newest common one, as it should).
        dist.barrier()
        if dying:
            os.kill(os.getpid(), signal.SIGKILL)

if args.wait_spill:
    import time

    marker = os.path.join(args.wait_spill, f"step-{args.steps - 1}", "ctrun-step.json")
    # The spill process runs at the lowest CPU priority: on a machine busy with other work it waits its turn.
    deadline = time.monotonic() + 150
    while not os.path.exists(marker):
        if time.monotonic() > deadline:
            raise SystemExit(f"{marker} not written within 150 s")
        time.sleep(0.05)
torch.save({"model": model.state_dict(), "extra": extra}, os.path.join(args.out, f"final-{rank}.pt"))
dist.destroy_process_group()
