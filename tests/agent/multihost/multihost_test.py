"""Multi-host launches for real: `ctrun --hostfile` over ssh into network namespaces.

Each "host" is a network namespace with a veth pair to a bridge that lives in its own switch namespace; addresses
come from 198.18.N.0/24 (RFC 2544's benchmark test range) and exist only inside those namespaces, so nothing here
touches the machine's own network. Each host runs Debian's sshd with a test-only host key, client key and config
in a temporary directory; the launcher runs in one more namespace. Every process is killed by PID at the end and
every namespace deleted, also on failure.

Run one case: multihost_test.py CASE (ctest runs each as cluster.multihost.CASE). Exit 77 = skipped, with the reason.
"""
import glob
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

CTRUN = os.environ.get("CTRUN_BIN", "ctrun")
TORCH_PYTHON = os.environ.get("CTRUN_TORCH_PYTHON", "/usr/bin/python3")
JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workers", "mh_job.py")
SKIP = 77
SSHD = "/usr/sbin/sshd"

# tests/common/processes.py: alive, have_torch, die_with_parent (found from here wherever this file lives).
_up = os.path.dirname(os.path.abspath(__file__))
while not os.path.isfile(os.path.join(_up, "tests", "common", "processes.py")) and _up != os.path.dirname(_up):
    _up = os.path.dirname(_up)
sys.path.insert(0, os.path.join(_up, "tests", "common"))
from processes import alive, die_with_parent, have_torch  # noqa: E402


def remove_stale_namespaces():
    """Namespaces of an earlier run of this test that was killed before its cleanup (its pid is gone)."""
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    for line in r.stdout.splitlines():
        m = re.match(r"^(ctmh(\d+)(sw|h\d+|l))\b", line)
        if not m or os.path.exists(f"/proc/{m.group(2)}"):
            continue
        pids = subprocess.run(["ip", "netns", "pids", m.group(1)], capture_output=True, text=True).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass
        subprocess.run(["ip", "netns", "del", m.group(1)], capture_output=True)


def run(*cmd, check=True, timeout=30):
    return subprocess.run(cmd, capture_output=True, text=True, check=check, timeout=timeout)


