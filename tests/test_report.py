"""`rlft report` on synthetic run folders: loading, graph planning, the self-contained page, the CLI."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, run_cli
from rlft.monitor.report import build_report, load_run
from rlft.monitor.report.graphs import health_marks, plan_graphs, version_changes
from rlft.monitor.report.html import compress_steps, log_stats
from rlft.monitor.report.load import ReportInputError, unique_names

PNG = b"\x89PNG\r\n\x1a\n"


def _write_jsonl(path: Path, rows) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def make_grpo_run(root: Path, steps: int = 30, prompts: int = 3, group: int = 4, version_at: int | None = 20,
                  extra_metric: str | None = "custom/thing") -> Path:
    """A run folder as a GRPO run writes it: metrics, completions (prompt text once per prompt id),
    health events, reward logs and a summary."""
    root.mkdir(parents=True)
    metrics, comps, logs = [], [], []
    for s in range(1, steps + 1):
        version = 2 if version_at and s >= version_at else 1
        row = {"step": s, "reward": s / steps, "reward_std": 1 - s / steps, "rewards/fmt/mean": 0.5,
               "rewards/answer/mean": s / steps, "rewards/answer/errors": float(s == 5), "kl_policy_ref": 0.01 * s,
               "kl_sample_train_v1": 0.0, "kl_sample_train_v2": 0.001, "entropy": 3.0, "completion_length": 10.0,
               "grad_norm": 1.0, "learning_rate": 1e-5, "kl_coef": 0.05, "loss": 0.1, "reward_version": version}
        if extra_metric:
            row[extra_metric] = float(s)
        metrics.append(row)
        for p in range(prompts):
            if (s + p) % 2:  # each prompt is used on every other step
                continue
            for g in range(group):
                total = round((s + g) / (steps + group), 4)
                comps.append({"step": s, "prompt_id": p, **({"prompt": f"Question {p}?", "answer": str(p)}
                                                           if not any(c["prompt_id"] == p for c in comps) else {}),
                              "completion": f"answer {p} step {s} sample {g}",
                              "rewards": {"fmt": 0.5, "answer": None if g == 3 and s == 5 else total - 0.5},
                              "total": None if g == 3 and s == 5 else total, "advantage": g - 1.5,
                              "reward_version": version})
        logs.append({"step": s, "reward": "answer", "calls": 1, "ms": 2.0 + s, "errors": int(s == 5),
                     "output": f"scored step {s}", "error": "Traceback ...\nValueError: bad" if s == 5 else ""})
    _write_jsonl(root / "metrics.jsonl", metrics)
    (root / "metrics.jsonl").open("a").write('{"step": 31, "rew')  # a torn last line: a run still writing
    _write_jsonl(root / "completions.jsonl", comps)
    _write_jsonl(root / "health.jsonl", [
        {"step": 3, "rule": "kl_high", "level": "warning", "metric": "kl_policy_ref", "value": 0.03, "action": "warn",
         "message": "KL high"},
        {"step": 7, "rule": "grad_norm_critical", "level": "critical", "metric": "grad_norm", "value": 12.0,
         "action": "rollback", "message": "exploding"},
        {"step": 7, "rule": "rollback", "level": "info", "action": "rollback", "source": "checkpoint-5"}])
    _write_jsonl(root / "reward_logs.jsonl", logs)
    (root / "summary.json").write_text(json.dumps({"stage": "grpo", "status": "finished", "steps": steps,
                                                   "wall_s": 12.5, "reward": {"first_mean": 0.1, "last_mean": 0.9}}))
    return root


def make_dpo_run(root: Path, steps: int = 10) -> Path:
    root.mkdir(parents=True)
    _write_jsonl(root / "metrics.jsonl", [
        {"step": s, "loss": 0.7 - 0.01 * s, "rewards/chosen": 0.1 * s, "rewards/rejected": -0.1 * s,
         "rewards/accuracies": 0.5 + 0.04 * s, "rewards/margins": 0.2 * s, "grad_norm": 1.0, "learning_rate": 5e-6}
        for s in range(1, steps + 1)])
    (root / "config.yaml").write_text("# rlft resolved config\nstage: dpo  # stage profile\n")
    return root


# ---- loading ---------------------------------------------------------------------------------
def test_load_run_reads_every_file(tmp_path):
    run = load_run(make_grpo_run(tmp_path / "r"))
    assert run.stage == "grpo" and len(run.metrics) == 30  # the torn line is skipped
    c = run.completions
    assert c.reward_names == ["fmt", "answer"]
    assert [p.text for p in c.prompts] == ["Question 0?", "Question 1?", "Question 2?"]
    assert c.prompts[0].extra == {"answer": "0"}
    assert c.prompts[0].steps == list(range(2, 31, 2)) and c.prompts[1].steps == list(range(1, 31, 2))
    assert sum(p.count for p in c.prompts) == len(c) == 30 * 3 // 2 * 4
    unscored = [i for i in range(len(c)) if c.total[i] is None]
    assert len(unscored) == 1 and c.scores[1][unscored[0]] is None and c.scores[0][unscored[0]] == 0.5
    assert c.length_unit == "characters" and c.length[0] == len(c.text[0])  # no tokenizer in the folder
    assert "reward_version" in c.per_completion and "advantage" in c.per_completion
    assert len(run.health) == 3 and len(run.reward_logs) == 30 and run.summary["status"] == "finished"


def test_stage_from_config_and_no_completions(tmp_path):
    run = load_run(make_dpo_run(tmp_path / "d"))
    assert run.stage == "dpo" and run.completions is None


def test_load_run_rejects_what_is_not_a_run(tmp_path):
    with pytest.raises(ReportInputError, match="no such run folder"):
        load_run(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReportInputError, match="not an rlft run folder"):
        load_run(tmp_path / "empty")
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(ReportInputError, match="not a folder"):
        load_run(tmp_path / "file.txt")


def test_long_completions_are_shortened_in_the_page_only(tmp_path):
    root = tmp_path / "r"
    root.mkdir()
    _write_jsonl(root / "completions.jsonl", [{"step": 1, "prompt": "p", "completion": "x" * 500,
                                               "rewards": {"a": 1.0}, "total": 1.0}])
    c = load_run(root, max_chars=100).completions
    assert c.truncated == 1 and c.text[0].startswith("x" * 100) and "400 more characters" in c.text[0]


def test_odd_values_still_make_a_page(tmp_path):
    root = tmp_path / "r"
    root.mkdir()
    (root / "completions.jsonl").write_text(
        '{"step": 1, "prompt": "p", "completion": "c", "rewards": {"a": NaN}, "total": Infinity, "score_hint": NaN, '
        '"meta": {"k": [1, 2]}}\n{"step": "x", "prompt": null, "rewards": null}\n[1, 2]\n')
    res = build_report([root])
    data = _page_data(res.index.read_text())["runs"][0]["completions"]
    assert data["tot"] == [None] and data["r"] == [[None]] and data["s"] == [1]
    assert "skipped 2 malformed row(s) of completions.jsonl" in res.note  # the text step and the list
    assert data["prompts"][0]["extra"] == {"score_hint": None, "meta": '{"k": [1, 2]}'}


def test_unique_names_add_the_parent_on_collision(tmp_path):
    assert unique_names([tmp_path / "a" / "run", tmp_path / "b" / "run", tmp_path / "c"]) == ["a/run", "b/run", "c"]


def test_helpers_on_worked_examples(tmp_path):
    assert compress_steps([1, 2, 3, 7, 9, 10]) == "1-3, 7, 9-10"
    assert compress_steps([]) == ""
    run = load_run(make_grpo_run(tmp_path / "r"))
    assert version_changes(run.metrics) == [(20, 2)]
    assert health_marks(run) == {"warning": [3], "critical": [7], "rollback": [7]}
    (stats,) = log_stats(run)
    assert stats["reward"] == "answer" and stats["calls"] == 30 and stats["errors"] == 1
    assert stats["ms_mean"] == pytest.approx(sum(2.0 + s for s in range(1, 31)) / 30)
    assert stats["ms_p95"] == 31.0  # the 29th of 30 sorted values (3..32 ms)


# ---- graphs ----------------------------------------------------------------------------------
def test_plan_graphs_grpo(tmp_path):
    graphs = plan_graphs([load_run(make_grpo_run(tmp_path / "r"))])
    titles = {g.title: g for g in graphs}
    for t in ("total_reward (mean)", "total_reward_std", "reward: fmt", "reward: answer", "reward errors",
              "KL to the reference", "sampler vs learner KL", "entropy", "completion length", "grad norm",
              "learning rate", "KL coefficient", "custom"):
        assert t in titles, (t, list(titles))
    assert titles["reward: answer"].section == "Rewards"
    assert titles["custom"].section == "Other metrics" and titles["custom"].series == ["custom/thing"]
    assert len({g.slug for g in graphs}) == len(graphs)


def test_plan_graphs_dpo_stage_specific(tmp_path):
    graphs = plan_graphs([load_run(make_dpo_run(tmp_path / "d"))])
    stage = {g.title for g in graphs if g.section == "Stage"}
    assert stage == {"reward margin", "reward accuracy", "chosen / rejected rewards"}
    assert not any(g.title.startswith("total_reward") for g in graphs)


# ---- the page --------------------------------------------------------------------------------
def _page_data(html: str) -> dict:
    m = re.search(r'<script id="rlft-data" type="application/json">(.*?)</script>', html, re.S)
    return json.loads(m.group(1))


def test_report_page_is_self_contained(tmp_path):
    pytest.importorskip("matplotlib")
    run = make_grpo_run(tmp_path / "r")
    res = build_report([run])
    assert res.index == run / "report" / "index.html" and res.completions == 180
    html = res.index.read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html), "the page must not fetch anything"
    assert "http://" not in html and "https://" not in html
    imgs = re.findall(r"<img [^>]*src='([^']*)'", html)
    assert len(imgs) == res.graphs >= 13 and all(s.startswith("data:image/png;base64,") for s in imgs)
    pngs = sorted((run / "report" / "graphs").glob("*.png"))
    assert len(pngs) == res.graphs and all(p.read_bytes().startswith(PNG) for p in pngs)
    data = _page_data(html)
    (r,) = data["runs"]
    comp = r["completions"]
    assert comp["rewardNames"] == ["fmt", "answer"] and len(comp["t"]) == 180
    assert comp["prompts"][0]["steps"] == "2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30"
    assert comp["extraCols"] == ["answer"] and r["versions"] == [[20, 2]]
    assert len(r["rewardLogs"]) == 30 and "Reward functions changed mid-run" in html
    assert "health events" in html and "grad_norm_critical" in html


def test_completion_text_cannot_break_out_of_the_page(tmp_path):
    root = tmp_path / "r"
    root.mkdir()
    evil = "</script><script>alert(1)</script><!-- <img src=x onerror=alert(2)>"
    _write_jsonl(root / "completions.jsonl", [{"step": 1, "prompt": evil, "completion": evil,
                                               "rewards": {"a": 1.0}, "total": 1.0}])
    html = build_report([root]).index.read_text()
    assert html.count("<script") == 2 and html.count("</script>") == 2
    assert _page_data(html)["runs"][0]["completions"]["t"] == [evil]


def test_dpo_report_says_there_are_no_completions(tmp_path):
    pytest.importorskip("matplotlib")
    res = build_report([make_dpo_run(tmp_path / "d")], tmp_path / "out")
    html = res.index.read_text()
    (r,) = _page_data(html)["runs"]
    assert r["completions"] is None and "DPO trains on fixed preference pairs" in r["noCompletions"]
    assert "Stage-specific" in html and res.graphs >= 5


def test_several_runs_are_overlaid(tmp_path):
    pytest.importorskip("matplotlib")
    a = make_grpo_run(tmp_path / "a" / "run", steps=20)
    b = make_grpo_run(tmp_path / "b" / "run", steps=40, version_at=None, extra_metric=None)
    res = build_report([a, b], tmp_path / "cmp")
    assert res.index == tmp_path / "cmp" / "index.html"
    data = _page_data(res.index.read_text())
    assert [r["name"] for r in data["runs"]] == ["a/run", "b/run"]
    assert res.completions == 20 * 6 + 40 * 6
    runs = [load_run(a, "a/run"), load_run(b, "b/run")]
    assert res.graphs == len(plan_graphs(runs)) == len(plan_graphs(runs[1:])) + 1  # shared graphs + a's extra metric


# ---- CLI -------------------------------------------------------------------------------------
def test_cli_report(tmp_path):
    run = make_dpo_run(tmp_path / "r")
    res = run_cli("report", run, "-o", tmp_path / "out")
    assert res.returncode == 0, res.stderr
    assert "report written to" in res.stdout and (tmp_path / "out" / "index.html").is_file()
    bad = run_cli("report", tmp_path / "nope")
    assert bad.returncode == 2 and "no such run folder" in bad.stderr and "Traceback" not in bad.stderr


def test_report_and_help_import_no_heavy_library(tmp_path):
    run = tmp_path / "r"
    run.mkdir()
    _write_jsonl(run / "completions.jsonl", [{"step": 1, "prompt": "p", "completion": "c", "rewards": {}, "total": 0}])
    heavy = {"torch", "transformers", "trl", "peft", "datasets", "accelerate"}
    code = ("import sys, runpy; sys.argv = ['rlft'] + sys.argv[1:]\n"
            "try:\n    runpy.run_module('rlft.cli', run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "print('MODULES', ' '.join(sorted(sys.modules)))")
    for args, banned in ((["--help"], heavy | {"matplotlib"}), (["report", str(run)], heavy)):
        proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT)
        line = next(x for x in proc.stdout.splitlines() if x.startswith("MODULES"))
        loaded = {m.partition(".")[0] for m in line.split()[1:]}
        assert not loaded & banned, (args, sorted(loaded & banned))


# ---- the eval curve with its spread, the side-by-side ----------------------------------------------------------
def _add_eval(run: Path, std: bool) -> None:
    rows = [{"step": s, "eval_reward": 0.1 * s, "eval_pass_at_k": 0.05 * s,
             **({"eval_prompt_std": 0.02 * s} if std else {})} for s in (10, 20)]
    with (run / "metrics.jsonl").open("a") as f:
        f.write("\n" + "".join(json.dumps(r) + "\n" for r in rows))
    summary = json.loads((run / "summary.json").read_text())
    summary["eval"] = {"start": {"reward_mean": 0.01, "prompt_std": 0.005 if std else None, "pass_at_k": 0.0, "k": 4},
                       "end": {"reward_mean": 0.9, "prompt_std": 0.03 if std else None, "pass_at_k": 1.0, "k": 4}}
    (run / "summary.json").write_text(json.dumps(summary))


def test_eval_points_read_summary_and_rows(tmp_path):
    from rlft.monitor.report.compare import eval_k, eval_points

    run = make_grpo_run(tmp_path / "r", steps=30)
    _add_eval(run, std=True)
    loaded = load_run(run)
    pts = eval_points(loaded)
    assert [(p.step, p.mean, p.std, p.pass_at_k) for p in pts] == [
        (0, 0.01, 0.005, 0.0), (10, 1.0, 0.2, 0.5), (20, 2.0, 0.4, 1.0), (30, 0.9, 0.03, 1.0)]
    assert eval_k(loaded) == 4


@pytest.mark.parametrize("std", [True, False])
def test_eval_spread_graph_only_where_eval_rows_carry_std(tmp_path, std):
    pytest.importorskip("matplotlib")
    run = make_grpo_run(tmp_path / "r", steps=30)
    _add_eval(run, std=std)
    res = build_report([run], tmp_path / "out")
    page = res.index.read_text()
    assert ("id='graph-eval_spread'" in page) is std
    assert (tmp_path / "out" / "graphs" / "eval_spread.png").is_file() is std
    if std:
        assert "pass@4" in page.split("id='graph-eval_spread'", 1)[1].split("</figure>", 1)[0]
    assert "id=comparison" not in page  # one run: no side-by-side


def test_two_runs_get_a_side_by_side(tmp_path):
    pytest.importorskip("matplotlib")
    a = make_grpo_run(tmp_path / "a" / "run", steps=20)
    b = make_grpo_run(tmp_path / "b" / "run", steps=20)
    for run, lr, extra in ((a, "1.0e-05", ""), (b, "3.0e-05", "  seed: 3\n")):
        (run / "config.yaml").write_text(f"stage: grpo   # a comment\ntrain:\n  learning_rate: {lr}\n{extra}"
                                         f"  output_dir: {run}\ngrpo:\n  group_size: 4\n")
    _add_eval(a, std=True)
    res = build_report([a, b], tmp_path / "cmp")
    page = res.index.read_text()
    diff = re.search(r"<table id=config-diff>(.*?)</table>", page, re.S)[1]
    keys = re.findall(r"<tr><td>([^<]+)</td>", diff)
    assert keys == ["train.learning_rate", "train.seed"], diff  # output_dir differs by construction: left out
    assert "<td class=num>(absent)</td><td class=num>3</td>" in diff
    finals = re.search(r"<table id=final-numbers>(.*?)</table>", page, re.S)[1]
    assert "0.9 ± 0.03" in finals and "1 (k=4)" in finals
    comparison = page.split("<h2>Comparison</h2>", 1)[1].split("<h2>", 1)[0]
    for slug in ("total_reward_mean", "kl_to_the_reference", "loss", "eval_spread"):
        assert f"id='graph-{slug}'" in comparison, slug
