"""A job on backend "ctrun" ends cleanly while the backend's completion thread still has Python work to finish.

  python3 exit_test.py callback_cleanup [RUNS]  2 ranks under ctrun; the last reference to a future's Python
      callback goes on the completion thread, and freeing it sleeps 0.5 s (an object's __del__), so the main thread
      reaches interpreter exit first while the process group is still alive (held as DDP holds it). The completion
      thread must finish before Python finalizes; before that was so, every run ended in "terminate called without
      an active exception" (SIGABRT) on that thread. Deterministic.
  python3 exit_test.py ddp_fp16_load [RUNS]     3 ranks under ctrun, DDP with the fp16 compression hook for 30 steps,
      destroy_process_group, exit; RUNS times while two busy processes load the machine (the same abort struck 9 of
      34 runs on a busy machine).
Env: CTRUN_BIN, CTRUN_TORCH_PYTHON. Every run must exit 0 and print no "terminate called". Exit 0 pass, 1 fail,
77 skip (no torch, or no ctrun_torch module next to ctrun).
"""
import os
import subprocess
import sys
import time


def say(text):
    os.write(1, (text + "\n").encode())  # one write per line: ranks share the console


def worker_callback_cleanup():
    import torch
    import torch.distributed as dist
    import ctrun_torch  # noqa: F401

    class SlowToFree:
        def __del__(self):
            time.sleep(0.5)  # releases the GIL: the main thread runs on to exit meanwhile

    dist.init_process_group("ctrun")
    fut = dist.all_reduce(torch.ones(4), async_op=True).get_future()
    holder = SlowToFree()

    def callback(f, keep=holder):
        return f.value()

    done = fut.then(callback)
    del holder, callback  # the completion thread now holds the last reference, through the future
    done.wait()
    global group
    group = dist.group.WORLD  # alive past destroy_process_group, as a DDP model keeps its group
    dist.destroy_process_group()
    say(f"rank {os.environ['RANK']}: done")


def worker_ddp_fp16():
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP
    import ctrun_torch  # noqa: F401

    dist.init_process_group("ctrun")
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)))
    model.register_comm_hook(None, default_hooks.fp16_compress_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(30):
        opt.zero_grad()
        nn.functional.mse_loss(model(torch.randn(8, 16)), torch.randn(8, 4)).backward()
        opt.step()
    dist.destroy_process_group()
    say(f"rank {os.environ['RANK']}: done")


def run_job(ctrun, python, worker, nproc):
    env = dict(os.environ, PYTHON_EXEC=python)
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([ctrun, "--standalone", f"--nproc-per-node={nproc}", "--max-restarts=0", __file__,
                           "worker", worker], env=env, capture_output=True, text=True, timeout=180)
    out = proc.stdout + proc.stderr
    ok = proc.returncode == 0 and "terminate called" not in out and out.count(": done") == nproc
    return ok, proc.returncode, out


def main():
    if sys.argv[1] == "worker":
        {"callback_cleanup": worker_callback_cleanup, "ddp_fp16_load": worker_ddp_fp16}[sys.argv[2]]()
        return 0
    mode = sys.argv[1]
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else (3 if mode == "callback_cleanup" else 8)
    ctrun = os.environ["CTRUN_BIN"]
    python = os.environ.get("CTRUN_TORCH_PYTHON", "/usr/bin/python3")
    if subprocess.run([python, "-c", "import torch"], capture_output=True).returncode != 0:
        say(f"SKIP: {python} has no torch (apt-get install python3-torch)")
        return 77
    pydir = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(ctrun))), "python")
    if not os.path.isdir(pydir) or not any(f.startswith("ctrun_torch") for f in os.listdir(pydir)):
        say(f"SKIP: no ctrun_torch module in {pydir}")
        return 77
    hogs = []
    if mode == "ddp_fp16_load":
        hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    failed = 0
    try:
        for i in range(runs):
            ok, code, out = run_job(ctrun, python, mode, 2 if mode == "callback_cleanup" else 3)
            if not ok:
                failed += 1
                say(f"run {i + 1}: exit {code}\n{out[-3000:]}")
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    say(f"{mode}: {runs - failed} of {runs} runs ended cleanly")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
