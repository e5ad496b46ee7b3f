"""Run lifecycle through the CLI: run folder, interruption, resume, health rules, final adapter."""

import json
import os
import subprocess
import sys

import pytest

from conftest import interrupt_after_checkpoint, read_jsonl, run_cli

pytestmark = pytest.mark.e2e
DEMO = "configs/examples/grpo_demo.yaml"
SHORT = ["train.max_steps=8", "train.save_steps=3"]


def _train(out, *extra, faults=None):
    return run_cli("train", "--stage", "grpo", "--hw", "cpu", "-c", DEMO, f"train.output_dir={out}", *SHORT, *extra,
                   faults=faults)


def test_sigterm_then_resume_matches_uninterrupted(tmp_path):
    out = tmp_path / "run"
    err = interrupt_after_checkpoint(out, 3, "train", "--stage", "grpo", "--hw", "cpu", "-c", DEMO,
                                     f"train.output_dir={out}", *SHORT)
    assert "--resume" in err
    stopped_at = max(r["step"] for r in read_jsonl(out / "metrics.jsonl"))
    assert stopped_at < 8
    assert (out / "checkpoints" / f"checkpoint-{stopped_at}" / "rlft_complete").exists()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["steps"] == stopped_at and summary["exit_code"] == 130

    res = run_cli("train", "--stage", "grpo", "--hw", "cpu", "-c", DEMO, f"train.output_dir={out}", *SHORT, "--resume")
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"from step {stopped_at} to step 8" in res.stderr
    steps = [r["step"] for r in read_jsonl(out / "metrics.jsonl")]
    assert steps == list(range(1, 9))  # numbering continues, nothing repeated or skipped
    logged = [(r["step"], r["reward"]) for r in read_jsonl(out / "reward_logs.jsonl")]
    assert sorted(logged) == [(s, "char_fraction") for s in range(1, 9)]  # the retrained steps' rows once

    ref = tmp_path / "ref"
    assert _train(ref).returncode == 0
    from safetensors.torch import load_file

    a = load_file(str(out / "final" / "adapter_model.safetensors"))
    b = load_file(str(ref / "final" / "adapter_model.safetensors"))
    assert a.keys() == b.keys()
    worst = max((a[k] - b[k]).abs().max().item() for k in a)
    assert worst < 1e-4, worst

    # a finished run has nothing left to do
    again = run_cli("train", "--stage", "grpo", "--hw", "cpu", "-c", DEMO, f"train.output_dir={out}", *SHORT,
                    "--resume")
    assert again.returncode == 2 and "nothing left to do" in again.stderr


def test_resume_missing_folder_and_existing_folder(tmp_path):
    res = _train(tmp_path / "nope", "--resume")
    assert res.returncode == 2 and "nothing to resume" in res.stderr and "Traceback" not in res.stderr
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x").write_text("x")
    res = _train(tmp_path / "busy")  # not an rlft run: neither resumed nor replaced, whatever the flags
    assert res.returncode == 2 and "not an rlft run folder" in res.stderr and "--overwrite" not in res.stderr


def test_nan_loss_stops_with_checkpoint(tmp_path):
    out = tmp_path / "run"
    res = _train(out, faults={"RLFT_FAULT_NAN_LOSS_AT_STEP": "2"})
    assert res.returncode == 4, res.stderr[-2000:]  # stopped by a health rule
    assert "loss_nan" in res.stderr
    health = [h for h in read_jsonl(out / "health.jsonl") if h["action"] != "warn"]
    assert health[0]["rule"] == "loss_nan" and health[0]["action"] == "stop"
    assert (out / "checkpoints" / "checkpoint-2" / "rlft_complete").exists()
    assert not (out / "final").exists()
    assert json.loads((out / "summary.json").read_text())["status"] == "stopped"


def test_rollback_reloads_and_continues(tmp_path):
    out = tmp_path / "run"
    res = _train(out, "monitor.on_critical=rollback", faults={"RLFT_FAULT_NAN_LOSS_AT_STEP": "5"})
    assert res.returncode == 0, res.stderr[-2000:]
    health = [h for h in read_jsonl(out / "health.jsonl") if h["action"] != "warn"]
    assert [h["action"] for h in health] == ["rollback", "rollback"]
    assert health[1]["source"] == "checkpoint-3" and health[1]["lr_factor"] == 0.5
    rows = read_jsonl(out / "metrics.jsonl")
    assert rows[-1]["step"] == 8
    assert rows[-1]["learning_rate"] == pytest.approx(rows[0]["learning_rate"] * 0.5)


