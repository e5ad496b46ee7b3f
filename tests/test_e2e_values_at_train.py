"""Through the CLI on the tiny model: values validate-config cannot judge end as one line naming the key, exit 2,
never a traceback."""

from __future__ import annotations

import json

import pytest

from conftest import ROOT, run_cli

pytestmark = pytest.mark.e2e
DEMO = ROOT / "configs" / "examples" / "grpo_demo.yaml"


def test_a_trl_value_trl_declares_no_range_for_is_named_at_the_first_step(tmp_path):
    (tmp_path / "my.yaml").write_text("trl:\n  top_k: -1\n")
    out = tmp_path / "run"
    res = run_cli("train", "--stage", "grpo", "--hw", "cpu", "-c", DEMO, "-c", tmp_path / "my.yaml",
                  f"train.output_dir={out}", "train.max_steps=1", "data.eval_prompts=0", cwd=tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-3000:]
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("error: trl.top_k (my.yaml:2): refused at the first training step") and "-1" in last
    assert json.loads((out / "summary.json").read_text())["exit_code"] == 2


@pytest.fixture(scope="module")
def damaged_model(tmp_path_factory):
    """The tiny model as a folder whose config.json and tokenizer are sound and whose model.safetensors is cut short."""
    folder = tmp_path_factory.mktemp("damaged") / "model"
    assert run_cli("tiny-model", folder).returncode == 0
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    return folder


STAGE_CONFIGS = [("grpo", "grpo_demo"), ("grpo", "tool_use_grpo"), ("ppo", "ppo_demo"), ("dpo", "dpo_demo"),
                 ("orpo", "orpo_demo"), ("rs_sft", "rs_sft_demo"), ("awr", "awr_demo"), ("rm", "rm_demo")]


@pytest.mark.parametrize("stage,config", STAGE_CONFIGS, ids=[c for _, c in STAGE_CONFIGS])
def test_damaged_weights_are_one_line_naming_the_file_and_leave_no_run_folder(stage, config, damaged_model, tmp_path):
    """Every stage (tool_use_grpo: GRPO over episodes) loads its model before the run folder is created: a model
    that fails to load is one line, exit 2, and no folder."""
    out = tmp_path / "run"
    res = run_cli("train", "--stage", stage, "--hw", "cpu", "-c", ROOT / "configs" / "examples" / f"{config}.yaml",
                  f"model.name_or_path={damaged_model}", f"train.output_dir={out}", "train.max_steps=1",
                  cwd=tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-3000:]
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and str(damaged_model / "model.safetensors") in errors[0], res.stderr[-2000:]
    assert not out.exists()


def test_a_damaged_torch_bin_is_one_line_naming_the_file(tmp_path):
    """Weights saved in torch's `.bin` format (older checkpoints) and cut short: one line, exit 2, no folder."""
    import torch
    from safetensors.torch import load_file

    folder = tmp_path / "model"
    assert run_cli("tiny-model", folder).returncode == 0
    torch.save(load_file(folder / "model.safetensors"), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    weights = folder / "pytorch_model.bin"
    weights.write_bytes(weights.read_bytes()[:-200])
    out = tmp_path / "run"
    res = run_cli("train", "--stage", "grpo", "--hw", "cpu", "-c", DEMO, f"model.name_or_path={folder}",
                  f"train.output_dir={out}", "train.max_steps=1", cwd=tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-3000:]
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and str(weights) in errors[0], res.stderr[-2000:]
    assert not out.exists()
