"""RM recipe: a sequence-classification head on the model (LoRA + the head, or full), prompt/chosen/rejected pairs,
TRL's RewardTrainer (rlft.trainers.reward) + rlft's run lifecycle.

Its parts of the run lifecycle (rlft.runtime.lifecycle runs them in order): inputs (data, TRL settings, tokenizer
and chat template, checked before anything is written) -> model (AutoModelForSequenceClassification, one label) ->
run folder -> trainer -> eval.start -> train -> final/ (merged) -> eval.end. The evaluation is the reward model's
own: pairwise accuracy and mean reward margin on the held-out pairs (data.eval, else the first data.eval_prompts
training pairs).
"""

from __future__ import annotations

import sys

from rlft.config.compose import Composed
from rlft.config.schema import RlftConfig
from rlft.errors import RunError
from rlft.rundir.options import RunOptions
from rlft.runtime.lifecycle import Evaluation, Stage, StageInputs, run_stage

EVAL_PAIRS = 256  # without data.eval: at most this many training pairs measure eval.start / eval.end


def rm_trl_config(cfg: RlftConfig, output_dir: str, composed: Composed | None = None):
    """The one place rlft keys become a trl.RewardConfig; `trl:` passthrough options go last."""
    from trl import RewardConfig

    from rlft.stages.common.preference import eval_args, max_length
    from rlft.stages.common.trl_config import build_trl_config

    r = cfg.rm
    args = dict(max_length=max_length(cfg, r.max_length),
                center_rewards_coefficient=r.center_rewards_coefficient or None)
    args.update(eval_args(cfg))
    args.update(cfg.trl)
    return build_trl_config(RewardConfig, cfg, output_dir, args, composed)


def load_scorer(cfg: RlftConfig):
    """The model with a fresh one-output score head on it (transformers initialises the head; TRL's seed is set
    first so the head is the same on every run of a seed)."""
    from transformers import AutoModelForSequenceClassification, set_seed

    from rlft.config.load_plan import load_plan
    from rlft.models.loading import _load_failure, model_path
    from rlft.models.weights import pretrained

    plan = load_plan(cfg)
    set_seed(cfg.train.seed)
    import torch

    try:  # damaged weights files: one line naming the file
        return pretrained(AutoModelForSequenceClassification, model_path(plan.name, plan.tiny_init_std), num_labels=1,
                          dtype=getattr(torch, plan.dtype), trust_remote_code=plan.trust_remote_code)
    except (OSError, ValueError, KeyError) as exc:
        raise _load_failure(plan.name, exc) from None


def scorer_lora(cfg: RlftConfig, model):
    """The LoRA settings for a sequence classifier: the score head trained whole beside the adapter
    (modules_to_save), so the merged model carries it."""
    from rlft.models.loading import lora_config

    peft = lora_config(cfg, model)
    if peft is not None:
        peft.task_type = "SEQ_CLS"
        peft.modules_to_save = list(dict.fromkeys([*(peft.modules_to_save or []), "score"]))
    return peft


def pairwise_stats(model, dataset, pad_token_id: int, batch_size: int) -> dict:
    """Pairwise accuracy, mean margin and Bradley-Terry loss of `model` on tokenized pairs (chosen_ids,
    rejected_ids), no grad."""
    import torch
    from trl.trainer.reward_trainer import DataCollatorForPreference

    from rlft.algos.pairwise import pairwise_metrics

    collate = DataCollatorForPreference(pad_token_id=pad_token_id)
    chosen, rejected = [], []
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    with torch.no_grad():
        for i in range(0, len(dataset), batch_size):
            rows = [dataset[j] for j in range(i, min(i + batch_size, len(dataset)))]
            batch = collate([{"chosen_ids": r["chosen_ids"], "rejected_ids": r["rejected_ids"]} for r in rows])
            out = model(input_ids=batch["input_ids"].to(device), attention_mask=batch["attention_mask"].to(device))
            c, r = torch.chunk(out.logits.squeeze(-1).float(), 2)
            chosen.append(c.cpu())
            rejected.append(r.cpu())
    model.train(was_training)
    return pairwise_metrics(torch.cat(chosen), torch.cat(rejected))


