"""GRPO recipe: tiny-to-large causal LM, LoRA, reward functions, TRL's GRPOTrainer + rlft's hooks.

Its parts of the run lifecycle (rlft.runtime.lifecycle runs them in order): inputs (TRL settings, rewards, tokenizer,
prompts and eval prompts, checked before the run folder) -> model (policy + KL reference) -> run folder -> trainer ->
eval.start -> train, with the periodic eval (final adapter) -> eval.end. With `env.name` set: the multi-turn recipe
(episodes.py).
"""

from __future__ import annotations

from rlft import world
from rlft.config.compose import Composed
from rlft.config.schema import RlftConfig
from rlft.errors import RunError
from rlft.rundir.options import RunOptions
from rlft.runtime.lifecycle import CallEvaluator, Stage, StageInputs, run_stage
from rlft.stages.common.prompt_data import sampling_inputs
from rlft.stages.grpo.layout import eval_every, grpo_batch_layout  # noqa: F401 - re-exported


# rlft's baseline -> TRL's scale_rewards (TRL's advantages are replaced by rlft's; this keeps its logging in step)
TRL_SCALE_REWARDS = {"group_mean_std": "group", "group_mean_batch_std": "batch"}
# grpo.loss_agg -> TRL's loss_type for PPO's clipped surrogate and the unclipped ratio (dapo: TRL's default)
TRL_LOSS_TYPE = {"token_mean": "dapo", "seq_mean_token_mean": "grpo", "seq_mean_token_sum_norm": "dr_grpo"}


def trl_loss_args(s) -> dict:
    """TRL GRPOConfig options computing the loss that `rlft.algos.grpo_policy_loss(s, ...)` computes (LossSettings
    `s`; tests/test_grpo_loss_menu.py holds the two equal, loss and gradients)."""
    args = dict(importance_sampling_level=s.is_level, loss_type=TRL_LOSS_TYPE[s.loss_agg])
    if s.loss_fn == "cispo":  # TRL caps the weight at epsilon_high itself, rlft at 1 + clip_high
        args.update(loss_type="cispo", epsilon=s.clip_low, epsilon_high=1.0 + s.high)
    elif s.loss_fn == "ppo":  # TRL's delta caps the ratio as dual-clip caps the loss (clip_ratio_c > 1 + clip_high)
        args.update(epsilon=s.clip_low, epsilon_high=s.high, delta=s.clip_ratio_c)
    else:  # ratio * advantage, never clipped: the ratio's range left open
        args.update(epsilon=1.0, epsilon_high=1e9)
    return args


def grpo_trl_config(cfg: RlftConfig, output_dir: str, num_processes: int = 1, composed: Composed | None = None):
    """The one place rlft keys become a trl.GRPOConfig; `trl:` passthrough options go last."""
    from trl import GRPOConfig

    from rlft.algos import loss_settings
    from rlft.stages.common.trl_config import build_trl_config

    g = cfg.grpo
    args = grpo_batch_layout(cfg, num_processes)
    args.update(
        num_iterations=g.ppo_epochs,
        temperature=g.temperature,
        top_p=g.top_p,
        max_completion_length=g.max_tokens,
        beta=g.kl_penalty_coef if g.kl_penalty_mode == "loss" else 0.0,
        scale_rewards=TRL_SCALE_REWARDS.get(g.baseline_mode, "none"),  # only TRL's own logging
        shuffle_dataset=True,
        log_completions=False,
        reward_weights=[r.weight for r in cfg.rewards],
    )
    if g.generation_backend == "vllm":  # TRL's own vLLM path, LoRA weights synced to vLLM every step
        args.update(use_vllm=True, vllm_mode=g.vllm_mode)
    args.update(trl_loss_args(loss_settings(g)), mask_truncated_completions=g.mask_truncated)
    args.update(cfg.trl)
    return build_trl_config(GRPOConfig, cfg, output_dir, args, composed)


TRL_EXTRA_KWARGS = {"trainer_state", "log_extra", "log_metric", "environments", "completion_ids"}


def trl_reward_funcs(suite):
    """One TRL reward callable per rlft reward (TRL takes their names and count); failures become None
    (TRL's 'no score'). RlftGRPOTrainer scores through the suite itself (rlft.rollout.score_texts), so
    these run only if TRL calls them directly."""
    from rlft.data.messages import as_text
    from rlft.trainers.grpo import NOT_REWARD_COLUMNS

    funcs = []
    for safe in suite.rewards:
        def fn(prompts, completions, _safe=safe, **kwargs):
            columns = {k: v for k, v in kwargs.items() if k not in TRL_EXTRA_KWARGS and k not in NOT_REWARD_COLUMNS}
            return _safe([as_text(p) for p in prompts], [as_text(c) for c in completions], **columns)
        fn.__name__ = safe.name
        funcs.append(fn)
    return funcs


