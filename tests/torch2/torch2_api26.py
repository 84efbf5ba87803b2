"""The torch 2.x API a CPU user reaches through backend "ctrun" (module ctrun_torch built by build_ctrun_torch26.sh),
each part against gloo in the same job where gloo can, else against its definition.

usage: python3 torch2_api26.py BACKEND        BACKEND: "cpu:ctrun" (a device string) or "ctrun"
env:   under ctrun: ctrun --standalone --nproc-per-node=4 --no-python tests/torch2/chroot_python.sh torch2_api26.py
       cpu:ctrun (agent-store mode); run_torch2_api26.py runs exactly that. 4 ranks (2 and 3 work; the 2-D mesh
       needs an even world size >= 4).

Checked, in order:
  * the fused ops on the group object: allgather_into_tensor_coalesced, reduce_scatter_tensor_coalesced (SUM,
    MAX, AVG), allreduce_coalesced, dist.all_reduce_coalesced; their argument errors
  * the coalescing manager (distributed_c10d._coalescing_manager), sync and async_ops=True, over all_reduce,
    all_gather_into_tensor and reduce_scatter_tensor (its fast path: the three fused ops above)
  * funcol (torch.distributed._functional_collectives): all_gather_tensor (gather_dim 0 and 1),
    reduce_scatter_tensor, all_reduce and their *_coalesced forms, on the group and on a 1-D mesh
  * DTensor on init_device_mesh("cpu", (world,)): distribute_tensor Shard(0) -> Replicate -> Shard(0), Shard(1)
    -> Replicate, uneven rows, Partial -> Replicate, Partial -> Shard(0), full_tensor, a matmul and a sum; the
    same on DeviceMesh.from_group(gloo); a 2-D mesh (2, world/2) with Shard(0), Shard(1) -> Replicate twice
  * new_subgroups(group_size=2), new_group(ranks, use_local_synchronization=True) with rank 0 not calling it
  * batch_isend_irecv ring, Work.get_future with torch.futures.collect_all and Future.then
  * what torch 2.6 refuses for every backend but NCCL/gloo: split_group (RuntimeError, no bound device) and
    dist.monitored_barrier (ValueError on "ctrun"), and group.monitored_barrier() on the group object, which works
Prints "rank R/N backend=B ok checks=K" and exits 0 only when every check passed; each failed check prints a FAIL
line with the exception, and the run goes on (so one missing op shows as FAIL lines, not a crash).
"""
import datetime
import faulthandler
import functools
import os
import sys
import traceback

import torch
import torch.distributed as dist

# Debian's 2.6 is built without libuv: every TCPStore needs use_libuv=False, and in agent-store mode
# init_process_group builds its client in torch.distributed.rendezvous without passing it.
rdv = sys.modules["torch.distributed.rendezvous"]
rdv.TCPStore = functools.partial(dist.TCPStore, use_libuv=False)

import ctrun_torch  # noqa: E402,F401  registers backend "ctrun" (devices=["cpu"] on torch 2.x)
import torch.distributed._functional_collectives as funcol  # noqa: E402
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh  # noqa: E402
from torch.distributed.distributed_c10d import _coalescing_manager  # noqa: E402
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor  # noqa: E402


def say(line):
    """One write(2) per line: the ranks share one pipe."""
    os.write(1, (line + "\n").encode())


backend = sys.argv[1] if len(sys.argv) > 1 else "cpu:ctrun"
# A hang shows where it is: every thread's stack, then exit, well before the driver's 240 s job limit.
faulthandler.dump_traceback_later(int(os.environ.get("TORCH2_API_HANG_S", "180")), exit=True)
dist.init_process_group(backend, timeout=datetime.timedelta(seconds=60))
rank, world = dist.get_rank(), dist.get_world_size()
ours = dist.distributed_c10d._get_default_group()
gloo = dist.new_group(backend="gloo")
checks = 0
failures = 0


