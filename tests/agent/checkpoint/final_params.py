"""What the checkpoint tests compare at the end: each rank's final parameters against an uninterrupted run's."""
import os

import torch


def assert_same_final(a, b, ranks):
    """Every rank's final-<r>.pt in `b` equals `a`'s bit for bit: equal as raw bytes, not only as numbers."""
    for r in range(ranks):
        x = torch.load(os.path.join(a, f"final-{r}.pt"))
        y = torch.load(os.path.join(b, f"final-{r}.pt"))
        assert torch.equal(x["extra"], y["extra"]), f"rank {r}: extra differs"
        for k in x["model"]:
            same = torch.equal(x["model"][k].view(torch.int32), y["model"][k].view(torch.int32))
            assert same, f"rank {r}: {k} differs from the uninterrupted run's"
