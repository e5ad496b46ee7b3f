"""`rlft validate-config`, `show-config`, `list` and `keys`: the config checked and shown, the profiles and
keys listed; no torch."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from rlft.config.errors import Problem
from rlft.config.stages import HARDWARE, STAGES
from rlft.commands.common import FILES_OPT, HW_OPT, OVERRIDES_ARG, STAGE_OPT, auto_hw, err, exits, load, print_problems


def validate_config(stage: str = STAGE_OPT, hw: str = HW_OPT, config: Optional[List[Path]] = FILES_OPT,
                    overrides: Optional[List[str]] = OVERRIDES_ARG) -> None:
    """Check a config without importing torch: every problem at once, exit 2 if any."""
    hw = auto_hw(hw)
    cfg, composed = load(stage, hw, config, overrides)
    _memory_warning(cfg, composed, hw)
    rewards = ", ".join(r.name or r.fn for r in cfg.rewards) or "none"
    adapter = f"LoRA r={cfg.lora.r} alpha={cfg.lora.lora_alpha}" if cfg.lora.enabled else "full fine-tuning"
    precision = "bf16" if cfg.train.bf16 else "fp16" if cfg.train.fp16 else "fp32"
    typer.echo(f"config OK: stage {stage}, hw {hw} ({cfg.hw.device}, {precision}, {cfg.hw.num_processes} process"
               f"{'es' if cfg.hw.num_processes > 1 else ''}), model {cfg.model.name_or_path}, {adapter}, "
               f"lr {cfg.train.learning_rate:g}, data {cfg.data.train or 'unset'}, rewards: {rewards}; "
               f"{len(composed.layers)} layers")


def show_config(stage: str = STAGE_OPT, hw: str = HW_OPT, config: Optional[List[Path]] = FILES_OPT,
                overrides: Optional[List[str]] = OVERRIDES_ARG,
                explain: bool = typer.Option(False, "--explain", help="Name the layer that set each key.")) -> None:
    """Print the resolved config as YAML (with --explain: where each value came from)."""
    from rlft.config.render import describe_reference, explain_notes, render_yaml

    hw = auto_hw(hw)
    cfg, composed = load(stage, hw, config, overrides)
    typer.echo(render_yaml(cfg, composed if explain else None), nl=False)
    if explain:
        for note in explain_notes(cfg):
            typer.echo(note)
        typer.echo(f"# reference (model.ref={cfg.model.ref}): "
                   f"{describe_reference(cfg.model.ref, cfg.model.init_from, cfg.model.init_mode)}")


def _memory_warning(cfg, composed, hw: str) -> None:
    """validate-config names a planned peak above the device's memory (silent without the model's config.json).
    It warns on the plan `rlft plan` makes: with the training data's longest rows where they are readable here
    (a GRPO prompt as long as the data's longest plus grpo.max_tokens, not train.max_seq_length), else at the
    config's limits. The data's lengths are capped by the limits, so that plan never exceeds the one at the
    limits: the data is read (tokenizer, chat template) only when the limits' plan does not fit. A config.json
    that is there but damaged (a size that is not a whole number in range) skips the check with one warning
    naming file and field."""
    from rlft.plan import plan_for
    from rlft.plan.model_shape import DamagedConfig, ShapeError

    try:
        plan = plan_for(cfg, hw, from_data=False)  # cheap: no tokenizer, template or data read
        if plan.fits is False:
            plan = plan_for(cfg, hw)
    except DamagedConfig as exc:
        print_problems([Problem("model.name_or_path", composed.layer_of("model.name_or_path"),
                                 f"memory not planned: {exc}", level="warning")])
        return
    except ShapeError:
        return
    if plan.fits is False:
        from rlft.plan.advise import dominant

        top = ", ".join(f"{name} {share:.0%}" for name, share in dominant(plan))
        print_problems([Problem("hw.device_memory_gb", composed.layer_of("hw.device_memory_gb"),
                                 f"planned peak {plan.peak / 2**30:.1f} GiB per device does not fit in "
                                 f"{plan.device_bytes / 2**30:.1f} GiB {_basis(plan)} ({top}); `rlft plan` "
                                 f"with the same arguments shows every term, the peak of this data and what to "
                                 f"change first", level="warning")])


def _basis(plan) -> str:
    """The sequences the warning planned with, in words (as `rlft plan` words them)."""
    from rlft.plan.render import tokens_text

    if plan.data is None:
        return "at the config's limits"
    return f"for the longest rows of {plan.data.source} ({tokens_text(plan.tokens)})"


def list_profiles() -> None:
    """List stages, hardware profiles and example configs, one line each."""
    from rlft.config.compose import configs_dir, display_path
    from rlft.config.render import first_comment_line
    from rlft.config.stages import SPECS

    with exits():
        root = configs_dir()
    typer.echo("Stages (--stage):")
    for s in STAGES:
        tag = " [experimental]" if SPECS[s].experimental else ""
        typer.echo(f"  {s:<9}{first_comment_line(root / 'stages' / f'{s}.yaml')}{tag}")
    typer.echo("Hardware profiles (--hw):")
    for h in HARDWARE:
        typer.echo(f"  {h:<9}{first_comment_line(root / 'hw' / f'{h}.yaml')}")
    typer.echo("Example configs (-c):")
    for path in sorted((root / "examples").glob("*.yaml")):
        typer.echo(f"  {display_path(path)}: {first_comment_line(path)}")


def keys_cmd(prefix: str = typer.Argument("", help="Show the keys that start with this (e.g. grpo.kl); none: every "
                                                   "key.")) -> None:
    """List config keys from the schema: type, default, allowed values, the stages that read it, and help (no
    torch). An unknown prefix exits 2 with the closest keys."""
    from rlft.config.keys import all_keys, closest, describe, matching

    longest = max(len(k) for k in all_keys())
    if len(prefix) > longest:  # starts no key; difflib over every key would take minutes on a pasted file
        err(f"error: no config key starts with `{prefix[:40]}...` ({len(prefix):,} characters; the longest key "
            f"has {longest})")
        raise typer.Exit(2)
    found = matching(prefix)
    if not found:
        near = closest(prefix)
        err(f"error: no config key starts with `{prefix}`" + (f"; closest: {', '.join(near)}" if near else ""))
        raise typer.Exit(2)
    typer.echo("\n".join(describe(k) for k in found))
