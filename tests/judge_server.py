"""A small OpenAI-compatible chat-completions server for the `llm_judge` tests: http.server on 127.0.0.1, a free
port, one thread a request. It judges by rule, not by model: the user message's `<c>...</c>` part is the
completion, `Target letter: X` the target, and the verdict is whether the completion holds the target letter
(`Score: 9` / `Score: 1`, or `good` / `bad` in label mode). Modes (settable while it runs):

  score      a number reply            label     a rubric label reply        slow      a number after `delay` s
  flaky      HTTP 500 for the first `failures` requests, then as `score`     malformed a 200 that is not JSON
  unauthorized  HTTP 401 to everything (also when a request lacks `key`)     hang      never answers
  bad_request   HTTP 400 to every judgement

It counts requests (`requests`, `paths`) and the most it was answering at once (`max_active`).

    python tests/judge_server.py --mode score    # serve on a free port until Ctrl-C (prints the base URL)
"""

from __future__ import annotations

import argparse
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODES = ("score", "label", "slow", "flaky", "malformed", "bad_request", "unauthorized", "hang")


def verdict(message: str) -> bool:
    """Whether the completion in a judge message holds the target letter."""
    completion = re.search(r"<c>(.*?)</c>", message, re.S)
    target = re.search(r"Target letter: (\S)", message)
    return bool(completion and target and target.group(1) in completion.group(1))


class JudgeServer:
    def __init__(self, mode: str = "score", key: str | None = None, delay: float = 0.5, failures: int = 2):
        self.mode, self.key, self.delay, self.failures = mode, key, delay, failures
        self.requests = 0  # POSTs to /chat/completions
        self.paths: list[str] = []
        self.active = self.max_active = 0
        self.bodies: list[dict] = []
        self.headers: list[dict] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):
                owner._handle(self, post=False)

            def do_POST(self):
                owner._handle(self, post=True)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.block_on_close = False  # a hanging handler never holds the shutdown
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> "JudgeServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def reset(self, mode: str, **settings) -> None:
        with self._lock:
            self.mode, self.requests, self.paths, self.bodies, self.headers = mode, 0, [], [], []
            self.active = self.max_active = 0
            for k, v in settings.items():
                setattr(self, k, v)

    def _send(self, handler, code: int, payload) -> None:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        handler.send_response(code)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def _handle(self, handler, post: bool) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        with self._lock:
            self.paths.append(handler.path)
            self.headers.append(dict(handler.headers))
            if post:
                self.requests += 1
                number = self.requests
                self.active += 1
                self.max_active = max(self.max_active, self.active)
        try:
            self._answer(handler, post, raw, number if post else 0)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (its timeout)
        finally:
            if post:
                with self._lock:
                    self.active -= 1

    def _answer(self, handler, post: bool, raw: bytes, number: int) -> None:
        mode = self.mode
        auth_ok = self.key is None or handler.headers.get("Authorization") == f"Bearer {self.key}"
        if mode == "unauthorized" or not auth_ok:
            return self._send(handler, 401, {"error": {"message": "invalid api key"}})
        if not post:
            return self._send(handler, 200, {"object": "list", "data": [{"id": "judge", "object": "model"}]})
        body = json.loads(raw)
        with self._lock:
            self.bodies.append(body)
        if mode == "hang":
            self._stop.wait(60)
            return
        if mode == "slow":
            time.sleep(self.delay)
        if mode == "flaky" and number <= self.failures:
            return self._send(handler, 500, {"error": {"message": "overloaded"}})
        if mode == "bad_request":
            return self._send(handler, 400, {"error": {"message": "max_tokens is too large"}})
        if mode == "malformed":
            return self._send(handler, 200, b"{not json")
        good = verdict(body["messages"][-1]["content"])
        if mode == "label":
            text = "good" if good else "bad"
        else:
            text = "Score: 9" if good else "Score: 1"
        self._send(handler, 200, {"id": f"c{number}", "object": "chat.completion", "model": body.get("model"),
                                  "choices": [{"index": 0, "finish_reason": "stop",
                                               "message": {"role": "assistant", "content": text}}]})


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=MODES, default="score")
    parser.add_argument("--key", default=None)
    args = parser.parse_args()
    with JudgeServer(args.mode, key=args.key) as server:
        print(server.base_url, flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass
