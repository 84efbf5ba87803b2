"""PyTorch's own distributed test suite (torch/testing/_internal/distributed/distributed_test.py, as shipped in
python3-torch) against backend "ctrun" as a plugin backend, the way PyTorch's test_distributed_spawn.py runs it
for gloo (BACKEND, WORLD_SIZE, TEMP_DIR, INIT_METHOD from the environment), but with each test's ranks forked from
this process (START_METHOD below; --spawn spawns them).

  python3 run_dist_suite.py [--backend ctrun|gloo] [--world-size 3] [--subset p2p_collectives|gloo_gated|mpi_gated|rest|all]
                            [--gloo-gated|--mpi-gated] [--include-static-skips] [--spawn]
                            [--shard I/N] [--list] [--json OUT] [-k SUBSTRING ...] [TEST_NAME ...]

Tests are selected by name: the "p2p_collectives" subset (what `make test` runs) holds every test whose name
names a collective or p2p op; "rest" is everything else (DDP, models, profiler, ...: `make torch-dist-suite`).
KNOWN_CTRUN_FAILURES (per torch version) lists the tests that fail with ctrun here, each with its reason (pass with
gloo, unless the reason says otherwise); they are reported, not run, for ctrun (docs/comm.md copies the list). Exit 0 when every selected test passed or skipped,
1 otherwise, 77 when torch or ctrun_torch is missing.
"""
import argparse
import json
import os
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "stubs"))  # expecttest stand-in


def arg_parser():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default=None, help="overrides $BACKEND (ctrun or gloo)")
    ap.add_argument("--world-size", default=None)
    ap.add_argument("--subset", default="all", choices=["p2p_collectives", "gloo_gated", "mpi_gated", "rest", "all"])
    ap.add_argument("--shard", default=None, help="I/N: run the I-th (1-based) of N interleaved parts")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--json", help="write {test: outcome} here")
    ap.add_argument("--gloo-gated", action="store_true",
                    help="run the tests gated to gloo on ctrun (see AS_GLOO below)")
    ap.add_argument("--mpi-gated", action="store_true", help="likewise for the tests gated to mpi (all_to_all)")
    ap.add_argument("--include-static-skips", action="store_true",
                    help="also spawn ranks for tests whose decorators already skip them (CUDA, NCCL, MPI only)")
    ap.add_argument("--include-known", action="store_true", help="also run KNOWN_CTRUN_FAILURES")
    ap.add_argument("--spawn", action="store_true",
                    help="start each test's ranks with multiprocessing's spawn, as PyTorch's CI does (default: fork)")
    ap.add_argument("-k", action="append", default=[])
    ap.add_argument("tests", nargs="*")
    return ap


# PyTorch's test module reads BACKEND and WORLD_SIZE when it is imported: the command line is read first, into the
# environment, which ranks started with --spawn inherit (they re-import this file as __mp_main__; forked ones
# inherit the imported modules).
ARGS = arg_parser().parse_args() if __name__ == "__main__" else None
if ARGS and ARGS.backend:
    os.environ["BACKEND"] = ARGS.backend
if ARGS and ARGS.world_size:
    os.environ["WORLD_SIZE"] = ARGS.world_size
if ARGS and (ARGS.gloo_gated or ARGS.mpi_gated):
    os.environ["CTRUN_SUITE_GATED_AS"] = "gloo" if ARGS.gloo_gated else "mpi"
os.environ.setdefault("BACKEND", "ctrun")
os.environ.setdefault("WORLD_SIZE", "3")
os.environ.setdefault("INIT_METHOD", "env://")
if "TEMP_DIR" not in os.environ:
    os.environ["TEMP_DIR"] = tempfile.mkdtemp(prefix="ctrun_dist_suite_")

# --gloo-gated / --mpi-gated: run the tests PyTorch gates to BACKEND == "gloo" (or "mpi": CPU all_to_all),
# evaluated when the module is imported, on backend "ctrun": import with BACKEND=gloo (mpi), then point the
# module's BACKEND, which the ranks init with, at ctrun.
GATED_AS = os.environ.get("CTRUN_SUITE_GATED_AS", "")
AS_GLOO = GATED_AS in ("gloo", "mpi")
if AS_GLOO:
    os.environ["BACKEND"] = GATED_AS

