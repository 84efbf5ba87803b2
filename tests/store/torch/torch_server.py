#!/usr/bin/python3
"""Serve torch's own TCPStore (legacy dialect on 1.13) on 127.0.0.1, ephemeral port; print "ready PORT".

Like ../shared/peers/torch_store_server.py but with port 0, so parallel tests never collide on a port.
Runs until killed (the test kills its process group)."""
import datetime
import sys

import torch.distributed as dist

kw = {"use_libuv": False} if "use_libuv" in (dist.TCPStore.__init__.__doc__ or "") else {}
port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
store = dist.TCPStore("127.0.0.1", port, None, True, datetime.timedelta(seconds=3600), wait_for_workers=False, **kw)
print(f"ready {store.port}", flush=True)
sys.stdin.close()
import time

while True:
    time.sleep(3600)
