"""PyTorch's distributed tutorial programs on backend "ctrun", each compared with the same program on gloo.

Run as a worker of `ctrun --standalone --nproc-per-node=4` (the agent puts ctrun_torch on PYTHONPATH).
The default group is "ctrun" (or argv[1]: "cpu:ctrun" on torch 2.x, or "gloo" for the reference run of the same
programs, tests/torch2); a gloo group over the same ranks runs every program again and each rank checks
that both gave the same tensors. Exits 1 naming the first program that differs.
"""
import os
import sys

import torch
import torch.distributed as dist

import ctrun_torch  # noqa: F401  registers backend "ctrun"

# One write(2) per printed line: the ranks share one pipe, and under `python -u` (as ctrun and torchrun start them)
# print() writes the text and its newline separately, so another rank's line could land in between (seen once:
# "...okrank 3: ..."). Line buffering over the unbuffered binary layer writes each short line whole.
sys.stdout.reconfigure(line_buffering=True, write_through=False)

BACKEND = sys.argv[1] if len(sys.argv) > 1 else "ctrun"
ON_GLOO = BACKEND.split(":")[-1] == "gloo"  # the reference run: the default group lacks what gloo lacks


def send_recv_chain(group, rank, size):
    # Blocking p2p: a token walks 0 -> 1 -> ... -> size-1, each rank adds its rank.
    t = torch.zeros(3)
    if rank > 0:
        dist.recv(t, src=rank - 1, group=group)
    t += rank
    if rank < size - 1:
        dist.send(t, dst=rank + 1, group=group)
    return t


def isend_irecv(group, rank, size):
    t = torch.zeros(5, dtype=torch.int64)
    if rank == 0:
        reqs = [dist.isend(torch.arange(5) * d, dst=d, group=group, tag=7) for d in range(1, size)]
    else:
        reqs = [dist.irecv(t, src=0, group=group, tag=7)]
    for r in reqs:
        r.wait()
    return t


def subgroups(group, rank, size, backend):
    # all_reduce on new_group([0, 1]) and all_gather on new_group([1, 2, 3]); every rank calls new_group.
    g01 = dist.new_group([0, 1], backend=backend)
    g123 = dist.new_group([1, 2, 3], backend=backend)
    out = [torch.tensor([float(rank)])]
    if rank in (0, 1):
        t = torch.tensor([1.0 + rank])
        dist.all_reduce(t, group=g01)
        out.append(t)
    if rank in (1, 2, 3):
        parts = [torch.zeros(2) for _ in range(3)]
        dist.all_gather(parts, torch.full((2,), float(rank * 10)), group=g123)
        out += parts
    return torch.cat(out)


def broadcast(group, rank, size):
    t = torch.arange(6, dtype=torch.float64).view(2, 3) if rank == 2 else torch.zeros(2, 3, dtype=torch.float64)
    dist.broadcast(t, src=2, group=group)
    return t


def scatter(group, rank, size):
    out = torch.zeros(4)
    chunks = [torch.full((4,), float(i + 1)) for i in range(size)] if rank == 0 else None
    dist.scatter(out, chunks, src=0, group=group)
    return out


def distributed_softmax(group, rank, size):
    torch.manual_seed(1234)
    logits = torch.randn(size * 8)  # same on every rank; each owns one slice
    mine = logits[rank * 8:(rank + 1) * 8]
    m = mine.max().clone()
    dist.all_reduce(m, op=dist.ReduceOp.MAX, group=group)
    e = torch.exp(mine - m)
    s = e.sum().clone()
    dist.all_reduce(s, op=dist.ReduceOp.SUM, group=group)
    result = e / s
    assert torch.allclose(result, torch.softmax(logits, 0)[rank * 8:(rank + 1) * 8], atol=1e-6)
    return result


def ring_all_reduce(group, rank, size):
    # The tutorial's hand-written ring: size-1 steps of isend right / recv left, accumulating.
    send = torch.full((16,), float(rank + 1))
    acc = send.clone()
    recv = torch.zeros(16)
    right, left = (rank + 1) % size, (rank - 1) % size
    for _ in range(size - 1):
        req = dist.isend(send, right, group=group)
        dist.recv(recv, left, group=group)
        req.wait()
        acc += recv
        send = recv.clone()
    return acc


def reduce_locally(tensors, op):
    """What an all_reduce of `tensors` (one per rank) must give, computed here."""
    acc = tensors[0].clone()
    for t in tensors[1:]:
        if op == dist.ReduceOp.SUM:
            acc = (acc | t) if acc.dtype == torch.bool else acc + t
        elif op == dist.ReduceOp.PRODUCT:
            acc = (acc & t) if acc.dtype == torch.bool else acc * t
        elif op == dist.ReduceOp.MIN:
            acc = torch.minimum(acc, t)
        elif op == dist.ReduceOp.MAX:
            acc = torch.maximum(acc, t)
        elif op == dist.ReduceOp.BAND:
            acc = acc & t
        elif op == dist.ReduceOp.BOR:
            acc = acc | t
        elif op == dist.ReduceOp.BXOR:
            acc = acc ^ t
    return acc