try:
    import torch  # noqa: F401
    import torch.distributed as dist
    if os.environ["BACKEND"] == "ctrun" or AS_GLOO:
        import ctrun_torch  # noqa: F401  registers backend "ctrun"
except ImportError as e:
    if __name__ == "__main__":
        print(f"SKIP: {e} (python3-torch and a build with comm/torch needed)")
        sys.exit(77)
    raise

from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

# What a plugin backend declares, as PyTorch's own CI does for third-party backends.
DistTestCases.backend_feature["plugin"].add("ctrun")
DistTestCases.backend_feature["ddp"].add("ctrun")
DistTestCases.backend_feature["subgroup"].add("ctrun")

from torch.testing._internal.distributed import distributed_test  # noqa: E402
from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest, TestDistBackend)

if AS_GLOO:
    distributed_test.BACKEND = "ctrun"


# How the ranks of a test start. "fork" (the default): from this process, which has imported torch, the test module
# and ctrun_torch already, so a test costs its own work, not three interpreters importing torch (about 2 s of CPU
# each, most of the suite's time under "spawn"). Each rank still initialises its process group, and so its ctrun
# group, itself, as under spawn; the tests that run here are CPU-only (the CUDA ones are skipped without starting
# ranks), so nothing needs spawn's fresh interpreter. "spawn" (--spawn): as PyTorch's test_distributed_spawn.py.
START_METHOD = "spawn" if ARGS and ARGS.spawn else "fork"


