"""The job's page (agent/status/: the model, its HTML, the live updates) in a real browser: Debian's headless Chromium
driven over its DevTools pipe (tests/common/browser.py) opens the page of a running ctrun with torch 1.13 workers on
backend "ctrun" (workers/page_worker.py).

Usage: page_test.py CASE (ctest runs each as agent.status.page.CASE). Environment: CTRUN_BIN, CTRUN_TORCH_PYTHON,
CTRUN_PYTHON_DIR, CTRUN_SOURCE_DIR; PAGE_SCREENSHOT=PATH also writes the screenshot there (docs/job-page.png is made
so). Exit 77 (skip) without chromium, torch or (two_nodes) network namespaces.

  one_node   four ranks: the DOM holds four rank rows with their states; the page's URL is printed at start; without
             its script the server's table has the same rows; a rank made to hang shows as hung and its stack comes
             after a click; a killed rank makes a new attempt appear with its cause and the step it resumed from; the
             progress plot has points for each rank; a screenshot is written and is not blank; bad input (unknown
             paths 404, a ninth viewer 503, a viewer that never reads holds nobody) and the listener on 127.0.0.1 only.
  two_nodes  two namespaced hosts (static backend): group rank 0's agent's page shows both nodes' ranks.
"""
import glob
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

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "workers", "page_worker.py")
CTRUN = os.environ["CTRUN_BIN"]
PYTHON = os.environ["CTRUN_TORCH_PYTHON"]
SKIP = 77
sys.path.insert(0, os.path.join(os.environ["CTRUN_SOURCE_DIR"], "tests", "common"))
from browser import Browser, read_png  # noqa: E402
from netns import Lan  # noqa: E402
from processes import have_torch, kill_session  # noqa: E402


def skip_unless_ready(need_namespaces=False):
    why = Browser.why_not()
    if not why and not have_torch(PYTHON):
        why = f"no torch in {PYTHON}"
    if not why and need_namespaces:
        why = Lan.why_not()
    if why:
        print("skipped:", why)
        sys.exit(SKIP)


def wait_for(what, predicate, timeout, log=""):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}\n{log}")


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def http(port, path, accept=None, timeout=10):
    """(status, body) of GET http://127.0.0.1:port/path."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def status_port(log_dir):
    files = glob.glob(os.path.join(log_dir, "*", "status_port"))
    text = read(files[0]).strip() if files else ""
    return int(text) if text.isdigit() else None


def rows_js(selector, fields):
    """A JS expression: every `selector` element as an object of `fields` (name -> JS expression on `e`)."""
    body = ", ".join(f"{k}: {v}" for k, v in fields.items())
    return f"[...document.querySelectorAll({json.dumps(selector)})].map(e => ({{{body}}}))"


RANK_ROWS = rows_js("tr.rank", {"rank": "Number(e.dataset.rank)", "state": "e.querySelector('td.state').textContent",
                                "node": "e.children[1].textContent",
                                "points": "Number((e.querySelector('svg.spark') || {dataset: {}}).dataset.points || 0)"})
ATTEMPT_ROWS = rows_js("tr.attempt", {"attempt": "Number(e.dataset.attempt)",
                                      "outcome": "e.querySelector('td.outcome').textContent",
                                      "cause": "e.querySelector('td.cause').textContent",
                                      "resume": "e.querySelector('td.resume').textContent"})
STATES = {"in op", "between ops", "starting", "running", "hung"}


def check_pixels(png, path):
    """The screenshot is a real page: its size, many colours, text (dark pixels) and colour (the state marks)."""
    with open(path, "wb") as f:
        f.write(png)
    width, height, pixel = read_png(png)
    assert width == 1400 and height >= 900, (width, height)
    colours, dark, coloured, total = set(), 0, 0, 0
    for y in range(0, height, 2):
        for x in range(0, width, 2):
            r, g, b = pixel(x, y)
            total += 1
            colours.add((r >> 3, g >> 3, b >> 3))
            dark += max(r, g, b) < 90
            coloured += max(r, g, b) - min(r, g, b) > 60
    assert len(colours) >= 32, f"{len(colours)} colours: a blank page?"
    assert dark / total > 0.01, f"only {dark / total:.2%} dark pixels: no text?"
    assert coloured / total > 0.002, f"only {coloured / total:.2%} coloured pixels"
    print(f"screenshot {path}: {width}x{height}, {len(colours)} colours, {dark / total:.1%} text, "
          f"{coloured / total:.1%} colour")


def bad_input(port, agent_pid):
    """Unknown paths 404; the listener is bound to 127.0.0.1 only; a viewer that never reads does not hold the page
    (requests still answered at once, the viewer dropped); past the viewers' bound the next one gets a 503."""
    for path in ("/nope", "/status.json/x", "/favicon.ico", "/logs?rank=99"):
        code, _ = http(port, path)
        assert code == 404, f"{path}: {code}"
    listening = [line.split() for line in read("/proc/net/tcp").splitlines()[1:] + read("/proc/net/tcp6").splitlines()[1:]]
    ours = [fields[1] for fields in listening if fields[3] == "0A" and int(fields[1].split(":")[1], 16) == port]
    assert ours == ["0100007F:%04X" % port], f"the page listens on {ours}, not 127.0.0.1 only"

    def viewer(rcvbuf=0):
        s = socket.socket()
        if rcvbuf:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        s.settimeout(10)
        s.connect(("127.0.0.1", port))
        s.sendall(b"GET /events HTTP/1.1\r\nHost: x\r\n\r\n")
        return s

    stalled = viewer(rcvbuf=2048)  # never reads
    t0 = time.monotonic()
    code, _ = http(port, "/status.json")
    assert code == 200 and time.monotonic() - t0 < 5, "a stalled viewer held the page"
    viewers = []
    try:
        # The browser's own viewer and the stalled one are two of the eight; six more fit, the next is refused.
        for _ in range(6):
            v = viewer()
            assert v.recv(64).startswith(b"HTTP/1.1 200"), "a viewer within the bound was refused"
            viewers.append(v)
        refused = viewer()
        head = refused.recv(4096)
        refused.close()
        assert head.startswith(b"HTTP/1.1 503") and b"viewers" in head, head
    finally:
        for v in viewers:
            v.close()
        stalled.close()
    assert os.path.exists(f"/proc/{agent_pid}"), "the agent died of its viewers"
    print("ok: 404s, 127.0.0.1 only, a stalled viewer held nobody, the ninth viewer got a 503")


