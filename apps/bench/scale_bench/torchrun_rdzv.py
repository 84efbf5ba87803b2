#!/usr/bin/python3
"""Debian torch's own c10d rendezvous (DynamicRendezvousHandler + C10dRendezvousBackend), N agents as threads
against one TCPStore: the peer figure for scale_bench's round. Measures the same quantity as the C++ side: from the last
agent's start of next_rendezvous() to every agent holding its round, and the store bytes of the round (counted in
a Store wrapper around each agent's TCPStore client: keys and values of every call, both directions).

Usage: torchrun_rdzv.py N [N ...]   prints one line per N: "torchrun N=<n> seconds=<s> bytes=<b> ops=<o>"."""
import datetime
import sys
import threading
import time

import torch.distributed as dist
from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import DynamicRendezvousHandler, RendezvousTimeout


class Counter:
    def __init__(self):
        self.lock = threading.Lock()
        self.bytes = 0
        self.ops = 0

    def add(self, n):
        with self.lock:
            self.bytes += n
            self.ops += 1


class CountingStore(dist.Store):
    """What the C10d backend calls on its store (get, compare_set, set, add, check, wait), counted."""

    def __init__(self, inner, counter):
        super().__init__()
        self.inner, self.counter = inner, counter

    def get(self, key):
        v = self.inner.get(key)
        self.counter.add(len(key) + len(v))
        return v

    def set(self, key, value):
        self.counter.add(len(key) + len(value))
        return self.inner.set(key, value)

    def compare_set(self, key, expected, desired):
        v = self.inner.compare_set(key, expected, desired)
        self.counter.add(len(key) + len(expected) + len(desired) + len(v))
        return v

    def add(self, key, amount):
        self.counter.add(len(key) + 16)
        return self.inner.add(key, amount)

    def check(self, keys):
        self.counter.add(sum(len(k) for k in keys))
        return self.inner.check(keys)

    def wait(self, keys, *args):
        self.counter.add(sum(len(k) for k in keys))
        return self.inner.wait(keys, *args)


def run(n, port):
    run_id = "bench%d" % n
    counter = Counter()
    timeout = RendezvousTimeout(join=datetime.timedelta(seconds=600), last_call=datetime.timedelta(seconds=30))
    handlers = []
    for _ in range(n):
        client = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=300))
        store = CountingStore(client, counter)
        backend = C10dRendezvousBackend(store, run_id)
        handlers.append(DynamicRendezvousHandler.from_backend(run_id, store, backend, n, n, timeout))
    counter.bytes = counter.ops = 0  # the round only, not the backends' construction
    starts, ends = [0.0] * n, [0.0] * n
    go = threading.Event()

    def agent(i):
        go.wait()
        starts[i] = time.monotonic()
        handlers[i].next_rendezvous()
        ends[i] = time.monotonic()

    threads = [threading.Thread(target=agent, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    go.set()
    for t in threads:
        t.join()
    print("torchrun N=%d seconds=%.3f bytes=%d ops=%d" % (n, max(ends) - max(starts), counter.bytes, counter.ops),
          flush=True)
    for h in handlers:  # stop the keep-alive timers; do not close (the process exits)
        h._stop_heartbeats()


def main():
    master = dist.TCPStore("127.0.0.1", 0, is_master=True, timeout=datetime.timedelta(seconds=300))
    for arg in sys.argv[1:]:
        run(int(arg), master.port)


if __name__ == "__main__":
    main()
