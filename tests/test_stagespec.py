"""The StageSpec table: one place per stage, read by every layer that needs stage facts."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from rlft.config import ConfigError, compose, load_config, validate
from rlft.config.stages import SPECS, STAGES, StageSpec, get_spec
from rlft.config.trl_fields import config_source, modeled_by_rlft, trainer_config_fields


def test_every_stage_has_one_spec_and_the_schema_choices_follow():
    from rlft.config.schema import SAMPLING_STAGES, leaf_specs

    assert set(SPECS) == set(STAGES)
    assert list(leaf_specs()["stage"].choices) == list(STAGES)
    assert set(SAMPLING_STAGES) == {s for s in STAGES if SPECS[s].samples} == {"grpo", "ppo", "rs_sft", "awr"}
    for name, spec in SPECS.items():
        assert spec.name == name and spec.section in (None, name)


def test_every_stage_resolves_to_its_runner_function():
    from rlft.stages import get_runner

    assert {s for s in STAGES if SPECS[s].experimental} == {"orpo"}
    for name in STAGES:
        runner = get_runner(name)
        assert callable(runner) and runner.__module__ == f"rlft.stages.{name}.runner", name


def test_health_rules_named_by_specs_exist():
    pytest.importorskip("transformers")
    from rlft.monitor.health import RULES

    for spec in SPECS.values():
        assert set(spec.health_rules) <= set(RULES), spec.name
        assert {"loss_nan", "grad_norm"} <= set(spec.health_rules)


@pytest.mark.parametrize("stage", [s for s in STAGES if SPECS[s].trl_config])
def test_trl_config_of_each_spec_is_found_in_the_installed_sources(stage):
    pytest.importorskip("trl")
    package, rel, cls = config_source(stage)
    fields = trainer_config_fields(stage)
    assert fields and "learning_rate" in fields, (package, rel, cls)
    for trl_option in get_spec(stage).modeled():
        assert trl_option in fields, f"{stage}: TRL has no option {trl_option}"


def _with_toy_stage(monkeypatch, **kw):
    toy = StageSpec(name="toy", section=None, runner="rlft.stages.grpo.runner:grpo_batch_layout",
                    metrics=("toy_metric",), console=("toy_metric", "loss"), health_rules=("loss_nan",),
                    trl_modeled=(("beta", "toy.beta"),), **kw)
    monkeypatch.setitem(SPECS, "toy", toy)
    return toy


def test_a_new_spec_is_all_the_layers_need(monkeypatch):
    """Runner lookup, TRL mapping, metrics rows, console columns and health rules read the spec."""
    pytest.importorskip("transformers")
    from types import SimpleNamespace

    from rlft.config.schema import MonitorConfig
    from rlft.monitor.console import ConsoleProgress
    from rlft.monitor.health import evaluate_rules
    from rlft.monitor.metrics import normalise
    from rlft.stages import get_runner
    from rlft.stages.grpo.layout import grpo_batch_layout

    _with_toy_stage(monkeypatch)
    assert get_runner("toy") is grpo_batch_layout
    assert modeled_by_rlft("toy")["beta"] == "toy.beta"
    assert normalise({"loss": 1.0}, "toy") == {"loss": 1.0, "toy_metric": None}
    assert ConsoleProgress("toy").keys == ["toy_metric", "loss"]
    cfg = SimpleNamespace(stage="toy", monitor=MonitorConfig())
    # only the spec's rules run: grad_norm 1e9 is not checked for `toy`, a NaN loss is
    assert [f.rule for f in evaluate_rules({"loss": float("nan"), "grad_norm": 1e9}, cfg)] == ["loss_nan"]
    grpo_cfg = SimpleNamespace(stage="grpo", monitor=MonitorConfig())
    assert {f.rule for f in evaluate_rules({"loss": float("nan"), "grad_norm": 1e9}, grpo_cfg)} == \
        {"loss_nan", "grad_norm_critical"}


def test_entropy_rule_only_for_stages_whose_spec_lists_it():
    pytest.importorskip("transformers")
    from types import SimpleNamespace

    from rlft.config.schema import MonitorConfig
    from rlft.monitor.health import evaluate_rules

    record = {"entropy": 0.01}
    fired = {s: [f.rule for f in evaluate_rules(record, SimpleNamespace(stage=s, monitor=MonitorConfig()))]
             for s in STAGES}
    assert fired["grpo"] == fired["ppo"] == ["entropy_collapse"]
    assert fired["dpo"] == fired["orpo"] == fired["awr"] == fired["rs_sft"] == []


def test_resume_breaking_keys_come_from_the_spec(tmp_path):
    pytest.importorskip("transformers")
    import yaml
    from rlft.config.schema import to_dict as asdict

    from rlft.rundir.folder import RunDir
    from rlft.runtime import breaking_changes

    cfg, _, _ = load_config("grpo", "cpu")
    run = RunDir(tmp_path)
    run.config.write_text(yaml.safe_dump(asdict(cfg)))
    cfg.grpo.group_size += 1
    cfg.dpo.beta = 0.4  # another stage's key: not resume-breaking for GRPO
    assert breaking_changes(run, cfg) == [f"grpo.group_size: {cfg.grpo.group_size - 1} -> {cfg.grpo.group_size}"]


def test_validate_reads_data_columns_from_the_spec(monkeypatch, tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "a", "chosen": "b"}\n' * 16)  # a whole grpo.batch_size
    _, warnings = validate(compose("grpo", "cpu", overrides=[f"data.train={data}", "rewards=[json_valid]"]))
    assert not [w for w in warnings if w.key == "data.train"]
    with pytest.raises(ConfigError, match="rejected"):  # dpo needs the rejected column too
        validate(compose("dpo", "cpu", overrides=[f"data.train={data}"]))
    monkeypatch.setitem(SPECS, "grpo", dataclasses.replace(SPECS["grpo"], data_columns=("data.rejected_column",)))
    with pytest.raises(ConfigError, match="rejected"):
        validate(compose("grpo", "cpu", overrides=[f"data.train={data}", "rewards=[json_valid]"]))


# --- a key in another stage's section --------------------------------------------------------------

def test_another_stages_key_on_the_command_line_is_a_warning_naming_key_and_layer():
    _, warnings = validate(compose("grpo", "cpu", overrides=["dpo.beta=0.3", "grpo.group_size=8"]))
    other = [w for w in warnings if "has no effect" in w.message]
    assert [(w.key, w.layer, w.level) for w in other] == [("dpo.beta", "command line", "warning")]
    assert "stage `dpo`" in other[0].message and "stage `grpo`" in other[0].message


def test_another_stages_key_in_a_file_names_file_and_line(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text("train:\n  learning_rate: 1.0e-5\nawr:\n  advantage_beta: 3.0\n")
    _, warnings = validate(compose("grpo", "cpu", files=[f]))
    other = [w for w in warnings if "has no effect" in w.message]
    assert [w.key for w in other] == ["awr.advantage_beta"]
    assert other[0].layer.endswith("mine.yaml:4")


def test_profiles_and_own_section_never_warn():
    for stage in STAGES:
        _, warnings = validate(compose(stage, "a100"))
        assert not [w for w in warnings if "has no effect" in w.message], stage


def test_other_stage_warning_through_the_cli():
    from typer.testing import CliRunner

    from rlft.cli import app

    result = CliRunner().invoke(app, ["validate-config", "--stage", "grpo", "data.train=demo",
                                      "rewards=[json_valid]", "dpo.beta=0.2"])
    assert result.exit_code == 0, result.output
    assert "warning: dpo.beta (command line): has no effect" in result.stderr


# --- TRL objections become config errors -------------------------------------------------------------

def test_trl_error_names_the_passthrough_key_and_its_layer(tmp_path):
    pytest.importorskip("trl")
    from rlft.stages.grpo.runner import grpo_trl_config

    composed = compose("grpo", "cpu", overrides=["trl.auto_find_batch_size=true", "rewards=[json_valid]"])
    cfg, _ = validate(composed)
    with pytest.raises(ConfigError) as info:
        grpo_trl_config(cfg, str(tmp_path), 1, composed)
    (p,) = info.value.problems
    assert (p.key, p.layer, p.level) == ("trl.auto_find_batch_size", "command line", "error")
    assert "GRPOConfig rejected the settings" in p.message and "auto_find_batch_size" in p.message


def test_trl_error_maps_trl_options_back_to_rlft_keys():
    from rlft.config.trl_fields import rlft_keys_in

    cfg, _, _ = load_config("grpo", "cpu")
    cfg.trl["generation_batch_size"] = 8  # validate refuses it (grpo.batch_size sets it); TRL's objection maps back
    args = {"generation_batch_size": 8, "steps_per_generation": 4, "learning_rate": 1e-5}
    msg = "'generation_batch_size' and 'steps_per_generation' can not be both configured at the same time"
    assert rlft_keys_in(msg, args, cfg) == ["trl.generation_batch_size", "grpo.num_substeps"]
    assert rlft_keys_in("num_generations (1) is less than 2", {"num_generations": 1}, cfg) == ["grpo.group_size"]


@pytest.mark.e2e
def test_trl_error_through_rlft_train_exits_2_without_traceback(tmp_path):
    pytest.importorskip("trl")
    proc = subprocess.run([sys.executable, "-m", "rlft.cli", "train", "--stage", "grpo", "--hw", "cpu",
                           "data.train=demo", "rewards=[json_valid]", f"train.output_dir={tmp_path / 'run'}",
                           "trl.auto_find_batch_size=true"], capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert "error: trl.auto_find_batch_size (command line): TRL's GRPOConfig rejected the settings" in proc.stderr
    assert not (tmp_path / "run").exists()  # checked before the run folder is made


# --- layering --------------------------------------------------------------------------------------

def test_spec_table_and_health_import_nothing_upward():
    code = ("import sys, rlft.config.stages; assert not [m for m in sys.modules if m.partition('.')[0] in "
            "{'torch', 'transformers', 'trl'}]; import rlft.monitor.health; "
            "assert 'rlft.runtime' not in sys.modules; "
            # the stage folders' specs load (plain data), none of their runners or shared recipe parts
            "loaded = [m for m in sys.modules if m.startswith('rlft.stages.')]; "
            "assert loaded and all(m.count('.') == 2 or m.endswith('.spec') for m in loaded), loaded")
    subprocess.run([sys.executable, "-c", code], check=True)
