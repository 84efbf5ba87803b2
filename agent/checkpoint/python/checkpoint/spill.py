"""The spill process of ctrun --checkpoint-dir (docs/checkpoint.md): copies one committed step from the agent's
memory to storage, in the background, and exits. The agent starts it (at most one at a time, at the lowest CPU
priority; killed when the job ends) with every local rank's snapshot of the step already linked under PINNED:
while those links exist a rank's later save does not write into their pages (_rank_dir.publish), so the worker
never waits for this process and the copy stays consistent however long it takes.

    python -m ctrun_torch.checkpoint.spill --pinned JOBDIR/.spill-<S> --out DIR --step S --world W [--keep N]

Writes DIR/.tmp-step-<S>-<pid>/ then renames it to DIR/step-<S>/ (_spilled.py has the layout): in torch DCP's
FileSystemWriter layout when the step was saved through ck.MemoryWriter and torch has DCP (plain
torch.distributed.checkpoint.load reads it), else one torch.save file per rank. Then keeps the newest N complete
steps of DIR and removes PINNED. Exit 0 when done (quietly), 1 with a message on stderr when not."""

import argparse
import dataclasses
import io
import json
import os
import shutil
import sys
import time


def _args(argv):
    p = argparse.ArgumentParser(prog="python -m ctrun_torch.checkpoint.spill", description=__doc__.split("\n")[0])
    p.add_argument("--pinned", required=True, help="the directory of the step's links, one rank-<R>.ckpt a rank")
    p.add_argument("--out", required=True, help="--checkpoint-dir")
    p.add_argument("--step", type=int, required=True)
    p.add_argument("--world", type=int, required=True, help="the job's world size when the step was saved")
    p.add_argument("--keep", type=int, default=2, help="complete steps kept in --out (default 2)")
    return p.parse_args(argv)


def _ranks(pinned):
    from . import _contract

    out = {}
    for name in os.listdir(pinned):
        if name.endswith(_contract.STEP_SUFFIX):
            rank = _contract.rank_of(name[:-len(_contract.STEP_SUFFIX)])
            if rank is not None:
                out[rank] = os.path.join(pinned, name)
    return dict(sorted(out.items()))


def _write_dcp(objs, tmp):
    """Every rank's items through torch's own FileSystemWriter, as if each rank had saved to it."""
    from torch.distributed.checkpoint import FileSystemWriter
    from torch.distributed.checkpoint.planner import SavePlan, WriteItemType

    metadata = next(o["metadata"] for o in objs.values() if o["metadata"] is not None)
    writer = FileSystemWriter(tmp, sync_files=True)
    writer.set_up_storage_writer(True)
    ranks = sorted(objs)
    plans = writer.prepare_global_plan([SavePlan(items=[item for item, _ in objs[r]["items"]]) for r in ranks])
    results = []
    for rank, plan in zip(ranks, plans):
        data = {item.index: value for item, value in objs[rank]["items"]}

        class _Planner:  # what FileSystemWriter asks of a planner: each item's data
            @staticmethod
            def resolve_data(item):
                value = data[item.index]
                return io.BytesIO(value) if item.type == WriteItemType.BYTE_IO else value

        future = writer.write_data(dataclasses.replace(plan), _Planner())
        future.wait()
        results.append(future.value())
    writer.finish(metadata, results)


def _write_torch_save(objs, tmp):
    import torch

    for rank, obj in objs.items():
        torch.save(obj, os.path.join(tmp, f"rank-{rank}.pt"))


def _fsync_dir(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def spill(a):
    from . import _dcp, _snapshot, _spilled

    began = time.perf_counter()
    final = _spilled.step_dir(a.out, a.step)
    if os.path.isdir(final):
        return "already there"
    files = _ranks(a.pinned)
    if not files:
        raise RuntimeError(f"{a.pinned} holds no snapshot")
    objs = {rank: _snapshot.read(path, copy=False)[1] for rank, path in files.items()}
    dcp = all(isinstance(o, dict) and o.get(_dcp.MARK) for o in objs.values())
    form = "dcp" if dcp and _dcp._MISSING is None else "torch.save"
    if dcp and form != "dcp":
        raise RuntimeError("the step was saved through torch.distributed.checkpoint, which this python's torch lacks")
    os.makedirs(a.out, exist_ok=True)
    for name in os.listdir(a.out):  # temporary folders of spills killed before their rename
        pid = name.rsplit("-", 1)[-1]
        if name.startswith(_spilled.TEMP_PREFIX) and pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            shutil.rmtree(os.path.join(a.out, name), ignore_errors=True)
    tmp = os.path.join(a.out, f"{_spilled.TEMP_PREFIX}step-{a.step}-{os.getpid()}")
    os.makedirs(tmp)
    try:
        (_write_dcp if form == "dcp" else _write_torch_save)(objs, tmp)
        marker = {"step": a.step, "world_size": a.world, "format": form, "ranks": sorted(objs)}
        with open(os.path.join(tmp, _spilled.MARKER), "w") as f:
            json.dump(marker, f)
            f.flush()
            os.fsync(f.fileno())
        _fsync_dir(tmp)
        os.rename(tmp, final)
        _fsync_dir(a.out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    for old in list(_spilled.complete_steps(a.out))[:-a.keep]:
        shutil.rmtree(_spilled.step_dir(a.out, old), ignore_errors=True)
    return f"{form}, {sum(os.path.getsize(p) for p in files.values()) >> 20} MiB in {time.perf_counter() - began:.2f} s"


def main(argv=None):
    a = _args(argv)
    try:
        os.nice(19)  # the agent starts it at the lowest priority already; a hand-started one too
    except OSError:
        pass
    try:
        import torch

        torch.set_num_threads(1)
        spill(a)  # the agent's event log records the outcome (checkpoint_spilled)
        return 0
    except Exception as e:  # noqa: BLE001  (the agent logs this line; nothing held in memory is touched)
        print(f"ctrun spill: step {a.step} -> {a.out} failed: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        return 1
    finally:
        shutil.rmtree(a.pinned, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
