"""The program of issue 42: DDP with the fp16 compression hook on torch's own gloo; it trains a small model, writes
its result into a file it never closes, and returns (the DDP model and its process group alive at the end, as most
training scripts leave them). Under torch 1.13 it aborts in teardown in a share of the runs ("terminate called
without an active exception": the gloo thread that ran the hook's callback takes the GIL once the interpreter is
finalizing), after its work is done.

  fp16_ddp.py OUT_DIR [callback]
callback: instead of training, one all_reduce whose future's callback holds an object that is slow to free, so that
the gloo thread drops the last reference while the interpreter finalizes: the same abort, in every run.
Each rank prints "rank R: done" (one write) once its program has done its work."""
import os
import sys
import time

import torch
import torch.distributed as dist

OUT_DIR = sys.argv[1]
MODE = sys.argv[2] if len(sys.argv) > 2 else "train"

dist.init_process_group("gloo")
rank = dist.get_rank()

if MODE == "callback":

    class SlowToFree:
        def __del__(self):
            # Releases the GIL: the main thread runs on into finalization meanwhile. 3 s, not 0.5: under load (11 on
            # 2 cores) the main thread's way there (the result file, ctrun's exit record) once took longer, and the job
            # that must abort did not.
            time.sleep(3)

    fut = dist.all_reduce(torch.ones(4), async_op=True).get_future()
    holder = SlowToFree()

    def callback(f, keep=holder):
        return f.value()

    done = fut.then(callback)
    del holder, callback  # the gloo thread now holds the last reference, through the future
    result = done.wait()[0]
else:
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)))
    model.register_comm_hook(None, default_hooks.fp16_compress_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(100 + rank)
    for _ in range(20):
        opt.zero_grad()
        x, y = torch.randn(8, 16, generator=gen), torch.randn(8, 4, generator=gen)
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    result = torch.cat([p.detach().reshape(-1) for p in model.parameters()])

out = open(os.path.join(OUT_DIR, "result-%d.txt" % rank), "w")  # never closed: the program's end must flush it
out.write("rank %d sum %.6f\n" % (rank, float(result.sum())) + "x" * 100000 + "\nend\n")
os.write(1, b"rank %d: done\n" % rank)
