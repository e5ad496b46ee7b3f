"""`rlft report RUN_A RUN_B` on two trained runs: one page with the side-by-side (final numbers, the config keys that
differ) and the shared curves overlaid first, including the eval curve with its spread over prompts. The two runs are
the AWR and GRPO stages of the pipeline demo the session trains once (conftest), so nothing is trained here."""

import json
import re

import pytest

from conftest import run_cli

pytestmark = pytest.mark.e2e


def test_two_runs_make_one_comparison_page(pipeline_demo_run, tmp_path):
    pytest.importorskip("matplotlib")
    cwd, res = pipeline_demo_run
    assert res.returncode == 0, res.stderr[-3000:]
    stages = {s["stage"]: cwd / s["dir"] for s in
              json.loads((cwd / "runs/pipeline_demo/pipeline_summary.json").read_text())["stages"]}
    out = tmp_path / "cmp"
    rep = run_cli("report", stages["awr"], stages["grpo"], "-o", out)
    assert rep.returncode == 0, rep.stderr[-3000:]
    page = (out / "index.html").read_text()
    # the config keys that differ, one column per run: the stage itself among them
    diff = re.search(r"<table id=config-diff>(.*?)</table>", page, re.S)
    assert diff, page[:3000]
    assert re.search(r"<tr><td>stage</td><td class=num>awr</td><td class=num>grpo</td></tr>", diff[1]), diff[1][:3000]
    assert "train.output_dir" not in diff[1]  # differs by construction, says nothing
    finals = re.search(r"<table id=final-numbers>(.*?)</table>", page, re.S)[1]
    ends = [json.loads((stages[s] / "summary.json").read_text())["eval"]["end"] for s in ("awr", "grpo")]
    row = re.search(r"<tr><td>eval reward end \(mean ± std over prompts\)</td>(.*?)</tr>", finals)[1]
    for end in ends:  # each run's end eval, with its spread, as summary.json has it
        assert f"{end['reward_mean']:.4g} ± {end['prompt_std']:.4g}" in row, (row, end)
    # the overlaid curves every run logged come first, under Comparison: loss and the eval spread among them
    comparison = page.split("<h2>Comparison</h2>", 1)[1].split("<h2>", 1)[0]
    assert "id='graph-eval_spread'" in comparison and "id='graph-loss'" in comparison, comparison[:2000]
    assert "pass@8" in comparison  # the shared eval samples 8 answers per prompt
    assert (out / "graphs" / "eval_spread.png").read_bytes().startswith(b"\x89PNG")
