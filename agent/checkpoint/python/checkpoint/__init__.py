"""In-memory checkpoints held by ctrun's agent (docs/checkpoint.md).

    import ctrun_torch.checkpoint as ck

    resumed = ck.load()                      # (step, obj) every rank holds, or None
    start = 0 if resumed is None else resumed[0] + 1
    if resumed is not None:
        model.load_state_dict(resumed[1]["model"])
        optimizer.load_state_dict(resumed[1]["optimizer"])
    for step in range(start, steps):
        train_one_step()
        ck.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, step)

The snapshots live in shared memory that the node's agent owns, so they outlive a worker that crashes and come back
to the restarted workers; they go when the job ends, unless ctrun --checkpoint-dir DIR copies them to storage
(load() then falls back to DIR when memory holds nothing). Works on workers started by ctrun only.
torch.distributed.checkpoint users pass ck.MemoryWriter() / ck.MemoryReader() instead (_dcp.py).
"""

import mmap
import numbers
import os
import time

from . import _agreement, _contract, _dcp, _notice, _rank_dir, _snapshot, _spilled
from ._dcp import MemoryReader, MemoryWriter

__all__ = ["save", "load", "wait", "status", "MemoryWriter", "MemoryReader"]


class _State:
    def __init__(self):
        self.setting = _contract.Setting()
        self.dir = _rank_dir.RankDir(self.setting)
        self.registry = _agreement.Registry(self.setting)
        self.last_step = None  # the newest step this process saved or loaded: steps must go forward
        self.pid = os.getpid()  # a forked child makes its own

    def notify(self, what, **fields):
        _notice.send(self.setting.directory, what=what, rank=self.setting.rank, **fields)


_state_of_process = None


def _state():
    global _state_of_process
    if _state_of_process is None or _state_of_process.pid != os.getpid():
        _state_of_process = _State()
    return _state_of_process


def save(obj, step):
    """Saves `obj` (anything torch.save accepts) as this rank's snapshot of `step`, an int greater than every step
    this process saved or loaded before. The tensors' bytes are copied once, straight into shared memory the agent
    owns (a CUDA tensor's from the device into it); returns when this rank's copy is complete on this node. The
    snapshot becomes visible only complete; this rank keeps its two newest steps.

    Raises ValueError for a step that does not go forward, TypeError for an object that cannot be pickled and
    MemoryError when the node's --checkpoint-memory would be passed: in each case nothing held is lost."""
    _save_snapshot(_state(), obj, step)


def _check_step(s, step, what="ck.save"):
    if isinstance(step, bool) or not isinstance(step, numbers.Integral) or step < 0:
        raise ValueError(f"{what}: step must be an int >= 0, not {step!r}")
    step = int(step)
    if s.last_step is not None and step <= s.last_step:
        raise ValueError(f"{what}(step {step}) on rank {s.setting.rank}: steps must go forward, and this process "
                         f"already saved or loaded step {s.last_step}. Nothing held was changed.")
    return step


def _save_snapshot(s, obj, step):
    """ck.save's work, shared with MemoryWriter: plan, reserve, write straight into the mapped file, publish."""
    step = _check_step(s, step)
    began = time.perf_counter()
    plan = _plan(s, obj, step)
    try:
        partial, f = s.dir.reserve(step, plan.size)
    except MemoryError as e:
        s.notify("refused", step=step, bytes=plan.size, error=str(e))
        raise
    try:
        if plan.by_pwrite():
            with f:
                plan.write(_snapshot.FileWriter(f.fileno()))
        else:  # a CUDA tensor's bytes go from the device straight into the mapped file; a digest reads them back
            # MAP_POPULATE: the pages of a reused spare are mapped in one call instead of one fault each.
            with f, mmap.mmap(f.fileno(), plan.size, flags=mmap.MAP_SHARED | mmap.MAP_POPULATE) as mapped:
                plan.write(mapped)
    except BaseException:
        os.unlink(partial)
        raise
    held = s.dir.publish(partial, step)
    s.registry.publish(held)
    s.last_step = step
    s.notify("commit", step=step, bytes=plan.size, seconds=round(time.perf_counter() - began, 6))


def _plan(s, obj, step):
    """The snapshot laid out (pickled, nothing allocated), or a TypeError for what torch.save could not pickle."""
    try:
        return _snapshot.Plan(obj, step, s.setting.rank, s.setting.world_size, digest=s.setting.digest)
    except Exception as e:
        s.notify("refused", step=step, error=f"cannot pickle: {e}")
        raise TypeError(f"ck.save(step {step}) on rank {s.setting.rank}: the object cannot be pickled as torch.save "
                        f"would ({type(e).__name__}: {e}). Nothing was written; the steps held are unchanged: "
                        f"{s.dir.held()}.") from e


