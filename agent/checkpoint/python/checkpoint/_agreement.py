"""Which step every rank holds (agent/checkpoint/agreement.hpp has the same rule): each rank's complete steps are
listed under "<keys><rank>" = "3,4" in the attempt's store keyspace. The agent writes every local rank's list
before it starts them when the node holds any step (none when it holds nothing); each save rewrites its own rank's list; load() reads every rank's list and takes the newest
step common to all, so a step some rank did not finish is never chosen."""

import datetime

import torch.distributed as dist

try:  # beside ctrun's sitecustomize: with several nodes, this node's store relay stands for the job's store
    from ctrun_store_relay import redirected as _store_endpoint
except ImportError:
    def _store_endpoint(host, port):
        return host, port

_TIMEOUT = datetime.timedelta(seconds=60)
_ABSENT = "\x01"  # no rank's list holds it: lists are decimal steps and commas


def newest_common_step(held_per_rank):
    common = None
    for steps in held_per_rank:
        common = set(steps) if common is None else common & set(steps)
    return max(common) if common else None


def encode(steps):
    return ",".join(str(s) for s in steps)


def decode(value):
    text = value.decode() if isinstance(value, bytes) else value
    return [int(s) for s in text.split(",") if s]


class Registry:
    def __init__(self, setting):
        self.setting = setting
        self._store = None

    def store(self):
        if self._store is None:
            args = _store_endpoint(self.setting.store_host, self.setting.store_port)
            try:
                # A client: libuv only picks a server's implementation, and some builds (Debian's 2.6) lack it.
                self._store = dist.TCPStore(*args, is_master=False, timeout=_TIMEOUT, use_libuv=False)
            except TypeError:  # torch 1.13: no use_libuv
                self._store = dist.TCPStore(*args, is_master=False, timeout=_TIMEOUT)
        return self._store

    def key(self, rank):
        return f"{self.setting.keys}{rank}"

    def publish(self, steps):
        self.store().set(self.key(self.setting.rank), encode(steps))

    def _all_listed(self, keys):
        """Whether every key is in the store now, without waiting. torch 1.13's Python TCPStore has no check():
        compare_set(key, S, S) answers S for a missing key and creates nothing (rendezvous/peek.hpp). A wait of a
        millisecond instead said "missing" whenever the store's reply took longer, as it does under load."""
        store = self.store()
        if hasattr(store, "check"):
            return store.check(keys)
        return all(store.compare_set(k, _ABSENT, _ABSENT) != _ABSENT.encode() for k in keys)

    def every_rank(self):
        """Every rank's list (waits, bounded, for those not written yet: another node's agent may be later). When
        the agent listed nothing (no rank held a step as the attempt began), a rank whose list is missing has saved
        nothing in this attempt either: then there is no common step, and nothing is waited for."""
        keys = [self.key(r) for r in range(self.setting.world_size)]
        if not self.setting.listed and not self._all_listed(keys):
            return [[]]
        try:
            self.store().wait(keys, _TIMEOUT)
        except RuntimeError as e:
            raise RuntimeError(f"ck.load(): not every rank's held steps were listed in the store within "
                               f"{_TIMEOUT.total_seconds():.0f} s ({e})") from e
        return [decode(self.store().get(k)) for k in keys]
