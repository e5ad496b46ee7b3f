"""What a stage is, as plain data: `StageSpec`, which each stage folder (`rlft/stages/<name>/spec.py`)
fills in once, and `StageChecks`, what its cross-field checks get to read and report with.

Standard library only, so `validate-config` reads every stage without torch. The layers above look a
stage up through `rlft.config.stages.get_spec` instead of comparing stage names:

- `rlft.config.schema` puts `section_cls` into the config under `section`;
- `rlft.config.validate` runs `section_checks` always, `checks` and then `file_checks` for the stage
  being trained;
- `rlft.config.render` adds `explain(cfg)` to `show-config --explain`;
- `rlft.stages.get_runner` imports `runner`; `rlft.config.trl_fields` reads `trl_config`/`trl_modeled`;
  `rlft.config.validate` refuses every `trl:` key where `trl_unread` gives a reason (or `trl_config` is None)
  and runs `trl_checks` on the `trl:` keys that fight the stage's own;
- `rlft.monitor` reads `metrics`, `console`, `health_rules`, `model_card(cfg)` and `report_note`;
- `rlft.runtime` reads `total_steps` and refuses a resume when a `resume_breaking` key changed;
- `rlft.plan` turns `memory(cfg, world, data)`, a `MemoryProfile` (tokens, rows and flags, no bytes), into the
  memory terms of one device, and tries its levers; a stage without it plans as SFT (`sft_profile`). `data`
  is the training data's token lengths (`DataLengths`), or None to plan at the config's limits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from rlft.numeric import is_number  # noqa: F401 - the specs' (they import only config modules)

# Health rules every training stage gets (names of rules in rlft.monitor.health.RULES).
BASE_HEALTH = ("loss_nan", "grad_norm")
TRAIN_METRICS = ("grad_norm", "learning_rate", "epoch")  # the transformers Trainer's own, every stage
PREFERENCE_METRICS = ("loss", "rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins",
                      "logps/chosen", "logps/rejected", "logits/chosen", "logits/rejected")
# GRPO / PPO: each step's sampled batch; generation and reused_generation from rlft.monitor.metrics.generation_of,
# reward_version from monitor.reward_hot_reload (rlft/rewards/reload.py)
ONLINE_METRICS = ("frac_unscored", "frac_truncated", "reward_version", "generation", "reused_generation", "step_time")
PREFERENCE_COLUMNS = ("data.prompt_column", "data.chosen_column", "data.rejected_column")
# RS-SFT / AWR: each round's samples (stages/common/rounds.py, stages/{rs_sft,awr}/decide.py,
# stages/common/sampled_sft.py)
SAMPLED_SFT_METRICS = ("round", "num_sampled", "sampled_reward_mean", "sampled_reward_std", "frac_unscored",
                       "frac_truncated", "sampling/prompts_per_rank")
SFT_TRL_CONFIG = "trl.trainer.sft_config:SFTConfig"   # RS-SFT / AWR train with TRL's SFT config
SFT_TRL_MODELED = (("max_length", "train.max_seq_length"),)


def trl_options(c: "StageChecks") -> dict:
    """The `trl:` passthrough as the user wrote it ({} when unset or not a mapping)."""
    extra = c.get("trl")
    return extra if isinstance(extra, dict) else {}


def sft_trl_checks(c: "StageChecks") -> None:
    """RS-SFT / AWR (a `trl_checks` hook): TRL's packing would train several samples as one sequence."""
    for key in ("packing", "padding_free"):
        if trl_options(c).get(key):
            c.error(f"trl.{key}", f"not supported by stage {c.stage}: its samples are trained one sequence at a time "
                    "(AWR weighs each one); drop it")