def test_one_node():
    skip_unless_ready()
    out = tempfile.mkdtemp(prefix="ctrun-page-")
    logs = os.path.join(out, "logs")
    err_path = os.path.join(out, "ctrun.err")
    env = dict(os.environ, PYTHON_EXEC=PYTHON, LOGLEVEL="INFO", HANG_RANK="2", HANG_AFTER="12", PACE_S="0.08",
               SLOW_RANK="3")
    cmd = [CTRUN, "--standalone", "--nproc-per-node", "4", "--max-restarts", "2", "--tee", "3", "--log-dir", logs,
           "--event-log", os.path.join(out, "events.jsonl"), "--hang-report-after", "2", WORKER, out]
    agent = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(err_path, "w"), env=env,
                             start_new_session=True)
    browser = None
    try:
        port = wait_for("the status port", lambda: status_port(logs), 90, read(err_path))
        assert f"the job's page: http://127.0.0.1:{port}/" in read(err_path), read(err_path)
        browser = Browser(os.path.join(out, "chromium"))
        browser.open(f"http://127.0.0.1:{port}/")
        # Four rank rows with their states, live.
        rows = wait_for("four rank rows with states", lambda: (lambda r: r if len(r) == 4 and all(
            x["state"] in STATES for x in r) else None)(browser.eval(RANK_ROWS)), 90, read(err_path))
        assert [r["rank"] for r in rows] == [0, 1, 2, 3], rows
        wait_for("the page to be live", lambda: browser.eval("document.querySelector('#live').textContent") == "live",
                 30)
        # Without its script: the agent's own table has the same rows (what a browser without script shows).
        code, html = http(port, "/", accept="text/html")
        assert code == 200 and len(re.findall(r'<tr class="rank st-[a-z_]+" data-rank="\d"', html)) == 4, html[:3000]
        code, text = http(port, "/")  # curl and `ctrun --status`: the text table, as before
        assert code == 200 and text.startswith("rank  host"), text[:500]
        # Progress: the plot has points for each rank.
        wait_for("progress points for every rank", lambda: all(
            r["points"] >= 3 for r in browser.eval(RANK_ROWS)), 60)
        assert browser.eval("document.querySelector('#heat').width") >= 3
        assert browser.eval("document.querySelectorAll('#throughput polyline').length") == 1
        # The hang: rank 2 stands out, and its stack comes after a click on it.
        wait_for("rank 2 hung", lambda: any(r["rank"] == 2 and r["state"] == "hung" for r in browser.eval(RANK_ROWS)),
                 90, read(err_path))
        assert browser.eval("document.querySelector('tr.rank[data-rank=\"2\"]').classList.contains('st-hung')")
        browser.eval("document.querySelector('tr.rank[data-rank=\"2\"] .stack').click()")
        stack = wait_for("rank 2's stack", lambda: (lambda t: t if "page_worker.py" in t else None)(
            browser.eval("document.querySelector('#stack-text').textContent")), 30)
        sleeping = next(i for i, line in enumerate(read(WORKER).splitlines(), 1) if "# the sleeping line" in line)
        assert f'page_worker.py", line {sleeping}' in stack, stack
        assert browser.eval("document.querySelector('#stack-title').textContent") == "stack of rank 2"
        # Logs: rank 2's tail, filtered to it.
        browser.eval("(s => { s.value = '2'; s.dispatchEvent(new Event('change')); })(document.querySelector('#log-rank'))")
        wait_for("rank 2's log tail", lambda: "rank 2 saved step" in browser.eval(
            "document.querySelector('#log').textContent"), 30)
        assert "rank 1 saved" not in browser.eval("document.querySelector('#log').textContent")
        open(os.path.join(out, "release-hang"), "w").close()
        bad_input(port, agent.pid)
        # A killed rank: a new attempt, with its cause and the step it resumed from.
        wait_for("rank 1 past the hang", lambda: int(read(os.path.join(out, "step-0-1")) or 0) >= 14, 60)
        os.kill(int(read(os.path.join(out, "pid-0-1"))), signal.SIGKILL)
        attempts = wait_for("a second attempt on the page", lambda: (lambda a: a if len(a) == 2 and a[1]["outcome"] ==
                            "running" and a[1]["resume"].startswith("step") else None)(browser.eval(ATTEMPT_ROWS)), 90,
                            read(err_path))
        held = [json.loads(line) for line in read(os.path.join(out, "events.jsonl")).splitlines()]
        resume = [e["resume_step"] for e in held if e["event"] == "checkpoint_held"][-1]
        assert attempts[0]["outcome"] == "restarted", attempts
        assert "rank 1 (local rank 1 on" in attempts[0]["cause"] and "SIGKILL" in attempts[0]["cause"], attempts
        assert attempts[1]["resume"] == f"step {resume}" and resume >= 13, (attempts, resume)  # rank 1 saved 14
        # The screenshot, once the new attempt has some progress.
        wait_for("progress in the new attempt", lambda: int(read(os.path.join(out, f"step-1-0")) or 0) >= resume + 20, 60)
        time.sleep(2)
        png = browser.screenshot()
        check_pixels(png, os.path.join(out, "page.png"))
        if os.environ.get("PAGE_SCREENSHOT"):
            shutil.copyfile(os.path.join(out, "page.png"), os.environ["PAGE_SCREENSHOT"])
        # The end: the page says the job succeeded (pushed as the agent ends).
        open(os.path.join(out, "finish"), "w").close()
        assert agent.wait(timeout=90) == 0, read(err_path)[-5000:]
        wait_for("the page to say the job succeeded", lambda: browser.eval(
            "document.querySelector('#summary').textContent").startswith("succeeded"), 15)
        print("ok: four rows, the hang with its stack, the new attempt", attempts[1], "and the end")
    finally:
        if browser:
            browser.close()
        kill_session(agent)
        if not os.environ.get("KEEP_DIR"):
            shutil.rmtree(out, ignore_errors=True)


