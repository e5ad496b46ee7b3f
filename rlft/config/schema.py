"""The typed schema of an rlft config: the single source of truth for keys, types, defaults,
allowed values and help text. Validation, `show-config --explain` and the docs all read it.

Section and key names follow the source hyperparameter guides verbatim (`lora.lora_alpha`,
`train.per_device_train_batch_size`, `grpo.kl_penalty_coef`, ...). This module imports only the
standard library so that `rlft validate-config` stays fast.
"""

from __future__ import annotations

import keyword
import sys
from dataclasses import MISSING, dataclass, fields, is_dataclass, make_dataclass
from functools import cache
from typing import Any, Optional, Union, get_args, get_origin

from rlft.config.fields import F, config_section
from rlft.config.names import TOO_LONG_MODES
from rlft.config.sampling import SamplingConfig
from rlft.config.stages import DEFAULT_STAGE, HARDWARE, STAGES, sampling_stages, stage_sections  # noqa: F401 - HARDWARE re-exported

SAMPLING_STAGES = sampling_stages()  # stages that generate and score completions (from their StageSpec)


LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@config_section
class ModelConfig:
    """`model:` the model to fine-tune, how it is loaded, and its frozen reference."""
    name_or_path: str = F("tiny", "Model to fine-tune: a local folder, a hub id, or `tiny` (rlft's built-in tiny "
                                  "model).")
    ref: Optional[str] = F(None, "Frozen reference for KL/DPO: `base` = the original base model (the adapter disabled "
                                 "with LoRA), `init` = the model this stage starts from (with model.init_from; the "
                                 "default there), a checkpoint path, or null = none.")
    init_from: Optional[str] = F(None, "Start from an earlier rlft run: its folder (or its final/). Its base model, "
                                       "adapter and tokenizer are loaded; model.name_or_path defaults to that run's "
                                       "base.")
    init_mode: str = F("merge", "With init_from: `merge` = merge the earlier adapter into the weights and train a "
                                "fresh LoRA; `continue` = keep training the same "
                                "adapter.", choices=["merge", "continue"])
    init_config_hash: Optional[str] = F(None, "Set by rlft: sha256 (12 hex) of the init_from run's config.yaml, so a "
                                              "chain of runs can be traced back and a replaced run refused.")
    torch_dtype: str = F("auto", "Weights dtype when loading.", choices=["auto", "float32", "bfloat16", "float16"])
    trust_remote_code: bool = F(False, "Allow model code from the model folder.")
    tiny_init_std: float = F(0.15, "Init std of the built-in tiny model (0.02 leaves LoRA unable to "
                                   "learn).", gt=0, le=2)


@config_section
class LoraConfig:
    """`lora:` the LoRA adapter (or full fine-tuning when disabled)."""
    enabled: bool = F(True, "Train a LoRA adapter (true) or the full model (false).")
    r: int = F(16, "LoRA rank (8-32; 8-16 is the usual range for RL).", ge=1, le=1024)
    lora_alpha: Optional[int] = F(32, "LoRA alpha scaling, usually 2 x r.", ge=1)
    target_modules: list[str] = F(help="Modules to adapt: all attention and MLP "
                                       "projections.", factory=lambda: list(LORA_TARGETS))
    lora_dropout: float = F(0.05, "Dropout on the LoRA path (0.05-0.1).", ge=0, lt=1)
    bias: str = F("none", "Which biases train.", choices=["none", "all", "lora_only"])
    task_type: str = F("CAUSAL_LM", "PEFT task type.", choices=["CAUSAL_LM"])


SCHEDULERS = ["linear", "cosine", "cosine_with_restarts", "polynomial", "constant",
              "constant_with_warmup", "inverse_sqrt", "reduce_lr_on_plateau", "cosine_with_min_lr",
              "warmup_stable_decay"]
OPTIMIZERS = ["adamw_torch", "adamw_torch_fused", "adamw_8bit", "paged_adamw_8bit", "adafactor",
              "sgd", "adamw_bnb_8bit", "paged_adamw_32bit"]


