"""Through the CLI on the tiny model: a run B trained from run A (`model.init_from`) is used only on A's weights as B
trained on them. B records A by absolute path and A's config.yaml hash; every command that rebuilds B's chain (train
from B, eval, generate, export) refuses a replaced A naming both runs and hashes (report warns), a run cannot be
written over a run of its own chain, and a run folder that is a link is refused before anything moves."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, run_cli

pytestmark = pytest.mark.e2e
DEMO = ROOT / "configs" / "examples" / "grpo_demo.yaml"
SHORT = ("train.save_steps=1", "data.eval_prompts=0", "grpo.max_tokens=4")


def _train(cwd, out, *extra):
    return run_cli("train", "--stage", "grpo", "--hw", "cpu", "-c", DEMO, f"train.output_dir={out}",
                   "train.max_steps=1", *SHORT, *extra, cwd=cwd)


def _snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """A working folder with runs/a and runs/b, B trained from A as `model.init_from=runs/a` (relative, as a pipeline
    gives its stages)."""
    work = tmp_path_factory.mktemp("chain") / "work"
    work.mkdir()
    res = _train(work, "runs/a")
    assert res.returncode == 0, res.stderr[-3000:]
    res = _train(work, "runs/b", "model.init_from=runs/a")
    assert res.returncode == 0, res.stderr[-3000:]
    return work


def _copy(chain, tmp_path) -> Path:
    """A copy of the working folder to change, its B recording the copy's A (the same config.yaml, the same hash)."""
    work = tmp_path / "work"
    shutil.copytree(chain, work, symlinks=True)
    config = work / "runs" / "b" / "config.yaml"
    config.write_text(config.read_text().replace(str(chain / "runs" / "a"), str(work / "runs" / "a")))
    return work


def _generate(target, cwd):
    return run_cli("generate", target, "-p", "Repeat the letter z:", "-n", "1", "--max-tokens", "4", cwd=cwd)


def test_the_chain_is_recorded_by_absolute_path_and_found_from_any_folder(chain, tmp_path):
    model = yaml.safe_load((chain / "runs" / "b" / "config.yaml").read_text())["model"]
    assert Path(model["init_from"]).is_absolute() and Path(model["init_from"]) == chain / "runs" / "a"
    here = _generate(chain / "runs" / "b", chain)
    assert here.returncode == 0, here.stderr[-2000:]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    res = _generate(chain / "runs" / "b", elsewhere)
    assert res.returncode == 0 and res.stdout == here.stdout, res.stderr[-2000:]


def test_a_moved_runs_tree_still_finds_its_chain_by_hash(chain, tmp_path):
    """B records A by absolute path; the whole tree moved (the old path gone): A is found beside B by its recorded
    hash, and a folder of that name holding another config is refused, naming the hashes."""
    moved = tmp_path / "moved"
    shutil.copytree(chain, moved, symlinks=True)  # B's config.yaml still names the old A
    b = moved / "runs" / "b"
    old = chain / "runs" / "a"
    aside = chain / "runs" / "a-aside"
    old.rename(aside)  # the recorded path is gone, as after a move
    try:
        res = _generate(b, tmp_path)
        assert res.returncode == 0, res.stderr[-2000:]
        (moved / "runs" / "a" / "config.yaml").open("a").write("# another run's settings\n")
        res = _generate(b, tmp_path)
        assert res.returncode == 2 and "Traceback" not in res.stderr and "hash" in res.stderr, res.stderr[-2000:]
    finally:
        aside.rename(old)


