"""A torch 2.x worker on backend "ctrun" (module ctrun_torch built by build_ctrun_torch26.sh), checked op by op
against gloo in the same job.

usage: python3 ctrun_backend26.py BACKEND [dead-peer]   BACKEND: "ctrun" or a device string such as "cpu:ctrun"
env:   under ctrun (agent-store mode): RANK WORLD_SIZE MASTER_ADDR MASTER_PORT TORCHELASTIC_USE_AGENT_STORE=True
       without a launcher: RANK WORLD_SIZE INIT_METHOD=file://...  (run_ctrun_backend26.py sets them)

The default group runs on BACKEND, a second group of all ranks on gloo. Every op runs on both with the same
inputs: the results must be equal (floats: allclose) and equal to what the op must give, computed locally. Where
gloo refuses an op (AVG, some dtypes), only the local expectation checks it. Then a sub-group [0, 1] created
through the backend's creator, async work (wait, is_completed, get_future), and DistributedDataParallel: the
same model and data trained for 3 steps on the BACKEND group and on the gloo group must end with the same
parameters, without and with the fp16 compression hook. Prints "rank R/N backend=B ok checks=K" and exits 0 only
when every check passed; each failed check prints a FAIL line.
With "dead-peer" (group timeout 10 s) the last rank leaves right after init and every other rank's all_reduce must
raise RuntimeError within the timeout (+20 s).
"""
import datetime
import functools
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

# Debian's 2.6 is built without libuv: every TCPStore needs use_libuv=False, and in agent-store mode
# init_process_group builds its client in torch.distributed.rendezvous without passing it.
rdv = sys.modules["torch.distributed.rendezvous"]
rdv.TCPStore = functools.partial(dist.TCPStore, use_libuv=False)

import ctrun_torch  # noqa: E402  registers backend "ctrun" (devices=["cpu"] on torch 2.x)


def say(line):
    """One write(2) per line: the ranks share one pipe."""
    os.write(1, (line + "\n").encode())


backend = sys.argv[1] if len(sys.argv) > 1 else "ctrun"
dead_peer = sys.argv[2:] == ["dead-peer"]
group_timeout = 10 if dead_peer else 60
init = os.environ.get("INIT_METHOD", "env://")
kwargs = {}
if not init.startswith("env://"):
    kwargs = dict(rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
dist.init_process_group(backend, init_method=init, timeout=datetime.timedelta(seconds=group_timeout), **kwargs)
rank, world = dist.get_rank(), dist.get_world_size()
gloo = dist.new_group(backend="gloo")
checks = 0
failures = 0


def check(name, ok, detail=""):
    global checks, failures
    checks += 1
    if not ok:
        failures += 1
        say(f"FAIL rank {rank}/{world} {name} {detail}")


if dead_peer:
    # the last rank leaves right after init; the others' all_reduce must raise RuntimeError within the timeout
    if rank == world - 1:
        say(f"rank {rank}/{world} backend={backend} ok checks=0")
        os._exit(0)
    t0 = time.monotonic()
    error = None
    try:
        dist.all_reduce(torch.ones(1 << 16))
    except RuntimeError as e:
        error = e
    secs = time.monotonic() - t0
    check("dead peer: all_reduce raises RuntimeError", error is not None and secs < group_timeout + 20,
          f"after {secs:.1f} s: {error!r}")
    say(f"note: rank {rank} dead peer: {type(error).__name__} after {secs:.1f} s: {str(error).splitlines()[0][:150]}")
    say(f"rank {rank}/{world} backend={backend} {'ok' if not failures else 'FAILED'} checks={checks}")
    os._exit(1 if failures else 0)  # no destroy: the group has a dead member


def same(a, b):
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.is_floating_point():
        tol = 1e-2 if a.dtype in (torch.float16, torch.bfloat16) else 1e-5
        return torch.allclose(a.double(), b.double(), rtol=tol, atol=tol)
    return torch.equal(a, b)


def compare(name, run, want):
    """run(group) -> tensor: on the BACKEND group it must give `want`; on gloo (if gloo has the op) the same."""
    ours = run(None)
    check(name, same(ours, want), f"ours={ours.flatten()[:8].tolist()} want={want.flatten()[:8].tolist()}")
    try:
        theirs = run(gloo)
    except (RuntimeError, ValueError) as e:  # gloo lacks the op or dtype: the local expectation suffices
        if rank == 0:
            say(f"note: gloo refuses {name}: {str(e).splitlines()[0][:100]}")
        return
    check(name + " vs gloo", same(ours, theirs), f"ours={ours.flatten()[:8].tolist()} "
                                                 f"gloo={theirs.flatten()[:8].tolist()}")


def data(r, n=6, dtype=torch.float32):
    t = torch.arange(n, dtype=torch.float64) + r + 1
    return t.to(dtype)


say(f"rank {rank}/{world} torch {torch.__version__} ctrun_torch built for {ctrun_torch.torch_version} "
    f"backend {dist.get_backend()} config {getattr(dist, 'get_backend_config', lambda: '-')()}")

# all_reduce over dtypes and ops
ops = {"SUM": (dist.ReduceOp.SUM, lambda ts: functools.reduce(torch.add, ts)),
       "PRODUCT": (dist.ReduceOp.PRODUCT, lambda ts: functools.reduce(torch.mul, ts)),
       "MIN": (dist.ReduceOp.MIN, lambda ts: functools.reduce(torch.minimum, ts)),
       "MAX": (dist.ReduceOp.MAX, lambda ts: functools.reduce(torch.maximum, ts)),
       "AVG": (dist.ReduceOp.AVG, lambda ts: functools.reduce(torch.add, ts) / len(ts))}
for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int32,
              torch.int64):
    for op_name, (op, fold) in ops.items():
        if op_name == "AVG" and not dtype.is_floating_point:
            continue
        want = fold([data(r, dtype=dtype) for r in range(world)])  # in the dtype: integers wrap as ours do

        def run(group, dtype=dtype, op=op):
            t = data(rank, dtype=dtype)
            dist.all_reduce(t, op=op, group=group)
            return t
        compare(f"all_reduce {op_name} {dtype}", run, want)
