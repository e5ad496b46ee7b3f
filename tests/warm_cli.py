"""A warm start for the tests' `rlft` runs: one interpreter per pytest process imports torch, transformers, TRL,
PEFT, datasets and accelerate once (about 5 s of CPU per run on the CI machine, more than most tiny-model runs
train), and each `rlft ARGS...` is a fork of it that runs `python -m rlft.cli ARGS...` in its own process: its own
pid, working folder, environment, stdio, exit status and signals, with rlft's own modules imported fresh.

What a fork cannot change falls back to a cold start (conftest.run_cli decides): an environment variable other
than RLFT_* differing from the one the warm interpreter started with (a library may have read it on import, as
torch reads ATEN_CPU_CAPABILITY), fault injection, and runs that launch several processes. RLFT_TEST_COLD_CLI=1
turns the warm start off for a whole session.

Run as a script, this file is the warm interpreter: it serves requests (one JSON line each) on a Unix socket; the
client side is `WarmCLI`."""

from __future__ import annotations

import atexit
import io
import json
import locale
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import traceback
from pathlib import Path

# the libraries an rlft run imports (not rlft itself: its modules load in each run, as in a cold one)
PRELOAD = ("torch", "transformers", "peft", "datasets", "accelerate", "trl", "safetensors", "tokenizers")
# read by rlft when it runs, never on a library's import: these may differ from the warm interpreter's environment
RUNTIME_ONLY = ("RLFT_", "PYTEST_CURRENT_TEST")


def _preload() -> None:
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    import transformers
    import trl

    # lazy modules: touching the names imports what every stage's run imports (no tensor work: a fork must not
    # inherit an OpenMP pool)
    for name in ("AutoModelForCausalLM", "AutoTokenizer", "Trainer", "TrainingArguments", "GenerationConfig"):
        getattr(transformers, name)
    for name in ("GRPOTrainer", "GRPOConfig", "DPOTrainer", "DPOConfig", "SFTTrainer", "SFTConfig"):
        getattr(trl, name)
    importlib.import_module("transformers.models.qwen2.modeling_qwen2")


def _run_child(request: dict) -> None:
    """In the forked child: become `python -m rlft.cli ARGS...`, then end as a normal exit would (exit status,
    non-daemon threads joined, atexit handlers, stdio flushed) without the interpreter's teardown."""
    import random
    import runpy

    for sig in (signal.SIGTERM, signal.SIGCHLD, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    stdin = os.open(os.devnull, os.O_RDONLY)
    os.dup2(stdin, 0)
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(target, fd)
        os.close(target)
    os.close(stdin)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.path[0] = os.getcwd()  # as `python -m` puts the working folder first
    random.seed()  # a cold interpreter seeds from the OS
    sys.argv = ["-m", *request["args"]]
    try:
        runpy.run_module("rlft.cli", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = exc.code
    except KeyboardInterrupt:  # as the interpreter ends on an uncaught one: the traceback, then killed by SIGINT
        traceback.print_exc()
        sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        code = 130  # only where SIGINT did not end the process
    except BaseException:
        code = 1
        traceback.print_exc()
    if not isinstance(code, int):  # SystemExit("text") / SystemExit(None), as the interpreter reports them
        if code is not None:
            print(code, file=sys.stderr)
        code = 0 if code is None else 1
    # what a normal exit does, then os._exit: tearing down the inherited libraries' modules costs more than a
    # short command (1.3 s against 0.2 s for validate-config); rlft closes its own files (`with`), so none is left
    # for the teardown to flush
    threading._shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code & 0xFF)


def serve(sock_path: str) -> None:
    """The warm interpreter's loop: fork a child per request; reply with its pid, then with its exit status."""
    _preload()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(sock_path)
    listener.listen(16)
    print("ready", flush=True)
    running: dict[int, socket.socket] = {}
    while True:
        readable, _, _ = select.select([listener], [], [], 0.02)
        if readable:
            conn, _ = listener.accept()
            data = b""
            while not data.endswith(b"\n"):
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
            if not data.endswith(b"\n"):
                conn.close()
                continue
            request = json.loads(data)
            if request.get("stop"):
                return
            pid = os.fork()
            if pid == 0:
                listener.close()
                conn.close()
                for other in running.values():
                    other.close()
                _run_child(request)  # never returns
            running[pid] = conn
            conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
        while running:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            conn = running.pop(pid, None)
            if conn is not None:
                try:
                    conn.sendall(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}).encode() + b"\n")
                except OSError:  # the client gave up (timeout): nothing to tell
                    pass
                conn.close()


def _decode(data: bytes) -> str:
    # as subprocess.run(text=True) reads a pipe: the locale's encoding, universal newlines
    return io.TextIOWrapper(io.BytesIO(data), encoding=locale.getpreferredencoding(False)).read()


class WarmCLI:
    """The client: starts the warm interpreter on first use (with this process's environment) and runs commands
    through it."""

    def __init__(self):
        self.proc: subprocess.Popen | None = None
        self.env: dict | None = None
        self.folder = Path(tempfile.mkdtemp(prefix="rlft-warm-"))
        self.sock_path = str(self.folder / "sock")

    def usable_for(self, env: dict) -> bool:
        if os.environ.get("RLFT_TEST_COLD_CLI") == "1" or not hasattr(os, "fork") or not hasattr(socket, "AF_UNIX"):
            return False
        base = self.env if self.env is not None else dict(os.environ)
        changed = {k for k in set(base) | set(env) if base.get(k) != env.get(k)}
        return all(k.startswith(RUNTIME_ONLY) for k in changed)

    def _start(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        self.env = dict(os.environ)
        self.proc = subprocess.Popen([sys.executable, __file__, self.sock_path], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=self.env, text=True)
        ready = self.proc.stdout.readline().strip() == "ready"
        if not ready:
            self.proc.kill()
        return ready

    def run(self, cmd: list, args: list, cwd, env: dict, timeout: float) -> subprocess.CompletedProcess | None:
        """`rlft ARGS...` as subprocess.run(cmd, capture_output=True, text=True) would give it; None if the warm
        interpreter is not there (the caller starts the command cold)."""
        if not self._start():
            return None
        out = tempfile.NamedTemporaryFile(dir=self.folder, delete=False)
        err = tempfile.NamedTemporaryFile(dir=self.folder, delete=False)
        out.close()
        err.close()
        request = {"args": [str(a) for a in args], "cwd": str(cwd), "env": env, "stdout": out.name,
                   "stderr": err.name}
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(self.sock_path)
            conn.sendall(json.dumps(request).encode() + b"\n")
            reader = conn.makefile("r")
            pid = json.loads(reader.readline())["pid"]
            conn.settimeout(timeout)
            try:
                line = reader.readline()
            except TimeoutError:
                os.kill(pid, signal.SIGKILL)
                raise subprocess.TimeoutExpired(cmd, timeout) from None
            if not line:
                raise RuntimeError(f"the warm rlft interpreter ended while running {args}")
            returncode = json.loads(line)["returncode"]
            stdout, stderr = (_decode(Path(p).read_bytes()) for p in (out.name, err.name))
            return subprocess.CompletedProcess(cmd, returncode, stdout, stderr)
        finally:
            conn.close()
            for p in (out.name, err.name):
                Path(p).unlink(missing_ok=True)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                    conn.connect(self.sock_path)
                    conn.sendall(b'{"stop": true}\n')
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
        import shutil

        shutil.rmtree(self.folder, ignore_errors=True)


if __name__ == "__main__":
    serve(sys.argv[1])
