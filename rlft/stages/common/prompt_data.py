"""Prompt data for the sampling stages (GRPO, PPO, RS-SFT, AWR), loaded and checked before the run
folder exists: prompts that are not text or chat messages, columns the rewards read that the data
lacks, and prompts longer than the sequence budget all stop the run with exit 2 and leave nothing
behind; over-long prompts are truncated or dropped (``data.too_long``) with a counted warning."""

from __future__ import annotations

import os
import sys
from typing import Any

from rlft.config.schema import RlftConfig
from rlft.errors import RunError


def _section(cfg: RlftConfig) -> str:
    from rlft.config.stages import SPECS

    return SPECS[cfg.stage].section


def completion_budget(cfg: RlftConfig) -> int:
    """Tokens a completion may take in this stage (its section's `max_tokens`)."""
    return int(getattr(getattr(cfg, _section(cfg)), "max_tokens"))


def prompt_budget(cfg: RlftConfig) -> int:
    """Tokens a prompt may take: train.max_seq_length minus the completion budget."""
    return cfg.train.max_seq_length - completion_budget(cfg)


def load_prompt_dataset(cfg: RlftConfig, key: str = "train"):
    """The prompt table of data.<key> (`prompt` column plus the data's other columns, and `prompt_id`: the row
    number unless the data has its own), every prompt checked; data.max_samples caps the training rows."""
    from datasets import Dataset

    from rlft.data import DataError
    from rlft.data.checks import check_prompt_values
    from rlft.data.columns import column_values

    path = getattr(cfg.data, key)
    if path == "demo":
        from rlft.data.demo import demo_prompts

        ds = Dataset.from_list(demo_prompts())
    else:
        from rlft.data.load import load_table, prepare_prompt_dataset

        try:
            table = load_table(path)
            col = cfg.data.prompt_column
            if col in table.column_names:  # every bad row at once, not only the first
                problems = check_prompt_values(column_values(table, col), col, f"data.{key} ({path})")
                if problems:
                    raise DataError("; ".join(problems))
            ds = prepare_prompt_dataset(table, col, system_prompt=cfg.data.system_prompt, source=f"data.{key}")
        except DataError as exc:
            raise RunError(str(exc)) from None
    if key == "train" and cfg.data.max_samples:
        ds = ds.select(range(min(cfg.data.max_samples, len(ds))))
    if "prompt_id" not in ds.column_names:  # the row of each prompt, for completions.jsonl (never a reward input)
        ds = ds.add_column("prompt_id", list(range(len(ds))))
    return ds


def prompts_as_chat(cfg: RlftConfig, ds, tokenizer):
    """(dataset, start-line phrase): plain-text prompts become user messages when `data.chat_template`
    applies, so the tokenizer's chat template renders them (TRL and rlft's sampler template message lists)."""
    from rlft.data import DataError
    from rlft.data.chat import decide, describe, prompt_messages

    has = bool(getattr(tokenizer, "chat_template", None))
    try:
        on = decide(cfg.data.chat_template, has, cfg.model.name_or_path)
    except DataError as exc:
        raise RunError(str(exc)) from None
    kind = "text" if isinstance(ds[0]["prompt"], str) else "chat"
    if on and kind == "text":
        ds = ds.map(lambda row: {"prompt": prompt_messages(row["prompt"])}, desc="Chat messages")
    return ds, describe(cfg.data.chat_template, has, on, kind)


def check_reward_columns(ds, suite, source: str = "data.train") -> None:
    """Every column a reward declares it reads (less its configured kwargs) must be in the data."""
    from rlft.data.checks import missing_reward_columns
    from rlft.rewards import required_columns

    needs: dict[str, list[str]] = {}
    for r in suite.rewards:
        try:
            wanted = required_columns(r.fn, r.kwargs)
        except Exception as exc:  # noqa: BLE001 - a broken declaration is reported like a missing column
            raise RunError(f"reward {r.name!r}: cannot read its required_columns: {type(exc).__name__}: "
                           f"{exc}") from None
        needs[r.name] = [c for c in wanted if c not in r.kwargs]
    problems = missing_reward_columns([c for c in ds.column_names if c != "prompt"], needs, source)
    if problems:
        raise RunError("; ".join(problems))


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


def fit_prompt_lengths(cfg: RlftConfig, ds, tokenizer, source: str = "data.train"):
    """Apply `data.too_long` to prompts longer than train.max_seq_length minus the completion budget."""
    from rlft.data import DataError
    from rlft.data.checks import fit_prompts
    from rlft.data.columns import column_values

    budget = prompt_budget(cfg)
    why = (f" (train.max_seq_length {cfg.train.max_seq_length} minus {_section(cfg)}.max_tokens "
           f"{completion_budget(cfg)} for the completion)")
    try:
        report = fit_prompts(column_values(ds, "prompt"), _token_counter(tokenizer), _cutter(tokenizer), budget,
                             cfg.data.too_long, source, why)
    except DataError as exc:
        raise RunError(str(exc)) from None
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


def prepare_prompt_data(cfg: RlftConfig, tokenizer, suite, key: str = "train"):
    """Load and check the prompts of data.<key>; raises RunError (exit 2) before any run folder exists."""
    ds = load_prompt_dataset(cfg, key)
    check_reward_columns(ds, suite, f"data.{key}")
    ds, chat_note = prompts_as_chat(cfg, ds, tokenizer)
    if key == "train" and int(os.environ.get("RANK", "0")) == 0:
        print(f"rlft: data.train: {len(ds)} prompts; {chat_note}", file=sys.stderr, flush=True)
    return fit_prompt_lengths(cfg, ds, tokenizer, f"data.{key}")


def eval_rows(cfg: RlftConfig, train_ds, tokenizer, suite) -> list[dict]:
    """The evaluation prompts of summary.json's eval.start / eval.end: the first data.eval_prompts rows of
    data.eval (checked like the training data), or of data.train without it; [] when eval_prompts is 0."""
    k = cfg.data.eval_prompts
    if not k:
        return []
    ds = prepare_prompt_data(cfg, tokenizer, suite, "eval") if cfg.data.eval else train_ds
    return ds.select(range(min(k, len(ds)))).to_list()


def eval_reward_suite(cfg: RlftConfig, composed):
    """The `eval.rewards` suite (scored on evaluation samples only, built like the training suite), or None when
    there are none."""
    if not cfg.eval.rewards:
        return None
    from rlft.rewards import RewardResolveError, build_reward_suite

    try:
        return build_reward_suite([vars(r) for r in cfg.eval.rewards], config_dir=composed.dir_of("eval.rewards"),
                                  max_failure_fraction=cfg.monitor.max_reward_failure_fraction)
    except (RewardResolveError, ValueError) as exc:
        raise RunError(f"eval.rewards: {exc}") from None


def reward_suite(cfg: RlftConfig, composed):
    """The configured reward functions, resolved next to the config file that named them; a bad one is a
    RunError (exit 2) raised before the run folder exists."""
    from rlft.rewards import RewardResolveError, build_reward_suite

    try:
        return build_reward_suite([vars(r) for r in cfg.rewards], config_dir=composed.dir_of("rewards"),
                                  max_failure_fraction=cfg.monitor.max_reward_failure_fraction)
    except (RewardResolveError, ValueError) as exc:
        raise RunError(str(exc)) from None
