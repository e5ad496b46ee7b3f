"""The `rlft` command line. Heavy libraries (torch, transformers, TRL, PEFT, datasets, accelerate)
are imported only inside the commands that train or inspect the environment, so `--help`,
`validate-config`, `show-config` and `list` start in a fraction of a second."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from rlft.config import ConfigError, Problem, compose, configs_dir, validate
from rlft.config.schema import HARDWARE, STAGES

# one place for the exit codes: `rlft --help` prints them and the README lists the same
EXIT_CODES = (
    (0, "done"),
    (1, "internal error (a bug: please report it with `rlft env`)"),
    (2, "bad config or input (the message names the key, file and allowed values)"),
    (3, "hardware preflight failed (the profile does not fit this machine)"),
    (4, "stopped by a health rule or by reward failures (a checkpoint was written)"),
    (130, "interrupted by Ctrl-C or SIGTERM (a checkpoint was written; resume with --resume)"),
)
EPILOG = "Exit codes: " + "; ".join(f"{code} {what}" for code, what in EXIT_CODES) + "."

app = typer.Typer(
    name="rlft",
    help="RL fine-tuning of causal LMs from layered YAML profiles: GRPO, PPO, DPO, ORPO, RS-SFT, AWR.",
    epilog=EPILOG,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        from rlft import __version__

        typer.echo(f"rlft {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print rlft's version and exit.")) -> None:
    """RL fine-tuning of causal LMs from layered YAML profiles: GRPO, PPO, DPO, ORPO, RS-SFT, AWR."""

STAGE_OPT = typer.Option("grpo", "--stage", "-s", help=f"Stage profile: {', '.join(STAGES)}.")
HW_OPT = typer.Option("cpu", "--hw", help=f"Hardware profile: {', '.join(HARDWARE)}, or auto (picked from the GPUs visible here).")
FILES_OPT = typer.Option(None, "--config", "-c", help="Your YAML file(s), applied in order after the profiles.")
OVERRIDES_ARG = typer.Argument(None, help="KEY=VALUE overrides, applied last (e.g. train.learning_rate=1e-5).")


def _err(text: str) -> None:
    typer.echo(text, err=True)


def _print_problems(problems: list[Problem]) -> None:
    for p in problems:
        _err(str(p))


def _load(stage: str, hw: str, files: Optional[List[Path]], overrides: Optional[List[str]], *, for_train=False):
    """Compose + validate, turning ConfigError into printed problems and exit code 2."""
    try:
        composed = compose(stage, hw, files or [], overrides or [])
        cfg, warnings = validate(composed, for_train=for_train)
    except ConfigError as exc:
        _print_problems(exc.problems)
        n = sum(p.level == "error" for p in exc.problems)
        _err(f"config invalid: {n} error{'s' if n != 1 else ''}")
        raise typer.Exit(2)
    _print_problems(warnings)
    return cfg, composed


def _auto_hw(hw: str) -> str:
    """`--hw auto` for the config commands: the profile training would pick, found without torch."""
    if hw != "auto":
        return hw
    from rlft.launch import guess_hw

    hw, why = guess_hw()
    _err(f"rlft: --hw auto would pick `{hw}`: {why} (found without importing torch; `rlft train --hw auto` asks torch)")
    return hw


@app.command("validate-config")
def validate_config(stage: str = STAGE_OPT, hw: str = HW_OPT, config: Optional[List[Path]] = FILES_OPT,
                    overrides: Optional[List[str]] = OVERRIDES_ARG) -> None:
    """Check a config without importing torch: every problem at once, exit 2 if any."""
    hw = _auto_hw(hw)
    cfg, composed = _load(stage, hw, config, overrides)
    rewards = ", ".join(r.name or r.fn for r in cfg.rewards) or "none"
    adapter = f"LoRA r={cfg.lora.r} alpha={cfg.lora.lora_alpha}" if cfg.lora.enabled else "full fine-tuning"
    precision = "bf16" if cfg.train.bf16 else "fp16" if cfg.train.fp16 else "fp32"
    typer.echo(f"config OK: stage {stage}, hw {hw} ({cfg.hw.device}, {precision}, {cfg.hw.num_processes} process"
               f"{'es' if cfg.hw.num_processes > 1 else ''}), model {cfg.model.name_or_path}, {adapter}, "
               f"lr {cfg.train.learning_rate:g}, data {cfg.data.train or 'unset'}, rewards: {rewards}; "
               f"{len(composed.layers)} layers")


@app.command("show-config")
def show_config(stage: str = STAGE_OPT, hw: str = HW_OPT, config: Optional[List[Path]] = FILES_OPT,
                overrides: Optional[List[str]] = OVERRIDES_ARG,
                explain: bool = typer.Option(False, "--explain", help="Name the layer that set each key.")) -> None:
    """Print the resolved config as YAML (with --explain: where each value came from)."""
    from rlft.config.render import explain_notes, render_yaml

    hw = _auto_hw(hw)
    cfg, composed = _load(stage, hw, config, overrides)
    typer.echo(render_yaml(cfg, composed if explain else None), nl=False)
    if explain:
        for note in explain_notes(cfg):
            typer.echo(note)


@app.command("list")
def list_profiles() -> None:
    """List stages, hardware profiles and example configs, one line each."""
    from rlft.config.compose import display_path
    from rlft.config.render import first_comment_line
    from rlft.stages import EXPERIMENTAL, RUNNERS

    try:
        root = configs_dir()
    except ConfigError as exc:
        _print_problems(exc.problems)
        raise typer.Exit(2)
    typer.echo("Stages (--stage):")
    for s in STAGES:
        tags = [t for t, on in (("experimental", s in EXPERIMENTAL), ("not built yet", s not in RUNNERS)) if on]
        tag = f" [{', '.join(tags)}]" if tags else ""
        typer.echo(f"  {s:<9}{first_comment_line(root / 'stages' / f'{s}.yaml')}{tag}")
    typer.echo("Hardware profiles (--hw):")
    for h in HARDWARE:
        typer.echo(f"  {h:<9}{first_comment_line(root / 'hw' / f'{h}.yaml')}")
    typer.echo("Example configs (-c):")
    for path in sorted((root / "examples").glob("*.yaml")):
        typer.echo(f"  {display_path(path)}: {first_comment_line(path)}")


@app.command("env")
def env() -> None:
    """Versions and visible devices: paste this into a bug report."""
    from rlft.envinfo import collect_env

    for key, value in collect_env().items():
        typer.echo(f"{key + ':':<16}{value}")


@app.command("tiny-model")
def tiny_model(out_dir: Path = typer.Argument(..., help="Folder to write the model and tokenizer to."),
               init_std: float = typer.Option(None, help="Weight init std (default: rlft's learnable default).")) -> None:
    """Build rlft's tiny causal LM (offline) into OUT_DIR."""
    from rlft.tiny import build_tiny_model

    kwargs = {} if init_std is None else {"init_std": init_std}
    path = build_tiny_model(out_dir, **kwargs)
    typer.echo(f"tiny model written to {path}")


