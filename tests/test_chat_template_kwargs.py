"""`data.chat_template_kwargs`: the variables reach every chat-template rendering (rlft's prompts, TRL's, episodes,
`rlft plan`'s token counts), and validate-config refuses a value that is not a mapping, naming the key and file."""

from __future__ import annotations

import copy

import pytest

from conftest import ROOT, run_cli

DEMO = ROOT / "configs/examples/grpo_demo.yaml"
# a template that shows one variable, as Qwen3's reads `enable_thinking`
SHOWS_FLAVOUR = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"
                 "{% if add_generation_prompt %}[{{ flavour | default('plain') }}]{% endif %}")
CHAT = [{"role": "user", "content": "hi"}]


def _cfg(*overrides):
    from rlft.config.compose import compose
    from rlft.config.validate import validate

    return validate(compose("grpo", "cpu", [DEMO], list(overrides)))[0]


@pytest.fixture(scope="module")
def tokenizer():
    from rlft.models.loading import load_policy_tokenizer

    tok = load_policy_tokenizer(_cfg("data.chat_template_kwargs={flavour: mint}"))
    tok.chat_template = SHOWS_FLAVOUR
    return tok


def test_the_variables_reach_every_rendering(tokenizer):
    from trl.data_utils import apply_chat_template

    from rlft.rollout.episodes import _template
    from rlft.rollout.sample import render_prompt

    assert tokenizer.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True) == "<user>hi[mint]"
    # a call's own keyword wins over the configured one
    assert tokenizer.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True, flavour="x") \
        == "<user>hi[x]"
    shown = tokenizer.decode(render_prompt(tokenizer, CHAT))  # rlft's sampler (PPO, RS-SFT/AWR, eval, generate)
    assert shown.endswith("[mint]"), shown
    assert tokenizer.decode(_template(tokenizer, CHAT, None, True, True)).endswith("[mint]")  # episodes
    assert apply_chat_template({"prompt": CHAT}, tokenizer)["prompt"].endswith("[mint]")  # TRL's trainers
    # the async sampler's deep copy renders with itself, the variables kept
    twin = copy.deepcopy(tokenizer)
    assert twin.apply_chat_template.args[0] is twin
    assert twin.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True) == "<user>hi[mint]"


def test_no_variables_leaves_the_tokenizer_alone():
    from rlft.data.chat import bind_template_kwargs

    class Tok:
        def apply_chat_template(self, conversation, **kw):
            return kw

    tok = Tok()
    assert bind_template_kwargs(tok, {}) is tok and "apply_chat_template" not in vars(tok)
    assert bind_template_kwargs(tok, {"a": 1}).apply_chat_template([], b=2) == {"a": 1, "b": 2}


def test_plan_renders_with_the_variables():
    from rlft.plan.lengths import TokenCounter, compile_template

    counter = TokenCounter(None, compile_template(SHOWS_FLAVOUR), True, {}, "estimate", {"flavour": "mint"})
    assert counter.render(CHAT, True) == "<user>hi[mint]"


def test_validate_config_refuses_a_non_mapping(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("data:\n  chat_template_kwargs: [enable_thinking]\n")
    res = run_cli("validate-config", "--stage", "grpo", "-c", str(DEMO), "-c", str(bad))
    assert res.returncode == 2, res.stdout + res.stderr
    out = res.stdout + res.stderr
    assert "data.chat_template_kwargs" in out and f"{bad}:2" in out and "expected a mapping" in out, out
    assert _cfg("data.chat_template_kwargs={enable_thinking: false}").data.chat_template_kwargs == \
        {"enable_thinking": False}
    assert _cfg().data.chat_template_kwargs == {}


def test_rlft_eval_renders_with_the_config_s_variables(tokenizer, monkeypatch):
    """`rlft eval -c my.yaml` (or an override) with data.chat_template_kwargs samples prompts rendered with them;
    without them the tokenizer renders as loaded (load_trained_policy binds the run's own)."""
    import rlft.posttrain.evaluate as ev

    def loaded(target):  # a tokenizer with no variables bound, as a run without them loads it
        tok = copy.deepcopy(tokenizer)
        tok.apply_chat_template = type(tok).apply_chat_template.__get__(tok)
        return None, tok

    monkeypatch.setattr(ev, "load_trained_policy", loaded)
    for overrides, shown in ((["data.chat_template_kwargs={flavour: mint}"], "[mint]"), ([], "[plain]")):
        _, tok = ev.policy_for(None, _cfg(*overrides))
        assert tok.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True).endswith(shown), overrides
