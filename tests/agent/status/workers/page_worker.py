"""A torch worker on backend "ctrun" for the job's page tests: all_reduces paced by PACE_S (SLOW_RANK sleeps twice
as long), an in-memory checkpoint (ctrun_torch.checkpoint) saved every step and loaded at the start. Steered by files
in OUT (argv[1]): in attempt 0, rank HANG_RANK sleeps after step HANG_AFTER until OUT/release-hang exists (the others
wait inside the next all_reduce: a hang the agent reports); every attempt runs until OUT/finish exists (the ranks
agree on it in a collective), then ends cleanly. Writes OUT/pid-<attempt>-<rank> at the start and
OUT/step-<attempt>-<rank> (its newest saved step) each step. Bounded: it gives up after 300 s."""
import os
import sys
import time

import torch
import torch.distributed as dist
import ctrun_torch  # noqa: F401  (registers backend "ctrun")
import ctrun_torch.checkpoint as ck

out = sys.argv[1]
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
torch.set_num_threads(1)
dist.init_process_group("ctrun")


def write(name, text):
    with open(os.path.join(out, name), "w") as f:
        f.write(text)


write(f"pid-{attempt}-{rank}", str(os.getpid()))
state = {"t": torch.ones(4)}
resumed = ck.load()
step = 0
if resumed is not None:
    step, state = resumed[0] + 1, resumed[1]
print(f"rank {rank} attempt {attempt} starts at step {step}", flush=True)
pace = float(os.environ.get("PACE_S", "0.1")) * (2 if rank == int(os.environ.get("SLOW_RANK", "-1")) else 1)
hang_rank, hang_after = int(os.environ.get("HANG_RANK", "-1")), int(os.environ.get("HANG_AFTER", "10"))
deadline = time.monotonic() + 300
while time.monotonic() < deadline:
    dist.all_reduce(state["t"])
    state["t"].div_(world)
    ck.save(state, step)
    write(f"step-{attempt}-{rank}", str(step))
    if step % 10 == 0:
        print(f"rank {rank} saved step {step}", flush=True)
    if attempt == 0 and rank == hang_rank and step == hang_after:
        while not os.path.exists(os.path.join(out, "release-hang")) and time.monotonic() < deadline:
            time.sleep(0.1)  # the sleeping line
    done = torch.tensor([1.0 if os.path.exists(os.path.join(out, "finish")) else 0.0])
    dist.all_reduce(done, op=dist.ReduceOp.MAX)
    if done.item() > 0:
        break
    time.sleep(pace)
    step += 1
print(f"rank {rank} done at step {step}", flush=True)
dist.destroy_process_group()
