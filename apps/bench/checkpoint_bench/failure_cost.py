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
  ctrun + ck doc       docs/checkpoint.md's example as written: a small MLP and Adam beside the state, all saved by
                       ck.save every step; ck.load(), then model.load_state_dict and optimizer.load_state_dict

plus each attempt-1 load's time, the saves' cost per step, and where the time went, each phase's end from the kill
(the slowest rank's, from the workers' lines and ctrun's --event-log): "noticed" (the agent saw the killed worker
exit), "spawned" (the agent started the last new worker), "started" (the slowest new worker had torch imported),
"joined" (had joined the process group), "built" (had built its state and model, the first touch of their pages,
and began to load), "agreed" (ck.load knew the step: the agents settle it before the workers start, so this is the
rank's lookup in the store), "loaded" (ck.load returned), "applied" (the state was in the model and
optimizer) and "step" (the first step after the load done). Both launchers
restart once (--max-restarts 1) with their defaults otherwise, as a new user would run them (torchrun 1.13 checks
its workers every 5 s).

usage: failure_cost.py --ctrun BIN [--python /usr/bin/python3] [--torchrun PY] [--mib 128] [--runs 1] [--step-s 0.3]
                       [--ranks 4] [--checkpoint-memory SIZE] [--kinds "torchrun + disk,ctrun + ck into"]
