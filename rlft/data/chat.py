"""Whether prompts go through the tokenizer's chat template, and plain-text rows as chat messages.

TRL applies a tokenizer's chat template only to message lists ("conversational" rows); a plain-text
prompt is tokenized as it is. An instruct model then trains on raw continuations it never sees in
use. `data.chat_template` decides: `auto` applies the template when the tokenizer has one, `always`
requires one, `never` keeps plain text as it is. rlft applies it by turning plain-text rows into
messages, so TRL's own templating does the rest.

Pure python (no datasets, transformers or torch import).
"""

from __future__ import annotations

from typing import Any

from rlft.data.errors import DataError

__all__ = ["CHAT_TEMPLATE_MODES", "bind_template_kwargs", "decide", "describe", "prompt_messages",
           "preference_messages"]

CHAT_TEMPLATE_MODES = ("auto", "always", "never")


def bind_template_kwargs(tokenizer, kwargs: dict[str, Any] | None):
    """The tokenizer, rendering every chat template with `kwargs` (`data.chat_template_kwargs`, e.g.
    `{enable_thinking: false}`): the template variables reach every prompt rlft renders and every one TRL's
    trainers render, since all of them call this tokenizer's `apply_chat_template` (a call's own keyword
    arguments win). Bound on the instance as a partial of the class's method, so a deep copy (the async
    sampler's own tokenizer) renders with its copy, not with this one."""
    import functools

    if not kwargs:
        return tokenizer
    kwargs = dict(kwargs)
    tokenizer.apply_chat_template = functools.partial(type(tokenizer).apply_chat_template, tokenizer, **kwargs)
    tokenizer.rlft_chat_template_kwargs = kwargs
    return tokenizer


def decide(mode: str, has_template: bool, model: str = "the model") -> bool:
    """Whether plain-text prompts go through the chat template; `always` without one is an error."""
    if mode not in CHAT_TEMPLATE_MODES:
        raise DataError(f"data.chat_template: `{mode}` is not allowed; expected one of "
                        f"{', '.join(CHAT_TEMPLATE_MODES)}")
    if mode == "always" and not has_template:
        raise DataError(f"data.chat_template is `always` but the tokenizer of {model} has no chat template; "
                        f"use `auto` or `never`, or a model whose tokenizer_config.json has a chat_template")
    return mode == "always" or (mode == "auto" and has_template)


def describe(mode: str, has_template: bool, applied: bool, kind: str = "text") -> str:
    """One phrase for the start line: what happens to the prompts and why."""
    if kind == "chat":
        return "chat template applied (the prompts are chat messages)"
    if applied:
        why = "auto: the tokenizer has one" if mode == "auto" else "always"
        return f"chat template applied to plain-text prompts ({why})"
    why = "never" if mode == "never" else "auto: the tokenizer has none"
    return f"plain-text prompts used as they are, no chat template ({why})"


def prompt_messages(prompt: Any, system_prompt: str | None = None) -> Any:
    """A plain-text prompt as a user message (after an optional system message); messages pass through."""
    if not isinstance(prompt, str):
        return prompt
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return messages + [{"role": "user", "content": prompt}]


def preference_messages(row: dict, system_prompt: str | None = None) -> dict:
    """A plain-text preference pair as chat messages: the prompt as the user's turn, each answer as the
    assistant's (TRL's conversational preference format)."""
    out = {"prompt": prompt_messages(row["prompt"], system_prompt)}
    for key in ("chosen", "rejected"):
        value = row[key]
        out[key] = [{"role": "assistant", "content": value}] if isinstance(value, str) else value
    return out
