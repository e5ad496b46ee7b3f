"""PPO recipe: causal LM + LoRA with a value head on the same backbone, reward functions, rlft's
own PPO trainer (TRL 1.x has none).

Lifecycle, top to bottom: run folder -> model + tokenizer + value head -> data -> rewards ->
trainer -> train -> final adapter + value_head.safetensors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlft.algos.schedule import ppo_loop_schedule
from rlft.config.compose import Composed
from rlft.rundir.options import RunOptions
from rlft.stages.common.episode_setup import env_setup, policy_with_value_head
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


def ppo_evaluation(cfg: RlftConfig, dataset, tokenizer, suite, completions=None, extra_suite=None):
    """`(policy, step=None) -> {"reward_mean", ...}`: fresh samples per evaluation prompt (`eval:` over PPO's
    defaults: one sample at PPO's sampling settings) through the same code as GRPO's eval, or None when
    data.eval_prompts is 0; with a step the samples go to `completions`."""
    from rlft.rollout import stage_evaluation
    from rlft.stages.common.prompt_data import eval_rows

    rows = eval_rows(cfg, dataset, tokenizer, suite)  # data.eval checked like the training prompts
    return stage_evaluation(cfg, rows, tokenizer, suite, ppo_eval_defaults(cfg), cfg.ppo.batch_size, completions,
                            extra_suite, skip_columns=("prompt", "prompt_id"))


def ppo_eval_defaults(cfg: RlftConfig):
    """PPO's own eval settings (what `eval:` keys left null keep): one sample per prompt, as PPO samples."""
    from rlft.config.eval_sampling import EvalSettings

    p = cfg.ppo
    return EvalSettings(n=1, max_new_tokens=p.max_tokens, temperature=p.temperature, top_p=p.top_p)


def run(cfg: RlftConfig, composed: Composed, opts: RunOptions) -> int:
    import sys

    from rlft.runtime import RunContext, quiet_libraries

    quiet_libraries(opts.verbose)
    from rlft.models.loading import load_policy_tokenizer
    from rlft.stages.common.prompt_data import eval_reward_suite, prepare_prompt_data, reward_suite

    # rewards and data are checked before the run folder exists: a bad input leaves nothing behind
    suite = None  # with an environment the env's step rewards are the rewards
    if not cfg.env.name or cfg.rewards:
        suite = reward_suite(cfg, composed)
    tokenizer = load_policy_tokenizer(cfg)
    env_factory = env_guard = evaluation = None
    train_rows = evals = []
    if cfg.env.name:  # multi-turn episodes: the env writes the prompts and the rewards
        env_factory, env_guard, train_rows, evals = env_setup(cfg, composed)
    else:
        dataset = prepare_prompt_data(cfg, tokenizer, suite)
        train_rows = dataset.to_list()
        evaluation = ppo_evaluation(cfg, dataset, tokenizer, suite,
                                    extra_suite=eval_reward_suite(cfg, composed))
    with RunContext(cfg, composed, opts) as ctx:
        from rlft.trainers.ppo import RlftPPOTrainer

        if evaluation is not None:
            evaluation.completions = ctx.run.eval_completions  # each evaluation's samples

        if suite is not None:
            suite.abort_when(lambda: ctx.interrupt.signal is not None)  # Ctrl-C never waits on a hung reward
        if env_guard is not None:
            env_guard.should_abort = lambda: ctx.interrupt.signal is not None
        wrapped, ref = policy_with_value_head(cfg, cfg.ppo.init_kl_coef)
        if ctx.rank == 0:
            print(ppo_schedule(cfg).lstrip("# "), file=sys.stderr)
        trainer = RlftPPOTrainer(
            model=wrapped,
            args=training_arguments(cfg, str(ctx.run.checkpoints)),
            processing_class=tokenizer,
            cfg=cfg,
            train_rows=train_rows,
            evaluation=evaluation,
            reward_suite=suite,
            callbacks=ctx.callbacks(),
            run=ctx.run,
            eval_out=ctx.eval,
            ref_model=ref.to(wrapped.value_head.weight.device) if ref is not None else None,
            env_factory=env_factory,
            env_guard=env_guard,
            episode_eval_rows=evals,
        )
        return ctx.train(trainer, tokenizer)
