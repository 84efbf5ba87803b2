"""A network drop is not a death (docs/rendezvous.md "Failure detection"): two namespaced hosts on a bridge
(tests/common/netns.py), the rendezvous store (a ctstore) on host A, one c10d agent per host. Mid-run, host B's link
is set down for 1 s and up again: the job goes on and completes with no new round (one rendezvous and one worker
start per agent in the event logs, restart count 0), and neither agent takes the other for dead. (A store restart
is not a death either: agent.StoreLoss.CtstoreRestartedEmptyIsNoDeathBothNodesMeetInANewRound.)

Run one case: network_drop_test.py CASE (ctest runs it as integration.network_drop_is_not_a_death). Exit 77 =
skipped. Every process started here is killed by PID, every namespace deleted by name, at the end.
"""
import json
import os
import subprocess
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from multinode_test import CTSTORE, SKIP, Cluster, c10d  # noqa: E402  (beside this script)

_up = HERE
while not os.path.isfile(os.path.join(_up, "tests", "common", "netns.py")) and _up != os.path.dirname(_up):
    _up = os.path.dirname(_up)
sys.path.insert(0, os.path.join(_up, "tests", "common"))
from netns import Lan  # noqa: E402

JOB_ARGS = ["--no-torch", "--hold-until", "release"]
DEATH_WORDS = ("closed its connection", "lost heartbeat", "dead:")


def events(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def start_ctstore(wrap, host):
    """A ctstore on host, a port of its choice; returns (Popen, its port)."""
    p = subprocess.Popen([*wrap, CTSTORE, "--host", host, "--port", "0"], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    line = p.stdout.readline()
    if "listening" not in line:
        p.kill()
        p.wait(10)
        raise AssertionError(f"ctstore did not start on {host}: {line!r}")
    return p, int(line.rsplit(":", 1)[-1])


def store_connections(ns, addr, port):
    """The local ends of the established TCP connections from namespace `ns` to addr:port."""
    out = subprocess.run(["ip", "netns", "exec", ns, "ss", "-Htn", "state", "established", "dst", f"{addr}:{port}"],
                         capture_output=True, text=True, check=True, timeout=30).stdout
    return sorted(line.split()[2] for line in out.splitlines() if line.strip())


class NetworkDrop(unittest.TestCase):
    def setUp(self):
        self.c = Cluster()
        self.lan = None

    def tearDown(self):
        self.c.close()
        if self.lan:
            self.lan.close()

    def event_log(self, tag):
        return os.path.join(self.c.dir, f"events.{tag}.jsonl")

    def kinds(self, tag, kind):
        return [e for e in events(self.event_log(tag)) if e["event"] == kind]

    def assert_nobody_declared_dead(self, tags):
        for tag in tags:
            log = self.c.log(tag)
            for words in DEATH_WORDS:
                self.assertNotIn(words, log, f"agent {tag} took a live member for dead\n{self.c.logs()}")

    def test_network_drop_is_not_a_death(self):
        why = Lan.why_not()
        if why:
            raise unittest.SkipTest(why)
        self.lan = Lan("ctnad")
        ns_a, addr_a = self.lan.add_host("a")
        ns_b, addr_b = self.lan.add_host("b")
        store, port = start_ctstore(["ip", "netns", "exec", ns_a], addr_a)
        self.c.others.append(store)
        # Heartbeats declare a member dead after 4 s of silence: a 1 s drop (plus TCP's retransmission after it)
        # must fit well inside, while a real death would still be noticed within the test.
        flags = c10d(f"{addr_a}:{port}", "drop", "2", "join_timeout=30,last_call_timeout=0.5,is_host=0,"
                                                     "keep_alive_interval=1,keep_alive_max_attempt=4")
        hosts = {"a": (ns_a, addr_a), "b": (ns_b, addr_b)}
        for tag, (ns, addr) in hosts.items():
            self.c.start(tag, addr, flags + ["--max-restarts", "0", "--event-log", self.event_log(tag)],
                         job_args=JOB_ARGS, wrap=["ip", "netns", "exec", ns])
        self.c.wait_for("a 2-node round", lambda: len(self.c.rounds("*.ws2.*")) == 2, 60)
        time.sleep(2.0)  # a few heartbeats and loss-watch slices into the round
        before = store_connections(ns_b, addr_a, port)
        # One connection per agent (heartbeats, loss watch and round share it: store/mux_store.hpp).
        self.assertEqual(len(before), 1, f"host B's agent should hold its one store connection: {before}")
        subprocess.run(["ip", "netns", "exec", ns_b, "ip", "link", "set", "eth0", "down"], check=True, timeout=30)
        down = time.monotonic()
        time.sleep(1.0)
        subprocess.run(["ip", "netns", "exec", ns_b, "ip", "link", "set", "eth0", "up"], check=True, timeout=30)
        print(f"host B's link was down {time.monotonic() - down:.2f} s", flush=True)
        time.sleep(6.0)  # longer than the heartbeat bound: a death, were one declared, would have ended the round
        # With no FIN and no RST the connections only stalled (TCP retransmits once the link is back): the same
        # ones carry on, none was closed and dialled again.
        self.assertEqual(store_connections(ns_b, addr_a, port), before, self.c.logs())
        open(os.path.join(self.c.dir, "release"), "w").close()
        for tag in hosts:
            self.assertEqual(self.c.wait(tag, 60), 0, self.c.logs())
        for tag in hosts:
            self.assertEqual(len(self.kinds(tag, "rendezvous")), 1, f"a new round on {tag}\n{self.c.logs()}")
            starts = self.kinds(tag, "worker_start")
            self.assertEqual([s["restart_count"] for s in starts], [0], f"workers restarted on {tag}\n{self.c.logs()}")
            self.assertEqual(self.kinds(tag, "membership_change"), [], self.c.logs())
        self.assertEqual(sorted(self.c.results()), ["a.0", "b.0"], self.c.logs())
        self.assert_nobody_declared_dead(hosts)


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    result = unittest.TextTestRunner(verbosity=2).run(unittest.defaultTestLoader.loadTestsFromName(
        f"NetworkDrop.{sys.argv[1]}", sys.modules[__name__]))
    if result.wasSuccessful() and result.skipped:
        print("SKIP:", result.skipped[0][1])
        return SKIP
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
