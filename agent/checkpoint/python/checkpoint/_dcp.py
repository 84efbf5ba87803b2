"""torch.distributed.checkpoint (DCP) over the agent's memory: MemoryWriter / MemoryReader are a StorageWriter /
StorageReader, so code that saves with DCP switches by one argument:

    dcp.save(state_dict, storage_writer=ck.MemoryWriter(), checkpoint_id=step)
    dcp.load(state_dict, storage_reader=ck.MemoryReader())            # the newest step every rank committed

Each rank's items (the tensors and byte streams DCP's planner gives it) become that rank's snapshot of the step,
written the way ck.save writes (one copy, straight into the agent's memory). The coordinator's snapshot also holds
DCP's Metadata, and it is written last (in finish(), once every rank's items are committed): a step whose
coordinator snapshot is there is complete. Every reader reads the Metadata from there and any item from the rank
file that holds it, in the node's directory, so DCP's resharding works when the world size changes.

A snapshot's object is {"ctrun_dcp": 1, "items": [(WriteItem, tensor or bytes), ...], "metadata": Metadata or
None}; the spill process (spill.py) gives the same items to torch's FileSystemWriter."""

import io
import os

import torch

from . import _contract, _snapshot

MARK = "ctrun_dcp"

try:
    from torch.distributed.checkpoint import StorageReader as _Reader, StorageWriter as _Writer
    from torch.distributed.checkpoint.planner import LoadItemType, WriteItemType
    from torch.distributed.checkpoint.storage import WriteResult
    _MISSING = None
except ImportError as e:  # torch 1.13 as Debian builds it has no torch.distributed.checkpoint
    _Reader = _Writer = object
    _MISSING = e


def _require_dcp(what):
    if _MISSING is not None:
        raise RuntimeError(
            f"ck.{what} needs torch.distributed.checkpoint, which this torch ({torch.__version__}) does not have "
            f"({_MISSING}). Use ck.save(obj, step) / ck.load(), which work on every torch.")


def _done(value):
    """A completed torch Future (DCP waits on what write_data / read_data return)."""
    future = torch.futures.Future()
    future.set_result(value)
    return future


def _step_of(checkpoint_id):
    if checkpoint_id is None:
        return None
    text = os.fspath(checkpoint_id) if isinstance(checkpoint_id, os.PathLike) else checkpoint_id
    try:
        step = int(text)
    except (TypeError, ValueError):
        raise ValueError(f"ctrun_torch.checkpoint: the checkpoint_id is the step, an int >= 0, not "
                         f"{checkpoint_id!r}") from None
    if step < 0:
        raise ValueError(f"ctrun_torch.checkpoint: the checkpoint_id is the step, an int >= 0, not {step}")
    return step


def _own_bytes(tensor):
    """The tensor as a CPU-or-device tensor whose storage is exactly its bytes (a view of a larger storage would
    save the whole storage, as torch.save does; DCP's shards are usually views of nothing larger)."""
    t = tensor.detach()
    if not t.is_contiguous() or t.storage_offset() != 0 or \
            _snapshot._untyped_of_tensor(t).nbytes() != t.numel() * t.element_size():
        t = t.contiguous().clone()
    return t


class MemoryWriter(_Writer):
    """A DCP StorageWriter into the agent's memory; checkpoint_id is the step (an int)."""

    def __init__(self, checkpoint_id=None):
        _require_dcp("MemoryWriter")
        super().__init__()
        self.step = _step_of(checkpoint_id)
        self.is_coordinator = False
        self._held = None  # (items, results) of the coordinator until finish() writes them with the metadata

    @property
    def checkpoint_id(self):
        return self.step

    def reset(self, checkpoint_id=None):
        if checkpoint_id is not None:
            self.step = _step_of(checkpoint_id)
        self._held = None

    def set_up_storage_writer(self, is_coordinator):
        self.is_coordinator = is_coordinator

    def storage_meta(self):
        return None

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        return plans

    def write_data(self, plan, planner):
        from . import _check_step, _save_snapshot, _state  # the package's save path, shared with ck.save

        if self.step is None:
            raise ValueError("ck.MemoryWriter: pass the step as checkpoint_id (dcp.save(..., checkpoint_id=step)) "
                             "or MemoryWriter(checkpoint_id=step)")
        s = _state()
        _check_step(s, self.step, "ck.MemoryWriter")  # on every rank before any writes: the coordinator's too
        items, results = [], []
        for position, item in enumerate(plan.items):
            data = planner.resolve_data(item)
            if item.type == WriteItemType.BYTE_IO:
                data = data.getvalue() if isinstance(data, io.BytesIO) else bytes(data.read())
                size = len(data)
            else:
                data = _own_bytes(data)
                size = data.numel() * data.element_size()
            items.append((item, data))
            results.append(WriteResult(index=item.index, size_in_bytes=size, storage_data=(s.setting.rank, position)))
        if self.is_coordinator:
            # Written in finish(), with the Metadata: the coordinator's snapshot then marks a complete step.
            self._held = items
        else:
            _save_snapshot(s, {MARK: 1, "items": items, "metadata": None}, self.step)
        return _done(results)

    def finish(self, metadata, results):
        from . import _save_snapshot, _state

        metadata.storage_data = {r.index: r.storage_data for rank_results in results for r in rank_results}
        items, self._held = self._held or [], None
        _save_snapshot(_state(), {MARK: 1, "items": items, "metadata": metadata}, self.step)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        try:
            return _step_of(checkpoint_id) is not None
        except ValueError:
            return False


