"""Fault-tolerant reward calls and their combination into one training signal.

User reward code is the most fragile part of an RL run: one bad row or an
unexpected completion should not kill hours of training, but silently
scoring failures as 0 would teach the policy the wrong thing. So failures
become *no score* (``None``), are counted and logged once per kind, and a
guard stops the run when too many completions go unscored.

Each call runs in a daemon worker thread (rlft's own, not a thread pool: a pool
re-raises ``SystemExit``/``KeyboardInterrupt`` into the caller and cannot abandon a
hung call), so reward code can neither end the run (``sys.exit``, a stray
``KeyboardInterrupt``) nor hang it: past ``timeout_s`` or on Ctrl-C the batch gets no
score and training goes on.
"""

from __future__ import annotations

import logging
import math
import statistics
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlft.numeric import is_finite
from rlft.rewards.capture import capture_output
from rlft.rewards.registry import RewardResolveError, module_search_dir, resolve_reward_fn, reward_short_name
from rlft.rewards.unscored import Unscored

__all__ = [
    "SafeReward",
    "RewardSuite",
    "RewardScores",
    "RewardFailureError",
    "build_reward_suite",
]

logger = logging.getLogger("rlft.rewards")

# keys a reward entry in the config may carry
_CFG_KEYS = {"fn", "weight", "kwargs", "name", "timeout_s"}
# dataset columns that identify a row rather than describe it (rlft adds `prompt_id` to prompt data):
# never passed to reward functions
ROW_ID_COLUMNS = ("prompt_id",)
# what the sampler knows of each completion, beside the dataset's columns: its sampled token count (EOS
# included) and the token budget it was sampled under. Passed only to a function that names the parameter, so
# a function written for the dataset's columns alone never sees a key it does not expect.
SAMPLED_COLUMNS = ("completion_lengths", "max_tokens")

# a reward function that declares this parameter gets its entry's timeout_s (None: no limit), so it can end its
# own work in time and keep what it finished (math_answer kills its checker process)
TIMEOUT_PARAM = "reward_timeout_s"
# seconds one call may run unless the config says otherwise
DEFAULT_TIMEOUT_S = 30.0
# how often a waiting call looks at the timeout and the interrupt flag
_POLL_S = 0.05
# after an interrupt, how long a running call may still finish (a quick reward keeps its scores)
_ABORT_GRACE_S = 2.0


class RewardFailureError(RuntimeError):
    """Too many completions went without a reward to keep training meaningfully."""


