"""Built-in synthetic GRPO demo task: "repeat a character" (`data.train: demo`).

Each prompt asks the model to repeat a target letter, and each row carries that letter in its ``target``
column: ``{"prompt": "Repeat the letter z: ", "target": "z"}`` (plain-text prompts, no chat template
needed). The reward is the built-in ``char_fraction`` (rlft/rewards/builtin.py), which reads the
``target`` column: the fraction of the completion's non-whitespace characters equal to that letter. The
randomly initialised tiny model of :mod:`rlft.tiny` scores about 0.02-0.04; a policy that has learnt the
task scores close to 1.0.

By default every row targets the same letter (:data:`DEMO_LETTERS`), phrased
in several ways: stock TRL GRPO + LoRA on the tiny model then lifts the reward
above 0.9 within about 60 steps on a CPU (see
``scripts/plain_trl_grpo_demo.py``). With several letters
(``demo_prompts(letters="abcd")``) the policy must also read the letter from
the prompt, a much harder task for a 2-layer model: expect hundreds of steps
rather than dozens (the reward first plateaus at ``1 / len(letters)``, the
score of always writing one letter). :func:`target_from_prompt` reads the
letter back from a prompt.

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
    "MULTI_LETTERS",
    "DEMO_TEMPLATES",
    "demo_prompts",
    "target_from_prompt",
    "write_demo_dataset",
]

#: Target letter(s) of the default demo prompts.
DEMO_LETTERS = "z"

#: A several-letter variant (pass as ``letters=``): a harder, conditional task.
MULTI_LETTERS = "abcd"

#: Prompt templates; ``{c}`` is the target letter.
DEMO_TEMPLATES = (
    "Repeat the letter {c}: ",
    "Write {c} many times: ",
)

_TARGET_RES = tuple(
    re.compile(re.escape(t).replace(re.escape("{c}"), r"(\S)") + r"\Z") for t in DEMO_TEMPLATES
)


def demo_prompts(n: int = 64, seed: int = 0, letters: str | None = None) -> list[dict[str, str]]:
    """``n`` demo rows ``{"prompt": ..., "target": ...}``, deterministic in ``seed``.

    Target letters cycle through ``letters`` (default :data:`DEMO_LETTERS`;
    every letter equally represented); prompt templates
    (:data:`DEMO_TEMPLATES`) are drawn at random.
    """
    if n < 0:
        raise ValueError("n must be non-negative")
    chosen = DEMO_LETTERS if letters is None else letters
    if not chosen or any(ch.isspace() for ch in chosen):
        raise ValueError(f"letters must be a non-empty string without whitespace, got {chosen!r}")
    rng = random.Random(seed)
    pool = list(chosen)
    rows: list[dict[str, str]] = []
    for i in range(n):
        if i % len(pool) == 0:
            rng.shuffle(pool)
        c = pool[i % len(pool)]
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


def write_demo_dataset(
    path: str | os.PathLike[str], n: int = 64, seed: int = 0, letters: str | None = None
) -> Path:
    """Write :func:`demo_prompts` rows to ``path`` as JSON lines; returns the path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as f:
        for row in demo_prompts(n=n, seed=seed, letters=letters):
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return out
