"""kill -9 of an active agent: how long until the survivor and a spare run the next round's first collective.

usage: python3 kill9_bench.py --ctrun build/bin/ctrun [--repeats 3] [--cases ctrun-c10d,ctrun-etcd,torchrun-c10d]

Each repeat starts three agents on 127.0.0.2, .3 and .4 for --nnodes 2, one torch 2.6 gloo worker each
(kill9_worker.py, run by the chroot's python3: tests/torch2/chroot_python.sh), .2 and .3 first, .4 once their round
runs (a spare). Then it SIGKILLs .3's agent's process group and its worker, and measures, from that instant, until
the first all_reduce of the next round has completed on both .2 (the survivor) and .4 (the spare): the workers
write the wall-clock time after their first all_reduce. Cases:

  ctrun-c10d     ctrun, --rdzv-backend c10d, the store hosted by .2's agent (is_host=1; the others is_host=0)
  ctrun-etcd     ctrun, --rdzv-backend etcd on a one-member etcd started here (127.0.0.1, reserved ports)
  torchrun-c10d  torch 2.6's torchrun (tests/torch2/torchrun26.py, in the chroot), c10d with its own TCPStore on
                 .2 (is_host=True; the others False)

Both launchers run with their defaults otherwise (heartbeats 5 s x 3, --max-restarts 3). torch 2.6 has no etcd v3
rendezvous (its etcd and etcd-v2 backends speak etcd's v2 API through python-etcd), so etcd is ctrun's alone.
Prints every repeat and the medians side by side. Not part of `make test` (timings do not belong in tests);
`make bench-kill9` runs it. Needs root (the chroot) and etcd for ctrun-etcd.
"""
import argparse
import glob
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
WORKER = os.path.join(HERE, "kill9_worker.py")
CHROOT_PY = os.path.join(REPO, "tests", "torch2", "chroot_python.sh")
TORCHRUN26 = os.path.join(REPO, "tests", "torch2", "torchrun26.py")
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
from etcd_test import ETCD, Etcd  # noqa: E402  (also puts tests/common on the path)
from ports import reserve_port  # noqa: E402

CASES = ["ctrun-c10d", "ctrun-etcd", "torchrun-c10d"]