def _exception_kind(exc: BaseException) -> str:
    """Identify a failure by exception type and raising line, so one bug logs once."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
    return f"raised {type(exc).__name__}{where}"


def _as_list(raw: Any) -> list[Any] | None:
    """Accept lists, tuples and array-likes (``tolist``) without importing numpy/torch."""
    if isinstance(raw, list):
        return raw
    if isinstance(raw, tuple):
        return list(raw)
    tolist = getattr(raw, "tolist", None)
    if callable(tolist):
        out = tolist()
        return out if isinstance(out, list) else None
    return None


def _to_float(value: Any) -> tuple[float | None, str | None]:
    """A finite float, or None with the failure kind."""
    if value is None or isinstance(value, (str, bytes)):
        return None, "non-numeric value"
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None, "non-numeric value"
    if not math.isfinite(number):
        return None, "non-finite value"
    return number, None


def _names_param(fn: Callable[..., Any], name: str) -> bool:
    """Whether `fn` declares a parameter `name` (a `**kwargs` catch-all does not count)."""
    import inspect

    try:
        param = inspect.signature(fn).parameters.get(name)
    except (TypeError, ValueError):  # a callable without a readable signature
        return False
    return param is not None and param.kind not in (param.VAR_POSITIONAL, param.VAR_KEYWORD)


def _never() -> bool:
    return False


class SafeReward:
    """A reward function that never raises into the trainer, ends the run or hangs it.

    ``__call__`` returns one ``float | None`` per completion: ``None`` marks
    a completion the function could not score (it raised anything, even
    ``SystemExit``/``KeyboardInterrupt``, ran past ``timeout_s``, was still running
    when ``should_abort()`` turned true, returned the wrong number of values, or a
    non-numeric/NaN/inf value). Configured ``kwargs`` are merged over the dataset
    columns, so a YAML option wins over a column of the same name.

    ``timeout_s=None`` calls the function in the calling thread, with no time limit
    (for reward code that must run in the main thread, e.g. code using ``signal``).
    """

    def __init__(
        self,
        name: str,
        fn: Callable[..., Any],
        weight: float = 1.0,
        kwargs: Mapping[str, Any] | None = None,
        timeout_s: float | None = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.name = name
        self.fn = fn
        self.weight = float(weight)
        self.kwargs = dict(kwargs or {})
        if timeout_s is not None and not (isinstance(timeout_s, (int, float)) and timeout_s > 0):
            raise ValueError(f"timeout_s must be a positive number of seconds or None, got {timeout_s!r}")
        self.timeout_s = None if timeout_s is None else float(timeout_s)
        # polled while a call runs: true once the run is being interrupted
        self.should_abort: Callable[[], bool] = _never
        # worker threads abandoned past their timeout that had not returned at the last call
        self._abandoned: list[threading.Thread] = []
        # TRL labels reward functions by __name__ in its logs
        self.__name__ = name
        # cumulative counters
        self.calls = 0
        self.completions = 0
        self.errors = 0
        # counters since the last pop_counts()
        self._window = {"calls": 0, "completions": 0, "errors": 0}
        self.last_error: str | None = None
        self._logged_kinds: set[str] = set()
        # since the last pop_log(): per call, its time, captured output and failure messages
        self._log: list[dict[str, Any]] = []
        self._call_errors: list[str] = []
        self.spec: str | None = None  # the config's `fn`, when built from a config
        self.base_dir: Path | None = None
        self.capture = False  # True: route the function's prints and log records into the call's log

    def __repr__(self) -> str:
        return f"SafeReward(name={self.name!r}, weight={self.weight}, kwargs={self.kwargs!r})"

    def __call__(self, prompts: list[Any], completions: list[Any], **columns: Any) -> list[float | None]:
        output: list[str] = []
        self._call_errors = []
        errors_before, started = self.errors, time.perf_counter()
        try:
            return self._score(prompts, completions, columns, output)
        finally:
            if self.capture:  # only a stage that writes reward_logs.jsonl reads (and pops) the log
                extra = len(self._call_errors) - 5
                self._log.append({"ms": (time.perf_counter() - started) * 1000.0, "output": "".join(output),
                                  "unscored": self.errors - errors_before,
                                  "messages": self._call_errors[:5] + ([f"... and {extra} more"] if extra > 0 else [])})

    def pop_log(self) -> dict[str, Any] | None:
        """Calls since the previous pop: count, mean ms per call, completions left unscored (`errors`),
        captured output and failure messages (with tracebacks); None when there was no call."""
        log, self._log = self._log, []
        if not log:
            return None
        return {"calls": len(log), "ms": sum(c["ms"] for c in log) / len(log),
                "errors": sum(c["unscored"] for c in log), "output": "".join(c["output"] for c in log),
                "error": "\n".join(m for c in log for m in c["messages"])}

    def _score(self, prompts: list[Any], completions: list[Any], columns: dict[str, Any],
               output: list[str]) -> list[float | None]:
        n = len(completions)
        self._count("calls", 1)
        self._count("completions", n)
        columns = {k: v for k, v in columns.items() if k not in SAMPLED_COLUMNS or _names_param(self.fn, k)}
        kwargs = {**columns, **self.kwargs}
        if _names_param(self.fn, TIMEOUT_PARAM):  # a function that bounds its own work (math_answer) is told how
            kwargs[TIMEOUT_PARAM] = self.timeout_s
        outcome, raw = self._call(prompts, completions, kwargs, output)
        if outcome == "raised":
            return self._fail_batch(n, _exception_kind(raw), f"raised {type(raw).__name__}: {raw}", raw)
        if outcome == "timeout":
            stuck = sum(t.is_alive() for t in self._abandoned)
            return self._fail_batch(n, "timed out", f"did not return within timeout_s={self.timeout_s:g} s "
                                    f"(the call is abandoned, {stuck} abandoned call(s) still running; raise "
                                    f"rewards[].timeout_s if it is only slow)")
        if outcome == "aborted":
            return self._fail_batch(n, "interrupted", "was still running when the run was interrupted")
        values = _as_list(raw)
        if values is None:
            message = f"returned {type(raw).__name__}, expected a list of {n} floats"
            return self._fail_batch(n, "returned a non-list", message)
        if len(values) != n:
            return self._fail_batch(n, "returned wrong count", f"returned {len(values)} scores for {n} completions")
        scores: list[float | None] = []
        for i, value in enumerate(values):
            if isinstance(value, Unscored):  # the function says why it could not score this one
                self._fail(1, value.kind, f"left completion {i} of {n} unscored: {value.reason}")
                scores.append(None)
                continue
            number, kind = _to_float(value)
            if kind is not None:
                self._fail(1, kind, f"returned {kind} {value!r} for completion {i} of {n}")
            scores.append(number)
        return scores

    def _call(self, prompts: list[Any], completions: list[Any], kwargs: dict[str, Any],
              output: list[str]) -> tuple[str, Any]:
        """("ok", value), ("raised", exception), ("timeout", None) or ("aborted", None); what the
        function prints or logs goes to `output`."""
        if self.timeout_s is None:
            try:
                with capture_output(output) if self.capture else nullcontext():
                    return "ok", self.fn(prompts, completions, **kwargs)
            except KeyboardInterrupt as exc:
                if self.should_abort():  # the user's own second Ctrl-C, not the reward's
                    raise
                return "raised", exc
            except BaseException as exc:  # noqa: BLE001 - sys.exit() in reward code must not end the run
                return "raised", exc
        box: dict[str, Any] = {}
        done = threading.Event()

        def work() -> None:
            try:
                with capture_output(output) if self.capture else nullcontext():
                    box["value"] = self.fn(prompts, completions, **kwargs)
            except BaseException as exc:  # noqa: BLE001 - SystemExit/KeyboardInterrupt become a failure
                box["exc"] = exc
            finally:
                done.set()

        self._abandoned = [t for t in self._abandoned if t.is_alive()]
        worker = threading.Thread(target=work, name=f"rlft-reward-{self.name}", daemon=True)
        worker.start()
        deadline = time.monotonic() + self.timeout_s
        abort_at = None
        while not done.wait(_POLL_S):
            if abort_at is None and self.should_abort():
                abort_at = time.monotonic() + _ABORT_GRACE_S
            if abort_at is not None and time.monotonic() >= abort_at:
                self._abandoned.append(worker)
                return "aborted", None
            if time.monotonic() >= deadline:
                self._abandoned.append(worker)
                return "timeout", None
        if "exc" in box:
            return "raised", box["exc"]
        return "ok", box.get("value")

    def pop_counts(self) -> dict[str, int]:
        """Counters since the previous call (calls, completions, errors), then reset them."""
        counts, self._window = self._window, {"calls": 0, "completions": 0, "errors": 0}
        return counts

    def _count(self, key: str, amount: int) -> None:
        """Bump a counter both cumulatively and in the current window."""
        setattr(self, key, getattr(self, key) + amount)
        self._window[key] += amount

    def _fail_batch(self, n: int, kind: str, message: str, exc: BaseException | None = None) -> list[float | None]:
        """Mark the whole batch unscored."""
        self._fail(n, kind, f"{message} (batch of {n})", exc)
        return [None] * n

    def _fail(self, count: int, kind: str, message: str, exc: BaseException | None = None) -> None:
        """Record ``count`` unscored completions; log the first of each kind."""
        self._count("errors", count)
        self.last_error = message
        detail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)) if exc is not None else ""
        self._call_errors.append(f"{message}\n{detail}".rstrip())
        if kind in self._logged_kinds:
            return
        self._logged_kinds.add(kind)
        logger.warning(
            "reward %r %s; those completions get no score. Further failures of this kind are counted, not logged.",
            self.name,
            message,
            exc_info=None if getattr(exc, "expected", False) else exc,  # a failure its message explains
        )


@dataclass
class RewardScores:
    """Scores for one batch.

    ``total`` is the weighted sum over functions, or None when any function
    with a non-zero weight has no score for that completion: a partial sum
    would be on a different scale from its neighbours and bias the
    advantage, so such completions are left out instead. Zero-weight
    functions are monitoring only and never invalidate a total.
    """

    per_fn: dict[str, list[float | None]]
    total: list[float | None]
    valid: list[bool] = field(default_factory=list)


class RewardSuite:
    """Several :class:`SafeReward` combined, with metrics and a failure guard.

    The guard trips when, after at least ``min_completions`` completions,
    the cumulative fraction without a total exceeds ``max_failure_fraction``:
    past that point the run is learning from noise and stopping with a clear
    message is kinder than finishing it.
    """

    def __init__(
        self,
        rewards: list[SafeReward],
        max_failure_fraction: float = 0.5,
        min_completions: int = 32,
    ) -> None:
        if not rewards:
            raise ValueError("a reward suite needs at least one reward function")
        names = [r.name for r in rewards]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"reward names must be unique; repeated: {', '.join(duplicates)}")
        if not 0.0 <= max_failure_fraction <= 1.0:
            raise ValueError(f"max_failure_fraction must be within [0, 1], got {max_failure_fraction}")
        self.rewards = list(rewards)
        self.max_failure_fraction = float(max_failure_fraction)
        self.min_completions = int(min_completions)
        # cumulative completions seen and those left without a total
        self.seen = 0
        self.unscored = 0
        self._window_scores: dict[str, list[float]] = {r.name: [] for r in self.rewards}
        self._window_totals: list[float] = []
        self._should_abort: Callable[[], bool] = _never

    def pop_logs(self) -> list[dict[str, Any]]:
        """One row per reward function called since the last pop: `reward`, calls, ms (mean per call),
        errors (completions unscored), output (what it printed or logged), error (messages, tracebacks)."""
        rows = []
        for r in self.rewards:
            log = r.pop_log()
            if log is not None:
                rows.append({"reward": r.name, **log})
        return rows

    def capture_logs(self, on: bool) -> None:
        for r in self.rewards:
            r.capture = on

    def abort_when(self, should_abort: Callable[[], bool]) -> None:
        """Stop waiting for running reward calls once ``should_abort()`` is true (e.g. on Ctrl-C),
        so an interrupted run checkpoints promptly; the guard does not count that batch against it."""
        self._should_abort = should_abort
        for r in self.rewards:
            r.should_abort = should_abort

    @property
    def names(self) -> list[str]:
        return [r.name for r in self.rewards]

    @property
    def failure_fraction(self) -> float:
        """Cumulative fraction of completions without a total."""
        return self.unscored / self.seen if self.seen else 0.0

    def score(
        self,
        prompts: list[Any],
        completions: list[Any],
        columns: Mapping[str, list[Any]] | None = None,
        count: bool = True,
    ) -> RewardScores:
        """Score a batch; raises :class:`RewardFailureError` when the guard trips. With
        ``count=False`` the batch is not counted toward the guard (the caller reports the
        totals through :meth:`record`, e.g. once per gathered multi-process batch). Row-id
        columns (``ROW_ID_COLUMNS``) are not passed to the functions."""
        n = len(completions)
        columns = {k: v for k, v in (columns or {}).items() if k not in ROW_ID_COLUMNS}
        for key, values in columns.items():
            if len(values) != n:
                raise ValueError(f"column {key!r} has {len(values)} values for {n} completions")
        per_fn = {r.name: r(prompts, completions, **columns) for r in self.rewards}
        weighted = [r for r in self.rewards if r.weight != 0.0]
        total: list[float | None] = []
        for i in range(n):
            parts = [per_fn[r.name][i] for r in weighted]
            if any(p is None for p in parts):
                total.append(None)
            else:
                total.append(sum(r.weight * p for r, p in zip(weighted, parts)))
        for name, scores in per_fn.items():
            self._window_scores[name].extend(s for s in scores if s is not None)
        self._window_totals.extend(t for t in total if t is not None)
        if count:
            self.record(n, sum(1 for t in total if t is None))
        return RewardScores(per_fn=per_fn, total=total, valid=[t is not None for t in total])

    def metrics(self) -> dict[str, float]:
        """Metrics since the previous call; mean/std keys are left out when nothing was scored."""
        out: dict[str, float] = {}
        for r in self.rewards:
            values = self._window_scores[r.name]
            if values:
                out[f"rewards/{r.name}/mean"] = statistics.fmean(values)
                out[f"rewards/{r.name}/std"] = statistics.pstdev(values)
            out[f"rewards/{r.name}/errors"] = float(r.pop_counts()["errors"])
            extra = getattr(r.fn, "pop_metrics", None)  # a reward's own counts (llm_judge: requests, cache hits)
            if extra is not None:
                out.update({f"rewards/{r.name}/{k}": float(v) for k, v in extra(r.kwargs).items()})
            self._window_scores[r.name] = []
        if self._window_totals:
            out["reward"] = statistics.fmean(self._window_totals)
            out["reward_std"] = statistics.pstdev(self._window_totals)
        self._window_totals = []
        return out

    def record(self, seen: int, unscored: int) -> None:
        """Count totals scored elsewhere (e.g. by a trainer that called each reward itself) and
        apply the failure guard; raises :class:`RewardFailureError` when it trips."""
        self.seen += int(seen)
        self.unscored += int(unscored)
        self._check_guard()

    def _check_guard(self) -> None:
        """Raise once enough completions are seen and too many lack a score."""
        if self._should_abort():  # an interrupted run stops with its own checkpoint and message
            return
        if self.seen < self.min_completions or self.failure_fraction <= self.max_failure_fraction:
            return
        failing = [(r.name, r.errors, r.last_error) for r in self.rewards if r.errors]
        raise RewardFailureError(failure_message(self.unscored, self.seen, self.max_failure_fraction, failing))


def failure_message(unscored: int, seen: int, max_fraction: float, failing: list[tuple[str, int, str | None]]) -> str:
    """The failure guard's message; `failing` = (reward name, errors, last error) of each failing reward (`--smoke`
    rebuilds it from a run's logs, where too few completions were scored for the guard to act)."""
    details = "; ".join(f"{name!r}: {errors} errors, last: {last}" for name, errors, last in failing)
    return (f"rewards gave no score to {unscored} of {seen} completions ({unscored / max(seen, 1):.0%}), above "
            f"max_failure_fraction={max_fraction}. Failing: {details or 'none recorded'}. "
            f"Check these reward functions and the dataset columns they read.")


