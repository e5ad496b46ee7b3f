"""Through the CLI on the tiny model: a training run touches only folders rlft made. A copied run folder
cannot point --resume at anything to delete, a plain folder is never written to or replaced, and the
user's data folder gets no cache files."""

import json
import shutil
from pathlib import Path

import pytest

from conftest import ROOT, read_jsonl, run_cli

pytestmark = pytest.mark.e2e
DEMO = "configs/examples/grpo_demo.yaml"


def _train(out, *extra, cwd=ROOT):
    return run_cli("train", "--stage", "grpo", "--hw", "cpu", "-c", ROOT / DEMO, f"train.output_dir={out}", *extra,
                   cwd=cwd)


def _snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _project(folder: Path) -> dict:
    (folder / "src").mkdir(parents=True)
    (folder / "src" / "main.py").write_text("print('mine')\n")
    (folder / "config.yaml").write_text("mine: true\n")
    (folder / "notes.txt").write_text("mine\n")
    return _snapshot(folder)


def test_a_copied_run_folder_cannot_make_resume_delete_anything(tmp_path):
    out = tmp_path / "run"
    assert _train(out, "train.max_steps=1", "train.save_steps=1").returncode == 0
    victim, copy = tmp_path / "victim", tmp_path / "copy"
    kept = _project(victim)
    shutil.copytree(out, copy)
    (copy / ".rlft_replaces").write_text(f"{victim}\n")  # what an older rlft deleted on the next checkpoint
    marker = json.loads((copy / ".rlft-made.json").read_text())
    (copy / ".rlft-made.json").write_text(json.dumps({**marker, "replaces": "0123456789abcdef"}))
    aside = tmp_path / "copy.old"
    kept_aside = _project(aside)  # a user folder that happens to sit where rlft puts a replaced run
    res = _train(copy, "train.max_steps=2", "train.save_steps=1", "--resume")
    assert res.returncode == 0, res.stderr[-2000:]
    assert [r["step"] for r in read_jsonl(copy / "metrics.jsonl")] == [1, 2]
    assert _snapshot(victim) == kept and _snapshot(aside) == kept_aside


def test_plain_folders_are_never_written_replaced_or_resumed(tmp_path):
    project = tmp_path / "project"
    kept = _project(project)
    for flags, says in ((["--overwrite"], "refusing to --overwrite"), (["--resume"], "nothing to resume"),
                        ([], "not an rlft run folder")):
        res = _train(project, "train.max_steps=1", *flags)
        assert res.returncode == 2, res.stderr[-2000:]
        assert says in res.stderr and "Traceback" not in res.stderr
        assert "--overwrite to replace" not in res.stderr
        assert _snapshot(project) == kept and not (tmp_path / "project.old").exists()
    # output_dir=. from inside the project, and a folder that holds runs
    res = _train(".", "train.max_steps=1", "--overwrite", cwd=project)
    assert res.returncode == 2 and "refusing to --overwrite" in res.stderr and "Traceback" not in res.stderr
    assert _snapshot(project) == kept and not (project / ".rlft.lock").exists()
    runs = tmp_path / "runs"
    assert _train(runs / "a", "train.max_steps=1").returncode == 0
    before = _snapshot(runs)
    res = _train(runs, "train.max_steps=1", "--overwrite")
    assert res.returncode == 2 and "not an rlft run folder" in res.stderr
    assert _snapshot(runs) == before


def test_overwrite_of_an_rlft_run_still_replaces_it(tmp_path):
    out = tmp_path / "run"
    assert _train(out, "train.max_steps=1").returncode == 0
    res = _train(out, "train.max_steps=2", "train.save_steps=1", "--overwrite")
    assert res.returncode == 0, res.stderr[-2000:]
    assert "deleted the replaced run" in res.stderr and not (tmp_path / "run.old").exists()
    assert [r["step"] for r in read_jsonl(out / "metrics.jsonl")] == [1, 2]


def test_training_leaves_the_data_folder_as_it_was(tmp_path):
    from datasets import Dataset

    from rlft.data.demo import demo_prompts

    data = tmp_path / "data"
    data.mkdir()
    Dataset.from_list(demo_prompts(16)).save_to_disk(str(data / "saved"))
    shutil.copy(ROOT / "tests" / "fixtures" / "flaky_reward.py", data / "rw.py")
    (data / "c.yaml").write_text("data:\n  train: saved\nrewards:\n  - fn: char_fraction\n  - fn: rw.py:flaky\n"
                                 "    weight: 0\n")
    before = _snapshot(data)
    res = _train(tmp_path / "run", "-c", data / "c.yaml", "train.max_steps=1")
    assert res.returncode == 0, res.stderr[-2000:]
    assert _snapshot(data) == before  # no cache-*.arrow beside the data, no __pycache__ beside the reward


def test_pipeline_output_dir_of_user_files_is_refused(tmp_path):
    project = tmp_path / "project"
    kept = _project(project)
    pipe = tmp_path / "pipe.yaml"
    pipe.write_text(f"output_dir: {project}\nstages:\n  - stage: grpo\n    config: {ROOT / DEMO}\n")
    res = run_cli("pipeline", "run", pipe, "train.max_steps=1")
    assert res.returncode == 2 and "output_dir:" in res.stderr and "Traceback" not in res.stderr
    assert _snapshot(project) == kept


def test_no_environment_value_reaches_the_run_folder_or_the_console(tmp_path):
    """Secrets in the environment (tokens, keys) stay there: a run writes them to no file and no message,
    and a config that asks for one with a resolver is refused without echoing it."""
    secret = "rlft-marker-secret-5f1c9e"
    env = {"HF_TOKEN": secret, "WANDB_API_KEY": secret, "OPENAI_API_KEY": secret, "MY_SECRET": secret}
    out = tmp_path / "run"
    res = run_cli("train", "--stage", "grpo", "--hw", "cpu", "-c", ROOT / DEMO, f"train.output_dir={out}",
                  "train.max_steps=1", "train.save_steps=1", env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    assert secret not in res.stdout + res.stderr
    leaked = [str(p) for p in out.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
    assert not leaked
    (tmp_path / "c.yaml").write_text("train:\n  run_name: ${oc.env:MY_SECRET}\n")
    res = run_cli("train", "--stage", "grpo", "--hw", "cpu", "-c", ROOT / DEMO, "-c", tmp_path / "c.yaml",
                  f"train.output_dir={tmp_path / 'run2'}", "train.max_steps=1", env=env)
    assert res.returncode == 2 and secret not in res.stdout + res.stderr and not (tmp_path / "run2").exists()
    res = run_cli("report", out, env=env)
    assert res.returncode == 0
    assert not [p for p in (out / "report").rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
