"""Generation ahead of the learner: a worker thread samples the next batches while the learner trains.

The shapes follow tinker-cookbook's streaming and async ("off-by-K") modes:

* The learner publishes its trainable weights at every training-iteration boundary as version `v`
  (v = iterations done). `WeightBoard` holds the newest copy; the worker loads it into its own sampler
  model before each batch, so the learner never waits for a copy to finish.
* Batch `b` (trained at iteration `b`) may start sampling once the learner has published version
  `b - max_steps_off_policy` (admission control, as AReaL bounds staleness): the worker runs at most
  K iterations ahead and every batch it hands over is at most K versions old. `max_steps_off_policy`
  0 is on-policy: the worker waits for the learner each iteration (streaming still overlaps the
  minibatches of one iteration with their training).
* The learner still checks every chunk (`is_stale`) and drops and re-samples one that is older than
  the limit, so the bound holds whatever produced the chunk (a resumed run, a future multi-worker
  sampler).
* Each batch is handed over in `chunks` pieces (streaming minibatches) as soon as each is ready: training
  on the first chunk starts while the worker finishes the rest. All chunks of one batch are sampled with
  the same weights.

Nothing here knows about trainers: `generate(rows, chunks) -> one payload per chunk` is passed in. Pure helpers
(`is_stale`, `staleness_metrics`, `overlap_seconds`) are unit-tested on worked numbers.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

__all__ = ["Generated", "GenerationWorker", "LearnerClock", "WeightBoard", "is_stale", "overlap_seconds",
           "sampler_copy", "staleness_metrics", "take_fresh", "trainable_weights"]


def is_stale(sampled_version: int, learner_iteration: int, max_steps_off_policy: int) -> bool:
    """A chunk sampled with weights `sampled_version` is too old to train at `learner_iteration`."""
    return learner_iteration - sampled_version > max_steps_off_policy


def staleness_metrics(staleness: list[int]) -> dict[str, float]:
    """Mean and max steps off policy of the chunks trained in one iteration (0 = on-policy)."""
    if not staleness:
        return {"async/staleness_mean": 0.0, "async/staleness_max": 0.0}
    return {"async/staleness_mean": sum(staleness) / len(staleness), "async/staleness_max": float(max(staleness))}


def overlap_seconds(spans_a: list[tuple[float, float]], spans_b: list[tuple[float, float]]) -> float:
    """Total time covered by both span lists (each span a (start, end) in seconds; spans within a list
    do not overlap each other)."""
    total = 0.0
    for a0, a1 in spans_a:
        for b0, b1 in spans_b:
            total += max(0.0, min(a1, b1) - max(a0, b0))
    return total


def trainable_weights(policy) -> dict:
    """A copy of the weights the learner trains (the adapter under LoRA): what the sampler needs each iteration."""
    return {n: p.detach().clone() for n, p in policy.named_parameters() if p.requires_grad}


def sampler_copy(policy):
    """(sampler, load): a frozen copy of the policy in eval mode, and `load(weights)` that copies published
    `trainable_weights` into it by name."""
    import copy

    import torch

    sampler = copy.deepcopy(policy).eval()
    sampler.requires_grad_(False)
    params = dict(sampler.named_parameters())

    def load(weights: dict) -> None:
        with torch.no_grad():
            for name, value in weights.items():
                params[name].copy_(value)

    return sampler, load


class LearnerClock:
    """The learner's side of the timing, one window per training iteration: how long it waited for samples,
    how long it computed, and how much of the sampler's time ran while it computed."""

    def __init__(self):
        self.start: float | None = None
        self.waits: list[tuple[float, float]] = []

    def begin(self) -> None:
        self.start, self.waits = time.perf_counter(), []

    def wait(self, take: Callable[[], Any]) -> Any:
        """`take()`, with the time it blocks counted as waiting."""
        t0 = time.perf_counter()
        try:
            return take()
        finally:
            self.waits.append((t0, time.perf_counter()))

    def end(self, sampling_spans: list[tuple[float, float]], now: float | None = None) -> dict[str, float]:
        """Metrics of the window since `begin`: time/training_s, async/wait_s, async/overlap_frac."""
        now = time.perf_counter() if now is None else now
        start = self.start if self.start is not None else now
        wait = sum(b - a for a, b in self.waits)
        busy, cursor = [], start
        for a, b in self.waits:
            busy.append((cursor, a))
            cursor = b
        busy.append((cursor, now))
        spans = [(max(a, start), min(b, now)) for a, b in sampling_spans if b > start and a < now]
        sampling = sum(b - a for a, b in spans)
        return {"time/training_s": now - start - wait, "async/wait_s": wait,
                "async/overlap_frac": overlap_seconds(spans, busy) / sampling if sampling > 0 else 0.0}


def take_fresh(worker: "GenerationWorker", clock: LearnerClock, iteration: int,
               max_steps_off_policy: int) -> tuple["Generated", int | None]:
    """The learner's next chunk, which must be meant for `iteration`, and its staleness; None instead of the
    staleness when it is older than the limit (the caller drops it and samples again)."""
    item = clock.wait(worker.take)
    if item.batch != iteration:
        raise RuntimeError(f"the sampler handed batch {item.batch} to iteration {iteration}")
    stale = is_stale(item.version, iteration, max_steps_off_policy)
    return item, None if stale else iteration - item.version


