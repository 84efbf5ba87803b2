#!/usr/bin/env python3
"""The time one failure costs a job, side by side in one run (docs/benchmarks.md, "In-memory checkpoints: the time
one failure costs"): a 4-rank torch job, MiB of state per rank, fixed-length steps, one rank SIGKILLed once every
rank finished step KILL_AFTER; the time from the kill until every rank has finished step KILL_AFTER + 1, minus one
step, and the steps done again, for

  torchrun + disk      torch's own torchrun (1.13's torch.distributed.run: ../shared/interop/torchrun_py311.py,
                       which fixes its start on python 3.11), torch.save to local disk every 5 steps
  ctrun + disk         ctrun --preload torch, the same saves
  ctrun + ck           ctrun --preload torch, ck.save every step (ctrun_torch.checkpoint), ck.load() into new tensors
  ctrun + ck into      the same, ck.load(into=) the state the worker already built (no new memory)

plus each attempt-1 load's time, the saves' cost per step, and where the time went: from the kill until the
slowest new worker had torch imported ("started") and had joined the process group ("joined"). Both launchers
restart once (--max-restarts 1) with their defaults otherwise, as a new user would run them (torchrun 1.13 checks
its workers every 5 s).

usage: failure_cost.py --ctrun BIN [--python /usr/bin/python3] [--torchrun PY] [--mib 128] [--runs 1] [--step-s 0.3]
                       [--ranks 4] [--checkpoint-memory SIZE] [--kinds "torchrun + disk,ctrun + ck into"]
The runs alternate between the kinds. Takes about a minute per run at 128 MiB; not part of `make test`."""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "failure_worker.py")
STEPS, KILL_AFTER, KILL_RANK = 25, 23, 1
KINDS = {"torchrun + disk": "disk", "ctrun + disk": "disk", "ctrun + ck": "ck", "ctrun + ck into": "ck-into"}


def run(kind, a, out):
    worker = [WORKER, KINDS[kind], out, "--steps", str(STEPS), "--kill-after",
              str(KILL_AFTER), "--kill-rank", str(KILL_RANK), "--mib", str(a.mib), "--step-s", str(a.step_s)]
    env = dict(os.environ, PYTHON_EXEC=a.python)
    if kind == "torchrun + disk":
        cmd = [a.python, a.torchrun, "--standalone", f"--nproc_per_node={a.ranks}", "--max_restarts=1"] + worker
    else:
        memory = ["--checkpoint-memory", a.checkpoint_memory] if a.checkpoint_memory else []
        cmd = [a.ctrun, "--standalone", "--nproc-per-node", str(a.ranks), "--max-restarts", "1", "--preload",
               "torch"] + memory + worker
    began = time.time()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        sys.exit(f"{kind}: exit {p.returncode}\n{p.stderr[-4000:]}")
    return time.time() - began


def lines(out, attempt, rank):
    with open(os.path.join(out, f"attempt-{attempt}-rank-{rank}.txt")) as f:
        return [line.split() for line in f]


def measure(out, step_s, ranks):
    killed = next(float(t) for what, _, t, *_ in lines(out, 0, KILL_RANK) if what == "killed")
    after = []
    redone = set()
    loads = []
    started, joined = [], []
    for r in range(ranks):
        rows = lines(out, 1, r)
        started.append(next(float(t) for what, _, t, *_ in rows if what == "started"))
        joined.append(next(float(t) for what, _, t, *_ in rows if what == "joined"))
        after.append(next(float(t) for what, s, t, *_ in rows if what == "done" and int(s) == KILL_AFTER + 1))
        redone |= {int(s) for what, s, *_ in rows if what == "done" and int(s) <= KILL_AFTER}
        loads.append(next(float(x[3]) for x in rows if x[0] == "loaded"))
    # Step time in attempt 0 (saves included): the job's pace before the failure.
    done0 = [float(t) for what, s, t, *_ in lines(out, 0, 0) if what == "done" and 1 <= int(s) <= KILL_AFTER]
    pace = (done0[-1] - done0[0]) / (len(done0) - 1)
    # Where the time went, each from the kill to the slowest rank: torch imported in the new worker, the process
    # group formed.
    return {"lost": max(after) - killed - step_s, "redone": len(redone), "load": max(loads), "pace": pace,
            "started": max(started) - killed, "joined": max(joined) - killed}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ctrun", required=True)
    ap.add_argument("--python", default="/usr/bin/python3")
    # Debian's torch 1.13 `python3 -m torch.distributed.run` fails on python 3.11 (a dataclass default); this is the
    # same torchrun with that fixed.
    ap.add_argument("--torchrun", default=os.path.normpath(os.path.join(HERE, "..", "..", "..", "..", "shared",
                                                                        "interop", "torchrun_py311.py")))
    ap.add_argument("--mib", type=int, default=128)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--step-s", type=float, default=0.3)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--checkpoint-memory", default="", help="ctrun's --checkpoint-memory (its default otherwise)")
    ap.add_argument("--kinds", default=",".join(KINDS), help="which of: " + ", ".join(KINDS))
    a = ap.parse_args()
    kinds = [k.strip() for k in a.kinds.split(",")]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or "torchrun + disk" not in kinds:
        why = unknown or "torchrun + disk is the reference and must be in"
        ap.error(f"--kinds: {why}; known: {', '.join(KINDS)}")
    results = {k: [] for k in kinds}
    load_before = os.getloadavg()
    for _ in range(a.runs):
        for kind in kinds:
            out = tempfile.mkdtemp(prefix="ckbench-", dir=os.environ.get("TMPDIR", "/tmp"))
            try:
                wall = run(kind, a, out)
                m = measure(out, a.step_s, a.ranks)
                m["wall"] = wall
                results[kind].append(m)
            finally:
                shutil.rmtree(out, ignore_errors=True)
    load_after = os.getloadavg()
    print(f"{a.ranks} ranks, {a.mib} MiB of state per rank, {a.step_s} s steps, rank {KILL_RANK} SIGKILLed after step "
          f"{KILL_AFTER}; median of {a.runs} run(s); load average {load_before[0]:.1f} before, {load_after[0]:.1f} "
          "after")
    print(f"{'':18} {'time lost':>10} {'steps redone':>13} {'load':>9} {'step pace':>10} {'job wall':>9} "
          f"{'started':>8} {'joined':>8}")
    med = {k: {f: statistics.median(m[f] for m in results[k]) for f in results[k][0]} for k in kinds}
    for kind in kinds:
        m = med[kind]
        print(f"{kind:18} {m['lost']:9.2f}s {m['redone']:13.0f} {m['load'] * 1000:7.0f}ms {m['pace']:9.3f}s "
              f"{m['wall']:8.1f}s {m['started']:7.2f}s {m['joined']:7.2f}s")
    for kind in kinds:
        if kind.startswith("ctrun + ck"):
            ratio = med[kind]["lost"] / med["torchrun + disk"]["lost"]
            print(f"{kind} loses {ratio:.3f} of torchrun + disk's time (target <= 0.1); steps redone: "
                  f"{med[kind]['redone']:.0f} (target 0)")
    print("each run, time lost: " + "; ".join(f"{k}: " + " ".join(f"{m['lost']:.2f}" for m in results[k])
                                              for k in kinds))

if __name__ == "__main__":
    main()
