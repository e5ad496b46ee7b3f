"""OmegaConf resolvers (`${oc.env:VAR}`, `${oc.decode:...}`, custom ones) are refused in every layer: a
value read from the environment would land in config.yaml, metrics, completions, the model card and error
messages. Only `${a.b}` key interpolation resolves; rewards[].kwargs are never interpolated at all."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlft.cli import app
from rlft.config import compose, validate

MARKER = "s3cr3t-marker-7f2a"
ENV = {"RLFT_TEST_SECRET": MARKER, "CUDA_VISIBLE_DEVICES": ""}
LINE = re.compile(r"^(?:stage \d+ \(\S+\): )?error: (\S+) \((.+?)\): (.+)$")


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RLFT_TEST_SECRET", MARKER)


def refused(*args: str) -> list[tuple[str, str, str]]:
    """Run the CLI; it must exit 2 without a traceback and without the secret anywhere in its output."""
    result = CliRunner().invoke(app, list(args), env=ENV)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert MARKER not in result.output and MARKER not in result.stderr
    return [m.group(1, 2, 3) for m in map(LINE.match, result.stderr.splitlines()) if m]


def test_env_resolver_in_a_config_file_is_refused_naming_key_and_file():
    Path("s.yaml").write_text("data:\n  train: demo\n  system_prompt: 'Key: ${oc.env:RLFT_TEST_SECRET}'\n"
                              "rewards: [char_fraction]\n")
    ((key, layer, msg),) = refused("validate-config", "--stage", "grpo", "-c", "s.yaml")
    assert (key, layer) == ("data.system_prompt", "s.yaml:3")
    assert "`${oc.env:...}` is an OmegaConf resolver" in msg and "command line" in msg and "$OUT" in msg


def test_env_resolver_in_an_override_never_reaches_a_type_error():
    # before: `expected an integer >= 0, got str `<the secret>``
    ((key, layer, msg),) = refused("validate-config", "--stage", "grpo", "data.train=demo",
                                   "train.seed=${oc.env:RLFT_TEST_SECRET}")
    assert (key, layer) == ("train.seed", "command line") and "resolver" in msg


@pytest.mark.parametrize("value", ["${oc.decode:'1'}", "${oc.create:x}", "${oc.select:lora.r,1}",
                                   "${oc.deprecated:lora.r}", "${oc.dict.keys:lora}", "${my_resolver:x}",
                                   "${oc.env:RLFT_TEST_SECRET,default}", "a ${lora.r} ${oc.env:${data.train}}"])
def test_every_resolver_is_refused(value):
    ((key, _, msg),) = refused("validate-config", "--stage", "grpo", "data.train=demo", "rewards=[char_fraction]",
                               f"data.system_prompt={value}")
    assert key == "data.system_prompt" and "OmegaConf resolver" in msg


def test_resolver_in_a_pipeline_file_is_refused():
    Path("p.yaml").write_text("defaults:\n  data: {train: demo}\n  rewards: [char_fraction]\nstages:\n"
                              "  - stage: grpo\n    train:\n      output_dir: ${oc.env:RLFT_TEST_SECRET}\n")
    ((key, layer, _),) = refused("pipeline", "validate", "p.yaml")
    assert (key, layer) == ("train.output_dir", "p.yaml:7")
    refused("pipeline", "validate", "p.yaml", "stages.1.data.system_prompt=${oc.env:RLFT_TEST_SECRET}")


def test_reward_kwargs_stay_literal_while_resolvers_elsewhere_are_refused():
    Path("k.yaml").write_text("data: {train: demo, system_prompt: '${oc.env:RLFT_TEST_SECRET}'}\nrewards:\n"
                              "  - fn: char_fraction\n    kwargs: {template: '${oc.env:RLFT_TEST_SECRET}'}\n")
    ((key, _, _),) = refused("validate-config", "--stage", "grpo", "-c", "k.yaml")
    assert key == "data.system_prompt"  # the reward's kwargs are its own text, never interpolated
    Path("k.yaml").write_text("lora: {r: 8, lora_alpha: '${lora.r}'}\ndata:\n  train: demo\n  system_prompt: "
                              "'\\${oc.env:RLFT_TEST_SECRET}'\nrewards:\n  - fn: char_fraction\n"
                              "    kwargs: {template: '${oc.env:RLFT_TEST_SECRET}'}\n")
    cfg, _ = validate(compose("grpo", "cpu", ["k.yaml"]))
    assert cfg.lora.lora_alpha == 8
    assert cfg.data.system_prompt == "${oc.env:RLFT_TEST_SECRET}"  # escaped: literal text
    assert cfg.rewards[0].kwargs == {"template": "${oc.env:RLFT_TEST_SECRET}"}
    assert MARKER not in repr(cfg)
