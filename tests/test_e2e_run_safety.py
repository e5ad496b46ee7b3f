"""Run-folder safety through the CLI on the tiny model: nothing a user has is lost by --overwrite,
a second run on the same folder, a kill during a save, a damaged checkpoint or a resume."""

import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT, cli_command, read_jsonl, run_cli

pytestmark = pytest.mark.e2e
DEMO = "configs/examples/grpo_demo.yaml"


def _args(out, *extra):
    return ["train", "--stage", "grpo", "--hw", "cpu", "-c", DEMO, f"train.output_dir={out}", *extra]


def _train(out, *extra, env=None):
    return run_cli(*_args(out, *extra), env=env)


def _start(out, *extra):
    return subprocess.Popen([sys.executable, "-m", "rlft.cli", *_args(out, *extra)], cwd=ROOT,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait_for(proc, cond, what, timeout=300):
    deadline = time.time() + timeout
    while not cond():
        assert proc.poll() is None, f"run ended before {what}: {proc.stderr.read()[-2000:]}"
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _metric_rows(out):
    path = out / "metrics.jsonl"
    return read_jsonl(path) if path.exists() else []


def test_overwrite_keeps_old_run_until_new_run_checkpoints(tmp_path):
    out = tmp_path / "run"
    old = tmp_path / "run.old"
    assert _train(out, "train.max_steps=2").returncode == 0
    # a replacement run that dies before its first checkpoint leaves the finished run intact
    proc = _start(out, "train.max_steps=30", "train.save_steps=100", "--overwrite")
    _wait_for(proc, lambda: old.exists() and len(_metric_rows(out)) >= 1, "its first step")
    proc.kill()
    proc.communicate()
    assert (old / "final" / "adapter_model.safetensors").is_file()
    assert not (out / "checkpoints" / "checkpoint-1").exists()
    # overwriting that failed replacement again keeps the original until the new run checkpoints
    res = _train(out, "train.max_steps=2", "train.save_steps=1", "--overwrite")
    assert res.returncode == 0, res.stderr[-2000:]
    assert "an earlier replacement that wrote no checkpoint" in res.stderr and "deleted the replaced run" in res.stderr
    assert not old.exists() and (out / "final").is_dir()
    assert [r["step"] for r in read_jsonl(out / "metrics.jsonl")] == [1, 2]


def test_overwrite_refuses_to_clobber_an_unrelated_old_folder(tmp_path):
    from rlft.rundir.markers import mark

    out, old = tmp_path / "run", tmp_path / "run.old"
    for d in (out, old):
        d.mkdir()
        (d / "keep.txt").write_text("mine")
    mark(out, "run")  # a marker beside a file rlft did not write, and a folder of the user's at <name>.old
    res = _train(out, "train.max_steps=1", "--overwrite")
    # a marker is not proof: the folder holds a foreign file, so it is moved aside whole and nothing is deleted
    assert res.returncode == 0 and "rlft did not write" in res.stderr and "Traceback" not in res.stderr, res.stderr
    kept = list(tmp_path.glob("run.replaced-*"))
    assert len(kept) == 1 and (kept[0] / "keep.txt").read_text() == (old / "keep.txt").read_text() == "mine"


def test_second_run_on_a_busy_folder_is_refused(tmp_path):
    out = tmp_path / "run"
    faults = {"RLFT_FAULT_SLEEP_AT_STEP": "2:300"}
    proc = subprocess.Popen([*cli_command(faults), *_args(out, "train.max_steps=5", "train.save_steps=1")],
                            cwd=ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1", **faults},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # idles in step 2
    try:
        _wait_for(proc, lambda: (out / "checkpoints" / "checkpoint-1" / "rlft_complete").exists(), "a checkpoint")
        for extra in (["--resume"], ["--overwrite"], []):
            res = _train(out, "train.max_steps=5", "train.save_steps=1", *extra)
            assert res.returncode == 2, (extra, res.stderr[-2000:])
            assert f"in use by another rlft run (pid {proc.pid} on host" in res.stderr, res.stderr[-2000:]
            assert "Traceback" not in res.stderr
    finally:
        proc.kill()
        proc.communicate()
    assert not (tmp_path / "run.old").exists()
    # the killed run's lock is stale: a resume takes it over and continues
    from rlft.rundir.folder import RunDir, checkpoint_step

    newest = checkpoint_step(RunDir(out).complete_checkpoints()[-1])
    res = _train(out, f"train.max_steps={newest + 1}", "--resume")
    assert res.returncode == 0, res.stderr[-2000:]
    assert "taking over a stale lock" in res.stderr and f"pid {proc.pid}" in res.stderr
    assert not (out / ".rlft.lock").exists()  # released at the end


def test_resume_redoes_a_final_save_that_was_killed(tmp_path):
    out = tmp_path / "run"
    assert _train(out, "train.max_steps=2").returncode == 0
    good = (out / "final" / "adapter_model.safetensors").read_bytes()
    # the state a kill during the final save leaves: the save went to final.tmp, never renamed, half-written
    (out / "final").rename(out / "final.tmp")
    (out / "final.tmp" / "adapter_model.safetensors").write_bytes(good[:100])
    res = _train(out, "train.max_steps=2", "--resume")
    assert res.returncode == 0, res.stderr[-2000:]
    assert "final model was not saved completely" in res.stderr
    assert (out / "final" / "adapter_model.safetensors").read_bytes() == good  # the checkpoint's weights, exactly
    assert not (out / "final.tmp").exists()
    assert [r["step"] for r in read_jsonl(out / "metrics.jsonl")] == [1, 2]  # nothing trained again
    again = _train(out, "train.max_steps=2", "--resume")
    assert again.returncode == 2 and "nothing left to do" in again.stderr


def test_damaged_newest_checkpoints_fall_back_with_a_warning(tmp_path):
    out = tmp_path / "run"
    assert _train(out, "train.max_steps=3", "train.save_steps=1").returncode == 0
    ckpts = out / "checkpoints"
    (ckpts / "checkpoint-3" / "trainer_state.json").unlink()
    weights = ckpts / "checkpoint-2" / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-50])  # a save cut short: marker there, tensors not
    res = _train(out, "train.max_steps=4", "train.save_steps=1", "--resume")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Traceback" not in res.stderr
    assert "WARNING checkpoint-3 is damaged (trainer_state.json is missing)" in res.stderr
    assert "WARNING checkpoint-2 is damaged (adapter_model.safetensors is truncated" in res.stderr
    assert "from step 1 to step 4" in res.stderr
    assert (ckpts / "damaged-checkpoint-3").is_dir() and (ckpts / "checkpoint-4" / "rlft_complete").is_file()
    assert [r["step"] for r in read_jsonl(out / "metrics.jsonl")] == [1, 2, 3, 4]


