"""A worker that ends its program one way and then (maybe) dies in teardown another way, for
tests/agent/teardown/teardown_ctrun_test.cpp. No torch: the crashes are made on purpose, where native teardown
crashes happen.

  ending.py END TEARDOWN [OUT_DIR]
END, how the program ends:
  return          its last line runs
  exit0           sys.exit(0)
  exit1           sys.exit(1)
  raise_exit3     raise SystemExit(3), written directly
  raise           an uncaught exception
  abort           os.abort() as its last line (a crash before the end is recorded)
  kill            SIGKILL to itself before its end
  caught_exit2    sys.exit(2) caught, then its last line runs
TEARDOWN, what happens after the program's end:
  none            nothing
  finalize        a crash while the interpreter finalizes, before exit(): a module global's __del__ writes torch's
                  line to stderr and aborts (the way torch's gloo threads die, but on the main thread)
  exit_handler    a crash in a C exit handler, after exit() was called: libc's abort registered with on_exit() at start
  hang            the interpreter's finalization never ends (a __del__ sleeps)
OUT_DIR: the program writes OUT_DIR/result-<RANK>.txt (1 MiB, through a buffer) and never closes it.
Each rank prints "rank R: ended" (one write) when its program reaches its end.
"""
import ctypes
import os
import signal
import sys
import time

END, TEARDOWN = sys.argv[1], sys.argv[2]
OUT_DIR = sys.argv[3] if len(sys.argv) > 3 else None
RANK = os.environ.get("RANK", "0")


class _CrashInFinalization:
    """Cleared early in the interpreter's finalization (a name with one leading underscore goes first)."""

    def __del__(self):
        os.write(2, b"terminate called without an active exception\n")
        os.abort()


class _HangInFinalization:
    def __del__(self):
        while True:
            time.sleep(3600)


if TEARDOWN == "finalize":
    _crash = _CrashInFinalization()
elif TEARDOWN == "hang":
    _hang = _HangInFinalization()
elif TEARDOWN == "exit_handler":
    libc = ctypes.CDLL(None)
    libc.on_exit(ctypes.cast(libc.abort, ctypes.c_void_p), None)  # registered before ctrun's note: runs after it
elif TEARDOWN != "none":
    raise SystemExit("unknown TEARDOWN " + TEARDOWN)

if OUT_DIR:
    out = open(os.path.join(OUT_DIR, "result-%s.txt" % RANK), "w", buffering=1 << 20)
    out.write("x" * ((1 << 20) - 5) + "end\n")  # 1 MiB, held in the buffer: never closed, never flushed

if END == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
if END == "abort":
    os.write(2, b"rank %s: aborting before its end\n" % RANK.encode())
    os.abort()
os.write(1, b"rank %s: ended\n" % RANK.encode())
if END == "exit0":
    sys.exit(0)
elif END == "exit1":
    sys.exit(1)
elif END == "raise_exit3":
    raise SystemExit(3)
elif END == "raise":
    raise RuntimeError("the program failed")
elif END == "caught_exit2":
    try:
        sys.exit(2)
    except SystemExit:
        pass
elif END != "return":
    raise SystemExit("unknown END " + END)
