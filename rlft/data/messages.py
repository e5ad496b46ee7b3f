"""Classify cell values as plain text or chat messages.

Prompts, chosen and rejected responses may each be a string or a list of
``{"role", "content"}`` messages (TRL's "conversational" format). Both the
prompt and the preference preparation need the same rules for what counts
as empty and what is malformed, so they live here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

__all__ = ["value_kind", "normalized", "as_text"]

Kind = Literal["text", "chat", "empty"]


def _check_message(j: int, message: Any) -> str:
    """Validate one message; return its text content ('' for non-text content)."""
    if not isinstance(message, Mapping):
        raise TypeError(f"message {j} is a {type(message).__name__}, expected a {{'role', 'content'}} mapping")
    if not isinstance(message.get("role"), str):
        raise TypeError(f"message {j} has no string 'role'")
    content = message.get("content")
    if content is not None and not isinstance(content, (str, list)):
        raise TypeError(f"message {j} has 'content' of type {type(content).__name__}, expected text")
    # list content is multimodal parts; treat it as non-empty
    return content if isinstance(content, str) else ("" if content is None else "<parts>")


def value_kind(value: Any) -> Kind:
    """'text', 'chat', or 'empty' (None, blank text, no messages, or only blank contents).

    Raises ``TypeError`` describing the problem for anything else, so callers
    can add the column and row.
    """
    if value is None:
        return "empty"
    if isinstance(value, str):
        return "text" if value.strip() else "empty"
    if isinstance(value, list):
        contents = [_check_message(j, m) for j, m in enumerate(value)]
        return "chat" if any(c.strip() for c in contents) else "empty"
    raise TypeError(f"expected text or a list of chat messages, got {type(value).__name__}")


def normalized(value: Any) -> Any:
    """A hashable form for comparing two responses, ignoring outer whitespace."""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, list):
        return tuple(
            (m.get("role"), m.get("content").strip() if isinstance(m.get("content"), str) else repr(m.get("content")))
            for m in value
        )
    return repr(value)


def as_text(value: Any) -> str:
    """A prompt or completion as the plain text reward functions receive (chat messages: their
    contents, one per line)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(m.get("content", "") if isinstance(m, dict) else str(m) for m in value)
    return str(value)
