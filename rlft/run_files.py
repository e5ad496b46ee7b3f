"""The names of the files and folders in a run folder, spelled here once: every module that reads or writes a run's
files takes them from here (or from `RunDir`, which joins them to a run's root). Plain strings, no imports, so the
bottom layer (config/) reads them too."""

from __future__ import annotations

CONFIG = "config.yaml"                        # the resolved config, each key with the layer that set it
METRICS = "metrics.jsonl"                     # one record per logged step
COMPLETIONS = "completions.jsonl"             # sampled completions with their scores
EVAL_COMPLETIONS = "eval_completions.jsonl"   # each evaluation's samples of the fixed evaluation prompts
HEALTH = "health.jsonl"                       # every health-rule firing
REWARD_LOGS = "reward_logs.jsonl"             # what each reward function printed or logged, per step
SAMPLES = "samples.jsonl"                     # the sampled-SFT stages' samples
SUMMARY = "summary.json"                      # how the run ended
DISTRIBUTED = "distributed.json"              # the processes of a multi-process run
ROUNDS = "rounds.json"                        # the state of a run that resumes per round
OVERRIDES = "overrides.yaml"                  # reward settings changed while the run trains (hot reload)
EVAL = "eval.jsonl"                           # `rlft eval`'s rows, by default
JUDGE_CACHE = "judge_cache.jsonl"             # the LLM judge's replies, by request
LAUNCH_SBATCH = "launch.sbatch"               # `train --dry-run`'s batch script (a `slurm:` section)
REPORT = "report"                             # `rlft report`'s page
PIPELINE_SUMMARY = "pipeline_summary.json"    # a pipeline folder's summary of its stages
REWARD_MODEL_SCORING = "rlft_reward_model.json"  # beside a reward model's weights: how it scores
CHECKPOINTS = "checkpoints"                   # the folder of rolling checkpoints
FINAL = "final"                               # the final model
RLFT_STATE = "rlft_state.json"                # rlft's part of a checkpoint's state
CHECKPOINT_PREFIX = "checkpoint-"             # checkpoints/checkpoint-<step>
CHECKPOINT_GLOB = CHECKPOINT_PREFIX + "*"


def checkpoint_name(step: int | str) -> str:
    """The folder name of the checkpoint at `step`."""
    return f"{CHECKPOINT_PREFIX}{step}"


def config_at_step(step: int) -> str:
    """The name config.yaml is kept under when a resume at `step` writes a new one."""
    return f"config.step-{step}.yaml"
