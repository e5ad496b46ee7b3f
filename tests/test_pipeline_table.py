"""Whether a pipeline's stages helped: the warning rule and the table on hand-made stage records, and, through the
CLI, the pipeline demo in miniature with every stage's eval numbers in pipeline_summary.json and the table."""

import json
import shutil

import pytest

from conftest import ROOT, run_cli
from rlft.pipeline.table import format_table, stage_warnings, with_evals


def record(index, stage, start, end, eval_set="same", status="finished", steps=2, **end_extra):
    ev = {}
    if start is not None:
        ev["start"] = {"reward_mean": start, "n": 8, "eval_set": eval_set}
    if end is not None or end_extra:
        ev["end"] = {"reward_mean": end, "n": 8, "eval_set": eval_set, **end_extra}
    return {"index": index, "name": stage, "stage": stage, "status": status, "steps": steps, "eval": ev}


def test_a_drop_within_the_evals_noise_does_not_warn():
    """Two standard errors of the difference (std over prompts / sqrt(prompts), each eval): 16 prompts with a
    spread of 0.08 give 2 * hypot(0.02, 0.02) = 0.057, so 0.97 -> 0.95 is noise and 0.97 -> 0.90 is a drop."""
    def noisy(index, stage, start, end):
        rec = record(index, stage, start, end, prompt_std=0.08, prompts=16)
        rec["eval"]["start"].update(prompt_std=0.08, prompts=16)
        return rec

    assert stage_warnings([noisy(1, "awr", 0.5, 0.97), noisy(2, "grpo", 0.97, 0.95)]) == [[], []]
    assert stage_warnings([noisy(1, "awr", 0.5, 0.97), noisy(2, "grpo", 0.97, 0.90)]) == [[], [
        "eval reward fell within the stage: 0.97 at the start, 0.9 at the end",
        "eval reward ended below the stage before: 0.9 here, 0.97 at the end of awr"]]
    # without the spread recorded (an older summary.json) every drop counts, as before
    assert stage_warnings([record(1, "grpo", 0.97, 0.95)]) != [[]]


def test_a_stage_that_ends_below_its_start_warns_with_both_numbers():
    assert stage_warnings([record(1, "grpo", 0.5, 0.25)]) == [
        ["eval reward fell within the stage: 0.5 at the start, 0.25 at the end"]]
    assert stage_warnings([record(1, "grpo", 0.25, 0.5)]) == [[]]


def test_a_stage_that_ends_below_the_previous_end_warns_naming_it():
    records = [record(1, "rs_sft", 0.1, 0.6), record(2, "grpo", 0.2, 0.4)]  # up within the stage, below stage 1
    assert stage_warnings(records) == [[], ["eval reward ended below the stage before: 0.4 here, 0.6 at the end "
                                            "of rs_sft"]]


def test_stages_without_eval_neither_warn_nor_break_the_chain():
    records = [record(1, "rs_sft", 0.1, 0.6), record(2, "dpo", None, None), record(3, "grpo", 0.3, 0.5)]
    warnings = stage_warnings(records)
    assert warnings[1] == [] and warnings[2] == ["eval reward ended below the stage before: 0.5 here, 0.6 at the "
                                                 "end of rs_sft"]


def test_different_eval_sets_are_not_compared_across_stages():
    records = [record(1, "orpo", 0.1, 0.9, eval_set="abc"), record(2, "grpo", 0.2, 0.4, eval_set="xyz")]
    assert stage_warnings(records) == [[], ["stage orpo and stage grpo evaluate different prompts or rewards: "
                                            "not comparable"]]


def sampling(n, tokens, temperature, **more):
    return {"n": n, "max_new_tokens": tokens, "temperature": temperature, "top_p": 1.0, "greedy": False,
            "chat_template": "auto", "seed_offset": 7919, "pass_threshold": 1.0, **more}


def test_stages_sampling_their_evals_differently_are_named_not_comparable():
    records = [record(1, "orpo", 0.1, 0.9, eval_set="abc", sampling=sampling(4, 64, 1.0)),
               record(2, "grpo", 0.2, 0.4, eval_set="xyz", sampling=sampling(8, 24, 0.7))]
    warnings = stage_warnings(records)
    assert warnings[0] == []
    assert warnings[1] == ["stage orpo evaluates 4 samples of ≤64 tokens at T=1.0; stage grpo 8 samples of ≤24 "
                           "tokens at T=0.7: not comparable (they differ in eval.n, eval.max_new_tokens, "
                           "eval.temperature; set `eval:` once in the pipeline's defaults)"]
    assert "ended below the stage before" not in format_table(records)  # 0.4 < 0.9, but not comparable