def test_a_relative_chain_an_older_rlft_recorded_never_picks_a_foreign_run(chain, tmp_path):
    """A config.yaml with the working-folder-relative init_from older rlft wrote: found from the run folder's own
    tree, by its recorded hash; a run of that name in the current folder holding another config is never used."""
    work = _copy(chain, tmp_path)
    config = work / "runs" / "b" / "config.yaml"
    config.write_text(config.read_text().replace(f"init_from: {work / 'runs' / 'a'}", "init_from: runs/a"))
    assert "init_from: runs/a\n" in config.read_text() or "init_from: runs/a " in config.read_text()
    here = _generate(work / "runs" / "b", work)
    assert here.returncode == 0, here.stderr[-2000:]
    foreign = tmp_path / "other"
    shutil.copytree(work / "runs" / "a", foreign / "runs" / "a")
    (foreign / "runs" / "a" / "config.yaml").open("a").write("# another run's settings\n")
    res = _generate(work / "runs" / "b", foreign)
    assert res.returncode == 0 and res.stdout == here.stdout, res.stderr[-2000:]
    shutil.rmtree(work / "runs" / "a")  # only the foreign run is left: refused, both hashes named
    res = _generate(work / "runs" / "b", foreign)
    assert res.returncode == 2 and "Traceback" not in res.stderr and "hash" in res.stderr, res.stderr[-2000:]


def test_overwrite_of_a_run_in_the_chain_is_refused_before_anything_moves(chain, tmp_path):
    work = _copy(chain, tmp_path)
    before = _snapshot(work)
    res = _train(work, "runs/a", "model.init_from=runs/b", "--overwrite")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-3000:]
    assert "train.output_dir" in res.stderr and "chain" in res.stderr
    assert _snapshot(work) == before and not (work / "runs" / "a.old").exists()
    val = run_cli("validate-config", "--stage", "grpo", "-c", DEMO, "train.output_dir=runs/a", "model.init_from=runs/b",
                  cwd=work)
    assert val.returncode == 2 and "train.output_dir" in val.stderr


def test_a_replaced_parent_is_refused_wherever_the_chain_is_rebuilt(chain, tmp_path):
    work = _copy(chain, tmp_path)
    a, b = work / "runs" / "a", work / "runs" / "b"
    recorded = yaml.safe_load((b / "config.yaml").read_text())["model"]["init_config_hash"]
    res = _train(work, "runs/a", "train.learning_rate=1e-3", "--overwrite")  # A replaced after B trained on it
    assert res.returncode == 0, res.stderr[-3000:]
    from rlft.config.init_from import config_hash

    now = config_hash(a)
    assert now != recorded
    commands = [("eval", b, "--data", "demo", "-n", "1", "--max-prompts", "1", "-o", tmp_path / "e.jsonl"),
                ("generate", b, "-p", "z", "-n", "1", "--max-tokens", "2"),
                ("export", b, "--merge", "-o", tmp_path / "merged"),
                ("export", b, "-o", tmp_path / "adapter"),
                ("validate-config", "--stage", "grpo", "-c", DEMO, f"model.init_from={b}"),
                ("train", "--stage", "grpo", "--hw", "cpu", "-c", DEMO, f"model.init_from={b}",
                 f"train.output_dir={work / 'runs' / 'c'}", "train.max_steps=1")]
    for args in commands:
        res = run_cli(*args, cwd=work)
        assert res.returncode == 2 and "Traceback" not in res.stderr, (args[0], res.stderr[-2000:])
        assert str(a) in res.stderr and str(b) in res.stderr, (args[0], res.stderr)
        assert recorded in res.stderr and now in res.stderr, (args[0], res.stderr)
    assert not (work / "runs" / "c").exists() and not (tmp_path / "merged").exists()
    rep = run_cli("report", b, "-o", tmp_path / "report", cwd=work)
    assert rep.returncode == 0 and recorded in rep.stderr and now in rep.stderr, rep.stderr[-2000:]


def test_a_symlinked_output_folder_is_refused_through_the_cli(chain, tmp_path):
    work = _copy(chain, tmp_path)
    before = _snapshot(work)
    (work / "latest").symlink_to(work / "runs" / "a", target_is_directory=True)
    res = _train(work, "latest", "--overwrite")
    assert res.returncode == 2 and "is a symbolic link" in res.stderr and "Traceback" not in res.stderr
    assert (work / "latest").is_symlink() and not (work / "latest.old").exists()
    assert {k: v for k, v in _snapshot(work).items() if not k.startswith("latest")} == before
