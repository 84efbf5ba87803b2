"""Debian's torch 2.6 without libuv: makes use_libuv=False the default of every TCPStore, then runs a script.

usage: python3 no_libuv26.py SCRIPT [ARGS...]     (inside the torch 2.6 chroot; SCRIPT runs as __main__)
   or: import no_libuv26                         (the patch alone; torchrun26.py)

Debian's 2.6 is built without libuv, but torch makes TCPStores with the default use_libuv=True (torchrun, its c10d
rendezvous, and init_process_group in agent-store mode through torch.distributed.rendezvous, which does not read
USE_LIBUV), and that build rejects them before connecting. Upstream builds send the same bytes either way: the
flag only picks the server's implementation. This lets unchanged programs (tests/comm/torch's workers) run there.
"""
import runpy
import sys

import torch.distributed as dist

_Base = dist.TCPStore


class TCPStore(_Base):
    def __init__(self, *args, use_libuv=False, **kwargs):
        super().__init__(*args, use_libuv=use_libuv, **kwargs)


dist.TCPStore = TCPStore
sys.modules["torch.distributed.rendezvous"].TCPStore = TCPStore

if __name__ == "__main__":
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")