def test_greedy_and_pass_threshold_differences_are_named():
    records = [record(1, "awr", 0.1, 0.9, eval_set="a", sampling=sampling(1, 24, 1.0, greedy=True)),
               record(2, "grpo", 0.2, 0.95, eval_set="b", sampling=sampling(1, 24, 1.0, pass_threshold=0.5))]
    (line,) = stage_warnings(records)[1]
    assert "stage awr evaluates 1 sample of ≤24 tokens greedy; stage grpo 1 sample of ≤24 tokens at T=1.0" in line
    assert "eval.greedy, eval.pass_threshold" in line


def test_records_get_eval_start_end_and_warnings():
    rows = with_evals([record(1, "grpo", 0.5, 0.25), {"index": 2, "name": "ppo", "stage": "ppo", "status": "pending"}])
    assert (rows[0]["eval_start"], rows[0]["eval_end"], len(rows[0]["warnings"])) == (0.5, 0.25, 1)
    assert (rows[1]["eval_start"], rows[1]["eval_end"], rows[1]["warnings"]) == (None, None, [])


def test_table_lines_stage_by_stage_with_warnings_below():
    text = format_table([record(1, "orpo", 0.05, 0.3, preference_accuracy=0.875), record(2, "rs_sft", 0.3, 0.2),
                         record(3, "grpo", None, None, status="pending", steps=None)])
    lines = text.splitlines()
    assert lines[0].split() == ["#", "name", "stage", "status", "steps", "eval", "reward", "(start", "->", "end)"]
    assert lines[1].split()[:5] == ["1", "orpo", "orpo", "finished", "2"]
    assert "0.05 -> 0.3 (held-out pair accuracy 0.875)" in lines[1]
    assert "0.3 -> 0.2" in lines[2]
    assert lines[3] == "    warning: eval reward fell within the stage: 0.3 at the start, 0.2 at the end"
    assert lines[4] == "    warning: eval reward ended below the stage before: 0.2 here, 0.3 at the end of orpo"
    assert lines[5].split() == ["3", "grpo", "grpo", "pending", "-", "-"]


DEMO = ROOT / "configs" / "examples" / "pipeline_demo.yaml"
MINIATURE = ["stages.1.train.max_steps=2", "stages.2.awr.rounds=1", "stages.2.data.max_samples=8",
             "stages.2.train.num_train_epochs=1", "stages.3.train.max_steps=2", "data.eval_prompts=4"]


@pytest.fixture(scope="module")
def miniature_demo(tmp_path_factory):
    """The pipeline demo in miniature, run once from scratch: (its working folder, the CLI's result). A test that
    changes the run works on a copy."""
    cwd = tmp_path_factory.mktemp("miniature_demo")
    return cwd, run_cli("pipeline", "run", DEMO, *MINIATURE, cwd=cwd)


@pytest.mark.e2e
def test_pipeline_demo_reports_each_stages_eval(miniature_demo):
    tmp_path, res = miniature_demo
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads((tmp_path / "runs" / "pipeline_demo" / "pipeline_summary.json").read_text())
    stages = summary["stages"]
    assert [s["stage"] for s in stages] == ["orpo", "awr", "grpo"]
    for s in stages:  # every stage of the demo has rewards, ORPO's scoring its samples only
        assert isinstance(s["eval_start"], float) and isinstance(s["eval_end"], float), s
        assert s["eval"]["end"]["n"] > 0 and isinstance(s["warnings"], list)
    lines = res.stderr.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("#  name"))
    rows = [line.split() for line in lines[header + 1:] if not line.startswith(" ")][:3]
    assert [(r[0], r[2], r[3]) for r in rows] == [("1", "orpo", "finished"), ("2", "awr", "finished"),
                                                  ("3", "grpo", "finished")]
    for r, s in zip(rows, stages):
        assert f"{s['eval_start']:.4g} -> {s['eval_end']:.4g}" in " ".join(r)


