"""Layer precedence, provenance, override parsing and interpolation of the config system,
tested through `rlft.config.compose` and `validate` directly (no CLI)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rlft.config import CLI_LAYER, ConfigError, compose, configs_dir, validate
from rlft.config.compose import load_layer, parse_overrides

CONFIGS = configs_dir()


def line_of(rel: str, dotted: str) -> int:
    """1-based line of `dotted` (section.key) in a bundled profile, found by reading the file."""
    section, _, key = dotted.partition(".")
    lines = (CONFIGS / rel).read_text().splitlines()
    start = next(i for i, text in enumerate(lines) if re.match(rf"{section}:\s*(#.*)?$", text))
    for i in range(start + 1, len(lines)):
        if re.match(r"\S", lines[i]):
            break
        if re.match(rf"\s+{re.escape(key)}:", lines[i]):
            return i + 1
    raise AssertionError(f"{dotted} not set in {rel}")


def get(data: dict, dotted: str):
    node = data
    for part in dotted.split("."):
        node = node[part]
    return node


@pytest.fixture
def user_files(tmp_path, monkeypatch):
    """Two user files that each set train.learning_rate (and one key of their own)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "first.yaml").write_text("# first user file\ntrain:\n  learning_rate: 2.0e-6\n  warmup_ratio: 0.2\n")
    (tmp_path / "second.yaml").write_text("train:\n  eval_steps: 7\n  learning_rate: 3.0e-6\n")
    return ["first.yaml", "second.yaml"]


# --- precedence: base < stage < hw < files (in order) < command line -------------------------

def test_bundled_profiles_set_the_keys_these_tests_rely_on():
    base = load_layer(CONFIGS / "base.yaml").flat
    stage = load_layer(CONFIGS / "stages" / "grpo.yaml").flat
    hw = load_layer(CONFIGS / "hw" / "cpu.yaml").flat
    assert base["train.bf16"] is True and hw["train.bf16"] is False
    assert "train.learning_rate" not in base and "train.learning_rate" in stage
    assert "lora.r" in base and "lora.r" not in stage and "lora.r" not in hw
    assert "train.weight_decay" in stage and "train.weight_decay" not in base and "train.weight_decay" not in hw
    assert "monitor.kl_warn" not in base and "monitor.kl_warn" not in stage and "monitor.kl_warn" not in hw


def test_key_only_in_base_comes_from_base():
    c = compose("grpo", "cpu")
    assert c.data["lora"]["r"] == 16
    assert c.layer_of("lora.r") == f"configs/base.yaml:{line_of('base.yaml', 'lora.r')}"


def test_hw_overrides_base():
    c = compose("grpo", "cpu")
    cfg, _ = validate(c)
    assert cfg.train.bf16 is False
    assert c.layer_of("train.bf16") == f"configs/hw/cpu.yaml:{line_of('hw/cpu.yaml', 'train.bf16')}"
    # and base's value stands where the hw profile agrees with it
    c = compose("grpo", "a100")
    assert validate(c)[0].train.bf16 is True
    assert c.layer_of("train.bf16") == f"configs/hw/a100.yaml:{line_of('hw/a100.yaml', 'train.bf16')}"


def test_stage_sets_key_base_does_not():
    c = compose("grpo", "cpu")
    cfg, _ = validate(c)
    assert cfg.train.learning_rate == pytest.approx(1e-6)
    line = line_of("stages/grpo.yaml", "train.learning_rate")
    assert c.layer_of("train.learning_rate") == f"configs/stages/grpo.yaml:{line}"
    assert c.layer_of("train.weight_decay").startswith("configs/stages/grpo.yaml:")


def test_hw_overrides_stage():
    # grpo sets gradient_accumulation_steps 4, the cpu profile 1: hardware wins
    c = compose("grpo", "cpu")
    assert validate(c)[0].train.gradient_accumulation_steps == 1
    assert c.layer_of("train.gradient_accumulation_steps").startswith("configs/hw/cpu.yaml:")


@pytest.mark.parametrize("n_files, overrides, value, layer", [
    (0, [], 1e-6, "configs/stages/grpo.yaml"),
    (1, [], 2e-6, "first.yaml:3"),
    (2, [], 3e-6, "second.yaml:3"),
    (2, ["train.learning_rate=4e-6"], 4e-6, CLI_LAYER),
])
def test_each_layer_overrides_the_one_before(user_files, n_files, overrides, value, layer):
    c = compose("grpo", "cpu", user_files[:n_files], overrides)
    cfg, _ = validate(c)
    assert cfg.train.learning_rate == pytest.approx(value)
    assert c.layer_of("train.learning_rate").startswith(layer)


