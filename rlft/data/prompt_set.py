"""A sampling stage's prompt set, from the file to the prompts it samples from, in one call (:meth:`PromptSet.prepare`):
loaded and checked, the columns the rewards read present, plain text turned into chat messages per
``data.chat_template``, and every prompt fitted into the token budget (``data.too_long``). It takes plain values
(the stage gathers them from its config) and raises :class:`DataError`; only the length check needs a tokenizer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rlft.data.columns import column_values
from rlft.data.errors import DataError
from rlft.data.prompts import prepare_prompt_dataset

if TYPE_CHECKING:
    from datasets import Dataset

__all__ = ["load_prompts", "check_reward_columns", "as_chat", "fit_lengths", "PromptSet", "first_rows"]


def load_prompts(path: str, column: str, source: str, *, system_prompt: str | None = None,
                 max_samples: int | None = None) -> Dataset:
    """The prompt table of ``path`` (``demo``: the built-in prompts): the ``prompt`` column plus the data's other
    columns, and ``prompt_id`` (the row number unless the data has its own), every prompt checked; ``max_samples``
    caps the rows. ``source`` is the config key (``data.train``); every problem is a :class:`DataError`."""
    from datasets import Dataset

    from rlft.data.checks import check_prompt_values

    if path == "demo":
        from rlft.data.demo import demo_prompts

        ds = Dataset.from_list(demo_prompts())
    else:
        from rlft.data.load import load_table

        table = load_table(path)
        if column in table.column_names:  # every bad row at once, not only the first
            problems = check_prompt_values(column_values(table, column), column, f"{source} ({path})")
            if problems:
                raise DataError("; ".join(problems))
        ds = prepare_prompt_dataset(table, column, system_prompt=system_prompt, source=source)
    if max_samples:
        ds = ds.select(range(min(max_samples, len(ds))))
    if "prompt_id" not in ds.column_names:  # the row of each prompt, for completions.jsonl (never a reward input)
        ds = ds.add_column("prompt_id", list(range(len(ds))))
    return ds


def check_reward_columns(ds: Dataset, needs: Mapping[str, Iterable[str]], source: str) -> None:
    """Every column a reward still reads (``needs``: reward name -> columns, its configured kwargs taken out)
    must be in the data; a :class:`DataError` names each one missing."""
    from rlft.data.checks import missing_reward_columns

    problems = missing_reward_columns([c for c in ds.column_names if c != "prompt"], needs, source)
    if problems:
        raise DataError("; ".join(problems))


def as_chat(ds: Dataset, mode: str, has_template: bool, model: str) -> tuple[Dataset, str]:
    """(dataset, start-line phrase): plain-text prompts become user messages when ``mode``
    (``data.chat_template``) applies, so the tokenizer's chat template renders them."""
    from rlft.data.chat import decide, describe, prompt_messages

    on = decide(mode, has_template, model)
    kind = "text" if isinstance(ds[0]["prompt"], str) else "chat"
    if on and kind == "text":
        ds = ds.map(lambda row: {"prompt": prompt_messages(row["prompt"])}, desc="Chat messages")
    return ds, describe(mode, has_template, on, kind)


def _token_counter(tokenizer):
    """Prompt length in tokens as TRL will tokenize it (chat prompts through the chat template)."""
    has_template = bool(getattr(tokenizer, "chat_template", None))

    def count(prompt: Any) -> int:
        if isinstance(prompt, str):
            return len(tokenizer(text=prompt)["input_ids"])
        if has_template:
            ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=True)
            return len(ids["input_ids"])
        return len(tokenizer(text="\n".join(str(m.get("content") or "") for m in prompt))["input_ids"])

    return count


def _cutter(tokenizer):
    """Remove `n` tokens from the left of a prompt; chat: from the earliest non-system messages."""

    def cut_text(text: str, n: int) -> str:
        ids = tokenizer(text=text, add_special_tokens=False)["input_ids"]
        return tokenizer.decode(ids[min(n, len(ids)):])

    def cut(prompt: Any, n: int) -> Any:
        if isinstance(prompt, str):
            return cut_text(prompt, n)
        messages = [dict(m) for m in prompt]
        for m in messages:
            if n <= 0:
                break
            if m.get("role") == "system" or not isinstance(m.get("content"), str):
                continue
            size = len(tokenizer(text=m["content"], add_special_tokens=False)["input_ids"])
            m["content"] = cut_text(m["content"], n)
            n -= size
        return messages

    return cut


def fit_lengths(ds: Dataset, tokenizer, budget: int, too_long: str, source: str, why: str = "") -> Dataset:
    """Apply ``too_long`` (``data.too_long``) to prompts longer than ``budget`` tokens, with a counted warning on
    stderr; ``why`` explains the budget in errors."""
    import sys

    from rlft.data.checks import fit_prompts

    report = fit_prompts(column_values(ds, "prompt"), _token_counter(tokenizer), _cutter(tokenizer), budget,
                         too_long, source, why)
    message = report.message(source)
    if message is None:
        return ds
    print(f"rlft: warning: {message}", file=sys.stderr, flush=True)
    if report.prompts:
        fitted = dict(report.prompts)
        ds = ds.map(lambda row, i: {"prompt": fitted.get(i, row["prompt"])}, with_indices=True,
                    desc="Truncating long prompts")
    if report.dropped:
        ds = ds.select(report.keep)
    return ds


@dataclass(frozen=True)
class PromptSet:
    """A prompt set as plain values (a stage gathers them from its config before the tokenizer loads);
    :meth:`prepare` makes the prompts (a :class:`DataError` for bad data)."""

    path: str
    source: str
    column: str
    system_prompt: str | None
    max_samples: int | None
    reward_columns: Mapping[str, Iterable[str]]
    chat_template: str
    model: str
    budget: int
    too_long: str
    why: str = ""
    announce: bool = False

    def prepare(self, tokenizer) -> Dataset:
        """The prompts ready to sample from, in one go: loaded and checked (:func:`load_prompts`), the columns the
        rewards read present (:func:`check_reward_columns`), plain text turned into chat messages per
        ``chat_template`` (:func:`as_chat`; the start line ``rlft: <source>: N prompts; ...`` on stderr with
        ``announce``), and every prompt fitted into ``budget`` tokens (:func:`fit_lengths`)."""
        import sys

        ds = load_prompts(self.path, self.column, self.source, system_prompt=self.system_prompt,
                          max_samples=self.max_samples)
        check_reward_columns(ds, self.reward_columns, self.source)
        ds, chat_note = as_chat(ds, self.chat_template, bool(getattr(tokenizer, "chat_template", None)), self.model)
        if self.announce:
            print(f"rlft: {self.source}: {len(ds)} prompts; {chat_note}", file=sys.stderr, flush=True)
        return fit_lengths(ds, tokenizer, self.budget, self.too_long, self.source, self.why)


def first_rows(ds: Dataset, k: int) -> list[dict]:
    """The first ``k`` rows of ``ds`` (all of them when it has fewer), as dicts; [] when ``k`` is 0."""
    return ds.select(range(min(k, len(ds)))).to_list() if k else []
