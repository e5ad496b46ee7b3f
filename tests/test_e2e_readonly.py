"""Read-only output, data or config folders: one-line errors with exit 2 (or a run that never writes
there), never a traceback."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT

pytestmark = pytest.mark.e2e
DEMO = "configs/examples/grpo_demo.yaml"


def _bind_ro_works(folder) -> bool:
    if not shutil.which("unshare"):
        return False
    probe = subprocess.run(["unshare", "-m", "sh", "-c", f"mount --bind '{folder}' '{folder}' && "
                            f"mount -o remount,bind,ro '{folder}' '{folder}' && ! touch '{folder}/.x' 2>/dev/null"],
                           capture_output=True)
    return probe.returncode == 0


def run_cli_readonly(folder, *args):
    """`rlft ARGS` while `folder` is read-only: chmod for a normal user, a read-only bind mount for root
    (root writes through permission bits)."""
    cmd = [sys.executable, "-m", "rlft.cli", *map(str, args)]
    if os.geteuid() != 0:
        mode = folder.stat().st_mode
        folder.chmod(0o555)
        try:
            return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
        finally:
            folder.chmod(mode)
    if not _bind_ro_works(folder):
        pytest.skip("running as root without mount namespaces: cannot make a folder read-only")
    quoted = " ".join("'" + c.replace("'", "'\\''") + "'" for c in cmd)
    script = f"mount --bind '{folder}' '{folder}' && mount -o remount,bind,ro '{folder}' '{folder}' && exec {quoted}"
    return subprocess.run(["unshare", "-m", "sh", "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=900)


def test_read_only_output_folder_is_one_line_exit_2(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    res = run_cli_readonly(ro, "train", "--stage", "grpo", "--hw", "cpu", "-c", DEMO, f"train.output_dir={ro / 'run'}",
                           "train.max_steps=1")
    assert res.returncode == 2, res.stderr[-3000:]
    assert "Traceback" not in res.stderr
    lines = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "not writable" in lines[0] and "train.output_dir" in lines[0]


def test_read_only_config_and_data_folder_still_trains(tmp_path):
    from datasets import Dataset

    from rlft.data.demo import demo_prompts

    conf = tmp_path / "conf"
    conf.mkdir()
    Dataset.from_list(demo_prompts(16)).save_to_disk(str(conf / "saved"))
    (conf / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in demo_prompts(16)))
    shutil.copy(ROOT / "tests" / "fixtures" / "flaky_reward.py", conf / "rw.py")
    (conf / "c.yaml").write_text("data:\n  train: saved\n  system_prompt: Answer with one letter.\nrewards:\n"
                                 "  - fn: char_fraction\n  - fn: rw.py:flaky\n    weight: 0\n")
    out = tmp_path / "run"
    res = run_cli_readonly(conf, "train", "--stage", "grpo", "--hw", "cpu", "-c", DEMO, "-c", conf / "c.yaml",
                           f"train.output_dir={out}", "train.max_steps=1", "train.max_seq_length=96")
    assert res.returncode == 0, res.stderr[-3000:]
    assert (out / "final" / "adapter_config.json").is_file()
    assert sorted(p.name for p in conf.iterdir()) == ["c.yaml", "rw.py", "saved", "train.jsonl"]


def test_read_only_pipeline_folder_is_one_line_exit_2(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    pipe = tmp_path / "pipe.yaml"
    pipe.write_text(f"output_dir: {ro / 'pipe'}\nstages:\n  - stage: grpo\n    config: {ROOT / DEMO}\n")
    res = run_cli_readonly(ro, "pipeline", "run", pipe, "train.max_steps=1")
    assert res.returncode == 2, res.stderr[-3000:]
    assert "Traceback" not in res.stderr
    lines = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "not writable" in lines[0] and "output_dir" in lines[0]
