"""summary.json and the end-of-train table, on synthetic run folders (worked numbers)."""

from __future__ import annotations

import io
import json

import pytest

from rlft.monitor.summary import best_checkpoint, headline, print_summary, summary_lines, write_summary


def _metrics(tmp_path, rows):
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 9')


def test_headline_first_and_last_window():
    rows = [{"step": s, "reward": float(s)} for s in range(1, 31)]
    h = headline(rows)
    assert h == {"metric": "reward", "higher_is_better": True, "window": 10, "first_mean": 5.5, "last_mean": 25.5}
    short = headline([{"step": 1, "reward": 1.0}, {"step": 2, "reward": 3.0}, {"step": 3, "reward": None}])
    assert short["window"] == 1 and short["first_mean"] == 1.0 and short["last_mean"] == 3.0


def test_headline_for_preference_and_loss_only_runs():
    assert headline([{"step": 1, "loss": 1.0, "rewards/margins": 0.5}])["metric"] == "rewards/margins"
    h = headline([{"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.0}])
    assert h["metric"] == "loss" and h["higher_is_better"] is False
    assert headline([{"step": 1}]) is None


def test_best_checkpoint_scores_the_window_before_each_save(tmp_path):
    # reward rises to step 20, then collapses: checkpoint-20 is the best, not the last one
    rows = [{"step": s, "reward": s / 20 if s <= 20 else 0.1} for s in range(1, 41)]
    cands = [(10, tmp_path / "checkpoint-10"), (20, tmp_path / "checkpoint-20"), (40, tmp_path / "final")]
    best = best_checkpoint(rows, cands, headline(rows))
    assert best["step"] == 20 and best["path"].endswith("checkpoint-20")
    assert best["value"] == pytest.approx(sum(s / 20 for s in range(11, 21)) / 10)
    loss_rows = [{"step": s, "loss": 1.0 / s} for s in range(1, 21)]  # lower is better: the last one
    assert best_checkpoint(loss_rows, cands[:2], headline(loss_rows))["step"] == 20
    assert best_checkpoint(rows, [], headline(rows)) is None


def test_write_summary_merges_and_prints(tmp_path):
    _metrics(tmp_path, [{"step": s, "reward": s / 20, "loss": 0.5} for s in range(1, 21)])
    (tmp_path / "summary.json").write_text(json.dumps({"eval": {"start": {"reward_mean": 0.1, "n": 8},
                                                                "end": {"reward_mean": 0.8, "n": 8}}}))
    s = write_summary(tmp_path, stage="grpo", status="finished", steps=20, wall_s=12.345,
                      checkpoints=[(10, tmp_path / "checkpoints" / "checkpoint-10"), (20, tmp_path / "final")],
                      max_steps=20)
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk == s
    assert s["eval"]["end"]["reward_mean"] == 0.8  # kept from the stage
    assert s["status"] == "finished" and s["steps"] == 20 and s["wall_s"] == 12.35
    assert s["reward"] == {"first_mean": pytest.approx(0.275), "last_mean": pytest.approx(0.775), "window": 10}
    assert s["best_checkpoint"]["step"] == 20 and s["last"] == {"reward": 1.0, "loss": 0.5}
    assert s["report_command"] == f"rlft report {tmp_path}"
    labels = dict(summary_lines(s, tmp_path))
    assert labels["status"] == "finished at step 20 of 20" and labels["wall time"] == "12.3 s"
    assert labels["reward"] == "0.275 (first 10 steps) -> 0.775 (last 10 steps)"
    assert labels["eval reward"] == "0.1 (start) -> 0.8 (end)"
    from rich.console import Console

    buf = io.StringIO()
    print_summary(s, tmp_path, Console(file=buf, width=200))
    text = buf.getvalue()
    assert "rlft run summary" in text and "best checkpoint" in text and f"rlft report {tmp_path}" in text


def test_write_summary_without_metrics(tmp_path):
    s = write_summary(tmp_path, stage="dpo", status="failed", steps=0, wall_s=0.5)
    assert s["headline"] is None and s["best_checkpoint"] is None and s["last"] == {}
    assert dict(summary_lines(s, tmp_path))["status"] == "failed at step 0"
