# Prints values that import-time seeding would make equal on every forked worker if it were not reseeded.
import json
import random
import sys

import numpy

if sys.argv[1:] == ["torch"]:
    import torch  # noqa: F401  (its generator's seed is printed below)

out = {"random": random.random(), "numpy": float(numpy.random.random())}
if "torch" in sys.modules:
    import torch

    out["torch_initial_seed"] = torch.initial_seed()
print(json.dumps(out))
