"""The storm's peer: torch 2.6's own TCPStore server (Debian's build: the legacy backend, no libuv), run in the
trixie chroot by scale_bench (scenarios/init_storm.cpp). Prints its port and its pid (the bench reads its CPU time
in /proc), serves until killed.

usage: python3 torch26_server.py
"""
import datetime
import os
import resource
import signal
import sys

import torch
import torch.distributed as dist

soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # as ctstore does: the storm needs every descriptor
server = dist.TCPStore("127.0.0.1", 0, None, True, datetime.timedelta(seconds=600), wait_for_workers=False,
                       use_libuv=False)
print(f"torch2 server listening on 127.0.0.1:{server.port} pid {os.getpid()} torch {torch.__version__}", flush=True)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
signal.pause()
