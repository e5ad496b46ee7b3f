"""PPO: rlft's own trainer (TRL 1.x has none) with a value head on the policy, GAE, clipped policy and value
losses, a KL penalty in the per-token reward and an adaptive controller; single-turn or multi-turn episodes."""

from __future__ import annotations

import math
from typing import Optional

from rlft.config.fields import F, config_section, AsyncConfig, max_tokens_field, temperature_field, top_p_field
from rlft.config.names import KL_PENALTIES
from rlft.config.stagespec import (BASE_HEALTH, ONLINE_METRICS, PLAIN_REF, TRAIN_METRICS, DataLengths, Logits,
                                   MemoryProfile, StageChecks, StageSpec, fewer_sampled_rows, is_number,
                                   kl_control_note, prompt_tokens, reference_held, shorter_sequences)
from rlft.config.stagespec import Doc, ONE, episodes_to_updates


@config_section
class PPOConfig:
    """`ppo:` PPO's rollouts, updates, critic and KL penalty."""
    batch_size: int = F(16, "Episodes sampled per PPO update (one update = one rollout + ppo_epochs passes).", ge=1)
    mini_batch_size: int = F(4, "Episodes per forward/backward pass; an optimizer step accumulates "
                                "train.gradient_accumulation_steps of them. Must divide batch_size.", ge=1)
    ppo_epochs: int = F(4, "Passes over each batch, in shuffled minibatches (4-8).", ge=1, le=64)
    clip_range: float = F(0.2, "PPO clip epsilon on the probability ratio (0.1-0.3).", gt=0, lt=1)
    clip_ratio_c: Optional[float] = F(None, "Dual-clip PPO (as verl): where the advantage is negative, the loss is "
                                            "also capped at -A x clip_ratio_c (> 1, e.g. 3), so a token whose "
                                            "probability ratio exploded cannot dominate the batch. null = off.", gt=1)
    cliprange_value: float = F(0.2, "Clip of the value prediction around its rollout value, in reward units.", gt=0)
    vf_coef: float = F(0.5, "Value-function loss coefficient.", ge=0)
    critic_warmup: int = F(0, "Updates at the start that train only the value head (verl's critic_warmup, OpenRLHF's "
                              "critic.freezing_steps): episodes are sampled and scored as usual, but the policy "
                              "loss and entropy bonus are off, the policy's weights and their optimizer state are "
                              "left alone and the KL controller holds; they count toward num_episodes and the "
                              "learning-rate schedule. For PPO from a policy that already succeeds (after SFT, "
                              "ORPO), so its first policy updates meet a critic that knows the returns. 0 = off.",
                       ge=0)
    early_stop_kl: Optional[float] = F(None, "Stop an update's passes over its minibatches once the policy has moved "
                                             "this far from the sampling policy: before each optimizer step, the mean "
                                             "approx_kl (0.5 * log-ratio^2 per action token, all processes) of the "
                                             "step's first minibatch is compared with it (Spinning Up's and "
                                             "Stable-Baselines3's target_kl; 0.01-0.05 typical). The skipped steps "
                                             "still advance the learning-rate schedule. null = off (every "
                                             "ppo_epochs pass runs).", gt=0)
    rollback_kl: Optional[float] = F(None, "A trust region on each optimizer step: after a step, the policy's mean "
                                           "approx_kl from the sampling policy (as early_stop_kl measures it, on the "
                                           "next step's first minibatch, or one of the update's minibatches after "
                                           "its last step) is compared with it; past it the step is undone (weights "
                                           "and optimizer moments restored), the update ends there and the learning "
                                           "rate is halved for the rest of the run (kept in checkpoints). For PPO "
                                           "from a policy that already succeeds, where Adam's steps of about the "
                                           "learning rate per weight can break it in one update (0.01-0.02 "
                                           "typical). `rollback` counts the undone steps. null = off.", gt=0)
    value_init: str = F("zero", "The value head's starting bias: `zero`, or `first_batch_mean` = the first "
                                "update's mean discounted return per action token (in scale_returns' units), so "
                                "a critic of a policy that already earns its reward does not start at 0 (a "
                                "resumed run keeps its checkpoint's head).", choices=["zero", "first_batch_mean"])
    scale_returns: bool = F(True, "Divide every reward by the running standard deviation of episode returns (all "
                                  "updates so far) when it is above 1, so the critic fits targets of about unit "
                                  "spread and vf_coef 0.5 works for returns of tens of units (the tool-use "
                                  "examples); a reward whose returns spread less than 1 is left as it is. "
                                  "cliprange_value is in the scaled units.")
    ent_coef: float = F(0.01, "Entropy bonus coefficient (0.001-0.1), on the mean per-token entropy in "
                              "nats.", ge=0, le=1)
    kl_penalty: str = F("kl", "Per-token KL estimate in the reward: kl = log-ratio, abs = |log-ratio|, mse = "
                              "log-ratio^2 / 2, full = exact over the vocabulary.", choices=list(KL_PENALTIES))
    init_kl_coef: float = F(0.05, "Initial KL coefficient (0.01-0.1): each action token's reward gets -kl_coef * "
                                  "kl_t.", ge=0)
    target_kl: float = F(0.1, "Target of the adaptive controller, in nats per token: the batch mean of the per-token "
                              "KL to the reference (not a per-sequence sum).", gt=0)
    adaptive_kl: bool = F(True, "Adapt the KL coefficient toward target_kl (Ziegler et al. 2019).")
    kl_horizon: Optional[int] = F(None, "Horizon of the adaptive KL controller, in updates: a KL 20% or more off "
                                        "target moves the coefficient by up to 22% per horizon. null = a tenth of the "
                                        "run's updates, so it acts within the run.", ge=1)
    advantage_norm: str = F("whiten", "How GAE's advantages are normalised over the update's batch (all "
                                      "processes): `whiten` = minus the mean, divided by the standard deviation; "
                                      "`center` = minus the mean only; `none` = the raw advantages. Use `center` or "
                                      "`none` for PPO from a policy that already succeeds (after SFT, ORPO), whose "
                                      "nearly constant returns leave only noise, which whitening would scale to "
                                      "unit size.", choices=["whiten", "center", "none"])
    value_model: str = F("shared", "Critic: `shared` = a linear value head on the policy's last hidden state (same "
                                   "backbone); `separate` = the head on a second copy of the model with its own "
                                   "LoRA (or all its weights without LoRA), so the value loss never moves the "
                                   "policy's weights. Use `separate` for PPO from a policy that already succeeds, "
                                   "at the cost of a second model's weights and a second forward pass.",
                         choices=["shared", "separate"])
    gamma: float = F(0.99, "Discount factor per token, in [0, 1].", ge=0, le=1)
    lam: float = F(0.95, "GAE lambda, in [0, 1].", ge=0, le=1)
    num_episodes: int = F(50000, "Total episodes to train on (10K-50K); updates = num_episodes / batch_size.", ge=1)
    log_interval: int = F(100, "Log metrics every N episodes (rounded to whole updates, at least 1).", ge=1)
    eval_interval: int = F(1000, "Log eval_reward (one fresh sample per data.eval_prompts prompt, fixed seed) every N "
                                 "episodes (rounded to whole updates).", ge=1)
    save_interval: int = F(2000, "Write a resumable checkpoint every N episodes (rounded to whole updates).", ge=1)
    temperature: float = temperature_field(1.0, "Sampling temperature; the learner's log-probs use the same "
                                                "temperature.")
    top_p: float = top_p_field()
    max_tokens: int = max_tokens_field()
    mask_truncated: bool = F(False, "Completions that reach ppo.max_tokens without an EOS give no gradient (policy, "
                                    "value and entropy terms; DAPO's overlong filtering, as grpo.mask_truncated). "
                                    "With env.name an episode with any turn cut so is left out of the loss whole; "
                                    "frac_masked_truncated logs the share.")
    async_: AsyncConfig = F(help="Async off-policy training, `ppo.async` (off by default): a sampler copy of the "
                                 "policy samples the next updates' episodes while the learner "
                                 "trains.", factory=AsyncConfig)


