# What a worker can observe of how it was started, for probe.py and probe_pkg/main.py (cold vs forked from ctrun's
# warm process: tests/agent/preload/warm_process_test.cpp).
import ctypes
import json
import os
import pickle
import random
import signal
import sys


def describe(g, sibling, picklable):
    """g: the globals of the program's __main__; sibling: what its sibling import found; picklable: a class it
    defines (pickled by reference to __main__, as multiprocessing's spawn does)."""
    main = sys.modules["__main__"]
    spec = g.get("__spec__")
    libc = ctypes.CDLL(None)
    libc.getenv.restype = ctypes.c_char_p
    c_rank = libc.getenv(b"RANK")
    return {
        "name": g["__name__"],
        "file": g.get("__file__"),
        "cached": g.get("__cached__", "<absent>"),
        "package": g.get("__package__"),
        "spec": None if spec is None else [spec.name, spec.origin],
        "loader": type(g.get("__loader__")).__name__,
        "globals": sorted(k for k in g if k.startswith("__")),
        "main_is_this": main.__dict__ is g,
        "argv": sys.argv,
        "orig_argv": sys.orig_argv,
        "path0": sys.path[0],
        "path_tail": sys.path[1:],
        "cwd": os.getcwd(),
        "sibling": sibling,
        "stdout": [sys.stdout.write_through, sys.stdout.line_buffering, sys.stdout.encoding],
        "signals": {s.name: str(signal.getsignal(s)) for s in (signal.SIGINT, signal.SIGPIPE, signal.SIGCHLD,
                                                               signal.SIGTERM, signal.SIGUSR1)},
        "rank": os.environ.get("RANK"),
        "c_rank": c_rank.decode() if c_rank else None,
        "own_group": os.getpgid(0) == os.getpid(),
        "own_session": os.getsid(0) == os.getpid(),
        "pickle": type(pickle.loads(pickle.dumps(picklable()))).__name__,
        "cmdline": open("/proc/self/cmdline", "rb").read().rstrip(b"\0").decode().split("\0"),
        "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd")),
    }




def run(g, sibling, picklable):
    """Prints describe()'s JSON with a random number (differs between workers; compared separately)."""
    d = describe(g, sibling, picklable)
    d["random"] = random.random()
    print(json.dumps(d, sort_keys=True))
