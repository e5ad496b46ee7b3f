"""`rlft train` (with `--smoke` and `--dry-run`): the config checked, then the stage run here or re-launched
under `accelerate launch` (rlft/launch/)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from rlft.commands.common import (FILES_OPT, HW_OPT, OVERRIDES_ARG, QUIET_OPT, SMOKE_HELP, STAGE_OPT, auto_hw, err,
                                  exits, load, no_flags_with_smoke, print_problems)


def train(stage: str = STAGE_OPT, hw: str = HW_OPT, config: Optional[List[Path]] = FILES_OPT,
          overrides: Optional[List[str]] = OVERRIDES_ARG,
          resume: bool = typer.Option(False, "--resume", help="Continue the run in train.output_dir from its newest "
                                                              "checkpoint."),
          overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing non-empty run folder (the old "
                                         "one is moved to <name>.old and deleted at the new run's first checkpoint; "
                                         "one holding files rlft did not write is moved to <name>.replaced-<time> "
                                         "and kept)."),
          allow_config_change: bool = typer.Option(False, "--allow-config-change",
                                                   help="With --resume: continue with a changed config (changed keys "
                                                        "are listed; shape-changing keys are still refused)."),
          verbose: bool = typer.Option(False, "--verbose", "-v", help="Show library logs and warnings."),
          smoke: bool = typer.Option(False, "--smoke", help=SMOKE_HELP),
          dry_run: bool = typer.Option(False, "--dry-run", help="Print the command(s) this would start for the "
                                       "resolved config and hardware (one `accelerate launch` line per machine) and "
                                       "exit, importing no torch; with a `slurm:` section, write "
                                       "<run folder>/launch.sbatch."),
          quiet: bool = QUIET_OPT) -> None:
    """Train a stage: compose + validate the config, then run the stage's TRL trainer with rlft's hooks."""
    if dry_run:
        _dry_run_train(stage, hw, config, overrides, resume=resume, overwrite=overwrite, smoke=smoke)
    from rlft.monitor.streams import protect_std_streams

    protect_std_streams()  # `rlft train ... | head`: a closed pipe must not stop training
    from rlft.stages import get_runner

    if hw == "auto":
        from rlft.launch.processes import detect_hw

        hw, why = detect_hw()
        err(f"rlft: --hw auto picked `{hw}`: {why}")
    if smoke:  # validated as given first (exit 2 on its errors), then run on the CPU
        no_flags_with_smoke(resume=resume, overwrite=overwrite, allow_config_change=allow_config_change)
        from rlft.smoke.run import smoke_train
        from rlft.smoke.validate import load_as_given

        with exits("config invalid: {errors}"):
            cfg, composed, warnings = load_as_given(stage, hw, list(config or []), list(overrides or []))
        print_problems(warnings)
        raise typer.Exit(smoke_train(stage, hw, list(config or []), list(overrides or []), cfg, composed, warnings,
                                     verbose))
    cfg, composed = load(stage, hw, config, overrides, for_train=True)
    with exits():
        runner = get_runner(stage)
    from rlft.launch.processes import needs_launch, preflight, relaunch

    problems = preflight(cfg, hw)
    for p in problems:
        err(f"error: {p}")
    if problems:
        raise typer.Exit(3)
    from rlft.rundir.options import RunOptions
    from rlft.rundir.prepare import check_writable

    opts = RunOptions(resume=resume, overwrite=overwrite, verbose=verbose, allow_config_change=allow_config_change,
                      argv=sys.argv[1:])
    # a ConfigError here: e.g. TRL rejected the settings while the stage built its trainer config
    with exits("config invalid: TRL rejected the settings", read_only=True):
        check_writable(Path(cfg.train.output_dir or "runs"))  # before minutes of loading, not after
        code = relaunch(cfg, composed, opts, hw, sys.argv[1:]) if needs_launch(cfg) else runner(cfg, composed, opts)
    raise typer.Exit(code or 0)


def _dry_run_train(stage: str, hw: str, config: Optional[List[Path]], overrides: Optional[List[str]], *, resume: bool,
                   overwrite: bool, smoke: bool) -> None:
    """`train --dry-run`: the config resolved and checked as `train` does it (exit 2 on an error), then the launch
    commands printed (and the SLURM script written), without torch: `--hw auto` is guessed as validate-config does."""
    if smoke:
        err("error: --dry-run does not go with --smoke: a smoke run is one CPU process that rlft starts itself")
        raise typer.Exit(2)
    hw = auto_hw(hw)
    cfg, _ = load(stage, hw, config, overrides, for_train=True)
    from rlft.launch.dry_run import dry_run
    from rlft.rundir.options import RunOptions

    with exits(read_only=True):
        plan = dry_run(cfg, RunOptions(resume=resume, overwrite=overwrite, argv=sys.argv[1:]), hw, sys.argv[1:])
    typer.echo(plan.text, nl=False)
    raise typer.Exit(0)