def section_checks(c: StageChecks) -> None:
    pb, pm = c.get("ppo.batch_size"), c.get("ppo.mini_batch_size")
    if isinstance(pb, int) and isinstance(pm, int) and pm and pb % pm:
        c.error("ppo.mini_batch_size", f"ppo.mini_batch_size ({pm}) must divide ppo.batch_size ({pb})")


def checks(c: StageChecks) -> None:
    g = c.get
    pb, pm, ga = g("ppo.batch_size"), g("ppo.mini_batch_size"), g("train.gradient_accumulation_steps")
    if isinstance(pb, int) and isinstance(pm, int) and pm and not pb % pm and isinstance(ga, int):
        step = pm * ga
        if step < pb and pb % step:
            c.error("train.gradient_accumulation_steps", f"one PPO optimizer step covers ppo.mini_batch_size x "
                    f"train.gradient_accumulation_steps = {step} episodes, which must divide ppo.batch_size ({pb})")
    nproc = g("hw.num_processes")
    if isinstance(nproc, int) and nproc > 1 and isinstance(pb, int) and isinstance(pm, int) \
            and (pb % nproc or pm % nproc):
        c.error("hw.num_processes", f"ppo.batch_size ({pb}) and ppo.mini_batch_size ({pm}) must be divisible by "
                f"hw.num_processes ({nproc}): each process takes an equal share of both")
    if isinstance(g("train.max_steps"), int) and g("train.max_steps") > 0:
        c.warning("train.max_steps", "has no effect on PPO, which counts episodes: set ppo.num_episodes "
                  "(updates = num_episodes / ppo.batch_size)")
    warm = g("ppo.critic_warmup")
    if isinstance(warm, int) and warm > 0:
        ne = g("ppo.num_episodes")
        if isinstance(ne, int) and isinstance(pb, int) and pb > 0 and warm >= -(-ne // pb):
            c.error("ppo.critic_warmup", f"ppo.critic_warmup ({warm}) must be below the run's "
                    f"{-(-ne // pb)} update(s) (ppo.num_episodes / ppo.batch_size), or the policy is never trained")
        if is_number(g("ppo.vf_coef")) and g("ppo.vf_coef") == 0:
            c.warning("ppo.critic_warmup", "with ppo.vf_coef 0 the warm-up updates train nothing")
    if g("ppo.value_model") == "separate" and g("hw.distributed_strategy") == "fsdp":
        c.error("ppo.value_model", "`separate` (a critic model of its own) is not built for "
                "hw.distributed_strategy fsdp (sharding and saving a second model); use `shared` or --hw ddp")
    if is_number(g("ppo.rollback_kl")) and g("hw.distributed_strategy") == "fsdp":
        c.error("ppo.rollback_kl", "undoing a step is not built for hw.distributed_strategy fsdp (sharded weights "
                "and optimizer state); use ppo.early_stop_kl, or --hw ddp")
    if g("hw.distributed_strategy") == "deepspeed":
        c.error("hw.distributed_strategy", "PPO runs single-process, under ddp or under fsdp; `deepspeed` is not "
                "supported (generation and the value head under ZeRO-3 are not built); use --hw fsdp")
    if is_number(g("ppo.init_kl_coef")) and g("ppo.init_kl_coef") > 0 and g("model.ref") in (None, "none", ""):
        c.error("ppo.init_kl_coef", "ppo.init_kl_coef > 0 needs a reference model: set model.ref to `base` (the model "
                "without the adapter) or a checkpoint path")


def total_updates(cfg) -> int:
    return -(-cfg.ppo.num_episodes // cfg.ppo.batch_size)


def explain(cfg) -> list[str]:
    p = cfg.ppo
    kl = kl_control_note("ppo", p.init_kl_coef, p.target_kl, p.adaptive_kl, p.kl_horizon, total_updates(cfg),
                         "updates")
    return [kl] if kl else []


def schedule(cfg) -> str:
    """PPO counts episodes: how num_episodes and the *_interval keys become updates and optimizer steps."""
    p, ga = cfg.ppo, cfg.train.gradient_accumulation_steps
    updates = total_updates(cfg)
    conv = "; ".join(f"{name} {getattr(p, name)} episodes = every "
                     f"{episodes_to_updates(getattr(p, name), p.batch_size)} "
                     f"update(s)" for name in ("log_interval", "eval_interval", "save_interval"))
    per_epoch = p.batch_size // p.mini_batch_size
    per_step = max(1, min(ga, per_epoch))
    steps = p.ppo_epochs * -(-per_epoch // per_step)
    return (f"# ppo schedule: {p.num_episodes} episodes / batch_size {p.batch_size} = {updates} updates (a metrics "
            f"and checkpoint step is one update); {conv}; each update = {p.ppo_epochs} epoch(s) x {per_epoch} "
            f"minibatch(es) of {p.mini_batch_size} episodes, an optimizer step every {per_step} minibatch(es) = "
            f"{steps} optimizer steps per update, {steps * updates} in all (the learning-rate schedule's length)")


def memory(cfg, world: int, data: DataLengths | None = None) -> MemoryProfile:
    """rlft's PPO: an update's episodes sampled at once, scored in one no-grad pass (behaviour and reference
    log-probs, values from the hidden states), trained in minibatches with the whole logits (fp32 log_softmax
    of the scored positions, and entropy's log_softmax and exp)."""
    p, t = cfg.ppo, cfg.train
    prompt = prompt_tokens(cfg, p.max_tokens, data)
    rows = max(1, p.batch_size // world)
    mini = max(1, min(p.mini_batch_size // world, rows))
    ref_used = p.init_kl_coef > 0 or cfg.model.ref not in PLAIN_REF
    copies = 2 + (2 if ref_used else 0) + (2 if p.kl_penalty == "full" and ref_used else 0)
    half = p.mini_batch_size // 2
    levers = []
    if half >= 1 and p.batch_size % half == 0 and half % world == 0:
        levers.append(("smaller PPO minibatch (more accumulation steps)",
                       {"ppo.mini_batch_size": half,
                        "train.gradient_accumulation_steps": t.gradient_accumulation_steps * 2}))
    # each process takes an equal share of whole minibatches
    levers += fewer_sampled_rows("ppo.batch_size", p.batch_size, math.lcm(p.mini_batch_size, world))
    levers += shorter_sequences(cfg, p.max_tokens)
    return MemoryProfile(
        mini, prompt + p.max_tokens, p.max_tokens, rows, prompt, p.max_tokens,
        full_logits=Logits(5, p.max_tokens, "PPO loss: "),
        scoring=Logits(copies, p.max_tokens, "behaviour" + (" and reference" if ref_used else "") + " log-probs: "),
        scoring_hidden_states=True, value_head=True, critic_copy=p.value_model == "separate",
        reference=reference_held(cfg, ref_used, "ppo uses no reference here (KL coefficient 0)", full_copy=False),
        sampler_copy=bool(p.async_.max_steps_off_policy), episodes=bool(cfg.env.name),
        what=f"{rows} episodes per update, minibatches of {mini}", levers=tuple(levers))


# this stage's own (meaning, unit) of shared metric names (rlft/config/metric_docs.py has the rest)
METRIC_MEANINGS: dict[str, Doc] = {
    "loss": ("total PPO loss: policy_loss + `vf_coef`·value_loss − `ent_coef`·entropy, mean over the update's "
             "minibatches", ONE),
    "advantage_mean": ("mean GAE advantage over action tokens after `ppo.advantage_norm` (≈ 0 with `whiten` "
                       "and `center`; the raw mean with `none`)", ONE),
    "advantage_std": ("standard deviation of the GAE advantages over action tokens after `ppo.advantage_norm` "
                      "(≈ 1 with `whiten`; the raw spread with `center` and `none`), mean over processes", ONE),
}

SPEC = StageSpec(
    name="ppo", section="ppo", runner="rlft.stages.ppo.runner:run", order=2,
    section_cls=PPOConfig, section_help="PPO stage.", section_order=5,
    data_columns=("data.prompt_column",),
    samples=True, uses_reference=True, uses_env=True, reloads_rewards=True,
    metrics=("reward", "reward_std", "loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac",
             "value_clipfrac", "explained_variance", "kl_policy_ref", "kl_coef", "advantage_mean", "advantage_std",
             "return_mean",
             "completion_length", "episodes", "ratio", "kl_penalty", "kl_sample_train_v1", "kl_sample_train_v2",
             "value_mean", "return_scale", "critic_warmup", "early_stop", "rollback",
             "frac_steps_undone", *ONLINE_METRICS, *TRAIN_METRICS),
    console=("reward", "value_loss", "kl_policy_ref", "entropy", "clipfrac"),
    health_rules=(*BASE_HEALTH, "kl_policy_ref", "entropy_collapse", "truncated", "all_masked_truncated",
                  "all_steps_undone", "sampler_learner_mismatch"),
    resume_breaking=("ppo.batch_size", "ppo.mini_batch_size", "ppo.value_model"),
    total_steps=total_updates, steps_per_generation=lambda cfg: 1,  # one rollout per update
    checks=checks, section_checks=section_checks, schedule=schedule, explain=explain, memory=memory,
    metric_meanings=METRIC_MEANINGS,
)
