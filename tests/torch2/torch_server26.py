"""torch 2.6's own TCPStore server (legacy backend) on HOST port 0, for comparing transcripts with ours.

usage: python3 torch_server26.py [HOST]     prints "torch2 server listening on HOST:PORT", serves until killed
"""
import datetime
import signal
import sys

import torch.distributed as dist

host = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1"
server = dist.TCPStore(host, 0, None, True, datetime.timedelta(seconds=300), wait_for_workers=False,
                       use_libuv=False)
print(f"torch2 server listening on {host}:{server.port}", flush=True)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
signal.pause()