def _cfg_get(cfg: Any, key: str, default: Any = None) -> Any:
    """Read a config entry from a mapping or an attribute-style object."""
    if isinstance(cfg, Mapping):
        return cfg.get(key, default)
    return getattr(cfg, key, default)


def _plain(value: Any) -> Any:
    """Copy config containers (e.g. OmegaConf nodes) into plain dicts and lists,
    so reward functions can rely on ``isinstance(x, list)``."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return [_plain(v) for v in value]
    return value


def _unique_name(name: str, taken: set[str]) -> str:
    """``name``, or ``name_2``, ``name_3``... when already used."""
    candidate, k = name, 2
    while candidate in taken:
        candidate, k = f"{name}_{k}", k + 1
    return candidate


def build_reward_suite(
    reward_cfgs: list[Any],
    base_dir: str | Path | None = None,
    max_failure_fraction: float = 0.5,
    min_completions: int = 32,
    config_dir: str | Path | None = None,
) -> RewardSuite:
    """Build a :class:`RewardSuite` from the config's ``rewards:`` list.

    Each entry has ``fn`` and optional ``weight`` (1.0), ``kwargs`` ({}),
    ``timeout_s`` (30 s; null = no limit, called inline) and ``name`` (the function's
    short name). Repeated names get ``_2``, ``_3`` suffixes so two configurations
    of one built-in log separately. ``config_dir`` (the folder of the config file that
    set ``rewards``) is searched first for ``module:function`` specs.
    """
    if not reward_cfgs:
        raise ValueError("no rewards configured: 'rewards' needs at least one entry with 'fn'")
    rewards: list[SafeReward] = []
    taken: set[str] = set()
    for i, cfg in enumerate(reward_cfgs):
        where = f"rewards[{i}]"
        if isinstance(cfg, Mapping):
            unknown = sorted(set(map(str, cfg)) - _CFG_KEYS)
            if unknown:
                allowed = ", ".join(sorted(_CFG_KEYS))
                raise ValueError(f"{where}: unknown keys {', '.join(unknown)} (allowed: {allowed})")
        spec = _cfg_get(cfg, "fn")
        try:
            fn = resolve_reward_fn(spec, base_dir if base_dir is not None else module_search_dir(spec, config_dir))
        except RewardResolveError as exc:
            raise RewardResolveError(f"{where}: {exc}") from exc
        weight = _cfg_get(cfg, "weight", 1.0)
        weight = 1.0 if weight is None else weight
        if not is_finite(weight):
            raise ValueError(f"{where}: weight must be a finite number, got {weight!r}")
        kwargs = _cfg_get(cfg, "kwargs") or {}
        if not isinstance(kwargs, Mapping):
            raise ValueError(f"{where}: kwargs must be a mapping, got {type(kwargs).__name__}")
        timeout_s = _cfg_get(cfg, "timeout_s", DEFAULT_TIMEOUT_S)
        if timeout_s is not None and (isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float))
                                      or not timeout_s > 0):
            raise ValueError(f"{where}: timeout_s must be a positive number of seconds or null, got {timeout_s!r}")
        name = _cfg_get(cfg, "name") or reward_short_name(spec)
        name = _unique_name(str(name), taken)
        taken.add(name)
        reward = SafeReward(name, fn, weight=weight, kwargs=_plain(kwargs), timeout_s=timeout_s)
        preflight = getattr(fn, "preflight", None)
        if preflight is not None:  # a reward behind a server checks it answers before the run (llm_judge)
            preflight(reward.kwargs)
        # how it was found, so a changed file can be resolved again (rlft.rewards.reload)
        reward.spec = spec
        reward.base_dir = base_dir if base_dir is not None else module_search_dir(spec, config_dir)
        rewards.append(reward)
    return RewardSuite(rewards, max_failure_fraction=max_failure_fraction, min_completions=min_completions)
