"""Two hosts that share a host name which /etc/hosts maps to a loopback address (Debian's and Ubuntu's default):
each "host" is a network namespace of its own (joined by a veth pair, 10.78.0.1 and 10.78.0.2), with a UTS
namespace naming it "ctnode" and a mount namespace whose /etc/hosts (bind-mounted) maps "ctnode" to 127.0.1.1.
c10d rendezvous at host A, no --local-addr: the agents publish an address the other host reaches, and torch
workers on backend "ctrun" on both hosts init_process_group and all_reduce. With --local-addr ctnode (the
loopback name forced), the node that is not group rank 0 says before starting its workers that the workers'
store cannot be reached. The static backend (node rank 0 serves the store at the master address): each node binds
its own listeners on an address of its own host.

Run one case: hostname_test.py CASE (ctest runs each as integration.hostname.CASE). Exit 77 = skipped. Everything
created (namespaces, veth, temp files, processes) is removed by name or PID at the end.
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

CTRUN = os.environ.get("CTRUN_BIN", "ctrun")
TORCH_PYTHON = os.environ.get("CTRUN_TORCH_PYTHON", "/usr/bin/python3")
WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workers", "reach_worker.py")
SKIP = 77
ADDR = {"A": "10.78.0.1", "B": "10.78.0.2"}
# The rendezvous port inside the test's own namespaces: nothing else can hold it there, and nothing else can reach it.
RDZV_PORT = 29400

_up = os.path.dirname(os.path.abspath(__file__))
while not os.path.isfile(os.path.join(_up, "tests", "common", "processes.py")) and _up != os.path.dirname(_up):
    _up = os.path.dirname(_up)
sys.path.insert(0, os.path.join(_up, "tests", "common"))
from processes import have_torch  # noqa: E402


def run(*cmd):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30)


class Hosts:
    def __init__(self):
        tag = str(os.getpid())
        self.ns = {"A": "ctA" + tag, "B": "ctB" + tag}
        self.veth = ("vhA" + tag, "vhB" + tag)
        self.dir = tempfile.mkdtemp(prefix="ctrun-hostname-")
        self.hosts_file = os.path.join(self.dir, "hosts")
        with open(self.hosts_file, "w") as f:
            f.write("127.0.0.1 localhost\n127.0.1.1 ctnode\n")
        self.procs = {}

    def make(self):
        """Returns why the namespaces cannot be made, or ''."""
        if os.geteuid() != 0:
            return "needs root (network, UTS and mount namespaces)"
        for tool in ("ip", "unshare", "hostname"):
            if not shutil.which(tool):
                return "no " + tool
        for ns in self.ns.values():
            r = run("ip", "netns", "add", ns)
            if r.returncode:
                return "cannot create a network namespace: " + r.stderr.strip()
        a, b = self.veth
        r = run("ip", "link", "add", a, "type", "veth", "peer", "name", b)
        if r.returncode:
            return "cannot create a veth pair: " + r.stderr.strip()
        for host, dev in (("A", a), ("B", b)):
            ns = self.ns[host]
            for cmd in (("ip", "link", "set", dev, "netns", ns), ("ip", "-n", ns, "addr", "add", ADDR[host] + "/24",
                                                                   "dev", dev),
                        ("ip", "-n", ns, "link", "set", "lo", "up"), ("ip", "-n", ns, "link", "set", dev, "up")):
                r = run(*cmd)
                if r.returncode:
                    return " ".join(cmd) + ": " + r.stderr.strip()
        probe = self.on("A", ["hostname"], capture=True)
        if probe.returncode or probe.stdout.strip() != "ctnode":
            return "cannot name a UTS namespace and bind /etc/hosts in a mount namespace: " + probe.stderr.strip()
        return ""

    def wrap(self, host, argv):
        inner = "hostname ctnode && mount --bind %s /etc/hosts && exec \"$@\"" % self.hosts_file
        return ["ip", "netns", "exec", self.ns[host], "unshare", "--uts", "--mount", "sh", "-c", inner, "sh", *argv]

    def on(self, host, argv, capture=False):
        return subprocess.run(self.wrap(host, argv), capture_output=capture, text=True, timeout=30)

    def agent(self, host, extra=(), static=False):
        env = dict(os.environ, OUT_DIR=self.dir, PYTHON_EXEC=TORCH_PYTHON, LOGLEVEL="INFO", INIT_TIMEOUT="40")
        if static:  # torchrun's default backend: node rank 0 serves the one store at the master address
            rdzv = ["--node-rank", "0" if host == "A" else "1", "--master-addr", ADDR["A"], "--master-port",
                    str(RDZV_PORT)]
        else:
            rdzv = ["--rdzv-backend", "c10d", "--rdzv-endpoint", "%s:%d" % (ADDR["A"], RDZV_PORT), "--rdzv-id",
                    "hostname" + str(os.getpid())]
        argv = [CTRUN, "--nnodes", "2", "--nproc-per-node", "2", *rdzv, "--max-restarts", "0",
                "--monitor-interval", "0.2", "--shutdown-timeout", "3", *extra, WORKER]
        log = open(os.path.join(self.dir, "agent.%s.log" % host), "w")
        self.procs[host] = subprocess.Popen(self.wrap(host, argv), stdout=log, stderr=subprocess.STDOUT, env=env,
                                            start_new_session=True)

    def log(self, host):
        with open(os.path.join(self.dir, "agent.%s.log" % host)) as f:
            return f.read()

    def wait(self, timeout):
        deadline = time.monotonic() + timeout
        codes = {}
        for host, p in self.procs.items():
            try:
                codes[host] = p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                codes[host] = None
        return codes

    def cleanup(self):
        for p in self.procs.values():
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(10)
        for ns in self.ns.values():
            run("ip", "netns", "del", ns)  # takes its end of the veth pair, and so the pair, with it
        shutil.rmtree(self.dir, ignore_errors=True)


def with_hosts(case):
    if not have_torch(TORCH_PYTHON):
        print("SKIP: needs torch in " + TORCH_PYTHON)
        return SKIP
    h = Hosts()
    try:
        why = h.make()
        if why:
            print("SKIP: " + why)
            return SKIP
        return case(h)
    finally:
        h.cleanup()


def test_workers_reach_the_store_without_local_addr(h):
    h.agent("A")
    h.agent("B")
    codes = h.wait(150)
    logs = "\n".join("---- agent %s\n%s" % (k, h.log(k)) for k in ("A", "B"))
    assert codes == {"A": 0, "B": 0}, "exit codes %s\n%s" % (codes, logs)
    results = {}
    for rank in range(4):
        with open(os.path.join(h.dir, "rank.%d" % rank)) as f:
            addr, total = f.read().split()
        results[rank] = (addr, int(total))
    assert all(total == 4 for _, total in results.values()), results
    addrs = {addr for addr, _ in results.values()}
    assert len(addrs) == 1 and addrs <= set(ADDR.values()), "MASTER_ADDR %s\n%s" % (addrs, logs)
    assert "resolves to a loopback address here (/etc/hosts)" in logs, logs
    print("ok: MASTER_ADDR", addrs.pop(), "on both hosts")
    return 0


def test_static_nodes_bind_their_own_address(h):
    """The static backend: node rank 1's store address is the master's (node rank 0 serves it), but its own
    listeners (the checkpoint replication endpoint) bind an address of its own host; the two agents agree on their
    checkpoints at once instead of one waiting a minute for a record the other never wrote."""
    h.agent("A", static=True)
    h.agent("B", static=True)
    codes = h.wait(150)
    logs = "\n".join("---- agent %s\n%s" % (k, h.log(k)) for k in ("A", "B"))
    assert codes == {"A": 0, "B": 0}, "exit codes %s\n%s" % (codes, logs)
    assert "in-memory checkpoints are off" not in logs, logs
    for rank in range(4):
        with open(os.path.join(h.dir, "rank.%d" % rank)) as f:
            assert int(f.read().split()[1]) == 4, logs
    print("ok: both nodes ran with their checkpoint endpoints bound")
    return 0


def test_an_unreachable_store_is_said_before_the_workers_start(h):
    h.agent("A", ["--local-addr", "ctnode"])
    h.agent("B", ["--local-addr", "ctnode"])
    deadline = time.monotonic() + 90
    said = ""
    while time.monotonic() < deadline and not said:
        for host in ("A", "B"):
            if "cannot be reached from this node" in h.log(host):
                said = h.log(host)
        time.sleep(0.2)
    assert said, "neither agent said so\n%s\n%s" % (h.log("A"), h.log("B"))
    line = next(l for l in said.splitlines() if "cannot be reached from this node" in l)
    assert "ctnode:" in line and "is a loopback address here" in line, line
    # Said before that node started its workers: before its "round N of rendezvous ... formed" line, after which
    # they start.
    formed = said.find("formed:")
    assert formed < 0 or said.find("cannot be reached from this node") < formed, said
    print("ok:", line)
    return 0


if __name__ == "__main__":
    name = sys.argv[1] if len(sys.argv) > 1 else ""
    case = globals().get(name)
    if not callable(case) or not name.startswith("test_"):
        print("usage: hostname_test.py test_CASE")
        sys.exit(2)
    try:
        sys.exit(with_hosts(case))
    except AssertionError as e:
        print("FAIL:", e)
        sys.exit(1)
