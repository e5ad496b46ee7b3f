"""Property tests: random damage to the rows rlft reads back from run folders. Every reader (the report, the
pipeline table of `pipeline run --resume`, `rewards try --from-run`, the RS-SFT/AWR samples log and rounds.json,
the end-of-run summary over metrics.jsonl, the resume's log trimming) either skips a malformed row with a note or
stops with rlft's one-line error; never a traceback."""

import json
import math
import random
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from conftest import ROOT
from rlft.cli import app
from test_property import PROFILE, _leaves, _no_crash, _set, hostile_values, json_values
from test_report import make_grpo_run

runner = CliRunner()
DEMO = ROOT / "configs" / "examples" / "grpo_demo.yaml"


def _eval_block(mean: float) -> dict:
    """An eval part as summary.json holds it."""
    return {"reward_mean": mean, "pass_at_k": 0.5, "prompt_std": 0.1, "k": 4, "n": 8, "prompts": 2, "unscored": 0,
            "eval_set": "abc123", "per_reward": {"char_fraction": mean}, "reward_failures": {"char_fraction": 0},
            "sampling": {"n": 4, "max_new_tokens": 16, "temperature": 1.0, "top_p": 1.0, "greedy": False,
                         "chat_template": "auto", "seed_offset": 7919, "pass_threshold": 1.0, "batch_size": None}}


def _summary() -> dict:
    return {"stage": "grpo", "status": "finished", "steps": 2, "wall_s": 3.5, "exit_code": 0,
            "last": {"reward": 0.5}, "eval": {"start": _eval_block(0.2), "end": _eval_block(0.4)},
            "headline": {"metric": "reward", "higher_is_better": True, "window": 1, "first_mean": 0.1,
                         "last_mean": 0.5},
            "best_checkpoint": {"path": "final", "step": 2, "metric": "reward", "value": 0.5, "window": 1}}


@st.composite
def damaged_object(draw, make):
    """`make()` with one to three of its values (at any depth) replaced by hostile ones, or deleted."""
    data = make()
    rng = random.Random(draw(st.integers(0, 2**32)))
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _leaves(data) if p]
        if not paths:
            break
        target = rng.choice(paths)
        try:
            if draw(st.booleans()):
                _set(data, target, draw(hostile_values))
            else:
                node = data
                for part in target[:-1]:
                    node = node[part]
                del node[target[-1]]
        except (KeyError, IndexError, TypeError):
            pass
    return data


def _dumps(value) -> str:
    return json.dumps(value, allow_nan=True)


# --- the pipeline table: `pipeline run --resume` over finished stages, then `rlft report` on the pipeline ------

def _finished_stage(folder: Path, summary) -> None:
    (folder / "final").mkdir(parents=True)
    (folder / "final" / "config.json").write_text("{}")
    (folder / "summary.json").write_text(_dumps(summary))
    (folder / "config.yaml").write_text("stage: grpo\nmodel:\n  name_or_path: tiny\n")  # the next stage's init_from


@settings(PROFILE, max_examples=6)
@given(summaries=st.lists(damaged_object(_summary), min_size=2, max_size=2))
def test_pipeline_table_and_report_on_damaged_stage_summaries(tmp_path_factory, summaries):
    tmp = tmp_path_factory.mktemp("pipe")
    runs = tmp / "runs"
    for i, summary in enumerate(summaries, 1):
        summary = {**summary, "status": "finished"} if isinstance(summary, dict) else summary
        _finished_stage(runs / f"0{i}-grpo", summary)  # the folder of stage i: index and stage, not its name
    (runs / "pipeline_summary.json").write_text("{}")  # a folder a pipeline run made
    path = tmp / "pipe.yaml"
    path.write_text(f"output_dir: {runs}\nstages:\n" + "".join(
        f"  - {{stage: grpo, name: grpo{i}, config: {DEMO}}}\n" for i in (1, 2)))
    res = runner.invoke(app, ["pipeline", "run", str(path), "--resume"])
    _no_crash(res, allowed=(0, 1, 2))
    # both stages read back as finished and skipped: the table is made from the damaged summaries, nothing trains
    assert not any((runs / f"0{i}-grpo" / "metrics.jsonl").exists() for i in (1, 2)), res.output[-2000:]
    table = json.loads((runs / "pipeline_summary.json").read_text())
    assert [s["name"] for s in table["stages"]] == ["grpo1", "grpo2"]
    res = runner.invoke(app, ["report", str(runs), "-o", str(tmp / "report")])
    _no_crash(res)


@settings(PROFILE, max_examples=40)
@given(record=damaged_object(lambda: {"index": 2, "name": "b", "stage": "grpo", "status": "finished", "steps": 2,
                                      "dir": "runs/02-b", **{k: _summary()[k] for k in ("eval", "wall_s")}}))
