"""GRPO: online RL on groups of sampled completions per prompt, with rlft's group-advantage and KL hooks
over TRL's GRPOTrainer (single-turn), or rlft's own loop over multi-turn episodes (`env.name`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from rlft.config.fields import F, AsyncConfig, max_tokens_field, temperature_field, top_p_field
from rlft.config.names import CLIPPED_POLICY_LOSSES, GRPO_BASELINES, POLICY_LOSSES
from rlft.config.stagespec import BASE_HEALTH, ONLINE_METRICS, TRAIN_METRICS, DataLengths, MemoryProfile, StageChecks, \
    StageSpec, fewer_sampled_rows, halve_micro_batch, is_number, kl_control_note, prompt_tokens, reference_held, \
    shorter_sequences, trl_options

# TRL's GRPOConfig default for vllm_gpu_memory_utilization (rlft passes `trl:` options through unchanged)
TRL_VLLM_GPU_MEMORY_UTILIZATION = 0.3


@dataclass
class StreamMinibatchConfig:
    groups_per_batch: Optional[int] = F(None, "Groups in one training iteration, across all minibatches and substeps: "
                                              "grpo.batch_size (null = grpo.batch_size; another value is "
                                              "refused).", ge=1)
    num_minibatches: Optional[int] = F(None, "Streaming: forward/backward passes per optimizer substep, each on whole "
                                             "groups as soon as they are sampled, with their advantages and KL "
                                             "computed per minibatch; training starts on the first while the rest are "
                                             "sampled. Still on-policy. null = off.", ge=1, le=64)


@dataclass
class GRPOConfig:
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
    loss_fn: str = F("importance_sampling", "Policy-gradient estimator.", choices=list(POLICY_LOSSES))
    clip_range: float = F(0.2, "PPO clip epsilon when loss_fn = ppo.", gt=0, lt=1)
    temperature: float = temperature_field(1.0, "Sampling temperature (0.7-1.0).")
    top_p: float = top_p_field()
    max_tokens: int = max_tokens_field()
    episode_gamma: float = F(1.0, "With env.name: discount per turn of the episode return the group compares (sum_k "
                                  "gamma^k r_k), in [0, 1].", ge=0, le=1)
    stream_minibatch: StreamMinibatchConfig = F(help="Streaming minibatch training (off by "
                                                     "default).", factory=StreamMinibatchConfig)
    async_: AsyncConfig = F(help="Async off-policy training, `grpo.async` (off by default).", factory=AsyncConfig)
    generation_backend: str = F("transformers", "Who samples completions: `transformers` (generate on the training "
                                                "model; CPU, MPS, CUDA) or `vllm` (CUDA only; the `vllm` "
                                                "extra).", choices=["transformers", "vllm"])
    vllm_mode: str = F("colocate", "With generation_backend vllm: `colocate` (vLLM in the training process, sharing "
                                   "the GPU) or `server` (a separate `trl vllm-serve` "
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
    if g("grpo.generation_backend") == "vllm":
        import importlib.util

        if overlap:
            c.error("grpo.generation_backend", "vllm is not built for streaming or async training yet (their sampler "
                    "is a transformers copy of the policy); use generation_backend transformers, or run synchronously")
        if g("hw.device") in ("cpu", "mps"):
            c.error("grpo.generation_backend", f"vLLM needs an NVIDIA GPU; hw.device is {g('hw.device')}. Use "
                    "generation_backend transformers")
        elif importlib.util.find_spec("vllm") is None:
            c.error("grpo.generation_backend", "vLLM is not installed in this environment; install the extra "
                    "(pip install 'rlft[vllm]') or use generation_backend transformers")


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
        return ("GRPO with env.name runs rlft's own episode loop (rlft/trainers/grpo_episodes.py), which does not "
                "read trl: keys; drop it (grpo.* and train.* configure that loop)")
    return None


# TRL loss types that are PPO's clipped surrogate with another average over tokens: they keep what grpo.loss_fn sets
AGGREGATING_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo")


def trl_checks(c: StageChecks) -> None:
    """`trl:` keys that fight what rlft sets from grpo.loss_fn (rlft/stages/grpo/runner.py: a clipped loss sets TRL's
    epsilon = grpo.clip_range; `importance_sampling` sets epsilon 1.0, epsilon_high 1e9, i.e. never clipped) or
    from grpo.generation_backend; TRL's own options read only with another loss_type or vLLM."""
    extra = trl_options(c)
    if not extra:
        return
    loss, clip = c.get("grpo.loss_fn"), c.get("grpo.clip_range")
    clipped = loss in CLIPPED_POLICY_LOSSES
    unclipped = (f"grpo.loss_fn is `{loss}`, which never clips the ratio (rlft sets TRL's epsilon 1.0 and "
                 f"epsilon_high 1e9 for it)")
    if "epsilon" in extra and not clipped:
        c.error("trl.epsilon", f"{unclipped}, and sets TRL's epsilon itself; for a clipped loss set grpo.loss_fn: ppo "
                "and grpo.clip_range instead")
    if "epsilon_high" in extra and not clipped:
        c.error("trl.epsilon_high", f"{unclipped}: trl.epsilon_high would clip it to [0, 1 + {extra['epsilon_high']}], "
                "not DAPO's [1 - eps, 1 + eps_high]; for an asymmetric clip set grpo.loss_fn: ppo with grpo.clip_range "
                "(the low side, e.g. 0.2) and keep trl.epsilon_high (e.g. 0.28)")
    if "delta" in extra and not clipped:
        c.error("trl.delta", f"{unclipped}: trl.delta (two-sided clipping's cap on PPO's clipped ratio) would cap it "
                "at delta instead; set grpo.loss_fn: ppo to use it, or drop it")
    lt = extra.get("loss_type")
    if lt == "cispo" and not clipped:
        c.error("trl.loss_type", f"cispo caps the importance weight at TRL's epsilon_high, and {unclipped}: the cap "
                "would be 1e9; set grpo.loss_fn: ppo and trl.epsilon_high to the cap (ScaleRL's eps_max 5.0)")
    elif lt == "cispo" and "epsilon_high" not in extra:
        c.error("trl.loss_type", f"cispo caps the importance weight at TRL's epsilon_high, which defaults to "
                f"epsilon = grpo.clip_range ({clip}) under grpo.loss_fn: {loss}: a cap below 1; set trl.epsilon_high "
                "to the cap (ScaleRL's eps_max 5.0)")
    elif lt in ("sapo", "vespo"):
        c.error("trl.loss_type", f"{lt} replaces the policy loss that grpo.loss_fn ({loss}) chooses and reads none of "
                f"the clip rlft sets from it, so grpo.loss_fn and grpo.clip_range would be ignored; rlft has no {lt} "
                f"loss: drop it, or keep grpo.loss_fn with a trl.loss_type among {', '.join(AGGREGATING_LOSS_TYPES)} "
                "(how the per-token losses are averaged) or cispo")
    for key in extra:
        own = key.partition("_")[0]
        if own in ("sapo", "vespo") and lt != own:
            c.error(f"trl.{key}", f"read only by trl.loss_type: {own}, and trl.loss_type is "
                    f"{lt or 'unset (TRL default: dapo)'}; drop it")
    if extra.get("importance_sampling_level") == "sequence":
        if not clipped:
            c.error("trl.importance_sampling_level", f"sequence (GSPO) is a clipped objective, and {unclipped}; set "
                    "grpo.loss_fn: ppo with grpo.clip_range at GSPO's scale (its paper: 3e-4, trl.epsilon_high 4e-4)")
        elif is_number(clip) and clip > 0.01:
            c.warning("trl.importance_sampling_level", f"a sequence-level ratio (GSPO: the geometric mean of the "
                      f"tokens' ratios) moves far less than a token's, so grpo.clip_range {clip} barely clips it; "
                      "GSPO's paper clips at 3e-4 (grpo.clip_range) and 4e-4 (trl.epsilon_high)")
    if c.get("grpo.generation_backend") != "vllm":
        for key in extra:
            if key.startswith("vllm_") and key != "vllm_mode":  # vllm_mode: set grpo.vllm_mode (trl_modeled)
                c.error(f"trl.{key}", f"read only when vLLM samples, and grpo.generation_backend is "
                        f"`{c.get('grpo.generation_backend')}`; set grpo.generation_backend: vllm, or drop it")


