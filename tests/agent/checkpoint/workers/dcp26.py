"""torch.distributed.checkpoint (torch 2.x) through ck.MemoryWriter / ck.MemoryReader, 4 ranks under ctrun:

  1. a DTensor sharded over the 4 ranks (Shard(0)), a replicated tensor, a per-rank tensor, a non-tensor value;
     dcp.save with MemoryWriter at steps 5 and 7 (checkpoint_id = the step);
  2. dcp.load with MemoryReader() (no step: the newest every rank committed, 7) into zeroed copies: values equal;
     MemoryReader(checkpoint_id=5) gives step 5's;
  3. resharding: ranks 0 and 1 alone (a 2-rank group and mesh) load step 7's DTensor as Shard(0) over 2 ranks,
     reading the shards that ranks 2 and 3 wrote from their files in the node's directory;
  4. with --spill-dir DIR (ctrun --checkpoint-dir DIR --checkpoint-dir-every 1): waits until DIR holds step 7
     (the agent's spill process writes it in the background), then plain dcp.load(checkpoint_id=DIR/step-7), no
     ctrun reader, gives the same values.
Prints "rank R/W dcp ok checks=N" (one write) when every check passed."""

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor, Shard, distribute_tensor

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "torch2"))
import no_libuv26  # noqa: E402,F401  (Debian's torch 2.6 has no libuv: TCPStore(use_libuv=False) by default)

import ctrun_torch.checkpoint as ck  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--spill-dir")
args = p.parse_args()

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("gloo")
checks = 0


def check(ok, what):
    global checks
    if not ok:
        print(f"FAIL rank {rank}: {what}", flush=True)
        sys.exit(1)
    checks += 1


def state(step, mesh):
    """Step `step`'s values: the same global tensor on every rank, sharded over `mesh`."""
    full = torch.arange(16 * 6, dtype=torch.float32).reshape(16, 6) * (step + 1)
    return {
        "sharded": distribute_tensor(full, mesh, [Shard(0)]),
        "replicated": torch.full((5,), float(step)),
        f"own.{rank}": torch.full((3,), float(100 * step + rank)),
        "meta": {"step": step, "name": "dcp26"},
    }


def zeroed(sd):
    out = {}
    for k, v in sd.items():
        if isinstance(v, DTensor):
            out[k] = distribute_tensor(torch.zeros(v.shape), v.device_mesh, v.placements)
        elif isinstance(v, torch.Tensor):
            out[k] = torch.zeros_like(v)
        else:
            out[k] = {"step": -1, "name": ""}
    return out


def same(a, b, what):
    for k, v in a.items():
        if isinstance(v, DTensor):
            check(torch.equal(v.to_local(), b[k].to_local()), f"{what}: {k} (local shard) differs")
            check(torch.equal(v.full_tensor(), b[k].full_tensor()), f"{what}: {k} differs")
        elif isinstance(v, torch.Tensor):
            check(torch.equal(v, b[k]), f"{what}: {k} differs: {b[k]} != {v}")
        else:
            check(v == b[k], f"{what}: {k} differs: {b[k]} != {v}")


mesh = init_device_mesh("cpu", (world,))
for step in (5, 7):
    dcp.save(state(step, mesh), storage_writer=ck.MemoryWriter(), checkpoint_id=step)

got = zeroed(state(7, mesh))
dcp.load(got, storage_reader=ck.MemoryReader())
same(state(7, mesh), got, "newest step")
got = zeroed(state(5, mesh))
dcp.load(got, storage_reader=ck.MemoryReader(checkpoint_id=5))
same(state(5, mesh), got, "step 5")

# Resharding: two ranks load what four wrote.
pair = dist.new_group([0, 1])
if rank < 2:
    small = DeviceMesh.from_group(pair, "cpu")
    want = {"sharded": distribute_tensor(torch.arange(16 * 6, dtype=torch.float32).reshape(16, 6) * 8, small,
                                         [Shard(0)]),
            "replicated": torch.full((5,), 7.0)}
    got = {"sharded": distribute_tensor(torch.zeros(16, 6), small, [Shard(0)]), "replicated": torch.zeros(5)}
    dcp.load(got, storage_reader=ck.MemoryReader(), process_group=pair)
    check(got["sharded"].to_local().shape == (8, 6), f"2-rank shard shape {got['sharded'].to_local().shape}")
    same(want, got, "2 ranks loading 4 ranks' step 7")
    # A rank of the smaller world reads the item rank 3 alone wrote.
    got = {"own.3": torch.zeros(3)}
    dcp.load(got, storage_reader=ck.MemoryReader(checkpoint_id=7), process_group=pair)
    check(torch.equal(got["own.3"], torch.full((3,), 703.0)), f"rank 3's item read by rank {rank}: {got['own.3']}")
dist.barrier()

if args.spill_dir:
    path = os.path.join(args.spill_dir, "step-7")
    # The spill process runs at the lowest CPU priority and imports torch 2.6 in the chroot: on a machine busy with
    # other work (two more copies of the suite, or a compiler at normal priority on both cores) that takes its turn,
    # as train.py --wait-spill allows.
    deadline = time.monotonic() + 240
    while not os.path.exists(os.path.join(path, "ctrun-step.json")):
        check(time.monotonic() < deadline, f"{path} not written within 240 s")
        time.sleep(0.1)
    got = zeroed(state(7, mesh))
    dcp.load(got, checkpoint_id=path)  # torch's own FileSystemReader: no ctrun involved in the read
    same(state(7, mesh), got, "plain dcp.load of --checkpoint-dir")
    check(sorted(os.listdir(args.spill_dir)) == ["step-5", "step-7"] or sorted(os.listdir(args.spill_dir)) == ["step-7"],
          f"--checkpoint-dir holds {os.listdir(args.spill_dir)}")
    dist.barrier()

os.write(1, f"rank {rank}/{world} dcp ok checks={checks}\n".encode())
dist.destroy_process_group()
