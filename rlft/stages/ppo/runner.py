"""PPO recipe: causal LM + LoRA with a value head on the same backbone, reward functions, rlft's
own PPO trainer (TRL 1.x has none).

Its parts of the run lifecycle (rlft.runtime.lifecycle runs them in order): inputs (rewards, then the env's tasks
and the tokenizer, or the tokenizer, prompts and eval prompts, checked before the run folder) -> model (policy with
a value head + KL reference) -> run folder -> trainer -> eval.start -> train, with the periodic eval (final adapter +
value_head.safetensors) -> eval.end.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlft.algos.schedule import ppo_loop_schedule
from rlft.config.compose import Composed
from rlft.rundir.options import RunOptions
from rlft.runtime.lifecycle import StageInputs, run_stage
from rlft.stages.common.episode_setup import env_setup, policy_with_value_head
from rlft.stages.common.loop_stage import LoopStage
from rlft.stages.ppo.spec import schedule as ppo_schedule

if TYPE_CHECKING:
    from rlft.config.schema import RlftConfig


def training_arguments(cfg: RlftConfig, output_dir: str):
    """transformers TrainingArguments for optimizer, scheduler, precision and saving; PPO's own
    counts (updates, intervals) are the trainer's schedule (rlft.algos.schedule)."""
    from transformers import TrainingArguments

    from rlft.models.hardware import common_training_args

    args = common_training_args(cfg, output_dir)
    args.update(per_device_train_batch_size=cfg.ppo.mini_batch_size, max_steps=-1,
                save_steps=ppo_loop_schedule(cfg).save_every)
    return TrainingArguments(**args)


def ppo_eval_defaults(cfg: RlftConfig):
    """PPO's own eval settings (what `eval:` keys left null keep): one sample per prompt, as PPO samples."""
    from rlft.config.eval_sampling import EvalSettings

    p = cfg.ppo
    return EvalSettings(n=1, max_new_tokens=p.max_tokens, temperature=p.temperature, top_p=p.top_p)


def run(cfg: RlftConfig, composed: Composed, opts: RunOptions) -> int:
    return run_stage(PPOStage(cfg, composed, opts))


class PPOStage(LoopStage):
    """PPO's parts of the run lifecycle (rlft.runtime.lifecycle has the order; rlft.stages.common.loop_stage the
    trainer and the eval parts PPO shares with GRPO over episodes)."""

    def inputs(self) -> StageInputs:
        """Rewards, then the environment's tasks and the tokenizer, or the prompts, eval prompts and tokenizer
        (rlft.stages.common.prompt_data.sampling_inputs): before the run folder, so a bad input leaves nothing
        behind. The evaluation samples fresh completions per evaluation prompt (`eval:` over PPO's defaults: one
        sample at PPO's sampling settings) through the same code as GRPO's eval, or is None when data.eval_prompts
        is 0."""
        from rlft.config.load_plan import load_plan
        from rlft.models.loading import tokenizer
        from rlft.rollout import stage_evaluation
        from rlft.stages.common.prompt_data import reward_suite, sampling_inputs

        cfg = self.cfg
        if cfg.env.name:  # multi-turn episodes: the env writes the prompts and the rewards (its step rewards)
            suite = reward_suite(cfg, self.composed) if cfg.rewards else None
            env_factory, env_guard, train_rows, evals = env_setup(cfg, self.composed)
            plan = load_plan(cfg)
            return StageInputs(tokenizer=tokenizer(plan), train=train_rows, suite=suite, plan=plan,
                               extra=dict(env_factory=env_factory, env_guard=env_guard, episode_eval_rows=evals))
        inputs = sampling_inputs(cfg, self.composed)
        inputs.train = inputs.train.to_list()
        inputs.extra["evaluation"] = stage_evaluation(
            cfg, inputs.eval_rows, inputs.tokenizer, inputs.suite, ppo_eval_defaults(cfg), cfg.ppo.batch_size,
            extra_suite=inputs.eval_suite, skip_columns=("prompt", "prompt_id"))
        return inputs

    def model(self, inputs: StageInputs) -> tuple:
        """(the policy with its value head, the KL reference or None)."""
        cfg = self.cfg
        return policy_with_value_head(cfg, inputs.plan, cfg.ppo.init_kl_coef, cfg.ppo.value_model == "separate")

    def trainer(self, ctx, model: tuple, inputs: StageInputs):
        """The schedule line, then the loop's trainer."""
        import sys

        if ctx.rank == 0:
            print(ppo_schedule(self.cfg).lstrip("# "), file=sys.stderr)
        wrapped, ref = model
        return self.loop_trainer(ctx, wrapped, ref, training_arguments(self.cfg, str(ctx.run.checkpoints)), inputs)
