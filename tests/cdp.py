"""A minimal headless-Chromium driver for tests: the DevTools protocol over `--remote-debugging-pipe`
(NUL-separated JSON on file descriptors 3 and 4), so no websocket library or browser download is needed:
Debian's `chromium` package is enough."""

from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "chrome-headless-shell", "headless_shell")


def find_chromium() -> str | None:
    env = os.environ.get("RLFT_CHROMIUM")
    if env:
        return env
    return next((p for p in map(shutil.which, CANDIDATES) if p), None)


def _move_high(fd: int) -> int:
    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return high


class Browser:
    """`with Browser() as b:` ... `page = b.new_page()`; events of every session land in `b.events`."""

    def __init__(self, binary: str | None = None, timeout: float = 60.0):
        self.binary = binary or find_chromium()
        self.timeout = timeout
        self.events: list[dict] = []
        self._next = 0
        self._replies: dict[int, dict] = {}
        self._cond = threading.Condition()

    def __enter__(self) -> "Browser":
        self.profile = tempfile.mkdtemp(prefix="rlft-chromium-")
        self.log = Path(self.profile + ".log")
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        # the browser reads commands on fd 3 and writes replies on fd 4; the child's ends move above 9 first
        # so that placing one on 3 or 4 never overwrites the other (Python's own fds are not inherited)
        to_child_r = _move_high(to_child_r)
        from_child_w = _move_high(from_child_w)

        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-extensions", "--mute-audio", "--hide-scrollbars", f"--user-data-dir={self.profile}",
                 # belt and braces: a request that tried to leave the machine could not resolve anything
                 "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost", "--proxy-server=127.0.0.1:9",
                 "--window-size=1280,1600", "--remote-debugging-pipe"]

        def child_fds():
            os.dup2(to_child_r, 3)
            os.dup2(from_child_w, 4)

        with open(self.log, "wb") as err:
            self.proc = subprocess.Popen([self.binary, *flags, "about:blank"], preexec_fn=child_fds, close_fds=False,
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
        os.close(to_child_r)
        os.close(from_child_w)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        return self

    def __exit__(self, *exc):
        try:
            self.send("Browser.close", timeout=5)
        except Exception:  # noqa: BLE001 - closing a browser that already went away
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_child)
        shutil.rmtree(self.profile, ignore_errors=True)
        self.log.unlink(missing_ok=True)
        return False

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-2000:] if self.log.is_file() else ""

    def _read(self) -> None:
        buf = b""
        while True:
            try:
                chunk = os.read(self._from_child, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                with self._cond:
                    self._cond.notify_all()
                return
            buf += chunk
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                msg = json.loads(raw)
                with self._cond:
                    if "id" in msg:
                        self._replies[msg["id"]] = msg
                    else:
                        self.events.append(msg)
                    self._cond.notify_all()

    def send(self, method: str, params: dict | None = None, session: str | None = None, timeout: float | None = None):
        self._next += 1
        mid = self._next
        msg = {"id": mid, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        try:
            os.write(self._to_child, json.dumps(msg).encode() + b"\0")
        except BrokenPipeError:
            raise RuntimeError(f"the browser exited ({self.proc.wait()}): {self.log_tail()}") from None
        deadline = time.monotonic() + (timeout or self.timeout)
        with self._cond:
            while mid not in self._replies:
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    raise TimeoutError(f"no reply to {method} (browser exit code {self.proc.poll()}): "
                                       f"{self.log_tail()}")
                self._cond.wait(min(left, 0.5))
            reply = self._replies.pop(mid)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def wait_event(self, method: str, session: str | None = None, timeout: float | None = None) -> dict:
        deadline = time.monotonic() + (timeout or self.timeout)
        seen = 0
        with self._cond:
            while True:
                for ev in self.events[seen:]:
                    if ev.get("method") == method and (session is None or ev.get("sessionId") == session):
                        return ev
                seen = len(self.events)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no {method} event")
                self._cond.wait(min(left, 0.5))

    def new_page(self) -> "Page":
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, session)
        for domain in ("Runtime", "Log", "Network", "Page"):
            page.send(f"{domain}.enable")
        return page


class Page:
    def __init__(self, browser: Browser, session: str):
        self.browser, self.session = browser, session

    def send(self, method: str, params: dict | None = None):
        return self.browser.send(method, params, self.session)

    def events(self, method: str) -> list[dict]:
        return [e["params"] for e in list(self.browser.events)
                if e.get("method") == method and e.get("sessionId") == self.session]

    def goto(self, url: str) -> None:
        before = len(self.events("Page.loadEventFired"))
        self.send("Page.navigate", {"url": url})
        deadline = time.monotonic() + self.browser.timeout
        while len(self.events("Page.loadEventFired")) <= before:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} did not finish loading")
            time.sleep(0.05)

    def eval(self, expression: str):
        res = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in res:
            raise RuntimeError(f"page script failed: {res['exceptionDetails']}")
        return res["result"].get("value")

    def screenshot(self, path: Path) -> Path:
        data = self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path

    def console_errors(self) -> list[str]:
        """Console errors/assertions, uncaught exceptions and browser log errors (e.g. failed loads)."""
        out = [" ".join(str(a.get("value", a.get("description", ""))) for a in e.get("args", []))
               for e in self.events("Runtime.consoleAPICalled") if e.get("type") in ("error", "assert")]
        out += [e["exceptionDetails"].get("exception", {}).get("description", e["exceptionDetails"].get("text", ""))
                for e in self.events("Runtime.exceptionThrown")]
        out += [f"{e['entry'].get('text')} ({e['entry'].get('url', '')})" for e in self.events("Log.entryAdded")
                if e["entry"].get("level") == "error"]
        return out

    def request_urls(self) -> list[str]:
        return [e["request"]["url"] for e in self.events("Network.requestWillBeSent")]