def file_checks(c: StageChecks) -> None:
    """GRPO samples whole batches of grpo.batch_size prompts (TRL's sampler drops a short last batch): with
    fewer rows than that, the run ends at step 0 having trained nothing."""
    bs, path, cap = c.get("grpo.batch_size"), c.get("data.train"), c.get("data.max_samples")
    if not c.trains or c.get("env.name") or not isinstance(bs, int) or not isinstance(path, str):
        return  # multi-turn GRPO wraps around the data
    from rlft.data.peek import DataError, peek_columns

    if path == "demo":
        from rlft.demo import demo_prompts

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
    from rlft.stages.grpo.runner import eval_every  # pure arithmetic

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
            f"`{g.baseline_mode}`, KL coefficient {g.kl_penalty_coef:g} ({g.kl_penalty_mode})"]


def micro_batch(cfg, world: int) -> int:
    """Completions per training forward/backward on one of `world` processes, as the runner lays them out."""
    from rlft.run import RunError
    from rlft.stages.grpo.runner import grpo_batch_layout  # pure arithmetic; the runner raises RunError

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
        what=f"{g.batch_size} prompts x {g.group_size} completions sampled at once, trained in micro-batches of "
             f"{micro}",
        levers=tuple(levers))


SPEC = StageSpec(
    name="grpo", section="grpo", runner="rlft.stages.grpo.runner:run", order=1,
    section_cls=GRPOConfig, section_help="GRPO stage and rlft's group-advantage / KL hooks.", section_order=6,
    trl_config="trl.trainer.grpo_config:GRPOConfig",
    trl_modeled=(("num_generations", "grpo.group_size"), ("temperature", "grpo.temperature"),
                 ("top_p", "grpo.top_p"), ("max_completion_length", "grpo.max_tokens"),
                 ("beta", "grpo.kl_penalty_coef"), ("epsilon", "grpo.clip_range"),
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
                  "sampler_learner_mismatch"),
    resume_breaking=("grpo.group_size", "grpo.batch_size", "grpo.num_substeps"),
    steps_per_generation=steps_per_generation,
    checks=checks, section_checks=section_checks, file_checks=file_checks, explain=explain, model_card=model_card,
    memory=memory,
)
