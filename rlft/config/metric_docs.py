"""What each metric in metrics.jsonl means, and its unit: documented once, here, beside the StageSpecs that list
the metrics (`StageSpec.metrics`). `python -m rlft.docs` renders them into docs/reference/metrics.md, and
tests/test_docs.py fails when a metric a stage lists has no meaning or unit here.

Standard library only (no torch), like rlft.config.stagespec. A name's entry is looked up (`describe`) in its
stage's own table first (its StageSpec's `metric_meanings`: where a stage computes a metric its own way, e.g.
ORPO's `logps/chosen` is a per-token mean where DPO's is a sum), then in the shared ones: `METRICS` (the names stages
list), `ROW_KEYS` (every row), `CONDITIONAL` (keys some settings add) and `PATTERNS` (names with a part that
varies: `rewards/<name>/mean`). Each entry is (meaning, unit); the meanings say what the code computes (rlft's
trainers and rlft.algos, or TRL's trainer where TRL logs the metric), over the logged step unless they say
otherwise.
"""

from __future__ import annotations

import re

from rlft.config.stagespec import COEF, COUNT, FRACTION, INDEX, LR, NATS_SEQ, NATS_TOKEN, ONE, RATIO, REWARD, \
    SECONDS, TOKENS, Doc

# The sampled stages' batch metrics: GRPO (TRL's GRPOTrainer with rlft's hooks, rlft/trainers/grpo.py; rlft's
# PPO loop over multi-turn episodes, rlft/stages/grpo/episodes.py) and PPO (rlft/trainers/ppo.py).
ONLINE: dict[str, Doc] = {
    "reward": ("mean total reward (the `rewards[]` scores times their weights, summed) of the step's scored "
               "completions; with `env.name`, the mean episode return", REWARD),
    "reward_std": ("standard deviation of that total reward (of the episode return) over the same completions",
                   REWARD),
    "completion_length": ("mean length of the step's sampled completions (the policy's own tokens, tool and "
                          "environment output excluded)", TOKENS),
    "kl_policy_ref": ("KL from the reference model: mean over completion tokens of log π(token) − log π_ref(token) "
                      "under the policy that sampled them (grpo with `kl_penalty_mode: loss`: TRL's k3 estimate "
                      "exp(r) − r − 1, r = log π_ref − log π, from the loss's forward pass)", NATS_TOKEN),
    "kl_coef": ("the KL penalty's coefficient this step (moved toward `target_kl` by the adaptive controller; 0 "
                "when the penalty is off)", COEF),
    "kl_sample_train_v1": ("sampler vs learner mismatch: mean over completion tokens of d = log π_sampler − "
                           "log π_learner (0: the learner scores exactly what the sampler drew)", NATS_TOKEN),
    "kl_sample_train_v2": ("sampler vs learner mismatch: mean over completion tokens of d²/2 (d as in "
                           "`kl_sample_train_v1`); ≥ 0", NATS_TOKEN),
    "frac_unscored": ("share of the sampled completions without a total reward (a weighted reward failed or "
                      "returned None); they take no part in the advantages", FRACTION),
    "frac_truncated": ("share of the sampled completions that reached the stage's `max_tokens` without ending (no "
                       "EOS); with `env.name`, of the sampled turns (grpo: TRL's `completions/clipped_ratio`; "
                       "rs_sft/awr: of the round's samples). High: raise max_tokens or add `overlong_penalty`",
                       FRACTION),
    "reward_version": ("version of the reward functions that scored the step: 1, plus one per accepted "
                       "`monitor.reward_hot_reload` change (ppo: null when hot reload is off)", COUNT),
    "generation": ("which sampled batch the optimizer step trained on, counted from 1 (several steps train on one "
                   "batch with `grpo.num_substeps` × `grpo.ppo_epochs`)", INDEX),
    "reused_generation": ("true when an earlier optimizer step already trained on this sampled batch: its batch "
                          "metrics repeat that step's", "boolean"),
    "step_time": ("wall-clock time of the optimizer step, sampling and scoring included when the step sampled "
                  "(TRL's GRPOTrainer: its training_step calls; ppo: rollout and optimisation of the update)",
                  SECONDS),
}