@dataclass(frozen=True)
class StageChecks:
    """What a stage's cross-field checks read (the composed config, before typing: values may be of any
    type) and how they report: `error(key, message)` / `warning(key, message)` name the key's layer."""
    stage: str                              # the stage being validated
    hw: str                                 # the hardware profile's name
    get: Callable[[str], Any]               # a dotted key's raw value (None when unset)
    report: Callable[[str, str, str], None]  # (key, message, level)
    limit: Callable[[str], Any]             # the schema's upper bound (`le`) of a key
    set_by_user: Callable[[str], bool]      # the key was set by the user's files or the command line
    for_train: bool = False                 # `rlft train`: a missing input is an error, not a warning
    check_files: bool = True                # files named by the config may be read (data, modules)
    trains: bool = True                     # the config trains (not only samples and scores, as eval does)

    def error(self, key: str, message: str) -> None:
        self.report(key, message, "error")

    def warning(self, key: str, message: str) -> None:
        self.report(key, message, "warning")


def kl_control_note(section: str, coef: float, target: float, adaptive: bool, horizon: int | None,
                    total_steps: int, unit: str) -> str | None:
    """`--explain`'s line on the adaptive KL controller of GRPO and PPO (None when it is off)."""
    if not adaptive or not coef > 0:
        return None
    if horizon is None:
        from rlft.config.kl_horizon import default_horizon  # the trainers' own rule

        horizon, why = default_horizon(total_steps), f"a tenth of the run's {total_steps} {unit}"
    else:
        why = f"{section}.kl_horizon"
    return (f"# KL control: {section} coefficient {coef:g} adapts toward target_kl {target:g} nats per token over a "
            f"horizon of {horizon} {unit} ({why}): at most x{1 + 0.2 / horizon:.4f} per {unit[:-1]}, "
            f"x{(1 + 0.2 / horizon) ** total_steps:.3g} over the run when the KL stays 20% or more off target")


# a metric's documentation (rlft/config/metric_docs.py, a stage's `metric_meanings`) and the units it gives
Doc = tuple[str, str]  # (meaning, unit)
REWARD = "reward units"
NATS_TOKEN = "nats per token"
NATS_SEQ = "nats per sequence"
TOKENS = "tokens"
FRACTION = "fraction 0-1"
SECONDS = "seconds"
COUNT = "count"
RATIO = "ratio"
ONE = "1 (dimensionless)"
LR = "learning-rate units"
COEF = "coefficient (per nat per token)"
INDEX = "index (1-based)"

