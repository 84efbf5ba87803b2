"""--metrics-port end to end (docs/cli.md "Metrics"): ctstore's and a running ctrun's /metrics pass `promtool check
metrics`, their counters move with real torch 1.13 traffic (a torch TCPStore client against ctstore; a torch job on
backend "ctrun" under ctrun, with a restart and a hang), a real Prometheus server scrapes both, and the endpoint's
bounds hold (an idle connection is cut, an oversized request refused). Every process started here is stopped by its
PID; every wait is bounded.

Run one case: metrics_test.py CASE (ctest runs each as integration.metrics.CASE). Exit 77 = skipped.
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

CTRUN = os.environ.get("CTRUN_BIN", "ctrun")
CTSTORE = os.environ.get("CTSTORE_BIN", "ctstore")
TORCH_PYTHON = os.environ.get("CTRUN_TORCH_PYTHON", "/usr/bin/python3")
TORCH_MODULE_DIR = os.environ.get("CTRUN_TORCH_MODULE_DIR", "")
WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workers", "metrics_worker.py")
SKIP = 77


class Skip(Exception):
    pass


def need(program):
    if shutil.which(program) is None:
        raise Skip(f"{program} not found (Debian's prometheus package; scripts/install-deps.sh installs it)")


def need_torch(ctrun_backend=False):
    code = "import torch.distributed as d; assert d.is_available()"
    env = dict(os.environ)
    if ctrun_backend:
        code += "; import ctrun_torch"
        env["PYTHONPATH"] = TORCH_MODULE_DIR
    try:
        ok = subprocess.run([TORCH_PYTHON, "-c", code], capture_output=True, timeout=120, env=env).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    if not ok:
        raise Skip("torch 1.13 (python3-torch)" + (" and ctrun_torch" if ctrun_backend else "") + " not importable")


def scrape(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def value(text, name, **labels):
    """The sample `name{labels}` of an exposition (labels matched exactly), or None."""
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)", line)
        if not m or m.group(1) != name:
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        if got == {k: str(v) for k, v in labels.items()}:
            return float(m.group(3))
    return None


def promtool_check(text):
    r = subprocess.run(["promtool", "check", "metrics"], input=text.encode(), capture_output=True, timeout=60)
    assert r.returncode == 0, f"promtool check metrics failed:\n{r.stdout.decode()}{r.stderr.decode()}\n{text}"


def wait_for(what, fn, timeout):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what} (last: {last!r})")


class Procs:
    """Processes of one test, stopped by PID at the end (SIGTERM, then SIGKILL)."""

    def __init__(self):
        self.procs = []
        self.tmp = tempfile.mkdtemp(prefix="ctrun_metrics_")

    def start(self, argv, **kw):
        p = subprocess.Popen(argv, start_new_session=True, **kw)
        self.procs.append(p)
        return p

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)
        shutil.rmtree(self.tmp, ignore_errors=True)


def start_ctstore(procs, *extra):
    """ctstore on 127.0.0.1, store and metrics on free ports: (process, store port, metrics url)."""
    p = procs.start([CTSTORE, "--host", "127.0.0.1", "--port", "0", "--metrics-port", "0", *extra],
                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    lines = [p.stdout.readline().decode() for _ in range(2)]  # bounded: ctstore prints both at once or exits
    m1 = re.match(r"ctstore listening on 127\.0\.0\.1:(\d+)", lines[0])
    m2 = re.match(r"ctstore metrics at (http://127\.0\.0\.1:\d+/metrics)", lines[1])
    assert m1 and m2, f"unexpected ctstore output: {lines!r}"
    return p, int(m1.group(1)), m2.group(1)


TORCH_CLIENT = r"""
import datetime, sys, torch.distributed as dist
s = dist.TCPStore("127.0.0.1", int(sys.argv[1]), 1, False, datetime.timedelta(seconds=30))
if sys.argv[2] == "traffic":
    s.set("k1", "v" * 1000)
    assert s.get("k1") == b"v" * 1000
    assert s.add("n", 5) == 5
    s.wait(["k1"])
elif sys.argv[2] == "wait":
    s.wait(["later"])
elif sys.argv[2] == "set_later":
    s.set("later", "x")