# TRL's GRPOTrainer (trl/trainer/grpo_trainer.py): clipping and completion statistics
GRPO_BATCH: dict[str, Doc] = {
    "frac_reward_zero_std": ("TRL: share of the step's completions whose group's total rewards all agree "
                             "(standard deviation 0: no advantage)", FRACTION),
    "frac_constant_groups": ("share of the step's prompt groups whose scored completions all got the same total "
                             "reward (or at most one got a score): no learning signal", FRACTION),
    "clip_ratio/low_mean": ("TRL: share of completion tokens whose ratio π/π_old fell below 1 − ε with a negative "
                            "advantage (clipped from below)", FRACTION),
    "clip_ratio/low_min": ("TRL: the lowest per-completion share of tokens clipped from below", FRACTION),
    "clip_ratio/high_mean": ("TRL: share of completion tokens whose ratio π/π_old rose above 1 + ε_high with a "
                             "positive advantage (clipped from above)", FRACTION),
    "clip_ratio/high_max": ("TRL: the highest per-completion share of tokens clipped from above", FRACTION),
    "clip_ratio/region_mean": ("TRL: share of completion tokens clipped from either side", FRACTION),
    "completions/min_length": ("TRL: length of the shortest completion sampled this step", TOKENS),
    "completions/max_length": ("TRL: length of the longest completion sampled this step", TOKENS),
    "completions/clipped_ratio": ("TRL: share of the step's completions cut at `grpo.max_tokens` (not ended by EOS)",
                                  FRACTION),
    "completions/mean_terminated_length": ("TRL: mean length of the completions that ended with EOS (0 when none "
                                           "did)", TOKENS),
    "completions/min_terminated_length": ("TRL: shortest completion that ended with EOS (0 when none did)", TOKENS),
    "completions/max_terminated_length": ("TRL: longest completion that ended with EOS (0 when none did)", TOKENS),
}

# rlft's PPO (rlft/trainers/ppo.py, rlft/algos/ppo.py, rlft/algos/policy_loss.py): means over the update's
# minibatches and `ppo_epochs` for the optimisation metrics
PPO: dict[str, Doc] = {
    "policy_loss": ("clipped surrogate mean over action tokens of max(−A·r, −A·clip(r, 1 ± ε)), r = π/π_old",
                    ONE),
    "value_loss": ("clipped value loss ½·mean max((V − G)², (clip(V, V_old ± ε_v) − G)²) over action tokens, "
                   "G the GAE returns (in rewards divided by `return_scale`)", "squared reward units"),
    "approx_kl": ("the learner's drift from the policy that sampled: ½·mean over action tokens of "
                  "(log π − log π_old)²", NATS_TOKEN),
    "clipfrac": ("share of action tokens where the clipped policy term was the larger (the clip was active)",
                 FRACTION),
    "value_clipfrac": ("share of action tokens where the clipped value term was the larger", FRACTION),
    "explained_variance": ("1 − Var(G − V) / Var(G) over action tokens at sampling: 1 = the critic predicts the "
                           "returns, 0 = no better than a constant (null when the returns do not vary)", ONE),
    "return_mean": ("mean GAE return G = A + V (the critic's targets) over action tokens, before whitening", REWARD),
    "value_mean": ("mean of the critic's values V at sampling over action tokens", REWARD),
    "ratio": ("mean importance ratio π/π_old = exp(log π − log π_old) over action tokens", RATIO),
    "kl_penalty": ("mean over action tokens of the per-token KL estimate in the reward (`ppo.kl_penalty`) between "
                   "the policy and the reference", NATS_TOKEN),
    "return_scale": ("the divisor of every reward: the running standard deviation of episode returns, at least 1 "
                     "(`ppo.scale_returns`)", REWARD),
    "critic_warmup": ("1 on an update that trained only the value head (`ppo.critic_warmup`), 0 after; absent "
                      "when the warm-up is off", ONE),
    "early_stop": ("the share of the update's optimizer steps skipped by `ppo.early_stop_kl` (0 = every pass ran); "
                   "absent when it is off", ONE),
    "rollback": ("1 when the update's last optimizer step took the policy past `ppo.rollback_kl` and was undone "
                 "(the learning rate halved from then on), 0 when every step stayed within it; absent when it is off",
                 COUNT),
    "frac_steps_undone": ("the share of the update's optimizer steps `ppo.rollback_kl` undid: at 1 the update "
                          "trained nothing (the `all_steps_undone` health rule warns); absent when it is off", ONE),
    "episodes": ("episodes trained so far: updates × `ppo.batch_size`", COUNT),
}

