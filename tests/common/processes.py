"""Processes in the Python tests (beside ports.py, found the same way): is a pid still running, can a python import
torch, a child that dies with the test, and the end of a child started in a session of its own."""
import ctypes
import os
import signal
import subprocess


def alive(pid):
    """True if pid runs; a zombie counts as dead (its parent, a killed agent, is gone and init reaps it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def have_torch(python):
    """True if `python` imports torch.distributed and it is available (asked once per call, bounded to 60 s)."""
    try:
        return subprocess.run([python, "-c", "import torch.distributed as d; assert d.is_available()"],
                              capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def die_with_parent():
    """preexec_fn: SIGKILL when the test process dies (even killed by ctest's timeout)."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def kill_session(proc, timeout=30):
    """SIGKILL to every process of `proc`'s session (Popen(..., start_new_session=True): an agent and its workers)
    if it still runs, then reaps it."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=timeout)