for op_name, op, fold in (("BAND", dist.ReduceOp.BAND, torch.bitwise_and), ("BOR", dist.ReduceOp.BOR, torch.bitwise_or),
                          ("BXOR", dist.ReduceOp.BXOR, torch.bitwise_xor)):
    want = functools.reduce(fold, [data(r, dtype=torch.int64) * 5 for r in range(world)])

    def run(group, op=op):
        t = data(rank, dtype=torch.int64) * 5
        dist.all_reduce(t, op=op, group=group)
        return t
    compare(f"all_reduce {op_name} int64", run, want)

# a non-contiguous tensor (every other column of a matrix)
def run_strided(group):
    m = torch.arange(24, dtype=torch.float32).reshape(4, 6) + rank
    dist.all_reduce(m[:, ::2], group=group)
    return m
want = torch.arange(24, dtype=torch.float32).reshape(4, 6)
want[:, ::2] = want[:, ::2] * world + sum(range(world))
want[:, 1::2] += rank
# Only against the expectation: torch 2.6's gloo reduces the first numel() elements of storage from the view's
# start (here rows 0-1 whole, rows 2-3 untouched), not the view.
check("all_reduce non-contiguous", same(run_strided(None), want))

# broadcast from every root
for root in range(world):
    def run(group, root=root):
        t = data(rank, dtype=torch.float64)
        dist.broadcast(t, src=root, group=group)
        return t
    compare(f"broadcast root {root}", run, data(root, dtype=torch.float64))

# all_gather (list) and all_gather_into_tensor
def run_ag(group):
    outs = [torch.empty(6, dtype=torch.int32) for _ in range(world)]
    dist.all_gather(outs, data(rank, dtype=torch.int32), group=group)
    return torch.stack(outs)
compare("all_gather", run_ag, torch.stack([data(r, dtype=torch.int32) for r in range(world)]))


def run_agt(group):
    out = torch.empty(world * 6, dtype=torch.bfloat16)
    dist.all_gather_into_tensor(out, data(rank, dtype=torch.bfloat16), group=group)
    return out
