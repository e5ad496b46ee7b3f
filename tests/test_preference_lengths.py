"""The preference stages' length limits (issue 37): a max_prompt_length that does not fit in the effective max_length
(max_length capped by train.max_seq_length) is named by validate-config (an error when the user set it, derived with
a warning when it came from the profiles), and the preference eval samples whole answers, never a budget of
max_length - max_prompt_length that can reach one token."""

import json
import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from conftest import ROOT, run_cli
from rlft.cli import app
from rlft.config.compose import compose
from rlft.config.preference_lengths import DEFAULT_EVAL_TOKENS, eval_budget
from rlft.config.validate import validate

EXAMPLES = ROOT / "configs" / "examples"
LINE = re.compile(r"^(error|warning): (\S+) \((.+?)\): (.+)$")


def cli(*args):
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert "Traceback" not in result.output
    return result


def problems(result, level: str) -> dict[str, tuple[str, str]]:
    """key -> (layer, message) of each `level` line on stderr."""
    found = {}
    for text in result.stderr.splitlines():
        m = LINE.match(text)
        if m and m.group(1) == level:
            found[m.group(2)] = (m.group(3), m.group(4))
    return found


@pytest.mark.parametrize("stage", ["dpo", "orpo"])
def test_profile_lengths_that_contradict_are_named_and_the_prompt_budget_derived(stage):
    # the stage profile's max_length 4096 and max_prompt_length 2048 beside the cpu profile's max_seq_length 512
    result = cli("validate-config", "--stage", stage, "--hw", "cpu")
    assert result.exit_code == 0, result.output
    layer, msg = problems(result, "warning")[f"{stage}.max_prompt_length"]
    assert layer.startswith(f"configs/stages/{stage}.yaml:"), layer
    for words in ("2048 tokens", "effective max_length of 512 tokens", f"{stage}.max_length 4096",
                  "train.max_seq_length 512 (configs/hw/cpu.yaml:", "uses 256"):
        assert words in msg, msg
    shown = cli("show-config", "--stage", stage, "--hw", "cpu", "--explain").stdout
    assert re.search(r"^  max_prompt_length: 256 +# derived: half the effective max_length 512", shown, re.M), shown
    assert f"# lengths: prompt + answer at most 512 tokens ({stage}.max_length 4096, capped by train.max_seq_length " \
           f"512); prompts keep their last 256 tokens" in shown
    assert f"({stage}.eval_max_new_tokens null)" in shown


def test_a_profile_prompt_length_that_fits_is_left_alone():
    result = cli("validate-config", "--stage", "orpo", "--hw", "rtx4090")  # 2048 of 4096
    assert "orpo.max_prompt_length" not in problems(result, "warning")
    cfg, _ = validate(compose("orpo", "rtx4090"))
    assert cfg.orpo.max_prompt_length == 2048


@pytest.mark.parametrize("prompt", [512, 2048])
def test_a_prompt_length_the_user_set_at_or_above_the_effective_max_length_is_refused(tmp_path, monkeypatch, prompt):
    monkeypatch.chdir(tmp_path)
    Path("mine.yaml").write_text(f"orpo:\n  beta: 0.1\n  max_prompt_length: {prompt}\n")
    result = cli("validate-config", "--stage", "orpo", "--hw", "cpu", "-c", "mine.yaml")
    assert result.exit_code == 2, result.output
    layer, msg = problems(result, "error")["orpo.max_prompt_length"]
    assert layer == "mine.yaml:3"
    for words in (f"{prompt} tokens of prompt", "effective max_length is 512 tokens",
                  "orpo.max_length 4096 (configs/stages/orpo.yaml:", "train.max_seq_length 512 (configs/hw/cpu.yaml:",
                  "below 512"):
        assert words in msg, msg


def test_the_cap_by_max_seq_length_counts_on_the_command_line_too():
    result = cli("validate-config", "--stage", "dpo", "--hw", "rtx4090", "train.max_seq_length=256",
                 "dpo.max_prompt_length=300")
    assert result.exit_code == 2, result.output
    layer, msg = problems(result, "error")["dpo.max_prompt_length"]
    assert layer == "command line" and "effective max_length is 256 tokens" in msg
    assert "train.max_seq_length 256 (command line)" in msg and "raise train.max_seq_length" in msg


def test_the_eval_budget_is_the_longest_chosen_answer_never_a_one_token_subtraction():
    cfg, _ = validate(compose("orpo", "cpu"))  # max_length 512 (capped); the old rule gave max(1, 512 - 2048) = 1
    n, why = eval_budget(cfg, 9, "max of the first 64 pairs")
    assert n == 9 and "longest chosen answer" in why and "orpo.eval_max_new_tokens" in why
    assert eval_budget(cfg, 5000, "")[0] == 512  # capped by the effective max_length
    assert eval_budget(cfg, None, "could not be measured")[0] == DEFAULT_EVAL_TOKENS
    cfg, _ = validate(compose("dpo", "cpu", overrides=["dpo.eval_max_new_tokens=40"]))
    assert eval_budget(cfg, 9, "") == (40, "dpo.eval_max_new_tokens")


@pytest.mark.e2e
def test_orpo_eval_with_the_profiles_lengths_samples_whole_answers(tmp_path):
    """The ORPO demo with the profiles' lengths (max_length 4096 capped to 512 by --hw cpu, max_prompt_length 2048):
    the eval used to sample one token per answer."""
    from tokenizers import Tokenizer

    demo = yaml.safe_load((EXAMPLES / "orpo_demo.yaml").read_text())
    demo["data"]["train"] = str(EXAMPLES / "data" / "preference_demo.jsonl")
    del demo["orpo"]["max_length"], demo["orpo"]["max_prompt_length"]
    config = tmp_path / "orpo.yaml"
    config.write_text(yaml.safe_dump(demo))
    out = tmp_path / "run"
    res = run_cli("train", "--stage", "orpo", "--hw", "cpu", "-c", config, f"train.output_dir={out}",
                  "rewards=[{fn: char_fraction, kwargs: {char: a}}]", "data.eval_prompts=4", "train.max_steps=2")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "warning: orpo.max_prompt_length" in res.stderr
    assert yaml.safe_load((out / "config.yaml").read_text())["orpo"]["max_prompt_length"] == 256
    budget = re.search(r"rlft: eval: answers of up to (\d+) new tokens: the longest chosen answer", res.stderr)
    assert budget and int(budget.group(1)) > 1, res.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "eval_completions.jsonl").read_text().splitlines()]
    assert {r["step"] for r in rows} == {0, 2} and len(rows) == 8
    # tokens of each sampled answer (a lone partial-byte token decodes to U+FFFD: dropped, so it counts 0, not 3)
    tok = Tokenizer.from_file(str(out / "final" / "tokenizer.json"))
    lengths = [len(tok.encode(r["completion"].replace("\ufffd", ""), add_special_tokens=False).ids) for r in rows]
    assert max(lengths) > 1, [r["completion"] for r in rows]
