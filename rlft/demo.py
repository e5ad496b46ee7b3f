"""Built-in synthetic GRPO demo task: "repeat a character".

Each prompt asks the model to repeat one target letter; the reward
:func:`char_fraction` is the fraction of the completion's non-whitespace
characters that equal that row's target letter. A randomly initialised model
scores about 0.05; a policy that has learnt the task scores close to 1.0.
The task is small enough for LoRA + GRPO on the tiny model of
:mod:`rlft.tiny` to learn on a CPU in a minute or so.

Dataset rows look like ``{"prompt": "Repeat the letter a: ", "target": "a"}``.
GRPO trainers pass extra dataset columns to reward functions as keyword
arguments (one list entry per completion), so ``target`` reaches
:func:`char_fraction` without further wiring.

Pure python; importing this module does not import torch.
"""

from __future__ import annotations

import json
import os
import random
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "DEMO_LETTERS",
    "DEMO_TEMPLATES",
    "demo_prompts",
    "char_fraction",
    "target_from_prompt",
    "write_demo_dataset",
]

#: Target letters used by the demo prompts.
DEMO_LETTERS = "abcd"

#: Prompt templates; ``{c}`` is the target letter.
DEMO_TEMPLATES = (
    "Repeat the letter {c}: ",
    "Write {c} many times: ",
)

_TARGET_RES = tuple(
    re.compile(re.escape(t).replace(re.escape("{c}"), r"(\S)") + r"\Z") for t in DEMO_TEMPLATES
)


def demo_prompts(n: int = 64, seed: int = 0) -> list[dict[str, str]]:
    """``n`` demo rows ``{"prompt": ..., "target": ...}``, deterministic in ``seed``.

    Target letters cycle through :data:`DEMO_LETTERS` (so every letter is
    equally represented); templates are drawn at random.
    """
    if n < 0:
        raise ValueError("n must be non-negative")
    rng = random.Random(seed)
    letters = list(DEMO_LETTERS)
    rows: list[dict[str, str]] = []
    for i in range(n):
        if i % len(letters) == 0:
            rng.shuffle(letters)
        c = letters[i % len(letters)]
        template = rng.choice(DEMO_TEMPLATES)
        rows.append({"prompt": template.format(c=c), "target": c})
    return rows


def target_from_prompt(prompt: Any) -> str | None:
    """Recover the target letter from a demo prompt (plain or conversational)."""
    text = _text_of(prompt)
    for rx in _TARGET_RES:
        m = rx.search(text)
        if m:
            return m.group(1)
    return None


def _text_of(x: Any) -> str:
    """Text of a completion/prompt: a string, or the content of the last message of a conversation."""
    if x is None:
        return ""
    if isinstance(x, str):
        return x
    if isinstance(x, dict):
        content = x.get("content", "")
        if isinstance(content, list):  # multimodal-style content parts
            return "".join(p.get("text", "") for p in content if isinstance(p, dict))
        return str(content)
    if isinstance(x, Sequence) and len(x) > 0:
        return _text_of(x[-1])
    return ""


def char_fraction(
    prompts: Sequence[Any] | None,
    completions: Sequence[Any],
    target: Sequence[str] | str | None = None,
    **kwargs: Any,
) -> list[float]:
    """Reward: fraction of non-whitespace characters of each completion equal to its target.

    ``target`` is a list with one character per completion (as GRPO trainers
    pass dataset columns), or a single character for all of them. If it is
    ``None`` the target is read back from each prompt (see
    :func:`target_from_prompt`). Empty (or all-whitespace) completions score 0.0.
    """
    n = len(completions)
    if target is None:
        if prompts is None:
            raise ValueError("char_fraction needs `target` or `prompts`")
        targets: list[str | None] = [target_from_prompt(p) for p in prompts]
    elif isinstance(target, str):
        targets = [target] * n
    else:
        targets = list(target)
    if len(targets) != n:
        raise ValueError(f"got {len(targets)} targets for {n} completions")

    rewards: list[float] = []
    for completion, tgt in zip(completions, targets):
        chars = [ch for ch in _text_of(completion) if not ch.isspace()]
        if not chars or not tgt:
            rewards.append(0.0)
            continue
        rewards.append(sum(ch == tgt for ch in chars) / len(chars))
    return rewards


def write_demo_dataset(path: str | os.PathLike[str], n: int = 64, seed: int = 0) -> Path:
    """Write :func:`demo_prompts` rows to ``path`` as JSON lines; returns the path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as f:
        for row in demo_prompts(n=n, seed=seed):
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return out
