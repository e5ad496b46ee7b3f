"""`rlft validate-config` and `rlft list` through the CLI: bundled profiles pass, every bad input
gives exit 2 and one `error: KEY (LAYER): MESSAGE` line per problem, never a traceback."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import ROOT, run_cli
from rlft.cli import app
from rlft.config import HARDWARE, STAGES, configs_dir

REPO = configs_dir().parent
LINE = re.compile(r"^(error|warning): (\S+) \((.+?)\): (.+)$")
NO_GPU = {"CUDA_VISIBLE_DEVICES": ""}  # the hardware-fit check then sees no NVIDIA GPU on any machine


def cli(*args: str, env: dict | None = None):
    result = CliRunner().invoke(app, [str(a) for a in args], env=env)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    return result


def problems(result, level: str = "error") -> list[tuple[str, str, str]]:
    """(key, layer, message) of each problem line; every line on stderr must be well-formed."""
    out = []
    for text in result.stderr.splitlines():
        if text.startswith("config invalid:"):
            continue
        m = LINE.match(text)
        assert m, f"malformed problem line: {text!r}"
        if m.group(1) == level:
            out.append(m.group(2, 3, 4))
    return out


def invalid(*args: str, env: dict | None = None) -> list[tuple[str, str, str]]:
    result = cli("validate-config", *args, env=env)
    assert result.exit_code == 2, result.output
    errors = problems(result)
    n = len(errors)
    assert f"config invalid: {n} error{'s' if n != 1 else ''}" in result.stderr
    return errors


def one_error(*args: str, env: dict | None = None) -> tuple[str, str, str]:
    errors = invalid(*args, env=env)
    assert len(errors) == 1, errors
    return errors[0]


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    """Run from a scratch folder so user files are named relative to it (`bad.yaml:2`)."""
    monkeypatch.chdir(tmp_path)


def write(name: str, text: str) -> str:
    Path(name).write_text(text)
    return name


# --- every bundled stage x hardware profile validates -------------------------------------------

@pytest.mark.parametrize("hw", HARDWARE)
@pytest.mark.parametrize("stage", STAGES)
def test_bundled_profiles_validate(stage, hw):
    result = cli("validate-config", "--stage", stage, "--hw", hw)
    assert result.exit_code == 0, result.output
    assert problems(result) == []
    assert result.stdout.startswith(f"config OK: stage {stage}, hw {hw}")


def test_there_are_42_bundled_combinations():
    assert len(STAGES) == 7 and len(HARDWARE) == 6
    for stage in STAGES:
        assert (configs_dir() / "stages" / f"{stage}.yaml").is_file()
    for hw in HARDWARE:
        assert (configs_dir() / "hw" / f"{hw}.yaml").is_file()


# --- bad input: exit 2, one line per problem naming key and layer ------------------------------

def test_unknown_key_suggests_the_real_one_with_file_and_line():
    write("typo.yaml", "# my run\nlora:\n  alpha: 8\n")
    key, layer, msg = one_error("-c", "typo.yaml")
    assert (key, layer) == ("lora.alpha", "typo.yaml:3")
    assert "did you mean `lora.lora_alpha`?" in msg


def test_unknown_key_on_the_command_line():
    key, layer, msg = one_error("train.learnig_rate=1e-5")
    assert (key, layer) == ("train.learnig_rate", "command line")
    assert "did you mean `train.learning_rate`?" in msg


def test_unknown_section_names_the_valid_sections():
    write("s.yaml", "optimizer:\n  lr: 1\n")
    key, layer, msg = one_error("-c", "s.yaml")
    assert (key, layer) == ("optimizer", "s.yaml:1")
    for section in ("model", "lora", "train", "data", "grpo", "ppo", "dpo", "hw", "monitor"):
        assert section in msg


def test_misspelt_section_suggests_the_section():
    write("s.yaml", "lorra:\n  r: 8\n")
    key, layer, msg = one_error("-c", "s.yaml")
    assert (key, layer) == ("lorra", "s.yaml:1")
    assert "did you mean `lora`?" in msg


def test_wrong_type():
    key, layer, msg = one_error("train.learning_rate=fast")
    assert (key, layer) == ("train.learning_rate", "command line")
    assert "fast" in msg and "> 0 and <= 1" in msg


@pytest.mark.parametrize("override, allowed", [
    ("grpo.group_size=0", "between 2 and 64"),
    ("lora.lora_dropout=1.5", ">= 0 and < 1"),
    ("train.learning_rate=-1e-5", "> 0 and <= 1"),
    ("train.optim=adam", "one of adamw_torch"),
])
def test_out_of_range_gives_the_allowed_range(override, allowed):
    key, layer, msg = one_error(override)
    assert key == override.split("=")[0] and layer == "command line"
    assert allowed in msg


def test_cross_field_batch_not_divisible_by_substeps():
    key, layer, msg = one_error("grpo.batch_size=10")
    # the key that breaks it is num_substeps, set by the grpo stage profile
    assert key == "grpo.num_substeps" and layer.startswith("configs/stages/grpo.yaml:")
    assert "grpo.batch_size (10)" in msg and "divisible" in msg


def test_cross_field_bf16_and_fp16():
    key, layer, msg = one_error("train.bf16=true", "train.fp16=true")
    assert (key, layer) == ("train.fp16", "command line")
    assert "train.bf16" in msg


def test_cross_field_bf16_on_mps():
    key, layer, msg = one_error("--hw", "mps", "train.bf16=true", "train.fp16=false")
    assert (key, layer) == ("train.bf16", "command line")
    assert "MPS" in msg


def test_cross_field_kl_without_reference():
    key, layer, msg = one_error("model.ref=null")
    assert key == "grpo.kl_penalty_coef" and layer.startswith("configs/stages/grpo.yaml:")
    assert "model.ref" in msg


def test_kl_off_needs_no_reference():
    result = cli("validate-config", "model.ref=null", "grpo.kl_penalty_coef=0", "grpo.adaptive_kl=false")
    assert result.exit_code == 0, result.output


def test_cross_field_lora_alpha_null_with_lora_on():
    key, layer, msg = one_error("lora.lora_alpha=null")
    assert (key, layer) == ("lora.lora_alpha", "command line")
    assert "LoRA" in msg
    assert cli("validate-config", "lora.lora_alpha=null", "lora.enabled=false").exit_code == 0


def test_cross_field_ppo_mini_batch():
    key, layer, msg = one_error("--stage", "ppo", "ppo.mini_batch_size=5")
    assert (key, layer) == ("ppo.mini_batch_size", "command line")
    assert "ppo.batch_size (16)" in msg


def test_reference_path_that_does_not_exist():
    key, layer, msg = one_error("model.ref=./no/such/checkpoint")
    assert (key, layer) == ("model.ref", "command line") and "not found" in msg


def test_reference_hub_id_is_not_an_error():
    result = cli("validate-config", "model.ref=some-org/some-model")
    assert result.exit_code == 0, result.output
    assert [k for k, _, _ in problems(result, "warning")].count("model.ref") == 1


@pytest.mark.parametrize("args, bad, guess", [
    (["--stage", "grp"], "--stage", "grpo"),
    (["--hw", "a10"], "--hw", "a100"),
    (["--stage", "nonsense"], "--stage", None),
])
def test_unknown_stage_or_hardware_lists_the_valid_ones(args, bad, guess):
    key, layer, msg = one_error(*args)
    assert (key, layer) == (bad, "command line")
    valid = STAGES if bad == "--stage" else HARDWARE
    assert all(name in msg for name in valid)
    if guess:
        assert f"did you mean `{guess}`?" in msg
    else:
        assert "did you mean" not in msg


def test_yaml_syntax_error_names_file_and_line():
    write("broken.yaml", "train:\n  learning_rate: 1e-5\n  seed: [1, 2\n")
    key, layer, msg = one_error("-c", "broken.yaml")
    assert re.fullmatch(r"broken\.yaml:\d+", layer)
    assert "YAML syntax error" in msg


def test_yaml_syntax_error_line_is_the_bad_line():
    write("broken.yaml", "train:\n  learning_rate: 1e-5\n  seed: 1\n   foo: 2\n")
    _, layer, _ = one_error("-c", "broken.yaml")
    assert layer == "broken.yaml:4"


def test_missing_config_file_names_its_path():
    key, layer, msg = one_error("-c", "nowhere/missing.yaml")
    assert "nowhere/missing.yaml" in layer and "not found" in msg


def test_unreadable_file_is_a_problem_not_a_traceback():
    Path("latin1.yaml").write_bytes(b"data:\n  system_prompt: caf\xe9\n")
    key, layer, msg = one_error("-c", "latin1.yaml")
    assert layer == "latin1.yaml" and "UTF-8" in msg


def test_duplicate_key_in_a_file():
    write("dup.yaml", "train:\n  seed: 1\n  seed: 2\n")
    assert one_error("-c", "dup.yaml")[:2] == ("train.seed", "dup.yaml:3")


def test_two_problems_in_one_file_are_both_reported():
    write("two.yaml", "train:\n  learning_rate: fast\ngrpo:\n  group_size: 0\n")
    errors = invalid("-c", "two.yaml")
    assert sorted((k, layer) for k, layer, _ in errors) == [("grpo.group_size", "two.yaml:4"),
                                                            ("train.learning_rate", "two.yaml:2")]


def test_problems_from_several_layers_at_once():
    write("a.yaml", "lora:\n  alpha: 8\n")
    errors = invalid("-c", "a.yaml", "train.learning_rate=fast", "ppo.mini_batch_size=5")
    assert {(k, layer) for k, layer, _ in errors} == {
        ("lora.alpha", "a.yaml:2"), ("train.learning_rate", "command line"), ("ppo.mini_batch_size", "command line")}


def test_malformed_override():
    key, layer, msg = one_error("learning_rate")
    assert (key, layer) == ("learning_rate", "command line") and "KEY=VALUE" in msg


def test_unknown_reward_key():
    key, layer, msg = one_error("rewards=[{fn: exact_match, wieght: 2}]")
    assert (key, layer) == ("rewards[0].wieght", "command line") and "did you mean `weight`?" in msg


# --- hardware fit without torch --------------------------------------------------------------

def test_gpu_profile_without_a_gpu_is_a_warning_not_an_error():
    result = cli("validate-config", "--stage", "grpo", "--hw", "a100", env=NO_GPU)
    assert result.exit_code == 0, result.output
    warnings = {k: (layer, msg) for k, layer, msg in problems(result, "warning")}
    layer, msg = warnings["hw.device"]
    assert layer.startswith("configs/hw/a100.yaml:") and "NVIDIA GPU" in msg


def test_gpu_profile_with_a_gpu_has_no_fit_warning(monkeypatch):
    validate_module = sys.modules["rlft.config.validate"]  # `rlft.config.validate` is also a function
    monkeypatch.setattr(validate_module, "_nvidia_visible", lambda: True)
    result = cli("validate-config", "--stage", "grpo", "--hw", "a100")
    assert result.exit_code == 0
    assert "hw.device" not in [k for k, _, _ in problems(result, "warning")]


# --- preference data and settings (dpo, orpo) -------------------------------------------------

PAIRS_WRONG_COLUMN = '{"prompt": "p", "chosen": "a", "rejected_answer": "b"}\n'


@pytest.mark.parametrize("stage", ["dpo", "orpo"])
def test_preference_data_columns_are_checked(stage):
    write("pairs.jsonl", PAIRS_WRONG_COLUMN)
    key, layer, msg = one_error("--stage", stage, "data.train=pairs.jsonl")
    assert (key, layer) == ("data.train", "command line")
    assert "column 'rejected' not found in pairs.jsonl" in msg and "did you mean 'rejected_answer'?" in msg
    assert cli("validate-config", "--stage", stage, "data.train=pairs.jsonl",
               "data.rejected_column=rejected_answer").exit_code == 0


def test_preference_eval_data_and_empty_file_are_checked():
    write("pairs.jsonl", '{"prompt": "p", "chosen": "a", "rejected": "b"}\n')
    write("empty.jsonl", "")
    key, _, msg = one_error("--stage", "dpo", "data.train=pairs.jsonl", "data.eval=empty.jsonl")
    assert key == "data.eval" and "empty" in msg and "empty.jsonl" in msg


def test_preference_bad_data_check_imports_no_heavy_library(tmp_path):
    from test_cli_startup import HEAVY, imported_modules

    write("pairs.jsonl", PAIRS_WRONG_COLUMN)
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "rlft.cli", "validate-config", "--stage", "dpo",
                           "data.train=pairs.jsonl"], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "error: data.train (command line): data.train: column 'rejected' not found" in proc.stderr
    assert not sorted(m for m in imported_modules(proc.stderr) if m.partition(".")[0] in HEAVY)


def test_label_smoothing_only_where_trl_applies_it():
    key, layer, msg = one_error("--stage", "dpo", "dpo.label_smoothing=0.1", "dpo.loss_type=hinge")
    assert (key, layer) == ("dpo.label_smoothing", "command line") and "hinge" in msg
    for loss in ("sigmoid", "robust"):
        assert cli("validate-config", "--stage", "dpo", "dpo.label_smoothing=0.1",
                   f"dpo.loss_type={loss}").exit_code == 0


def test_dpo_without_reference_warns_that_it_uses_the_base_model():
    result = cli("validate-config", "--stage", "dpo", "model.ref=null")
    assert result.exit_code == 0
    assert "model.ref" in [k for k, _, _ in problems(result, "warning")]


# --- examples and the TRL passthrough ----------------------------------------------------------

@pytest.mark.parametrize("stage, hw, example", [
    ("dpo", "a100", "production.yaml"),
    ("grpo", "a100", "production.yaml"),
    ("orpo", "rtx4090", "production.yaml"),
    ("dpo", "mps", "rapid_experimentation.yaml"),
    ("grpo", "cpu", "rapid_experimentation.yaml"),
])
def test_example_configs_validate(stage, hw, example):
    result = cli("validate-config", "--stage", stage, "--hw", hw, "-c", configs_dir() / "examples" / example)
    assert result.exit_code == 0, result.output
    assert problems(result) == []


def _needs_trl_sources(stage: str = "dpo") -> None:
    from rlft.config.trl_fields import trainer_config_fields

    if trainer_config_fields(stage) is None:
        pytest.skip("TRL sources not installed")


def test_production_passthrough_keys_are_real_trl_fields():
    _needs_trl_sources()
    from rlft.config.trl_fields import trainer_config_fields

    fields = trainer_config_fields("dpo")
    assert {"load_best_model_at_end", "metric_for_best_model", "beta", "learning_rate"} <= fields


def test_unknown_trl_key_is_an_error_with_did_you_mean():
    _needs_trl_sources()
    key, layer, msg = one_error("--stage", "dpo", "trl.load_best_model_at_endd=true")
    assert (key, layer) == ("trl.load_best_model_at_endd", "command line")
    assert "did you mean `trl.load_best_model_at_end`?" in msg
    key, _, msg = one_error("--stage", "dpo", "trl.foo_bar=1")
    assert key == "trl.foo_bar" and "not an option of TRL" in msg


def test_trl_key_rlft_models_points_to_the_rlft_key():
    _needs_trl_sources("grpo")
    write("p.yaml", "trl:\n  learning_rate: 1.0e-5\n")
    key, layer, msg = one_error("--stage", "grpo", "-c", "p.yaml")
    assert (key, layer) == ("trl.learning_rate", "p.yaml:2")
    assert "train.learning_rate" in msg


@pytest.mark.parametrize("trl_key, rlft_key", [
    ("warmup_steps", "train.warmup_ratio"),
    ("dataloader_num_workers", "train.dataloader_num_workers"),
    ("steps_per_generation", "grpo.num_substeps"),
    ("beta", "grpo.kl_penalty_coef"),
])
def test_every_trl_option_rlft_sets_itself_is_refused(trl_key, rlft_key):
    _needs_trl_sources("grpo")
    key, _, msg = one_error("--stage", "grpo", f"trl.{trl_key}=1")
    assert key == f"trl.{trl_key}" and f"`{rlft_key}`" in msg


def test_trl_keys_are_checked_against_the_stage_trainer():
    _needs_trl_sources("grpo")
    key, _, msg = one_error("--stage", "dpo", "trl.num_generations=4")  # a GRPO option, not DPO
    assert key == "trl.num_generations"
    key, _, msg = one_error("--stage", "grpo", "trl.num_generations=4")
    assert "grpo.group_size" in msg



# --- `trl:` keys a path does not read, or that fight rlft's own keys: refused at validate time ---------------

def test_trl_loss_keys_rlft_models_are_refused_with_rlft_s_key():
    _needs_trl_sources("grpo")
    write("p.yaml", "grpo:\n  loss_fn: ppo\ntrl:\n  epsilon_high: 0.28\n")
    key, layer, msg = one_error("--stage", "grpo", "-c", "p.yaml")
    assert (key, layer) == ("trl.epsilon_high", "p.yaml:4")
    assert "did you mean `grpo.clip_high`?" in msg


@pytest.mark.parametrize("over, key, rlft_key", [
    ("trl.epsilon=0.3", "trl.epsilon", "grpo.clip_low"),
    ("trl.epsilon_high=0.28", "trl.epsilon_high", "grpo.clip_high"),  # issue 34's trap: with the unclipped loss too
    ("trl.delta=2.0", "trl.delta", "grpo.clip_ratio_c"),
    ("trl.importance_sampling_level=sequence", "trl.importance_sampling_level", "grpo.is_level"),
    ("trl.scale_rewards=batch", "trl.scale_rewards", "grpo.baseline_mode"),
    ("trl.mask_truncated_completions=true", "trl.mask_truncated_completions", "grpo.mask_truncated"),
    ("trl.loss_type=dr_grpo", "trl.loss_type", "grpo.loss_agg: seq_mean_token_sum_norm"),
    ("trl.loss_type=grpo", "trl.loss_type", "grpo.loss_agg: seq_mean_token_mean"),
    ("trl.loss_type=dapo", "trl.loss_type", "grpo.loss_agg: token_mean"),
    ("trl.loss_type=cispo", "trl.loss_type", "grpo.loss_fn: cispo"),
])
def test_trl_loss_keys_name_the_rlft_key_to_set(over, key, rlft_key):
    _needs_trl_sources("grpo")
    for loss in ("importance_sampling", "ppo"):
        got, _, msg = one_error("--stage", "grpo", f"grpo.loss_fn={loss}", over)
        assert got == key and f"did you mean `{rlft_key}" in msg, msg


def test_trl_loss_types_rlft_does_not_offer_are_refused():
    _needs_trl_sources("grpo")
    key, _, msg = one_error("--stage", "grpo", "trl.loss_type=sapo")
    assert key == "trl.loss_type" and "rlft has no sapo loss" in msg and "grpo.loss_fn" in msg
    key, _, msg = one_error("--stage", "grpo", "trl.vespo_k_pos=2.0")
    assert key == "trl.vespo_k_pos" and "loss_type vespo" in msg


@pytest.mark.parametrize("over, key, words", [
    (("grpo.loss_fn=importance_sampling", "grpo.clip_high=0.28"), "grpo.clip_high", "grpo.loss_fn is `importance"),
    (("grpo.loss_fn=importance_sampling", "grpo.clip_ratio_c=3.0"), "grpo.clip_ratio_c", "grpo.loss_fn is `impo"),
    (("grpo.loss_fn=importance_sampling", "grpo.clip_low=0.2"), "grpo.clip_low", "never clips"),
    (("grpo.loss_fn=cispo", "grpo.clip_high=4.0", "grpo.clip_low=0.2"), "grpo.clip_low", "grpo.loss_fn is `cispo`"),
    (("grpo.loss_fn=cispo", "grpo.clip_high=4.0", "grpo.clip_ratio_c=3.0"), "grpo.clip_ratio_c", "`cispo`"),
    (("grpo.loss_fn=cispo", "grpo.clip_high=4.0", "grpo.loss_agg=seq_mean_token_mean"), "grpo.loss_agg", "cispo"),
    (("grpo.loss_fn=ppo", "grpo.clip_ratio_c=1.1"), "grpo.clip_ratio_c", "grpo.clip_high"),
])
def test_a_key_the_chosen_loss_ignores_is_refused_naming_both(over, key, words):
    got, _, msg = one_error("--stage", "grpo", *over)
    assert got == key and words in msg, msg


@pytest.mark.parametrize("over, upper", [
    ({"clip_low": 0.5}, 1.2),                       # clip_high null: the upper clip stays 1 + clip_range
    ({"clip_low": 0.1, "clip_range": 0.4}, 1.4),
    ({"clip_low": 0.5, "clip_range": 0.3}, 1.3),
    ({"clip_low": 0.1, "clip_high": 0.4}, 1.4),
])
def test_dual_clip_is_checked_against_the_upper_clip_the_loss_uses(over, upper):
    """validate-config refuses grpo.clip_ratio_c at or below the upper clip exactly when the loss clips there:
    the check and rlft.algos.loss_settings resolve clip_high null the same way (to clip_range)."""
    from types import SimpleNamespace

    from rlft.algos import loss_settings

    grpo = dict(loss_fn="ppo", clip_range=0.2, clip_low=None, clip_high=None, clip_ratio_c=1.3, is_level="token",
                loss_agg="token_mean", max_tokens=None) | over
    assert 1 + loss_settings(SimpleNamespace(**grpo)).high == pytest.approx(upper)
    args = ["--stage", "grpo", "grpo.loss_fn=ppo", "grpo.clip_ratio_c=1.3", *(f"grpo.{k}={v}" for k, v in over.items())]
    if 1.3 > upper:
        ok = cli("validate-config", *args)
        assert ok.exit_code == 0, ok.output
    else:
        key, _, msg = one_error(*args)
        assert key == "grpo.clip_ratio_c" and f"= {upper:g}" in msg, msg


def test_the_loss_menu_validates_and_names_its_choices():
    ok = cli("validate-config", "--stage", "grpo", "grpo.loss_fn=ppo", "grpo.clip_high=0.28", "grpo.clip_ratio_c=3.0",
             "grpo.loss_agg=seq_mean_token_sum_norm", "grpo.is_level=sequence", "grpo.clip_low=3e-4")
    assert ok.exit_code == 0, ok.output
    key, _, msg = one_error("--stage", "grpo", "grpo.loss_agg=token_men")
    assert key == "grpo.loss_agg" and "did you mean `token_mean`?" in msg
    key, _, msg = one_error("--stage", "grpo", "grpo.loss_fn=cipso")
    assert key == "grpo.loss_fn" and "cispo" in msg


def test_trl_on_grpo_episodes_is_refused_naming_the_path():
    _needs_trl_sources("grpo")
    example = REPO / "configs" / "examples" / "tool_use_grpo.yaml"
    key, layer, msg = one_error("--stage", "grpo", "--hw", "cpu", "-c", example, "trl.loss_type=dr_grpo")
    assert (key, layer) == ("trl.loss_type", "command line")
    assert "env.name" in msg and "episode loop" in msg and "does not read trl: keys" in msg


def test_trl_on_ppo_is_refused_naming_the_stage():
    write("p.yaml", "trl:\n  top_k: 20\n")
    key, layer, msg = one_error("--stage", "ppo", "-c", "p.yaml")
    assert (key, layer) == ("trl.top_k", "p.yaml:2")
    assert "stage `ppo` runs rlft's own trainer" in msg and "does not read trl: keys" in msg


def test_vllm_trl_keys_need_the_vllm_backend():
    _needs_trl_sources("grpo")
    key, _, msg = one_error("--stage", "grpo", "trl.vllm_gpu_memory_utilization=0.5")
    assert key == "trl.vllm_gpu_memory_utilization" and "grpo.generation_backend" in msg
    for trl_key, rlft_key in (("use_vllm", "grpo.generation_backend"), ("vllm_mode", "grpo.vllm_mode")):
        key, _, msg = one_error("--stage", "grpo", f"trl.{trl_key}=server")
        assert key == f"trl.{trl_key}" and f"`{rlft_key}`" in msg


def test_sampled_sft_refuses_packing_at_validate_time():
    _needs_trl_sources("rs_sft")
    for stage in ("rs_sft", "awr"):
        key, _, msg = one_error("--stage", stage, "trl.packing=true")
        assert key == "trl.packing" and "one sequence at a time" in msg


def test_a_legit_trl_key_on_single_turn_grpo_still_validates():
    _needs_trl_sources("grpo")
    for over in (("trl.top_k=20", "grpo.loss_agg=seq_mean_token_sum_norm", "grpo.mask_truncated=true"),
                 ("grpo.loss_fn=importance_sampling", "grpo.loss_agg=seq_mean_token_mean", "trl.top_k=20"),
                 ("grpo.async.max_steps_off_policy=1", "trl.top_k=20")):
        result = cli("validate-config", "--stage", "grpo", *over)
        assert result.exit_code == 0, (over, result.output)
        assert not [p for p in problems(result, "warning") if p[0].startswith("trl.")]

# --- rlft list ---------------------------------------------------------------------------------

def test_list_names_every_stage_hw_and_example():
    result = cli("list")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    firsts = [line.split()[0] for line in lines if line.startswith("  ")]
    for name in (*STAGES, *HARDWARE):
        assert name in firsts, name
    assert sum("configs/examples/production.yaml" in line for line in lines) == 1
    assert sum("configs/examples/rapid_experimentation.yaml" in line for line in lines) == 1
    # each entry carries a description from the profile's opening comment
    assert all(len(line.split(None, 1)) == 2 for line in lines if line.startswith("  "))


# --- the real entry point ----------------------------------------------------------------------

def test_python_m_entry_point_exit_codes():
    bad = subprocess.run([sys.executable, "-m", "rlft.cli", "validate-config", "--stage", "grp"],
                         capture_output=True, text=True, cwd=REPO)
    assert bad.returncode == 2
    assert "Traceback" not in bad.stderr
    assert "error: --stage (command line): unknown stage `grp`; did you mean `grpo`?" in bad.stderr
    good = subprocess.run([sys.executable, "-m", "rlft.cli", "validate-config", "--stage", "dpo", "--hw", "cpu"],
                          capture_output=True, text=True, cwd=REPO)
    assert good.returncode == 0, good.stderr
    assert good.stdout.startswith("config OK: stage dpo, hw cpu")


@pytest.mark.parametrize("generation, said", [
    ("transformers", "sampling.backend vllm moves only its evaluations to vLLM"),
    ("vllm", "two engines' memory in one process")])
def test_single_turn_grpo_says_what_sampling_backend_vllm_moves(generation, said):
    """Single-turn GRPO trains on TRL's samples (grpo.generation_backend): sampling.backend vllm moves its evaluations
    only, and both keys at vllm mean two engines; each is said as a warning naming sampling.backend."""
    res = run_cli("validate-config", "--stage", "grpo", "--hw", "cpu", "-c", ROOT / "configs/examples/grpo_demo.yaml",
                  "sampling.backend=vllm", f"grpo.generation_backend={generation}")
    warnings = [line for line in res.stderr.splitlines() if line.startswith("warning: sampling.backend")]
    assert len(warnings) == 1 and said in warnings[0], res.stderr
    episodes = run_cli("validate-config", "--stage", "grpo", "--hw", "cpu", "-c",
                       ROOT / "configs/examples/tool_use_grpo.yaml", "sampling.backend=vllm")
    assert "warning: sampling.backend" not in episodes.stderr  # over episodes rlft's own sampler does it all