@config_section
class TrainConfig:
    """`train:` optimizer, schedule, precision, logging and checkpoints."""
    learning_rate: float = F(1e-5, "Peak learning rate, or `auto`: 5e-5 x 10 with LoRA x (2000 / hidden_size) ** e "
                                   "(Llama e=0.781, Qwen e=0.0775, hidden size read from the model's config.json) x "
                                   "train.rl_lr_factor.", gt=0, le=1)
    rl_lr_factor: float = F(1.0, "With learning_rate `auto`: the share of the supervised rate used for RL (the guides "
                                 "say 0.5-1.0).", gt=0, le=10)
    lr_batch_reference: Optional[int] = F(None, "Scale the learning rate by sqrt(effective batch / N) (LR ∝ √batch): "
                                                "the rate is taken as tuned for a batch of N; null = no scaling.", ge=1)
    per_device_train_batch_size: int = F(1, "Micro-batch size per device.", ge=1)
    gradient_accumulation_steps: int = F(1, "Micro-batches accumulated per optimizer step.", ge=1)
    num_train_epochs: float = F(1.0, "Passes over the training data (ignored when max_steps > 0).", gt=0)
    max_steps: int = F(-1, "Total optimizer steps; -1 derives them from num_train_epochs.", ge=1, also=[-1])
    lr_scheduler_type: str = F("cosine", "Learning-rate schedule.", choices=SCHEDULERS)
    warmup_ratio: float = F(0.1, "Fraction of steps spent warming up.", ge=0, le=1)
    weight_decay: float = F(0.01, "AdamW weight decay.", ge=0, le=1)
    max_grad_norm: float = F(1.0, "Gradient clipping norm.", gt=0)
    optim: str = F("adamw_torch", "Optimizer name (transformers `optim`).", choices=OPTIMIZERS)
    bf16: bool = F(False, "bfloat16 mixed precision.")
    fp16: bool = F(False, "float16 mixed precision (fallback where bf16 is unsupported).")
    tf32: Optional[bool] = F(None, "TF32 matmuls on Ampere+ GPUs (null = library default).")
    gradient_checkpointing: bool = F(False, "Recompute activations to save memory.")
    max_seq_length: int = F(4096, "Longest sequence (prompt + completion) in tokens; sampling stages fit prompts into "
                                  "it minus the completion budget (data.too_long).", ge=8)
    dataloader_num_workers: int = F(0, "Data-loading worker processes.", ge=0, le=64)
    seed: int = F(42, "Random seed for reproducibility.", ge=0)
    output_dir: Optional[str] = F(None, "Run folder; null = runs/<stage>-<timestamp>.")
    logging_steps: int = F(1, "Log metrics every N optimizer steps.", ge=1)
    save_steps: int = F(100, "Write a resumable checkpoint every N steps.", ge=1)
    save_total_limit: int = F(3, "Rolling checkpoints kept.", ge=1)
    eval_steps: int = F(50, "Evaluate every N steps when data.eval is set.", ge=1)
    best_by: str = F("train_reward", "How summary.json picks the best saved model: `train_reward` (the headline "
                                     "training metric over the steps before each checkpoint) or `eval` (the eval "
                                     "reward of fresh samples of held-out prompts measured at its step: set "
                                     "grpo.eval_every / ppo.eval_interval to a multiple of the save interval).",
                     choices=["train_reward", "eval"])
    report_to: list[str] = F(help="Extra trackers when installed: tensorboard (event files in <run>/tensorboard/), "
                                  "wandb (local files in the run folder).", factory=list)


