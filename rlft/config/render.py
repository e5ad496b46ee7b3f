"""Human-facing views of a config: resolved YAML (optionally with each key's layer) and the
learning-rate schedule arithmetic a user should see before training starts."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml

from rlft.config.compose import Composed
from rlft.config.schema import RlftConfig, to_dict
from rlft.config.stages import get_spec


def _scalar(value) -> str:
    return yaml.safe_dump(value, default_flow_style=True,
                          width=1000).strip().removesuffix("\n...").removesuffix("...").strip()


def render_yaml(cfg: RlftConfig, composed: Composed | None = None) -> str:
    """YAML of the resolved config; with `composed`, each leaf carries `# <layer>`."""
    lines: list[str] = []

    def emit(data: dict, prefix: str, indent: int) -> None:
        for key, value in data.items():
            path = f"{prefix}{key}"
            pad = "  " * indent
            if isinstance(value, dict) and value and path != "trl" and not path.endswith("kwargs"):
                lines.append(f"{pad}{key}:")
                emit(value, path + ".", indent + 1)
                continue
            text = f"{pad}{key}: {_scalar(value)}"
            if composed is not None:
                text = f"{text:<60} # {composed.layer_of(path)}"
            lines.append(text)

    emit(to_dict(cfg), "", 0)
    return "\n".join(lines) + "\n"


def first_comment_line(path: Path) -> str:
    """The first sentence of a profile's opening comment: what the profile is for."""
    try:
        text = Path(path).read_text()
    except OSError:
        return ""
    comment = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        comment.append(line.lstrip("# ").strip())
    joined = " ".join(comment)
    return joined.split(": ", 1)[-1].split(". ")[0].rstrip(".") if joined else ""


def lr_schedule(num_samples: int, per_device_batch: int, grad_accum: int, epochs: float,
                warmup_ratio: float, num_processes: int = 1) -> tuple[int, int]:
    """The staged guide's arithmetic: total = samples / effective batch x epochs (rounded down);
    warmup = ratio x total (rounded down). 1000 samples, 1 x 16, 3 epochs: 187 steps, 18 warmup."""
    effective = per_device_batch * grad_accum * num_processes
    total = int(num_samples / effective * epochs)
    return total, int(total * warmup_ratio)


def trainer_schedule(num_samples: int, per_device_batch: int, grad_accum: int, epochs: float,
                     warmup_ratio: float, num_processes: int = 1) -> tuple[int, int]:
    """What transformers' Trainer runs for the same numbers: it counts each epoch's last, partial
    accumulation as a step and rounds warmup up (1000 samples, 1 x 16, 3 epochs: 189 steps, 19 warmup)."""
    batches = math.ceil(num_samples / (per_device_batch * num_processes))
    per_epoch = max(batches // grad_accum + int(batches % grad_accum > 0), 1)
    total = math.ceil(epochs * per_epoch)
    return total, math.ceil(total * warmup_ratio)


def schedule_summary(cfg: RlftConfig, num_samples: int | None = None) -> str:
    t = cfg.train
    effective = t.per_device_train_batch_size * t.gradient_accumulation_steps * cfg.hw.num_processes
    head = (f"# schedule: effective batch = {t.per_device_train_batch_size} x {t.gradient_accumulation_steps} "
            "accumulation"
            f" x {cfg.hw.num_processes} process(es) = {effective}")
    if t.max_steps > 0:
        warm = int(t.max_steps * t.warmup_ratio)
        return f"{head}; max_steps {t.max_steps}, warmup {warm} steps ({t.lr_scheduler_type})"
    if num_samples is None:
        num_samples = 1000
        head += "; e.g. for 1000 samples"
    sizes = (num_samples, t.per_device_train_batch_size, t.gradient_accumulation_steps, t.num_train_epochs,
             t.warmup_ratio, cfg.hw.num_processes)
    total, warm = lr_schedule(*sizes)
    text = (f"{head}: total_steps = {num_samples} / {effective} x {t.num_train_epochs:g} epochs = {total}, "
            f"warmup_steps = {t.warmup_ratio:g} x {total} = {warm} ({t.lr_scheduler_type})")
    run_total, run_warm = trainer_schedule(*sizes)
    if (run_total, run_warm) != (total, warm):
        text += f"; transformers rounds partial steps up and runs {run_total} steps, {run_warm} warmup"
    return text


def sampled_sft_schedule(cfg: RlftConfig, what: str) -> str:
    """RS-SFT / AWR: how rounds, sampling and the SFT schedule fit together (`what`: what the stage does with
    the scored samples, from its spec)."""
    s = getattr(cfg, get_spec(cfg.stage).section)
    evals = (f"; eval.start / eval.end: {cfg.data.eval_prompts} prompts x {s.num_samples_per_prompt} fresh samples"
             if cfg.data.eval_prompts else "")
    return (f"# {cfg.stage} rounds: {s.rounds} x (sample {s.num_samples_per_prompt} completions per prompt of "
            "data.train, "
            f"up to {s.max_tokens} tokens at temperature {s.temperature}, {s.generation_batch_size} per generate call; "
            f"{what}; then the SFT schedule above on them): train.max_steps / num_train_epochs apply to each "
            f"round{evals}")


def chat_template_note(cfg: RlftConfig) -> str:
    """What data.chat_template will do with this model, decided without loading it where a file says so."""
    import os

    mode, model = cfg.data.chat_template, cfg.model.name_or_path
    has = None
    if model == "tiny":
        has = True  # rlft's tiny tokenizer carries a ChatML template
    elif os.path.isdir(os.path.expanduser(model)):
        import json  # a local model's tokenizer_config.json: not for the default `tiny`

        folder = Path(os.path.expanduser(model))
        has = (folder / "chat_template.jinja").is_file() or (folder / "chat_template.json").is_file()
        try:
            has = has or bool(json.loads((folder / "tokenizer_config.json").read_text()).get("chat_template"))
        except (OSError, ValueError):
            pass
    what = {"auto": "plain-text prompts go through the tokenizer's chat template when it has one",
            "always": "plain-text prompts go through the tokenizer's chat template (an error if it has none)",
            "never": "plain-text prompts are used as they are (message lists are still templated)"}[mode]
    if mode == "never":
        verdict = ""
    elif has is None:
        verdict = f"; {model}: decided when its tokenizer loads"
    else:
        verdict = f"; {model}: {'has one, so it applies' if has else 'has none'}"
        if mode == "always" and not has:
            verdict += " (training will stop with an error)"
    return f"data.chat_template {mode}: {what}{verdict}"


def explain_notes(cfg: RlftConfig) -> list[str]:
    """The `show-config --explain` notes after the YAML, each a comment line: the schedule (the stage's own
    where it counts otherwise), the stage's notes, what the chat template does."""
    spec = get_spec(cfg.stage)
    notes = [spec.schedule(cfg) if spec.schedule else schedule_summary(cfg)]
    if spec.explain:
        notes += spec.explain(cfg)
    notes.append("# " + chat_template_note(cfg))
    return notes


def describe_reference(ref: Any, init_from: Any, init_mode: str) -> str:
    """What the reference weights are, in words (for `show-config --explain`)."""
    if ref in (None, "none", ""):
        return "no reference model"
    if ref == "init":
        if not init_from:
            return "`init` without model.init_from: the base model"
        return f"the model this stage starts from (run {init_from}, its adapter merged), frozen"
    if ref == "base":
        if init_from:
            return "the original base model, before any earlier stage's adapter, frozen"
        return "the base model (this run's adapter disabled), frozen"
    return f"the checkpoint {ref}, frozen"