class TestDistBackendRanks(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        if START_METHOD == "spawn":
            self._spawn_processes()
        else:
            self._start_processes(torch.multiprocessing.get_context("fork").Process)


# Tests that fail with ctrun on this machine, and why, by torch version (major.minor; kept in sync with
# docs/comm.md): ones that pass with gloo, and ones that fail with gloo too (the reason says so). torch 2.6:
# tests/torch2 runs this file in the trixie chroot (`make torch2-dist-parity` compares with gloo).
_PY313_PICKLE = ("fails with gloo too: torch 2.6's test expects the pickle error of Python < 3.13 (\"Can't pickle local "
                 "object\"); Python 3.13 says \"Can't get local object\"")
KNOWN_CTRUN_FAILURES_BY_TORCH = {
    "1.13": {},
    "2.6": {"test_gather_object": _PY313_PICKLE, "test_gather_object_subgroup": _PY313_PICKLE},
}
TORCH_MINOR = ".".join(torch.__version__.split(".")[:2])
KNOWN_CTRUN_FAILURES = KNOWN_CTRUN_FAILURES_BY_TORCH.get(TORCH_MINOR, {})

# Collective/p2p tests torch 1.13 gates to BACKEND == "gloo" at import (so a plugin backend skips them) that are
# not CUDA-only: `--gloo-gated --subset gloo_gated` runs them on ctrun. (Found by comparing each test's
# __unittest_skip__ under BACKEND=ctrun and BACKEND=gloo.
# monitored_barrier is left out too: torch 1.13's Python front end raises "only implemented for GLOO backend" for
# any other backend before it reaches ours; ctrun's C++ monitoredBarrier serves torch versions that route it.)
GLOO_GATED_P2P_COLLECTIVES = (
    "test_all_gather_object_default_pg",
    "test_all_gather_object_subgroup",
    "test_all_reduce_coalesced_full_group_max",
    "test_all_reduce_coalesced_full_group_min",
    "test_all_reduce_coalesced_full_group_product",
    "test_all_reduce_coalesced_full_group_sum",
    "test_all_reduce_coalesced_group_max",
    "test_all_reduce_coalesced_group_min",
    "test_all_reduce_coalesced_group_product",
    "test_all_reduce_coalesced_group_sum",
    "test_all_reduce_coalesced_max",
    "test_all_reduce_coalesced_min",
    "test_all_reduce_coalesced_product",
    "test_all_reduce_coalesced_sum",
    "test_barrier_timeout_full_group",
    "test_barrier_timeout_group",
    "test_batch_isend_irecv_gloo",
    "test_batch_isend_irecv_gloo_tags",
    "test_broadcast_object_list",
    "test_gather_object",
    "test_gather_object_subgroup",
    "test_scatter_object_list",
    "test_sparse_all_reduce_sum",
)
# The CPU all_to_all tests, which torch 1.13 gates to mpi: `--mpi-gated --subset mpi_gated` runs them on ctrun.
MPI_GATED_ALL_TO_ALL = (
    "test_all_to_all",
    "test_all_to_all_complex",
    "test_all_to_all_full_group",
    "test_all_to_all_group",
    "test_all_to_all_single_equal_split",
    "test_all_to_all_single_equal_split_complex",
    "test_all_to_all_single_equal_split_full_group",
    "test_all_to_all_single_equal_split_group",
    "test_all_to_all_single_unequal_split",
    "test_all_to_all_single_unequal_split_complex",
    "test_all_to_all_single_unequal_split_full_group",
    "test_all_to_all_single_unequal_split_group",
)

P2P_COLLECTIVE_WORDS = ("send", "recv", "isend", "irecv", "broadcast", "reduce", "all_gather", "allgather",
                        "gather", "scatter", "all_to_all", "barrier", "sparse_all", "coalesced", "object",
                        "batch_isend", "new_group", "group", "backend", "destroy", "get_rank", "get_world",
                        "irecv", "p2p", "monitored", "average")
NOT_COLLECTIVE_WORDS = ("ddp", "DistributedDataParallel", "profil", "sync_bn", "SyncBatchNorm", "model", "join",
                        "post_localSGD", "hook", "static_graph", "ZeroRedundancy", "checkpoint", "detect_",
                        "named_param", "gradient", "output_unused", "unused_param", "buffers", "find_unused")


def is_p2p_collective(name):
    return any(w in name for w in P2P_COLLECTIVE_WORDS) and not any(w in name for w in NOT_COLLECTIVE_WORDS)


def main(args):
    backend = "ctrun" if AS_GLOO else os.environ["BACKEND"]
    names = sorted(n for n in dir(TestDistBackendRanks) if n.startswith("test_"))
    if args.tests:
        names = [n for n in names if n in args.tests]
    if args.k:
        names = [n for n in names if any(k in n for k in args.k)]
    if args.subset == "p2p_collectives":
        names = [n for n in names if is_p2p_collective(n)]
    elif args.subset == "gloo_gated":
        names = [n for n in names if n in GLOO_GATED_P2P_COLLECTIVES]
    elif args.subset == "mpi_gated":
        names = [n for n in names if n in MPI_GATED_ALL_TO_ALL]
    elif args.subset == "rest":
        names = [n for n in names if not is_p2p_collective(n)]
    if args.shard:
        i, n_shards = (int(x) for x in args.shard.split("/"))
        names = names[i - 1::n_shards]
    # Tests whose decorators skip them for this backend (CUDA/NCCL/MPI-only, ...) would spawn 3 ranks just to skip:
    # report them without running them unless asked.
    static = {n: getattr(getattr(TestDistBackendRanks, n), "__unittest_skip_why__", "") for n in names
              if getattr(getattr(TestDistBackendRanks, n), "__unittest_skip__", False)}
    if not args.include_static_skips:
        names = [n for n in names if n not in static]
    known = [n for n in names if backend == "ctrun" and n in KNOWN_CTRUN_FAILURES and not args.include_known]
    names = [n for n in names if n not in known]
    if args.list:
        print("\n".join(names))
        return 0
    suite = unittest.TestSuite(TestDistBackendRanks(n) for n in names)
    start = time.monotonic()
    result = unittest.TextTestRunner(verbosity=2, stream=sys.stdout).run(suite)
    outcome = {n: "passed" for n in names}
    for test, _ in result.failures + result.errors:
        outcome[test._testMethodName] = "failed"
    for test, reason in result.skipped:
        outcome[test._testMethodName] = "skipped: " + reason.splitlines()[0][:120]
    for n in known:
        outcome[n] = "known failure: " + KNOWN_CTRUN_FAILURES[n]
    if not args.include_static_skips:
        for n, why in static.items():
            outcome[n] = "skipped (not run): " + why
    if args.json:
        with open(args.json, "w") as f:
            json.dump(outcome, f, indent=1, sort_keys=True)
    counts = {}
    for v in outcome.values():
        counts[v.split(":")[0]] = counts.get(v.split(":")[0], 0) + 1
    print(f"backend {backend}{f' ({GATED_AS}-gated tests)' if AS_GLOO else ''}, world size {os.environ['WORLD_SIZE']}, "
          f"ranks by {START_METHOD}, subset {args.subset}: {counts} "
          f"in {time.monotonic() - start:.0f}s")
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main(ARGS))
