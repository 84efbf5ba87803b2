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

    def rank_dir(self, rank=None):
        return os.path.join(self.directory, f"{RANK_PREFIX}{self.rank if rank is None else rank}")


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