class Run:
    """One repeat: three agents, their logs and their workers' files in a temp dir."""

    def __init__(self, args, case, index):
        self.args, self.case, self.index = args, case, index
        # Under the repository, which the chroot bind-mounts at its own path: the workers write here too.
        os.makedirs(os.path.join(REPO, "build"), exist_ok=True)
        self.dir = tempfile.mkdtemp(prefix="kill9-", dir=os.path.join(REPO, "build"))
        self.agents = {}
        self.etcd = None
        launcher, backend = case.split("-")
        self.launcher = launcher
        run_id = f"k9{os.getpid()}{index}"
        if backend == "etcd":
            self.etcd = Etcd(1)
            self.flags = {n: ["--rdzv-backend", "etcd", "--rdzv-endpoint", self.etcd.endpoints(), "--rdzv-id",
                              run_id] for n in (2, 3, 4)}
        else:
            port = reserve_port()
            yes, no = ("1", "0") if launcher == "ctrun" else ("True", "False")
            self.flags = {n: ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.2:{port}", "--rdzv-id", run_id,
                              "--rdzv-conf", f"is_host={yes if n == 2 else no}"] for n in (2, 3, 4)}

    def start(self, n):
        tag = f"n{n}"
        env = dict(os.environ, OUT_DIR=self.dir, NODE_TAG=tag, GLOO_SOCKET_IFNAME="lo", LOGLEVEL="INFO",
                   TORCH2_BIND=REPO)
        common = ["--nnodes", "2", "--nproc-per-node", "1", "--max-restarts", "3", *self.flags[n]]
        if self.launcher == "ctrun":
            cmd = [self.args.ctrun, "--local-addr", f"127.0.0.{n}", *common, "--no-python", CHROOT_PY, WORKER]
        else:
            cmd = [CHROOT_PY, TORCHRUN26, "--local-addr", f"127.0.0.{n}", *common, "--no-python", "python3", WORKER]
        log = open(os.path.join(self.dir, f"agent.{tag}.log"), "w")
        self.agents[tag] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                            start_new_session=True)

    def log(self, tag):
        with open(os.path.join(self.dir, f"agent.{tag}.log"), errors="replace") as f:
            return f.read()

    def times(self, kind, tag, after=0.0):
        """Times in OUT_DIR/<kind>.<tag>.* later than `after` (kind: pid = worker started, first = its first
        collective done). A pid file still empty is skipped (written in one write, so only for an instant)."""
        out = []
        for path in glob.glob(os.path.join(self.dir, f"{kind}.{tag}.*")):
            with open(path) as f:
                words = f.read().split()
            if words and float(words[0]) > after:
                out.append(float(words[0]))
        return out

    def firsts(self, tag, after=0.0):
        return self.times("first", tag, after)

    def worker_pids(self, tag):
        return [int(p.rsplit(".", 1)[1]) for p in glob.glob(os.path.join(self.dir, f"pid.{tag}.*"))]

    def wait_for(self, what, predicate, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return True
            time.sleep(0.02)
        print(f"  {self.case} #{self.index}: timed out waiting for {what}", flush=True)
        return False

    def measure(self):
        """Seconds from the kill to the next round's first collective on the survivor and the spare, and to its
    workers' start on both; None when it timed out, "agent exited" when the survivor's or the spare's agent
    gave up."""
        self.start(2)
        self.start(3)
        if not self.wait_for("the first round", lambda: self.firsts("n2") and self.firsts("n3"), 120):
            return None
        self.start(4)
        # The spare is in when it says so (ctrun: "spare"/"waiting"; torchrun 2.6 logs only that it started its
        # rendezvous, and adds itself to the wait list a moment later), then a margin.
        words = ("spare", "waiting") if self.launcher == "ctrun" else ("Rendezvous'ing worker group",)
        self.wait_for("the spare waiting", lambda: any(w in self.log("n4") for w in words), 60)
        time.sleep(2.0)
        killed = time.time()
        for pid in [self.agents["n3"].pid] + self.worker_pids("n3"):
            try:
                os.killpg(pid, signal.SIGKILL) if pid == self.agents["n3"].pid else os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        exited = lambda: [t for t in ("n2", "n4") if self.agents[t].poll() is not None]  # noqa: E731
        if not self.wait_for("the next round on n2 and n4",
                             lambda: (self.firsts("n2", killed) and self.firsts("n4", killed)) or exited(),
                             self.args.timeout) or exited():
            for tag in exited():  # torchrun 2.6's agents give up on the next round's keys after 60 s
                tail = self.log(tag).strip().splitlines()[-1:] or [""]
                print(f"  {self.case} #{self.index}: agent {tag} exited with {self.agents[tag].returncode}: "
                      f"{tail[0][:200]}", flush=True)
            return "agent exited" if exited() else None
        started = max(min(self.times("pid", t, killed)) for t in ("n2", "n4")) - killed
        first = max(min(self.firsts(t, killed)) for t in ("n2", "n4")) - killed
        return first, started

    def close(self):
        for p in self.agents.values():
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
        for tag in self.agents:
            for pid in self.worker_pids(tag):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        for p in self.agents.values():
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        if self.etcd:
            self.etcd.close()
        if self.args.keep:
            print(f"  kept {self.dir}", flush=True)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


def show(took, form):
    """A repeat's result: (first, started) in `form`, or why there is none."""
    if took is None:
        return "timeout"
    return took if isinstance(took, str) else form.format(*took)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ctrun", required=True)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--timeout", type=float, default=60.0, help="longest wait for the next round (s)")
    p.add_argument("--keep", action="store_true", help="keep each repeat's logs")
    args = p.parse_args()
    args.ctrun = os.path.abspath(args.ctrun)
    cases = [c for c in args.cases.split(",") if c]
    for c in cases:
        if c not in CASES:
            p.error(f"unknown case {c}: use {','.join(CASES)}")
    if os.geteuid() != 0:
        print("kill9_bench: needs root (the torch 2.6 chroot)")
        return 2
    if "ctrun-etcd" in cases and not os.access(ETCD, os.X_OK):
        print("kill9_bench: no etcd (Debian etcd-server): skipping ctrun-etcd")
        cases.remove("ctrun-etcd")
    print(f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores", flush=True)
    results = {c: [] for c in cases}
    for i in range(args.repeats):  # the cases in turn, so a load change hits them alike
        for c in cases:
            run = Run(args, c, i)
            try:
                took = run.measure()
            finally:
                run.close()
            results[c].append(took)
            shown = show(took, "first all_reduce {:.2f} s, workers started {:.2f} s")
            print(f"{c:14s} #{i}: {shown}   (load {os.getloadavg()[0]:.1f})", flush=True)
    print("\nkill -9 to the next round on the survivor and the spare (s): its first all_reduce done on both, and its"
          " workers started on both")
    print(f"{'case':14s} {'first':>6s} {'start':>6s}  repeats (first/start)")
    for c in cases:
        got = [t for t in results[c] if isinstance(t, tuple)]
        med = (f"{statistics.median(t[0] for t in got):6.2f} {statistics.median(t[1] for t in got):6.2f}" if got
               else "     -      -")
        runs = ", ".join(show(t, "{:.2f}/{:.2f}") for t in results[c])
        print(f"{c:14s} {med}  {runs}")
    print(f"load average {os.getloadavg()[0]:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
