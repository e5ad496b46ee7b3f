"""RS-SFT and AWR config keys through `rlft validate-config`: the keep rule, rounds, the AWR
baseline, and the group-mean-with-one-sample error."""

from __future__ import annotations

import pytest

from rlft.config.schema import leaf_specs
from tests.test_cli_validate import _in_tmp, cli, one_error, problems  # noqa: F401  (fixture)


def test_awr_one_sample_with_group_mean_is_an_error():
    key, layer, msg = one_error("--stage", "awr", "awr.num_samples_per_prompt=1")
    assert (key, layer) == ("awr.num_samples_per_prompt", "command line")
    assert "group_mean" in msg and "global_mean" in msg


def test_awr_one_sample_with_global_mean_is_fine():
    result = cli("validate-config", "--stage", "awr", "awr.num_samples_per_prompt=1", "awr.baseline=global_mean")
    assert result.exit_code == 0, result.output
    assert problems(result) == []


@pytest.mark.parametrize("override, allowed", [
    ("rs_sft.keep=top", "one of best, above_threshold"),
    ("rs_sft.rounds=0", "between 1 and 100"),
    ("awr.baseline=leave_one_out", "one of group_mean, global_mean"),
])
def test_rs_awr_choices(override, allowed):
    stage = override.partition(".")[0]
    key, layer, msg = one_error("--stage", stage, override)
    assert key == override.split("=")[0] and allowed in msg


def test_advantage_beta_help_says_beta_multiplies():
    text = leaf_specs()["awr.advantage_beta"].help
    assert "exp(beta * advantage" in text and "1/tau" in text
    assert "advantage / beta" not in text


def test_awr_ess_rule_warns_below_threshold_for_awr_only():
    pytest.importorskip("transformers")
    from types import SimpleNamespace

    from rlft.config.schema import MonitorConfig
    from rlft.monitor.health import evaluate_rules

    def fire(stage, ess):
        return [f.rule for f in evaluate_rules({"ess": ess}, SimpleNamespace(stage=stage, monitor=MonitorConfig()))]
    assert fire("awr", 0.05) == ["awr_ess"]
    assert fire("awr", 0.2) == [] and fire("rs_sft", 0.05) == [] and fire("grpo", 0.05) == []
    f = evaluate_rules({"ess": 0.05}, SimpleNamespace(stage="awr", monitor=MonitorConfig()))[0]
    assert f.level == "warning" and f.threshold == 0.1


@pytest.mark.parametrize("stage, words", [
    ("rs_sft", ["rs_sft rounds: 8 x", "each prompt's best sample", "> 0.0", "apply to each round"]),
    ("awr", ["awr rounds: 5 x", "min(exp(2.0 x normalised advantage), 10.0)", "16 prompts x 8 fresh samples"]),
])
def test_show_config_explains_rounds(stage, words):
    from rlft.config import configs_dir

    result = cli("show-config", "--stage", stage, "--hw", "cpu", "-c",
                 configs_dir() / "examples" / f"{stage}_demo.yaml",
                 "--explain")
    assert result.exit_code == 0, result.output
    line = next(x for x in result.stdout.splitlines() if x.startswith(f"# {stage} rounds"))
    for w in words:
        assert w in line, (w, line)


def test_sft_config_for_sampled_stages(tmp_path):
    pytest.importorskip("trl")
    from rlft.config import ConfigError, load_config
    from rlft.errors import RunError
    from rlft.stages.common.sampled_sft import sft_trl_config

    cfg, composed, _ = load_config("awr", "cpu", [], ["train.max_seq_length=300", "trl.neftune_noise_alpha=5"])
    args = sft_trl_config(cfg, str(tmp_path), composed)
    assert args.max_length == 300 and args.neftune_noise_alpha == 5 and not args.packing
    assert args.completion_only_loss is None  # TRL's rule: prompt/completion data -> loss on completions only
    with pytest.raises(ConfigError, match="trl.packing"):  # refused at validate time
        load_config("rs_sft", "cpu", [], ["trl.packing=true"])
    cfg, composed, _ = load_config("rs_sft", "cpu", [])
    cfg.trl["packing"] = True  # and again where the SFT config is built
    with pytest.raises(RunError, match="trl.packing"):
        sft_trl_config(cfg, str(tmp_path), composed)