def test_files_apply_in_the_order_given(user_files):
    c = compose("grpo", "cpu", list(reversed(user_files)))
    assert validate(c)[0].train.learning_rate == pytest.approx(2e-6)
    assert c.layer_of("train.learning_rate") == "first.yaml:3"


def test_provenance_of_every_layer_in_one_config(user_files):
    c = compose("grpo", "cpu", user_files, ["train.learning_rate=4e-6", "grpo.group_size=8"])
    cfg, _ = validate(c)
    assert c.layer_of("lora.r").startswith("configs/base.yaml:")
    assert c.layer_of("train.weight_decay").startswith("configs/stages/grpo.yaml:")
    assert c.layer_of("train.bf16").startswith("configs/hw/cpu.yaml:")
    assert c.layer_of("train.warmup_ratio") == "first.yaml:4"
    assert c.layer_of("train.eval_steps") == "second.yaml:2"
    assert c.layer_of("train.learning_rate") == CLI_LAYER
    assert c.layer_of("grpo.group_size") == CLI_LAYER
    assert c.layer_of("monitor.kl_warn") == "default"
    assert (cfg.train.warmup_ratio, cfg.train.eval_steps, cfg.grpo.group_size) == (0.2, 7, 8)


def test_untouched_key_in_a_touched_section_is_default(user_files):
    # first.yaml has a `train:` section but never sets num_train_epochs: that is the schema default
    c = compose("grpo", "cpu", user_files)
    assert c.layer_of("train.num_train_epochs") == "default"
    assert c.layer_of("model.torch_dtype") == "default"  # base.yaml has `model:` but not this key
    assert c.layer_of("data.train") == "default"