def test_the_table_of_pipeline_summary_records_never_raises(record):
    """pipeline_summary.json's own records (what `write_pipeline_summary` reads back for stages it did not run)."""
    from rlft.pipeline.table import format_table, with_evals

    good = {"index": 1, "name": "a", "stage": "orpo", "status": "finished", "steps": 2, "eval": _summary()["eval"]}
    records = [good, record] if isinstance(record, dict) else [good]
    format_table(records)
    json.dumps(with_evals(records), default=str)


# --- the report on damaged eval completions, samples and eval parts of summary.json ----------------------------

REPORT_FILES = ["eval_completions.jsonl", "samples.jsonl", "metrics.jsonl", "completions.jsonl", "summary.json"]


def _with_eval_and_samples(root: Path) -> Path:
    make_grpo_run(root, steps=6)
    evals = [{"step": s, "prompt_id": f"eval-{i}", "prompt": f"Q{i}", "completion": "zz", "split": "eval",
              "rewards": {"char_fraction": 0.5, "boom": None}, "total": 0.5, "reward_failures": ["boom"]}
             for s in (0, 6) for i in range(2)]
    (root / "eval_completions.jsonl").write_text("".join(_dumps(r) + "\n" for r in evals))
    samples = [{"round": 1, "prompt_id": p, "sample": g, "prompt": f"Q{p}", "completion": "zz",
                "rewards": {"char_fraction": 0.5}, "total": 0.5, "finished": True, "kept": g == 0}
               for p in range(2) for g in range(2)]
    (root / "samples.jsonl").write_text("".join(_dumps(r) + "\n" for r in samples))
    summary = {**json.loads((root / "summary.json").read_text()), "eval": _summary()["eval"]}
    (root / "summary.json").write_text(_dumps(summary))
    return root


@st.composite
def row_damage(draw):
    """[(file, line index seed, replacement)]: a row replaced by any JSON value, or one of its fields by one."""
    return [(draw(st.sampled_from(REPORT_FILES)), draw(st.integers(0, 2**31)), draw(json_values),
             draw(st.booleans())) for _ in range(draw(st.integers(1, 4)))]


def _damage_rows(root: Path, damage) -> None:
    for name, seed, value, whole in damage:
        path, rng = root / name, random.Random(seed)
        if name == "summary.json":
            data = json.loads(path.read_text())
            target = rng.choice([p for p in _leaves(data) if p])
            _set(data, target, value)
            path.write_text(_dumps(data))
            continue
        lines = path.read_text().splitlines()
        i = rng.randrange(len(lines))
        try:
            row = json.loads(lines[i])
        except ValueError:  # metrics.jsonl's torn last line
            row = None
        if not whole and isinstance(row, dict) and row:
            row[rng.choice(sorted(row))] = value
            lines[i] = _dumps(row)
        else:
            lines[i] = _dumps(value)
        path.write_text("\n".join(lines) + "\n")


@settings(PROFILE, max_examples=8)
@given(damage=row_damage())
def test_report_on_damaged_eval_rows_samples_and_eval_parts(tmp_path_factory, damage):
    root = _with_eval_and_samples(tmp_path_factory.mktemp("runs") / "run")
    _damage_rows(root, damage)
    res = runner.invoke(app, ["report", str(root)])
    _no_crash(res)


# --- `rlft rewards try --from-run` on damaged logged rows -------------------------------------------------------

def _logged_rows() -> list[dict]:
    return [{"step": 1, "prompt_id": 3, "prompt": "Repeat the letter z: ", "completion": c,
             "rewards": {"char_fraction": s}, "total": 2 * s} for c, s in (("zzzz", 1.0), ("zzab", 0.5), ("abc", 0.0))]


@settings(PROFILE, max_examples=15)
@given(rows=st.lists(st.one_of(damaged_object(lambda: _logged_rows()[0]), json_values), min_size=1, max_size=3))
def test_rewards_try_from_run_on_damaged_logged_rows(tmp_path_factory, rows):
    tmp = tmp_path_factory.mktemp("try")
    run = tmp / "run"
    run.mkdir()
    (run / "config.yaml").write_text("stage: grpo\nmodel: {name_or_path: tiny}\ndata: {train: demo}\n"
                                     "rewards: [{fn: char_fraction, weight: 2.0}]\n")
    (run / "completions.jsonl").write_text("".join(_dumps(r) + "\n" for r in [*_logged_rows(), *rows]))
    res = runner.invoke(app, ["rewards", "try", "--from-run", str(run), "-o", str(tmp / "out.jsonl")])
    _no_crash(res)
    if res.exit_code == 2:  # one line, naming the file and the line
        errors = [x for x in res.stderr.splitlines() if x.startswith("error")]
        assert len(errors) == 1 and "completions.jsonl:" in errors[0], res.stderr