# one instance per stage, looked up by name: no value equality or 31-field repr to build at every start
@dataclass(frozen=True, eq=False, repr=False)
class StageSpec:
    """One stage as the rest of rlft reads it (each field's comment says what it is)."""
    name: str                               # `--stage` value and the profile `configs/stages/<name>.yaml`
    section: str | None                     # its config section (`grpo:`), None when it has none
    runner: str                             # "module:function" of `run(cfg, composed, opts)`
    order: int = 100                        # place among the `--stage` choices (the guide's order)
    section_cls: type | None = None         # the dataclass of its section (defaults, help, ranges)
    section_help: str = ""                  # one line on the section in `show-config --explain`
    section_order: int = 100                # place of the section in config.yaml
    trl_config: str | None = None           # "module:Class" of the TRL config it builds, None = rlft's own trainer
    trl_modeled: tuple[tuple[str, str], ...] = ()  # (TRL option, rlft key that sets it) beyond the common train.* ones
    # why this config's path reads no `trl:` key at all (None: it reads them); every `trl:` key is then refused
    trl_unread: Callable[[StageChecks], str | None] | None = None
    # `trl:` keys that the stage's own keys override or contradict, refused naming both (after `trl_unread`)
    trl_checks: Callable[[StageChecks], None] | None = None
    data_columns: tuple[str, ...] = ("data.prompt_column",)  # config keys naming the columns data.train must have
    samples: bool = False                   # generates and scores completions (needs `rewards:`; completions.jsonl)
    uses_reference: bool = False            # measures KL or preferences against a frozen model
    uses_env: bool = False                  # can run multi-turn episodes in `env.name`
    reloads_rewards: bool = False           # `monitor.reward_hot_reload` re-imports its reward files per step
    trains_policy: bool = True              # final/ is a policy the next pipeline stage starts from (rm: a scorer)
    total_steps: Callable[[Any], int] | None = None  # steps a run trains, from the typed config (None: train.max_steps)
    steps_per_generation: Callable[[Any], int] | None = None  # optimizer steps that train on one sampled batch
    metrics: tuple[str, ...] = ()           # keys every metrics.jsonl row carries (null when not measured that step)
    # its own (meaning, unit) of a shared metric name it computes its own way (ORPO's per-token logps); the
    # shared meanings: rlft/config/metric_docs.py
    metric_meanings: dict[str, Doc] = field(default_factory=dict)
    console: tuple[str, ...] = ("loss",)    # headline metrics on the console line
    health_rules: tuple[str, ...] = BASE_HEALTH  # rules of rlft.monitor.health.RULES checked on each record
    resume_breaking: tuple[str, ...] = ()   # stage keys whose change makes its checkpoints meaningless
    experimental: bool = False              # wraps an experimental upstream API
    checks: Callable[[StageChecks], None] | None = None          # cross-field checks when this stage trains
    section_checks: Callable[[StageChecks], None] | None = None  # its section's own consistency, always
    file_checks: Callable[[StageChecks], None] | None = None     # checks that read files, once the rest passed
    schedule: Callable[[Any], str] | None = None          # `--explain`'s schedule line, where train.* do not set it
    explain: Callable[[Any], list[str]] | None = None     # `show-config --explain` notes on the typed config
    model_card: Callable[[Any], list[str]] | None = None  # lines of final/README.md on what the stage trained
    report_note: str | None = None          # the report's completions tab when the stage samples nothing
    # what one of `world` devices holds (rlft plan), for the data's lengths (`DataLengths`) or None: the limits
    memory: Callable[[Any, int, "DataLengths | None"], "MemoryProfile"] | None = None

    def modeled(self) -> dict[str, str]:
        return dict(self.trl_modeled)


# How a stage holds its frozen reference (`Reference.held`)
NO_REFERENCE, ADAPTER_REFERENCE, SEPARATE_REFERENCE = "none", "adapter", "copy"
PLAIN_REF = (None, "", "base", "none", "init")  # model.ref values that name no checkpoint of their own

Lever = tuple[str, dict[str, Any]]  # (the change in words, KEY=VALUE overrides)


@dataclass(frozen=True)
class Reference:
    """How a stage holds its frozen reference model, and why, for `rlft plan`."""
    held: str  # NO_REFERENCE, ADAPTER_REFERENCE (the policy with its adapter disabled) or SEPARATE_REFERENCE
    why: str   # in words, for `rlft plan`'s formula column


@dataclass(frozen=True)
class Logits:
    """Logits materialised whole (no fused LM head): rows x sequence x vocabulary, plus `fp32_copies` fp32
    tensors of the `scored` positions per row; `what` heads the formula."""
    fp32_copies: int
    scored: int
    what: str = ""


@dataclass(frozen=True)
class DataLengths:
    """Token lengths of the training data's rows as the run renders them (`rlft.plan.lengths` reads them):
    each row's prompt and, for preference pairs, its longer answer (in `prompts`' order). The profiles cap
    them by the config's limits, as the run truncates: the peak comes from the longest row, since a batch
    pads every row to its longest."""
    prompts: tuple[int, ...]
    answers: tuple[int, ...] = ()

    def prompt(self, budget: int) -> int:
        """The longest prompt, cut to `budget` tokens (data.too_long: truncate; drop keeps shorter ones)."""
        return max(1, min(max(self.prompts), budget))

    def pair(self, max_prompt: int, max_length: int) -> int:
        """The longest prompt + answer, its prompt cut to `max_prompt` (keeping its end) and the whole to
        `max_length`: DPO's and ORPO's truncation."""
        longest = max(min(p, max_prompt) + a for p, a in zip(self.prompts, self.answers))
        return max(2, min(longest, max_length))