class MemoryReader(_Reader):
    """A DCP StorageReader from the agent's memory: the step checkpoint_id, or with none the newest step every rank
    of the job committed (ck.load()'s rule); with nothing held, the newest complete step of --checkpoint-dir."""

    def __init__(self, checkpoint_id=None):
        _require_dcp("MemoryReader")
        super().__init__()
        self.step = _step_of(checkpoint_id)
        self._source = None  # _Snapshots, or a FileSystemReader of --checkpoint-dir

    @property
    def checkpoint_id(self):
        return self.step

    def reset(self, checkpoint_id=None):
        self.step = _step_of(checkpoint_id)
        self._source = None

    def read_metadata(self):
        from . import _newest_common_step, _spilled, _state

        s = _state()
        step = self.step if self.step is not None else _newest_common_step(s)
        if step is None:
            spilled = _spilled.newest(s.setting)
            if spilled is None or spilled[1] != "dcp":
                raise RuntimeError("ck.MemoryReader: no step is held in memory by every rank of this job"
                                   + ("" if spilled is None else " and --checkpoint-dir holds none in DCP's format")
                                   + "; there is nothing to load (check ck.load() is None before loading)")
            from torch.distributed.checkpoint import FileSystemReader

            self.step = spilled[0]
            self._source = FileSystemReader(spilled[2])
            return self._source.read_metadata()
        self.step = step
        self._source = _Snapshots(s.setting, step)
        s.last_step = step if s.last_step is None else max(s.last_step, step)
        return self._source.metadata

    def set_up_storage_reader(self, metadata, is_coordinator):
        if not isinstance(self._source, _Snapshots):
            self._source.set_up_storage_reader(metadata, is_coordinator)

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        return plans

    def read_data(self, plan, planner):
        if not isinstance(self._source, _Snapshots):
            return self._source.read_data(plan, planner)
        for req in plan.items:
            data = self._source.item(req.storage_index)
            if req.type == LoadItemType.BYTE_IO:
                planner.load_bytes(req, io.BytesIO(data))
                continue
            src = data
            for dim, (offset, length) in enumerate(zip(req.storage_offsets, req.lengths)):
                src = src.narrow(dim, offset, length)
            target = planner.resolve_tensor(req).detach()
            assert target.size() == src.size(), f"{req.storage_index}: {target.size()} != {src.size()}"
            target.copy_(src)
            planner.commit_tensor(req, target)
        return _done(None)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        return MemoryWriter.validate_checkpoint_id(checkpoint_id)


class _Snapshots:
    """The snapshots of one step in the node's directory: the Metadata from the coordinator's, each item from the
    rank file that holds it. The files are mapped (copy-on-write, nothing copied until an item is read), and stay
    open while this reader lives. Load while no rank of the node saves (as with any DCP storage): a save may reuse the
    pages of a step that fell out of a rank's two newest."""

    def __init__(self, setting, step):
        self.setting, self.step = setting, step
        self.items = {}  # rank -> [(WriteItem, tensor or bytes)]
        self.metadata = None
        ranks = sorted(r for r in (_contract.rank_of(n) for n in os.listdir(setting.directory)) if r is not None)
        for rank in ranks:
            path = os.path.join(setting.rank_dir(rank), _contract.step_file(step))
            if not os.path.exists(path):
                continue
            header, obj = _snapshot.read(path, copy=False)
            if not (isinstance(obj, dict) and obj.get(MARK)):
                raise RuntimeError(f"ck.MemoryReader: step {step} was saved by ck.save(), not through "
                                   "torch.distributed.checkpoint; load it with ck.load()")
            self.items[rank] = obj["items"]
            if obj["metadata"] is not None:
                self.metadata = obj["metadata"]
        if self.metadata is None:
            raise RuntimeError(f"ck.MemoryReader: step {step} is not complete on this node (no rank holds DCP's "
                               f"metadata of it; ranks holding items: {sorted(self.items)})")

    def item(self, index):
        rank, position = self.metadata.storage_data[index]
        if rank not in self.items:
            raise RuntimeError(f"ck.MemoryReader: step {self.step}'s item {index.fqn} is in rank {rank}'s snapshot, "
                               "which this node does not hold")
        return self.items[rank][position][1]
