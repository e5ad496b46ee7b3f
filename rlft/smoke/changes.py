"""What a smoke run replaces in a validated config, as one config layer: each change with the value it had,
the value used and why. Everything else (stage, data, rewards, environment, chat-template setting,
reference setting, LoRA targets, loss and advantage settings, pipeline chaining) runs as given.

Sizes are chosen by the keys a stage's section has, never by the stage's name (`SECTION_SIZES`): a section
with `rounds` runs one, one with `num_episodes` runs two updates of its (small) `batch_size`, and so on."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlft.config.compose import Layer

# the layer of stand-ins for what only the target machine can check (rlft.smoke.validate)
UNCHECKED_LAYER = "--smoke (not checkable on this machine; replaced in the smoke run)"

STEPS = 2            # steps (updates) trained: a checkpoint at step 1, then --resume to step 2
TOKENS = 16          # longest sampled completion
SEQ = 256            # longest sequence (prompt + completion)
ROWS = 4             # training rows at least (more when a batch needs them)
EVAL_PROMPTS = 2     # prompts of eval.start / eval.end
MICRO = 2            # micro-batch and accumulation steps at most
SAMPLES = 2          # completions per prompt
ENV_TURNS = 3        # turns per episode at most
KEEP_ALL = -1.0e9    # a reward threshold every scored sample passes

LAYER_NAME = "--smoke (summary.json's smoke block says why)"
EIGHT_BIT = ("adamw_8bit", "paged_adamw_8bit", "adamw_bnb_8bit", "paged_adamw_32bit")  # bitsandbytes: CUDA
PLAIN_REF = (None, "", "base", "none", "init")
TINY_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")  # rlft's tiny model


@dataclass
class Change:
    key: str
    was: Any
    now: Any
    why: str
    kind: str = "size"       # model, hardware, size, monitor, learning rate, run folder
    untested: str = ""       # what of the real run this change leaves untested, in words

    def as_dict(self) -> dict:
        return {"key": self.key, "was": self.was, "now": self.now, "why": self.why}


@dataclass
class ModelChoice:
    """The model a smoke run trains instead of model.name_or_path."""
    name: str                # the real model as the config names it
    path: str                # what the smoke run loads (`tiny`, or the tiny model of its family)
    why: str
    family: bool             # a tiny model of the real family (its tokenizer and chat template)
    marker: dict | None = None

    @property
    def replaced(self) -> bool:
        return self.path != self.name


def choose_model(name: str) -> ModelChoice:
    """The tiny model of `name`'s family when its config.json and tokenizer are on this machine, else rlft's
    built-in tiny model."""
    if name == "tiny":
        return ModelChoice(name, name, "rlft's built-in tiny model, as the config names it", family=False)
    from rlft.models.tiny_family import FamilyError, ensure_family_model, find_model_files

    files, why = find_model_files(name)
    if files is not None:
        try:
            path, marker = ensure_family_model(files)
        except FamilyError as exc:
            why = str(exc)
        else:
            return ModelChoice(name, str(path), (
                f"a random 2-layer, hidden-64 {marker['architecture']} built from the real config.json in "
                f"{marker['where']} (vocabulary {marker['vocab_size']:,}) with the real tokenizer"
                f"{' and chat template' if marker['chat_template'] else ' (it has no chat template)'}"),
                family=True, marker=marker)
    return ModelChoice(name, "tiny", f"the real model is not usable here ({why}): rlft's built-in tiny model; the "
                                     f"real tokenizer and chat template were not tested", family=False)


def _section(cfg) -> tuple[str, dict]:
    from rlft.config.schema import to_dict
    from rlft.config.stages import get_spec

    name = get_spec(cfg.stage).section
    return name, to_dict(getattr(cfg, name)) if name and hasattr(cfg, name) else {}


def _batch(s: dict, new: dict) -> int:
    """Sampled per update: two minibatches where there are minibatches, else one group per optimizer substep
    (and per streamed minibatch), the smallest batch the section's divisibility rules allow."""
    if "mini_batch_size" in new:
        return 2 * new["mini_batch_size"]
    pieces = ((s.get("stream_minibatch") or {}).get("num_minibatches") or 1)
    return min(s["batch_size"], s.get("num_substeps", 1) * pieces)