def prompt_tokens(cfg: Any, completion: int, data: DataLengths | None) -> int:
    """Prompt tokens of a sampling stage: the data's longest prompt, or train.max_seq_length minus the
    completion budget (`data.too_long` fits every prompt into it)."""
    budget = max(1, cfg.train.max_seq_length - completion)
    return budget if data is None else data.prompt(budget)


@dataclass(frozen=True)
class MemoryProfile:
    """What one device holds at once for a stage, in tokens and rows (`rlft.plan` turns it into bytes)."""
    train_rows: int                  # rows of one training micro-batch
    train_seq: int                   # tokens per training row
    scored: int                      # tokens per row whose log-probs are taken (the completion)
    sample_rows: int = 0             # rows sampled at once (0: the stage samples nothing)
    prompt: int = 0                  # prompt tokens while sampling
    completion: int = 0              # sampled tokens
    full_logits: Logits | None = None   # the training loss's whole logits; None = TRL's fused LM head
    scoring: Logits | None = None       # a no-grad pass over the sampled batch before training (its log-probs)
    scoring_hidden_states: bool = False  # that pass keeps every layer's hidden states (a value head reads them)
    value_head: bool = False         # a critic head trained beside the policy
    critic_copy: bool = False        # PPO's separate critic: a second copy of the model, its own trainable weights
    reference: Reference = Reference(NO_REFERENCE, "no reference model")
    sampler_copy: bool = False       # async/streaming: a copy of the policy samples while the learner trains
    vllm_share: float | None = None  # vLLM samples: its gpu_memory_utilization (None: generate in this process)
    vllm_mode: str = "colocate"      # `colocate` (the share is on this device) or `server`
    episodes: bool = False           # multi-turn episodes against an environment (env.name)
    trl_samples: bool = False        # TRL's trainer samples the training batch (single-turn GRPO): sampling.backend
                                     # reaches only the evaluations
    what: str = ""                   # the batch in words
    levers: tuple[Lever, ...] = ()   # the stage's own knobs that lower the peak, tried by `rlft plan`


def reference_held(cfg: Any, uses: bool, unused: str, full_copy: bool) -> Reference:
    """How the reference is held: `uses` = the stage measures against one in this config (else `unused` says
    why not); `full_copy` = under full fine-tuning it loads a frozen copy of the starting model."""
    ref, lora, m = cfg.model.ref, cfg.lora.enabled, cfg.model
    if not uses:
        return Reference(NO_REFERENCE, unused)
    if ref not in PLAIN_REF:
        return Reference(SEPARATE_REFERENCE, f"model.ref checkpoint {ref}")
    if m.init_from and not (ref == "init" and lora and m.init_mode == "merge") and \
            not (ref == "base" and m.init_mode == "continue"):
        return Reference(SEPARATE_REFERENCE, f"the {ref} model of model.init_from, loaded again")
    if lora:
        return Reference(ADAPTER_REFERENCE, "LoRA: the reference is the policy with its adapter disabled")
    if full_copy:
        return Reference(SEPARATE_REFERENCE, "full fine-tuning: a frozen copy of the starting model")
    return Reference(NO_REFERENCE, "full fine-tuning without a reference copy (rlft measures no KL here)")


