#!/usr/bin/python3
"""preload_bench: a torch job back at work after a failure, ctrun cold vs `ctrun --preload torch` vs torchrun.

Real torch 1.13 workers (first_allreduce.py, gloo over loopback, OMP_NUM_THREADS=1), N ranks on this node,
--max-restarts 1: attempt 0 does one all_reduce and then its last rank fails; attempt 1 does one all_reduce and
ends. Per launcher and run:
  launch   from the launcher's exec to the end of the first all_reduce of attempt 0
  restart  from the failing rank's exit to the end of the first all_reduce of attempt 1
  PSS      the sum of the workers' proportional set sizes during attempt 0 (+ ctrun's warm process when preloaded)
Runs alternate between the launchers (one of each per round), so load from other work hits them alike.

  /usr/bin/python3 apps/bench/preload_bench/preload_bench.py --ctrun build/bin/ctrun --nproc 4,8 --rounds 3
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "first_allreduce.py")


def launcher_commands(args, nproc):
    common_ctrun = [args.ctrun, "--standalone", "--nproc-per-node", str(nproc), "--max-restarts", "1"]
    torchrun = [args.python, args.torchrun, "--standalone", "--nproc_per_node", str(nproc), "--max_restarts", "1",
                "--monitor_interval", "0.1"]
    out = {"ctrun": common_ctrun + [WORKER], "ctrun --preload torch": common_ctrun + ["--preload", "torch", WORKER]}
    if args.torchrun:
        out["torchrun 1.13"] = torchrun + [WORKER]
    return {k: v for k, v in out.items() if k in args.launchers or not args.launchers}


def run_once(cmd, python, timeout):
    with tempfile.TemporaryDirectory(prefix="preload_bench_") as tmp:
        out = os.path.join(tmp, "events")
        env = dict(os.environ, BENCH_OUT=out, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo", LOGLEVEL="WARNING",
                   PYTHON_EXEC=python)
        t0 = time.time()
        p = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=timeout)
        events = {}
        if os.path.exists(out):
            for line in open(out):
                f = line.split()
                events[(f[0], int(f[1]))] = [float(x) for x in f[2:]]
        if p.returncode != 0 or ("allreduce", 1) not in events or ("fail", 0) not in events:
            tail = p.stderr.decode(errors="replace")[-2000:]
            raise RuntimeError("%s: exit %d, events %s\n%s" % (" ".join(cmd), p.returncode, sorted(events), tail))
        pss = events.get(("pss", 0), [0, 0, 0])
        return {
            "launch": events[("allreduce", 0)][0] - t0,
            "restart": events[("allreduce", 1)][0] - events[("fail", 0)][0],
            "pss_workers": pss[1] / 1024.0,
            "pss_warm": pss[2] / 1024.0,
        }


def loadavg():
    return open("/proc/loadavg").read().split()[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ctrun", default="build/bin/ctrun")
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("--torchrun", default=os.path.join(HERE, "../../../../shared/interop/torchrun_py311.py"),
                    help="torchrun of torch 1.13 (a .py run by --python); empty: no torchrun column")
    ap.add_argument("--nproc", default="4,8")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--launchers", default="", help="comma-separated subset of the launchers' names")
    ap.add_argument("--timeout", type=float, default=300)
    args = ap.parse_args()
    args.launchers = [x for x in args.launchers.split(",") if x]
    if args.torchrun and not os.path.exists(args.torchrun):
        sys.exit("no torchrun at %s (--torchrun '' to run without it)" % args.torchrun)
    print("load average at start: %s, %d CPUs" % (loadavg(), os.cpu_count()))
    for nproc in [int(n) for n in args.nproc.split(",")]:
        cmds = launcher_commands(args, nproc)
        results = {k: [] for k in cmds}
        for r in range(args.rounds):
            for name, cmd in cmds.items():
                res = run_once(cmd, args.python, args.timeout)
                results[name].append(res)
                print("  %d ranks, round %d, %-22s launch %6.2f s  restart %6.3f s  PSS %7.1f MiB + warm %6.1f MiB"
                      "  (load %s)" % (nproc, r, name, res["launch"], res["restart"], res["pss_workers"],
                                       res["pss_warm"], loadavg()), flush=True)
        print("\n%d ranks, medians of %d runs:" % (nproc, args.rounds))
        print("| launcher | launch to first all_reduce | failure to first all_reduce of attempt 1 | PSS workers (+ warm) |")
        print("|---|---|---|---|")
        for name, rs in results.items():
            med = {k: statistics.median(x[k] for x in rs) for k in rs[0]}
            warm = " + %.0f" % med["pss_warm"] if med["pss_warm"] else ""
            print("| %s | %.2f s | %.3f s | %.0f%s MiB |" % (name, med["launch"], med["restart"], med["pss_workers"],
                                                            warm))
        print(flush=True)
    print("load average at end: %s" % loadavg())


if __name__ == "__main__":
    main()