class PairwiseEval(Evaluation):
    """eval.start / eval.end: the reward model's pairwise accuracy and margin on the held-out pairs."""

    def __init__(self, dataset, pad_token_id: int, batch_size: int, source: str):
        self.dataset, self.pad, self.batch_size, self.source = dataset, pad_token_id, batch_size, source

    def evaluate(self, model, step: int) -> dict:
        stats = pairwise_stats(model, self.dataset, self.pad, self.batch_size)
        return {**{k: round(v, 6) for k, v in stats.items()}, "n": len(self.dataset), "pairs": self.source,
                "step": step}

    def line(self, ctx) -> str | None:
        start, end = ctx.eval.get("start"), ctx.eval.get("end")
        if start is None or end is None:
            return None
        return (f"eval: pairwise accuracy {start['pairwise_accuracy']:.3f} at the start, "
                f"{end['pairwise_accuracy']:.3f} at the end; reward margin {start['reward_margin']:.3f} -> "
                f"{end['reward_margin']:.3f} ({end['n']} pairs of {end['pairs']})")


class RMStage(Stage):
    """RM's parts of the run lifecycle (rlft.runtime.lifecycle has the order)."""

    def inputs(self) -> StageInputs:
        """The pairs, TRL's objections, the tokenizer and the chat template: before anything is written."""
        from rlft.models.loading import load_policy_tokenizer
        from rlft.stages.common.preference import load_preference_data, pairs_as_chat

        cfg = self.cfg
        if cfg.model.init_from:
            raise RunError("model.init_from: stage rm starts from model.name_or_path (a fresh score head); "
                           "set model.init_from=null")
        train_ds, eval_ds = load_preference_data(cfg)
        rm_trl_config(cfg, cfg.train.output_dir or ".", self.composed)  # TRL's objections before the run folder
        tok = load_policy_tokenizer(cfg)
        (train_ds, eval_ds), chat_note = pairs_as_chat(cfg, [train_ds, eval_ds], tok)
        return StageInputs(tokenizer=tok, train=train_ds, eval_rows=eval_ds, extra=dict(chat_note=chat_note))

    def model(self, inputs: StageInputs):
        return load_scorer(self.cfg)

    def trainer(self, ctx, model, inputs: StageInputs):
        from rlft.stages.common.preference import print_start
        from rlft.trainers.reward import RlftRewardTrainer

        cfg, train_ds = self.cfg, inputs.train
        args = rm_trl_config(cfg, str(ctx.run.checkpoints), self.composed)
        print_start(cfg, len(train_ds), cfg.rm.max_length, cfg.rm.max_length, (inputs.extra["chat_note"],))
        trainer = RlftRewardTrainer(model=model, args=args, train_dataset=train_ds, eval_dataset=inputs.eval_rows,
                                    processing_class=inputs.tokenizer, peft_config=scorer_lora(cfg, model),
                                    callbacks=ctx.callbacks,
                                    scoring={"chat": not isinstance(train_ds[0]["prompt"], str),
                                             "max_length": args.max_length})
        if len(trainer.train_dataset) < len(train_ds):
            print(f"rlft: {len(train_ds) - len(trainer.train_dataset)} training pairs longer than "
                  f"{args.max_length} tokens dropped (rm.max_length)", file=sys.stderr)
        return trainer

    def evaluator(self, ctx, trainer, inputs: StageInputs) -> PairwiseEval | None:
        held = trainer.eval_dataset
        if held is not None:
            source = "data.eval"
        else:
            train = trainer.train_dataset
            held, source = train.select(range(min(EVAL_PAIRS, len(train)))), "data.train"
        if len(held) == 0:
            return None
        return PairwiseEval(held, inputs.tokenizer.pad_token_id, self.cfg.train.per_device_train_batch_size, source)


def run(cfg: RlftConfig, composed: Composed, opts: RunOptions) -> int:
    return run_stage(RMStage(cfg, composed, opts))
