"""torch.distributed through backend "ctrun" vs backend "gloo", same job, same tensors (nccl-tests style).

  PYTHON_EXEC=/usr/bin/python3 build/bin/ctrun --standalone --nproc-per-node=4 \
      apps/bench/torch_backend_bench/torch_backend_bench.py [--max-bytes 64M] [--seconds 0.2]

The default group is "ctrun"; a gloo group over the same ranks runs the same ops. For each op and size: time per
op (max over ranks of the mean), algbw = bytes / time, busbw = algbw x the nccl-tests factor (all_reduce 2(n-1)/n;
all_gather, reduce_scatter, all_to_all (n-1)/n; broadcast 1). Bytes are nccl-tests': all_reduce/broadcast the
buffer, all_gather the output, reduce_scatter the input, all_to_all the per-rank buffer. Ops gloo lacks on CPU
(torch 1.13: all_gather_into_tensor, reduce_scatter_tensor) print "n/a" there and, instead, our all_reduce of the
same bytes. Everything goes through torch's own Python API: the adapter's cost counts.
Also (not in the default --ops): send_recv and recv_any_source, a ping-pong between ranks 0 and 1 (time per round
trip, two messages; recv with src, then without), and sparse_all_reduce (a 1-D sparse COO tensor whose entries, 12
bytes each, lie at different indices on every rank; bytes = one rank's indices + values).
"""
import argparse
import time

import torch
import torch.distributed as dist

import ctrun_torch  # noqa: F401


def parse_bytes(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(s[:-1]) * mult[s[-1].upper()]) if s[-1].upper() in mult else int(s)


def make(op, nbytes, n):
    """(callable, busbw factor, bytes reported) for op over float32 tensors (8-bit: uint8 below 4 bytes)."""
    count = max(1, nbytes // 4)
    if op == "all_reduce":
        t = torch.ones(count)
        return (lambda g: dist.all_reduce(t, group=g)), 2 * (n - 1) / n, count * 4
    if op == "broadcast":
        t = torch.ones(count)
        return (lambda g: dist.broadcast(t, 0, group=g)), 1.0, count * 4
    if op == "all_gather_into_tensor":
        per = max(1, count // n)
        out, inp = torch.empty(per * n), torch.ones(per)
        return (lambda g: dist.all_gather_into_tensor(out, inp, group=g)), (n - 1) / n, per * n * 4
    if op == "reduce_scatter_tensor":
        per = max(1, count // n)
        out, inp = torch.empty(per), torch.ones(per * n)
        return (lambda g: dist.reduce_scatter_tensor(out, inp, group=g)), (n - 1) / n, per * n * 4
    if op == "all_to_all_single":
        per = max(1, count // n)
        out, inp = torch.empty(per * n), torch.ones(per * n)
        return (lambda g: dist.all_to_all_single(out, inp, group=g)), (n - 1) / n, per * n * 4
    if op in ("send_recv", "recv_any_source"):
        t = torch.ones(count)
        any_source = op == "recv_any_source"

        def ping_pong(g):
            r = dist.get_rank()
            if r == 0:
                dist.send(t, 1, group=g)
                dist.recv(t, None if any_source else 1, group=g)
            elif r == 1:
                dist.recv(t, None if any_source else 0, group=g)
                dist.send(t, 0, group=g)
        return ping_pong, 1.0, count * 4
    if op == "sparse_all_reduce":
        nnz = max(1, nbytes // 12)
        idx = torch.arange(nnz).unsqueeze(0) * n + dist.get_rank()
        t = torch.sparse_coo_tensor(idx, torch.ones(nnz), (nnz * n,)).coalesce()
        return (lambda g: dist.all_reduce(t.clone(), group=g)), 1.0, nnz * 12
    raise ValueError(op)


def timed(fn, group, seconds):
    """Mean seconds per op, max over ranks; None where the backend raises (op not supported)."""
    ok = torch.ones(1)
    try:
        fn(group)
        fn(group)
    except RuntimeError:
        ok.zero_()
    dist.all_reduce(ok, op=dist.ReduceOp.MIN)  # on the ctrun world: every rank agrees
    if ok.item() == 0:
        return None
    iters, start = 0, time.perf_counter()
    # Every rank runs the same number of iterations: rank 0 decides when to stop, by time, in batches.
    batch = 1
    while True:
        for _ in range(batch):
            fn(group)
        iters += batch
        flag = torch.tensor([1.0 if time.perf_counter() - start < seconds and iters < 100000 else 0.0])
        dist.broadcast(flag, 0)
        if flag.item() == 0:
            break
        batch = min(batch * 2, 1000)
    mean = (time.perf_counter() - start) / iters
    t = torch.tensor([mean])
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--min-bytes", default="8")
    ap.add_argument("--max-bytes", default="64M")
    ap.add_argument("--factor", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=0.2, help="time per point and backend")
    ap.add_argument("--ops", default="all_reduce,all_gather_into_tensor,reduce_scatter_tensor,broadcast,"
                                     "all_to_all_single")
    args = ap.parse_args()
    dist.init_process_group("ctrun")
    n, rank = dist.get_world_size(), dist.get_rank()
    gloo = dist.new_group(list(range(n)), backend="gloo")
    ctrun = dist.group.WORLD
    sizes, s = [], parse_bytes(args.min_bytes)
    while s <= parse_bytes(args.max_bytes):
        sizes.append(s)
        s *= args.factor
    if sizes[-1] != parse_bytes(args.max_bytes):
        sizes.append(parse_bytes(args.max_bytes))
    if rank == 0:
        print(f"# torch {torch.__version__}, {n} ranks, float32; time in us (max over ranks), bw in GB/s")
        print(f"{'op':<24}{'bytes':>10}  {'gloo us':>10}{'busbw':>8}  {'ctrun us':>10}{'algbw':>8}{'busbw':>8}"
              f"  {'speedup':>8}")
    for op in args.ops.split(","):
        for nbytes in sizes:
            fn, factor, reported = make(op, nbytes, n)
            t_gloo = timed(fn, gloo, args.seconds)
            t_ours = timed(fn, ctrun, args.seconds)
            note = ""
            if t_gloo is None:  # gloo lacks it: compare with our own all_reduce of the same bytes
                ar, _, _ = make("all_reduce", reported, n)
                t_ref = timed(ar, ctrun, args.seconds)
                note = f"  (gloo n/a; ctrun all_reduce of same bytes: {t_ref * 1e6:.1f} us)"
            if rank == 0:
                algbw = reported / t_ours / 1e9
                gl = (f"{t_gloo * 1e6:>10.1f}{reported / t_gloo / 1e9 * factor:>8.3f}" if t_gloo
                      else f"{'n/a':>10}{'':>8}")
                speed = f"{t_gloo / t_ours:>7.1f}x" if t_gloo else f"{'':>8}"
                print(f"{op:<24}{reported:>10}  {gl}  {t_ours * 1e6:>10.1f}{algbw:>8.3f}{algbw * factor:>8.3f}"
                      f"  {speed}{note}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