class WeightBoard:
    """The newest published learner weights and their version; the worker waits on it."""

    def __init__(self):
        self._cond = threading.Condition()
        self._version = -1
        self._weights: dict | None = None
        self._closed = False

    def publish(self, version: int, weights: dict) -> None:
        with self._cond:
            self._version, self._weights = version, weights
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def wait_for(self, min_version: int) -> tuple[int, dict] | None:
        """The newest (version, weights) once version >= min_version; None when closed first."""
        with self._cond:
            self._cond.wait_for(lambda: self._closed or self._version >= min_version)
            if self._closed:
                return None
            return self._version, self._weights


@dataclass
class Generated:
    """One chunk of one batch, sampled by the worker."""
    batch: int                  # iteration index the batch is meant for
    chunk: int                  # 0 .. chunks-1
    version: int                # learner weights version the sampler used
    rows: list                  # the dataset rows (prompt repeated group_size times, whole groups)
    payload: Any                # what `generate` returned for these rows
    span: tuple[float, float]   # (start, end) of the sampling, time.perf_counter seconds
    error: BaseException | None = field(default=None, repr=False)


class GenerationWorker:
    """Samples batch after batch in a daemon thread, at most `max_steps_off_policy` versions ahead.

    `batches` yields (index, rows); `load(weights)` puts published weights into the sampler model;
    `generate(rows, chunks)` samples the batch and yields one payload per chunk, in order (rows split
    evenly: chunk c is rows[c*len/chunks : (c+1)*len/chunks]). The learner calls `publish` at each iteration boundary
    and `take()` for the next chunk, in order.
    """

    def __init__(self, batches: Iterator[tuple[int, list]], generate: Callable[[list, int], Iterable[Any]],
                 load: Callable[[dict], None], max_steps_off_policy: int, chunks: int = 1, first_version: int = 0):
        if max_steps_off_policy < 0:
            raise ValueError(f"max_steps_off_policy must be >= 0, got {max_steps_off_policy}")
        self.batches, self.generate, self.load = batches, generate, load
        self.max_steps_off_policy, self.chunks = max_steps_off_policy, chunks
        self.first_version = first_version  # the learner's weights at the start (a resumed run's step)
        self.board = WeightBoard()
        # at most K+1 batches sampled and not yet taken: bounds memory, admission bounds staleness
        self.out: queue.Queue[Generated] = queue.Queue(maxsize=(max_steps_off_policy + 1) * chunks)
        self._stop = threading.Event()
        self._loaded = -1
        self.spans: deque[tuple[float, float]] = deque(maxlen=4096)  # (start, end) of each chunk's sampling
        self.sampling_since: float | None = None  # start of the chunk being sampled now
        self._thread = threading.Thread(target=self._run, name="rlft-sampler", daemon=True)

    def start(self) -> "GenerationWorker":
        self._thread.start()
        return self

    def publish(self, version: int, weights: dict) -> None:
        self.board.publish(version, weights)

    def take(self, timeout: float | None = None) -> Generated:
        """The next chunk in order; re-raises a failure of the worker in the learner's thread."""
        item = self.out.get(timeout=timeout)
        if item.error is not None:
            raise RuntimeError(f"the sampler thread failed on batch {item.batch}: {item.error}") from item.error
        return item

    def sampling_spans(self, until: float) -> list[tuple[float, float]]:
        """Every chunk's sampling span so far, the one in progress cut at `until`."""
        since = self.sampling_since
        done = list(self.spans)
        return done + [(since, until)] if since is not None and (not done or done[-1][0] != since) else done

    def stop(self) -> None:
        self._stop.set()
        self.board.close()
        while True:  # unblock a worker waiting on a full queue
            try:
                self.out.get_nowait()
            except queue.Empty:
                break
        self._thread.join(timeout=60)

    def _put(self, item: Generated) -> bool:
        while not self._stop.is_set():
            try:
                self.out.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        try:
            for index, rows in self.batches:
                got = self.board.wait_for(max(index - self.max_steps_off_policy, self.first_version))
                if got is None or self._stop.is_set():
                    return
                version, weights = got
                if version != self._loaded:
                    self.load(weights)
                    self._loaded = version
                size = len(rows) // self.chunks
                start = self.sampling_since = time.perf_counter()
                for c, payload in enumerate(self.generate(rows, self.chunks)):
                    span = (start, time.perf_counter())
                    self.spans.append(span)
                    self.sampling_since = None
                    if not self._put(Generated(index, c, version, rows[c * size:(c + 1) * size], payload, span)):
                        return
                    start = self.sampling_since = time.perf_counter()
                self.sampling_since = None
        except BaseException as exc:  # handed to the learner, which raises it in its own thread
            self._put(Generated(-1, -1, -1, [], None, (0.0, 0.0), error=exc))