@config_section
class DataConfig:
    """`data:` the datasets, their columns and how prompts are rendered."""
    train: Optional[str] = F(None, "Training data: jsonl, json, csv, parquet or a saved datasets folder; `demo` = "
                                   "built-in GRPO task.")
    eval: Optional[str] = F(None, "Optional evaluation data (same formats).")
    prompt_column: str = F("prompt", "Column holding the prompt (text or chat messages).")
    chosen_column: str = F("chosen", "Preference stages: the preferred answer column.")
    rejected_column: str = F("rejected", "Preference stages: the dispreferred answer column.")
    system_prompt: Optional[str] = F(None, "System message prepended to plain-text prompts.")
    chat_template: str = F("auto", "Plain-text prompts (and preference answers) through the tokenizer's chat template: "
                                   "auto = when the tokenizer has one, always = required, never = raw text. Message "
                                   "lists are always templated.", choices=["auto", "always", "never"])
    chat_template_kwargs: dict = F(help="Variables for the chat template, passed to every apply_chat_template call "
                                        "(prompts rlft renders, TRL's trainers, episodes, evaluation), e.g. "
                                        "`{enable_thinking: false}` for a template that reads it.", factory=dict)
    strict: bool = F(False, "Reject (instead of skip) empty or identical preference pairs.")
    max_samples: Optional[int] = F(None, "Cap on training rows (null = all).", ge=1)
    too_long: str = F("truncate", "Sampling stages: prompts longer than train.max_seq_length minus the stage's "
                                  "max_tokens (in tokens): `truncate` keeps their last tokens, `drop` skips them (both "
                                  "counted in a warning), `error` stops before the run "
                                  "starts.", choices=list(TOO_LONG_MODES))
    eval_prompts: int = F(16, "Sampling stages, and DPO/ORPO with `rewards:`: prompts sampled from the starting and "
                              "the final policy (same seed) for summary.json's eval.start / eval.end mean reward: the "
                              "first N rows of data.eval, or of data.train without it (0 = no eval).", ge=0)


@config_section
class RewardConfig:
    """One entry of `rewards:`: a reward function, its weight and keyword arguments."""
    fn: str = F(MISSING, "Built-in name, `package.module:function` or `path/to/file.py:function`.")
    weight: float = F(1.0, "Weight in the total reward (negative for penalties).")
    kwargs: dict = F(help="Keyword arguments passed to the function.", factory=dict)
    name: Optional[str] = F(None, "Name used in metrics (default: the function's name).")
    timeout_s: Optional[float] = F(30.0, "Seconds one call (one batch of completions) may run before those completions "
                                         "get no score (counted as errors); null = no limit, called in the main "
                                         "thread.", gt=0)


@config_section
class EvalConfig:
    """`eval:` how every sampling stage samples its evaluation (null keys: the stage's own settings)."""
    samples_per_prompt: Optional[int] = F(None, "Completions sampled per evaluation prompt; null = the stage's own "
                                                "(GRPO: group_size, RS-SFT/AWR: num_samples_per_prompt, PPO: 1, "
                                                "DPO/ORPO: 4). With n > 1 the eval reports mean@n and pass@n.",
                                          ge=1, le=1024)
    greedy: bool = F(False, "Greedy decoding (the most likely token each step) instead of sampling: one completion "
                            "per prompt, so eval.samples_per_prompt must be 1 or null.")
    max_new_tokens: Optional[int] = F(None, "Longest evaluation completion in tokens; null = the stage's own "
                                            "(<stage>.max_tokens; DPO/ORPO: <stage>.eval_max_new_tokens or the "
                                            "longest chosen answer).", ge=1)
    temperature: Optional[float] = F(None, "Evaluation sampling temperature; null = the stage's own (DPO/ORPO: "
                                           "1.0).", gt=0, le=5)
    top_p: Optional[float] = F(None, "Evaluation nucleus threshold; null = the stage's own (DPO/ORPO: "
                                     "1.0).", gt=0, le=1)
    pass_threshold: float = F(1.0, "A prompt passes (pass@n) when at least one of its samples has a total reward "
                                   "(weighted sum of `rewards:`) of at least this.")
    batch_size: Optional[int] = F(None, "Evaluation completions per generate call (whole prompts); null = the "
                                        "stage's own. Which random draws a prompt gets depends on it: set it in a "
                                        "pipeline for identical draws from identical weights (a stage's start equal "
                                        "to the previous stage's end).", ge=1)
    rewards: list[RewardConfig] = F(help="Extra reward functions scored on evaluation samples only (same form as "
                                         "`rewards:`): reported per reward as eval_rewards/<name>, never in the "
                                         "total, the training reward or pass@n.", factory=list)


