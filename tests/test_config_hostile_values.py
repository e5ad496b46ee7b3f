"""Values validate-config used to accept that then failed at train with a traceback: `trl:` values against the
types and choices TRL declares, chat-template variables the renderer passes itself, an eval-only reward named
like a training reward, and a typo of a TRL option rlft sets itself."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import typing

import pytest

from rlft.config import STAGES
from rlft.config.stages import SPECS
from test_cli_validate import _needs_trl_sources, cli, one_error, write  # noqa: F401  (_in_tmp: autouse below)
from test_cli_validate import _in_tmp  # noqa: F401

DEMO = "configs/examples/grpo_demo.yaml"


# --- `trl:` values: TRL's declared types and choices ------------------------------------------------------------

@pytest.mark.parametrize("stage, over, key, says", [
    ("grpo", "trl.top_k=many", "trl.top_k", "declares it `int`"),
    ("grpo", "trl.min_p=[0.1]", "trl.min_p", "declares it `float | None`"),
    ("grpo", "trl.generation_kwargs=7", "trl.generation_kwargs", "got int `7`"),
    ("dpo", "trl.truncation_mode=keep_middle", "trl.truncation_mode", "choices (keep_end, keep_start)"),
    ("dpo", "trl.padding_free=3", "trl.padding_free", "declares it `bool`"),
])
def test_trl_values_are_checked_against_the_types_trl_declares(stage, over, key, says):
    _needs_trl_sources(stage)
    got, layer, msg = one_error("--stage", stage, over)
    assert (got, layer) == (key, "command line") and says in msg, msg


@pytest.mark.parametrize("stage, over", [
    ("grpo", "trl.top_k=5"), ("grpo", "trl.min_p=null"), ("grpo", "trl.generation_kwargs={repetition_penalty: 1.1}"),
    ("dpo", "trl.truncation_mode=keep_end"), ("grpo", "trl.min_p=0"),  # an int where TRL declares a float
])
def test_trl_values_of_the_declared_types_pass(stage, over):
    _needs_trl_sources(stage)
    res = cli("validate-config", "--stage", stage, over)
    assert res.exit_code == 0, res.output


@pytest.mark.parametrize("stage", [s for s in STAGES if SPECS[s].trl_config])
def test_the_types_read_from_the_sources_are_trl_s_own(stage):
    """The annotations read with `ast` (torch-free) are the real dataclass's, field for field, and every field's own
    default passes the check: the check never refuses what TRL itself starts from."""
    pytest.importorskip("trl")
    import importlib

    from rlft.config.trl_fields import trainer_config_types, value_problem

    types = trainer_config_types(stage)
    module, _, name = SPECS[stage].trl_config.partition(":")
    cls = getattr(importlib.import_module(module), name)
    real = {f.name: f for f in dataclasses.fields(cls)}
    assert set(types) == set(real)
    hints = typing.get_type_hints(cls)
    for key, field in types.items():
        assert eval(field.annotation, vars(inspect.getmodule(_owner(cls, field.owner))), {}) == hints[key], key
        default = real[key].default
        if default is not dataclasses.MISSING and not callable(default) and not isinstance(default, tuple):
            plain = default.value if hasattr(default, "value") and not isinstance(default, (int, str)) else default
            assert value_problem(field, plain) is None, (key, field, default)
        if field.choices:
            assert real[key].metadata.get("choices") == list(field.choices), key


def _owner(cls, name):
    return next(c for c in cls.__mro__ if c.__name__ == name)


def test_value_problem_reads_unions_literals_and_lists():
    from rlft.config.trl_fields import TrlField, value_problem

    f = TrlField("str | None | Literal[False]", owner="X")
    assert value_problem(f, False) is None and value_problem(f, None) is None and value_problem(f, "a") is None
    assert "got bool `True`" in value_problem(f, True)
    g = TrlField("list[float] | None", owner="X")
    assert value_problem(g, [1, 0.5]) is None and "got list" in value_problem(g, ["a"])
    assert value_problem(TrlField("SomeEnum | str", owner="X"), 3) is None  # a type it cannot judge: accepted
    assert ast.parse("int | None", mode="eval")  # the form TRL writes


def test_a_typo_of_an_option_rlft_sets_suggests_the_rlft_key():
    _needs_trl_sources("grpo")
    key, _, msg = one_error("--stage", "grpo", "trl.num_generation=4")
    assert key == "trl.num_generation" and "did you mean `grpo.group_size`" in msg, msg
    assert "`trl.num_generations`?" not in msg


# --- data.chat_template_kwargs ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["messages", "add_generation_prompt", "tokenize"])
def test_chat_template_kwargs_may_not_use_names_the_renderer_passes(name):
    write("p.yaml", f"data:\n  chat_template_kwargs:\n    enable_thinking: false\n    {name}: []\n")
    key, layer, msg = one_error("--stage", "grpo", "-c", "p.yaml")
    assert key == "data.chat_template_kwargs" and layer.startswith("p.yaml") and f"`{name}`" in msg, msg


def test_the_reserved_template_names_are_transformers_own():
    pytest.importorskip("transformers")
    from transformers.tokenization_utils_base import PreTrainedTokenizerBase
    from transformers.utils.chat_template_utils import render_jinja_template

    from rlft.config.validate import RESERVED_TEMPLATE_KWARGS

    passed = {*inspect.signature(PreTrainedTokenizerBase.apply_chat_template).parameters,
              *inspect.signature(render_jinja_template).parameters, "messages"} - {"self", "kwargs"}
    assert passed == set(RESERVED_TEMPLATE_KWARGS)


# --- eval.rewards named like a training reward ------------------------------------------------------------------

def test_an_eval_reward_named_like_a_training_reward_is_refused():
    write("p.yaml", "rewards:\n  - fn: char_fraction\neval:\n  rewards:\n    - fn: char_fraction\n"
                    "      kwargs: {char: q}\n")
    key, layer, msg = one_error("--stage", "grpo", "-c", "p.yaml")
    assert (key, layer) == ("eval.rewards[0]", "p.yaml:4") and "`char_fraction`" in msg and "name:" in msg, msg
    write("q.yaml", "rewards:\n  - fn: char_fraction\neval:\n  rewards:\n    - fn: char_fraction\n"
                    "      name: q_fraction\n      kwargs: {char: q}\n")
    assert cli("validate-config", "--stage", "grpo", "-c", "q.yaml").exit_code == 0
