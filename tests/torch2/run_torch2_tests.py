#!/usr/bin/env python3
"""Real torch 2.6 clients and workers (v2 dialect) against ctstore and ctrun's agent store.

Runs on the host (any python3 >= 3.8, no torch needed); the torch 2.6 parts run in the Debian trixie chroot
built by ../shared/interop/torch2-env.sh (default /opt/torch2-chroot). See README.md.

usage: run_torch2_tests.py --ctstore BIN --ctrun BIN [--quick] [--compare] [CASE ...]
cases: ops gloo ctrun restart torchrun multinode   (default: all; --quick: the first four)
  ops      ops26.py (every Python op of 2.6's TCPStore) against ctstore and, as the worker of
           ctrun --standalone --nproc-per-node=1, against the agent-hosted store; with --compare also against
           torch 2.6's own legacy server; the transcripts must be identical
  gloo     init_process_group("gloo") in agent-store mode on ctstore: 2 and 4 workers, with and without
           TORCH_DIST_INIT_BARRIER=1 (--quick: 2 workers with the barrier)
  ctrun    ctrun --standalone --nproc-per-node=4 --no-python chroot_python.sh gloo_worker26.py, without and
           with TORCH_DIST_INIT_BARRIER=1 (--quick: without)
  restart  the same with --max-restarts 1, failing on attempt 0: attempt 1 must see no key of attempt 0
           (4 workers; --quick: 2)
  torchrun two real torch 2.6 torchrun agents (torchrun26.py) with --rdzv-backend c10d and ctstore as the
           --rdzv-endpoint, 2 gloo workers each (not in --quick)
  multinode two ctrun agents on 127.0.0.2/.3, c10d rendezvous on ctstore, 2 workers each, --max-restarts 1 with
           --fail-on-attempt-0 (not in --quick)
Exit: 0 all passed, 1 a failure, 77 skipped (no chroot, not root).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TORCH2_ENV = os.environ.get("TORCH2_ENV", os.path.normpath(os.path.join(REPO, "..", "shared", "interop", "torch2-env.sh")))
CHROOT_DIR = os.environ.get("CHROOT_DIR", "/opt/torch2-chroot")
CHROOT_PY = os.path.join(HERE, "chroot_python.sh")
CHROOT_SH = os.path.join(REPO, "scripts", "torch2_chroot.sh")  # the lock around the chroot (see that file)
SKIP = 77
JOB_TIMEOUT = 90


def log(msg):
    print(msg, flush=True)


def skip_reason():
    """Why the torch 2.6 tests cannot run here, or None. `make test` (scripts/torch2_chroot.sh prepare) writes its
    verdict to $TORCH2_STATUS: "SKIP: <why the chroot cannot be made>", "FAIL: ..." or "ready: ...". Without it
    (ctest run by hand), the chroot is checked directly."""
    status = os.environ.get("TORCH2_STATUS")
    if status and os.path.exists(status):
        with open(status) as f:
            line = f.read().strip()
        if line.startswith("SKIP: "):
            return line[len("SKIP: "):] + " (make test's torch 2.6 step)"
    if not os.path.isdir(CHROOT_DIR):
        return f"{CHROOT_DIR} does not exist (make test builds it, or: scripts/torch2_chroot.sh prepare FILE, as root)"
    if not os.path.exists(os.path.join(CHROOT_DIR, "usr/bin/python3")):
        return f"{CHROOT_DIR} is not a built torch 2.6 chroot"
    if os.geteuid() != 0:
        return "the torch 2.6 chroot needs root (chroot, mount)"
    if not os.access(TORCH2_ENV, os.X_OK):
        return f"{TORCH2_ENV} not found"
    return None


def module_problem(build_dir=None):
    """Why the ctrun_torch module built for torch 2.6 cannot be used, or None: missing, or older than a source
    file it is built from (the tests do not rebuild it: several run at once; `make test` does)."""
    build_dir = build_dir or os.path.join(REPO, "build-torch2")
    sos = [f for f in os.listdir(os.path.join(build_dir, "python")) if f.startswith("ctrun_torch") and
           f.endswith(".so")] if os.path.isdir(os.path.join(build_dir, "python")) else []
    rebuild = f"build it: make test, or tests/torch2/build_ctrun_torch26.sh {build_dir}"
    if not sos:
        return f"no ctrun_torch module for torch 2.6 in {build_dir}/python ({rebuild})"
    built = os.path.getmtime(os.path.join(build_dir, "python", sos[0]))
    for top in ("comm", "store", "common"):
        for d, _, files in os.walk(os.path.join(REPO, top)):
            for f in files:
                if f.endswith((".cpp", ".hpp", "CMakeLists.txt")) and os.path.getmtime(os.path.join(d, f)) > built:
                    return f"{os.path.join(d, f)} is newer than the torch 2.6 module ({rebuild})"
    return None


def chroot_env(extra=None):
    env = dict(os.environ)
    env["TORCH2_ENV"] = TORCH2_ENV
    env["CHROOT_DIR"] = CHROOT_DIR
    env["TORCH2_BIND"] = REPO
    env.update(extra or {})
    return env


class Daemon:
    """A background process that prints "... listening on HOST:PORT" first; killed on exit."""

    def __init__(self, argv, env=None):
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                     start_new_session=True)
        deadline = time.time() + 30
        self.port = None
        while time.time() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            m = re.search(r"listening on (\S+):(\d+)", line)
            if m:
                self.port = int(m.group(2))
                break
        if self.port is None:
            self.stop()
            raise RuntimeError(f"{argv[0]} did not print its port: {self.proc.stderr.read()[-2000:]}")

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 15)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait()
        return self.proc.returncode


def run_chroot_python(args, env=None, timeout=JOB_TIMEOUT):
    return subprocess.run([CHROOT_PY] + args, env=chroot_env(env), capture_output=True, text=True, timeout=timeout)


# UCX's own log lines ("[1795991679.906676] [vm:1488 :0]  sys.c:306  UCX  ERROR failed to get boot id"): torch 2.6's
# build loads UCX, which writes them to stdout when something of the machine's is missing for a moment, under load.
_UCX_LOG = re.compile(r"^\[\d+\.\d+\] \[[^]]*\]\s+\S+:\d+\s+UCX\s")


def strip_noise(text):
    """Drops c10d's timestamped warnings, UCX's log lines and the port line, which differ between runs and servers."""
    return [l for l in text.splitlines() if not l.startswith("[W") and " A.port " not in l and not _UCX_LOG.match(l)]


# ------------------------------------------------------------------------------------------------- cases
def case_ops(a):
    ok = True
    ops = os.path.join(HERE, "ops26.py")
    store = Daemon([a.ctstore, "--host", "127.0.0.1", "--port", "0"])
    server = agent_p = theirs_p = None
    try:
        # the comparison run against torch's own server goes concurrently: the script mostly sleeps and times out
        server = Daemon([CHROOT_PY, os.path.join(HERE, "torch_server26.py")], env=chroot_env()) if a.compare else None
        # and ops26.py as ctrun's only worker, on the agent-hosted store (fresh, so the key counts hold)
        agent_p = subprocess.Popen([a.ctrun, "--standalone", "--nproc-per-node=1", "--no-python", CHROOT_PY, ops],
                                   env=chroot_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if server:
            theirs_p = subprocess.Popen([CHROOT_PY, ops, "127.0.0.1", str(server.port)], env=chroot_env(),
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                        start_new_session=True)
        r = run_chroot_python([ops, "127.0.0.1", str(store.port)])
        theirs_out = theirs_p.communicate(timeout=JOB_TIMEOUT)[0] if theirs_p else None
        agent_out, agent_err = agent_p.communicate(timeout=JOB_TIMEOUT)
    finally:
        # only left running when something above raised (a timeout)
        if agent_p is not None and agent_p.poll() is None:
            agent_p.terminate()  # ctrun forwards it to its worker's process group
            agent_p.wait()
        if theirs_p is not None and theirs_p.poll() is None:
            os.killpg(theirs_p.pid, 9)  # torch2-env.sh, chroot and python3
            theirs_p.wait()
        rc = store.stop()
        if server:
            server.stop()
    ours = strip_noise(r.stdout)
    fails = [l for l in ours if l.startswith("FAIL")]
    log(f"{'ok  ' if r.returncode == 0 and not fails else 'FAIL'} ops26 vs ctstore: exit {r.returncode}, "
        f"{sum(l.startswith('ok') for l in ours)} ok, {len(fails)} failed")
    for l in fails:
        log("  " + l)
    if r.returncode != 0 or not any(l.startswith("done: 0 failed") for l in ours):
        log(r.stdout[-3000:] + r.stderr[-3000:])
        ok = False
    if rc != 0:
        log(f"ctstore exited {rc} on SIGTERM")
        ok = False
    agent = strip_noise(agent_out)
    afails = [l for l in agent if l.startswith("FAIL")]
    agent_ok = agent_p.returncode == 0 and any(l.startswith("done: 0 failed") for l in agent)
    log(f"{'ok  ' if agent_ok else 'FAIL'} ops26 as the worker of ctrun --standalone --nproc-per-node=1 (agent store): "
        f"exit {agent_p.returncode}, {sum(l.startswith('ok') for l in agent)} ok, {len(afails)} failed")
    if not agent_ok:
        log("\n".join(afails) or f"--- stdout\n{agent_out[-4000:]}\n--- stderr\n{agent_err[-4000:]}")
        ok = False
    if agent_ok and agent != ours:
        import difflib
        log("transcripts differ (--- ctstore, +++ ctrun's agent store):")
        log("\n".join(difflib.unified_diff(ours, agent, lineterm="", n=1)))
        ok = False
    if theirs_out is not None:
        theirs = strip_noise(theirs_out)
        if theirs != ours:
            import difflib
            log("transcripts differ (--- torch 2.6 legacy server, +++ ctstore):")
            log("\n".join(difflib.unified_diff(theirs, ours, lineterm="", n=1)))
            ok = False
        else:
            log(f"ops26 transcript identical to torch 2.6's own server ({len(ours)} lines)")
    return ok


def gloo_env(port, rank, world, extra):
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank), "LOCAL_RANK": str(rank),
           "WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": str(world), "GROUP_RANK": "0",
           "TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_RESTART_COUNT": "0", "GLOO_SOCKET_IFNAME": "lo"}
    env.update(extra)
    return env


def check_ranks(out, world, attempt=0):
    missing = [r for r in range(world) if not re.search(rf"^rank {r}/{world} attempt {attempt} ok ", out, re.M)]
    return missing


def direct_gloo(a, world, extra, label):
    store = Daemon([a.ctstore, "--host", "127.0.0.1", "--port", "0"])
    t0 = time.time()
    procs = []
    try:
        for rank in range(world):
            procs.append(subprocess.Popen([CHROOT_PY, os.path.join(HERE, "gloo_worker26.py")],
                                          env=chroot_env(gloo_env(store.port, rank, world, extra)),
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                          start_new_session=True))
        outs = []
        for p in procs:
            try:
                outs.append(p.communicate(timeout=JOB_TIMEOUT)[0])
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, 9)  # torch2-env.sh, chroot and python3
                outs.append(p.communicate()[0] + "\n<timed out>")
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
        store.stop()
    out = "".join(outs)
    codes = [p.returncode for p in procs]
    missing = check_ranks(out, world)
    good = all(c == 0 for c in codes) and not missing
    log(f"{'ok  ' if good else 'FAIL'} direct gloo {label}: world {world}, exit codes {codes}, "
        f"{time.time() - t0:.1f} s")
    if not good:
        log(out[-4000:])
    return good


def case_gloo(a):
    # gloo_worker26.py patches rendezvous.TCPStore with use_libuv=False: in agent-store mode torch 2.6 builds
    # the client with the default use_libuv=True (USE_LIBUV=0 is not consulted there), which Debian's build
    # without libuv rejects before connecting. Upstream builds send the same bytes either way.
    ok = True
    barrier = {"TORCH_DIST_INIT_BARRIER": "1"}
    runs = [(2, {}), (2, barrier), (4, {}), (4, barrier)] if not a.quick else [(2, barrier)]
    for world, extra in runs:
        ok = direct_gloo(a, world, extra, "TORCH_DIST_INIT_BARRIER=1" if extra else "no init barrier") and ok
    return ok


def run_ctrun(a, args, extra_env=None):
    env = chroot_env(dict({"GLOO_SOCKET_IFNAME": "lo"}, **(extra_env or {})))
    t0 = time.time()
    try:
        r = subprocess.run([a.ctrun] + args, env=env, capture_output=True, text=True, timeout=JOB_TIMEOUT * 2)
    except subprocess.TimeoutExpired as e:
        # what ctrun printed until it was killed: where it stopped (its workers die with it, PR_SET_PDEATHSIG)
        out, err = (x.decode(errors="replace") if isinstance(x, bytes) else (x or "") for x in (e.stdout, e.stderr))
        log(f"ctrun {' '.join(args[:6])} ... did not end within {JOB_TIMEOUT * 2} s\n--- stdout\n{out[-5000:]}"
            f"\n--- stderr\n{err[-5000:]}")
        r = subprocess.CompletedProcess([a.ctrun] + args, -1, out, err)
    return r, time.time() - t0


def case_ctrun(a):
    ok = True
    for world, extra, label in [(4, {}, "")] + ([] if a.quick else [(4, {"TORCH_DIST_INIT_BARRIER": "1"},
                                                                       ", TORCH_DIST_INIT_BARRIER=1")]):
        r, secs = run_ctrun(a, ["--standalone", f"--nproc-per-node={world}", "--no-python", CHROOT_PY,
                                os.path.join(HERE, "gloo_worker26.py")], extra)
        missing = check_ranks(r.stdout, world)
        good = r.returncode == 0 and not missing
        log(f"{'ok  ' if good else 'FAIL'} ctrun --standalone --nproc-per-node={world}{label}: exit {r.returncode}, "
            f"{secs:.1f} s")
        if not good:
            log(f"ranks without an ok line: {missing}\n--- stdout\n{r.stdout[-4000:]}\n--- stderr\n{r.stderr[-4000:]}")
        ok = ok and good
    return ok


def case_restart(a):
    world = 2 if a.quick else 4
    r, secs = run_ctrun(a, ["--standalone", f"--nproc-per-node={world}", "--max-restarts", "1", "--no-python",
                            CHROOT_PY, os.path.join(HERE, "gloo_worker26.py"), "--fail-on-attempt-0"])
    failed0 = [rk for rk in range(world) if f"rank {rk}/{world} attempt 0 failing on purpose" in r.stdout]
    missing1 = check_ranks(r.stdout, world, attempt=1)
    fresh = all(re.search(rf"^rank {rk}/{world} attempt 1 ok .* stale_keys_seen=False$", r.stdout, re.M)
                for rk in range(world))
    good = r.returncode == 0 and len(failed0) == world and not missing1 and fresh
    log(f"{'ok  ' if good else 'FAIL'} ctrun --max-restarts 1, {world} workers failing on attempt 0: "
        f"exit {r.returncode}, attempt 0 failed on ranks {failed0}, attempt 1 ok on "
        f"{[rk for rk in range(world) if rk not in missing1]}, {secs:.1f} s")
    if not good:
        log(f"--- stdout\n{r.stdout[-5000:]}\n--- stderr\n{r.stderr[-5000:]}")
    return good


def case_torchrun(a):
    """Two real torch 2.6 torchrun agents (c10d rendezvous backend) with ctstore as --rdzv-endpoint."""
    store = Daemon([a.ctstore, "--host", "127.0.0.1", "--port", "0"])
    t0 = time.time()
    procs = []
    try:
        # --local-addr: rank 0's agent otherwise publishes socket.getfqdn(), which stalls in the chroot
        for _ in range(2):
            procs.append(subprocess.Popen(
                [CHROOT_PY, os.path.join(HERE, "torchrun26.py"), "--nnodes", "2", "--nproc-per-node", "2",
                 "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{store.port}", "--rdzv-id", "torch2job",
                 "--rdzv-conf", "is_host=False,read_timeout=30", "--local-addr", "127.0.0.1", "--no-python",
                 "/usr/bin/python3", os.path.join(HERE, "gloo_worker26.py")],
                env=chroot_env({"GLOO_SOCKET_IFNAME": "lo"}), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                text=True, start_new_session=True))
        outs = []
        for p in procs:
            try:
                outs.append(p.communicate(timeout=JOB_TIMEOUT * 2)[0])
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, 9)
                outs.append(p.communicate()[0] + "\n<timed out>")
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
        store.stop()
    out = "".join(outs)
    codes = [p.returncode for p in procs]
    missing = check_ranks(out, 4)
    good = all(c == 0 for c in codes) and not missing
    log(f"{'ok  ' if good else 'FAIL'} two torch 2.6 torchrun agents, c10d rendezvous on ctstore, 2x2 gloo workers: "
        f"exit codes {codes}, {time.time() - t0:.1f} s")
    if not good:
        log(out[-5000:])
    return good


def case_multinode(a):
    """Two ctrun agents (127.0.0.2, 127.0.0.3), c10d rendezvous on ctstore, 2 torch 2.6 workers each, failing on
    attempt 0: node 1's workers use node 0's agent store, and attempt 1 must see no key of attempt 0."""
    store = Daemon([a.ctstore, "--host", "127.0.0.1", "--port", "0"])
    t0 = time.time()
    procs = []
    try:
        for n in (2, 3):
            procs.append(subprocess.Popen(
                [a.ctrun, "--nnodes", "2", "--nproc-per-node", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                 f"127.0.0.1:{store.port}", "--rdzv-id", "torch2mn", "--local-addr", f"127.0.0.{n}",
                 "--max-restarts", "1", "--no-python", CHROOT_PY, os.path.join(HERE, "gloo_worker26.py"),
                 "--fail-on-attempt-0"],
                env=chroot_env({"GLOO_SOCKET_IFNAME": "lo"}), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True))
        outs = []
        for p in procs:
            try:
                outs.append(p.communicate(timeout=JOB_TIMEOUT * 2))
            except subprocess.TimeoutExpired:
                p.terminate()  # ctrun forwards it to its workers
                outs.append(p.communicate())
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        store.stop()
    out = "".join(o for o, _ in outs)
    codes = [p.returncode for p in procs]
    failed0 = [rk for rk in range(4) if f"rank {rk}/4 attempt 0 failing on purpose" in out]
    fresh = [rk for rk in range(4)
             if re.search(rf"^rank {rk}/4 attempt 1 ok .* stale_keys_seen=False$", out, re.M)]
    good = codes == [0, 0] and len(failed0) == 4 and len(fresh) == 4
    log(f"{'ok  ' if good else 'FAIL'} two ctrun agents (c10d on ctstore), 2x2 torch 2.6 workers, --max-restarts 1: "
        f"exit codes {codes}, attempt 0 failed on {failed0}, attempt 1 ok and fresh on {fresh}, "
        f"{time.time() - t0:.1f} s")
    if not good:
        log("\n".join(f"--- stdout\n{o[-3000:]}\n--- stderr\n{e[-3000:]}" for o, e in outs))
    return good


def reclaim_leaked_mounts():
    """A run of torch2-env.sh killed hard (SIGKILL) leaves its mount count behind and the chroot mounted. The
    wrapper unmounts such leftovers only when no one uses the chroot (its lock is free, no run is alive)."""
    r = subprocess.run([CHROOT_SH, "reclaim"], env=chroot_env(), capture_output=True, text=True)
    if "unmounting" in r.stderr:
        log("note: " + r.stderr.strip())


CASES = {"ops": case_ops, "gloo": case_gloo, "ctrun": case_ctrun, "restart": case_restart,
         "torchrun": case_torchrun, "multinode": case_multinode}
QUICK_CASES = ["ops", "gloo", "ctrun", "restart"]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ctstore", required=True)
    p.add_argument("--ctrun", required=True)
    p.add_argument("--quick", action="store_true", help="the subset ctest runs (< 60 s)")
    p.add_argument("--compare", action="store_true", help="also diff ops26 against torch 2.6's own server")
    p.add_argument("cases", nargs="*", help="ops gloo ctrun restart torchrun multinode (default: all)")
    a = p.parse_args()
    unknown = [c for c in a.cases if c not in CASES]
    if unknown:
        p.error(f"unknown case(s) {unknown}; choose from {list(CASES)}")
    reason = skip_reason()
    if reason:
        log(f"SKIP: {reason}")
        return SKIP
    t0 = time.time()
    results = {}
    for name in a.cases or (QUICK_CASES if a.quick else list(CASES)):
        try:
            results[name] = CASES[name](a)
        except Exception as e:  # a hung or broken case fails, the others still run
            log(f"FAIL {name}: {type(e).__name__}: {e}")
            results[name] = False
    reclaim_leaked_mounts()
    log(f"torch2 results: {results} in {time.time() - t0:.1f} s")
    return 0 if all(results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
