"""Property tests through `rlft train` on the tiny model: random mutations of the GRPO demo trained for one
step, and random damage to a finished run resumed. Exit codes are documented ones, nothing prints a
traceback, nothing outside the run folder changes, and a resume that fails loses nothing of the run."""

import json
import random
import shutil
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ROOT, run_cli

pytestmark = pytest.mark.e2e
DEMO = ROOT / "configs" / "examples" / "grpo_demo.yaml"
SLOW = settings(max_examples=6, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
DOCUMENTED = {0, 2, 3, 4}

# keys whose mutation still leaves a run of a second or two: numbers, names and switches of the demo
KEYS = ["grpo.group_size", "grpo.batch_size", "grpo.num_substeps", "grpo.ppo_epochs", "grpo.baseline_mode",
        "grpo.kl_penalty_coef", "grpo.adaptive_kl", "grpo.loss_fn", "grpo.max_tokens", "grpo.temperature",
        "grpo.remove_constant_reward_groups", "train.learning_rate", "train.per_device_train_batch_size",
        "train.max_seq_length", "train.save_steps", "monitor.on_critical", "data.chat_template", "rewards"]
values = st.one_of(st.none(), st.booleans(), st.integers(-3, 40), st.sampled_from([0.0, 1e-9, 1e3, float("nan")]),
                   st.sampled_from(["", "leave_one_out", "ppo", "never", "rollback", "${oc.env:HOME}", "../x",
                                    [], [{"fn": "nope"}], [{"fn": "char_fraction", "weight": -1}]]))


def _snapshot(folder: Path, skip: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*")
            if p.is_file() and skip not in p.parents}


def _no_traceback(res):
    assert res.returncode in DOCUMENTED, res.stderr[-3000:]
    assert "Traceback" not in res.stderr + res.stdout, res.stderr[-3000:]


@SLOW
@given(changes=st.lists(st.tuples(st.sampled_from(KEYS), values), min_size=1, max_size=3))
def test_train_one_step_on_a_mutated_demo(tmp_path_factory, changes):
    work = tmp_path_factory.mktemp("mut")
    data = yaml.safe_load(DEMO.read_text())
    for key, value in changes:
        section, _, leaf = key.partition(".")
        if leaf:
            data.setdefault(section, {})[leaf] = value
        else:
            data[section] = value
    cfg = work / "cfg.yaml"
    cfg.write_text(yaml.safe_dump(data))
    out = work / "run"
    before = _snapshot(work, out)
    res = run_cli("train", "--stage", "grpo", "-c", cfg, f"train.output_dir={out}", "train.max_steps=1",
                  "data.eval_prompts=0", cwd=work)
    _no_traceback(res)
    assert _snapshot(work, out) == before  # nothing beside the run folder was written


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("finished") / "run"
    res = run_cli("train", "--stage", "grpo", "-c", DEMO, f"train.output_dir={out}", "train.max_steps=2",
                  "train.save_steps=1", "data.eval_prompts=0")
    assert res.returncode == 0, res.stderr[-3000:]
    return out


@SLOW
@given(damage=st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from(["truncate", "garbage", "delete", "json"])),
                       min_size=1, max_size=3))
def test_resume_of_a_damaged_finished_run(tmp_path_factory, finished_run, damage):
    run = tmp_path_factory.mktemp("dmg") / "run"
    shutil.copytree(finished_run, run)
    files = sorted(p for p in run.rglob("*") if p.is_file() and p.name != ".rlft.lock")
    for seed, how in damage:
        path = files[seed % len(files)]
        if not path.exists():
            continue
        rng = random.Random(seed)
        if how == "delete":
            path.unlink()
        elif how == "truncate":
            raw = path.read_bytes()
            path.write_bytes(raw[:rng.randrange(len(raw) + 1)])
        elif how == "garbage":
            path.write_bytes(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300))))
        else:
            path.write_text(json.dumps(rng.choice([[], "x", 3, None, {"a": [1]}])))
    kept = {name: (run / name).read_bytes() for name in ("summary.json", "metrics.jsonl") if (run / name).exists()}
    outside = _snapshot(run.parent, run)
    res = run_cli("train", "--stage", "grpo", "-c", DEMO, f"train.output_dir={run}", "train.max_steps=3",
                  "train.save_steps=1", "data.eval_prompts=0", "--resume")
    _no_traceback(res)
    assert _snapshot(run.parent, run) == outside
    if res.returncode != 0:  # a resume that fails loses nothing the run had
        for name, raw in kept.items():
            assert (run / name).read_bytes() == raw, name
