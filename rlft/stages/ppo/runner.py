"""PPO recipe: causal LM + LoRA with a value head on the same backbone, reward functions, rlft's
own PPO trainer (TRL 1.x has none).

Its parts of the run lifecycle (rlft.runtime.lifecycle runs them in order): rewards, then the env's tasks and the
tokenizer, or the tokenizer, prompts and eval prompts checked (before the run folder) -> policy with a value head
(+ KL reference) -> trainer -> eval.start -> train, with the periodic eval (final adapter + value_head.safetensors)
-> eval.end.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlft.algos.schedule import ppo_loop_schedule
from rlft.config.compose import Composed
from rlft.rundir.options import RunOptions
from rlft.runtime.lifecycle import run_stage
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
    eval parts PPO shares with GRPO over episodes)."""

    def check_inputs(self) -> None:
        """Rewards, then the environment's tasks, or the prompts' and eval prompts' settings, then the tokenizer and
        the prompts themselves: before the run folder, so a bad input leaves nothing behind. The evaluation samples
        fresh completions per evaluation prompt (`eval:` over PPO's defaults: one sample at PPO's sampling settings)
        through the same code as GRPO's eval, or is None when data.eval_prompts is 0."""
        from rlft.config.load_plan import load_plan
        from rlft.models.loading import tokenizer
        from rlft.rollout import stage_evaluation
        from rlft.stages.common.prompt_data import (eval_prompt_set, eval_reward_suite, prepare_prompts,
                                                    prompt_set, reward_suite)

        cfg = self.cfg
        self.suite = None  # with an environment the env's step rewards are the rewards
        if not cfg.env.name or cfg.rewards:
            self.suite = reward_suite(cfg, self.composed)
        self.env_factory = self.env_guard = self.evaluation = None
        self.train_rows = self.evals = []
        if cfg.env.name:  # multi-turn episodes: the env writes the prompts and the rewards
            self.env_factory, self.env_guard, self.train_rows, self.evals = env_setup(cfg, self.composed)
        else:
            train, evals = prompt_set(cfg, self.suite), eval_prompt_set(cfg, self.suite)
            defaults, extra_suite = ppo_eval_defaults(cfg), eval_reward_suite(cfg, self.composed)
        self.plan = load_plan(cfg)  # the models build loads, read once (the init_from run's folder included)
        self.tokenizer = tokenizer(self.plan)
        if cfg.env.name:
            return
        dataset, rows = prepare_prompts(cfg, self.tokenizer, train, evals)
        self.train_rows = dataset.to_list()
        self.evaluation = stage_evaluation(cfg, rows, self.tokenizer, self.suite, defaults, cfg.ppo.batch_size,
                                           extra_suite=extra_suite, skip_columns=("prompt", "prompt_id"))

    def build(self, ctx) -> None:
        """The policy with its value head (and the KL reference), then the interrupt hooks (the first use of the run
        folder: a model that fails to load leaves none behind), the schedule line, then the trainer."""
        import sys

        cfg = self.cfg
        wrapped, ref = policy_with_value_head(cfg, self.plan, cfg.ppo.init_kl_coef, cfg.ppo.value_model == "separate")
        self.interrupt_hooks(ctx)
        if ctx.rank == 0:
            print(ppo_schedule(cfg).lstrip("# "), file=sys.stderr)
        self.loop_trainer(ctx, wrapped, ref, training_arguments(cfg, str(ctx.run.checkpoints)), self.train_rows,
                          env_factory=self.env_factory, episode_eval_rows=self.evals)
