"""torch 2.6's own torchrun (torch.distributed.run), with every TCPStore it makes using use_libuv=False.

usage: python3 torchrun26.py [torchrun args...]    (inside the torch 2.6 chroot)

Debian's 2.6 is built without libuv, but torchrun and its c10d rendezvous create TCPStores with the default
use_libuv=True, which that build rejects: no_libuv26 makes use_libuv=False the default, then this runs torchrun's
main. Used to check that a real torch 2.6 *agent* can use ctstore as its --rdzv-endpoint (c10d backend), and that
it launches workers on backend "ctrun" (run_programs26.py).
"""
import sys

import no_libuv26  # noqa: F401  (before torchrun's elastic modules are imported)
from torch.distributed.run import main  # noqa: E402

sys.exit(main())
