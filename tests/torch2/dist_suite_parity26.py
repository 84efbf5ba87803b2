#!/usr/bin/env python3
"""The gloo reference run of PyTorch 2.6's distributed_test.py (`make torch2-dist-parity`, a one-off, not part of
`make test`): the collective and p2p subset on gloo, and on ctrun the same subset plus the gloo-gated and
mpi-gated tests (run_dist_suite.py's --gloo-gated/--mpi-gated), known failures included. Lists every test that
passes with gloo and not with ctrun (what docs/comm.md's torch 2.6 parity list must explain).

usage: dist_suite_parity26.py [--jobs N] [--out DIR] [-k SUBSTRING ...]
  --jobs  runs side by side (default 2): gloo, and the ctrun parts
  --out   where the JSON outcomes go (default build-torch2/parity; inside the repository, which the chroot sees)
Writes OUT/{gloo,ctrun,ctrun_gloo_gated,ctrun_mpi_gated}.json and OUT/parity.json; prints the list.
Exit: 0 when every test that passes with gloo passes with ctrun, 1 otherwise, 77 when the chroot cannot be made.
"""
import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run_torch2_tests as t2  # noqa: E402

DRIVER = os.path.join(HERE, "run_dist_suite26.py")
RUNS = {  # name: run_dist_suite.py arguments
    "gloo": ["--backend", "gloo", "--subset", "p2p_collectives"],
    "ctrun": ["--backend", "ctrun", "--subset", "p2p_collectives", "--include-known"],
    "ctrun_gloo_gated": ["--gloo-gated", "--subset", "gloo_gated", "--include-known"],
    "ctrun_mpi_gated": ["--mpi-gated", "--subset", "mpi_gated", "--include-known"],
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", default=os.path.join(t2.REPO, "build-torch2", "parity"))
    ap.add_argument("-k", action="append", default=[])
    a = ap.parse_args()
    reason = t2.skip_reason()
    if reason:
        print(f"SKIP: {reason}")
        return t2.SKIP
    out = os.path.abspath(a.out)
    os.makedirs(out, exist_ok=True)
    ks = [x for k in a.k for x in ("-k", k)]

    def run(name):
        t0 = time.time()
        with open(os.path.join(out, f"{name}.log"), "w") as log:
            rc = subprocess.run([sys.executable, DRIVER, "--timeout", "14400"] + RUNS[name] + ks +
                                ["--json", os.path.join(out, f"{name}.json")], stdout=log,
                                stderr=subprocess.STDOUT).returncode
        print(f"{name}: exit {rc} in {time.time() - t0:.0f} s (log {out}/{name}.log)", flush=True)
        return name, rc

    with ThreadPoolExecutor(a.jobs) as pool:
        codes = dict(pool.map(run, RUNS))
    results = {}
    for name in RUNS:
        try:
            with open(os.path.join(out, f"{name}.json")) as f:
                results[name] = json.load(f)
        except OSError:
            print(f"FAIL: {name} wrote no results (exit {codes[name]})")
            return 1
    gloo_passed = sorted(n for n, v in results["gloo"].items() if v == "passed")
    ctrun = {}
    for name in ("ctrun", "ctrun_gloo_gated", "ctrun_mpi_gated"):
        for n, v in results[name].items():
            if v == "passed" or n not in ctrun:
                ctrun[n] = v
    missing = {n: ctrun.get(n, "not selected for ctrun") for n in gloo_passed if ctrun.get(n) != "passed"}
    extra = sorted(n for n, v in ctrun.items() if v == "passed" and results["gloo"].get(n) != "passed")
    with open(os.path.join(out, "parity.json"), "w") as f:
        json.dump({"gloo_passed": len(gloo_passed), "passes_with_gloo_not_ctrun": missing,
                   "passes_with_ctrun_not_gloo": extra}, f, indent=1, sort_keys=True)
    print(f"gloo passed {len(gloo_passed)}; ctrun passed "
          f"{sum(v == 'passed' for v in ctrun.values())} (plain, gloo-gated and mpi-gated runs)")
    print(f"pass with gloo and not with ctrun: {len(missing)}")
    for n, v in sorted(missing.items()):
        print(f"  {n}: {v}")
    print(f"pass with ctrun and not with gloo: {len(extra)}")
    for n in extra:
        print(f"  {n}: gloo: {results['gloo'].get(n, 'not selected')}")
    return 0 if not missing else 1


if __name__ == "__main__":
    sys.exit(main())
