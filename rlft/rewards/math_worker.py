"""The process that runs `math_answer`'s checks (math-verify over sympy), so a check that never returns can be
killed.

sympy computing `9^{9^{9^9}}` or simplifying a 50,000-factor product holds the GIL in C code: no thread, alarm or
timeout of the training process can stop it there. Here each check runs in one long-lived worker process
(`python -m rlft.rewards.math_worker`, its own interpreter: nothing of the training process is forked or
re-imported, and it starts once per run, about a second to import sympy); the caller waits on a pipe, and past a
check's time limit kills the worker, marks that check unfinished and goes on with the rest in a fresh one. In the
worker, math-verify's own `signal.alarm` timeouts work (it runs in its process's main thread) and stop the checks
that loop in Python well before the kill.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path

# how long a worker may take to start (it imports sympy: seconds on a busy machine) when no call deadline bounds it
START_GRACE_S = 60.0
# checks parsed references are cached for (a GRPO group shares its reference)
_GOLD_CACHE = 512

Result = tuple  # ("score", float) | ("none", reason) | ("unfinished", reason)


def extraction(mode: str) -> list:
    """math-verify's extraction for `mode`: strict reads LaTeX only, lenient plain expressions too."""
    from latex2sympy2_extended import NormalizationConfig
    from math_verify import ExprExtractionConfig, LatexExtractionConfig

    latex = LatexExtractionConfig(normalization_config=NormalizationConfig(units=True), boxed_match_priority=0,
                                  try_extract_without_anchor=mode == "lenient")
    return [latex] if mode == "strict" else [latex, ExprExtractionConfig()]


def _check(mode: str, reference: str, answer_text: str, alarm_s: int, cache: dict) -> Result:
    """One check in the worker: the reference and the answer parsed, then compared (math-verify's alarms on)."""
    from math_verify import parse, verify

    gold = cache.get(reference)
    if gold is None:
        gold = parse(reference, parsing_timeout=alarm_s)
        if not gold and "$" not in reference:  # a bare LaTeX expression (`x^2+2x+1`) is read as math
            gold = parse(f"${reference}$", parsing_timeout=alarm_s)
        if len(cache) >= _GOLD_CACHE:
            cache.clear()
        cache[reference] = gold
    if not gold:
        return ("none", "the reference does not parse")
    answer = parse(answer_text, extraction_config=extraction(mode), extraction_mode="first_match",
                   parsing_timeout=alarm_s)
    if not answer:
        return ("score", 0.0)
    return ("score", float(verify(gold, answer, timeout_seconds=alarm_s)))


def serve(reader: Connection, writer: Connection) -> None:
    """The worker's loop: (mode, [(reference, answer), ...], alarm_s) in, one result per check out, in order."""
    import logging
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the training process's to handle, not the checker's
    for name in ("math_verify.parser", "math_verify.grader"):  # a timed-out check is reported by the caller
        logging.getLogger(name).setLevel(logging.CRITICAL)
    import math_verify  # noqa: F401 - loaded before "ready", so a check's time is the check's alone

    cache: dict = {}
    writer.send(("ready",))
    while True:
        try:
            mode, items, alarm_s = reader.recv()
        except (EOFError, OSError):  # the caller is gone
            return
        for reference, answer_text in items:
            try:
                result = _check(mode, reference, answer_text, alarm_s, cache)
            except Exception as exc:  # noqa: BLE001 - one check's failure is that check's, not the worker's
                result = ("unfinished", f"the checker raised {type(exc).__name__}: {str(exc)[:200]}")
            writer.send(result)


def _main() -> None:
    """Messages travel on the worker's stdin and on a copy of its stdout; what the checker prints goes nowhere."""
    out = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    serve(Connection(0, writable=False), Connection(out, readable=False))


class MathChecker:
    """One worker process, started on first use and again after each kill; thread-safe (calls take turns)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc = None
        self._conn = None
        self.kills = 0  # workers killed past a time limit (tests read it)

    def _start(self, deadline: float) -> str | None:
        """A ready worker, or why not by `deadline`."""
        if self._proc is not None and self._proc.poll() is None:
            return None
        self._stop()
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])  # this rlft, installed or not
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        # its own session: a Ctrl-C at the terminal is the run's to handle, and the run stops the worker
        proc = subprocess.Popen([sys.executable, "-m", "rlft.rewards.math_worker"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
        self._proc = proc
        self._conn = (Connection(os.dup(proc.stdout.fileno()), writable=False),
                      Connection(os.dup(proc.stdin.fileno()), readable=False))
        proc.stdout.close()
        proc.stdin.close()
        if not self._conn[0].poll(max(0.0, deadline - time.monotonic())):
            self._stop(kill=True)
            return "the checker process did not start in time"
        try:
            self._conn[0].recv()
        except (EOFError, OSError):
            self._stop()
            return "the checker process did not start"
        return None

    def _stop(self, kill: bool = False) -> None:
        if self._conn is not None:
            for conn in self._conn:
                conn.close()
        if self._proc is not None:
            if kill and self._proc.poll() is None:
                self._proc.kill()
                self.kills += 1
            try:
                self._proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
        self._proc = self._conn = None

    def check(self, mode: str, items: list[tuple[str, str]], item_limit_s: float,
              deadline: float | None) -> list[Result]:
        """One result per (reference, answer): each check may take `item_limit_s`, all of them end by `deadline`
        (time.monotonic(); None = no overall limit). A check past either is killed with its worker and reported
        ("unfinished", why); the checks after it go to a fresh worker while time is left."""
        results: list[Result] = []
        end = deadline if deadline is not None else float("inf")
        wait = max(0.0, min(end - time.monotonic(), 3600.0))
        if not self._lock.acquire(timeout=wait):
            return [("unfinished", "not checked: the checker was still busy with an earlier call")] * len(items)
        why = "no time was left in the call's timeout_s"
        try:
            while len(results) < len(items) and time.monotonic() < end:
                problem = self._start(min(end, time.monotonic() + START_GRACE_S))
                if problem:
                    why = problem
                    break
                alarm_s = max(1, min(5, int(item_limit_s)))  # math-verify's own (whole-second) limits
                pending = items[len(results):]
                self._conn[1].send((mode, pending, alarm_s))
                for _ in pending:
                    limit = min(end, time.monotonic() + item_limit_s)
                    if not self._conn[0].poll(max(0.0, limit - time.monotonic())):
                        self._stop(kill=True)  # the next check, if time is left, goes to a fresh worker
                        over = "the call's timeout_s" if limit >= end else f"{item_limit_s:g} s"
                        results.append(("unfinished", f"the check ran past {over} and was stopped"))
                        break
                    try:
                        results.append(self._conn[0].recv())
                    except (EOFError, OSError):
                        self._stop(kill=True)
                        results.append(("unfinished", "the checker process died during the check"))
                        break
            left = len(items) - len(results)
            return results + [("unfinished", f"not checked: {why}")] * left
        finally:
            self._lock.release()

    def close(self) -> None:
        with self._lock:
            self._stop(kill=True)


_CHECKER: MathChecker | None = None


def checker() -> MathChecker:
    global _CHECKER
    if _CHECKER is None:
        import atexit

        _CHECKER = MathChecker()
        atexit.register(_CHECKER.close)  # the worker would end at its stdin's EOF anyway; this waits for it
    return _CHECKER



if __name__ == "__main__":
    _main()
