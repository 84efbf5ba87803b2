"""A torch worker (1.13 on the host, 2.6 in the chroot) of store_relay_test.py: an unchanged torch program whose
store traffic goes through its node's store relay (ctrun sets CTRUN_STORE_RELAY; ctrun's sitecustomize points torch's
rendezvous at it). It runs init_process_group("gloo") (env://, agent-store mode), DDP on gloo, a new_group and a
collective on it, a barrier; with --dcp (torch 2.x) a DTensor on init_device_mesh saved with torch's DCP to
ctrun_torch.checkpoint.MemoryWriter, every rank's held step read back from ctrun_torch.checkpoint's store; with --garbage (one rank) a raw connection to the relay
that sends garbage and must be closed while everyone else goes on. Then it writes OUT/ready.RANK and waits (bounded)
for OUT/counted, written by the test once it counted the connections at the store, and ends with a barrier.

  relay_worker.py OUT [--dcp] [--garbage RANK] [--wait-store]

--wait-store: after init, every rank blocks in a store wait for a key nobody writes and records, in OUT/lost.RANK,
the time its store connection failed (the test kills the store's node).
Prints "rank R/W relay ok ..." in one write when every check passed.
"""
import argparse
import datetime
import json
import os
import socket
import sys
import time

import torch

if torch.__version__.startswith("2"):
    # Debian's torch 2.6 has no libuv: every TCPStore with use_libuv=False (client bytes are the same either way)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "torch2"))
    import no_libuv26  # noqa: E402,F401

import torch.distributed as dist  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("out")
p.add_argument("--dcp", action="store_true")
p.add_argument("--garbage", type=int, default=-1)
p.add_argument("--wait-store", action="store_true")
args = p.parse_args()
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


def fail(what):
    os.write(2, f"FAIL rank {rank}: {what}\n".encode())
    sys.exit(1)


def write_json(name, value):
    tmp = os.path.join(args.out, f".{name}.{rank}")
    with open(tmp, "w") as f:
        json.dump(value, f)
    os.rename(tmp, os.path.join(args.out, f"{name}.{rank}"))


write_json("env", {k: os.environ.get(k) for k in ("CTRUN_STORE_RELAY", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK",
                                                  "TORCHELASTIC_USE_AGENT_STORE")})
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
store = dist.distributed_c10d._get_default_store()

if args.wait_store:
    # The agents notice the dead node too and stop their workers: this rank records what its store connection saw
    # first (a SIGKILL after --shutdown-timeout still ends it).
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    write_json("waiting", {"at": time.time()})
    try:
        store.wait(["never-written"], datetime.timedelta(seconds=60))
        fail("a wait for a key nobody writes returned")
    except Exception as e:  # the store's node went away: torch raises as its connection closes
        write_json("lost", {"at": time.time(), "error": str(e)[:300]})
    sys.exit(0)

# DDP on gloo: every replica ends equal.
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
torch.manual_seed(rank + 1)
for _ in range(3):
    opt.zero_grad()
    model(torch.randn(16, 8)).sum().backward()
    opt.step()
flat = torch.cat([q.detach().reshape(-1) for q in model.parameters()])
lo, hi = flat.clone(), flat.clone()
dist.all_reduce(lo, op=dist.ReduceOp.MIN)
dist.all_reduce(hi, op=dist.ReduceOp.MAX)
# Equal to the last bits or so: torch 2.6's gloo all_reduce over 12 ranks does not give every rank the same bits
# (3e-8 of 5 measured, with and without the relay); replicas that were not kept in step differ by about 0.1.
if not torch.allclose(lo, hi, rtol=1e-6, atol=1e-6):
    fail(f"DDP replicas differ by up to {(hi - lo).abs().max().item():.3g} (of {flat.abs().max().item():.3g})")

# A new group of the even ranks, and a collective on it.
evens = dist.new_group(list(range(0, world, 2)))
if rank % 2 == 0:
    t = torch.tensor([float(rank)])
    dist.all_reduce(t, group=evens)
    if t.item() != float(sum(range(0, world, 2))):
        fail(f"all_reduce on the new group gave {t.item()}")

checks = "ddp new_group"
if args.dcp:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    import ctrun_torch.checkpoint as ck

    mesh = init_device_mesh("cpu", (world,))
    full = torch.arange(world * 4 * 3, dtype=torch.float32).reshape(world * 4, 3)
    sharded = distribute_tensor(full, mesh, [Shard(0)])
    if not torch.equal(sharded.full_tensor(), full):
        fail("a DTensor sharded over the mesh does not gather back")
    dcp.save({"w": sharded, "step": torch.tensor([7.0])}, storage_writer=ck.MemoryWriter(), checkpoint_id=7)
    # Every rank's registry (ctrun_torch.checkpoint's store, through the relay too) lists step 7 for every rank.
    held = ck._state().registry.every_rank()
    if any(7 not in steps for steps in held):
        fail(f"step 7 is not listed for every rank: {held}")
    checks += " devicemesh+dtensor dcp"

if rank == args.garbage:
    # A client of the relay that sends garbage loses its own connection; this rank's store goes on.
    host, _, port = os.environ["CTRUN_STORE_RELAY"].rpartition(":")
    s = socket.create_connection((host, int(port)), timeout=10)
    s.sendall(b"\x00\xce\xf7\x85\x3c" + b"\xee" * 64)
    s.settimeout(10)
    try:
        closed = s.recv(1) == b""
    except ConnectionResetError:
        closed = True
    s.close()
    if not closed:
        fail("the relay did not close a connection that sent garbage")
    store.set(f"after-garbage/{rank}", "ok")
    if store.get(f"after-garbage/{rank}") != b"ok":
        fail("the store did not work after the garbage")
    checks += " garbage"

write_json("ready", {"checks": checks})
deadline = time.monotonic() + 120
while not os.path.exists(os.path.join(args.out, "counted")):
    if time.monotonic() > deadline:
        fail("the test did not count the store's connections within 120 s")
    time.sleep(0.05)
dist.barrier()
os.write(1, f"rank {rank}/{world} relay ok: {checks}\n".encode())
dist.destroy_process_group()
