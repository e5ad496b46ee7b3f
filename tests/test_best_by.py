"""train.best_by=eval: the best saved model is the one whose eval reward, measured at its step, is highest (the
final model judged by eval.end); without an eval at any saved step the training reward decides."""

import json
from pathlib import Path

from rlft.monitor.summary import best_by_eval, run_numbers


def _write(tmp_path, rows):
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_best_by_eval_worked_numbers():
    evals = [{"step": 2, "eval_reward": 0.3}, {"step": 4, "eval_reward": 0.5}, {"step": 5, "eval_reward": 0.9}]
    saved = [(2, Path("c2")), (4, Path("c4")), (6, Path("final"))]
    assert best_by_eval(evals, saved, 0.4, 6)["path"] == "c4"  # step 5 is not a saved model
    assert best_by_eval(evals, saved, 0.5, 6)["path"] == "final"  # a tie goes to the later one
    assert best_by_eval([], [(2, Path("c2"))], None, 6) is None


def test_run_numbers_use_the_eval_when_asked(tmp_path):
    rows = [{"step": s, "reward": r} for s, r in enumerate([0.1, 0.2, 0.9, 0.95], start=1)]
    _write(tmp_path, rows + [{"step": 2, "eval_reward": 0.6}, {"step": 4, "eval_reward": 0.2}])
    saved = [(2, tmp_path / "checkpoint-2"), (4, tmp_path / "final")]
    by_train = run_numbers(tmp_path, saved)["best_checkpoint"]
    by_eval = run_numbers(tmp_path, saved, best_by="eval", eval_end=0.2, steps=4)["best_checkpoint"]
    assert by_train["step"] == 4 and by_train["metric"] == "reward"
    assert by_eval == {"path": str(tmp_path / "checkpoint-2"), "step": 2, "metric": "eval_reward", "value": 0.6,
                       "window": 1}
