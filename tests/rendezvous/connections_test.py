#!/usr/bin/env python3
"""One connection per agent to the rendezvous store, counted with `ss`: two rdzv_node agents (the real c10d handler,
create_handler) form a round on a store they do not host, beat and watch it for a few heartbeat intervals, and the
store holds exactly two established connections from them the whole time, whatever the server:

  ctstore      ctrun's store (tagged mode: every wait pending at once on the one connection)
  torch26      torch 2.6's own TCPStore server (tests/torch2/torch_server26.py in the trixie chroot): waits on the one
               connection give way to every other request (CANCEL_WAIT), as torch's server keeps answering
  torch113     torch 1.13's own TCPStore server (Debian's python3-torch, the legacy dialect): waits are polls

usage: connections_test.py --rdzv-node BIN --ctstore BIN CASE      exits 77 (skip, with the reason) where the server
cannot be had here."""
import argparse
import os
import re
import select
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SKIP = 77


def skip(why):
    print(f"SKIP: {why}", flush=True)
    sys.exit(SKIP)


def read_line(proc, timeout):
    """The next stdout line of proc, or None after timeout."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        ready, _, _ = select.select([proc.stdout], [], [], max(0.0, end - time.monotonic()))
        if ready:
            line = proc.stdout.readline()
            return line.rstrip("\n") if line else None
    return None


def start_server(case, args):
    """The server process and its port."""
    if case == "ctstore":
        proc = subprocess.Popen([args.ctstore, "--host", "127.0.0.1", "--port", "0"], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True, start_new_session=True)
        pattern, wait = r"ctstore listening on 127\.0\.0\.1:(\d+)", 30
    elif case == "torch26":
        status = os.environ.get("TORCH2_STATUS", "")
        if status and os.path.exists(status) and open(status).read().startswith("SKIP"):
            skip(f"torch 2.6 chroot unavailable: {open(status).read().strip()}")
        if not os.path.isdir(os.environ.get("CHROOT_DIR", "/opt/torch2-chroot") + "/usr"):
            skip("no torch 2.6 chroot (make torch2)")
        env_script = os.environ.get("TORCH2_ENV", os.path.normpath(os.path.join(REPO, "..", "shared", "interop",
                                                                                 "torch2-env.sh")))
        if not os.path.exists(env_script):
            skip(f"no {env_script} to enter the torch 2.6 chroot (set TORCH2_ENV)")
        os.environ["TORCH2_ENV"] = env_script
        proc = subprocess.Popen([os.path.join(REPO, "tests/torch2/chroot_python.sh"),
                                 os.path.join(REPO, "tests/torch2/torch_server26.py"), "127.0.0.1"],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                start_new_session=True)
        pattern, wait = r"torch2 server listening on 127\.0\.0\.1:(\d+)", 240
    else:
        python = args.torch_python
        if not python or subprocess.run([python, "-c", "import torch.distributed"], capture_output=True,
                                        timeout=240).returncode != 0:
            skip(f"{python or 'no python'} cannot import torch (Debian's python3-torch)")
        code = ("import datetime, signal, torch.distributed as d\n"
                "s = d.TCPStore('127.0.0.1', 0, None, True, datetime.timedelta(seconds=300), wait_for_workers=False)\n"
                "print(f'torch113 server listening on 127.0.0.1:{s.port}', flush=True)\n"
                "signal.pause()\n")
        proc = subprocess.Popen([python, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                start_new_session=True)
        pattern, wait = r"torch113 server listening on 127\.0\.0\.1:(\d+)", 240
    line = read_line(proc, wait)
    m = re.search(pattern, line or "")
    if not m:
        os.killpg(proc.pid, signal.SIGKILL)
        raise SystemExit(f"FAIL: the {case} server did not start: {line!r}")
    return proc, int(m.group(1))


def established(port, pids):
    """The agents' ends of the established connections to 127.0.0.1:port (torch's own server process holds client
    connections to itself too: those are not the agents')."""
    out = subprocess.run(["ss", "-tnpH", "state", "established", f"( dport = :{port} )"], capture_output=True,
                         text=True, check=True).stdout
    return [line for line in out.splitlines() if any(f"pid={pid}," in line for pid in pids)]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rdzv-node", required=True)
    p.add_argument("--ctstore", required=True)
    p.add_argument("--torch-python", default="")
    p.add_argument("case", choices=["ctstore", "torch26", "torch113"])
    args = p.parse_args()
    server, port = start_server(args.case, args)
    nodes = []
    try:
        endpoint = f"127.0.0.1:{port}"
        conf = "is_host=0,last_call_timeout=0.2,keep_alive_interval=0.5,keep_alive_max_attempt=3,join_timeout=60"
        for addr in ("127.0.0.2", "127.0.0.3"):
            nodes.append(subprocess.Popen([args.rdzv_node, endpoint, "conn", "2", addr, conf], stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                          start_new_session=True))
        rounds = [read_line(n, 60) for n in nodes]
        if not all(r and r.startswith("ROUND 0 ") for r in rounds):
            raise SystemExit(f"FAIL: no round: {rounds}")
        counts = []
        end = time.monotonic() + 3.0  # six heartbeat intervals: beats, checks, the watches
        while time.monotonic() < end:
            counts.append(len(established(port, [n.pid for n in nodes])))
            for n in nodes:
                line = read_line(n, 0.05)
                if line is not None:
                    raise SystemExit(f"FAIL: a node said {line!r} (a false death?)")
            time.sleep(0.2)
        print(f"{args.case}: established connections to the rendezvous store during the round: {sorted(set(counts))}",
              flush=True)
        if set(counts) != {2}:
            raise SystemExit(f"FAIL: expected exactly 2 (one per agent), saw {counts}")
        for n in nodes:
            n.stdin.close()  # exit barrier, shutdown
        for n in nodes:
            rc = n.wait(timeout=60)
            if rc != 0:
                raise SystemExit(f"FAIL: a node exited {rc}: {n.stderr.read()[-2000:]}")
        print(f"PASS {args.case}", flush=True)
    finally:
        for n in nodes:
            if n.poll() is None:
                os.killpg(n.pid, signal.SIGKILL)
                n.wait()
        # SIGTERM first: the chroot's wrapper undoes its mounts on it (a SIGKILL would leave them).
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


if __name__ == "__main__":
    main()
