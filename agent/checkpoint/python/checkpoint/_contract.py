"""What the worker and ctrun's agent agree on: the environment variables the agent sets (common/worker_env.hpp,
kCheckpoint*) and the names in the job's checkpoint directory (agent/checkpoint/layout.hpp). Both sides name them
once; a test compares this file with those two headers."""

import os

ENV_DIR = "CTRUN_CHECKPOINT_DIR"        # the job's directory, owned by the agent
ENV_MEMORY = "CTRUN_CHECKPOINT_MEMORY"  # the node's limit in bytes (--checkpoint-memory)
ENV_STORE = "CTRUN_CHECKPOINT_STORE"    # host:port of the store where ranks list their held steps
ENV_KEYS = "CTRUN_CHECKPOINT_KEYS"      # the key prefix of those lists in this attempt (the rank is appended)
ENV_LISTED = "CTRUN_CHECKPOINT_LISTED"  # "1": the agent listed this node's held steps; "0": it held none
ENV_SPILL = "CTRUN_CHECKPOINT_SPILL_DIR"  # --checkpoint-dir: where committed steps are copied (load() falls back)
ENV_OFF = "CTRUN_CHECKPOINT_OFF"        # instead of the above: why checkpoints are off for this job
ENV_REPLICAS = "CTRUN_CHECKPOINT_REPLICAS"  # other nodes the agent copies this node's newest step to ("0": none)

LOCK_FILE = "lock"
NOTICE_SOCKET = "notices.sock"
RANK_PREFIX = "rank-"
STEP_PREFIX = "step-"
STEP_SUFFIX = ".ckpt"
PARTIAL_PREFIX = ".partial-"
SPARE_FILE = ".spare"
SPILL_PREFIX = ".spill-"  # .spill-<S>/rank-<R>.ckpt: links the agent makes for the spill process (spill.py)
REPLICATED_FILE = ".replicated"  # in the rank's directory: the newest step the agent copied to another node
REPLICA_PREFIX = "replica-rank-"
KEPT_STEPS = 2


class Setting:
    """This worker's checkpoint settings, read once from its environment."""

    def __init__(self, environ=os.environ):
        off = environ.get(ENV_OFF)
        if off:
            raise RuntimeError(f"ctrun_torch.checkpoint: {off}")
        if not environ.get(ENV_DIR):
            raise RuntimeError(
                "ctrun_torch.checkpoint needs workers started by ctrun: the snapshots live in memory that ctrun's "
                f"agent owns ({ENV_DIR} is not set, so this process was started by torchrun, plain python or "
                "another launcher). Run the script with `ctrun --nproc-per-node N script.py`.")
        self.directory = environ[ENV_DIR]
        self.limit = int(environ[ENV_MEMORY])
        host, _, port = environ[ENV_STORE].rpartition(":")
        self.store_host, self.store_port = host, int(port)
        self.keys = environ[ENV_KEYS]
        self.listed = environ.get(ENV_LISTED, "1") == "1"
        self.spill_dir = environ.get(ENV_SPILL) or None
        self.replicas = int(environ.get(ENV_REPLICAS, "0") or 0)
        self.rank = int(environ["RANK"])
        self.world_size = int(environ["WORLD_SIZE"])
        # Several nodes: the agent may copy this rank's snapshots to another node, which checks them by their digest
        # (_snapshot.py); one node never copies, and saves without one.
        self.digest = self.world_size > int(environ.get("LOCAL_WORLD_SIZE", self.world_size))
        _check_visible(self.directory)

    def rank_dir(self, rank=None):
        return os.path.join(self.directory, f"{RANK_PREFIX}{self.rank if rank is None else rank}")


def _check_visible(directory):
    """The agent's directory must be the one this worker sees: a worker in another mount namespace or container (its
    own /dev/shm) sees none, and would otherwise fail deep inside a save with FileNotFoundError (which torch's DCP
    then reports as "cannot pickle code objects")."""
    if os.path.isdir(directory) and os.path.exists(os.path.join(directory, LOCK_FILE)):
        return
    raise RuntimeError(
        f"ctrun_torch.checkpoint: this worker cannot see its agent's checkpoint directory {directory} (from "
        f"{ENV_DIR}): it runs in another mount namespace or container than ctrun's agent, with a /dev/shm of its "
        "own. Run the workers where the agent runs (the same container), share /dev/shm with the agent's, or point "
        "the agent at a directory both see with CTRUN_CHECKPOINT_ROOT (set in ctrun's environment); "
        "--checkpoint-memory 0 turns in-memory checkpoints off.")


def step_file(step):
    return f"{STEP_PREFIX}{step}{STEP_SUFFIX}"


def step_of(name):
    """The step of a complete snapshot's file name, else None."""
    if not (name.startswith(STEP_PREFIX) and name.endswith(STEP_SUFFIX)):
        return None
    digits = name[len(STEP_PREFIX):-len(STEP_SUFFIX)]
    return int(digits) if digits.isdigit() else None


def rank_of(name):
    """The rank of a rank directory's name, else None."""
    digits = name[len(RANK_PREFIX):] if name.startswith(RANK_PREFIX) else ""
    return int(digits) if digits.isdigit() else None
