#!/usr/bin/python3
"""relay_launch_bench: a two-node job's launch to its first collective, with this node's store relay (the default with
several nodes) and with `--store-relay off` (every rank connects to the workers' store itself), in the same run.

Two ctrun agents on 127.0.0.2 and 127.0.0.3 (c10d, the rendezvous on a ctstore started first, on a free port), N
torch 1.13 ranks each (first_collective.py: gloo over loopback, OMP_NUM_THREADS=1). Per run:
  launch  from the moment both agents are started to the end of the last rank's first all_reduce
  init    from the last rank's end of `import torch` to the end of the last rank's first all_reduce: the part the
          store carries (init_process_group's rendezvous, gloo's address exchange), without the imports' noise
Runs alternate (on, off, on, off, ...), so load from other work hits both alike; prints the median and the spread of
each, and their ratio. --secret adds a third variant: the relay on and the job's secret given to every agent and to
the ctstore (docs/security.md: every agent proves it to the rendezvous store, every relay to the workers' store).

  /usr/bin/python3 apps/bench/relay_launch_bench/relay_launch_bench.py --ctrun build/bin/ctrun \
      --ctstore build/bin/ctstore --nproc 4 --rounds 5 [--secret]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "first_collective.py")
HOSTS = ("127.0.0.2", "127.0.0.3")


def start_ctstore(ctstore, secret_file=None):
    extra = ["--secret-file", secret_file] if secret_file else []
    p = subprocess.Popen([ctstore, "--host", "127.0.0.1", "--port", "0", *extra], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, start_new_session=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = p.stdout.readline()
        m = re.search(r"listening on \S+?:(\d+)", line)
        if m:
            return p, int(m.group(1))
        if not line and p.poll() is not None:
            break
    p.kill()
    raise RuntimeError("ctstore did not say where it listens")


def run_once(args, port, relay, run_id, secret_file=None):
    with tempfile.TemporaryDirectory(prefix="relay_launch_") as tmp:
        out = os.path.join(tmp, "events")
        env = dict(os.environ, BENCH_OUT=out, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo", PYTHON_EXEC=args.python)
        agents = []
        t0 = time.time()
        for host in HOSTS:
            cmd = [args.ctrun, "--local-addr", host, "--nnodes", "2", "--nproc-per-node", str(args.nproc),
                   "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", run_id,
                   "--monitor-interval", "0.1", "--store-relay", "on" if relay else "off"]
            cmd += (["--secret-file", secret_file] if secret_file else []) + [WORKER]
            agents.append(subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                           start_new_session=True))
        codes, errs = [], []
        for a in agents:
            _, err = a.communicate(timeout=args.timeout)
            codes.append(a.returncode)
            errs.append(err.decode(errors="replace")[-2000:])
        rows = [line.split() for line in open(out)] if os.path.exists(out) else []
        ends = [float(r[1]) for r in rows]
        if any(codes) or len(ends) != 2 * args.nproc:
            raise RuntimeError(f"relay {relay}: exit {codes}, {len(ends)} ranks done\n" + "\n".join(errs))
        relayed = sum(1 for r in rows if r[2] != "-")
        if relayed != (2 * args.nproc if relay else 0):
            raise RuntimeError(f"relay {relay}: {relayed} ranks were given a relay")
        return max(ends) - t0, max(ends) - max(float(r[3]) for r in rows)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ctrun", required=True)
    p.add_argument("--ctstore", required=True)
    p.add_argument("--python", default="/usr/bin/python3")
    p.add_argument("--nproc", type=int, default=4)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--timeout", type=float, default=300)
    p.add_argument("--secret", action="store_true", help="also run with the relay on and a job secret")
    args = p.parse_args()
    variants = [("on", True, False), ("off", False, False)] + ([("secret", True, True)] if args.secret else [])
    labels = {"on": "--store-relay on (default)", "off": "--store-relay off", "secret": "on, with --secret-file"}
    tmp = tempfile.mkdtemp(prefix="relay_launch_key_")
    key = os.path.join(tmp, "job.key")
    with open(key, "w") as f:
        f.write(os.urandom(24).hex() + "\n")
    os.chmod(key, 0o600)
    stores = {False: start_ctstore(args.ctstore)}
    if args.secret:
        stores[True] = start_ctstore(args.ctstore, key)
    times = {(name, what): [] for name, _, _ in variants for what in ("launch", "init")}
    try:
        for i in range(args.rounds):
            for name, relay, secret in variants:
                launch, init = run_once(args, stores[secret][1], relay, f"launch{i}{name}{os.getpid()}",
                                        key if secret else None)
                times[(name, "launch")].append(launch)
                times[(name, "init")].append(init)
                print(f"round {i + 1}: {name:6s} launch {launch * 1000:7.0f} ms, init {init * 1000:6.0f} ms  "
                      f"(load {os.getloadavg()[0]:.1f})", flush=True)
    finally:
        for store, _ in stores.values():
            store.kill()
            store.wait()
        os.unlink(key)
        os.rmdir(tmp)
    print(f"\n2 nodes x {args.nproc} torch 1.13 ranks, {args.rounds} runs each (median, min-max):")
    for what in ("launch", "init"):
        for name, _, _ in variants:
            t = times[(name, what)]
            print(f"  {what:6s} {labels[name]:27s} {statistics.median(t) * 1000:7.0f} ms  ({min(t) * 1000:.0f}-"
                  f"{max(t) * 1000:.0f})")
        median = {name: statistics.median(times[(name, what)]) for name, _, _ in variants}
        print(f"  {what:6s} on / off: {median['on'] / median['off']:.3f}" +
              (f", secret / on: {median['secret'] / median['on']:.3f}" if args.secret else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
