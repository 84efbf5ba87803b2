"""A real browser for the Python tests (beside netns.py, found the same way): Debian's headless Chromium driven over
its DevTools protocol on a pipe (--remote-debugging-pipe: fds 3 and 4, no port opened), so a test opens a page, waits
for its script, reads its DOM, clicks, and takes a screenshot; and a PNG reader to check the screenshot's pixels.

    why = Browser.why_not()              # None, or why this machine has no browser (then skip, exit 77)
    with Browser(tmpdir, netns=None) as b:
        b.open("http://127.0.0.1:PORT/")
        b.wait("document.querySelectorAll('tr.rank').length == 4", 30)
        rows = b.eval("[...document.querySelectorAll('tr.rank')].map(r => r.dataset.rank)")
        png = b.screenshot()                       # bytes
    width, height, pixel = read_png(png)           # pixel(x, y): (r, g, b)
"""
import base64
import json
import os
import select
import shutil
import subprocess
import time
import zlib

CANDIDATES = ("chromium", "chromium-browser", "google-chrome")


def chromium():
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


class Browser:
    @staticmethod
    def why_not():
        if not chromium():
            return "no chromium (scripts/install-deps.sh installs Debian's)"
        return None

    def __init__(self, profile_dir, netns=None, width=1400, height=1000):
        """Starts the browser (in network namespace `netns` when given: it sees that host's 127.0.0.1)."""
        os.makedirs(profile_dir, exist_ok=True)  # its log goes there before the browser makes the rest
        self._to_browser_r, self._to_browser_w = os.pipe()
        self._from_browser_r, self._from_browser_w = os.pipe()
        cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
               "--remote-debugging-pipe", "--no-first-run", "--no-default-browser-check", "--disable-extensions",
               "--disable-background-networking", "--disable-sync", "--mute-audio", "--hide-scrollbars",
               f"--user-data-dir={profile_dir}", f"--window-size={width},{height}", "about:blank"]
        if netns:
            cmd = ["ip", "netns", "exec", netns] + cmd
        r, w = self._to_browser_r, self._from_browser_w

        def fds():  # the browser reads commands from fd 3 and writes replies to fd 4
            a, b = os.dup(r), os.dup(w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self._log = open(os.path.join(profile_dir, "chromium.log"), "w")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log,
                                     preexec_fn=fds, pass_fds=(3, 4), start_new_session=True)
        os.close(self._to_browser_r)
        os.close(self._from_browser_w)
        self._buf = b""
        self._next = 0
        self._events = []
        self.width, self.height = width, height
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.call("Page.enable", session=True)
        self.call("Runtime.enable", session=True)
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}, session=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, 9)
            except ProcessLookupError:
                pass
        self.proc.wait(timeout=30)
        for fd in (self._to_browser_w, self._from_browser_r):
            try:
                os.close(fd)
            except OSError:
                pass
        self._log.close()

    def _read_message(self, deadline):
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the browser did not answer in time")
            ready, _, _ = select.select([self._from_browser_r], [], [], left)
            if not ready:
                continue
            chunk = os.read(self._from_browser_r, 1 << 20)
            if not chunk:
                raise RuntimeError("the browser closed its pipe (it died?)")
            self._buf += chunk
        message, self._buf = self._buf.split(b"\0", 1)
        return json.loads(message)

    def call(self, method, params=None, session=False, timeout=60):
        """One DevTools command; its result (raises on an error reply)."""
        self._next += 1
        message = {"id": self._next, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self.session
        data = json.dumps(message).encode() + b"\0"
        while data:
            data = data[os.write(self._to_browser_w, data):]
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self._events.append(reply)
            del self._events[:-200]

    def open(self, url, timeout=60):
        self.call("Page.navigate", {"url": url}, session=True)
        self.wait("document.readyState === 'complete'", timeout)

    def eval(self, expression, timeout=60):
        """The value of a JavaScript expression in the page (promises awaited)."""
        r = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True},
                      session=True, timeout=timeout)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait(self, expression, timeout, what=None):
        """Polls `expression` until it is truthy; returns its value, or raises naming `what`."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.eval(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout} s waiting for {what or expression}")
            time.sleep(0.2)

    def screenshot(self, full_page=True):
        """The page as PNG bytes (its whole height when full_page)."""
        params = {"format": "png", "optimizeForSpeed": True}
        if full_page:
            height = int(self.eval("Math.ceil(document.documentElement.scrollHeight)") or self.height)
            params["clip"] = {"x": 0, "y": 0, "width": self.width, "height": min(height, 4000), "scale": 1}
            params["captureBeyondViewport"] = True
        return base64.b64decode(self.call("Page.captureScreenshot", params, session=True)["data"])


def read_png(data):
    """(width, height, pixel): an 8-bit RGB or RGBA, non-interlaced PNG (what Chromium writes) decoded; pixel(x, y)
    is its (r, g, b). Rows are unfiltered with numpy where the python has it (torch's does), else byte by byte."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width, height, channels = 8, b"", 0, 0, 3
    while pos < len(data):
        length = int.from_bytes(data[pos:pos + 4], "big")
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height = int.from_bytes(body[0:4], "big"), int.from_bytes(body[4:8], "big")
            depth, color, interlace = body[8], body[9], body[12]
            assert depth == 8 and color in (2, 6) and interlace == 0, f"unexpected PNG format {depth}/{color}/{interlace}"
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
    raw = zlib.decompress(idat)
    stride = width * channels
    try:
        import numpy as np
    except ImportError:
        np = None
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if np is not None and f in (0, 1, 2):
            a = np.frombuffer(bytes(line), dtype=np.uint8).astype(np.uint32)
            if f == 1:
                a = np.cumsum(a.reshape(width, channels), axis=0).reshape(-1)
            elif f == 2:
                a = a + np.frombuffer(bytes(prev), dtype=np.uint8)
            line = bytearray((a & 0xFF).astype(np.uint8).tobytes())
        elif f == 1:
            for i in range(channels, stride):
                line[i] = (line[i] + line[i - channels]) & 0xFF
        elif f == 2:
            line = bytearray((a + b) & 0xFF for a, b in zip(line, prev))
        elif f == 3:
            for i in range(stride):
                left = line[i - channels] if i >= channels else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 0xFF
        elif f == 4:
            for i in range(stride):
                a = line[i - channels] if i >= channels else 0
                b, c = prev[i], prev[i - channels] if i >= channels else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append(line)
        prev = line

    def pixel(x, y):
        at = x * channels
        return tuple(rows[y][at:at + 3])

    return width, height, pixel
