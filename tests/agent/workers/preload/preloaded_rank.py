# A worker that says whether it was forked from ctrun's warm process (its parent runs ctrun_warm.py).
#   preloaded_rank.py MODE DIR    MODE: ok | fail_once (rank 1 of attempt 0 exits 3) | sleep (until stopped)
#                                       | kill_warm (rank 0 of attempt 0 SIGKILLs its parent, the warm process)
# Prints "rank R attempt A preloaded=B" and writes DIR/rank_R_attempt_A: "PID PARENT_PID".
import os
import sys
import time


def preloaded():
    try:
        with open("/proc/%d/cmdline" % os.getppid(), "rb") as f:
            return b"ctrun_warm.py" in f.read()
    except OSError:
        return False


mode, out_dir = sys.argv[1], sys.argv[2]
rank, attempt = int(os.environ["RANK"]), int(os.environ["TORCHELASTIC_RESTART_COUNT"])
print("rank %d attempt %d preloaded=%s" % (rank, attempt, preloaded()), flush=True)
with open(os.path.join(out_dir, "rank_%d_attempt_%d" % (rank, attempt)), "w") as f:
    f.write("%d %d\n" % (os.getpid(), os.getppid()))
if mode == "fail_once" and attempt == 0 and rank == 1:
    sys.exit(3)
if mode == "kill_warm" and attempt == 0:
    if not preloaded():  # the warm process did not fork it (under load, a fork request can time out): say so now
        print("rank %d attempt 0 was not forked by the warm process: nothing to kill" % rank, file=sys.stderr)
        sys.exit(4)
    if rank == 0:
        os.kill(os.getppid(), 9)
    time.sleep(600)  # dies with the warm process (PR_SET_PDEATHSIG)
if mode == "sleep":
    time.sleep(600)