compare("all_gather_into_tensor", run_agt, torch.cat([data(r, dtype=torch.bfloat16) for r in range(world)]))

# reduce_scatter_tensor (and the list form)
def run_rst(group):
    out = torch.empty(3, dtype=torch.float32)
    dist.reduce_scatter_tensor(out, data(rank, n=3 * world), group=group)
    return out
want = sum(data(r, n=3 * world) for r in range(world))[rank * 3:rank * 3 + 3]
compare("reduce_scatter_tensor", run_rst, want)


def run_rs(group):
    out = torch.empty(3, dtype=torch.int64)
    dist.reduce_scatter(out, list(data(rank, n=3 * world, dtype=torch.int64).chunk(world)), group=group)
    return out
compare("reduce_scatter", run_rs, want.to(torch.int64))

# all_to_all_single with uneven splits: rank r sends (d + 1) rows to rank d, 2 columns a row
in_splits = [d + 1 for d in range(world)]
out_splits = [rank + 1] * world


def run_a2a(group):
    inp = torch.cat([torch.full((d + 1, 2), float(100 * rank + d)) for d in range(world)])
    out = torch.empty(sum(out_splits), 2)
    dist.all_to_all_single(out, inp, out_splits, in_splits, group=group)
    return out
compare("all_to_all_single uneven", run_a2a, torch.cat([torch.full((rank + 1, 2), float(100 * s + rank))
                                                       for s in range(world)]))


def run_a2a_even(group):
    out = torch.empty(2 * world, dtype=torch.int64)
    dist.all_to_all_single(out, torch.arange(2 * world, dtype=torch.int64) + 10 * rank, group=group)
    return out
compare("all_to_all_single even", run_a2a_even,
        torch.cat([torch.arange(2 * rank, 2 * rank + 2, dtype=torch.int64) + 10 * s for s in range(world)]))

# reduce, gather, scatter to/from the last rank
root = world - 1


def run_reduce(group):
    t = data(rank)
    dist.reduce(t, dst=root, group=group)
    return t if rank == root else torch.zeros(6)
compare("reduce", run_reduce, sum(data(r) for r in range(world)) if rank == root else torch.zeros(6))


def run_gather(group):
    outs = [torch.empty(6) for _ in range(world)] if rank == root else None
    dist.gather(data(rank), outs, dst=root, group=group)
    return torch.stack(outs) if rank == root else torch.zeros(1)
compare("gather", run_gather, torch.stack([data(r) for r in range(world)]) if rank == root else torch.zeros(1))


def run_scatter(group):
    out = torch.empty(6)
    dist.scatter(out, [data(10 * r) for r in range(world)] if rank == root else None, src=root, group=group)
    return out
compare("scatter", run_scatter, data(10 * rank))

# send/recv around the ring, isend/irecv with tags (two messages each way, received in the other order)
nxt, prv = (rank + 1) % world, (rank - 1) % world


def run_ring(group):
    got = torch.empty(6)
    if rank % 2 == 0:  # the gloo group has every rank in order: global ranks are its ranks
        dist.send(data(rank), dst=nxt, group=group)
        dist.recv(got, src=prv, group=group)
    else:
        dist.recv(got, src=prv, group=group)
        dist.send(data(rank), dst=nxt, group=group)
    return got
compare("send/recv ring", run_ring, data(prv))


def run_tags(group):
    a, b = torch.empty(6), torch.empty(6)
    reqs = [dist.isend(data(rank), dst=nxt, group=group, tag=7), dist.isend(data(rank) * 2, dst=nxt, group=group, tag=8),
            dist.irecv(b, src=prv, group=group, tag=8), dist.irecv(a, src=prv, group=group, tag=7)]
    for r in reqs:
        r.wait()
    return torch.stack([a, b])
compare("isend/irecv tags", run_tags, torch.stack([data(prv), data(prv) * 2]))


def run_batch(group):
    got = torch.empty(6)
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, data(rank), nxt, group), dist.P2POp(dist.irecv, got, prv, group)])
    for r in reqs:
        r.wait()
    return got
