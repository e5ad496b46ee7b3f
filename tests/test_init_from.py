"""`model.init_from`: a stage that starts from an earlier run. Config checks (no torch) on fake run
folders; then, through the CLI, ORPO -> GRPO where the GRPO policy and reference are ORPO's weights."""

import json
import subprocess
import sys

import pytest

from conftest import ROOT, read_jsonl, run_cli
from rlft.config import ConfigError, compose, validate

DEMO = ROOT / "configs" / "examples"


def fake_run(root, base="tiny", finished=True, **model):
    root.mkdir(parents=True)
    lines = ["model:", f"  name_or_path: {base}"] + [f"  {k}: {v}" for k, v in model.items()]
    (root / "config.yaml").write_text("\n".join(lines) + "\nstage: orpo\n")
    if finished:
        (root / "final").mkdir()
        (root / "final" / "adapter_config.json").write_text("{}")
    return root


def check(*overrides, files=(DEMO / "grpo_demo.yaml",)):
    return validate(compose("grpo", "cpu", list(files), list(overrides)))


def test_init_from_sets_base_reference_and_hash(tmp_path):
    run = fake_run(tmp_path / "orpo", base="tiny", tiny_init_std=0.2)
    cfg, _ = check(f"model.init_from={run / 'final'}")  # the run's final/ names the run
    assert cfg.model.init_from == str(run)
    assert cfg.model.ref == "init" and cfg.model.tiny_init_std == 0.2
    assert len(cfg.model.init_config_hash) == 12


def test_user_reference_and_base_are_kept(tmp_path):
    run = fake_run(tmp_path / "orpo")
    cfg, _ = check(f"model.init_from={run}", "model.ref=base")
    assert cfg.model.ref == "base"


def test_missing_unfinished_and_mismatched_runs_are_errors(tmp_path):
    with pytest.raises(ConfigError, match="no run folder"):
        check(f"model.init_from={tmp_path / 'nope'}")
    run = fake_run(tmp_path / "half", finished=False)
    with pytest.raises(ConfigError, match="has not finished"):
        check(f"model.init_from={run}")
    run = fake_run(tmp_path / "other", base="org/other-model")
    with pytest.raises(ConfigError, match="differs from the base model"):
        check(f"model.init_from={run}")  # grpo_demo.yaml names `tiny`
    with pytest.raises(ConfigError, match="needs model.init_from"):
        check("model.ref=init")


def test_show_config_explains_the_reference(tmp_path):
    run = fake_run(tmp_path / "orpo")
    res = run_cli("show-config", "--stage", "grpo", "-c", DEMO / "grpo_demo.yaml", f"model.init_from={run}",
                  "--explain")
    assert res.returncode == 0, res.stderr
    assert "implied by model.init_from" in res.stdout
    assert "the model this stage starts from" in res.stdout


SAME_WEIGHTS = """
import sys, torch
from peft import PeftModel
from rlft.config import compose, validate
from rlft.models.loading import load_model_and_tokenizer, load_reference
from rlft.tiny import ensure_tiny_model
from transformers import AutoModelForCausalLM
orpo, mode, ref = sys.argv[1], sys.argv[2], sys.argv[3]
cfg, _ = validate(compose("grpo", "cpu", ["configs/examples/grpo_demo.yaml"],
                          [f"model.init_from={orpo}", f"model.init_mode={mode}", f"model.ref={ref}"]))
policy, _ = load_model_and_tokenizer(cfg)
reference = load_reference(cfg)
base = AutoModelForCausalLM.from_pretrained(str(ensure_tiny_model(init_std=cfg.model.tiny_init_std)))
fresh = AutoModelForCausalLM.from_pretrained(str(ensure_tiny_model(init_std=cfg.model.tiny_init_std)))
merged = PeftModel.from_pretrained(fresh, orpo + "/final").merge_and_unload()
def same(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    return all(torch.equal(sa[k], sb[k]) for k in sb)
if mode == "merge":
    print("POLICY_IS_MERGED", same(policy, merged), "POLICY_IS_BASE", same(policy, base))
else:
    print("POLICY_HAS_ADAPTER", hasattr(policy, "peft_config"))
print("REF_NONE", reference is None)
if reference is not None:
    print("REF_IS_MERGED", same(reference, merged), "REF_IS_BASE", same(reference, base))
"""


