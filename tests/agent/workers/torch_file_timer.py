# torchrun's worker watchdog from the worker's side (torch.distributed.elastic.timer with a FileTimerClient on
# TORCHELASTIC_TIMER_FILE): rank 0 overstays a 1 s timer (sleeps up to 60 s in it), rank 1 leaves its timer in
# time and then waits a little so the kill of rank 0 is what ends the job. Prints when each step happens. With two
# ranks, rank 0 enters its timer only once rank 1 has left its own (a file in $TIMER_TEST_DIR): under load rank 1
# may still be importing torch when rank 0's timer fires and the job ends.
import os
import sys
import time

from torch.distributed.elastic.timer import FileTimerClient, configure, expires

path = os.environ.get("TORCHELASTIC_TIMER_FILE")
print(f"rank {os.environ['RANK']} timer file {path}", flush=True)
if not path:
    sys.exit(3)
configure(FileTimerClient(path))
rank = int(os.environ["RANK"])
left = os.path.join(os.environ.get("TIMER_TEST_DIR", "/nonexistent"), "rank1_left")
if rank == 0 and int(os.environ["WORLD_SIZE"]) > 1:
    deadline = time.monotonic() + 100
    while not os.path.exists(left) and time.monotonic() < deadline:
        time.sleep(0.05)
with expires(after=1, scope="step"):
    if rank == 0:
        print(f"rank 0 entered at {time.time():.3f}", flush=True)
        time.sleep(60)
        print("rank 0 was not stopped", flush=True)
        sys.exit(4)
    time.sleep(0.2)
print(f"rank {rank} left its timer in time", flush=True)
if rank == 1:
    open(left, "w").close()
time.sleep(30)