compare("batch_isend_irecv", run_batch, data(prv))

# barrier, sub-group through the creator, async work and its future
dist.barrier()
dist.barrier(group=gloo)
pair = dist.new_group([0, 1])  # every rank calls new_group, as torch requires
if rank < 2:
    t = data(rank)
    dist.all_reduce(t, group=pair)
    check("sub-group [0,1] all_reduce", same(t, data(0) + data(1)), f"got {t.tolist()}")
t = data(rank)
work = dist.all_reduce(t, async_op=True)
fut = work.get_future()
work.wait(timeout=datetime.timedelta(seconds=60))
check("async is_completed", work.is_completed())
res = fut.wait()
check("async get_future result", isinstance(res, list) and same(res[0], sum(data(r) for r in range(world))),
      f"got {res}")

# object collectives (pickles through all_gather / broadcast on CPU tensors)
objs = [None] * world
dist.all_gather_object(objs, {"rank": rank, "sq": rank * rank})
check("all_gather_object", objs == [{"rank": r, "sq": r * r} for r in range(world)], f"got {objs}")
lst = [f"from {world - 1}", world - 1] if rank == world - 1 else [None, None]
dist.broadcast_object_list(lst, src=world - 1)
check("broadcast_object_list", lst == [f"from {world - 1}", world - 1], f"got {lst}")

# bool all_reduce: SUM is logical or, PRODUCT logical and (as gloo)
for op_name, op, want in (("SUM", dist.ReduceOp.SUM, torch.tensor([True, True, False])),
                          ("PRODUCT", dist.ReduceOp.PRODUCT, torch.tensor([True, False, False]))):
    def run(group, op=op):
        t = torch.tensor([True, rank == 0, False])
        dist.all_reduce(t, op=op, group=group)
        return t
    compare(f"all_reduce {op_name} bool", run, want)

# Work.wait(timeout) on an unanswered irecv raises RuntimeError and the op goes on: answered later, it completes
if rank < 2:
    got = torch.zeros(3)
    if rank == 0:
        w = dist.irecv(got, src=1, tag=99)
        try:
            w.wait(timeout=datetime.timedelta(milliseconds=300))
            check("irecv wait(timeout) raises", False, "wait returned")
        except RuntimeError:
            check("irecv wait(timeout) raises", True)
    dist.barrier(group=pair)
    if rank == 1:
        dist.send(torch.full((3,), 5.0), dst=0, tag=99)
    else:
        w.wait()
        check("irecv completes after a timed-out wait", torch.equal(got, torch.full((3,), 5.0)), f"got {got}")

# DDP: the same model and data, trained on the BACKEND group and on gloo, must agree


def new_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def flat(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def train(group, hook):
    model = new_model()
    ddp = nn.parallel.DistributedDataParallel(model, process_group=group)
    if hook is not None:
        ddp.register_comm_hook(group, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(1000 + rank)
    for _ in range(3):
        x, y = torch.randn(16, 8, generator=gen), torch.randn(16, 4, generator=gen)
        opt.zero_grad()
        nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
    return flat(model)


from torch.distributed.algorithms.ddp_comm_hooks import default_hooks  # noqa: E402

for label, hook in (("no hook", None), ("fp16_compress_hook", default_hooks.fp16_compress_hook)):
    ours = train(dist.group.WORLD, hook)
    theirs = train(gloo, hook)
    diff = (ours - theirs).abs().max().item()
    check(f"DDP {label} equals gloo", diff <= (1e-3 if hook else 1e-5), f"max |diff| {diff}")
    check(f"DDP {label} trained", (ours - flat(new_model())).abs().max().item() > 1e-4)
    # every rank ends with the same parameters
    everyone = [torch.empty_like(ours) for _ in range(world)]
    dist.all_gather(everyone, ours)
    check(f"DDP {label} same on all ranks", all(torch.equal(e, ours) for e in everyone))

dist.barrier()
dist.destroy_process_group()
if failures:
    say(f"rank {rank}/{world} backend={backend} FAILED {failures} of {checks} checks")
    sys.exit(1)
say(f"rank {rank}/{world} backend={backend} ok checks={checks}")
