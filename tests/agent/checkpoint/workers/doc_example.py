"""docs/checkpoint.md's first example, run as the doc shows it: the first ```python block under "## Example" is read
from the doc when this worker starts and run unchanged (as __main__). Around it, only what the test needs: torch
seeded per rank before it (so that an uninterrupted run is reproducible) and, once it ends, each rank's final model
and optimizer state in OUT/final-<rank>.pt.

usage: doc_example.py DOC OUT"""

import os
import re
import runpy
import sys

import torch

doc, out = sys.argv[1:3]
with open(doc) as f:
    section = f.read().split("\n## Example\n", 1)[1]
example = re.search(r"```python\n(.*?)```", section, re.S).group(1)
rank = int(os.environ["RANK"])
script = os.path.join(out, f"train-{rank}.py")
with open(script, "w") as f:
    f.write(example)
torch.manual_seed(1000 + rank)
torch.set_num_threads(1)
done = runpy.run_path(script, run_name="__main__")
torch.save({"model": done["model"].state_dict(), "optimizer": done["optimizer"].state_dict()},
           os.path.join(out, f"final-{rank}.pt"))