def all_reduce_table(group, rank, size):
    """all_reduce over every dtype x op: {(dtype, op): result, or None where the backend raised}."""
    results = {}
    dtypes = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int32,
              torch.int64, torch.bool]
    for dt in dtypes:
        ops = [dist.ReduceOp.SUM, dist.ReduceOp.MIN, dist.ReduceOp.MAX, dist.ReduceOp.PRODUCT]
        if not dt.is_floating_point:
            ops += [dist.ReduceOp.BAND, dist.ReduceOp.BOR, dist.ReduceOp.BXOR]
        for op in ops:
            def make(r):
                base = torch.arange(1, 7).view(2, 3) + r
                return (base % 2 == 0) if dt == torch.bool else base.to(dt)
            t = make(rank).t()  # non-contiguous, as users pass slices
            try:
                dist.all_reduce(t, op=op, group=group)
                results[(dt, op)] = t
            except RuntimeError:
                results[(dt, op)] = None
            want = reduce_locally([make(r).t() for r in range(size)], op)
            if results[(dt, op)] is not None and group is None:
                assert torch.equal(t, want), f"all_reduce {dt} {op}: {t} != {want}"
    return results


def ops_table(group, rank, size):
    """reduce, gather."""
    out = []
    t = torch.arange(4.0) * (rank + 1)
    dist.reduce(t, dst=1, group=group)
    out.append(t if rank == 1 else torch.zeros(4))
    g = [torch.zeros(2) for _ in range(size)] if rank == 3 else None
    dist.gather(torch.full((2,), float(rank)), g, dst=3, group=group)
    out += g if rank == 3 else []
    return torch.cat([o.to(torch.float64).reshape(-1) for o in out])


PROGRAMS = [send_recv_chain, isend_irecv, subgroups, broadcast, scatter, distributed_softmax, ring_all_reduce,
            ops_table]


def main():
    dist.init_process_group(BACKEND)
    rank, size = dist.get_rank(), dist.get_world_size()
    assert size == 4, "run with --nproc-per-node=4"
    assert dist.get_backend() == BACKEND, dist.get_backend()
    gloo = dist.new_group(list(range(size)), backend="gloo")
    for prog in PROGRAMS:
        if prog is subgroups:
            ours, theirs = prog(None, rank, size, BACKEND), prog(None, rank, size, "gloo")
        else:
            ours, theirs = prog(None, rank, size), prog(gloo, rank, size)
        if ours.dtype != theirs.dtype or not torch.equal(ours, theirs):
            print(f"rank {rank}: {prog.__name__}: {BACKEND} {ours} != gloo {theirs}", flush=True)
            sys.exit(1)
    ours, theirs = all_reduce_table(None, rank, size), all_reduce_table(gloo, rank, size)
    for key, t in ours.items():
        assert t is not None or ON_GLOO, f"{BACKEND} raised for all_reduce {key}"
        if theirs[key] is not None and not torch.equal(t, theirs[key]):
            print(f"rank {rank}: all_reduce {key}: {BACKEND} {t} != gloo {theirs[key]}", flush=True)
            sys.exit(1)
    compared = sum(v is not None for v in theirs.values())
    # Ops gloo lacks on CPU (1.13): all_gather_into_tensor, reduce_scatter, all_to_all (uneven), checked against
    # their definition (not in the gloo reference run).
    if not ON_GLOO:
        big = torch.zeros(size * 3)
        dist.all_gather_into_tensor(big, torch.arange(3.0) + rank)
        assert torch.equal(big, torch.cat([torch.arange(3.0) + r for r in range(size)])), big
        inputs = [torch.full((2,), float(rank * 10 + i)) for i in range(size)]
        out = torch.zeros(2)
        dist.reduce_scatter(out, inputs)
        assert torch.equal(out, torch.full((2,), float(sum(r * 10 + rank for r in range(size))))), out
        rs = torch.zeros(3)
        dist.reduce_scatter_tensor(rs, torch.arange(3.0 * size) + rank)
        assert torch.equal(rs, sum(torch.arange(3.0 * size) + r for r in range(size))[rank * 3:rank * 3 + 3]), rs
        in_splits = [(rank + j) % 3 + 1 for j in range(size)]  # what this rank sends to j
        out_splits = [(j + rank) % 3 + 1 for j in range(size)]  # what j sends here
        src = torch.cat([torch.full((n,), float(rank * 100 + j)) for j, n in enumerate(in_splits)])
        dst = torch.zeros(sum(out_splits))
        dist.all_to_all_single(dst, src, out_splits, in_splits)
        want = torch.cat([torch.full((n,), float(j * 100 + rank)) for j, n in enumerate(out_splits)])
        assert torch.equal(dst, want), (dst, want)
        outs = [torch.zeros(rank + 1) for _ in range(size)]
        dist.all_to_all(outs, [torch.full((j + 1,), float(rank)) for j in range(size)])
        assert all(torch.equal(o, torch.full((rank + 1,), float(j))) for j, o in enumerate(outs)), outs
    objs = [None] * size
    dist.all_gather_object(objs, {"rank": rank})
    assert objs == [{"rank": r} for r in range(size)], objs
    w = dist.all_reduce(torch.ones(8), async_op=True)
    fut = w.get_future()
    got = fut.wait()[0]
    assert torch.equal(got, torch.full((8,), float(size))), got
    if ON_GLOO:  # torch 2.6's gloo completes the future first: is_completed() is still False right after it
        assert w.wait() and w.is_completed(), "work not completed after wait()"
    else:
        assert w.is_completed() and w.wait(), "work not completed after its future"
    dist.barrier()
    print(f"rank {rank}: {BACKEND}: {len(PROGRAMS)} programs and {compared}/{len(ours)} all_reduce dtype x op equal "
          f"to gloo; {'' if ON_GLOO else 'reduce_scatter, all_to_all, '}objects, futures ok", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
