"""`rlft show-config`: plain output is YAML matching the resolved config; `--explain` names the
layer that set each key."""

from __future__ import annotations

import re
from rlft.config.schema import to_dict as asdict  # keys as YAML spells them (`grpo.async`)
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from rlft.cli import app
from rlft.config import load_config

EXPLAIN_LEAF = re.compile(r"^(?P<indent> *)(?P<key>\w+): (?P<value>.*?) +# (?P<layer>\S.*)$")
SECTION = re.compile(r"^(?P<indent> *)(?P<key>\w+):$")


def show(*args: str):
    result = CliRunner().invoke(app, ["show-config", *map(str, args)])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 0, result.output
    return result


def parse_explain(text: str) -> dict[str, tuple[object, str]]:
    """`key: value  # layer` lines, nested by indentation -> {dotted key: (value, layer)}."""
    out: dict[str, tuple[object, str]] = {}
    stack: list[str] = []
    for line in text.splitlines():
        if line.startswith("# "):  # the notes after the YAML (schedule, chat template, grpo layout)
            continue
        m = EXPLAIN_LEAF.match(line) or SECTION.match(line)
        assert m, f"unexpected line: {line!r}"
        depth = len(m["indent"]) // 2
        stack = stack[:depth]
        if "layer" in m.groupdict() and m["layer"] is not None:
            out[".".join([*stack, m["key"]])] = (yaml.safe_load(m["value"]), m["layer"])
        else:
            stack.append(m["key"])
    return out


@pytest.fixture
def user_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("f.yaml").write_text("# user layer\ntrain:\n  learning_rate: 2.0e-6\n  warmup_ratio: 0.2\n")
    return "f.yaml"


def test_explain_names_the_layer_of_each_key(user_file):
    result = show("--stage", "grpo", "--hw", "cpu", "-c", user_file, "grpo.group_size=8", "--explain")
    rows = parse_explain(result.stdout)
    expect = {
        "stage": ("grpo", "configs/stages/grpo.yaml:"),
        "lora.r": (16, "configs/base.yaml:"),
        "train.seed": (42, "configs/base.yaml:"),
        "train.weight_decay": (0.01, "configs/stages/grpo.yaml:"),
        "grpo.num_substeps": (4, "configs/stages/grpo.yaml:"),
        "train.bf16": (False, "configs/hw/cpu.yaml:"),
        "train.max_seq_length": (512, "configs/hw/cpu.yaml:"),
        "hw.name": ("cpu", "configs/hw/cpu.yaml:"),
        "train.learning_rate": (2e-6, "f.yaml:3"),
        "train.warmup_ratio": (0.2, "f.yaml:4"),
        "grpo.group_size": (8, "command line"),
        "train.num_train_epochs": (1.0, "default"),
        "model.torch_dtype": ("auto", "default"),
        "monitor.kl_warn": (0.2, "default"),
    }
    for key, (value, layer) in expect.items():
        got_value, got_layer = rows[key]
        assert got_value == value, key
        if layer in ("default", "command line") or re.search(r":\d+$", layer):
            assert got_layer == layer, key
        else:
            assert re.fullmatch(re.escape(layer) + r"\d+", got_layer), (key, got_layer)


def test_explain_covers_every_leaf_of_the_config(user_file):
    cfg, _, _ = load_config("grpo", "cpu", [user_file])
    rows = parse_explain(show("-c", user_file, "--explain").stdout)

    def leaves(data, prefix=""):
        for k, v in data.items():
            if isinstance(v, dict) and v and k not in ("trl", "kwargs"):
                yield from leaves(v, f"{prefix}{k}.")
            else:
                yield f"{prefix}{k}", v

    expected = dict(leaves(asdict(cfg)))
    assert set(rows) == set(expected)
    for key, value in expected.items():
        assert rows[key][0] == value, key


def test_explain_prints_the_schedule_arithmetic():
    text = show("--explain").stdout
    assert any(line.startswith("# schedule: effective batch = ") for line in text.splitlines())


def test_explain_says_what_the_chat_template_and_grpo_layout_do(tmp_path):
    lines = show("--explain").stdout.splitlines()
    chat = next(line for line in lines if line.startswith("# data.chat_template"))
    assert chat == ("# data.chat_template auto: plain-text prompts go through the tokenizer's chat template when it "
                    "has one; tiny: has one, so it applies")
    layout = next(line for line in lines if line.startswith("# grpo: one generation"))
    assert "16 prompts x grpo.group_size 4 = 64 completions" in layout
    assert "grpo.num_substeps 4 optimizer step(s) of 16 x grpo.ppo_epochs 4 pass(es) = 16 optimizer step(s)" in layout
    folder = tmp_path / "plain-model"
    folder.mkdir()
    (folder / "tokenizer_config.json").write_text("{}")
    lines = show("--explain", f"model.name_or_path={folder}", "data.chat_template=always").stdout.splitlines()
    chat = next(line for line in lines if line.startswith("# data.chat_template"))
    assert chat.endswith("has none (training will stop with an error)"), chat
    lines = show("--stage", "dpo", "--explain", "data.chat_template=never").stdout.splitlines()
    assert ("# data.chat_template never: plain-text prompts are used as they are (message lists are still "
            "templated)") in lines
    assert not any(line.startswith("# grpo:") for line in lines)


@pytest.mark.parametrize("args", [
    [],
    ["--stage", "dpo", "--hw", "a100"],
    ["--stage", "ppo", "--hw", "mps"],
    ["--stage", "awr", "--hw", "fsdp", "data.system_prompt='You are: helpful # really'", "train.tf32=null"],
])
def test_plain_output_is_yaml_of_the_config(args):
    stage = args[args.index("--stage") + 1] if "--stage" in args else "grpo"
    hw = args[args.index("--hw") + 1] if "--hw" in args else "cpu"
    overrides = [a for a in args if "=" in a]
    cfg, _, _ = load_config(stage, hw, [], overrides)
    result = show(*args)
    assert "#" not in result.stdout.replace("You are: helpful # really", "")
    assert yaml.safe_load(result.stdout) == asdict(cfg)


def test_plain_output_includes_trl_passthrough_and_rewards(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("trl:\n  load_best_model_at_end: true\nrewards:\n  - fn: exact_match\n    weight: 2\n"
                 "    kwargs: {column: target}\ndata:\n  train: demo\n  eval: demo\n")
    result = show("--stage", "grpo", "-c", f)
    data = yaml.safe_load(result.stdout)
    assert data["trl"] == {"load_best_model_at_end": True}
    assert data["rewards"] == [{"fn": "exact_match", "weight": 2.0, "kwargs": {"column": "target"}, "name": None,
                               "timeout_s": 30.0}]


def test_warnings_go_to_stderr_not_into_the_yaml():
    result = show("--stage", "grpo", "--hw", "a100")
    assert "warning:" in result.stderr
    assert not any(line.startswith("warning:") for line in result.stdout.splitlines())
    yaml.safe_load(result.stdout)


def test_show_config_with_bad_input_exits_2():
    result = CliRunner().invoke(app, ["show-config", "lora.alpha=8"])
    assert result.exit_code == 2
    assert "error: lora.alpha (command line): unknown key; did you mean `lora.lora_alpha`?" in result.stderr
    assert result.stdout == ""