def why_not():
    """The reason this machine cannot host the test, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in (SSHD, shutil.which("ssh"), shutil.which("ssh-keygen"), shutil.which("ip")):
        if not tool or not os.path.exists(tool):
            return "missing openssh-server/openssh-client/iproute2"
    name = f"ctprobe{os.getpid()}"
    r = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if r.returncode != 0:
        return "cannot create a network namespace: " + r.stderr.strip()
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return None


class Hosts:
    """N host namespaces + a launcher namespace on one bridge, each host with its own sshd."""

    def __init__(self, n):
        self.tag = f"{os.getpid()}"
        self.net = f"198.18.{random.randint(1, 250)}"
        self.dir = tempfile.mkdtemp(prefix="ctrun-mh-")
        self.out = os.path.join(self.dir, "out")
        os.mkdir(self.out)
        self.namespaces = []
        self.sshd = []
        self.procs = []
        self.hosts = []
        remove_stale_namespaces()
        try:
            self.build(n)
        except BaseException:
            self.close()  # unittest does not call tearDown when setUp fails
            raise

    def build(self, n):
        self.switch = self.add_ns("sw")
        run("ip", "netns", "exec", self.switch, "ip", "link", "add", "br0", "type", "bridge")
        run("ip", "netns", "exec", self.switch, "ip", "link", "set", "br0", "up")
        self.hosts = []
        for i in range(1, n + 1):
            ns = self.add_ns(f"h{i}")
            self.plug(ns, i)
            self.hosts.append((ns, f"{self.net}.{i}"))
        self.launcher_ns = self.add_ns("l")
        self.plug(self.launcher_ns, 200)
        self.keys()
        for i, (ns, addr) in enumerate(self.hosts):
            self.start_sshd(i, ns, addr)

    def add_ns(self, suffix):
        name = f"ctmh{self.tag}{suffix}"
        run("ip", "netns", "add", name)
        self.namespaces.append(name)
        run("ip", "netns", "exec", name, "ip", "link", "set", "lo", "up")
        return name

    def plug(self, ns, index):
        outer, inner = f"v{self.tag}x{index}", f"v{self.tag}y{index}"
        # Created inside the switch namespace, so the machine's own namespace never sees them.
        run("ip", "netns", "exec", self.switch, "ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
        run("ip", "netns", "exec", self.switch, "ip", "link", "set", inner, "netns", ns)
        run("ip", "netns", "exec", self.switch, "ip", "link", "set", outer, "master", "br0", "up")
        run("ip", "netns", "exec", ns, "ip", "link", "set", inner, "name", "eth0")
        run("ip", "netns", "exec", ns, "ip", "addr", "add", f"{self.net}.{index}/24", "dev", "eth0")
        run("ip", "netns", "exec", ns, "ip", "link", "set", "eth0", "up")

    def keys(self):
        self.key = os.path.join(self.dir, "id_ed25519")
        run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", self.key)
        self.hostkey = os.path.join(self.dir, "host_ed25519")
        run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", self.hostkey)
        shutil.copy(self.key + ".pub", os.path.join(self.dir, "authorized_keys"))
        # sshd's privilege separation directory (Debian creates it at boot). Made when missing and never removed:
        # another copy of the suite may be starting its own sshd right then.
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)

    def start_sshd(self, i, ns, addr):
        cfg = os.path.join(self.dir, f"sshd_{i}.conf")
        with open(cfg, "w") as f:
            f.write(f"ListenAddress {addr}\nPort 22\nHostKey {self.hostkey}\n"
                    f"AuthorizedKeysFile {self.dir}/authorized_keys\nPidFile {self.dir}/sshd_{i}.pid\n"
                    "PermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
                    "UsePAM no\nStrictModes no\nPrintMotd no\nLogLevel ERROR\n")
        log = open(os.path.join(self.dir, f"sshd_{i}.log"), "w")
        p = subprocess.Popen(["ip", "netns", "exec", ns, SSHD, "-D", "-e", "-f", cfg], stdout=log,
                             stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
        self.sshd.append(p)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            r = subprocess.run(["ip", "netns", "exec", ns, "ss", "-ltnH", f"src {addr}:22"], capture_output=True,
                               text=True)
            if r.stdout.strip():
                return
            if p.poll() is not None:
                break
            time.sleep(0.1)
        raise RuntimeError(f"sshd in {ns} did not start: " + open(log.name).read())

    def ssh_command(self, connect_timeout=5):
        return (f"ssh -F /dev/null -i {self.key} -o BatchMode=yes -o StrictHostKeyChecking=no "
                f"-o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o ConnectTimeout={connect_timeout}")

    def hostfile(self, extra=()):
        path = os.path.join(self.dir, "hostfile")
        with open(path, "w") as f:
            f.write("# test hosts\n\n")
            for _, addr in self.hosts:
                f.write(f"{addr} slots=2\n")
            for line in extra:
                f.write(line + "\n")
        return path

    def launch(self, flags, job_args=(), env=None):
        e = dict(os.environ, CTRUN_LOG_LEVEL="info")
        e.update(env or {})
        self.stdout = os.path.join(self.dir, "launcher.out")
        self.stderr = os.path.join(self.dir, "launcher.err")
        cmd = ["ip", "netns", "exec", self.launcher_ns, CTRUN, "--ssh", self.ssh_command(), *flags, "--export",
               f"OUT_DIR={self.out},PYTHON_EXEC={TORCH_PYTHON},GLOO_SOCKET_IFNAME=eth0", JOB, *job_args]
        p = subprocess.Popen(cmd, stdout=open(self.stdout, "w"), stderr=open(self.stderr, "w"), env=e,
                             cwd=self.dir, start_new_session=True, preexec_fn=die_with_parent)
        self.procs.append(p)
        return p

    def output(self):
        with open(self.stdout) as o, open(self.stderr) as e:
            return o.read(), e.read()

    def logs(self):
        o, e = self.output()
        return f"--- launcher stdout\n{o[-4000:]}\n--- launcher stderr\n{e[-6000:]}"

    def ns_pids(self, ns):
        r = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
        return {int(p) for p in r.stdout.split()}

    def leftovers(self):
        """Processes in any namespace other than the sshd listeners."""
        keep = set()
        for i in range(len(self.hosts)):
            try:
                keep.add(int(open(os.path.join(self.dir, f"sshd_{i}.pid")).read()))
            except (OSError, ValueError):
                pass
        keep |= {p.pid for p in self.sshd}
        out = {}
        for ns in self.namespaces:
            pids = [p for p in self.ns_pids(ns) if p not in keep and alive(p)]
            if pids:
                out[ns] = {p: open(f"/proc/{p}/cmdline").read().replace("\0", " ")[:120] for p in pids
                           if os.path.exists(f"/proc/{p}/cmdline")}
        return out

    def worker_pids(self):
        return [int(p.rsplit(".", 1)[1]) for p in glob.glob(os.path.join(self.out, "pid.*"))]

    def results(self):
        out = {}
        for path in glob.glob(os.path.join(self.out, "result.*.json")):
            with open(path) as f:
                r = json.load(f)
            out[int(r["RANK"])] = r
        return out

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    pass
        for ns in self.namespaces:  # everything still inside a namespace, sshd included, by PID
            for pid in self.ns_pids(ns):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        for p in self.procs + self.sshd:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        for pid in self.worker_pids():
            if alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        for ns in reversed(self.namespaces):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        if not os.environ.get("KEEP_DIR"):
            shutil.rmtree(self.dir, ignore_errors=True)


class MultiHost(unittest.TestCase):
    def setUp(self):
        self.h = Hosts(3)

    def tearDown(self):
        self.h.close()

    def wait(self, p, timeout):
        try:
            return p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.fail(f"the launcher did not finish within {timeout} s\n{self.h.logs()}")

    def assert_nothing_left(self, within=10.0):
        deadline = time.monotonic() + within
        left = self.h.leftovers()
        while left and time.monotonic() < deadline:
            time.sleep(0.2)
            left = self.h.leftovers()
        self.assertEqual(left, {}, "processes left in the namespaces\n" + self.h.logs())
        self.assertEqual([p for p in self.h.worker_pids() if alive(p)], [])

    def test_three_hosts_torch(self):
        with open(os.path.join(self.h.dir, ".ctrun_env"), "w") as f:  # read from the launcher's directory
            f.write("# exported to every host\nFROM_ENV_FILE=yes it is\n")
        p = self.h.launch(["--hostfile", self.h.hostfile(), "--export", "EXPORTED=1"])
        self.assertEqual(self.wait(p, 150), 0, self.h.logs())
        res = self.h.results()
        self.assertEqual(sorted(res), list(range(6)), self.h.logs())
        by_ns = {}
        for rank, r in res.items():
            self.assertEqual((r["WORLD_SIZE"], r["LOCAL_WORLD_SIZE"], r["GROUP_WORLD_SIZE"]), ("6", "2", "3"))
            self.assertEqual(r["sum"], 21.0)  # 1 + ... + 6 over three namespaces
            self.assertEqual(r["torch_rank"], rank)
            self.assertEqual(rank, 2 * int(r["GROUP_RANK"]) + int(r["LOCAL_RANK"]))
            self.assertEqual((r["FROM_ENV_FILE"], r["EXPORTED"]), ("yes it is", "1"))
            by_ns.setdefault(r["netns"], set()).add(r["GROUP_RANK"])
        self.assertEqual(len(by_ns), 3, "two workers in each of the three host namespaces")
        self.assertTrue(all(len(g) == 1 for g in by_ns.values()))
        self.assertEqual(len({r["TORCHELASTIC_RUN_ID"] for r in res.values()}), 1)
        self.assertIn(res[0]["MASTER_ADDR"], [a for _, a in self.h.hosts])
        out, _ = self.h.output()
        for _, addr in self.h.hosts:  # each host's output comes back prefixed with its name
            self.assertRegex(out, rf"(?m)^{addr}: hello from rank \d of 6$")
        self.assert_nothing_left()

    def test_unreachable_host(self):
        dead = f"{self.h.net}.77"  # in the namespaces' subnet, owned by nobody
        p = self.h.launch(["--hostfile", self.h.hostfile([f"{dead} slots=2"]), "--shutdown-timeout", "3"], ["--no-torch"])
        start = time.monotonic()
        code = self.wait(p, 60)
        self.assertNotEqual(code, 0)
        self.assertLess(time.monotonic() - start, 45)
        _, err = self.h.output()
        self.assertIn(f"cannot reach host {dead}", err, self.h.logs())
        self.assert_nothing_left()

    def test_ctrl_c_stops_every_host(self):
        p = self.h.launch(["--hostfile", self.h.hostfile(), "--shutdown-timeout", "3"], ["--sleep"])
        deadline = time.monotonic() + 90
        while len(self.h.worker_pids()) < 6 and time.monotonic() < deadline and p.poll() is None:
            time.sleep(0.2)
        self.assertEqual(len(self.h.worker_pids()), 6, self.h.logs())
        os.killpg(p.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the launcher's foreground group
        start = time.monotonic()
        code = self.wait(p, 40)
        self.assertNotEqual(code, 0)
        self.assertLess(time.monotonic() - start, 30)
        self.assert_nothing_left()

    def test_launcher_killed_stops_every_host(self):
        p = self.h.launch(["--hostfile", self.h.hostfile(), "--shutdown-timeout", "3"], ["--sleep"])
        deadline = time.monotonic() + 90
        while len(self.h.worker_pids()) < 6 and time.monotonic() < deadline and p.poll() is None:
            time.sleep(0.2)
        self.assertEqual(len(self.h.worker_pids()), 6, self.h.logs())
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=10)
        self.assert_nothing_left(within=20)

    def test_secret_over_ssh(self):
        """The launcher makes the job's secret and hands it to every host over ssh's stdin: every agent joins the
        round (each proved it to the rendezvous store on the first host), the store turns away a client without it,
        and no process's command line (all of /proc/*/cmdline: ssh, sshd's shells, the agents, the workers) and no
        worker's environment holds it."""
        p = self.h.launch(["--hostfile", self.h.hostfile(), "--shutdown-timeout", "3"], ["--sleep"])
        deadline = time.monotonic() + 90
        while len(self.h.worker_pids()) < 6 and time.monotonic() < deadline and p.poll() is None:
            time.sleep(0.2)
        self.assertEqual(len(self.h.worker_pids()), 6, self.h.logs())
        # The secret is 64 hex digits; no command line may hold such a word (nor a --secret-file other than "-").
        hexword = re.compile(rb"(?<![0-9a-f])[0-9a-f]{64}(?![0-9a-f])")
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmdline = f.read()
            except OSError:
                continue
            self.assertIsNone(hexword.search(cmdline), f"pid {pid}: {cmdline!r}")
            # ssh's own command line holds the remote command as one quoted word.
            for m in re.finditer(rb"--secret-file'?[\0 =]'?([^'\0 ]*)", cmdline):
                self.assertEqual(m.group(1), b"-", f"pid {pid}: {cmdline!r}")
        for pid in self.h.worker_pids():
            with open(f"/proc/{pid}/environ", "rb") as f:
                self.assertNotIn(b"CTRUN_SECRET", f.read())
        first = self.h.hosts[0][1]
        r = run("ip", "netns", "exec", self.h.launcher_ns, TORCH_PYTHON,
                os.path.join(_up, "tests", "common", "stranger.py"), "probe", first, "29400")
        self.assertTrue(json.loads(r.stdout)["secret_required"], r.stdout)
        os.killpg(p.pid, signal.SIGINT)
        self.assertNotEqual(self.wait(p, 40), 0)
        self.assert_nothing_left()

    def test_failure_on_one_host_worst_exit_code(self):
        p = self.h.launch(["--hostfile", self.h.hostfile(), "--propagate-exit-code", "--shutdown-timeout", "3"],
                          ["--exit-code", "1:7", "--no-torch"])
        code = self.wait(p, 90)
        self.assertEqual(code, 7, self.h.logs())
        _, err = self.h.output()
        self.assertIn("failed with exit code 7", err, self.h.logs())
        self.assert_nothing_left()


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    reason = why_not()
    if reason:
        print(f"SKIP: {reason}")
        return SKIP
    if sys.argv[1] == "test_three_hosts_torch" and not have_torch(TORCH_PYTHON):
        print(f"SKIP: PyTorch with torch.distributed is not installed for {TORCH_PYTHON}")
        return SKIP
    result = unittest.TextTestRunner(verbosity=2).run(
        unittest.defaultTestLoader.loadTestsFromName(f"MultiHost.{sys.argv[1]}", sys.modules[__name__]))
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