def check(name, fn):
    """fn() -> True, or a string saying what differs; an exception fails the check with its first line."""
    global checks, failures
    checks += 1
    try:
        result = fn()
    except Exception as e:  # noqa: BLE001  every failure is reported, the run goes on
        result = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
        if os.environ.get("TORCH2_API_TRACEBACK"):
            say(traceback.format_exc())
    if result is not True:
        failures += 1
        say(f"FAIL rank {rank}/{world} {name}: {result}")


def same(a, b):
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    a, b = torch.as_tensor(a), torch.as_tensor(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.is_floating_point():
        return torch.allclose(a.double(), b.double(), rtol=1e-5, atol=1e-5)
    return torch.equal(a, b)


def expect(got, want):
    return True if same(got, want) else f"got {short(got)} want {short(want)}"


def short(x):
    if isinstance(x, (list, tuple)):
        return [short(t) for t in x]
    x = torch.as_tensor(x)
    return f"{tuple(x.shape)} {x.dtype} {x.flatten()[:6].tolist()}"


def compare(name, run, want):
    """run(group) -> result: on the ctrun group it must give `want`; on gloo (if gloo has the op) the same."""
    check(name, lambda: expect(run(ours), want))
    check(name + " (gloo, the reference)", lambda: expect(run(gloo), want))


def data(r, shape=(6,), dtype=torch.float32):
    n = 1
    for s in shape:
        n *= s
    return ((torch.arange(n, dtype=torch.float64) + 1) * (r + 1)).reshape(shape).to(dtype)


def wait(x):
    """funcol results are AsyncCollectiveTensors until waited."""
    return x.wait() if isinstance(x, funcol.AsyncCollectiveTensor) else x


say(f"rank {rank}/{world} torch {torch.__version__} ctrun_torch built for {ctrun_torch.torch_version} "
    f"backend {dist.get_backend()}")

# ---- the fused ops on the group object --------------------------------------------------------------------------
shapes = [(2, 3), (5,), (1,)]
gathered = [torch.cat([data(r, s) for r in range(world)]) for s in shapes]


def run_agc(group):
    ins = [data(rank, s) for s in shapes]
    outs = [torch.full((world * s[0],) + s[1:], -1.0) for s in shapes]
    group.allgather_into_tensor_coalesced(outs, ins).wait()
    return outs


compare("allgather_into_tensor_coalesced", run_agc, gathered)


def reduce_scatter_want(op_fold, shapes_out):
    """Each input (world * rows, ...) holds rank-r blocks; this rank gets the fold of every rank's block `rank`."""
    want = []
    for s in shapes_out:
        blocks = [data(r, (world * s[0],) + s[1:]).chunk(world)[rank] for r in range(world)]
        want.append(functools.reduce(op_fold, blocks) if op_fold else sum(blocks) / world)
    return want


for op_name, op, fold in (("SUM", dist.ReduceOp.SUM, torch.add), ("MAX", dist.ReduceOp.MAX, torch.maximum),
                          ("AVG", dist.ReduceOp.AVG, None)):
    def run_rsc(group, op=op):
        ins = [data(rank, (world * s[0],) + s[1:]) for s in shapes]
        outs = [torch.full(s, -1.0) for s in shapes]
        opts = dist.ReduceScatterOptions()
        opts.reduceOp = op
        group.reduce_scatter_tensor_coalesced(outs, ins, opts).wait()
        return outs
    want = reduce_scatter_want(fold, shapes)
    if op_name == "SUM":
        compare(f"reduce_scatter_tensor_coalesced {op_name}", run_rsc, want)
    else:  # the definition only: gloo refuses AVG, and 2.6's gloo sums whatever the op (MAX gives the SUM)
        check(f"reduce_scatter_tensor_coalesced {op_name}", lambda: expect(run_rsc(ours), want))


def run_arc(group):
    ts = [data(rank, s) for s in shapes]
    opts = dist.AllreduceCoalescedOptions()
    opts.reduceOp = dist.ReduceOp.SUM
    group.allreduce_coalesced(ts, opts).wait()
    return ts


summed = [sum(data(r, s) for r in range(world)) for s in shapes]
compare("allreduce_coalesced (group object)", run_arc, summed)


def run_dist_arc(group):
    ts = [data(rank, s) for s in shapes]
    dist.all_reduce_coalesced(ts, group=group)
    return ts


compare("dist.all_reduce_coalesced", run_dist_arc, summed)


def raises(fn, words):
    try:
        fn()
    except RuntimeError as e:
        return True if words in str(e) else f"RuntimeError without {words!r}: {str(e)[:200]}"
    return "no error"


check("allgather_into_tensor_coalesced: mixed dtypes refused", lambda: raises(
    lambda: ours.allgather_into_tensor_coalesced([torch.zeros(world), torch.zeros(world, dtype=torch.int64)],
                                                 [torch.zeros(1), torch.zeros(1, dtype=torch.int64)]), "same dtype"))
check("reduce_scatter_tensor_coalesced: wrong size refused", lambda: raises(
    lambda: ours.reduce_scatter_tensor_coalesced([torch.zeros(2), torch.zeros(1)],
                                                 [torch.zeros(2 * world), torch.zeros(world + 1)]), "elements"))

# ---- the coalescing manager --------------------------------------------------------------------------------------
for async_ops in (False, True):
    tag = "async_ops" if async_ops else "sync"

    def run_cm_all_reduce(group, async_ops=async_ops):
        ts = [data(rank, s) for s in shapes]
        with _coalescing_manager(group, async_ops=async_ops) as cm:
            for t in ts:
                dist.all_reduce(t, group=group)
        if async_ops:
            cm.wait()
        return ts
    compare(f"coalescing manager {tag}: all_reduce", run_cm_all_reduce, summed)

    def run_cm_all_gather(group, async_ops=async_ops):
        outs = [torch.full((world * s[0],) + s[1:], -1.0) for s in shapes]
        with _coalescing_manager(group, async_ops=async_ops) as cm:
            for o, s in zip(outs, shapes):
                dist.all_gather_into_tensor(o, data(rank, s), group=group)
        if async_ops:
            cm.wait()
        return outs
    compare(f"coalescing manager {tag}: all_gather_into_tensor", run_cm_all_gather, gathered)

    def run_cm_reduce_scatter(group, async_ops=async_ops):
        outs = [torch.full(s, -1.0) for s in shapes]
        with _coalescing_manager(group, async_ops=async_ops) as cm:
            for o, s in zip(outs, shapes):
                dist.reduce_scatter_tensor(o, data(rank, (world * s[0],) + s[1:]), group=group)
        if async_ops:
            cm.wait()
        return outs
    compare(f"coalescing manager {tag}: reduce_scatter_tensor", run_cm_reduce_scatter,
            reduce_scatter_want(torch.add, shapes))

# ---- funcol ------------------------------------------------------------------------------------------------------
# Distinct dim names: DeviceMesh equality ignores the process group, and DTensor's sharding cache would otherwise
# hand the gloo mesh's results the ctrun mesh (seen: a "gloo" matmul ran on ctrun).
mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("ctrun",))
gloo_mesh = DeviceMesh.from_group(gloo, "cpu", mesh_dim_names=("gloo",))
m = data(rank, (2, 3))
compare("funcol all_gather_tensor dim 0", lambda g: wait(funcol.all_gather_tensor(m, 0, g)),
        torch.cat([data(r, (2, 3)) for r in range(world)], 0))
