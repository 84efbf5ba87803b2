"""Hosts for the Python tests (beside ports.py, found the same way): network namespaces the test creates, each with
its own loopback and one interface "eth0" on a bridge that lives in a namespace of its own (the switch), so neither
the bridge nor any veth is ever seen by the machine's own namespace, and no traffic can leave the test's hosts.
Everything is named after the test's pid; close() kills what still runs inside and deletes the namespaces, and a
new Lan first removes those of a test that was killed before its cleanup (its pid gone).

    why = Lan.why_not()              # None, or why this machine cannot make them (then skip, exit 77)
    lan = Lan("ctck")                # prefix: up to 5 letters naming the test's namespaces
    ns, addr = lan.add_host("a")     # run a program there: ["ip", "netns", "exec", ns, ...]
    ...
    lan.close()
"""
import os
import random
import re
import signal
import shutil
import subprocess


def _run(*cmd, timeout=30):
    return subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=timeout)


def namespace_pids(ns):
    r = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, timeout=30)
    return [int(p) for p in r.stdout.split()]


def _kill_inside(ns):
    for pid in namespace_pids(ns):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


class Lan:
    """Hosts on one bridge: add_host() makes a namespace with the next address of a /24."""

    @staticmethod
    def why_not():
        """The reason this machine cannot make network namespaces, or None."""
        if os.geteuid() != 0:
            return "network namespaces need root"
        if not shutil.which("ip"):
            return "no ip (iproute2)"
        name = f"ctprobe{os.getpid()}"
        r = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            return "cannot create a network namespace: " + r.stderr.strip()
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
        return None

    def __init__(self, prefix):
        assert re.fullmatch(r"[a-z]{1,5}", prefix), prefix
        self.prefix = prefix
        self.tag = str(os.getpid())
        # Only the test's own hosts see this network; the random part keeps logs of parallel runs apart.
        self.net = f"198.18.{random.randint(1, 250)}"
        self.namespaces = []
        self.count = 0
        self._remove_stale()
        try:
            self.switch = self._add_ns("sw")
            _run("ip", "netns", "exec", self.switch, "ip", "link", "add", "br0", "type", "bridge")
            _run("ip", "netns", "exec", self.switch, "ip", "link", "set", "br0", "up")
        except BaseException:
            self.close()
            raise

    def _remove_stale(self):
        r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30)
        for line in r.stdout.splitlines():
            m = re.match(rf"^({self.prefix}(\d+)[a-z]+\d*)\b", line)
            if not m or os.path.exists(f"/proc/{m.group(2)}"):
                continue
            _kill_inside(m.group(1))
            subprocess.run(["ip", "netns", "del", m.group(1)], capture_output=True, timeout=30)

    def _add_ns(self, suffix):
        name = f"{self.prefix}{self.tag}{suffix}"
        _run("ip", "netns", "add", name)
        self.namespaces.append(name)
        _run("ip", "netns", "exec", name, "ip", "link", "set", "lo", "up")
        return name

    def add_host(self, suffix):
        """A new namespace on the bridge: (its name, its address). `suffix`: lower-case letters."""
        assert re.fullmatch(r"[a-z]+", suffix) and suffix != "sw", suffix
        self.count += 1
        index = self.count
        ns = self._add_ns(suffix)
        outer, inner = f"v{self.tag}x{index}", f"v{self.tag}y{index}"
        # Made inside the switch namespace, so the machine's own namespace never sees them.
        _run("ip", "netns", "exec", self.switch, "ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
        _run("ip", "netns", "exec", self.switch, "ip", "link", "set", inner, "netns", ns)
        _run("ip", "netns", "exec", self.switch, "ip", "link", "set", outer, "master", "br0", "up")
        _run("ip", "netns", "exec", ns, "ip", "link", "set", inner, "name", "eth0")
        _run("ip", "netns", "exec", ns, "ip", "addr", "add", f"{self.net}.{index}/24", "dev", "eth0")
        _run("ip", "netns", "exec", ns, "ip", "link", "set", "eth0", "up")
        return ns, f"{self.net}.{index}"

    def close(self):
        """Kills by PID whatever still runs in the namespaces, then deletes them (the veths go with them)."""
        for ns in self.namespaces:
            _kill_inside(ns)
        for ns in reversed(self.namespaces):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
        self.namespaces = []