def test_replayed_steps_write_one_row_each(tmp_path):
    out = tmp_path / "run"
    assert _train(out, "train.max_steps=3", "train.save_steps=2").returncode == 0
    first = read_jsonl(out / "completions.jsonl")
    import shutil

    # the state of a run killed after logging step 3 but before its checkpoint: step 3 is trained again
    shutil.rmtree(out / "checkpoints" / "checkpoint-3")
    shutil.rmtree(out / "final")
    res = _train(out, "train.max_steps=3", "train.save_steps=2", "--resume")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "from step 2 to step 3" in res.stderr
    assert [r["step"] for r in read_jsonl(out / "metrics.jsonl")] == [1, 2, 3]
    again = read_jsonl(out / "completions.jsonl")
    def count(rows):
        return {s: sum(r["step"] == s for r in rows) for s in (1, 2, 3)}

    assert count(again) == count(first)
    assert [r["completion"] for r in again] == [r["completion"] for r in first]  # replayed bit-exact
    steps = [h["step"] for h in read_jsonl(out / "health.jsonl")]
    assert len(steps) == len(set((h["step"], h["rule"]) for h in read_jsonl(out / "health.jsonl")))


def test_adaptive_kl_coefficient_resumes_exactly(tmp_path):
    kl = ["grpo.kl_penalty_coef=0.05", "grpo.adaptive_kl=true", "grpo.target_kl=0.001", "grpo.kl_horizon=50",
          "train.max_steps=4", "train.save_steps=2"]
    ref = tmp_path / "ref"
    assert _train(ref, *kl).returncode == 0
    import shutil

    out = tmp_path / "run"
    shutil.copytree(ref, out)
    for gone in ("checkpoints/checkpoint-4", "final"):  # as if killed right after the step-2 checkpoint
        shutil.rmtree(out / gone)
    res = _train(out, *kl, "--resume")
    assert res.returncode == 0, res.stderr[-3000:]
    want = [r["kl_coef"] for r in read_jsonl(ref / "metrics.jsonl")]
    got = [r["kl_coef"] for r in read_jsonl(out / "metrics.jsonl")]
    assert len(set(want)) == 4, want  # the coefficient moves every step, so a skipped update shows
    assert got == want