# --- RS-SFT / AWR: samples.jsonl rows and rounds.json read back on resume ---------------------------------------

def _decided_rows(kind: str) -> list[dict]:
    rows = []
    for p in range(3):
        for g in range(2):
            row = {"round": 1, "prompt_id": p, "sample": g, "prompt": f"Q{p}", "completion": f"a{g}",
                   "rewards": {"char_fraction": 0.5 * g}, "total": 0.5 * g, "finished": True}
            row.update({"kept": g == 1} if kind == "rs_sft" else {"advantage": 0.25 * g, "weight": 1.0 + g})
            rows.append(row)
    return rows


@settings(PROFILE, max_examples=60)
@given(kind=st.sampled_from(["rs_sft", "awr"]), seed=st.integers(0, 2**31), value=hostile_values,
       whole=st.booleans())
def test_samples_log_rows_that_do_not_fit_are_skipped(tmp_path_factory, kind, seed, value, whole):
    """A decided round read back: every row the log returns trains (training_pairs, the completions log) without a
    KeyError/TypeError/ValueError; a damaged row is left out like a cut line, with a note."""
    from rlft.stages.common.rounds import training_pairs
    from rlft.stages.common.samples_log import SamplesLog

    path = tmp_path_factory.mktemp("samples") / "samples.jsonl"
    rows, rng = _decided_rows(kind), random.Random(seed)
    i = rng.randrange(len(rows))
    if whole or not rows[i]:
        rows[i] = value
    else:
        target = rng.choice([p for p in _leaves(rows[i]) if p])
        _set(rows[i], target, value)
    path.write_text("".join(_dumps(r) + "\n" for r in rows))
    log = SamplesLog(path, samples_per_prompt=2)
    got = log.round_rows(1)
    for r in got:
        assert r["prompt_id"] >= 0
    pairs = training_pairs(got)
    for pair in pairs:
        assert isinstance(pair["prompt"], (str, list))
        if "weight" in pair:
            assert math.isfinite(pair["weight"])
    for x in got:  # what the completions log reads of each row (sampled_sft.RoundSampler.log_completions)
        [x["rewards"].get(k) for k in ("char_fraction",)]
        float(x["total"]) if x["total"] is not None else None
    log.start_round(1)
    log.prompts_done(1)
    log.decided(1)


@settings(PROFILE, max_examples=60)
@given(state=st.one_of(json_values, damaged_object(lambda: {"eval_start": _eval_block(0.2),
                                                              "round_steps": {"1": 3, "2": 4}})))
def test_rounds_json_is_either_whole_or_named(state):
    """rounds.json: `rounds_state_problem` names what is wrong, or the state's parts are what the stage reads."""
    from rlft.runtime.rounds_state import rounds_state_problem

    problem = rounds_state_problem(state)
    if problem is None:
        assert isinstance(state, dict) and isinstance(state.get("eval_start", {"reward_mean": 0}), dict)
        assert isinstance(state.get("eval_start", {"reward_mean": 0})["reward_mean"], (int, float))
        assert all(int(k) >= 0 and v >= 0 for k, v in state.get("round_steps", {}).items())


# --- metrics.jsonl: the end-of-run summary and the resume's trimming ----------------------------------------------

@settings(PROFILE, max_examples=40)
@given(damage=st.lists(st.tuples(st.integers(0, 2**31), json_values, st.booleans()), min_size=1, max_size=4),
       eval_part=damaged_object(lambda: _summary()["eval"]))
def test_summary_and_resume_trimming_on_damaged_metrics_rows(tmp_path_factory, damage, eval_part):
    """The end-of-run numbers and table over a damaged metrics.jsonl, with an eval start read back from a checkpoint
    or rounds.json; the resume's trimming of the logs keeps what it cannot read."""
    from rlft.monitor.summary import run_numbers, summary_lines
    from rlft.runtime.resume_logs import drop_rows_after

    root = make_grpo_run(tmp_path_factory.mktemp("runs") / "run", steps=6)
    path = root / "metrics.jsonl"
    lines = path.read_text().splitlines()
    for seed, value, whole in damage:
        rng = random.Random(seed)
        i = rng.randrange(len(lines))
        try:
            row = json.loads(lines[i])
        except ValueError:
            row = None
        if not whole and isinstance(row, dict):
            row[rng.choice(sorted(row))] = value
            lines[i] = _dumps(row)
        else:
            lines[i] = _dumps(value)
    path.write_text("\n".join(lines) + "\n")
    numbers = run_numbers(root, [(2, root / "ck-2"), (6, root / "final")], best_by="eval", eval_end=0.5, steps=6)
    summary_lines({"status": "finished", "steps": 6, "wall_s": 1.0, "eval": eval_part, **numbers}, root)
    drop_rows_after(path, 3)