def halve_micro_batch(cfg: Any, micro: int, keep_effective: bool = True) -> list[Lever]:
    """Half the rows per forward/backward; `keep_effective` doubles the accumulation to keep the batch."""
    if micro < 2:
        return []
    over: dict[str, Any] = {"train.per_device_train_batch_size": micro // 2}
    if keep_effective:
        over["train.gradient_accumulation_steps"] = cfg.train.gradient_accumulation_steps * 2
    return [("halve the micro-batch", over)]


def fewer_sampled_rows(key: str, size: int, divisor: int = 1) -> list[Lever]:
    """The KV cache and prefill grow with the rows sampled at once; the halved size must stay divisible."""
    return [("sample fewer rows at once", {key: size // 2})] if size >= 2 and (size // 2) % divisor == 0 else []


def shorter_sequences(cfg: Any, completion: int, what: str = "shorter prompts (sequence length)") -> list[Lever]:
    """train.max_seq_length halved, keeping room for `completion` sampled tokens."""
    shorter = max(completion + 8, cfg.train.max_seq_length // 2)
    return [(what, {"train.max_seq_length": shorter})] if shorter < cfg.train.max_seq_length else []


def sft_profile(cfg: Any, sample_rows: int = 0, completion: int = 0, what: str = "",
                levers: tuple[Lever, ...] = (), data: DataLengths | None = None) -> MemoryProfile:
    """Supervised fine-tuning on train.max_seq_length tokens (TRL's SFTTrainer, fused LM head), after sampling
    `sample_rows` completions of `completion` tokens at once when it samples; no reference. With the data's
    lengths a sampling stage trains on its longest prompt + the completion budget."""
    t = cfg.train
    prompt = prompt_tokens(cfg, completion, data) if sample_rows else 0
    seq = prompt + completion if sample_rows and data is not None else t.max_seq_length
    micro = t.per_device_train_batch_size
    return MemoryProfile(
        micro, seq, seq - 1, sample_rows, prompt, completion,
        reference=Reference(NO_REFERENCE, f"{cfg.stage} uses no reference here"),
        what=what or f"SFT micro-batches of {micro} rows of {seq} tokens",
        levers=(*halve_micro_batch(cfg, micro), *levers,
                *shorter_sequences(cfg, completion, "shorter prompts (sequence length)" if sample_rows else
                                   "shorter sequences (train.max_seq_length)")))


def sample_then_sft_profile(cfg: Any, world: int = 1, data: DataLengths | None = None) -> MemoryProfile:
    """RS-SFT and AWR (a `memory` hook): generate whole prompts' samples `<section>.generation_batch_size` at a
    time, then SFT (the section is named after the stage)."""
    s = getattr(cfg, cfg.stage)
    n = s.num_samples_per_prompt
    rows = max(1, s.generation_batch_size // n) * n
    return sft_profile(cfg, rows, s.max_tokens,
                       f"{rows} completions per generate call, SFT micro-batches of "
                       f"{cfg.train.per_device_train_batch_size}",
                       tuple(fewer_sampled_rows(f"{cfg.stage}.generation_batch_size", s.generation_batch_size)),
                       data)


def preference_profile(cfg: Any, section: str, reference: Reference, full_logits: bool = False,
                       data: DataLengths | None = None) -> MemoryProfile:
    """DPO/ORPO: a micro-batch of train.per_device_train_batch_size pairs is twice as many rows (chosen and
    rejected) of `<section>.max_length` tokens (capped by train.max_seq_length), or of the data's longest pair
    within those limits; `full_logits`: the loss takes the whole logits and an fp32 cross-entropy of the
    chosen half instead of TRL's fused LM head."""
    pairs = cfg.train.per_device_train_batch_size
    sec = getattr(cfg, section)
    seq = min(sec.max_length, cfg.train.max_seq_length)
    if data is not None and data.answers:
        seq = data.pair(sec.max_prompt_length, seq)
    levers = [*halve_micro_batch(cfg, pairs)]
    if seq >= 16:
        levers.append(("halve the sequence length", {f"{section}.max_length": seq // 2}))
    return MemoryProfile(2 * pairs, seq, seq - 1, reference=reference,
                         full_logits=Logits(1, seq, f"{section.upper()}: ") if full_logits else None,
                         what=f"{pairs} pairs = {2 * pairs} rows (chosen + rejected) of {seq} tokens",
                         levers=tuple(levers))


def episodes_to_updates(episodes: int, batch_size: int) -> int:
    """An interval in episodes (PPO's *_interval keys) as whole updates of batch_size episodes, at least 1: the
    spec's explanations and the loop's schedule count by it."""
    return max(1, round(episodes / batch_size))