@config_section
class EnvConfig:
    """`env:` the environment of multi-turn (tool-use) episodes."""
    name: Optional[str] = F(None, "Environment class for multi-turn episodes: built-in `toolsim`, "
                                  "`package.module:Class` or `path/to/file.py:Class` (resolved like reward functions); "
                                  "null = single-turn completions scored by `rewards`.")
    kwargs: dict = F(help="Keyword arguments passed to the environment class (toolsim: variant, steps, forbidden_tools "
                          "and every reward-table value).", factory=dict)
    max_episode_length: int = F(20, "Max turns (tool calls) per episode; the episode ends after this many "
                                    "actions.", ge=1, le=1000)
    step_timeout_s: Optional[float] = F(30.0, "Seconds one env reset/step may run before the episode ends with "
                                              "failure_reward (counted); null = no limit.", gt=0)
    failure_reward: float = F(-5.0, "Step reward (reward units) when the env faults (raises, times out, returns "
                                    "garbage); the episode ends.")
    num_tasks: int = F(64, "Rows when data.train is not set: task ids 0..N-1, passed to reset as {'task_id': i}.", ge=1)


# the most machines a run spans: `--dry-run` and the SLURM script write one launch line per machine
MAX_MACHINES = 4096


@config_section
class HardwareConfig:
    """`hw:` the hardware profile: device, processes, distributed options."""
    name: str = F("cpu", "Hardware profile name.")
    device: str = F("cpu", "Where the model runs.", choices=["cpu", "mps", "cuda", "auto"])
    distributed_strategy: str = F("none", "Multi-process strategy.", choices=["none", "ddp", "fsdp", "deepspeed"])
    num_processes: int = F(1, "Processes (GPUs) per machine.", ge=1, le=1024)
    num_machines: int = F(1, "Machines in a multi-node run.", ge=1, le=MAX_MACHINES)
    machine_rank: int = F(0, "This machine's rank in a multi-node run.", ge=0, le=MAX_MACHINES - 1)
    main_process_ip: Optional[str] = F(None, "Address of rank 0 for multi-node runs.")
    main_process_port: int = F(29500, "Port of rank 0.", ge=1, le=65535)
    rendezvous_timeout_s: int = F(300, "Multi-process: seconds every process (on every machine) has to join the "
                                       "run before rlft exits 3 instead of waiting for ever.", ge=5, le=86400)
    ddp_find_unused_parameters: bool = F(False, "DDP: look for unused parameters (slower; enable if LoRA + frozen "
                                                "layers need it).")
    ddp_bucket_cap_mb: int = F(25, "DDP gradient bucket size in MB.", ge=1)
    fsdp_sharding_strategy: str = F("FULL_SHARD", "FSDP2 sharding: FULL_SHARD frees each gathered layer after its "
                                                  "forward (least memory), SHARD_GRAD_OP keeps it until the backward "
                                                  "(one all-gather fewer per layer).",
                                    choices=["FULL_SHARD", "SHARD_GRAD_OP"])
    fsdp_auto_wrap_policy: str = F("TRANSFORMER_BASED_WRAP", "FSDP wrapping policy.",
                                   choices=["TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP"])
    fsdp_offload_params: bool = F(False, "FSDP: offload parameters to CPU.")
    deepspeed_zero_stage: Optional[int] = F(None, "DeepSpeed ZeRO stage (needs deepspeed installed).", ge=0, le=3)
    cpu_threads: Optional[Union[int, str]] = F(None, "torch CPU threads: a count, `auto` = the cores this process may "
                                                     "run on (os.sched_getaffinity, divided among local processes; "
                                                     "warns when the load average says they are busy), null = torch's "
                                                     "default (1 is fastest for tiny "
                                                     "models).", ge=1, le=512, also=["auto"])
    empty_cache_steps: Optional[int] = F(None, "Free the accelerator cache every N steps (helps on MPS).", ge=1)
    device_memory_gb: Optional[float] = F(None, "Memory of one device in GiB (a card's `GB`, e.g. 40 or 80 for an "
                                                "A100), for `rlft plan`; null = this machine's RAM on cpu/mps, unknown "
                                                "on cuda.", gt=0, le=4096)


# `slurm.time`: sbatch's forms, minutes / MM:SS / H:MM:SS / D-H / D-H:MM / D-H:MM:SS
SLURM_TIME = r"\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d+|\d+-\d+:\d{1,2}|\d+-\d+:\d{1,2}:\d{1,2}"


