"""`data.chat_template`: plain-text prompts and preference pairs go through the tokenizer's chat template
when it applies (TRL templates only message lists), the run's start line says so, and completions.jsonl
keeps the rendered prompt once per prompt id."""

from __future__ import annotations

import json

import pytest

from conftest import read_jsonl, run_cli
from rlft.data import DataError
from rlft.data.chat import decide, describe, preference_messages, prompt_messages

DEMO = "configs/examples/grpo_demo.yaml"
DPO_DEMO = "configs/examples/dpo_demo.yaml"
SHORT = ["train.max_steps=2", "grpo.batch_size=2", "grpo.group_size=2", "grpo.max_tokens=8",
         "train.per_device_train_batch_size=4"]


def test_decide_and_describe():
    assert decide("auto", True) and not decide("auto", False)
    assert decide("always", True) and not decide("never", True)
    with pytest.raises(DataError, match="`always` but the tokenizer of m has no chat template"):
        decide("always", False, "m")
    assert describe("auto", True, True) == "chat template applied to plain-text prompts (auto: the tokenizer has one)"
    assert describe("auto", False,
                    False) == "plain-text prompts used as they are, no chat template (auto: the tokenizer has none)"
    assert describe("never", True, False).endswith("(never)")
    assert describe("never", True, False, kind="chat") == "chat template applied (the prompts are chat messages)"


def test_plain_rows_become_messages():
    assert prompt_messages("Hi", "Be brief") == [{"role": "system", "content": "Be brief"},
                                                 {"role": "user", "content": "Hi"}]
    chat = [{"role": "user", "content": "Hi"}]
    assert prompt_messages(chat) is chat
    row = preference_messages({"prompt": "Q", "chosen": "good", "rejected": "bad"})
    assert row == {"prompt": [{"role": "user", "content": "Q"}], "chosen": [{"role": "assistant", "content": "good"}],
                   "rejected": [{"role": "assistant", "content": "bad"}]}


@pytest.fixture(scope="module")
def no_template_model(tmp_path_factory):
    """rlft's tiny model with its chat template removed."""
    out = tmp_path_factory.mktemp("models") / "tiny-no-template"
    res = run_cli("tiny-model", out)
    assert res.returncode == 0, res.stderr
    (out / "chat_template.jinja").unlink(missing_ok=True)
    cfg = json.loads((out / "tokenizer_config.json").read_text())
    cfg.pop("chat_template", None)
    (out / "tokenizer_config.json").write_text(json.dumps(cfg))
    return out


@pytest.mark.e2e
def test_grpo_plain_prompts_go_through_the_template(tmp_path):
    out = tmp_path / "run"
    res = run_cli("train", "--stage", "grpo", "--hw", "cpu", "-c", DEMO, f"train.output_dir={out}", *SHORT,
                  "monitor.log_completions=-1")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "chat template applied to plain-text prompts (auto: the tokenizer has one)" in res.stderr
    rows = read_jsonl(out / "completions.jsonl")
    assert len(rows) == 2 * 2 * 2  # 2 steps x 2 prompts x 2 completions
    rendered = [r for r in rows if r.get("prompt_rendered")]
    assert len(rendered) == len({r["prompt_id"] for r in rows})  # once per prompt id
    for r in rendered:
        assert r["prompt_rendered"] == f"<|im_start|>user\n{r['prompt']}<|im_end|>\n<|im_start|>assistant\n"
    assert all(isinstance(r["prompt_id"], int) for r in rows)


@pytest.mark.e2e
def test_grpo_never_keeps_raw_text(tmp_path):
    out = tmp_path / "run"
    res = run_cli("train", "--stage", "grpo", "--hw", "cpu", "-c", DEMO, f"train.output_dir={out}", *SHORT,
                  "data.chat_template=never")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "plain-text prompts used as they are, no chat template (never)" in res.stderr
    rendered = [r for r in read_jsonl(out / "completions.jsonl") if r.get("prompt_rendered")]
    assert rendered and all(r["prompt_rendered"] == r["prompt"] for r in rendered)


@pytest.mark.e2e
def test_always_without_a_template_is_one_clear_error(tmp_path, no_template_model):
    out = tmp_path / "run"
    res = run_cli("train", "--stage", "grpo", "--hw", "cpu", "-c", DEMO, f"train.output_dir={out}", *SHORT,
                  f"model.name_or_path={no_template_model}", "data.chat_template=always")
    assert res.returncode == 2, res.stderr[-3000:]
    assert "Traceback" not in res.stderr
    assert "data.chat_template is `always` but the tokenizer of" in res.stderr
    assert not out.exists()  # nothing written before the model loaded


@pytest.mark.e2e
def test_auto_without_a_template_keeps_raw_text(tmp_path, no_template_model):
    out = tmp_path / "run"
    res = run_cli("train", "--stage", "grpo", "--hw", "cpu", "-c", DEMO, f"train.output_dir={out}", *SHORT,
                  f"model.name_or_path={no_template_model}")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "no chat template (auto: the tokenizer has none)" in res.stderr


@pytest.mark.e2e
@pytest.mark.parametrize("stage", ["dpo", "orpo"])
def test_preference_pairs_go_through_the_template(tmp_path, stage):
    out = tmp_path / "run"
    res = run_cli("train", "--stage", stage, "--hw", "cpu", "-c", f"configs/examples/{stage}_demo.yaml",
                  f"train.output_dir={out}", "train.max_steps=2")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "chat template applied to plain-text pairs (auto: the tokenizer has one)" in res.stderr
