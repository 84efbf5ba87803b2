# A torch worker on backend "ctrun" for hostname_test.py: joins the group through env:// (MASTER_ADDR as the agent
# published it), all_reduces a tensor of ones and writes "MASTER_ADDR SUM" to OUT_DIR/rank.RANK in one write.
import datetime
import os

import torch
import torch.distributed as dist
import ctrun_torch  # noqa: F401  (registers backend "ctrun")

dist.init_process_group("ctrun", timeout=datetime.timedelta(seconds=float(os.environ.get("INIT_TIMEOUT", "60"))))
t = torch.ones(1)
dist.all_reduce(t)
with open(os.path.join(os.environ["OUT_DIR"], "rank.%s" % os.environ["RANK"]), "w") as f:
    f.write("%s %d\n" % (os.environ["MASTER_ADDR"], int(t.item())))
print("rank %s done" % os.environ["RANK"], flush=True)
