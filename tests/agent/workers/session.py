# A worker that records its process group and session: writes DIR/session_<LOCAL_RANK> as
# "PID PGID SID PARENT_PID" (a cold worker's parent is ctrun, a preloaded one's is the warm process).
import os
import sys

out_dir = sys.argv[1]
rank = os.environ["LOCAL_RANK"]
tmp = os.path.join(out_dir, "session_tmp_" + rank)
with open(tmp, "w") as f:
    f.write("%d %d %d %d\n" % (os.getpid(), os.getpgid(0), os.getsid(0), os.getppid()))
os.rename(tmp, os.path.join(out_dir, "session_" + rank))