The runs alternate between the kinds. Takes about a minute per run at 128 MiB; not part of `make test`."""

import argparse
import json
import math
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
KINDS = {"torchrun + disk": "disk", "ctrun + disk": "disk", "ctrun + ck": "ck", "ctrun + ck into": "ck-into",
         "ctrun + ck doc": "doc"}
PHASES = ["noticed", "spawned", "started", "joined", "built", "agreed", "loaded", "applied", "step"]


def run(kind, a, out):
    worker = [WORKER, KINDS[kind], out, "--steps", str(STEPS), "--kill-after",
              str(KILL_AFTER), "--kill-rank", str(KILL_RANK), "--mib", str(a.mib), "--step-s", str(a.step_s)]
    env = dict(os.environ, PYTHON_EXEC=a.python)
    if kind == "torchrun + disk":
        cmd = [a.python, a.torchrun, "--standalone", f"--nproc_per_node={a.ranks}", "--max_restarts=1"] + worker
    else:
        memory = ["--checkpoint-memory", a.checkpoint_memory] if a.checkpoint_memory else []
        cmd = [a.ctrun, "--standalone", "--nproc-per-node", str(a.ranks), "--max-restarts", "1", "--preload",
               "torch", "--event-log", os.path.join(out, "events.jsonl")] + memory + worker
    began = time.time()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise RuntimeError(f"{kind}: exit {p.returncode}\n{p.stderr[-4000:]}")
    return time.time() - began


def lines(out, attempt, rank):
    with open(os.path.join(out, f"attempt-{attempt}-rank-{rank}.txt")) as f:
        return [line.split() for line in f]


def events(out):
    """ctrun's --event-log (none under torchrun)."""
    path = os.path.join(out, "events.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def measure(out, step_s, ranks):
    killed = next(float(t) for what, _, t, *_ in lines(out, 0, KILL_RANK) if what == "killed")
    after = []
    redone = set()
    loads = []
    phase = {p: [] for p in PHASES}
    for r in range(ranks):
        rows = lines(out, 1, r)

        def at(what):
            return next(float(t) for w, _, t, *_ in rows if w == what)

        for p in ("started", "joined", "loaded", "applied"):
            phase[p].append(at(p))
        after.append(next(float(t) for what, s, t, *_ in rows if what == "done" and int(s) == KILL_AFTER + 1))
        redone |= {int(s) for what, s, *_ in rows if what == "done" and int(s) <= KILL_AFTER}
        loads.append(next(float(x[3]) for x in rows if x[0] == "loaded"))
        phase["built"].append(phase["loaded"][-1] - loads[-1])  # the load began: the worker's state was built
    phase["step"] = after
    log = events(out)
    exits = [e["time"] for e in log if e["event"] == "worker_exit" and e.get("restart_count") == 0]
    spawns = [e["time"] for e in log if e["event"] == "worker_start" and e.get("restart_count") == 1]
    agreed = {e["rank"]: e.get("agree_seconds") for e in log if e["event"] == "checkpoint_load"}
    phase["noticed"] = exits[:1]  # the first exit: the agent has seen the failure
    phase["spawned"] = spawns
    # Each rank's lookup of the step ended its load's agree_seconds after the load began.
    if len(agreed) == ranks and None not in agreed.values():
        phase["agreed"] = [phase["built"][r] + agreed[r] for r in range(ranks)]
    # Step time in attempt 0 (saves included): the job's pace before the failure.
    done0 = [float(t) for what, s, t, *_ in lines(out, 0, 0) if what == "done" and 1 <= int(s) <= KILL_AFTER]
    pace = (done0[-1] - done0[0]) / (len(done0) - 1)
    m = {"lost": max(after) - killed - step_s, "redone": len(redone), "load": max(loads), "pace": pace}
    # Where the time went: each phase's end, the slowest rank's, from the kill (nan where a kind has none).
    for p in PHASES:
        m[p] = max(phase[p]) - killed if phase[p] else float("nan")
    return m


def median(values):
    values = [v for v in values if not math.isnan(v)]
    return statistics.median(values) if values else float("nan")


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
    failed = []
    load_before = os.getloadavg()
    for _ in range(a.runs):
        for kind in kinds:
            for attempt in range(3):
                out = tempfile.mkdtemp(prefix="ckbench-", dir=os.environ.get("TMPDIR", "/tmp"))
                try:
                    wall = run(kind, a, out)
                    m = measure(out, a.step_s, a.ranks)
                    m["wall"] = wall
                    results[kind].append(m)
                    break
                except RuntimeError as e:  # a run that failed for itself (torchrun's port taken meanwhile, ...)
                    failed.append(kind)
                    print(f"{kind}: run failed, run again ({e})"[:3000], file=sys.stderr, flush=True)
                finally:
                    shutil.rmtree(out, ignore_errors=True)
            else:
                sys.exit(f"{kind}: failed 3 times in a row")
    load_after = os.getloadavg()
    print(f"{a.ranks} ranks, {a.mib} MiB of state per rank, {a.step_s} s steps, rank {KILL_RANK} SIGKILLed after step "
          f"{KILL_AFTER}; median of {a.runs} run(s); load average {load_before[0]:.1f} before, {load_after[0]:.1f} "
          "after")
    print(f"{'':18} {'time lost':>10} {'steps redone':>13} {'load':>9} {'step pace':>10} {'job wall':>9}")
    med = {k: {f: median(m[f] for m in results[k]) for f in results[k][0]} for k in kinds}
    for kind in kinds:
        m = med[kind]
        print(f"{kind:18} {m['lost']:9.2f}s {m['redone']:13.0f} {m['load'] * 1000:7.0f}ms {m['pace']:9.3f}s "
              f"{m['wall']:8.1f}s")
    print("phases: when each ended, seconds from the kill (the slowest rank's; - where the kind has none)")
    print(f"{'':18} " + " ".join(f"{p:>8}" for p in PHASES))
    for kind in kinds:
        print(f"{kind:18} " + " ".join("       -" if math.isnan(med[kind][p]) else f"{med[kind][p]:8.2f}"
                                       for p in PHASES))
    for kind in kinds:
        if kind.startswith("ctrun + ck"):
            ratio = med[kind]["lost"] / med["torchrun + disk"]["lost"]
            print(f"{kind} loses {ratio:.3f} of torchrun + disk's time (target <= 0.1); steps redone: "
                  f"{med[kind]['redone']:.0f} (target 0)")
    if failed:
        print("runs that failed and were run again: " + ", ".join(failed))
    print("each run, time lost: " + "; ".join(f"{k}: " + " ".join(f"{m['lost']:.2f}" for m in results[k])
                                              for k in kinds))

if __name__ == "__main__":
    main()