def load(into=None):
    """(step, obj) for the newest step that every rank of the job has saved completely, or None when there is
    none. The tensors in obj are CPU tensors the caller owns. Every rank gets the same step.

    into: an object laid out as the one saved (e.g. the state dict of the model already built: the same tensors in
    the same order, each of the saved size and dtype, on the CPU). Its tensors receive the saved values in place,
    with no new memory (the faster restart: a new tensor's first touch of each page costs more than the copy), and
    obj's tensors are views of them. ValueError, before anything is written, when into differs from the snapshot.
    A step loaded from --checkpoint-dir (memory holds none) comes in new tensors; into is left as it was."""
    s = _state()
    began = time.perf_counter()
    step = _newest_common_step(s)
    agreed = round(time.perf_counter() - began, 6)  # the step looked up (the agents settled it before the start)
    if step is None:
        resumed = _spilled.load(s.setting)  # --checkpoint-dir, when memory holds nothing
        if resumed is not None:
            s.last_step = resumed[0] if s.last_step is None else max(s.last_step, resumed[0])
        fields = {} if resumed is None else {"source": "checkpoint-dir"}
        s.notify("load", step=None if resumed is None else resumed[0], seconds=round(time.perf_counter() - began, 6),
                 agree_seconds=agreed, **fields)
        return resumed

    def same_world(header):
        if header["world_size"] != s.setting.world_size:
            raise RuntimeError(f"ck.load(): step {step} was saved by a job of {header['world_size']} ranks, this "
                               f"one has {s.setting.world_size}; loading into another world size is not supported yet")

    took = []

    def pages(nbytes):  # new tensors over the pages of a file this rank no longer needs (RankDir.take_pages)
        f, old = s.dir.take_pages(step, nbytes)
        took.append(old)
        return f

    _, obj = _snapshot.read(s.dir.file_of(step), into=into, check=same_world, pages=pages)
    if took and took[0] is not None:
        s.registry.publish(s.dir.held())  # the step taken is no longer this rank's
    if isinstance(obj, dict) and obj.get(_dcp.MARK):
        raise RuntimeError(f"ck.load(): step {step} was saved through torch.distributed.checkpoint "
                           "(ck.MemoryWriter); load it with dcp.load(state_dict, storage_reader=ck.MemoryReader())")
    s.last_step = step if s.last_step is None else max(s.last_step, step)
    s.notify("load", step=step, seconds=round(time.perf_counter() - began, 6), agree_seconds=agreed)
    return step, obj


def _newest_common_step(s):
    return _agreement.newest_common_step(s.registry.every_rank())


_WAIT_TIMEOUT = 120.0


def _replicated_step(s):
    """The newest step of this rank the agent copied to another node (its .replicated file), or None."""
    try:
        with open(os.path.join(s.setting.rank_dir(), _contract.REPLICATED_FILE)) as f:
            return int(f.read().strip() or -1)
    except (FileNotFoundError, ValueError):
        return None


def wait(timeout=_WAIT_TIMEOUT):
    """Returns once the newest step this process saved is replicated to another node (ctrun --checkpoint-replicas;
    at once when there is nothing to wait for: one node, no copies asked, or nothing saved yet). Raises TimeoutError
    after `timeout` seconds: the copy goes on in the background, and nothing held is lost."""
    s = _state()
    if s.setting.replicas <= 0 or s.last_step is None:
        return
    deadline = time.monotonic() + timeout
    while True:
        done = _replicated_step(s)
        if done is not None and done >= s.last_step:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"ck.wait() on rank {s.setting.rank}: step {s.last_step} was not copied to another node "
                               f"within {timeout:.0f} s (newest copied: {done}); see ctrun's log for why")
        time.sleep(0.005)


def status():
    """What is held: {"rank", "held": {step: bytes} of this rank, "node_bytes" (every rank of this node, partial
    saves and replicas of other nodes included), "node_limit" (--checkpoint-memory), "replicated": {step: copies} for
    the newest step of this rank copied to other nodes ({} when none)}."""
    s = _state()
    done = _replicated_step(s)
    return {
        "rank": s.setting.rank,
        "held": s.dir.held(sizes=True),
        "node_bytes": _rank_dir.used_bytes(s.setting.directory),
        "node_limit": s.setting.limit,
        "replicated": {} if done is None or done < 0 else {done: s.setting.replicas},
    }
