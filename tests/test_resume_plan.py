"""The resume plan (rlft.runtime.resume_plan) decided from run folders built by hand: which checkpoint, which
damaged ones move aside, a finished run, a run killed during its final save; no torch, and nothing changed."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from functools import partial
from pathlib import Path

from rlft.rundir.folder import RunDir
from rlft.runtime.checkpoint_files import checkpoint_problem
from rlft.runtime.resume_plan import ResumePlan, SetAside, plan_resume

files_problem = partial(checkpoint_problem, load=False)  # the structural checks: no torch


def _safetensors(path: Path, cut: int = 0) -> None:
    header = json.dumps({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    data = struct.pack("<Q", len(header)) + header + b"\0" * 4
    path.write_bytes(data[:len(data) - cut])


def _checkpoint(run: RunDir, step: int, *, marked: bool = True, truncated: bool = False) -> Path:
    path = run.checkpoints / f"checkpoint-{step}"
    path.mkdir(parents=True)
    (path / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    _safetensors(path / "adapter_model.safetensors", cut=3 if truncated else 0)
    (path / "rlft_state.json").write_text("{}")
    if marked:
        (path / "rlft_complete").write_text("ok\n")
    return path


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_newest_complete_checkpoint_and_the_rows_after_it(tmp_path):
    run = RunDir(tmp_path)
    _checkpoint(run, 2)
    four = _checkpoint(run, 4)
    _checkpoint(run, 6, marked=False)  # a save that was interrupted
    before = _tree(tmp_path)
    plan = plan_resume(run, 10, files_problem)
    assert plan == ResumePlan(four, 10, incomplete=("checkpoint-6",), drop_rows_after=4)
    assert plan.step == 4
    assert _tree(tmp_path) == before  # a plan changes nothing


def test_damaged_checkpoints_move_aside_and_the_one_before_is_used(tmp_path):
    run = RunDir(tmp_path)
    two = _checkpoint(run, 2)
    four = _checkpoint(run, 4, truncated=True)
    (run.checkpoints / "damaged-checkpoint-4").mkdir()  # an earlier damaged copy of the same step keeps its name
    plan = plan_resume(run, 0, files_problem)
    assert plan.checkpoint == two and plan.drop_rows_after == 2 and plan.refused is None
    assert plan.set_aside == (SetAside(four, "adapter_model.safetensors is truncated (70 of 73 bytes)",
                                       run.checkpoints / "damaged-checkpoint-4.2", two),)


def test_every_checkpoint_damaged_refuses_after_setting_them_aside(tmp_path):
    run = RunDir(tmp_path)
    two, four = _checkpoint(run, 2, truncated=True), _checkpoint(run, 4)
    (four / "trainer_state.json").write_text(json.dumps({"global_step": 3}))
    plan = plan_resume(run, 10, files_problem)
    assert plan.checkpoint is None and plan.drop_rows_after is None
    assert [(a.checkpoint, a.fallback) for a in plan.set_aside] == [(four, two), (two, None)]
    assert plan.set_aside[0].problem == "trainer_state.json says global_step 3 in checkpoint-4"
    assert plan.refused == f"no complete checkpoint to resume in {run.checkpoints}; start again with --overwrite"


def test_a_finished_run_has_nothing_left_to_do(tmp_path):
    run = RunDir(tmp_path)
    _checkpoint(run, 10)
    run.final.mkdir()
    plan = plan_resume(run, 10, files_problem)
    assert plan.checkpoint is None and not plan.final_only
    assert plan.refused == ("nothing left to do: the newest checkpoint is at step 10 and train.max_steps is 10; "
                            "raise train.max_steps to train further")
    assert plan_resume(run, 20, files_problem).checkpoint == run.checkpoints / "checkpoint-10"  # raised: go on
    (run.checkpoints / "checkpoint-10" / "rlft_complete").unlink()
    assert plan_resume(run, 10, files_problem).refused == (
        f"nothing left to do: {tmp_path} holds a finished run (final/) and no checkpoint to continue from")


def test_a_run_killed_during_its_final_save_only_saves_again(tmp_path):
    run = RunDir(tmp_path)
    _checkpoint(run, 8)
    ten = _checkpoint(run, 10)
    (tmp_path / "final.tmp").mkdir()  # final/ appears only by a rename once whole
    plan = plan_resume(run, 10, files_problem)
    assert plan == ResumePlan(ten, 10, final_only=True)  # no rows dropped: nothing is trained again


def test_the_end_of_the_data_is_no_step_limit(tmp_path):
    run = RunDir(tmp_path)
    _checkpoint(run, 500)
    run.final.mkdir()
    assert plan_resume(run, 0, files_problem).drop_rows_after == 500


def test_planning_imports_no_torch(tmp_path):
    run = RunDir(tmp_path)
    _checkpoint(run, 2)
    code = ("import sys; from functools import partial; from pathlib import Path; "
            "from rlft.rundir.folder import RunDir; "
            "from rlft.runtime.checkpoint_files import checkpoint_problem; "
            "from rlft.runtime.resume_plan import plan_resume; "
            f"plan = plan_resume(RunDir(Path({str(tmp_path)!r})), 5, partial(checkpoint_problem, load=False)); "
            "assert plan.checkpoint.name == 'checkpoint-2', plan; "
            "print(sorted(m for m in sys.modules if m.partition('.')[0] in ('torch', 'transformers', 'trl')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