def test_warn_only_logs(tmp_path):
    out = tmp_path / "run"
    res = _train(out, "train.max_steps=3", "monitor.grad_norm_warn=1e-9", "monitor.on_warning=warn")
    assert res.returncode == 0, res.stderr[-2000:]
    health = read_jsonl(out / "health.jsonl")
    assert all(h["action"] == "warn" for h in health)
    assert len([h for h in health if h["rule"] == "grad_norm_high"]) >= 2  # step 1 may have no gradient at all
    assert (out / "final" / "adapter_config.json").exists()


def test_corrupt_newest_checkpoint_is_skipped(tmp_path):
    out = tmp_path / "run"
    assert _train(out, "train.max_steps=3").returncode == 0
    half = out / "checkpoints" / "checkpoint-7"
    half.mkdir()
    (half / "adapter_model.safetensors").write_bytes(b"\0" * 10)  # a save that died half-way
    res = _train(out, "train.max_steps=5", "--resume")
    assert res.returncode == 0, res.stderr[-2000:]
    assert "ignoring incomplete checkpoint(s) checkpoint-7" in res.stderr
    assert "from step 3 to step 5" in res.stderr


def test_final_adapter_loads_with_plain_peft(tmp_path):
    out = tmp_path / "run"
    assert _train(out, "train.max_steps=2").returncode == 0
    code = (
        "import json, sys; from peft import PeftModel; from transformers import AutoModelForCausalLM, AutoTokenizer\n"
        "p = sys.argv[1]; t = AutoTokenizer.from_pretrained(p)\n"
        "m = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(sys.argv[2]), p)\n"
        "ids = t('Repeat the letter a: ', return_tensors='pt')\n"
        "o = m.generate(**ids, max_new_tokens=5, do_sample=False)\n"
        "print('GENERATED', o.shape[1] - ids['input_ids'].shape[1])\n"
    )
    adapter = json.loads((out / "final" / "adapter_config.json").read_text())
    assert adapter["base_model_name_or_path"] == "tiny"  # as the user named it, not rlft's cache folder
    card = (out / "final" / "README.md").read_text()
    assert "# GRPO fine-tune of `tiny`" in card and "stage `grpo`, 2 optimizer steps" in card
    assert "- Rewards: `char_fraction` x 1" in card and "- Data: `demo`" in card
    base = run_cli("tiny-model", tmp_path / "tiny")  # how a user gets the tiny base model as a folder
    assert base.returncode == 0, base.stderr
    res = subprocess.run([sys.executable, "-c", code, str(out / "final"), str(tmp_path / "tiny")], capture_output=True,
                         text=True,
                         env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "GENERATED" in res.stdout


def test_ddp_two_processes_on_cpu(tmp_path):
    out = tmp_path / "run"
    res = run_cli("train", "--stage", "grpo", "--hw", "ddp", "-c", DEMO, "hw.device=cpu", "hw.num_processes=2",
                  "train.bf16=false", "train.max_steps=3", f"train.output_dir={out}")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "launching 2 processes (ddp)" in res.stderr
    import json

    dist = json.loads((out / "distributed.json").read_text())
    assert dist["num_processes"] == 2 and dist["in_sync"], dist
    assert len(set(dist["param_checksums"])) == 1
    assert [r["step"] for r in read_jsonl(out / "metrics.jsonl")] == [1, 2, 3]  # once per step, rank 0 only
    assert (out / "final" / "adapter_config.json").is_file()


def test_gpu_profiles_fail_fast_without_gpu(tmp_path):
    res = _train(tmp_path / "a", "--hw", "a100")
    assert res.returncode == 3 and "use --hw cpu" in res.stderr
    res = run_cli("train", "--stage", "grpo", "--hw", "fsdp", "-c", DEMO, "train.bf16=false")
    assert res.returncode == 3 and "needs an NVIDIA GPU" in res.stderr