# TRL's DPOTrainer (trl/trainer/dpo_trainer.py) and SFTTrainer (trl/trainer/sft_trainer.py)
PREFERENCE: dict[str, Doc] = {
    "rewards/chosen": ("TRL: mean implicit reward of the chosen answers, β·(log π(y_w) − log π_ref(y_w)), log-probs "
                       "summed over the answer's tokens", NATS_SEQ + " × β"),
    "rewards/rejected": ("TRL: mean implicit reward β·(log π(y_l) − log π_ref(y_l)) of the rejected answers",
                         NATS_SEQ + " × β"),
    "rewards/accuracies": ("TRL: share of pairs whose chosen answer's reward exceeds the rejected one's", FRACTION),
    "rewards/margins": ("TRL: mean of chosen minus rejected reward per pair", NATS_SEQ + " × β"),
    "logps/chosen": ("TRL: mean log-probability of the chosen answers under the policy, summed over each answer's "
                     "tokens", NATS_SEQ),
    "logps/rejected": ("TRL: mean log-probability of the rejected answers under the policy, summed over each "
                       "answer's tokens", NATS_SEQ),
    "logits/chosen": ("TRL: the policy's logits averaged over the vocabulary and the chosen answers' tokens",
                      "logit units"),
    "logits/rejected": ("TRL: the policy's logits averaged over the vocabulary and the rejected answers' tokens",
                        "logit units"),
    "mean_token_accuracy": ("TRL: share of the trained answer tokens (dpo: the chosen answers') whose label is the "
                            "model's most likely next token", FRACTION),
    "num_tokens": ("TRL: tokens trained on so far (prompt and answer, padding excluded, all processes)", TOKENS),
}

# RS-SFT and AWR rounds (rlft/stages/common/rounds.py, rlft/stages/common/sampled_sft.py); the round's values ride
# along every row of its training
ROUNDS: dict[str, Doc] = {
    "round": ("the sample-then-train round the row belongs to, counted from 1", INDEX),
    "num_sampled": ("completions sampled this round (`num_samples_per_prompt` per prompt)", COUNT),
    "sampled_reward_mean": ("mean total reward of the round's scored samples", REWARD),
    "sampled_reward_std": ("standard deviation (population) of the round's total rewards", REWARD),
    "sampling/prompts_per_rank": ("the most prompts one process sampled this round (all of them in one process)",
                                  COUNT),
    "kept_fraction": ("share of the round's samples the keep rule (`rs_sft.keep`) kept for training", FRACTION),
    "kept_count": ("samples kept for training this round", COUNT),
    "kept_reward_mean": ("mean total reward of the kept samples", REWARD),
    "weight_mean": ("mean AWR weight w = min(exp(β·Â), `clip_advantage`) of the round's scored samples", ONE),
    "weight_max": ("largest AWR weight of the round's scored samples", ONE),
    "frac_clipped": ("share of the round's scored samples whose weight is at `awr.clip_advantage`", FRACTION),
    "ess": ("effective sample size of the weights, (Σw)² / (N·Σw²): 1 = uniform, 1/N = one sample carries all",
            FRACTION),
    "advantage_std": ("standard deviation (population) of the round's advantages, before normalisation", REWARD),
    "nll": ("unweighted negative log-likelihood of the completion tokens, for comparison with the weighted `loss`",
            NATS_TOKEN),
}

# Every stage (the transformers Trainer's own, or rlft's PPO loop's equivalent)
TRAIN: dict[str, Doc] = {
    "loss": ("the training loss, averaged over the optimizer steps since the previous row", ONE),
    "grad_norm": ("L2 norm of the gradient before clipping at `train.max_grad_norm` (ppo: mean over the update's "
                  "optimizer steps)", ONE),
    "learning_rate": ("the optimizer's learning rate at this step (after warmup and schedule)", LR),
    "epoch": ("passes over data.train so far, fractional (ppo: episodes / training rows)", "epochs"),
    "entropy": ("mean entropy of the policy's next-token distribution over the trained answer or completion "
                "tokens", NATS_TOKEN),
}

METRICS: dict[str, Doc] = {**ONLINE, **GRPO_BATCH, **PPO, **PREFERENCE, **ROUNDS, **TRAIN}

# Keys of every metrics.jsonl row besides the stage's metrics (rlft/monitor/metrics.py)
ROW_KEYS: dict[str, Doc] = {
    "step": ("optimizer steps so far (ppo: updates; rs_sft/awr: counted over all rounds)", COUNT),
    "time": ("wall-clock time the row was written", "unix seconds"),
    "stage": ("the stage that wrote the row (a pipeline's rows name their stage)", "name"),
}