def test_changed_config_is_listed_and_refused_unless_allowed(tmp_path):
    out = tmp_path / "run"
    assert _train(out, "train.max_steps=2", "train.save_steps=2").returncode == 0
    changed = ["train.max_steps=3", "train.learning_rate=1e-3", "grpo.temperature=0.9"]
    res = _train(out, *changed, "--resume")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "2 setting(s) changed" in res.stderr
    assert "train.learning_rate: 0.003 -> 0.001" in res.stderr and "grpo.temperature: 1.0 -> 0.9" in res.stderr
    assert "--allow-config-change" in res.stderr
    assert [r["step"] for r in read_jsonl(out / "metrics.jsonl")] == [1, 2]  # nothing ran
    res = _train(out, *changed, "--resume", "--allow-config-change")
    assert res.returncode == 0, res.stderr[-3000:]
    rows = read_jsonl(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert rows[1]["learning_rate"] == pytest.approx(3e-3) and rows[2]["learning_rate"] == pytest.approx(1e-3)
    assert "learning_rate: 0.001" in (out / "config.yaml").read_text()
    assert "learning_rate: 0.003" in (out / "config.step-2.yaml").read_text()
    # shape-changing keys stay refused, flag or not
    res = _train(out, "train.max_steps=4", "train.learning_rate=1e-3", "grpo.temperature=0.9", "grpo.group_size=4",
                 "--resume", "--allow-config-change")
    assert res.returncode == 2 and "would break its checkpoints: grpo.group_size: 8 -> 4" in res.stderr


def test_resume_without_output_dir_finds_the_newest_run_of_this_config(tmp_path):
    import re
    import shlex

    demo = str(ROOT / DEMO)
    base = ["train", "--stage", "grpo", "--hw", "cpu", "-c", demo, "train.save_steps=1"]
    first = run_cli(*base, "train.max_steps=2", cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    (run1,) = (tmp_path / "runs").iterdir()
    # printed at the start: the exact command that continues this run
    printed = re.search(r"to continue it after a stop: (.+)", first.stderr).group(1)
    assert shlex.split(printed) == ["rlft", *base, "train.max_steps=2", f"train.output_dir=runs/{run1.name}",
                                    "--resume"]
    time.sleep(1.1)  # run folders are named by the second
    other = run_cli(*base, "train.max_steps=1", "train.learning_rate=1e-3", cwd=tmp_path)
    assert other.returncode == 0, other.stderr[-2000:]
    res = run_cli(*base, "train.max_steps=3", "--resume", cwd=tmp_path)  # the newer run has another lr
    assert res.returncode == 0, res.stderr[-2000:]
    assert f"continuing runs/{run1.name}, the newest grpo run with this config" in res.stderr
    assert "from step 2 to step 3" in res.stderr
    assert [r["step"] for r in read_jsonl(run1 / "metrics.jsonl")] == [1, 2, 3]
    # no run has this config: say which run is newest and the exact command to continue it
    newest = max(p.name for p in (tmp_path / "runs").iterdir())
    res = run_cli(*base, "train.max_steps=3", "train.learning_rate=5e-4", "--resume", cwd=tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "no run in runs/ has this config" in res.stderr and f"train.output_dir=runs/{newest}" in res.stderr
    assert "differs in train.learning_rate" in res.stderr
    res = run_cli(*base, "--resume", cwd=tmp_path / "runs")
    assert res.returncode == 2 and "nothing to resume" in res.stderr


def test_second_ctrl_c_names_the_checkpoint_and_the_resume_command(tmp_path):
    out = tmp_path / "run"
    faults = {"RLFT_FAULT_SLEEP_AT_STEP": "3:120"}  # through the fault launcher: rlft reads no fault variables
    proc = subprocess.Popen([*cli_command(faults), *_args(out, "train.max_steps=5", "train.save_steps=1")],
                            cwd=ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1", **faults},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for(proc, lambda: (out / "checkpoints" / "checkpoint-2" / "rlft_complete").exists(), "checkpoint-2")
    time.sleep(1.0)  # now inside the long step 3
    proc.send_signal(signal.SIGINT)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted twice" in err and f"{out / 'checkpoints' / 'checkpoint-2'} (step 2) is still there" in err
    assert f"train.output_dir={out} --resume" in err and "Traceback" not in err
    res = _train(out, "train.max_steps=5", "train.save_steps=1", "--resume")
    assert res.returncode == 0 and "from step 2 to step 5" in res.stderr, res.stderr[-2000:]