# key of a stage's section -> (the smoke value from (section as given, smoke values so far), why); in order
SECTION_SIZES: tuple[tuple[str, Callable[[dict, dict], Any], str], ...] = (
    ("group_size", lambda s, n: 2, "the smallest group"),
    ("num_samples_per_prompt", lambda s, n: min(s["num_samples_per_prompt"], SAMPLES), "a few samples per prompt"),
    ("rounds", lambda s, n: 1, "one sample -> train round"),
    ("reward_threshold", lambda s, n: KEEP_ALL, ("a random model rarely scores above the real threshold; each "
                                                 "prompt's samples are kept by the rule as given, so the SFT runs")),
    ("max_tokens", lambda s, n: min(s["max_tokens"], TOKENS), "short completions"),
    ("mini_batch_size", lambda s, n: min(s["mini_batch_size"], MICRO), "small minibatches"),
    ("batch_size", _batch, "a small batch the section's divisibility rules allow"),
    ("num_episodes", lambda s, n: STEPS * n.get("batch_size", s.get("batch_size", 1)), f"{STEPS} updates"),
    ("log_interval", lambda s, n: n.get("batch_size", s.get("batch_size", 1)), "log every update"),
    ("eval_interval", lambda s, n: n.get("batch_size", s.get("batch_size", 1)), "evaluate every update"),
    ("save_interval", lambda s, n: n.get("batch_size", s.get("batch_size", 1)), "a checkpoint every update"),
    ("max_length", lambda s, n: min(s["max_length"], n["_seq"]), "short sequences"),
    ("max_prompt_length", lambda s, n: min(s["max_prompt_length"], n.get("max_length", s.get("max_length", 2)) // 2),
     "short prompts"),
)


class _Changes(list):
    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind

    def add(self, key: str, was: Any, now: Any, why: str, untested: str = "") -> None:
        if was != now:
            self.append(Change(key, was, now, why, self.kind, untested))


def model_changes(cfg, choice: ModelChoice, own_init_from: bool = True) -> list[Change]:
    """The model and what only the real model can load (its earlier runs and reference checkpoints).
    `own_init_from`: model.init_from is the config's own (a pipeline chains its stages itself)."""
    m, out = cfg.model, _Changes("model")
    out.add("model.name_or_path", m.name_or_path, choice.path, choice.why,
            f"the real model's weights (`{m.name_or_path}`)" + ("" if choice.family else
                                                                 ", its tokenizer and chat template"))
    if own_init_from and m.init_from:
        out.add("model.init_from", m.init_from, None, "the earlier run holds the real model's weights: the smoke "
                                                      "run starts from the tiny model",
                "model.init_from (the earlier run's model)")
        if m.ref == "init":
            out.add("model.ref", m.ref, "base", "without model.init_from the starting model is the base")
    if m.ref not in PLAIN_REF:
        out.add("model.ref", m.ref, "base", "the reference checkpoint holds the real model's weights: the tiny model "
                                            "without its adapter instead", "the reference checkpoint")
    if m.torch_dtype in ("bfloat16", "float16"):
        out.add("model.torch_dtype", m.torch_dtype, "float32", "fp32 on the CPU")
    if not choice.family and choice.replaced and cfg.lora.enabled \
            and not set(cfg.lora.target_modules) & set(TINY_MODULES):
        out.add("lora.target_modules", list(cfg.lora.target_modules), list(TINY_MODULES),
                "rlft's tiny model has none of these modules", "the LoRA target modules")
    return out


def hardware_changes(cfg) -> list[Change]:
    """What `rlft train`'s preflight would refuse on a CPU, and what only CUDA runs."""
    hw, t, out = cfg.hw, cfg.train, _Changes("hardware")
    out.add("hw.device", hw.device, "cpu", "a CI runner has no GPU: the run goes to the CPU", f"the {hw.device} device")
    if hw.num_processes > 1 or hw.num_machines > 1 or hw.distributed_strategy != "none":
        procs = hw.num_processes * hw.num_machines
        why = f"one CPU process instead of {procs}"
        untested = f"the distributed path ({procs} processes, {hw.distributed_strategy})"
        out.add("hw.num_processes", hw.num_processes, 1, why, untested)
        out.add("hw.num_machines", hw.num_machines, 1, why, untested)
        out.add("hw.machine_rank", hw.machine_rank, 0, why, untested)
        out.add("hw.distributed_strategy", hw.distributed_strategy, "none", why, untested)
        out.add("hw.deepspeed_zero_stage", hw.deepspeed_zero_stage, None, why, untested)
    out.add("train.bf16", t.bf16, False, "fp32 on the CPU", "bf16 mixed precision")
    out.add("train.fp16", t.fp16, False, "fp32 on the CPU", "fp16 mixed precision")
    out.add("train.tf32", t.tf32, None, "TF32 is a CUDA setting")
    if t.optim in EIGHT_BIT:
        out.add("train.optim", t.optim, "adamw_torch", "bitsandbytes' 8-bit and paged optimizers need CUDA",
                f"the {t.optim} optimizer")
    section, s = _section(cfg)
    if s.get("generation_backend", "transformers") != "transformers":
        out.add(f"{section}.generation_backend", s["generation_backend"], "transformers",
                "vLLM's CPU attention refuses the smoke model's head size of 16",
                "vLLM generation")
    out.add("train.dataloader_num_workers", t.dataloader_num_workers, 0, "a few rows need no loader processes")
    if "wandb" in t.report_to:
        out.add("train.report_to", list(t.report_to), [r for r in t.report_to if r != "wandb"],
                "Weights & Biases needs an account and the network", "Weights & Biases logging")
    return out


def size_changes(cfg) -> list[Change]:
    """A few steps on the first rows, short sequences, every save, log and eval path taken each step."""
    t, d, out = cfg.train, cfg.data, _Changes("size")
    section, s = _section(cfg)
    seq = min(t.max_seq_length, SEQ) if d.too_long == "truncate" else t.max_seq_length
    new: dict = {"_seq": seq}
    for key, rule, why in SECTION_SIZES:
        if key in s and s[key] is not None:
            new[key] = rule(s, new)
            out.add(f"{section}.{key}", s[key], new[key], why, f"{s[key]} rounds (one ran)" if key == "rounds" else "")
    if "num_episodes" not in s:  # a section that counts episodes counts its own steps
        out.add("train.max_steps", t.max_steps, STEPS, f"{STEPS} steps: a checkpoint at step 1, --resume to step 2")
    for key, every, why in (("save_steps", 1, "a checkpoint every step"), ("logging_steps", 1, "log every step"),
                            ("eval_steps", STEPS, "evaluate once, at the last step")):
        out.add(f"train.{key}", getattr(t, key), every, why)
    out.add("train.per_device_train_batch_size", t.per_device_train_batch_size,
            min(t.per_device_train_batch_size, MICRO), "small micro-batches")
    out.add("train.gradient_accumulation_steps", t.gradient_accumulation_steps,
            min(t.gradient_accumulation_steps, MICRO), "little accumulation")
    out.add("train.max_seq_length", t.max_seq_length, seq, "short sequences (kept as given with data.too_long "
                                                           f"{d.too_long}, which a shorter limit would trigger)")
    rows = max(ROWS, 2 * new.get("batch_size", 1))
    out.add("data.max_samples", d.max_samples, min(d.max_samples or rows, rows), "the first rows of the data")
    out.add("data.eval_prompts", d.eval_prompts, min(d.eval_prompts, EVAL_PROMPTS), "the first eval prompts")
    if cfg.env.name:
        out.add("env.max_episode_length", cfg.env.max_episode_length, min(cfg.env.max_episode_length, ENV_TURNS),
                "short episodes")
        if not d.train:
            out.add("env.num_tasks", cfg.env.num_tasks, min(cfg.env.num_tasks, rows), "a few tasks")
    return out


def monitor_changes(cfg) -> list[Change]:
    m, out = cfg.monitor, _Changes("monitor")
    out.add("monitor.log_completions", m.log_completions, -1, "every completion logged, so every score is checked")
    why = "a random model's health numbers mean nothing: the rules are checked and logged, not acted on"
    for key in ("on_warning", "on_critical", "on_entropy_collapse"):
        out.add(f"monitor.{key}", getattr(m, key), "warn", why, "health actions (stop, rollback)")
    return out


def learning_rate_changes(cfg, composed) -> list[Change]:
    """`auto` and lr_batch_reference read the model and the batch, which the smoke run changes: keep the rate
    the real run would use."""
    out = _Changes("learning rate")
    auto = any(_get(layer.data, "train.learning_rate") == "auto" for layer in composed.layers)
    if auto:

        here = composed.layer_of("train.learning_rate") != UNCHECKED_LAYER
        out.add("train.learning_rate", "auto", cfg.train.learning_rate,
                "`auto` as resolved for the real model (the tiny model's size would change it)" if here else
                "`auto` needs the real model's config.json, which is not on this machine: the schema default")
    if cfg.train.lr_batch_reference is not None:
        if not auto:
            out.append(Change("train.learning_rate", cfg.train.learning_rate, cfg.train.learning_rate,
                              "the rate the real batch gives (lr_batch_reference applied once)", "learning rate"))
        out.add("train.lr_batch_reference", cfg.train.lr_batch_reference, None,
                "the rate above already includes it; the smoke batch is smaller")
    return out


def _get(data: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(data, dict):
            return None
        data = data.get(part)
    return data


def smoke_changes(cfg, composed, choice: ModelChoice, output_dir: str | None,
                  own_init_from: bool = True) -> list[Change]:
    """Every change of one stage's config; `output_dir` None leaves train.output_dir to the caller (a pipeline)."""
    changes = [*model_changes(cfg, choice, own_init_from), *hardware_changes(cfg), *size_changes(cfg),
               *monitor_changes(cfg), *learning_rate_changes(cfg, composed)]
    if output_dir is not None:
        changes.append(Change("train.output_dir", cfg.train.output_dir, output_dir,
                              "a smoke run's own folder: the real run folder is never written", "run folder"))
    return changes


def as_layer(changes: list[Change]) -> Layer:
    """The changes as the last config layer (config.yaml names it as the source of each changed key)."""
    data: dict = {}
    for c in changes:
        node = data
        *parents, leaf = c.key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = c.now
    return Layer(LAYER_NAME, data)
