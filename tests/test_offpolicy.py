"""The scheduling of sampling ahead of the learner (rlft.rollout.offpolicy), on worked numbers and a fake sampler."""

import threading

import pytest

from rlft.rollout.offpolicy import GenerationWorker, is_stale, overlap_seconds, staleness_metrics


def test_is_stale_counts_iterations_between_sampler_and_learner():
    assert not is_stale(sampled_version=3, learner_iteration=5, max_steps_off_policy=2)
    assert is_stale(sampled_version=2, learner_iteration=5, max_steps_off_policy=2)
    assert not is_stale(5, 5, 0) and is_stale(4, 5, 0)


def test_staleness_metrics_worked_numbers():
    assert staleness_metrics([0, 1, 2, 1]) == {"async/staleness_mean": 1.0, "async/staleness_max": 2.0}
    assert staleness_metrics([]) == {"async/staleness_mean": 0.0, "async/staleness_max": 0.0}


def test_overlap_seconds_worked_numbers():
    sampling = [(0.0, 2.0), (3.0, 5.0)]
    training = [(1.0, 4.0)]
    assert overlap_seconds(sampling, training) == pytest.approx(2.0)  # 1-2 and 3-4
    assert overlap_seconds(sampling, [(6.0, 7.0)]) == 0.0


def _batches(n, rows=4):
    for b in range(n):
        yield b, [{"prompt": f"p{b}-{i}"} for i in range(rows)]


class _Sampler:
    """A fake policy: records which weights version sampled each batch."""

    def __init__(self):
        self.weights = None
        self.loaded = []

    def load(self, w):
        self.weights = w
        self.loaded.append(w["v"])

    def generate(self, rows, chunks):
        size = len(rows) // chunks
        for c in range(chunks):
            yield {"v": self.weights["v"], "prompts": [r["prompt"] for r in rows[c * size:(c + 1) * size]]}


def test_worker_never_runs_more_than_k_versions_ahead():
    s = _Sampler()
    worker = GenerationWorker(_batches(6), s.generate, s.load, max_steps_off_policy=2).start()
    try:
        staleness = []
        for it in range(6):
            worker.publish(it, {"v": it})
            item = worker.take(timeout=10)
            assert item.batch == it
            assert item.payload["v"] == item.version
            staleness.append(it - item.version)
        assert max(staleness) <= 2
        assert staleness[0] == 0
    finally:
        worker.stop()


def test_worker_with_zero_lag_waits_for_the_learner_each_iteration():
    s = _Sampler()
    worker = GenerationWorker(_batches(4), s.generate, s.load, max_steps_off_policy=0).start()
    try:
        for it in range(4):
            worker.publish(it, {"v": it})
            item = worker.take(timeout=10)
            assert item.version == it and item.payload["v"] == it
            with pytest.raises(Exception):  # batch it+1 is not sampled before version it+1 exists
                worker.take(timeout=0.2)
    finally:
        worker.stop()


def test_chunks_of_one_batch_share_one_weights_version_and_split_rows_in_order():
    s = _Sampler()
    worker = GenerationWorker(_batches(2, rows=6), s.generate, s.load, max_steps_off_policy=0, chunks=3).start()
    try:
        worker.publish(0, {"v": 0})
        items = [worker.take(timeout=10) for _ in range(3)]
        assert [i.chunk for i in items] == [0, 1, 2]
        assert {i.version for i in items} == {0}
        assert [p for i in items for p in i.payload["prompts"]] == [f"p0-{k}" for k in range(6)]
    finally:
        worker.stop()


def test_a_resumed_worker_waits_for_the_restored_weights():
    s = _Sampler()
    worker = GenerationWorker(((b, rows) for b, rows in _batches(10) if b >= 7), s.generate, s.load,
                              max_steps_off_policy=3, first_version=7).start()
    try:
        with pytest.raises(Exception):
            worker.take(timeout=0.2)  # nothing sampled with the initial (pre-resume) weights
        worker.publish(7, {"v": 7})
        assert worker.take(timeout=10).version == 7
    finally:
        worker.stop()


def test_a_sampler_failure_is_raised_in_the_learner():
    def boom(rows, chunks):
        raise ValueError("out of memory while sampling")

    worker = GenerationWorker(_batches(2), boom, lambda w: None, max_steps_off_policy=1).start()
    try:
        worker.publish(0, {})
        with pytest.raises(RuntimeError, match="out of memory while sampling"):
            worker.take(timeout=10)
    finally:
        worker.stop()


def test_stop_unblocks_a_worker_waiting_on_a_full_queue():
    s = _Sampler()
    worker = GenerationWorker(_batches(50), s.generate, s.load, max_steps_off_policy=5).start()
    worker.publish(0, {"v": 0})
    worker.take(timeout=10)
    worker.stop()
    assert not any(t.name == "rlft-sampler" and t.is_alive() for t in threading.enumerate())


def test_learner_clock_worked_numbers():
    from rlft.rollout.offpolicy import LearnerClock

    clock = LearnerClock()
    clock.start, clock.waits = 10.0, [(10.0, 11.0)]  # waited 1 s for the first chunk, then computed 11 -> 14
    m = clock.end(sampling_spans=[(9.0, 11.0), (11.5, 13.5)], now=14.0)
    assert m["async/wait_s"] == 1.0 and m["time/training_s"] == 3.0
    # sampling inside the window: 10-11 (while waiting) and 11.5-13.5 (while computing): 2 of 3 s overlapped
    assert m["async/overlap_frac"] == pytest.approx(2 / 3)