def test_two_nodes():
    skip_unless_ready(need_namespaces=True)
    out = tempfile.mkdtemp(prefix="ctrun-page2-")
    lan = Lan("ctpg")
    agents, browser = {}, None
    try:
        hosts = {tag: lan.add_host(tag.lower()) for tag in ("A", "B")}
        master = hosts["A"][1]
        for tag in ("A", "B"):
            ns, addr = hosts[tag]
            cmd = ["ip", "netns", "exec", ns, CTRUN, "--nnodes", "2", "--node-rank", "AB".index(tag).__str__(),
                   "--master-addr", master, "--master-port", "29400", "--local-addr", addr, "--nproc-per-node", "2",
                   "--log-dir", os.path.join(out, "logs" + tag), WORKER, out]
            env = dict(os.environ, PYTHON_EXEC=PYTHON, PACE_S="0.1")
            agents[tag] = subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                                           stderr=open(os.path.join(out, f"agent.{tag}.log"), "w"), env=env,
                                           start_new_session=True)
        logs = lambda: "\n".join(f"--- {t}\n{read(os.path.join(out, f'agent.{t}.log'))[-4000:]}" for t in agents)  # noqa
        port = wait_for("node A's status port", lambda: status_port(os.path.join(out, "logsA")), 90, logs())
        browser = Browser(os.path.join(out, "chromium"), netns=hosts["A"][0])
        browser.open(f"http://127.0.0.1:{port}/")
        rows = wait_for("both nodes' ranks on node A's page", lambda: (lambda r: r if len(r) == 4 and all(
            x["state"] in STATES for x in r) else None)(browser.eval(RANK_ROWS)), 120, logs())
        assert {r["node"] for r in rows if r["rank"] < 2} == {"0"} and {r["node"] for r in rows if r["rank"] >= 2} == {
            "1"}, rows
        heads = browser.eval("[...document.querySelectorAll('tr.node-head')].map(e => e.dataset.node)")
        assert heads == ["0", "1"], heads
        open(os.path.join(out, "finish"), "w").close()
        for tag in ("A", "B"):
            assert agents[tag].wait(timeout=90) == 0, logs()
        print("ok: node A's page shows", rows)
    finally:
        if browser:
            browser.close()
        for p in agents.values():
            kill_session(p)
        lan.close()
        if not os.environ.get("KEEP_DIR"):
            shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    {"one_node": test_one_node, "two_nodes": test_two_nodes}[sys.argv[1]]()
