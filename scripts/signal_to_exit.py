#!/usr/bin/python3
"""Signal-to-exit time of a launcher (ctrun or torchrun 1.13) in each phase of its life.

    python3 scripts/signal_to_exit.py --ctrun build/bin/ctrun [--torchrun ../shared/interop/torchrun_py311.py]

Each phase starts the launcher(s) on loopback, waits until the phase is reached (a file a worker writes, or a
fixed settle time for waiting phases), sends SIGTERM and measures until the process is gone. Prints one line per
launcher and phase. Everything started is killed by pid at the end. Figures: docs/benchmarks.md.
"""
import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

WORKER = r"""#!/bin/bash
echo $$ > "$OUT_DIR/pid_${TAG}_${LOCAL_RANK:-0}"
if [ "$MODE" = exit ]; then exit 0; fi
trap 'exit 143' TERM
sleep 120 &
wait $!
"""


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def launch(cmd, tag, mode, out):
    env = dict(os.environ, OUT_DIR=out, TAG=tag, MODE=mode, LOGLEVEL="WARNING")
    log = open(os.path.join(out, f"log_{tag}"), "w")
    return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


def wait_file(path, timeout=60):
    end = time.time() + timeout
    while time.time() < end:
        if os.path.exists(path):
            return True
        time.sleep(0.02)
    return False


def term_and_time(p, sig=signal.SIGTERM, timeout=60):
    t0 = time.monotonic()
    p.send_signal(sig)
    try:
        p.wait(timeout)
    except subprocess.TimeoutExpired:
        return None
    return time.monotonic() - t0, p.returncode


def cleanup(procs, out):
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
    for f in os.listdir(out):
        if f.startswith("pid_"):
            try:
                os.kill(int(open(os.path.join(out, f)).read()), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass


def base(launcher, nnodes, endpoint, addr, worker):
    cmd = launcher + [f"--nnodes={nnodes}", "--nproc_per_node=1", "--rdzv_backend=c10d",
                      f"--rdzv_endpoint={endpoint}", "--rdzv_id=sig", "--no_python"]
    if addr and "ctrun" in os.path.basename(launcher[0]):  # torchrun 1.13 has no --local_addr (ids are host_pid)
        cmd.append(f"--local_addr={addr}")
    return cmd + [worker]


def phases(launcher, worker, settle):
    out = tempfile.mkdtemp(prefix="sig2exit_")
    results = {}
    procs = []
    try:
        # running: one node, two workers
        p = launch(launcher + ["--standalone", "--nproc_per_node=2", "--no_python", worker], "run", "wait", out)
        procs.append(p)
        wait_file(os.path.join(out, "pid_run_1"))
        time.sleep(settle)
        results["running"] = term_and_time(p)
        # waiting for a node that never comes: the store host, then a client
        ep = f"127.0.0.1:{free_port()}"
        host = launch(base(launcher, 3, ep, None, worker), "h", "wait", out)
        procs.append(host)
        time.sleep(settle)
        client = launch(base(launcher, 3, ep, "127.0.0.2", worker), "c", "wait", out)
        procs.append(client)
        time.sleep(settle)
        results["rendezvous wait (client)"] = term_and_time(client)
        results["rendezvous wait (host)"] = term_and_time(host)
        # exit barrier: node a succeeds, node b runs on
        ep = f"127.0.0.1:{free_port()}"
        b = launch(base(launcher, 2, ep, None, worker), "b", "wait", out)
        procs.append(b)
        time.sleep(settle)
        a = launch(base(launcher, 2, ep, "127.0.0.2", worker), "a", "exit", out)
        procs.append(a)
        wait_file(os.path.join(out, "pid_a_0"))
        time.sleep(settle)
        results["exit barrier"] = term_and_time(a)
        results["running, peer gone"] = term_and_time(b)
    finally:
        cleanup(procs, out)
        if os.environ.get("KEEP"):
            print("logs kept in", out)
        else:
            shutil.rmtree(out, ignore_errors=True)
    return results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ctrun", required=True)
    ap.add_argument("--torchrun")
    ap.add_argument("--settle", type=float, default=3.0, help="seconds to let a launcher reach a waiting phase")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="sig2exit_w_")
    worker = os.path.join(work, "worker.sh")
    with open(worker, "w") as f:
        f.write(WORKER)
    os.chmod(worker, 0o755)
    launchers = [("ctrun", [args.ctrun])]
    if args.torchrun:
        launchers.append(("torchrun 1.13", [sys.executable, args.torchrun]))
    print(f"load average: {os.getloadavg()}")
    for name, cmd in launchers:
        for phase, r in phases(cmd, worker, args.settle).items():
            print(f"{name:14s} {phase:28s} " + ("did not exit" if r is None else f"{r[0]:.3f} s  exit status {r[1]}"),
                  flush=True)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