@pytest.mark.e2e
def test_grpo_starts_from_an_orpo_run(tmp_path):
    orpo = tmp_path / "orpo"
    res = run_cli("train", "--stage", "orpo", "--hw", "cpu", "-c", DEMO / "orpo_demo.yaml",
                  f"train.output_dir={orpo}", "train.max_steps=3")
    assert res.returncode == 0, res.stderr[-2000:]

    def probe(mode, ref):
        out = subprocess.run([sys.executable, "-c", SAME_WEIGHTS, str(orpo), mode, ref], cwd=ROOT, capture_output=True,
                             text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-2000:]
        return out.stdout.split()

    merge_init = probe("merge", "init")  # merged ORPO weights + fresh LoRA; reference = adapter disabled = ORPO's
    assert merge_init[:4] == ["POLICY_IS_MERGED", "True", "POLICY_IS_BASE", "False"] and "REF_NONE" in merge_init
    assert merge_init[merge_init.index("REF_NONE") + 1] == "True"
    merge_base = probe("merge", "base")  # the original base, loaded on its own
    assert merge_base[-4:] == ["REF_IS_MERGED", "False", "REF_IS_BASE", "True"]
    cont_init = probe("continue", "init")  # ORPO's adapter keeps training; reference = ORPO's merged weights
    assert cont_init[:2] == ["POLICY_HAS_ADAPTER", "True"]
    assert cont_init[-4:] == ["REF_IS_MERGED", "True", "REF_IS_BASE", "False"]

    grpo = tmp_path / "grpo"
    res = run_cli("train", "--stage", "grpo", "--hw", "cpu", "-c", DEMO / "grpo_demo.yaml", f"model.init_from={orpo}",
                  f"train.output_dir={grpo}", "train.max_steps=2", "grpo.kl_penalty_coef=0.05")
    assert res.returncode == 0, res.stderr[-2000:]
    saved = (grpo / "config.yaml").read_text()
    assert f"init_from: {orpo}" in saved and "ref: init" in saved and "init_config_hash:" in saved
    assert json.loads((grpo / "summary.json").read_text())["status"] == "finished"
    # the stage really trains from ORPO's weights: same seed, the base model samples other completions
    plain = tmp_path / "plain"
    res = run_cli("train", "--stage", "grpo", "--hw", "cpu", "-c", DEMO / "grpo_demo.yaml", f"train.output_dir={plain}",
                  "train.max_steps=1", "grpo.kl_penalty_coef=0.05")
    assert res.returncode == 0, res.stderr[-2000:]
    first = lambda run: [r["completion"] for r in read_jsonl(run / "completions.jsonl") if r["step"] == 1]  # noqa: E731
    assert first(grpo) and first(grpo) != first(plain)


def test_a_resume_of_a_run_that_saved_a_relative_init_from_sees_no_change(tmp_path, monkeypatch):
    """Older rlft saved init_from as given (relative to the working folder); it is recorded absolute now, and a
    resume from the same folder is no config change."""
    from rlft.rundir.resume_keys import config_changes

    monkeypatch.chdir(tmp_path)
    fake_run(tmp_path / "runs" / "orpo")
    cfg, _ = check("model.init_from=runs/orpo")
    from rlft.config.schema import to_dict

    saved = to_dict(cfg)
    saved["model"]["init_from"] = "runs/orpo"
    assert config_changes(saved, cfg) == []
    saved["model"]["init_from"] = "runs/other"
    assert [k for k, _, _ in config_changes(saved, cfg)] == ["model.init_from"]
