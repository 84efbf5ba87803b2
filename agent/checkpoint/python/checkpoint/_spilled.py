"""The steps ctrun --checkpoint-dir DIR holds on storage (written by spill.py; docs/checkpoint.md):

    DIR/step-<S>/ctrun-step.json      {"step", "world_size", "format": "dcp" | "torch.save", "ranks": [...]}
    DIR/step-<S>/.metadata, __<R>_0.distcp      format "dcp": torch's FileSystemWriter layout
    DIR/step-<S>/rank-<R>.pt                     format "torch.save": each rank's object, torch.save'd

A step directory appears complete or not at all (written under a temporary name, then renamed), so the newest
one with its ctrun-step.json is the step to resume from when memory holds nothing."""

import json
import os

import torch

from . import _contract

MARKER = "ctrun-step.json"
TEMP_PREFIX = ".tmp-"


def complete_steps(directory):
    """{step: marker} of every complete step directory in `directory`, oldest first."""
    steps = {}
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return steps
    for name in names:
        step = _contract.step_of(name + _contract.STEP_SUFFIX) if name.startswith(_contract.STEP_PREFIX) else None
        if step is None:
            continue
        try:
            with open(os.path.join(directory, name, MARKER)) as f:
                steps[step] = json.load(f)
        except (OSError, ValueError):
            continue
    return dict(sorted(steps.items()))


def step_dir(directory, step):
    return os.path.join(directory, f"{_contract.STEP_PREFIX}{step}")


def newest(setting):
    """(step, format, path) of the newest complete step in --checkpoint-dir that this rank can load, or None."""
    if not setting.spill_dir:
        return None
    for step, marker in reversed(complete_steps(setting.spill_dir).items()):
        path = step_dir(setting.spill_dir, step)
        if marker.get("format") == "dcp":
            return step, "dcp", path
        if marker.get("world_size") == setting.world_size and setting.rank in marker.get("ranks", []):
            return step, "torch.save", path
    return None


def load(setting):
    """(step, obj) of this rank from the newest complete step in --checkpoint-dir, or None."""
    found = newest(setting)
    if found is None:
        return None
    step, form, path = found
    if form == "dcp":
        raise RuntimeError(f"ck.load(): the newest step in --checkpoint-dir, {path}, was saved through "
                           "torch.distributed.checkpoint; load it with dcp.load(state_dict, "
                           "storage_reader=ck.MemoryReader()) (or torch's FileSystemReader)")
    file = os.path.join(path, f"rank-{setting.rank}.pt")
    try:
        return step, torch.load(file, weights_only=False)
    except TypeError:  # torch 1.13 has no weights_only
        return step, torch.load(file)