compare("funcol all_gather_tensor dim 1", lambda g: wait(funcol.all_gather_tensor(m, 1, g)),
        torch.cat([data(r, (2, 3)) for r in range(world)], 1))
compare("funcol all_gather_tensor on the mesh", lambda g: wait(funcol.all_gather_tensor(
    m, 0, mesh if g is ours else gloo_mesh)), torch.cat([data(r, (2, 3)) for r in range(world)], 0))
big = data(rank, (world * 2, 3))
compare("funcol reduce_scatter_tensor sum", lambda g: wait(funcol.reduce_scatter_tensor(big, "sum", 0, g)),
        sum(data(r, (world * 2, 3)) for r in range(world)).chunk(world)[rank])
compare("funcol all_reduce sum", lambda g: wait(funcol.all_reduce(m, "sum", g)),
        sum(data(r, (2, 3)) for r in range(world)))
compare("funcol all_reduce max on the mesh", lambda g: wait(funcol.all_reduce(m, "max", mesh if g is ours else
                                                                             gloo_mesh)), data(world - 1, (2, 3)))
compare("funcol all_gather_into_tensor_coalesced", lambda g: [wait(t) for t in funcol.all_gather_into_tensor_coalesced(
    [data(rank, s) for s in shapes], g)], gathered)
