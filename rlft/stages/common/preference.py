"""What the preference stages (DPO, ORPO) share: data loading with the skipped-rows report, the
sequence-length limits, evaluation settings, the start-of-run summary and their parts of the run lifecycle."""

from __future__ import annotations

import sys

from rlft.config.schema import RlftConfig
from rlft.errors import RunError
from rlft.runtime.lifecycle import Stage, StageInputs, run_stage


def _load_split(cfg: RlftConfig, key: str, path: str):
    from rlft.data import DataError
    from rlft.data.load import load_table, prepare_preference_dataset

    d = cfg.data
    source = f"{key} ({path})"
    try:
        ds, report = prepare_preference_dataset(load_table(path), d.prompt_column, d.chosen_column,
                                                d.rejected_column, strict=d.strict, source=source)
    except DataError as exc:
        raise RunError(str(exc)) from None
    if report["skipped"]:
        reasons = ", ".join(f"{reason}: {n}" for reason, n in report["reasons"].items())
        more = ", ..." if report["skipped"] > len(report["first_rows"]) else ""
        print(f"rlft: {source}: skipped {report['skipped']} of {report['total']} rows with no usable preference "
              f"pair ({reasons}); first rows (0-based): {', '.join(map(str, report['first_rows']))}{more}. "
              f"Set data.strict=true to make this an error.", file=sys.stderr)
    return ds


def load_preference_data(cfg: RlftConfig):
    """(train, eval or None) with columns prompt/chosen/rejected; bad data is a RunError (exit 2)."""
    if not cfg.data.train or cfg.data.train == "demo":
        raise RunError(f"stage `{cfg.stage}` needs preference data in data.train (prompt, chosen and rejected "
                       f"columns), e.g. configs/examples/data/preference_demo.jsonl")
    train = _load_split(cfg, "data.train", cfg.data.train)
    if cfg.data.max_samples:
        train = train.select(range(min(cfg.data.max_samples, len(train))))
    evaluation = _load_split(cfg, "data.eval", cfg.data.eval) if cfg.data.eval else None
    return train, evaluation


def pairs_as_chat(cfg: RlftConfig, datasets: list, tokenizer) -> tuple[list, str]:
    """(datasets, start-line phrase): plain-text pairs become chat messages (user prompt, assistant answers)
    when the template applies, so TRL renders them with the tokenizer's chat template."""
    from rlft.data import DataError
    from rlft.data.chat import decide, describe, preference_messages

    has = bool(getattr(tokenizer, "chat_template", None))
    try:
        on = decide(cfg.data.chat_template, has, cfg.model.name_or_path)
    except DataError as exc:
        raise RunError(str(exc)) from None
    kind = "text" if isinstance(datasets[0][0]["prompt"], str) else "chat"
    if on and kind == "text":
        system = cfg.data.system_prompt
        datasets = [None if ds is None else ds.map(lambda row: preference_messages(row, system), desc="Chat messages")
                    for ds in datasets]
    return datasets, describe(cfg.data.chat_template, has, on, kind).replace("prompts", "pairs")


def max_length(cfg: RlftConfig, stage_max_length: int) -> int:
    """Longest prompt + answer: the stage's max_length, capped by the hardware's train.max_seq_length."""
    return min(stage_max_length, cfg.train.max_seq_length)


def eval_args(cfg: RlftConfig) -> dict:
    """Evaluate every train.eval_steps when data.eval is set."""
    if not cfg.data.eval:
        return {}
    return dict(eval_strategy="steps", eval_steps=cfg.train.eval_steps,
                per_device_eval_batch_size=cfg.train.per_device_train_batch_size)


def print_start(cfg: RlftConfig, num_samples: int, stage_max_length: int, max_prompt_length: int,
                notes: tuple[str, ...] = ()) -> None:
    from rlft.config.render import schedule_summary

    print(schedule_summary(cfg, num_samples=num_samples), file=sys.stderr)
    limit = max_length(cfg, stage_max_length)
    capped = " (capped by train.max_seq_length)" if limit < stage_max_length else ""
    extra = "".join(f"; {n}" for n in notes)
    print(f"rlft: {num_samples} preference pairs; max_length {limit} tokens{capped}, "
          f"max_prompt_length {max_prompt_length} tokens{extra}", file=sys.stderr)


class PreferenceStage(Stage):
    """DPO's and ORPO's parts of the run lifecycle (rlft.runtime.lifecycle runs them in order): inputs (data, TRL
    settings, rewards and their columns, tokenizer and chat template, checked before the run folder) -> model (+
    reference) -> run folder -> trainer -> eval.start -> train (final adapter) -> eval.end (with `rewards:` or
    data.eval; see rlft.stages.common.preference_eval). `trl_config(cfg, output_dir, composed)` builds the stage's
    TRL config; `make_trainer(model, tokenizer, ref, args, train_ds, eval_ds, ctx)` its trainer, with `ref` from
    `load_reference(cfg)` or None."""

    def __init__(self, cfg: RlftConfig, composed, opts, trl_config, make_trainer, load_reference=None):
        super().__init__(cfg, composed, opts)
        self.trl_config, self.make_trainer, self.load_reference = trl_config, make_trainer, load_reference

    def inputs(self) -> StageInputs:
        from rlft.config.load_plan import load_plan
        from rlft.models.loading import tokenizer
        from rlft.stages.common.preference_eval import PreferenceEval

        cfg = self.cfg
        train_ds, eval_ds = load_preference_data(cfg)  # fix the data, rerun as is
        self.trl_config(cfg, cfg.train.output_dir or ".", self.composed)  # likewise TRL's objections to the settings
        evaluation = PreferenceEval.prepare(cfg, self.composed, train_ds, eval_ds)  # and the rewards
        plan = load_plan(cfg)
        tok = tokenizer(plan)
        (train_ds, eval_ds), chat_note = pairs_as_chat(cfg, [train_ds, eval_ds], tok)
        return StageInputs(tokenizer=tok, train=train_ds, eval_rows=eval_ds, plan=plan,
                           extra=dict(evaluation=evaluation, chat_note=chat_note))

    def model(self, inputs: StageInputs) -> tuple:
        """(the policy, the reference or None)."""
        from rlft.models.loading import policy

        model = policy(inputs.plan)
        return model, self.load_reference(self.cfg) if self.load_reference is not None else None

    def trainer(self, ctx, model: tuple, inputs: StageInputs):
        cfg, section = self.cfg, getattr(self.cfg, self.cfg.stage)
        args = self.trl_config(cfg, str(ctx.run.checkpoints), self.composed)
        print_start(cfg, len(inputs.train), section.max_length, section.max_prompt_length, (inputs.extra["chat_note"],))
        policy, ref = model
        return self.make_trainer(policy, inputs.tokenizer, ref, args, inputs.train, inputs.eval_rows, ctx)

    def evaluator(self, ctx, trainer, inputs: StageInputs):
        source = inputs.eval_rows if inputs.eval_rows is not None else inputs.train
        return inputs.extra["evaluation"].ready(inputs.tokenizer, source, ctx)


def run_preference(cfg: RlftConfig, composed, opts, trl_config, make_trainer, load_reference=None) -> int:
    """A preference stage's run (PreferenceStage's parts in the run lifecycle's order); the exit code."""
    return run_stage(PreferenceStage(cfg, composed, opts, trl_config, make_trainer, load_reference))