@config_section
class SlurmConfig:
    """`slurm:` the SLURM batch script that `rlft train --dry-run` writes."""
    nodes: Optional[int] = F(None, "Nodes to allocate (`#SBATCH --nodes`), one task each; null = hw.num_machines, "
                                   "which it must equal when set.", ge=1, le=MAX_MACHINES)
    gpus_per_node: Optional[int] = F(None, "GPUs per node (`#SBATCH --gpus-per-node`); null = hw.num_processes on "
                                           "cuda, none on cpu/mps; 0 = no GPU line.", ge=0, le=1024)
    partition: Optional[str] = F(None, "Partition (`#SBATCH --partition`); null = the cluster's default.")
    time: str = F("04:00:00", "Wall-clock limit (`#SBATCH --time`): minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or "
                              "D-HH:MM:SS.")
    job_name: Optional[str] = F(None, "Job name (`#SBATCH --job-name`); null = the run folder's name.")
    cpus_per_task: Optional[int] = F(None, "CPUs of the one task on each node, shared by its processes "
                                           "(`#SBATCH --cpus-per-task`); null = the cluster's default.", ge=1, le=4096)
    extra: list[str] = F(help="Lines added to the script: `#SBATCH ...` lines after rlft's, any other line (`module "
                              "load ...`, `source .venv/bin/activate`) before the launch.", factory=list)


ACTIONS = ["warn", "stop", "rollback"]


@config_section
class MonitorConfig:
    """`monitor:` health rules and their actions."""
    grad_norm_warn: float = F(5.0, "Gradient norm above this is a warning.", gt=0)
    grad_norm_critical: float = F(10.0, "Gradient norm above this (or NaN) is critical.", gt=0)
    kl_warn: float = F(0.2, "KL to the reference above this is a warning.", gt=0)
    kl_critical: float = F(0.3, "KL to the reference above this is critical.", gt=0)
    kl_window: int = F(3, "The KL rules read the mean of the last this many logged KL values: one batch's estimate "
                          "(k1 over a few hundred tokens) spikes on a single odd sample; 1 = each value alone.", ge=1)
    entropy_critical: float = F(1.0, "Policy entropy below this is critical (PPO/GRPO).", ge=0)
    kl_sample_train_warn: float = F(0.01, "kl_sample_train_v2 above this means sampler and learner disagree.", gt=0)
    ess_warn: float = F(0.1, "AWR: effective sample size (sum w)^2 / (N sum w^2) below this warns: the weights "
                             "collapsed onto a few samples.", ge=0, le=1)
    eval_gap_warn: float = F(0.1, "Sampling stages with periodic eval: training reward up by more than this (reward "
                                  "units, mean of the last 5 steps vs the first 5) while the held-out eval reward "
                                  "gained under a quarter of it warns (reward hacking or overfitting); 0 = off.",
                             ge=0)
    truncated_warn: float = F(0.5, "Sampling stages: a share of completions (episodes: turns) above this that hit "
                                   "the stage's max_tokens without ending (frac_truncated) warns: their endings "
                                   "are cut, so rewards read unfinished answers; 1 = off.", ge=0, le=1)
    on_warning: str = F("warn", "Action for warning-level rules.", choices=ACTIONS)
    on_critical: str = F("stop", "Action for critical rules (NaN loss, exploding grads, KL blow-up).", choices=ACTIONS)
    on_entropy_collapse: str = F("warn", "Action when entropy falls below entropy_critical.", choices=ACTIONS)
    max_rollbacks: int = F(2, "Rollbacks allowed before a run stops.", ge=0)
    rollback_lr_factor: float = F(0.5, "Learning-rate multiplier applied at each rollback.", gt=0, le=1)
    max_reward_failure_fraction: float = F(0.5, "Stop when more than this fraction of completions got no "
                                                "reward.", gt=0, le=1)
    log_completions: int = F(4, "Completions (single completions, not groups) per step written to completions.jsonl; 0 "
                                "= none, -1 = all.", ge=-1)
    reward_hot_reload: bool = F(False, "Before each step, re-import a user reward file that changed on disk (kept only "
                                       "if it imports and scores a probe completion) and apply weight changes from "
                                       "<run>/overrides.yaml; each change bumps reward_version in metrics and "
                                       "completion rows.")
    reward_logs: bool = F(True, "Capture what reward functions print (stdout, stderr, logging) per step and function "
                                "into reward_logs.jsonl, with call times and failures, instead of the console.")