compare("funcol reduce_scatter_tensor_coalesced", lambda g: [wait(t) for t in funcol.reduce_scatter_tensor_coalesced(
    [data(rank, (world * s[0],) + s[1:]) for s in shapes], "sum", [0] * len(shapes), g)],
    reduce_scatter_want(torch.add, shapes))
compare("funcol all_reduce_coalesced", lambda g: [wait(t) for t in funcol.all_reduce_coalesced(
    [data(rank, s) for s in shapes], "sum", g)], summed)

# ---- DTensor -----------------------------------------------------------------------------------------------------
full = torch.arange(world * 4 * 3, dtype=torch.float32).reshape(world * 4, 3)  # the same on every rank
uneven = torch.arange((world * 2 + 1) * 3, dtype=torch.float32).reshape(world * 2 + 1, 3)
weight = torch.arange(3 * 2, dtype=torch.float32).reshape(3, 2) / 10


partial_sum = sum(data(r, (world * 2, 3)) for r in range(world))
# The redistributions a user tries first: (name, run(mesh) -> local result, what it must be). Each runs on its own,
# so one missing op fails only the steps that need it.
dtensor_steps = [
    ("distribute_tensor Shard(0) local", lambda mh: distribute_tensor(full, mh, [Shard(0)]).to_local(),
     full.chunk(world)[rank]),
    ("Shard(0) -> Replicate", lambda mh: distribute_tensor(full, mh, [Shard(0)]).redistribute(
        mh, [Replicate()]).to_local(), full),
    ("Shard(0) -> Replicate -> Shard(0)", lambda mh: distribute_tensor(full, mh, [Shard(0)]).redistribute(
        mh, [Replicate()]).redistribute(mh, [Shard(0)]).to_local(), full.chunk(world)[rank]),
    ("Shard(1) -> Replicate", lambda mh: distribute_tensor(full, mh, [Shard(1)]).redistribute(
        mh, [Replicate()]).to_local(), full),
    ("uneven Shard(0) -> Replicate", lambda mh: distribute_tensor(uneven, mh, [Shard(0)]).redistribute(
        mh, [Replicate()]).to_local(), uneven),
    ("Partial -> Replicate", lambda mh: DTensor.from_local(data(rank, (world * 2, 3)), mh, [Partial()]).redistribute(
        mh, [Replicate()]).to_local(), partial_sum),
    ("Partial -> Shard(0)", lambda mh: DTensor.from_local(data(rank, (world * 2, 3)), mh, [Partial()]).redistribute(
        mh, [Shard(0)]).to_local(), partial_sum.chunk(world)[rank]),
    ("full_tensor", lambda mh: distribute_tensor(full, mh, [Shard(0)]).full_tensor(), full),
    ("matmul Shard(0) x Replicate", lambda mh: (distribute_tensor(full, mh, [Shard(0)]) @ distribute_tensor(
        weight, mh, [Replicate()])).full_tensor(), full @ weight),
    ("sum of a Shard(0)", lambda mh: distribute_tensor(full, mh, [Shard(0)]).sum().full_tensor(), full.sum()),
]
for step, run, want in dtensor_steps:
    compare(f"DTensor 1-D mesh: {step}", lambda g, run=run: run(mesh if g is ours else gloo_mesh), want)