@app.command("train")
def train(stage: str = STAGE_OPT, hw: str = HW_OPT, config: Optional[List[Path]] = FILES_OPT,
          overrides: Optional[List[str]] = OVERRIDES_ARG,
          resume: bool = typer.Option(False, "--resume", help="Continue the run in train.output_dir from its newest checkpoint."),
          overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing non-empty run folder."),
          verbose: bool = typer.Option(False, "--verbose", "-v", help="Show library logs and warnings.")) -> None:
    """Train a stage: compose + validate the config, then run the stage's TRL trainer with rlft's hooks."""
    from rlft.stages import StageNotBuilt, get_runner

    if hw == "auto":
        from rlft.launch import detect_hw

        hw, why = detect_hw()
        _err(f"rlft: --hw auto picked `{hw}`: {why}")
    cfg, composed = _load(stage, hw, config, overrides, for_train=True)
    try:
        runner = get_runner(stage)
    except StageNotBuilt as exc:
        _err(f"error: {exc}")
        raise typer.Exit(2)
    from rlft.launch import needs_launch, preflight

    problems = preflight(cfg, hw)
    for p in problems:
        _err(f"error: {p}")
    if problems:
        raise typer.Exit(3)
    from rlft.models.loading import ModelLoadError
    from rlft.run import RunError, RunOptions, prepare_run_dir

    opts = RunOptions(resume=resume, overwrite=overwrite, verbose=verbose)
    try:
        if needs_launch(cfg):
            from rlft.launch import launch

            run = prepare_run_dir(cfg, composed, opts)  # once, before the processes start
            argv = [a for a in sys.argv[1:] if a != "--overwrite"]
            argv = _replace_hw(argv, hw) + [f"train.output_dir={run.root}"]
            raise typer.Exit(launch(cfg, argv))
        code = runner(cfg, composed, opts)
    except ConfigError as exc:  # e.g. TRL rejected the settings while the stage built its trainer config
        _print_problems(exc.problems)
        _err("config invalid: TRL rejected the settings")
        raise typer.Exit(2)
    except RunError as exc:
        _err(f"error: {exc}")
        raise typer.Exit(exc.exit_code)
    except ModelLoadError as exc:
        _err(f"error: {exc}")
        raise typer.Exit(2)
    raise typer.Exit(code or 0)


def _replace_hw(argv: list[str], hw: str) -> list[str]:
    out, skip = [], False
    for i, a in enumerate(argv):
        if skip:
            skip = False
            continue
        if a == "--hw":
            out += ["--hw", hw]
            skip = True
        elif a.startswith("--hw="):
            out.append(f"--hw={hw}")
        else:
            out.append(a)
    return out


def main() -> None:
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
