"""What a job secret costs a two-node launch (docs/security.md, docs/benchmarks.md "Closed doors"): two ctrun agents
(127.0.0.2 and 127.0.0.3, one no-op worker each, c10d on one ctstore) from their start to both exiting 0, with and
without the job's secret (every store connection then starts with the handshake, and each agent loads the crypto
module), alternating, median of `reps` each: wall time, and the CPU time the two agents (and their no-op workers)
used, which a loaded machine disturbs less. Also says whether a no-secret agent mapped libcrypto or libz.

    python3 apps/bench/launch_bench/two_nodes_secret.py build/bin [reps=15]
"""
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

BIN = sys.argv[1]
REPS = int(sys.argv[2]) if len(sys.argv) > 2 else 15
CTRUN, CTSTORE = os.path.join(BIN, "ctrun"), os.path.join(BIN, "ctstore")


def store(secret):
    cmd = [CTSTORE, "--port", "0", "--host", "127.0.0.1"] + (["--secret-file", secret] if secret else [])
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline()  # "listening on HOST:PORT"
    return p, int(line.strip().rsplit(":", 1)[1])


def launch(port, run_id, secret, maps=None):
    flags = ["--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint",
             f"127.0.0.1:{port}", "--rdzv-id", run_id, "--monitor-interval", "0.05"]
    flags += ["--secret-file", secret] if secret else []
    script = ["--no-python", "sh", "-c", f"cat /proc/$PPID/maps > {maps}" if maps else "true"]
    began = time.perf_counter()
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    agents = [subprocess.Popen([CTRUN, "--local-addr", addr] + flags + script, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL) for addr in ("127.0.0.2", "127.0.0.3")]
    codes = [a.wait(timeout=120) for a in agents]
    assert codes == [0, 0], codes
    wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - cpu.ru_utime) + (after.ru_stime - cpu.ru_stime)


def main():
    with tempfile.TemporaryDirectory() as d:
        key = os.path.join(d, "job.key")
        with open(key, "w") as f:
            f.write(os.urandom(24).hex())
        os.chmod(key, 0o600)
        open_store, open_port = store(None)
        closed_store, closed_port = store(key)
        times = {"without a secret": [], "with a secret": []}
        cpus = {"without a secret": [], "with a secret": []}
        try:
            for i in range(REPS):
                for name, port, secret in (("without a secret", open_port, None), ("with a secret", closed_port, key)):
                    wall, cpu = launch(port, f"{'open' if secret is None else 'closed'}{i}", secret)
                    times[name].append(wall)
                    cpus[name].append(cpu)
            maps = os.path.join(d, "maps")
            launch(open_port, "maps", None, maps)
            mapped = open(maps).read()
        finally:
            for p in (open_store, closed_store):
                p.terminate()
                p.wait(timeout=30)
    print(f"two-node launch (2 agents, 1 no-op worker each, c10d on a ctstore), median of {REPS}:")
    for name, t in times.items():
        print(f"  {name:18} {statistics.median(t) * 1e3:7.1f} ms   (min {min(t) * 1e3:.1f}, max {max(t) * 1e3:.1f});"
              f"  CPU of both agents and workers {statistics.median(cpus[name]) * 1e3:6.1f} ms")
    print(f"  a job without a secret maps libcrypto: {'libcrypto' in mapped}, libz: {'libz.so' in mapped}")


if __name__ == "__main__":
    main()
