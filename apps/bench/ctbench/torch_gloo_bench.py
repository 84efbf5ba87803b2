#!/usr/bin/python3
"""Peer figures for ctbench: torch gloo collectives per size (run under torchrun, N ranks).

Extends /work/shared/peers/torch_gloo_bench.py to the ops and sizes ctbench measures. Prints one line per
(op, size) on rank 0: op=... bytes=... time_us=... algbw=... busbw=... (nccl-tests factors).
Usage: torch_gloo_bench.py OPS SIZES ITERS_BUDGET   e.g. all_reduce,broadcast 8,1048576 67108864
"""
import os, sys, time, torch, torch.distributed as dist

ops = sys.argv[1].split(",")
sizes = [int(s) for s in sys.argv[2].split(",")]
budget = int(sys.argv[3]) if len(sys.argv) > 3 else 1 << 26
dist.init_process_group("gloo")
r, w = dist.get_rank(), dist.get_world_size()
factor = {"all_reduce": 2 * (w - 1) / w, "all_gather": (w - 1) / w, "reduce_scatter": (w - 1) / w}
for op in ops:
    for nbytes in (sizes[:1] if op == "barrier" else sizes):  # a barrier moves no data: one row
        count = max(nbytes // 4, 1)
        per_rank = max(count // w, 1)
        if op == "all_gather":
            inp = torch.ones(per_rank); out = [torch.empty(per_rank) for _ in range(w)]
            run = lambda: dist.all_gather(out, inp)
            total = per_rank * w * 4
        elif op == "reduce_scatter":
            # gloo in torch 1.13 has no reduce_scatter: emulate as torch users did (all_reduce + take own chunk).
            inp = torch.ones(per_rank * w)
            run = lambda: dist.all_reduce(inp)
            total = per_rank * w * 4
        elif op == "barrier":
            run = lambda: dist.barrier(); total = 0
        elif op == "broadcast":
            t = torch.ones(count); run = lambda: dist.broadcast(t, 0); total = count * 4
        else:
            t = torch.ones(count); run = lambda: dist.all_reduce(t); total = count * 4
        iters = max(5, min(500, budget // max(total, 8)))
        for _ in range(max(2, iters // 10)): run()
        dist.barrier(); t0 = time.perf_counter()
        for _ in range(iters): run()
        dt = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64)
        dist.all_reduce(dt, op=dist.ReduceOp.MAX)
        dt = dt.item()
        if r == 0:
            algbw = total / dt / 1e9
            print(f"op={op} bytes={total} time_us={dt*1e6:.1f} algbw={algbw:.3f} busbw={algbw*factor.get(op, 1.0):.3f}",
                  flush=True)
# torch 1.13's gloo can spin in its teardown for good once a peer has exited (seen on loopback and veth under
# load: ranks next to an exited one at 100 % CPU, deaf to SIGTERM). Every rank is done after this barrier, so skip
# the teardown.
dist.barrier()
sys.stdout.flush()
os._exit(0)