"""


def torch_client(procs, port, what):
    return procs.start([TORCH_PYTHON, "-c", TORCH_CLIENT, str(port), what])


def event_metrics_url(event_log, timeout):
    def find():
        if not os.path.exists(event_log):
            return None
        with open(event_log) as f:
            for line in f:
                e = json.loads(line)
                if e.get("event") == "metrics":
                    return e["url"]
        return None

    return wait_for("the metrics event in ctrun's event log", find, timeout)


def start_ctrun_job(procs, stop_file):
    """ctrun --standalone, 2 torch workers on backend "ctrun" (metrics_worker.py), one restart, then a hang until
    stop_file exists. Returns (process, metrics url)."""
    event_log = os.path.join(procs.tmp, "events.jsonl")
    env = dict(os.environ, STOP_FILE=stop_file, STEPS="5", PYTHON_EXEC=TORCH_PYTHON)
    p = procs.start([CTRUN, "--standalone", "--nproc-per-node=2", "--max-restarts=1", "--metrics-port=0",
                     "--hang-report-after=1", f"--event-log={event_log}", WORKER], env=env,
                    stdout=subprocess.DEVNULL, stderr=open(os.path.join(procs.tmp, "ctrun.log"), "wb"))
    return p, event_metrics_url(event_log, 60)


def test_ctstore_metrics():
    need("promtool")
    need_torch()
    procs = Procs()
    try:
        _, port, url = start_ctstore(procs)
        before = scrape(url)
        promtool_check(before)
        assert value(before, "ctstore_connections_accepted_total") == 0
        assert value(before, "ctstore_refused_total", reason="bad_request") == 0

        assert torch_client(procs, port, "traffic").wait(timeout=60) == 0
        after = scrape(url)
        promtool_check(after)
        for command in ("SET", "GET", "ADD", "WAIT"):
            assert (value(after, "ctstore_requests_total", command=command) or 0) >= 1, (command, after)
        assert value(after, "ctstore_received_bytes_total") >= 1000, after  # the SET's value
        assert value(after, "ctstore_sent_bytes_total") >= 1000, after      # the GET's reply
        assert value(after, "ctstore_connections_accepted_total") >= 1, after
        assert value(after, "ctstore_keys") >= 2, after  # k1, n (and torch's own init key)
        assert value(after, "ctstore_key_value_bytes") >= 1000, after
        assert value(after, "ctstore_held_bytes") >= 1000, after

        # A torch client blocked in WAIT is a waiter (and an open connection) until the key appears.
        waiter = torch_client(procs, port, "wait")
        wait_for("ctstore_waiters == 1", lambda: value(scrape(url), "ctstore_waiters") == 1, 60)
        assert value(scrape(url), "ctstore_connections") >= 1
        assert torch_client(procs, port, "set_later").wait(timeout=60) == 0
        assert waiter.wait(timeout=60) == 0
        wait_for("ctstore_waiters == 0", lambda: value(scrape(url), "ctstore_waiters") == 0, 30)

        # Bytes that are no TCPStore request: refused, by reason.
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"\x00GARBAGE-THAT-IS-NO-REQUEST" * 4)
            s.recv(100)  # closed by the server
        wait_for("a bad_request refusal", lambda: value(scrape(url), "ctstore_refused_total", reason="bad_request") == 1,
                 30)
        promtool_check(scrape(url))
    finally:
        procs.close()


def test_ctrun_metrics():
    need("promtool")
    need_torch(ctrun_backend=True)
    procs = Procs()
    try:
        stop_file = os.path.join(procs.tmp, "stop")
        p, url = start_ctrun_job(procs, stop_file)
        assert url.startswith("http://127.0.0.1:"), url  # --standalone: where the workers' store binds
        # Attempt 1 hangs in the last all_reduce: rank 1 has not entered it (culprit), rank 0 waits inside it.
        text = wait_for("rank 1 named the hang's culprit",
                        lambda: (lambda t: t if value(t, "ctrun_rank_hang_state", rank=1, local_rank=1) == 2 else None)(
                            scrape(url)), 120)
        promtool_check(text)
        assert value(text, "ctrun_rank_hang_state", rank=0, local_rank=0) == 1, text
        assert value(text, "ctrun_restarts_total") == 1, text
        assert value(text, "ctrun_rendezvous_rounds_total") == 2, text
        assert value(text, "ctrun_rendezvous_seconds_total") > 0, text
        assert value(text, "ctrun_agent_state", state="running") == 1, text
        assert value(text, "ctrun_workers", state="running") == 2, text
        assert value(text, "ctrun_worker_exits_total", outcome="failed") == 1, text
        assert value(text, "ctrun_worker_exits_total", outcome="stopped") == 1, text
        # Rank 0 issued STEPS + 1 collectives and is inside the last; rank 1 issued STEPS. Only local ranks appear.
        assert value(text, "ctrun_rank_collective_seq", rank=0, local_rank=0, group=0) == 6, text
        assert value(text, "ctrun_rank_collective_seq", rank=1, local_rank=1, group=0) == 5, text
        assert value(text, "ctrun_rank_in_collective", rank=0, local_rank=0, group=0) == 1, text
        assert value(text, "ctrun_rank_lag_seconds", rank=0, local_rank=0) is not None, text
        assert "rank=\"2\"" not in text
        open(stop_file, "w").close()
        assert p.wait(timeout=120) == 0
    finally:
        procs.close()


def prometheus_port(log_path, timeout):
    def find():
        with open(log_path, errors="replace") as f:
            m = re.search(r'msg="Listening on" address=127\.0\.0\.1:(\d+)', f.read())
        return int(m.group(1)) if m else None

    return wait_for("Prometheus' listening line", find, timeout)


def prom_api(port, path):
    """The API's JSON answer, or None while Prometheus is still starting: it logs "Listening on" before its storage
    is ready and answers 503 until then (seen under load)."""
    try:
        return json.loads(scrape(f"http://127.0.0.1:{port}{path}", timeout=10))
    except urllib.error.HTTPError as e:
        if e.code == 503:
            return None
        raise


def test_prometheus_scrapes_both():
    need("promtool")
    need("prometheus")
    need_torch(ctrun_backend=True)
    procs = Procs()
    try:
        _, store_port, store_url = start_ctstore(procs)
        assert torch_client(procs, store_port, "traffic").wait(timeout=60) == 0
        stop_file = os.path.join(procs.tmp, "stop")
        ctrun, ctrun_url = start_ctrun_job(procs, stop_file)
        targets = [u.split("/")[2] for u in (store_url, ctrun_url)]
        config = os.path.join(procs.tmp, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n"
                    f"  - job_name: ctstore\n    static_configs:\n      - targets: ['{targets[0]}']\n"
                    f"  - job_name: ctrun\n    static_configs:\n      - targets: ['{targets[1]}']\n")
        log_path = os.path.join(procs.tmp, "prometheus.log")
        # Port 0: Prometheus binds a free port and logs it ("Listening on").
        procs.start(["prometheus", f"--config.file={config}", f"--storage.tsdb.path={procs.tmp}/data",
                     "--web.listen-address=127.0.0.1:0"], stdout=subprocess.DEVNULL, stderr=open(log_path, "wb"))
        port = prometheus_port(log_path, 60)

        def both_up():
            answer = prom_api(port, "/api/v1/targets")
            if answer is None:
                return None
            active = answer["data"]["activeTargets"]
            health = {t["labels"]["job"]: t["health"] for t in active}
            return health if health == {"ctstore": "up", "ctrun": "up"} else None

        wait_for("both targets up in Prometheus", both_up, 60)

        def series(query):
            answer = prom_api(port, "/api/v1/query?query=" + urllib.request.quote(query))
            return (answer["data"]["result"] or None) if answer else None

        res = wait_for("ctstore_requests_total{command=\"SET\"} in Prometheus",
                       lambda: series('ctstore_requests_total{command="SET",job="ctstore"}'), 60)
        assert float(res[0]["value"][1]) >= 1, res
        res = wait_for("ctrun_rendezvous_rounds_total in Prometheus",
                       lambda: series('ctrun_rendezvous_rounds_total{job="ctrun"} >= 1'), 60)
        open(stop_file, "w").close()
        assert ctrun.wait(timeout=120) == 0
    finally:
        procs.close()


def test_endpoint_bounds():
    procs = Procs()
    try:
        _, _, url = start_ctstore(procs, "--request-timeout", "1")
        host, port = url.split("/")[2].split(":")
        # An idle connection (no request) is cut after the request timeout.
        t0 = time.time()
        with socket.create_connection((host, int(port)), timeout=10) as s:
            assert s.recv(100) == b""
        took = time.time() - t0
        assert 0.5 <= took < 4, f"idle connection closed after {took:.2f} s (request timeout 1 s)"
        # A request head beyond the size limit is refused, not buffered.
        with socket.create_connection((host, int(port)), timeout=10) as s:
            try:
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200000 + b"\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError):
                pass
            try:
                reply = s.recv(100)
            except ConnectionResetError:
                reply = b""
        assert not reply.startswith(b"HTTP/1.1 200") and not reply.startswith(b"HTTP/1.0 200"), reply
        # Still serving.
        assert value(scrape(url), "ctstore_connections") == 0
    finally:
        procs.close()


if __name__ == "__main__":
    case = sys.argv[1]
    try:
        globals()[case]()
    except Skip as e:
        print(f"SKIP: {e}")
        sys.exit(SKIP)
    print(f"{case}: ok")