def test_reward_items_are_attributed_to_the_layer_that_set_the_list(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("r.yaml").write_text("data:\n  train: demo\nrewards:\n  - fn: exact_match\n")
    c = compose("grpo", "cpu", ["r.yaml"])
    assert c.layer_of("rewards") == "r.yaml:3"
    assert c.layer_of("rewards[0].fn") == "r.yaml:3"


def test_an_override_replaces_a_list_whole():
    c = compose("grpo", "cpu", overrides=["lora.target_modules=[q_proj]"])
    assert validate(c)[0].lora.target_modules == ["q_proj"]


# --- KEY=VALUE overrides parse like YAML -----------------------------------------------------

@pytest.mark.parametrize("item, key, expected", [
    ("train.learning_rate=1e-5", "train.learning_rate", 1e-5),
    ("train.learning_rate=5.0e-6", "train.learning_rate", 5e-6),
    ("lora.target_modules=[q_proj,v_proj]", "lora.target_modules", ["q_proj", "v_proj"]),
    ("train.tf32=null", "train.tf32", None),
    ("train.tf32=", "train.tf32", None),
    ("train.seed=7", "train.seed", 7),
    ("lora.enabled=false", "lora.enabled", False),
    ("data.train=my.jsonl", "data.train", "my.jsonl"),
    ("rewards=[{fn: exact_match, weight: 2}]", "rewards", [{"fn": "exact_match", "weight": 2}]),
])
def test_override_values_are_parsed_as_yaml(item, key, expected):
    layer = parse_overrides([item])
    value = layer.flat[key]
    assert value == expected
    assert type(value) is type(expected)


def test_override_types_survive_validation():
    c = compose("grpo", "cpu", overrides=["train.learning_rate=1e-5", "lora.target_modules=[q_proj,v_proj]",
                                          "train.tf32=null"])
    cfg, _ = validate(c)
    assert isinstance(cfg.train.learning_rate, float) and cfg.train.learning_rate == 1e-5
    assert cfg.lora.target_modules == ["q_proj", "v_proj"]
    assert cfg.train.tf32 is None


@pytest.mark.parametrize("item", ["train.learning_rate", "=5", "train..seed=1", ".seed=1"])
def test_malformed_overrides_are_problems(item):
    with pytest.raises(ConfigError) as exc:
        parse_overrides([item])
    (problem,) = exc.value.problems
    assert problem.layer == CLI_LAYER and "KEY=VALUE" in problem.message


def test_integer_valued_float_keys_become_floats():
    cfg, _ = validate(compose("grpo", "cpu", overrides=["train.num_train_epochs=2"]))
    assert cfg.train.num_train_epochs == 2.0 and isinstance(cfg.train.num_train_epochs, float)


# --- OmegaConf interpolation -------------------------------------------------------------------

def test_interpolation_resolves_and_validates_as_int(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("i.yaml").write_text("lora:\n  r: 8\n  lora_alpha: ${lora.r}\n")
    c = compose("grpo", "cpu", ["i.yaml"])
    cfg, _ = validate(c)
    assert cfg.lora.lora_alpha == 8 and type(cfg.lora.lora_alpha) is int
    assert c.layer_of("lora.lora_alpha") == "i.yaml:3"


def test_interpolation_sees_later_layers(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("i.yaml").write_text("lora:\n  lora_alpha: ${lora.r}\n")
    cfg, _ = validate(compose("grpo", "cpu", ["i.yaml"], ["lora.r=4"]))
    assert cfg.lora.lora_alpha == 4


def test_interpolation_to_a_string_fails_validation_of_an_int(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("i.yaml").write_text("lora:\n  lora_alpha: ${model.name_or_path}\n")
    with pytest.raises(ConfigError) as exc:
        validate(compose("grpo", "cpu", ["i.yaml"]))
    errors = [p for p in exc.value.problems if p.level == "error"]
    assert [(p.key, p.layer) for p in errors] == [("lora.lora_alpha", "i.yaml:2")]
    assert "expected an integer" in errors[0].message


def test_broken_interpolation_names_key_and_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("i.yaml").write_text("lora:\n  lora_alpha: ${nope.x}\n")
    with pytest.raises(ConfigError) as exc:
        compose("grpo", "cpu", ["i.yaml"])
    (problem,) = exc.value.problems
    assert (problem.key, problem.layer) == ("lora.lora_alpha", "i.yaml:2")
    assert "interpolation failed" in problem.message


def test_no_interpolation_means_no_omegaconf(tmp_path):
    import subprocess
    import sys

    code = ("import sys; from rlft.config import compose, validate; "
            "validate(compose('grpo', 'cpu')); print('omegaconf' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --- loading files ---------------------------------------------------------------------------

def test_yaml_syntax_error_names_file_and_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("bad.yaml").write_text("train:\n  learning_rate: 1e-5\n  seed: 1\n   foo: 2\n")
    with pytest.raises(ConfigError) as exc:
        compose("grpo", "cpu", ["bad.yaml"])
    (problem,) = exc.value.problems
    assert problem.layer == "bad.yaml:4" and "YAML syntax error" in problem.message


def test_duplicate_keys_are_reported(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("dup.yaml").write_text("train:\n  learning_rate: 1e-5\n  learning_rate: 2e-5\n")
    with pytest.raises(ConfigError) as exc:
        compose("grpo", "cpu", ["dup.yaml"])
    (problem,) = exc.value.problems
    assert (problem.key, problem.layer) == ("train.learning_rate", "dup.yaml:3")
    assert "line 2" in problem.message


def test_every_loading_problem_is_collected(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("bad.yaml").write_text("train: [1\n")
    with pytest.raises(ConfigError) as exc:
        compose("grp", "cpu", ["bad.yaml"])
    assert [p.key for p in exc.value.problems] == ["--stage"]  # names are checked before files
    with pytest.raises(ConfigError) as exc:
        compose("grpo", "cpu", ["bad.yaml", "missing.yaml"], ["oops"])
    assert len(exc.value.problems) == 3


def test_empty_file_is_an_empty_layer(tmp_path):
    (tmp_path / "empty.yaml").write_text("# nothing yet\n")
    c = compose("grpo", "cpu", [tmp_path / "empty.yaml"])
    assert len(c.layers) == 5
    validate(c)


def test_non_mapping_file_is_rejected(tmp_path):
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    with pytest.raises(ConfigError) as exc:
        compose("grpo", "cpu", [tmp_path / "list.yaml"])
    assert "must be a mapping" in exc.value.problems[0].message


def test_scientific_notation_without_dot_is_a_float(tmp_path):
    (tmp_path / "f.yaml").write_text("train:\n  learning_rate: 1e-5\n")
    cfg, _ = validate(compose("grpo", "cpu", [tmp_path / "f.yaml"]))
    assert cfg.train.learning_rate == 1e-5


def test_validate_reports_stage_contradiction():
    with pytest.raises(ConfigError) as exc:
        validate(compose("grpo", "cpu", overrides=["stage=dpo"]))
    assert [(p.key, p.layer) for p in exc.value.problems if p.level == "error"] == [("stage", CLI_LAYER)]


def test_composed_data_keeps_merged_nested_sections(user_files):
    c = compose("grpo", "cpu", user_files)
    assert get(c.data, "train.warmup_ratio") == 0.2
    assert get(c.data, "train.seed") == 42              # from base, untouched by the user files
    assert get(c.data, "grpo.group_size") == 4          # from the stage profile
