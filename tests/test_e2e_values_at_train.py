"""Through the CLI on the tiny model: values validate-config cannot judge end as one line naming the key, exit 2,
never a traceback."""

from __future__ import annotations

import json

import pytest

from conftest import ROOT, run_cli

pytestmark = pytest.mark.e2e
DEMO = ROOT / "configs" / "examples" / "grpo_demo.yaml"


def test_a_trl_value_trl_declares_no_range_for_is_named_at_the_first_step(tmp_path):
    (tmp_path / "my.yaml").write_text("trl:\n  top_k: -1\n")
    out = tmp_path / "run"
    res = run_cli("train", "--stage", "grpo", "--hw", "cpu", "-c", DEMO, "-c", tmp_path / "my.yaml",
                  f"train.output_dir={out}", "train.max_steps=1", "data.eval_prompts=0", cwd=tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-3000:]
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("error: trl.top_k (my.yaml:2): refused at the first training step") and "-1" in last
    assert json.loads((out / "summary.json").read_text())["exit_code"] == 2