def _config_class():
    """RlftConfig: the shared sections, then each stage's own (from its folder's spec), then the rest."""
    head = [
        ("stage", str, F(DEFAULT_STAGE, "Training stage.", choices=list(STAGES))),
        ("model", ModelConfig, F(help="Model and reference.", factory=ModelConfig)),
        ("lora", LoraConfig, F(help="LoRA adapter.", factory=LoraConfig)),
        ("train", TrainConfig, F(help="Optimizer, schedule, precision, logging and checkpoints.", factory=TrainConfig)),
        ("data", DataConfig, F(help="Datasets and columns.", factory=DataConfig)),
        ("rewards", list[RewardConfig], F(help="Reward functions: a list of {fn, weight, kwargs, "
                                               "name}.", factory=list)),
    ]
    stages = [(s.section, s.section_cls, F(help=s.section_help, factory=s.section_cls)) for s in stage_sections()]
    tail = [
        ("eval", EvalConfig, F(help="How every sampling stage samples its evaluation (null keys: the stage's own "
                                    "settings); one `eval:` in a pipeline's defaults makes the stages' numbers "
                                    "comparable.", factory=EvalConfig)),
        ("sampling", SamplingConfig, F(help="The engine that samples completions on rlft's own sampling paths (hf "
                                            "generate or an in-process vLLM), and its settings.",
                                       factory=SamplingConfig)),
        ("env", EnvConfig, F(help="Environment for multi-turn (tool-use) episodes, used by PPO and "
                                  "GRPO.", factory=EnvConfig)),
        ("hw", HardwareConfig, F(help="Hardware profile: device, processes, distributed "
                                      "options.", factory=HardwareConfig)),
        ("monitor", MonitorConfig, F(help="Health rules and their actions.", factory=MonitorConfig)),
        ("slurm", Optional[SlurmConfig], F(None, "SLURM batch script that `rlft train --dry-run` writes to "
                                                 "<run folder>/launch.sbatch (null = none): one task per node, each "
                                                 "running accelerate launch with its node's rank.")),
        ("trl", dict, F(help="Passthrough of TRL trainer-config options rlft does not model (checked against the "
                             "trainer's config).", factory=dict)),
    ]
    doc = "A whole rlft config: one attribute per section (`cfg.train`, `cfg.grpo`, ...)."
    cls = make_dataclass("RlftConfig", head + stages + tail, namespace={"__doc__": doc}, repr=False, eq=False)
    cls.__module__ = __name__
    return cls


RlftConfig = _config_class()


# --- schema introspection -------------------------------------------------------------------

@dataclass(frozen=True)
class FieldSpec:
    """What validation needs to know about one leaf key."""
    path: str
    type: Any            # int, float, bool, str, list, dict, or a list of dataclasses
    optional: bool
    default: Any
    help: str
    ge: Any = None
    gt: Any = None
    le: Any = None
    lt: Any = None
    choices: Any = None
    item_type: Any = None  # element type for lists
    also: Any = None       # words accepted besides the type (e.g. auto)

    def allowed(self) -> str:
        """Human description of what this key accepts."""
        if self.choices:
            text = "one of " + ", ".join(map(str, self.choices))
        else:
            name = {int: "an integer", float: "a number", bool: "true or false", str: "a string",
                    list: "a list", dict: "a mapping"}.get(self.type, "a list of mappings")
            lo = f">= {self.ge}" if self.ge is not None else (f"> {self.gt}" if self.gt is not None else None)
            hi = f"<= {self.le}" if self.le is not None else (f"< {self.lt}" if self.lt is not None else None)
            if lo and hi and self.ge is not None and self.le is not None:
                text = f"{name} between {self.ge} and {self.le}"
            else:
                text = " ".join([name] + [" and ".join(b for b in (lo, hi) if b)]).strip()
        if self.also:
            text += "".join(f" or {w}" for w in self.also)
        return text + (" or null" if self.optional else "")


