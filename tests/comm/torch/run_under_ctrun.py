"""Runs a worker script under `ctrun --standalone --nproc-per-node=N` and passes on its verdict.

  python3 run_under_ctrun.py WORKER.py N [TIMEOUT_S [CTRUN_FLAG...]]
Env: CTRUN_BIN (build/bin/ctrun), CTRUN_TORCH_PYTHON (the python3 with torch; the workers' PYTHON_EXEC).
CTRUN_FLAGs go before WORKER.py (e.g. --preload torch: the same results with preloaded workers).
ctrun puts the ctrun_torch module's directory on the workers' PYTHONPATH itself: nothing is set here for that.
Exit: ctrun's code; 77 (skip) without torch or without the ctrun_torch module next to ctrun.
"""
import os
import subprocess
import sys
import time

worker, nproc = sys.argv[1], sys.argv[2]
timeout = float(sys.argv[3]) if len(sys.argv) > 3 else 240
flags = sys.argv[4:]
ctrun = os.environ["CTRUN_BIN"]
python = os.environ.get("CTRUN_TORCH_PYTHON", "/usr/bin/python3")
if subprocess.run([python, "-c", "import torch"], capture_output=True).returncode != 0:
    print(f"SKIP: {python} has no torch (apt-get install python3-torch)")
    sys.exit(77)
pydir = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(ctrun))), "python")
if not os.path.isdir(pydir) or not any(f.startswith("ctrun_torch") for f in os.listdir(pydir)):
    print(f"SKIP: no ctrun_torch module in {pydir} (built only with libtorch-dev, pybind11-dev, python3-dev)")
    sys.exit(77)
env = dict(os.environ, PYTHON_EXEC=python)
env.pop("PYTHONPATH", None)  # prove the agent sets it
start = time.monotonic()
proc = subprocess.Popen([ctrun, "--standalone", f"--nproc-per-node={nproc}", *flags, worker], env=env)
try:
    code = proc.wait(timeout=timeout)
except subprocess.TimeoutExpired:
    proc.send_signal(2)  # ctrun forwards SIGINT to its workers and reaps them
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    print(f"FAIL: {worker} did not finish within {timeout}s")
    sys.exit(1)
print(f"{os.path.basename(worker)}: ctrun exited {code} after {time.monotonic() - start:.1f}s")
sys.exit(code)
