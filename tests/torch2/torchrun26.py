"""torch 2.6's own torchrun (torch.distributed.run), with every TCPStore it makes using use_libuv=False.

usage: python3 torchrun26.py [torchrun args...]    (inside the torch 2.6 chroot)

Debian's 2.6 is built without libuv, but torchrun and its c10d rendezvous create TCPStores with the default
use_libuv=True, which that build rejects. This makes use_libuv=False the default, then runs torchrun's main.
Used to check that a real torch 2.6 *agent* can use ctstore as its --rdzv-endpoint (c10d backend).
"""
import sys

import torch.distributed as dist

_Base = dist.TCPStore


class TCPStore(_Base):
    def __init__(self, *args, use_libuv=False, **kwargs):
        super().__init__(*args, use_libuv=use_libuv, **kwargs)


dist.TCPStore = TCPStore
sys.modules["torch.distributed.rendezvous"].TCPStore = TCPStore
from torch.distributed.run import main  # noqa: E402  (imports the elastic modules after the patch)

sys.exit(main())