# Names with a varying part: `<name>` is a reward's `name` (rewards[].name) or an episode reward component
PATTERNS: dict[str, Doc] = {
    "rewards/<name>/mean": ("mean (unweighted) score of reward `<name>` over the completions it scored; with "
                            "`env.name`, the mean per episode of that reward component", REWARD),
    "rewards/<name>/std": ("standard deviation of reward `<name>` over the completions it scored", REWARD),
    "rewards/<name>/errors": ("completions reward `<name>` left unscored (raised, timed out or returned None) this "
                              "step, summed over processes; 0 on steps without errors", COUNT),
    "rewards/<name>/judge_requests": ("`llm_judge` reward `<name>`: HTTP requests sent to the judge this step, "
                                      "retries included, summed over processes", COUNT),
    "rewards/<name>/judge_cached": ("`llm_judge` reward `<name>`: completions answered from the reply cache "
                                    "(<run>/judge_cache.jsonl) this step, without a request, summed over processes",
                                    COUNT),
    "rewards/<name>/judge_retries": ("`llm_judge` reward `<name>`: requests tried again this step (after a 429, a "
                                     "5xx, a timeout or a dropped connection), summed over processes", COUNT),
    "eval_reward": ("evaluation row (`grpo.eval_every`, `ppo.eval_interval`): mean total reward of fresh samples on "
                    "the evaluation prompts (mean@n over `eval.samples_per_prompt` samples each)", REWARD),
    "eval_pass_at_k": ("evaluation row: pass@n, share of evaluation prompts with at least one sample whose total "
                       "reward reaches `eval.pass_threshold`", FRACTION),
    "eval_prompt_std": ("evaluation row: standard deviation over the evaluation prompts of each prompt's mean total "
                        "reward (how unevenly the policy does across prompts)", REWARD),
    "eval_rewards/<name>": ("evaluation row: mean score of reward `<name>` on those samples", REWARD),
    "eval_rewards/<name>/errors": ("evaluation row: samples reward `<name>` left unscored (raised, timed out or "
                                   "returned None), left out of the eval means; summary.json's eval parts count them "
                                   "as `reward_failures`", COUNT),
    "eval_success_rate": ("evaluation row with `env.name`: share of evaluation episodes that succeeded", FRACTION),
}

