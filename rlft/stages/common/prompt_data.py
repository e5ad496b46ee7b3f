"""Prompt data for the sampling stages (GRPO, PPO, RS-SFT, AWR), loaded and checked before the run
folder exists: prompts that are not text or chat messages, columns the rewards read that the data
lacks, and prompts longer than the sequence budget all stop the run with exit 2 and leave nothing
behind; over-long prompts are truncated or dropped (``data.too_long``) with a counted warning."""

from __future__ import annotations

from rlft import world
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
    from rlft.data import DataError
    from rlft.data.prompt_set import load_prompts

    try:
        return load_prompts(getattr(cfg.data, key), cfg.data.prompt_column, f"data.{key}",
                            system_prompt=cfg.data.system_prompt, max_samples=_max_samples(cfg, key))
    except DataError as exc:
        raise RunError(str(exc)) from None


def _max_samples(cfg: RlftConfig, key: str) -> int | None:
    return cfg.data.max_samples if key == "train" else None


def prompts_as_chat(cfg: RlftConfig, ds, tokenizer):
    """(dataset, start-line phrase): plain-text prompts become user messages when `data.chat_template`
    applies, so the tokenizer's chat template renders them (TRL and rlft's sampler template message lists)."""
    from rlft.data import DataError
    from rlft.data.prompt_set import as_chat

    try:
        return as_chat(ds, cfg.data.chat_template, bool(getattr(tokenizer, "chat_template", None)),
                       cfg.model.name_or_path)
    except DataError as exc:
        raise RunError(str(exc)) from None


def check_suite_columns(ds, suite, source: str = "data.train") -> None:
    """rlft.data.prompt_set's check_reward_columns for a resolved suite, its DataError a RunError (exit 2)."""
    from rlft.data import DataError
    from rlft.data.prompt_set import check_reward_columns
    from rlft.rewards.columns import suite_columns

    try:
        check_reward_columns(ds, suite_columns(suite), source)
    except DataError as exc:
        raise RunError(str(exc)) from None


def prompt_set(cfg: RlftConfig, suite, key: str = "train"):
    """The plain values data.<key>'s prompts are prepared with (rlft.data.prompt_set.PromptSet), gathered from the
    config before the tokenizer loads; `.prepare(tokenizer)` loads and checks them (its DataError: a RunError,
    exit 2, before any run folder exists, through `prepare_prompts`)."""
    from rlft.data.prompt_set import PromptSet
    from rlft.rewards.columns import suite_columns

    needs = suite_columns(suite)
    budget = prompt_budget(cfg)
    why = (f" (train.max_seq_length {cfg.train.max_seq_length} minus {_section(cfg)}.max_tokens "
           f"{completion_budget(cfg)} for the completion)")
    announce = key == "train" and world.rank() == 0  # the start line, once
    return PromptSet(getattr(cfg.data, key), f"data.{key}", column=cfg.data.prompt_column,
                     system_prompt=cfg.data.system_prompt, max_samples=_max_samples(cfg, key), reward_columns=needs,
                     chat_template=cfg.data.chat_template, model=cfg.model.name_or_path, budget=budget,
                     too_long=cfg.data.too_long, why=why, announce=announce)


def eval_prompt_set(cfg: RlftConfig, suite):
    """data.eval's prompt set when the evaluation prompts come from it (data.eval set, data.eval_prompts not 0),
    else None (`prepare_prompts` then takes data.train's first rows, or none)."""
    return prompt_set(cfg, suite, "eval") if cfg.data.eval and cfg.data.eval_prompts else None


def prepare_prompt_data(cfg: RlftConfig, tokenizer, suite, key: str = "train"):
    """Load and check the prompts of data.<key>; raises RunError (exit 2) before any run folder exists."""
    from rlft.data import DataError

    try:
        return prompt_set(cfg, suite, key).prepare(tokenizer)
    except DataError as exc:
        raise RunError(str(exc)) from None


def prepare_prompts(cfg: RlftConfig, tokenizer, train, evals) -> tuple:
    """(training prompts, evaluation rows) from the sets `prompt_set` and `eval_prompt_set` gathered: the rows of
    summary.json's eval.start / eval.end are the first data.eval_prompts rows of data.eval (checked like the
    training data), or of data.train without it ([] when eval_prompts is 0). Bad data: RunError (exit 2), before
    any run folder exists."""
    from rlft.data import DataError
    from rlft.data.prompt_set import first_rows

    try:
        ds = train.prepare(tokenizer)
        return ds, first_rows(evals.prepare(tokenizer) if evals else ds, cfg.data.eval_prompts)
    except DataError as exc:
        raise RunError(str(exc)) from None


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


def sampling_inputs(cfg: RlftConfig, composed):
    """A sampling stage's inputs in one call, before the run folder (rlft.runtime.lifecycle.StageInputs): the reward
    suite, the `eval.rewards` suite, the models' load plan and the tokenizer, the training
    prompts (`train`, a dataset) and the evaluation rows (`eval_rows`, first data.eval_prompts rows of data.eval or of
    data.train). Bad rewards or data: RunError (exit 2), nothing written."""
    from rlft.config.load_plan import load_plan
    from rlft.models.loading import tokenizer
    from rlft.runtime.lifecycle import StageInputs

    suite = reward_suite(cfg, composed)
    train, evals = prompt_set(cfg, suite), eval_prompt_set(cfg, suite)
    eval_suite = eval_reward_suite(cfg, composed)
    plan = load_plan(cfg)  # the models the stage loads, read once (the init_from run's folder included)
    tok = tokenizer(plan)
    dataset, rows = prepare_prompts(cfg, tok, train, evals)
    return StageInputs(tokenizer=tok, train=dataset, eval_rows=rows, suite=suite, eval_suite=eval_suite, plan=plan)
