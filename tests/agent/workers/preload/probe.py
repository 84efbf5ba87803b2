# What a worker can observe of how it was started: printed as one JSON object, compared between a cold start
# (python -u probe.py ...) and a fork of ctrun's warm process (tests/agent/preload/warm_process_test.cpp).
import ctypes
import json
import os
import pickle
import random
import signal
import sys

import probe_sibling  # found through sys.path[0], the script's directory


class Picklable:  # pickled by reference to __main__, as multiprocessing's spawn does
    pass


def describe():
    main = sys.modules["__main__"]
    spec = globals().get("__spec__")
    libc = ctypes.CDLL(None)
    libc.getenv.restype = ctypes.c_char_p
    c_rank = libc.getenv(b"RANK")
    return {
        "name": __name__,
        "file": globals().get("__file__"),
        "cached": globals().get("__cached__", "<absent>"),
        "package": globals().get("__package__"),
        "spec": None if spec is None else [spec.name, spec.origin],
        "loader": type(globals().get("__loader__")).__name__,
        "globals": sorted(k for k in globals() if k.startswith("__")),
        "main_is_this": main.__dict__ is globals(),
        "argv": sys.argv,
        "orig_argv": sys.orig_argv,
        "path0": sys.path[0],
        "path_tail": sys.path[1:],
        "cwd": os.getcwd(),
        "sibling": probe_sibling.WHO,
        "stdout": [sys.stdout.write_through, sys.stdout.line_buffering, sys.stdout.encoding],
        "signals": {s.name: str(signal.getsignal(s)) for s in (signal.SIGINT, signal.SIGPIPE, signal.SIGCHLD,
                                                               signal.SIGTERM, signal.SIGUSR1)},
        "rank": os.environ.get("RANK"),
        "c_rank": c_rank.decode() if c_rank else None,
        "own_group": os.getpgid(0) == os.getpid(),
        "own_session": os.getsid(0) == os.getpid(),
        "pickle": type(pickle.loads(pickle.dumps(Picklable()))).__name__,
        "cmdline": open("/proc/self/cmdline", "rb").read().rstrip(b"\0").decode().split("\0"),
        "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd")),
    }


if __name__ == "__main__":
    d = describe()
    d["random"] = random.random()  # differs between workers; compared separately
    print(json.dumps(d, sort_keys=True))