def run(cfg: RlftConfig, composed: Composed, opts: RunOptions) -> int:
    if cfg.env.name:  # multi-turn episodes with per-step rewards: rlft's episode GRPO (TRL has none)
        from rlft.stages.grpo import episodes as grpo_episodes

        return grpo_episodes.run(cfg, composed, opts)
    return run_stage(GRPOStage(cfg, composed, opts))


class GRPOStage(Stage):
    """Single-turn GRPO's parts of the run lifecycle (rlft.runtime.lifecycle has the order)."""

    def inputs(self) -> StageInputs:
        """TRL's objections to the settings, rewards, tokenizer, prompts and eval prompts: before the run folder, so a
        bad input leaves nothing behind (fix the config, rerun as is)."""
        cfg = self.cfg
        grpo_trl_config(cfg, cfg.train.output_dir or ".", world.world_size(), self.composed)
        inputs = sampling_inputs(cfg, self.composed)
        if len(inputs.train) < cfg.grpo.batch_size:  # data.too_long=drop can leave fewer rows than validate saw
            raise RunError(f"grpo.batch_size is {cfg.grpo.batch_size} prompts per iteration, but data.train has "
                           f"{len(inputs.train)} usable rows (after data.too_long={cfg.data.too_long}): GRPO samples "
                           f"whole batches only, so no step would ever run; lower grpo.batch_size or add data")
        return inputs

    def model(self, inputs: StageInputs) -> tuple:
        """(the policy, its LoRA settings, the KL reference or None) from the config's load plan."""
        from rlft.models.loading import peft_config, policy, reference

        model = policy(inputs.plan)
        lora = peft_config(inputs.plan, model)
        return model, lora, reference(inputs.plan) if self.cfg.grpo.kl_penalty_coef > 0 else None

    def trainer(self, ctx, model: tuple, inputs: StageInputs):
        """The trainer: synchronous, streaming or asynchronous."""
        cfg, suite = self.cfg, inputs.suite
        policy, lora, ref = model
        suite.abort_when(ctx.interrupt.requested)  # Ctrl-C never waits on a hung reward
        trainer_class, reward_funcs = grpo_trainer_class(cfg), trl_reward_funcs(suite)
        return trainer_class(
            model=policy,
            reward_funcs=reward_funcs,
            args=grpo_trl_config(cfg, str(ctx.run.checkpoints), ctx.num_processes, self.composed),
            train_dataset=inputs.train,
            processing_class=inputs.tokenizer,
            peft_config=lora,
            callbacks=ctx.callbacks,
            cfg=cfg,
            run=ctx.run,
            reward_suite=suite,
            ref_model_for_kl=ref,
        )

    def evaluator(self, ctx, trainer, inputs: StageInputs) -> CallEvaluator | None:
        """Fresh samples of the evaluation rows, every eval_steps too; eval.start saved in each checkpoint's rlft
        state, for --resume."""
        evaluation = grpo_evaluation(self.cfg, inputs.eval_rows, inputs.tokenizer, inputs.suite,
                                     ctx.run.eval_completions, inputs.eval_suite)
        if evaluation is None:
            return None
        keep = lambda result: setattr(trainer, "eval_start", result)  # noqa: E731 - saved in its checkpoints
        return CallEvaluator(evaluation, eval_every(self.cfg), keep=keep)


def grpo_trainer_class(cfg: RlftConfig):
    """The trainer: sampling ahead of the learner when grpo.stream_minibatch or grpo.async asks for it, TRL's
    synchronous loop otherwise."""
    g = cfg.grpo
    if g.stream_minibatch.num_minibatches is None and g.async_.max_steps_off_policy is None:
        from rlft.trainers.grpo import RlftGRPOTrainer

        return RlftGRPOTrainer
    from rlft.trainers.grpo_async import AsyncGRPOTrainer

    return AsyncGRPOTrainer


def grpo_evaluation(cfg: RlftConfig, rows: list[dict], tokenizer, suite, completions=None, extra_suite=None):
    """`(model, step=None) -> {"reward_mean", ...}` on the evaluation rows (`eval:` over GRPO's defaults: group_size
    samples each at GRPO's sampling settings), or None when there are none (data.eval_prompts 0). With a step,
    each prompt's first sample goes to `completions` (completions.jsonl, rank 0 writes)."""
    from rlft.config.eval_sampling import EvalSettings
    from rlft.rollout import stage_evaluation

    g = cfg.grpo
    defaults = EvalSettings(n=g.group_size, max_new_tokens=g.max_tokens, temperature=g.temperature, top_p=g.top_p)
    return stage_evaluation(cfg, rows, tokenizer, suite, defaults,
                            g.batch_size * g.group_size,  # what one generation step of training holds
                            completions, extra_suite)