@cache  # the same few dozen hints, asked for on every key of every validation and plan
def _unwrap(tp):
    """Return (base type, optional, item type) of an annotation."""
    optional = False
    args = get_args(tp)
    if get_origin(tp) is not None and type(None) in args:
        optional = True
        tp = next(a for a in args if a is not type(None))
    origin = get_origin(tp)
    if origin is list:
        return list, optional, (get_args(tp) or (Any,))[0]
    if origin is dict:
        return dict, optional, None
    return tp, optional, None


@cache
def config_key(name: str) -> str:
    """A field's key in YAML: a Python keyword is spelt with a trailing underscore in the schema (`async_`)."""
    return name[:-1] if name.endswith("_") and keyword.iskeyword(name[:-1]) else name


@cache  # every validation walks every section: resolve its string annotations once per process
def section_fields(cls) -> dict[str, Any]:
    """{YAML key: (dataclass field, type hint)} of one section (shared: read it, do not change it)."""
    hints = type_hints(cls)
    return {config_key(f.name): (f, hints[f.name]) for f in fields(cls)}


def type_hints(cls) -> dict[str, Any]:
    """`typing.get_type_hints(cls)` of a section, each distinct annotation text evaluated once per module:
    get_type_hints compiles every field's text anew (~17 ms for the schema's 200 keys, a tenth of
    `rlft validate-config`), while the sections spell the same few dozen types."""
    out: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        for name, hint in klass.__dict__.get("__annotations__", {}).items():
            if isinstance(hint, str):
                hint = _evaluate(hint, klass.__module__)
            out[name] = type(None) if hint is None else hint
    return out


@cache
def _evaluate(text: str, module: str) -> Any:
    return eval(text, vars(sys.modules[module]))  # noqa: S307 - the schema's own annotations


def leaf_specs(cls=RlftConfig, prefix: str = "") -> dict[str, FieldSpec]:
    """Every leaf key of the schema, by dotted path."""
    out: dict[str, FieldSpec] = {}
    for name, (f, hint) in section_fields(cls).items():
        path = f"{prefix}{name}"
        base, optional, item = _unwrap(hint)
        if is_dataclass(base):
            out.update(leaf_specs(base, path + "."))
            continue
        if f.default is not MISSING:
            default = f.default
        elif f.default_factory is not MISSING:  # type: ignore[misc]
            default = f.default_factory()  # type: ignore[misc]
        else:
            default = MISSING
        m = f.metadata
        out[path] = FieldSpec(path, base, optional, default, m.get("help", ""), m.get("ge"), m.get("gt"),
                              m.get("le"), m.get("lt"), m.get("choices"), item, m.get("also"))
    return out


def section_names(cls=RlftConfig) -> list[str]:
    return [name for name, (_, hint) in section_fields(cls).items() if is_dataclass(_unwrap(hint)[0])]


def defaults_dict(cls=RlftConfig) -> dict:
    """The schema defaults as a nested plain dict."""
    out: dict = {}
    for name, (f, hint) in section_fields(cls).items():
        base, _, _ = _unwrap(hint)
        if is_dataclass(base) and f.default is MISSING:  # an optional section (`slurm`) defaults to null
            out[name] = defaults_dict(base)
        elif f.default is not MISSING:
            out[name] = f.default
        elif f.default_factory is not MISSING:  # type: ignore[misc]
            out[name] = f.default_factory()  # type: ignore[misc]
    return out


def to_dict(obj) -> Any:
    """A config (or a section) as plain nested dicts keyed as in YAML (dataclasses.asdict keeps `async_`)."""
    if is_dataclass(obj) and not isinstance(obj, type):
        return {config_key(f.name): to_dict(getattr(obj, f.name)) for f in fields(obj)}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_dict(v) for v in obj)
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj


def from_dict(cls, data: dict):
    """Build the typed config from a validated nested dict (missing keys take defaults)."""
    kwargs = {}
    for name, (f, hint) in section_fields(cls).items():
        if name not in data:
            continue
        value = data[name]
        base, _, item = _unwrap(hint)
        if is_dataclass(base) and isinstance(value, dict):
            value = from_dict(base, value)
        elif base is list and is_dataclass(item) and isinstance(value, list):
            value = [from_dict(item, v) for v in value]
        elif base is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        kwargs[f.name] = value
    return cls(**kwargs)