if world >= 4 and world % 2 == 0:
    def mesh_2d():
        mesh2 = init_device_mesh("cpu", (2, world // 2), mesh_dim_names=("dp", "tp"))
        dt = distribute_tensor(full, mesh2, [Shard(0), Shard(1)])  # 3 columns: uneven on tp
        rep = dt.redistribute(mesh2, [Replicate(), Replicate()])
        tp_sum = wait(funcol.all_reduce(data(rank, (2,)), "sum", (mesh2, 1)))
        tp_ranks = [r for r in range(world) if r // (world // 2) == rank // (world // 2)]
        return expect([rep.to_local(), dt.full_tensor(), tp_sum],
                      [full, full, sum(data(r, (2,)) for r in tp_ranks)])
    check("DTensor 2-D mesh (dp, tp): Shard -> Replicate, full_tensor, funcol all_reduce on tp", mesh_2d)

# ---- new_subgroups, new_group(use_local_synchronization=True) ----------------------------------------------------
def run_subgroups(be):
    cur, _ = dist.new_subgroups(group_size=2, backend=be)
    t = data(rank)
    dist.all_reduce(t, group=cur)
    return t


pair = [rank - rank % 2, rank - rank % 2 + 1]
check("new_subgroups(group_size=2)", lambda: expect(run_subgroups(None), sum(data(r) for r in pair)))
check("new_subgroups(group_size=2) (gloo, the reference)",
      lambda: expect(run_subgroups("gloo"), sum(data(r) for r in pair)))

members = list(range(1, world))
if rank in members:  # rank 0 does not take part: that is what local synchronization allows
    def run_local(be):
        g = dist.new_group(members, backend=be, use_local_synchronization=True)
        t = data(rank)
        dist.all_reduce(t, group=g)
        return expect(t, sum(data(r) for r in members))
    check("new_group(use_local_synchronization=True) without rank 0", lambda: run_local(None))
    check("new_group(use_local_synchronization=True) (gloo, the reference)", lambda: run_local("gloo"))

# ---- batch_isend_irecv, get_future, collect_all ------------------------------------------------------------------
nxt, prv = (rank + 1) % world, (rank - 1) % world


def run_batch(group):
    got = torch.zeros(6)
    works = dist.batch_isend_irecv([dist.P2POp(dist.isend, data(rank), nxt, group),
                                    dist.P2POp(dist.irecv, got, prv, group)])
    if group is gloo:  # gloo's p2p Work has no future (RuntimeError: Work::getFuture not implemented)
        for w in works:
            w.wait()
    else:
        torch.futures.collect_all([w.get_future() for w in works]).wait()
    return got


compare("batch_isend_irecv ring, collect_all of its futures", run_batch, data(prv))


def run_collect_all(group):
    ts = [data(rank, s) for s in shapes]
    futs = [dist.all_reduce(t, group=group, async_op=True).get_future() for t in ts]
    done = torch.futures.collect_all(futs).wait()
    doubled = futs[0].then(lambda f: f.value()[0] * 2).wait()
    return [f.value()[0] for f in done] + [doubled]


compare("async all_reduce x3: collect_all of get_future, then()", run_collect_all, summed + [summed[0] * 2])

# ---- what 2.6 refuses (documented in docs/comm.md) ---------------------------------------------------------------
def split_group_refused():
    try:
        dist.split_group(split_ranks=[list(range(world))])
    except RuntimeError as e:
        return True if "No device associated with the default pg" in str(e) else f"other error: {e}"
    return "split_group worked: update docs/comm.md"


check("split_group: RuntimeError (needs NCCL and a bound device)", split_group_refused)


def monitored_barrier_refused():
    try:
        dist.monitored_barrier(timeout=datetime.timedelta(seconds=20))
    except ValueError as e:
        return True if "only implemented for GLOO" in str(e) else f"other error: {e}"
    return "dist.monitored_barrier worked on ctrun: update docs/comm.md"


check("dist.monitored_barrier on ctrun: ValueError (gloo only in 2.6)", monitored_barrier_refused)
check("dist.monitored_barrier on gloo (the reference)",
      lambda: dist.monitored_barrier(group=gloo, timeout=datetime.timedelta(seconds=20)) is None)
check("group.monitored_barrier() on the ctrun group object",
      lambda: ours.monitored_barrier(datetime.timedelta(seconds=20)) is None)

dist.barrier()
dist.destroy_process_group()
# the line run_ctrun_backend26.verdict() looks for, one per rank
say(f"rank {rank}/{world} backend={backend} {'ok' if not failures else f'FAILED {failures} of'} checks={checks}")
sys.exit(1 if failures else 0)
