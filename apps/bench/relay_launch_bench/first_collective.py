"""The worker of relay_launch_bench.py: init_process_group("gloo") (env://, agent-store mode: through the node's store
relay when ctrun set one) and one all_reduce. Appends "<rank> <epoch seconds at its end> <CTRUN_STORE_RELAY or ->
<epoch seconds when torch was imported>" to $BENCH_OUT in one O_APPEND write."""
import os
import time

import torch
import torch.distributed as dist

imported = time.time()
dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
line = f"{dist.get_rank()} {time.time()} {os.environ.get('CTRUN_STORE_RELAY') or '-'} {imported}\n"
fd = os.open(os.environ["BENCH_OUT"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
os.write(fd, line.encode())
os.close(fd)
dist.destroy_process_group()