@pytest.mark.e2e
def test_stages_evaluating_differently_are_not_compared_and_the_report_draws_one_curve(tmp_path, miniature_demo):
    """The demo in miniature with its last stage's eval sampled otherwise than the shared `eval:`: the table names
    both settings instead of comparing, and `rlft report` on the pipeline folder draws the eval curve across the
    stages beside the per-stage graphs. Stages 1 and 2 are the miniature's (the same settings): a copy of its
    folder without stage 3, which `pipeline run --resume` trains with the changed eval."""
    assert miniature_demo[1].returncode == 0, miniature_demo[1].stderr[-3000:]
    shutil.copytree(miniature_demo[0] / "runs", tmp_path / "runs", symlinks=True)
    shutil.rmtree(tmp_path / "runs" / "pipeline_demo" / "03-grpo")
    res = run_cli("pipeline", "run", DEMO, *MINIATURE, "stages.3.eval.samples_per_prompt=2",
                  "stages.3.eval.temperature=1.0", "--resume", cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "stage 3 (grpo): starting grpo" in res.stderr, res.stderr[-3000:]
    root = tmp_path / "runs" / "pipeline_demo"
    stages = json.loads((root / "pipeline_summary.json").read_text())["stages"]
    assert stages[0]["eval"]["end"]["eval_set"] == stages[1]["eval"]["end"]["eval_set"]  # the shared eval: settings
    assert stages[1]["eval"]["end"]["eval_set"] != stages[2]["eval"]["end"]["eval_set"]
    assert not any("not comparable" in w for w in stages[1]["warnings"])
    expected = ("stage awr evaluates 8 samples of ≤16 tokens at T=0.6; stage grpo 2 samples of ≤16 tokens at T=1.0: "
                "not comparable (they differ in eval.n, eval.temperature")
    assert any(w.startswith(expected) for w in stages[2]["warnings"]), stages[2]["warnings"]
    assert f"warning: {expected}" in res.stderr
    assert not any("ended below the stage before" in w for w in stages[2]["warnings"])

    report = run_cli("report", root, cwd=tmp_path)
    assert report.returncode == 0, report.stderr[-3000:]
    page = (root / "report" / "index.html").read_text()
    assert "<h2>Pipeline</h2>" in page and "id='graph-pipeline_eval'" in page
    assert "the stages evaluate differently" in page  # said beside the curve, as the table says it
    assert (root / "report" / "graphs" / "pipeline_eval.png").stat().st_size > 1000
    for label in ("1-orpo", "2-awr", "3-grpo"):  # each stage's own run on the overlaid graphs
        assert label in page


BAD_EVALS = [[1, 2], "0.5", 3, True, {"start": [1], "end": "x"}, {"start": {"reward_mean": "high"}, "end": {
    "reward_mean": [0.5], "eval_set": ["a"], "preference_accuracy": "most"}}, {"end": {"reward_mean": float("nan")}}]


@pytest.mark.parametrize("ev", BAD_EVALS)
def test_a_wrong_typed_eval_neither_breaks_the_table_nor_the_warnings(ev):
    """A stage summary.json's `eval` of the wrong type (a list, a string, a number where an object belongs) crashed
    the table (issue 35): what is not a number reads as no number."""
    records = [record(1, "orpo", 0.1, 0.9), {**record(2, "grpo", 0.2, 0.3, steps="many"), "eval": ev},
               record(3, "ppo", 0.5, 0.4)]
    rows = with_evals(records)
    assert (rows[1]["eval_start"], rows[1]["eval_end"]) == (None, None)
    text = format_table(records)
    assert text.splitlines()[2].split()[:6] == ["2", "grpo", "grpo", "finished", "-", "-"]


@pytest.mark.parametrize("ev", BAD_EVALS)
def test_pipeline_resume_names_a_stage_summary_with_a_wrong_typed_eval(tmp_path, ev):
    """`pipeline run --resume` over a finished stage whose summary.json holds a wrong-typed `eval`: the stage is
    skipped as finished, the table printed, and the file named, instead of a traceback."""
    stage_dir = tmp_path / "runs" / "01-grpo"
    (stage_dir / "final").mkdir(parents=True)
    (stage_dir / "final" / "config.json").write_text("{}")
    (stage_dir / "summary.json").write_text(json.dumps({"status": "finished", "steps": 2, "eval": ev}))
    (tmp_path / "runs" / "pipeline_summary.json").write_text("{}")  # a folder a pipeline run made
    path = tmp_path / "pipe.yaml"
    path.write_text(f"output_dir: {tmp_path / 'runs'}\nstages:\n  - stage: grpo\n"
                    f"    config: {ROOT / 'configs' / 'examples' / 'grpo_demo.yaml'}\n")
    res = run_cli("pipeline", "run", path, "--resume", timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Traceback" not in res.stderr and "stage 1 (grpo) finished earlier" in res.stderr
    summary = json.loads((tmp_path / "runs" / "pipeline_summary.json").read_text())
    (stage,) = summary["stages"]
    assert stage["status"] == "finished" and (stage["eval_start"], stage["eval_end"]) == (None, None)
    if not (isinstance(ev, dict) and set(ev) == {"end"}):  # NaN is a number of no use, not a damaged file
        assert stage["warnings"] and all(w.startswith(f"{stage_dir / 'summary.json'}: `eval") for w in
                                         stage["warnings"]), stage["warnings"]
        assert f"warning: {stage_dir / 'summary.json'}: `eval" in res.stderr