# Keys some settings add to grpo / ppo rows (not in every row)
CONDITIONAL: dict[str, Doc] = {
    # TRL's evaluate on data.eval, every train.eval_steps (the rm stage's names; dpo/orpo log their own with eval_)
    "eval_loss": ("with `data.eval`: TRL's loss on the held-out pairs (rm: the Bradley-Terry loss)", ONE),
    "eval_accuracy": ("rm with `data.eval`: pairwise accuracy on the held-out pairs", FRACTION),
    "eval_margin": ("rm with `data.eval`: mean reward margin r_chosen − r_rejected on the held-out pairs", REWARD),
    "eval_mean_reward": ("rm with `data.eval`: mean score of the held-out answers", REWARD),
    "eval_min_reward": ("rm with `data.eval`: lowest score among the held-out answers (mean over eval batches)",
                        REWARD),
    "eval_max_reward": ("rm with `data.eval`: highest score among the held-out answers (mean over eval batches)",
                        REWARD),
    "eval_num_tokens": ("rm with `data.eval`: training tokens seen when the evaluation ran", TOKENS),
    "eval_runtime": ("with `data.eval`: seconds TRL's evaluation took", SECONDS),
    "eval_samples_per_second": ("with `data.eval`: held-out rows scored per second", "rows per second"),
    "eval_steps_per_second": ("with `data.eval`: evaluation batches per second", "batches per second"),
    "groups_removed": ("grpo with `remove_constant_reward_groups`: prompt groups left out of the loss this step "
                       "(constant rewards)", COUNT),
    "dynamic/tries": ("grpo with `dynamic_sampling`: samplings this step took to find its groups with signal (1 = "
                      "the first sufficed; at most `dynamic_sampling_max_tries`)", COUNT),
    "dynamic/kept_groups": ("grpo with `dynamic_sampling`: groups with non-constant returns (single-turn: rewards) "
                            "the step trains on, over all processes (below `batch_size`: the tries ran out, "
                            "constant groups fill the rest)", COUNT),
    "frac_masked_truncated": ("`mask_truncated`: share of the step's rows left out of the loss because an action "
                              "reached `max_tokens` without ending (single-turn ppo: completions; with `env.name`: "
                              "episodes with any such turn)", FRACTION),
    "clipfrac_lower": ("ppo with `clip_ratio_c` (dual clip): share of action tokens capped at −A·c", FRACTION),
    "episode_return": ("with `env.name`: mean episode return (sum of the turns' rewards)", REWARD),
    "episode_return_std": ("with `env.name`: standard deviation of the episode returns", REWARD),
    "success_rate": ("with `env.name`: share of the step's episodes that succeeded", FRACTION),
    "episode_length": ("with `env.name`: mean turns per episode", "turns"),
    "tool_calls": ("with `env.name`: mean tool calls per episode", COUNT),
    "episodes_truncated": ("with `env.name`: episodes ended by the context budget (`train.max_seq_length`) "
                           "this step", COUNT),
    "episodes_failed": ("with `env.name`: episodes ended by an environment fault this step", COUNT),
    "advantage_abs_mean": ("grpo with `env.name`: mean |advantage| of the step's episodes", REWARD),
    "discounted_return_mean": ("grpo with `env.name`: mean discounted return Σ γ^k r_k (`grpo.episode_gamma`)",
                               REWARD),
    "async/staleness_mean": ("sampling ahead (`async.max_steps_off_policy`): mean training "
                             "iterations between the weights that sampled a trained batch and the learner's (0 = "
                             "on-policy)", "iterations"),
    "async/staleness_max": ("sampling ahead: the largest such staleness this step", "iterations"),
    "async/behaviour_weight_mean": ("sampling ahead, stale batch: mean truncated weight π_learner / π_sampler over "
                                    "completion tokens (decoupled PPO)", RATIO),
    "async/dropped": ("sampling ahead: sampled rows dropped as too stale and sampled again since the previous row",
                      COUNT),
    "async/wait_s": ("sampling ahead: time the learner waited for samples this iteration", SECONDS),
    "async/overlap_frac": ("sampling ahead: share of the sampler's time that ran while the learner computed",
                           FRACTION),
    "sampling/sampling_logp_difference/mean": ("grpo with `generation_backend: vllm` (TRL): mean |log π − log "
                                               "π_vLLM| over the completion tokens, the learner's log-probs before "
                                               "the step against the engine's that sampled them (0 = an exact "
                                               "weight sync; with one optimizer step per generation taken in the "
                                               "loss's own forward pass, per micro-batch)", NATS_TOKEN),
    "sampling/sampling_logp_difference/max": ("grpo with `generation_backend: vllm`: the largest such difference "
                                              "of one token", NATS_TOKEN),
    "sampling/importance_sampling_ratio/min": ("grpo with `generation_backend: vllm`: smallest of TRL's "
                                               "importance weights π / π_vLLM that correct the loss for the "
                                               "engine's mismatch (per sequence in TRL's default "
                                               "`trl.vllm_importance_sampling_mode: sequence_mask`, where a weight "
                                               "outside its caps becomes 0; `token_truncate` clips per token)",
                                               RATIO),
    "sampling/importance_sampling_ratio/mean": ("grpo with `generation_backend: vllm`: mean of those importance "
                                                "weights (1 = the engine samples the learner's policy; like the "
                                                "min and max, per micro-batch and averaged over the step's where "
                                                "the loss's pass computes them)", RATIO),
    "sampling/importance_sampling_ratio/max": ("grpo with `generation_backend: vllm`: largest of those importance "
                                               "weights", RATIO),
    "tis/weight_mean": ("`sampling.tis_cap` (PPO loop): mean truncated importance weight min(π_learner / "
                        "π_sampler, cap) over completion tokens", RATIO),
    "tis/frac_capped": ("`sampling.tis_cap`: share of completion tokens whose π_learner / π_sampler exceeded the cap",
                        FRACTION),
    "time/generation_s": ("sampling ahead: wall-clock time the sampler took for the batch trained on", SECONDS),
    "time/training_s": ("sampling ahead: the learner's compute time this iteration (waiting excluded)", SECONDS),
}


def _pattern(name: str) -> Doc | None:
    for pattern, doc in PATTERNS.items():
        if re.fullmatch(re.escape(pattern).replace(re.escape("<name>"), r"[^/]+"), name):
            return doc
    return None


def describe(name: str, stage: str | None = None) -> Doc | None:
    """(meaning, unit) of metric `name` as stage `stage` logs it; None when it is not documented."""
    from rlft.config.stages import SPECS

    own = SPECS[stage].metric_meanings if stage in SPECS else {}
    for table in (own, METRICS, ROW_KEYS, CONDITIONAL):
        if name in table:
            return table[name]
    return _pattern(name)
