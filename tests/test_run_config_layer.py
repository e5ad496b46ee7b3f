"""A run's config.yaml read back as a config layer (`rlft eval RUN`, `rlft rewards try --from-run`): a damaged
value is reported against the run's config.yaml, at its line there, not against the hidden file rlft writes
beside it."""

from __future__ import annotations

import json

from conftest import run_cli


def test_a_damaged_eval_value_names_the_runs_config_yaml(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("stage: grpo\nmodel: {name_or_path: tiny}\ndata: {train: demo}\n"
                                     "rewards: [{fn: char_fraction}]\n"
                                     "eval:\n  temperature: -3\n")
    row = {"step": 1, "prompt_id": 3, "prompt": "Repeat the letter z: ", "completion": "zz",
           "rewards": {"char_fraction": 1.0}, "total": 1.0}
    (run / "completions.jsonl").write_text(json.dumps(row) + "\n")
    res = run_cli("rewards", "try", "--from-run", "run", cwd=tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    line = next(x for x in res.stderr.splitlines() if "eval.temperature" in x)
    assert "run/config.yaml:6" in line and ".rlft-eval-config" not in res.stderr, res.stderr
    assert not (run / ".rlft-eval-config.yaml").exists()
